#!/usr/bin/env bash
# `npm run demo`: brings the local stack up (installing what is missing), migrates, then runs a whole flash sale
# (tools/demo/main.ts; its options pass through, e.g. `npm run demo -- --buyers 20000`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/services.sh up
node_modules/.bin/tsx src/cli/migrate.ts >/dev/null
exec node_modules/.bin/tsx tools/demo/main.ts "$@"
