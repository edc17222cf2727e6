#!/usr/bin/env bash
# `npm run bench [-- NAME...]`: brings the local stack up, builds the services and migrates, then runs the
# benchmarks in tools/bench/ (all but press, or the named ones: soldout, accept, drain, kafka, shards, orders, tracing, reconcile, press) one
# after the other on the pinned Node.js (scripts/node-env.sh). Each prints its figures beside a baseline from the same run and
# appends a line to reports/bench.jsonl (docs/performance.md). BENCH_ACCEPT_CLUSTER=1 runs accept on the local Redis Cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(soldout accept drain kafka shards orders tracing reconcile)
stack=()
for bench in "${benches[@]}"; do
  [ -f "tools/bench/$bench.ts" ] || { echo "no benchmark \"$bench\": soldout, accept, drain, kafka, shards, orders, tracing, reconcile or press" >&2; exit 2; }
  # The shards bench compares the single node with the local Redis Cluster.
  [ "$bench" != shards ] || stack=(--cluster)
  [ "$bench" != accept ] || [ "${BENCH_ACCEPT_CLUSTER:-}" != 1 ] || stack=(--cluster)
done
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
# The benches run the stack's development credentials: a development run unless told otherwise.
export NODE_ENV=${NODE_ENV:-development}
bash scripts/services.sh up "${stack[@]}"
npm run -s build
node dist/cli/migrate.js >/dev/null
for bench in "${benches[@]}"; do
  node_modules/.bin/tsx "tools/bench/$bench.ts"
done
