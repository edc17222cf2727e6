#!/usr/bin/env bash
# `npm run demo`: brings the local stack up (installing what is missing), builds the services, migrates, then runs
# a whole flash sale (tools/demo/main.ts; its options pass through, e.g. `npm run demo -- --buyers 20000`) with
# the API and the worker as compiled processes, on the pinned Node.js (scripts/node-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
# The demo signs its buyers' tokens with the development secret: a development run unless told otherwise.
export NODE_ENV=${NODE_ENV:-development}
bash scripts/services.sh up
npm run -s build
node dist/cli/migrate.js >/dev/null
exec node_modules/.bin/tsx tools/demo/main.ts "$@"
