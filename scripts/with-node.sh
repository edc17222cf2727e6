#!/usr/bin/env bash
# Runs a command on the project's pinned Node.js (scripts/node-env.sh), e.g. `bash scripts/with-node.sh node dist/api/main.js`.
set -euo pipefail
# shellcheck source=scripts/node-env.sh
source "$(dirname "$0")/node-env.sh"
exec "$@"
