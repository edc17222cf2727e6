# The real Temporal server, sourced by scripts/services.sh (`up --temporal-server`): the frontend, history,
# matching and worker services as four processes on loopback ports TEMPORAL_SERVER_PORT..+3 (their Prometheus
# endpoints on +20..+23: the server's `action` counter among them), with PostgreSQL
# persistence and SQL visibility on the stack's PostgreSQL (databases temporal_server and
# temporal_server_visibility, role temporal), beside the dev server. A service runs on it with the settings in
# .local/temporal-server/server.env (`set -a; . .local/temporal-server/server.env`): TEMPORAL_PORT, and the
# services' Prometheus endpoints (TEMPORAL_SERVER_METRICS) for the benches.
#
# The binaries (server and temporal-sql-tool) are built from the Go module proxy, once per version, into
# TEMPORAL_SERVER_CACHE outside the clone: a clean clone on the same machine starts in seconds. The schema is
# the server's own, embedded in temporal-sql-tool. Its Web UI is Temporal's UI server (the dev server's UI serves
# only the dev server), built the same way into its own cache folder, on TEMPORAL_SERVER_UI_PORT.
# shellcheck shell=bash

TS_DIR=$LOCAL/temporal-server
TS_ENV=$TS_DIR/server.env
TS_BIN=$TEMPORAL_SERVER_CACHE/temporal-server-$TEMPORAL_SERVER_VERSION
TS_SERVICES=(frontend history matching worker)
TS_UI_BIN=$TEMPORAL_SERVER_CACHE/temporal-ui-$TEMPORAL_UI_VERSION
TS_ADDR=$HOST:$TEMPORAL_SERVER_PORT
TS_DB=temporal_server
TS_VISIBILITY_DB=temporal_server_visibility
TS_PG_USER=temporal
TS_PG_PASSWORD=temporal

ts_log() { printf '%s' "$LOGS/temporal-$1.log"; }
ts_pid() { pid_of "$TS_DIR/$1.pid" "start --service $1"; }
ts_ui_pid() { pid_of "$TS_DIR/ui.pid" "ui-server"; }
ts_port() { # SERVICE [membership|metrics]: the service's gRPC port (or its membership port, 10 above; its
  # Prometheus endpoint, 20 above)
  local i offset=0
  case ${2:-} in membership) offset=10 ;; metrics) offset=20 ;; esac
  for i in "${!TS_SERVICES[@]}"; do [[ ${TS_SERVICES[$i]} == "$1" ]] && break; done
  printf '%s' $((TEMPORAL_SERVER_PORT + i + offset))
}
ts_namespace_served() {
  "$TEMPORAL" operator search-attribute list --namespace "$TEMPORAL_NAMESPACE" --address "$TS_ADDR" >/dev/null 2>&1
}
ts_ready() {
  "$TEMPORAL" operator namespace describe --namespace "$TEMPORAL_NAMESPACE" --address "$TS_ADDR" >/dev/null 2>&1
}

# Go fetches the toolchain go.mod asks for (GOTOOLCHAIN=auto) and the modules, all from the module proxy.
ts_install() {
  [[ -x $TS_BIN/server && -x $TS_BIN/temporal-sql-tool ]] && return 0
  command -v go >/dev/null || die "Go is needed to build the Temporal server $TEMPORAL_SERVER_VERSION" "" "install Go (golang-go), then up --temporal-server again"
  log "building the Temporal server $TEMPORAL_SERVER_VERSION into $TS_BIN (once; about 5 minutes)"
  mkdir -p "$TS_BIN/.build"
  GOTOOLCHAIN=auto GOBIN=$TS_BIN/.build go install "go.temporal.io/server/cmd/server@v$TEMPORAL_SERVER_VERSION" \
    "go.temporal.io/server/cmd/tools/sql@v$TEMPORAL_SERVER_VERSION" >>"$LOGS/temporal-server-build.log" 2>&1 ||
    die "building the Temporal server failed" "$LOGS/temporal-server-build.log" "read the log; then up --temporal-server again"
  # Moved in only when both are built: an interrupted build leaves no half-made cache behind.
  mv "$TS_BIN/.build/sql" "$TS_BIN/temporal-sql-tool"
  mv "$TS_BIN/.build/server" "$TS_BIN/server"
  rmdir "$TS_BIN/.build"
}

# The UI is for operators, not for a sale: when it cannot be built or started, `up` says so and goes on.
ts_install_ui() {
  [[ -x $TS_UI_BIN/ui-server ]] && return 0
  command -v go >/dev/null || { log "WARNING: no Go to build Temporal's UI server; the real server runs without its UI"; return 1; }
  log "building Temporal's UI server $TEMPORAL_UI_VERSION into $TS_UI_BIN (once; about a minute)"
  mkdir -p "$TS_UI_BIN/.build"
  if ! GOTOOLCHAIN=auto GOBIN=$TS_UI_BIN/.build go install "github.com/temporalio/ui-server/v2/cmd/server@v$TEMPORAL_UI_VERSION" \
    >>"$LOGS/temporal-ui-build.log" 2>&1; then
    log "WARNING: building Temporal's UI server failed (log: $LOGS/temporal-ui-build.log); the real server runs without its UI"
    return 1
  fi
  mv "$TS_UI_BIN/.build/server" "$TS_UI_BIN/ui-server"
  rmdir "$TS_UI_BIN/.build"
}

ts_start_ui() {
  ts_ui_pid >/dev/null && return 0
  ts_install_ui || return 0
  port_open "$TEMPORAL_SERVER_UI_PORT" && { log "WARNING: port $TEMPORAL_SERVER_UI_PORT (TEMPORAL_SERVER_UI_PORT) is taken; the real server runs without its UI"; return 0; }
  setsid nohup nice -n "$TEMPORAL_NICE" "$TS_UI_BIN/ui-server" --root "$TS_DIR" --config ui --env flash-sale start \
    >>"$(ts_log ui)" 2>&1 </dev/null 9>&- &
  echo $! >"$TS_DIR/ui.pid"
}

# The role and both databases through the cluster's socket, then the server's schema at its version
# (setup-schema and update-schema are both idempotent).
ts_schema() {
  as_pg "$PG_BIN/psql" -X -q -h "$PG_SOCKET_DIR" -p "$PGPORT" -U "$PG_OS_USER" -d postgres -v ON_ERROR_STOP=1 \
    -v user="$TS_PG_USER" -v pass="$TS_PG_PASSWORD" -v db="$TS_DB" -v vdb="$TS_VISIBILITY_DB" >>"$(ts_log schema)" 2>&1 <<'SQL' ||
SELECT format('CREATE ROLE %I', :'user') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'user') \gexec
SELECT format('ALTER ROLE %I LOGIN PASSWORD %L', :'user', :'pass') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'user') WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db') \gexec
SELECT format('CREATE DATABASE %I OWNER %I', :'vdb', :'user') WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'vdb') \gexec
SQL
    die "creating role $TS_PG_USER and the Temporal server's databases failed" "$(ts_log schema)" "read the log; then up --temporal-server again"
  local db schema
  sql_tool() { "$TS_BIN/temporal-sql-tool" --plugin postgres12 --ep "$HOST" -p "$PGPORT" -u "$TS_PG_USER" --pw "$TS_PG_PASSWORD" --db "$@"; }
  for db in "$TS_DB:temporal" "$TS_VISIBILITY_DB:visibility"; do
    schema=postgresql/v12/${db#*:}
    { sql_tool "${db%%:*}" setup-schema -v 0.0 && sql_tool "${db%%:*}" update-schema --schema-name "$schema"; } >>"$(ts_log schema)" 2>&1 ||
      die "the Temporal server's schema ($schema) failed to apply" "$(ts_log schema)" "read the log; then up --temporal-server again"
  done
}

# One config file per service, alike but for the port of its Prometheus endpoint (the processes share a host).
ts_write_config() {
  mkdir -p "$TS_DIR"
  local service services="" own
  for service in "${TS_SERVICES[@]}"; do
    services+="  $service:
    rpc: { grpcPort: $(ts_port "$service"), membershipPort: $(ts_port "$service" membership), bindOnLocalHost: true }
"
  done
  for own in "${TS_SERVICES[@]}"; do
    cat >"$TS_DIR/$own.yaml" <<EOF
# Generated by scripts/services.sh from scripts/stack.env on every start; edits are overwritten.
log:
  stdout: true
  level: warn
persistence:
  defaultStore: default
  visibilityStore: visibility
  # Fixed when the database is made: the server refuses to start on a database made with another count.
  numHistoryShards: $TEMPORAL_SERVER_HISTORY_SHARDS
  datastores:
    default:
      sql: { pluginName: postgres12, databaseName: $TS_DB, connectAddr: "$HOST:$PGPORT", connectProtocol: tcp, user: $TS_PG_USER, password: $TS_PG_PASSWORD, maxConns: 20, maxIdleConns: 20, maxConnLifetime: 1h }
    visibility:
      sql: { pluginName: postgres12, databaseName: $TS_VISIBILITY_DB, connectAddr: "$HOST:$PGPORT", connectProtocol: tcp, user: $TS_PG_USER, password: $TS_PG_PASSWORD, maxConns: 10, maxIdleConns: 10, maxConnLifetime: 1h }
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: "$HOST"
  metrics:
    prometheus: { framework: tally, timerType: histogram, listenAddress: "$HOST:$(ts_port "$own" metrics)" }
services:
$services
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active: { enabled: true, initialFailoverVersion: 1, rpcName: frontend, rpcAddress: "$TS_ADDR" }
dcRedirectionPolicy:
  policy: noop
dynamicConfigClient:
  filepath: $TS_DIR/dynamicconfig.yaml
  pollInterval: 10s
EOF
  done
  mkdir -p "$TS_DIR/ui"
  cat >"$TS_DIR/ui/flash-sale.yaml" <<EOF
# Generated by scripts/services.sh from scripts/stack.env on every start; edits are overwritten.
temporalGrpcAddress: $TS_ADDR
host: $HOST
port: $TEMPORAL_SERVER_UI_PORT
enableUi: true
defaultNamespace: $TEMPORAL_NAMESPACE
EOF
  # The dev server's values where they matter to a sale (scripts/services.sh, temporal_start).
  cat >"$TS_DIR/dynamicconfig.yaml" <<'EOF'
# Generated by scripts/services.sh on every start; edits are overwritten.
frontend.namespaceCount:
  - value: 20000
EOF
}

ts_launch() { # SERVICE, unless it runs
  ts_pid "$1" >/dev/null && return 0
  require_free_port "temporal-$1" "$(ts_port "$1")" TEMPORAL_SERVER_PORT
  setsid nohup nice -n "$TEMPORAL_NICE" "$TS_BIN/server" --config-file "$TS_DIR/$1.yaml" --allow-no-auth \
    start --service "$1" >>"$(ts_log "$1")" 2>&1 </dev/null 9>&- &
  echo $! >"$TS_DIR/$1.pid"
}

ts_any_alive() {
  local service
  for service in "${TS_SERVICES[@]}"; do ts_pid "$service" >/dev/null && return 0; done
  return 1
}

ts_start() {
  ts_install
  ts_schema
  ts_write_config
  local service
  for service in "${TS_SERVICES[@]}"; do ts_launch "$service"; done
  # On a new database the services race to write the cluster's metadata, and a loser exits at once ("Failed to
  # apply cluster metadata"); once it is written, whichever exited starts again and finds it.
  if ! ts_metadata_written; then
    wait_for 60 ts_any_alive ts_metadata_written ||
      die "the Temporal server did not write its cluster metadata ($WAIT_FAILURE)" "$(ts_log frontend)" "read the logs; then up --temporal-server again"
    sleep 2
    for service in "${TS_SERVICES[@]}"; do ts_launch "$service"; done
  fi
  ts_start_ui
}

ts_metadata_written() {
  [[ $(as_pg "$PG_BIN/psql" -X -q -h "$PG_SOCKET_DIR" -p "$PGPORT" -U "$PG_OS_USER" -d "$TS_DB" -tAc \
    'SELECT count(*) FROM cluster_metadata_info' 2>/dev/null) =~ ^[1-9] ]]
}

ts_all_alive() {
  local service
  for service in "${TS_SERVICES[@]}"; do ts_pid "$service" >/dev/null || return 1; done
}

# The namespace and the search attributes, registered as on the dev server.
ts_wait() {
  wait_for 60 ts_all_alive "\"$TEMPORAL\" operator cluster health --address $TS_ADDR | grep -q SERVING" ||
    die "the Temporal server's frontend did not serve on $TS_ADDR ($WAIT_FAILURE)" "$(ts_log frontend)" \
      "read the logs (.local/logs/temporal-*.log); then down and up --temporal-server again"
  ts_ready || "$TEMPORAL" operator namespace create --namespace "$TEMPORAL_NAMESPACE" --address "$TS_ADDR" --retention 72h \
    >>"$(ts_log frontend)" 2>&1 || ts_ready ||
    die "registering namespace $TEMPORAL_NAMESPACE on the Temporal server failed" "$(ts_log frontend)" "read the log; then up --temporal-server again"
  # A namespace just registered reaches the frontend's namespace cache within seconds; until then calls on it
  # (listing its search attributes) answer "not found".
  wait_for 60 ts_all_alive ts_namespace_served ||
    die "the Temporal server did not serve namespace $TEMPORAL_NAMESPACE ($WAIT_FAILURE)" "$(ts_log frontend)" "read the logs; then down and up --temporal-server again"
  TEMPORAL_ADDR=$TS_ADDR TEMPORAL_LOG=$(ts_log frontend) temporal_search_attributes ||
    die "registering search attributes ($TEMPORAL_SEARCH_ATTRIBUTES) on the Temporal server failed" "$(ts_log frontend)" "read the log"
  ! ts_ui_pid >/dev/null || wait_for 30 ts_ui_pid "port_open $TEMPORAL_SERVER_UI_PORT" ||
    log "WARNING: Temporal's UI server did not listen on $HOST:$TEMPORAL_SERVER_UI_PORT ($WAIT_FAILURE; log: $(ts_log ui))"
  local service metrics=()
  for service in "${TS_SERVICES[@]}"; do metrics+=("$HOST:$(ts_port "$service" metrics)"); done
  # TEMPORAL_PORT points a process at it; the metrics endpoints are for the benches (no service reads them).
  printf 'TEMPORAL_PORT=%s\nTEMPORAL_SERVER_METRICS=%s\n' "$TEMPORAL_SERVER_PORT" "$(IFS=,; printf '%s' "${metrics[*]}")" >"$TS_ENV"
}

ts_stop() { # [SERVICE]: one service (or ui), or all four and the UI
  local service pid services=("$@")
  [[ $# -gt 0 ]] || services=("${TS_SERVICES[@]}" ui)
  for service in "${services[@]}"; do
    if [[ $service == ui ]]; then pid=$(ts_ui_pid) || continue; else pid=$(ts_pid "$service") || continue; fi
    stop_pid "temporal-$service" "$pid"
  done
}

ts_status_lines() {
  [[ -f $TS_ENV ]] || return 0
  local service pids="" rc=0
  for service in "${TS_SERVICES[@]}"; do
    if ts_pid "$service" >/dev/null; then pids+="$(ts_pid "$service") "; else line "temporal-$service" down "log $(rel "$(ts_log "$service")")"; rc=1; fi
  done
  # The UI's absence is shown, not failed: no sale needs it.
  ts_ui_pid >/dev/null && pids+="$(ts_ui_pid) " || line temporal-ui down "log $(rel "$(ts_log ui)")"
  report temporal-server "${pids% }" ts_ready "$TS_ADDR namespace $TEMPORAL_NAMESPACE, $TEMPORAL_SERVER_HISTORY_SHARDS history shards, PostgreSQL, ui http://$HOST:$TEMPORAL_SERVER_UI_PORT" "$(ts_log frontend)" || rc=1
  return "$rc"
}
