#!/usr/bin/env bash
# Installs the browser the two Web UI tests drive (test/web-ui-codec.test.ts and
# test/cluster/web-ui-codec.test.ts): Debian's `chromium` package, at /usr/bin/chromium.
#
# Why Debian's package and not a browser that playwright downloads: the tests use playwright-core,
# which downloads nothing; a browser build fetched from a CDN of its own is one more place an
# install can fail, while the distribution's package comes through the same package manager as the
# rest of the machine, with its security updates.
#
# Runs as part of `npm test` (pretest) and `npm run setup`, so the README's two commands install
# everything the suite needs. When /usr/bin/chromium is there it does nothing (a fraction of a
# second). When it is missing it installs it with apt-get, which needs root and a Debian-based
# system; anywhere else it stops with a message naming what to install.
#
# Env:
#   CHROMIUM_INSTALL_SKIP  1: install nothing (the two Web UI tests then fail, naming the browser).
set -euo pipefail

readonly CHROMIUM_PATH="/usr/bin/chromium"
readonly PACKAGE="chromium"

log() { printf '[install-chromium] %s\n' "$*"; }
fail() { printf '[install-chromium] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ "${CHROMIUM_INSTALL_SKIP:-0}" == "1" ]]; then
  log "CHROMIUM_INSTALL_SKIP=1; not installing (the two Web UI tests need ${CHROMIUM_PATH})."
  exit 0
fi

if [[ -x "${CHROMIUM_PATH}" ]]; then
  log "chromium already installed at ${CHROMIUM_PATH} ($("${CHROMIUM_PATH}" --version 2>/dev/null || echo 'version unknown')); skipping."
  exit 0
fi

what_to_do="Install Debian's '${PACKAGE}' package (or any Chromium) so that ${CHROMIUM_PATH} exists (as root: apt-get update && apt-get install --no-install-recommends ${PACKAGE}), or set CHROMIUM_INSTALL_SKIP=1 to run without the two Web UI tests' browser (they then fail)."
command -v apt-get >/dev/null 2>&1 || fail "${CHROMIUM_PATH} is missing and this machine has no apt-get. ${what_to_do}"
[[ "$(id -u)" == "0" ]] || fail "${CHROMIUM_PATH} is missing and installing it needs root (this is uid $(id -u)). ${what_to_do}"

started_s=${SECONDS}
log "Installing Debian's ${PACKAGE} package (apt-get update + install; about a minute cold)."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || fail "apt-get update failed. ${what_to_do}"
update_s=$(( SECONDS - started_s ))
apt-get install -y -qq --no-install-recommends "${PACKAGE}" >/dev/null \
  || fail "apt-get install ${PACKAGE} failed. ${what_to_do}"
[[ -x "${CHROMIUM_PATH}" ]] || fail "apt-get installed ${PACKAGE}, but ${CHROMIUM_PATH} is not there. ${what_to_do}"
log "Installed $("${CHROMIUM_PATH}" --version 2>/dev/null || echo "${PACKAGE}") in $(( SECONDS - started_s ))s (apt-get update ${update_s}s)."
