#!/usr/bin/env bash
# Installs the official Temporal CLI (which embeds the Temporal dev server) into .tools/bin.
#
# Why `go install` instead of a release download: the only network this project can count on is
# the package registries, and the Go module proxy is one of them. The CLI is a Go module, so the
# proxy gives us the real upstream source, built locally.
#
# Why v1.5.1: it embeds Temporal server 1.29.1, and it is the newest tag whose go.mod has no
# `replace` directive (go install refuses modules that have one).
#
# Env:
#   TEMPORAL_CLI_PATH  use this binary instead; nothing is installed when it is executable.
#   GO                 go binary to use (default: `go` on PATH).
set -euo pipefail

readonly CLI_MODULE="github.com/temporalio/cli/cmd/temporal"
readonly CLI_VERSION="1.5.1"
readonly MIN_GO_MAJOR=1
readonly MIN_GO_MINOR=25

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_dir="${repo_root}/.tools"
bin_dir="${tools_dir}/bin"
target="${bin_dir}/temporal"
go_bin="${GO:-go}"

log() { printf '[install-temporal-cli] %s\n' "$*"; }
fail() { printf '[install-temporal-cli] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ -n "${TEMPORAL_CLI_PATH:-}" ]]; then
  if [[ -x "${TEMPORAL_CLI_PATH}" ]]; then
    log "TEMPORAL_CLI_PATH=${TEMPORAL_CLI_PATH} is executable; nothing to install."
    exit 0
  fi
  fail "TEMPORAL_CLI_PATH=${TEMPORAL_CLI_PATH} is not an executable file. Unset it to install the CLI into ${bin_dir}."
fi

installed_version() {
  # `temporal --version` prints e.g. "temporal version 1.5.1 (Server 1.29.1, UI 2.41.0)".
  "$1" --version 2>/dev/null | sed -n 's/^temporal version \([^ ]*\).*/\1/p' | head -n1
}

if [[ -x "${target}" ]]; then
  current="$(installed_version "${target}" || true)"
  if [[ "${current}" == "${CLI_VERSION}" ]]; then
    log "Temporal CLI ${CLI_VERSION} already installed at ${target}; skipping."
    exit 0
  fi
  log "Found ${target} reporting version '${current:-unknown}'; reinstalling ${CLI_VERSION}."
fi

command -v "${go_bin}" >/dev/null 2>&1 \
  || fail "Go ${MIN_GO_MAJOR}.${MIN_GO_MINOR}+ is required to build the Temporal CLI, but '${go_bin}' was not found on PATH. Install Go ${MIN_GO_MAJOR}.${MIN_GO_MINOR}+ (or put it on PATH / point GO at it), or set TEMPORAL_CLI_PATH to an existing temporal binary."

# GOTOOLCHAIN=local everywhere below: an older Go must fail here with a clear message rather than
# quietly try to fetch a newer toolchain.
go_version="$(GOTOOLCHAIN=local "${go_bin}" env GOVERSION)"   # e.g. go1.26.8, go1.25rc1
if [[ ! "${go_version}" =~ ^go([0-9]+)\.([0-9]+) ]]; then
  fail "Could not parse the Go version '${go_version}' reported by '${go_bin}'."
fi
go_major="${BASH_REMATCH[1]}"
go_minor="${BASH_REMATCH[2]}"
if (( go_major < MIN_GO_MAJOR || (go_major == MIN_GO_MAJOR && go_minor < MIN_GO_MINOR) )); then
  fail "Temporal CLI ${CLI_VERSION} needs Go >= ${MIN_GO_MAJOR}.${MIN_GO_MINOR}, but '${go_bin}' is ${go_version}. Install a newer Go, or set TEMPORAL_CLI_PATH to an existing temporal binary."
fi
log "Using ${go_version} ($(command -v "${go_bin}"))."

# Prefer the user's default Go caches so a rerun (or another checkout) reuses the compiled
# packages; fall back to project-local caches only when the defaults are not writable.
writable_dir() {
  local dir="$1"
  [[ -n "${dir}" && "${dir}" != "off" ]] || return 1
  mkdir -p "${dir}" 2>/dev/null || return 1
  [[ -w "${dir}" ]]
}
go_env=(GOTOOLCHAIN=local)
if ! writable_dir "$(GOTOOLCHAIN=local "${go_bin}" env GOMODCACHE)"; then
  log "Default GOMODCACHE is not writable; using ${tools_dir}/go."
  # -modcacherw: Go makes its module cache read-only, which would make `rm -rf .tools` fail.
  go_env+=("GOPATH=${tools_dir}/go" "GOMODCACHE=${tools_dir}/go/pkg/mod" "GOFLAGS=${GOFLAGS:-} -modcacherw")
fi
if ! writable_dir "$(GOTOOLCHAIN=local "${go_bin}" env GOCACHE)"; then
  log "Default GOCACHE is not writable; using ${tools_dir}/go-build-cache."
  go_env+=("GOCACHE=${tools_dir}/go-build-cache")
fi

mkdir -p "${bin_dir}"
log "Building ${CLI_MODULE}@v${CLI_VERSION} through the Go module proxy."
log "A cold build downloads ~160 modules and compiles for 6-8 minutes on 2 cores; with warm Go caches it takes seconds."
started_s=${SECONDS}
# Same build settings as upstream's release (.goreleaser.yml): a static binary, stripped, with the
# version stamped in. Without the -X, `temporal --version` says 0.0.0-DEV and the check above
# could never recognise an existing install.
env "${go_env[@]}" CGO_ENABLED=0 GOBIN="${bin_dir}" "${go_bin}" install \
  -ldflags "-s -w -X github.com/temporalio/cli/temporalcli.Version=${CLI_VERSION}" \
  "${CLI_MODULE}@v${CLI_VERSION}" \
  || fail "go install failed. Check that the Go module proxy is reachable (go env GOPROXY = $(GOTOOLCHAIN=local "${go_bin}" env GOPROXY))."

built_version="$(installed_version "${target}" || true)"
[[ "${built_version}" == "${CLI_VERSION}" ]] \
  || fail "Built ${target}, but it reports version '${built_version:-unknown}' instead of ${CLI_VERSION}."
log "Installed $("${target}" --version) at ${target} in $(( SECONDS - started_s ))s."
