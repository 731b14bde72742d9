# Shared by the installers that build a Go module through the Go module proxy (the Temporal CLI and
# server, stripe-mock). Sourced, not run: the caller defines log and fail and sets go_bin and
# tools_dir first.

# require_go WHAT MIN_MAJOR MIN_MINOR HINT: fails (naming WHAT and HINT) unless go_bin is a Go of at
# least that version; sets go_version.
require_go() {
  local what="$1" min_major="$2" min_minor="$3" hint="$4"
  command -v "${go_bin}" >/dev/null 2>&1 \
    || fail "Go ${min_major}.${min_minor}+ is required to build ${what}, but '${go_bin}' was not found on PATH. ${hint}"
  # GOTOOLCHAIN=local: an older Go must fail here with a clear message, not fetch a toolchain.
  go_version="$(GOTOOLCHAIN=local "${go_bin}" env GOVERSION)"   # e.g. go1.26.8, go1.25rc1
  if [[ ! "${go_version}" =~ ^go([0-9]+)\.([0-9]+) ]]; then
    fail "Could not parse the Go version '${go_version}' reported by '${go_bin}'."
  fi
  local major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
  if (( major < min_major || (major == min_major && minor < min_minor) )); then
    fail "${what} needs Go >= ${min_major}.${min_minor}, but '${go_bin}' is ${go_version}. ${hint}"
  fi
  log "Using ${go_version} ($(command -v "${go_bin}"))."
}

go_writable_dir() {
  local dir="$1"
  [[ -n "${dir}" && "${dir}" != "off" ]] || return 1
  mkdir -p "${dir}" 2>/dev/null || return 1
  [[ -w "${dir}" ]]
}

# go_build_env: sets the go_env array. The user's default Go caches when writable (shared between
# the builds, which compile many of the same packages), project-local ones under tools_dir otherwise.
go_build_env() {
  go_env=(GOTOOLCHAIN=local)
  if ! go_writable_dir "$(GOTOOLCHAIN=local "${go_bin}" env GOMODCACHE)"; then
    log "Default GOMODCACHE is not writable; using ${tools_dir}/go."
    # -modcacherw: Go makes its module cache read-only, which would make `rm -rf .tools` fail.
    go_env+=("GOPATH=${tools_dir}/go" "GOMODCACHE=${tools_dir}/go/pkg/mod" "GOFLAGS=${GOFLAGS:-} -modcacherw")
  fi
  if ! go_writable_dir "$(GOTOOLCHAIN=local "${go_bin}" env GOCACHE)"; then
    log "Default GOCACHE is not writable; using ${tools_dir}/go-build-cache."
    go_env+=("GOCACHE=${tools_dir}/go-build-cache")
  fi
}
