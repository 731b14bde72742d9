#!/usr/bin/env bash
# Installs stripe-mock, Stripe's own stateless mock of its API (generated from Stripe's OpenAPI
# spec), into .tools/bin. The provider tests run the Stripe connector against it to prove every call
# the connector makes is one Stripe's schema accepts (docs/providers.md).
#
# Why `go install`: stripe-mock is a Go module, and the Go module proxy is the one route to
# upstream source this project can count on (as for the Temporal CLI, scripts/install-temporal-cli.sh).
#
# Why v0.203.0: pinned so the schema the tests check against only changes when the pin does.
# Built from source, stripe-mock reports version "master" (its release tooling stamps the real one),
# so the build stamps the pinned version itself, and the skip check below can trust it.
#
# Env:
#   STRIPE_MOCK_INSTALL_SKIP  1: install nothing (the stripe-mock tests then fail with a clear message).
#   GO                        go binary to use (default: `go` on PATH).
set -euo pipefail

readonly MOCK_MODULE="github.com/stripe/stripe-mock"
readonly MOCK_VERSION="0.203.0"
readonly MIN_GO_MAJOR=1
readonly MIN_GO_MINOR=22

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_dir="${repo_root}/.tools"
bin_dir="${tools_dir}/bin"
target="${bin_dir}/stripe-mock"
go_bin="${GO:-go}"

log() { printf '[install-stripe-mock] %s\n' "$*"; }
fail() { printf '[install-stripe-mock] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ "${STRIPE_MOCK_INSTALL_SKIP:-0}" == "1" ]]; then
  log "STRIPE_MOCK_INSTALL_SKIP=1; not installing (the stripe-mock provider tests need it)."
  exit 0
fi

installed_version() {
  # `stripe-mock -version` prints "stripe-mock <version>".
  "$1" -version 2>/dev/null | sed -n 's/^stripe-mock v\{0,1\}\([^ ]*\).*/\1/p' | head -n1
}

if [[ -x "${target}" ]]; then
  current="$(installed_version "${target}" || true)"
  if [[ "${current}" == "${MOCK_VERSION}" ]]; then
    log "stripe-mock ${MOCK_VERSION} already installed at ${target}; skipping."
    exit 0
  fi
  log "Found ${target} reporting version '${current:-unknown}'; reinstalling ${MOCK_VERSION}."
fi

# shellcheck source=lib/go-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-build.sh"
require_go "stripe-mock ${MOCK_VERSION}" "${MIN_GO_MAJOR}" "${MIN_GO_MINOR}" "Install Go (or point GO at it)."
go_build_env

started_s=${SECONDS}
scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT
log "Building ${MOCK_MODULE} v${MOCK_VERSION} through the Go module proxy (a cold build takes a minute or two)."
# GOBIN points at a scratch folder so an interrupted build never leaves a binary the skip check
# would accept; -X stamps the version the release tooling would have stamped.
env "${go_env[@]}" CGO_ENABLED=0 GOBIN="${scratch}" "${go_bin}" install \
  -ldflags "-s -w -X main.version=v${MOCK_VERSION}" \
  "${MOCK_MODULE}@v${MOCK_VERSION}" \
  || fail "go install failed. Check that the Go module proxy is reachable (go env GOPROXY = $(GOTOOLCHAIN=local "${go_bin}" env GOPROXY))."

got="$(installed_version "${scratch}/stripe-mock" || true)"
[[ "${got}" == "${MOCK_VERSION}" ]] || fail "Built stripe-mock, but it reports version '${got:-unknown}' instead of ${MOCK_VERSION}."

mkdir -p "${bin_dir}"
# mv within one file system is atomic: a concurrent reader sees the old binary or the new one.
cp "${scratch}/stripe-mock" "${bin_dir}/.stripe-mock.partial"
mv "${bin_dir}/.stripe-mock.partial" "${target}"
log "Installed stripe-mock ${MOCK_VERSION} at ${target} in $(( SECONDS - started_s ))s."
