#!/usr/bin/env bash
# `npm test`: brings the local stack up (installing what is missing), builds the services (`npm run build`: the
# suites that run the API and the worker as processes run the compiled ones), lints, type-checks and
# runs every jest suite against the real servers, on the pinned Node.js (scripts/node-env.sh). Extra arguments
# go to jest (e.g. `npm test -- test/api`). The suites use their own database, Redis database, topic and
# namespace (test/environment.ts), never the user's. Ends with a plain "N passed, N failed" line for CI.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
# With the secured copy of the stack (TLS and credentials), which test/secure.test.ts runs an order through, and
# the local Redis Cluster of test/cluster/.
bash scripts/services.sh up --secure --cluster
npm run -s build
node_modules/.bin/eslint .
node_modules/.bin/tsc --noEmit -p .
mkdir -p reports
status=0
node_modules/.bin/jest --ci --json --outputFile=reports/jest.json "$@" || status=$?
node -e '
  const r = JSON.parse(require("fs").readFileSync("reports/jest.json", "utf8"));
  const skipped = r.numPendingTests + r.numTodoTests;
  console.log(`${r.numPassedTests} passed, ${r.numFailedTests} failed` + (skipped ? `, ${skipped} skipped` : ""));
  if (r.numTotalTests === 0 || skipped > 0) process.exit(1);
' || status=1
exit "$status"
