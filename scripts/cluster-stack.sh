# The local Redis Cluster, sourced by scripts/services.sh (`up --cluster`): three masters and three replicas on
# loopback ports REDIS_CLUSTER_PORT..REDIS_CLUSTER_PORT+5, AOF with the stack's fsync policy, beside the single
# Redis. A service runs on it with REDIS_CLUSTER_NODES (docs/configuration.md); .local/cluster/cluster.env holds
# that setting (read by the cluster suites, usable as `set -a; . .local/cluster/cluster.env`).
#
# cluster-node-timeout is short (2 s) so that a killed master's replica takes over within seconds: the fault
# suites kill masters on purpose. A killed node that `up` starts again rejoins as its successor's replica.
# shellcheck shell=bash

CLUSTER_DIR=$LOCAL/cluster
CLUSTER_ENV=$CLUSTER_DIR/cluster.env
CLUSTER_NODE_TIMEOUT_MS=2000

cluster_ports() { seq "$REDIS_CLUSTER_PORT" $((REDIS_CLUSTER_PORT + 5)); }
cluster_node_pid() { pid_of "$CLUSTER_DIR/$1/redis.pid" redis-server; }
cluster_state_ok() { redis-cli -h "$HOST" -p "$REDIS_CLUSTER_PORT" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; }
# Every node answers, the cluster agrees on its slots, and every replica is in sync with its master: a node
# started again may still be rejoining, and a replica still syncing could not take over from its master.
cluster_ready() {
  local port replication
  for port in $(cluster_ports); do
    redis-cli -h "$HOST" -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
    replication=$(redis-cli -h "$HOST" -p "$port" info replication 2>/dev/null) || return 1
    if grep -q '^role:slave' <<<"$replication"; then
      grep -q '^master_link_status:up' <<<"$replication" && ! grep -q '^master_sync_in_progress:1' <<<"$replication" || return 1
    fi
  done
}
cluster_pids() {
  local port pid
  for port in $(cluster_ports); do pid=$(cluster_node_pid "$port") && printf '%s ' "$pid"; done
}

cluster_node_start() { # PORT
  local port=$1 dir=$CLUSTER_DIR/$1
  cluster_node_pid "$port" >/dev/null && return 0
  require_free_port "redis-cluster" "$port" REDIS_CLUSTER_PORT
  mkdir -p "$dir"
  # shellcheck disable=SC2094 # stdout catches what fails before redis opens its own log file
  redis-server --bind "$HOST" --port "$port" --dir "$dir" --daemonize yes --pidfile "$dir/redis.pid" \
    --logfile "$LOGS/redis-cluster-$port.log" --appendonly yes --appendfsync "$REDIS_APPENDFSYNC" \
    --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout "$CLUSTER_NODE_TIMEOUT_MS" \
    >>"$LOGS/redis-cluster-$port.log" 2>&1 9>&- ||
    die "redis-server (cluster node $port) failed to start" "$LOGS/redis-cluster-$port.log" "read the log, fix the cause, run up --cluster again"
}

cluster_start() {
  local port
  for port in $(cluster_ports); do cluster_node_start "$port"; done
}

cluster_wait() {
  local port nodes=()
  for port in $(cluster_ports); do
    wait_for 15 "cluster_node_pid $port" "[[ \$(redis-cli -h $HOST -p $port ping) == PONG ]]" ||
      die "cluster node $port did not answer PING ($WAIT_FAILURE)" "$LOGS/redis-cluster-$port.log" "read the log; then down and up --cluster again"
    nodes+=("$HOST:$port")
  done
  # A fresh set of nodes (no slot assigned anywhere) is made a cluster once; afterwards nodes.conf keeps it.
  if ! cluster_state_ok && redis-cli -h "$HOST" -p "$REDIS_CLUSTER_PORT" cluster info | grep -q '^cluster_slots_assigned:0'; then
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >>"$LOGS/redis-cluster-create.log" 2>&1 ||
      die "redis-cli --cluster create failed" "$LOGS/redis-cluster-create.log" "read the log; rm -rf .local/cluster and up --cluster again"
  fi
  wait_for 30 true cluster_ready ||
    die "the Redis Cluster is not ok on ports $REDIS_CLUSTER_PORT.. ($WAIT_FAILURE)" "$LOGS/redis-cluster-$REDIS_CLUSTER_PORT.log" "read the logs; then down and up --cluster again"
  printf 'REDIS_CLUSTER_NODES=%s\n' "$(IFS=,; printf '%s' "${nodes[*]}")" >"$CLUSTER_ENV"
}

cluster_stop() {
  local port pid
  for port in $(cluster_ports); do
    pid=$(cluster_node_pid "$port") || continue
    stop_pid "redis-cluster-$port" "$pid"
  done
}

cluster_status_lines() {
  [[ -d $CLUSTER_DIR ]] || return 0
  local pids masters
  pids=$(cluster_pids)
  masters=$(redis-cli -h "$HOST" -p "$REDIS_CLUSTER_PORT" cluster nodes 2>/dev/null | awk '$3 ~ /master/ && $3 !~ /fail/ && NF > 8' | wc -l)
  report redis-cluster "${pids% }" cluster_ready "$HOST:$REDIS_CLUSTER_PORT..$((REDIS_CLUSTER_PORT + 5)) $masters masters" "$LOGS/redis-cluster-$REDIS_CLUSTER_PORT.log"
}
