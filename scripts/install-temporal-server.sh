#!/usr/bin/env bash
# Installs the real Temporal server (the one `chargeguard start --cluster` runs against PostgreSQL)
# and its SQL schema tool into .tools/temporal-server, plus the PostgreSQL schema files they need.
#
# Why `go install`: as for the CLI (scripts/install-temporal-cli.sh), the Go module proxy is the
# one route to upstream source this project can count on. go.temporal.io/server v1.29.1 has no
# `replace` directive, so `go install module@version` builds it as released.
#
# Why v1.29.1: the server version the pinned Temporal CLI 1.5.1 embeds as its dev server, so the
# dev stack and the cluster stack run the same server code and the recorded workflow histories
# mean the same on both.
#
# What lands where (nothing at run time reads the Go module cache):
#   .tools/temporal-server/bin/temporal-server      the server (`start` runs all four services)
#   .tools/temporal-server/bin/temporal-sql-tool    setup-schema / update-schema
#   .tools/temporal-server/schema/postgresql/v12/{temporal,visibility}/versioned
#
# Env:
#   TEMPORAL_SERVER_INSTALL_SKIP  1: install nothing (a machine that only runs the dev stack).
#   GO                            go binary to use (default: `go` on PATH).
set -euo pipefail

readonly SERVER_MODULE="go.temporal.io/server"
readonly SERVER_VERSION="1.29.1"
readonly MIN_GO_MAJOR=1
readonly MIN_GO_MINOR=25

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_dir="${repo_root}/.tools"
install_dir="${tools_dir}/temporal-server"
bin_dir="${install_dir}/bin"
schema_dir="${install_dir}/schema/postgresql/v12"
server_bin="${bin_dir}/temporal-server"
sql_tool_bin="${bin_dir}/temporal-sql-tool"
go_bin="${GO:-go}"

log() { printf '[install-temporal-server] %s\n' "$*"; }
fail() { printf '[install-temporal-server] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ "${TEMPORAL_SERVER_INSTALL_SKIP:-0}" == "1" ]]; then
  log "TEMPORAL_SERVER_INSTALL_SKIP=1; not installing (the cluster stack and its tests need it)."
  exit 0
fi

# Both binaries print "<name> version 1.29.1" (urfave/cli's --version, stamped from the source).
installed_version() {
  "$1" --version 2>/dev/null | sed -n 's/^.* version \([^ ]*\).*/\1/p' | head -n1
}

schema_present() {
  [[ -d "${schema_dir}/temporal/versioned" && -d "${schema_dir}/visibility/versioned" ]]
}

if [[ -x "${server_bin}" && -x "${sql_tool_bin}" ]] && schema_present \
  && [[ "$(installed_version "${server_bin}" || true)" == "${SERVER_VERSION}" ]] \
  && [[ "$(installed_version "${sql_tool_bin}" || true)" == "${SERVER_VERSION}" ]]; then
  log "Temporal server ${SERVER_VERSION} already installed in ${install_dir}; skipping."
  exit 0
fi

# shellcheck source=lib/go-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-build.sh"
require_go "Temporal server ${SERVER_VERSION}" "${MIN_GO_MAJOR}" "${MIN_GO_MINOR}" "Install Go (or point GO at it); only the cluster stack needs the server, the dev stack does not (TEMPORAL_SERVER_INSTALL_SKIP=1 skips this)."
go_build_env

started_s=${SECONDS}
scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT
log "Building ${SERVER_MODULE} v${SERVER_VERSION} (cmd/server, cmd/tools/sql) through the Go module proxy."
log "A cold build downloads ~300 modules and compiles for 10-15 minutes on 2 cores; with warm Go caches it takes seconds."
# Static binaries as upstream releases them (CGO off: the sqlite plugin is pure Go). -s -w drops
# debug symbols (about a third of the size).
env "${go_env[@]}" CGO_ENABLED=0 GOBIN="${scratch}" "${go_bin}" install -ldflags "-s -w" \
  "${SERVER_MODULE}/cmd/server@v${SERVER_VERSION}" \
  "${SERVER_MODULE}/cmd/tools/sql@v${SERVER_VERSION}" \
  || fail "go install failed. Check that the Go module proxy is reachable (go env GOPROXY = $(GOTOOLCHAIN=local "${go_bin}" env GOPROXY))."

for built in "${scratch}/server" "${scratch}/sql"; do
  got="$(installed_version "${built}" || true)"
  [[ "${got}" == "${SERVER_VERSION}" ]] || fail "Built ${built}, but it reports version '${got:-unknown}' instead of ${SERVER_VERSION}."
done

# The schema files ship in the module; `go mod download -json` names its directory (already in the
# module cache after the build, so this is local).
module_dir="$(env "${go_env[@]}" "${go_bin}" mod download -json "${SERVER_MODULE}@v${SERVER_VERSION}" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' | head -n1)"
[[ -n "${module_dir}" && -d "${module_dir}/schema/postgresql/v12" ]] \
  || fail "Could not find schema/postgresql/v12 in the downloaded ${SERVER_MODULE}@v${SERVER_VERSION} (module dir '${module_dir}')."

# Assemble beside the target and swap in, so an interrupted install never leaves half a tree that
# the skip check above would accept.
staging="${install_dir}.partial"
rm -rf "${staging}"
mkdir -p "${staging}/bin" "${staging}/schema/postgresql/v12"
cp "${scratch}/server" "${staging}/bin/temporal-server"
cp "${scratch}/sql" "${staging}/bin/temporal-sql-tool"
for store in temporal visibility; do
  mkdir -p "${staging}/schema/postgresql/v12/${store}"
  cp -R "${module_dir}/schema/postgresql/v12/${store}/versioned" "${staging}/schema/postgresql/v12/${store}/versioned"
done
# The module cache is read-only; the copies must stay removable by `rm -rf .tools`.
chmod -R u+w "${staging}"
rm -rf "${install_dir}"
mv "${staging}" "${install_dir}"
log "Installed Temporal server ${SERVER_VERSION} and temporal-sql-tool in ${install_dir} in $(( SECONDS - started_s ))s."
