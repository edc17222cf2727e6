#!/usr/bin/env bash
# `npm test`: lints, type-checks and runs the fast layer first (`npm run test:unit`: no server, well under a
# minute), so that a broken build or workflow fails before any service starts; then brings the local stack up
# (installing what is missing), builds the services (`npm run build`: the suites that run the API and the worker
# as processes run the compiled ones) and runs every other jest suite against the real servers, on the pinned
# Node.js (scripts/node-env.sh). Extra arguments go to the second jest run (e.g. `npm test -- test/api`). The suites use their own database, Redis database, topic and
# namespace (test/support/environment.ts), never the user's. Ends with a plain "N passed, N failed" line for CI.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
bash scripts/services.sh tools
node_modules/.bin/eslint .
node_modules/.bin/tsc --noEmit -p .
bash scripts/test-unit.sh
# With the secured copy of the stack (TLS and credentials), which test/secure.test.ts runs an order through, the
# local Redis Cluster of test/cluster/, the real Temporal server of test/e2e/real-server.test.ts and the
# three-broker Kafka cluster of test/kafka/.
bash scripts/services.sh up --secure --cluster --temporal-server --kafka-cluster
npm run -s build
status=0
node_modules/.bin/jest --ci --json --outputFile=reports/jest.json "$@" || status=$?
node -e '
  const read = (f) => JSON.parse(require("fs").readFileSync(f, "utf8"));
  const runs = [read("reports/jest-unit.json"), read("reports/jest.json")];
  const sum = (k) => runs.reduce((n, r) => n + r[k], 0);
  const skipped = sum("numPendingTests") + sum("numTodoTests");
  console.log(`${sum("numPassedTests")} passed, ${sum("numFailedTests")} failed` + (skipped ? `, ${skipped} skipped` : ""));
  if (runs.some((r) => r.numTotalTests === 0) || skipped > 0) process.exit(1);
' || status=1
exit "$status"
