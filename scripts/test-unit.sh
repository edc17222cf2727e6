#!/usr/bin/env bash
# `npm run test:unit`: the fast layer, with no service running — the pure logic and orderWorkflow with mocked
# activities on the time-skipping test server (jest.unit.config.js). `npm test` runs it first. Extra arguments
# go to jest.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
bash scripts/services.sh tools
mkdir -p reports
node_modules/.bin/jest --config jest.unit.config.js --ci --json --outputFile=reports/jest-unit.json "$@"
