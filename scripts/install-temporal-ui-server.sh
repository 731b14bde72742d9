#!/usr/bin/env bash
# Installs the Temporal Web UI server (the UI `chargeguard start --cluster` runs beside the real
# Temporal server, which has none of its own) into .tools/temporal-ui-server/bin.
#
# Why `go install`: as for the CLI and the server (scripts/install-temporal-cli.sh,
# scripts/install-temporal-server.sh), the Go module proxy is the one route to upstream source
# this project can count on. github.com/temporalio/ui-server/v2 is the UI's Go server with the UI's
# built assets embedded in the module (ui/assets), so the build needs no Node toolchain of its own.
#
# Why v2.42.1: the UI version the pinned Temporal CLI 1.5.1 embeds (its go.mod requires
# github.com/temporalio/ui-server/v2 v2.42.1; `temporal --version` of the Go-built CLI says
# "UI 2.42.1"), so the dev shape's UI and the cluster shape's UI are the same UI.
#
# What lands where (nothing at run time reads the Go module cache):
#   .tools/temporal-ui-server/bin/temporal-ui-server
#
# Env:
#   TEMPORAL_UI_SERVER_INSTALL_SKIP  1: install nothing (a machine that only runs the dev stack).
#   GO                               go binary to use (default: `go` on PATH).
set -euo pipefail

readonly UI_MODULE="github.com/temporalio/ui-server/v2"
readonly UI_VERSION="2.42.1"
readonly MIN_GO_MAJOR=1
readonly MIN_GO_MINOR=25

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_dir="${repo_root}/.tools"
install_dir="${tools_dir}/temporal-ui-server"
ui_bin="${install_dir}/bin/temporal-ui-server"
go_bin="${GO:-go}"

log() { printf '[install-temporal-ui-server] %s\n' "$*"; }
fail() { printf '[install-temporal-ui-server] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ "${TEMPORAL_UI_SERVER_INSTALL_SKIP:-0}" == "1" ]]; then
  log "TEMPORAL_UI_SERVER_INSTALL_SKIP=1; not installing (start --cluster and its Web UI test need it)."
  exit 0
fi

# The binary prints "Temporal UI version 2.42.1" (urfave/cli's --version, from the module's source).
installed_version() {
  "$1" --version 2>/dev/null | sed -n 's/^.* version \([^ ]*\).*/\1/p' | head -n1
}

if [[ -x "${ui_bin}" && "$(installed_version "${ui_bin}" || true)" == "${UI_VERSION}" ]]; then
  log "Temporal UI server ${UI_VERSION} already installed at ${ui_bin}; skipping."
  exit 0
fi

# shellcheck source=lib/go-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-build.sh"
require_go "Temporal UI server ${UI_VERSION}" "${MIN_GO_MAJOR}" "${MIN_GO_MINOR}" "Install Go (or point GO at it); only start --cluster runs the UI server, the dev stack's UI is the CLI's (TEMPORAL_UI_SERVER_INSTALL_SKIP=1 skips this)."
go_build_env

started_s=${SECONDS}
scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT
log "Building ${UI_MODULE} v${UI_VERSION} (cmd/server) through the Go module proxy."
log "A cold build downloads ~60 modules (the UI's assets among them) and compiles in about a minute on 2 cores; with warm Go caches it takes seconds."
# A static binary (CGO off), debug symbols dropped (-s -w) as for the server.
env "${go_env[@]}" CGO_ENABLED=0 GOBIN="${scratch}" "${go_bin}" install -ldflags "-s -w" "${UI_MODULE}/cmd/server@v${UI_VERSION}" \
  || fail "go install failed. Check that the Go module proxy is reachable (go env GOPROXY = $(GOTOOLCHAIN=local "${go_bin}" env GOPROXY))."

got="$(installed_version "${scratch}/server" || true)"
[[ "${got}" == "${UI_VERSION}" ]] || fail "Built ${scratch}/server, but it reports version '${got:-unknown}' instead of ${UI_VERSION}."

# Swapped in whole, so an interrupted install never leaves a binary the skip check above would accept.
staging="${install_dir}.partial"
rm -rf "${staging}"
mkdir -p "${staging}/bin"
cp "${scratch}/server" "${staging}/bin/temporal-ui-server"
rm -rf "${install_dir}"
mv "${staging}" "${install_dir}"
log "Installed Temporal UI server ${UI_VERSION} at ${ui_bin} in $(( SECONDS - started_s ))s."
