#!/usr/bin/env bash
# Lists the MCP tools through the official MCP Inspector's CLI with --strict, once with an agent key
# and once with an admin key, on a stack of its own: the Inspector reports every tool-schema
# portability problem (path, issue, suggested fix) and exits non-zero if any is an error. The same
# server command as docs/api.md's client configuration (the compiled CLI, `mcp --stdio`).
#
#   scripts/mcp-inspector.sh        # prints the tools each key sees; exits with the Inspector's status
#
# Settings (environment): PORT (API, default 3400; the Temporal Web UI on PORT+1), INSPECTOR (the
# npm package spec, default @modelcontextprotocol/inspector@2.12.0), CHARGEGUARD_DATA_DIR (default
# .data/mcp-inspector, removed first). Needs the npm registry once (npm exec caches the package).
set -euo pipefail
cd "$(dirname "$0")/.."

port="${PORT:-3400}"
inspector="${INSPECTOR:-@modelcontextprotocol/inspector@2.12.0}"
data_dir="$(realpath -m "${CHARGEGUARD_DATA_DIR:-.data/mcp-inspector}")"
api="http://127.0.0.1:${port}"
startup_wait_s=300

rm -rf "$data_dir"
mkdir -p "$data_dir"
log="${data_dir}/start.log"
export CHARGEGUARD_DATA_DIR="$data_dir"

# node itself (not npx), so the signal below reaches the start command, which stops what it started.
node --import tsx src/cli/main.ts start --port "$port" --ui-port "$((port + 1))" > "$log" 2>&1 &
stack_pid=$!
stop_stack() {
  kill -INT "$stack_pid" 2> /dev/null || true
  wait "$stack_pid" 2> /dev/null || true
}
trap stop_stack EXIT

deadline=$((SECONDS + startup_wait_s))
until curl -sf "${api}/readyz" > /dev/null; do
  if ! kill -0 "$stack_pid" 2> /dev/null; then echo "the stack did not start:" >&2; tail -20 "$log" >&2; exit 1; fi
  if ((SECONDS > deadline)); then echo "not ready within ${startup_wait_s} s:" >&2; tail -20 "$log" >&2; exit 1; fi
  sleep 1
done
# The servers' addresses, as the banner prints them for other terminals.
eval "$(grep -E '^\s+export [A-Z_]+=' "$log" | sed 's/^\s*//')"

# The Inspector asks for Node 22.12 or later: Node 24 from the npm registry (as CI installs it).
node24_dir="$(bash scripts/install-node.sh 24 | tail -1)"

status=0
for role in agent admin; do
  key="$(node bin/chargeguard.mjs api-keys create --tenant mcp-inspector --role "$role" --label "mcp inspector ${role}" --json |
    node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).key))')"
  echo "tools/list --strict as an ${role} key:"
  PATH="${node24_dir}:${PATH}" npm exec --yes --package="$inspector" -- mcp-inspector --cli --strict --method tools/list \
    -e "TEMPORAL_ADDRESS=${TEMPORAL_ADDRESS}" -e "DATABASE_URL=${DATABASE_URL}" -e "PGPASSFILE=${PGPASSFILE}" \
    -e "CHARGEGUARD_PAYLOAD_KEYS_FILE=${CHARGEGUARD_PAYLOAD_KEYS_FILE}" -e "CHARGEGUARD_API_KEY=${key}" \
    -- node bin/chargeguard.mjs mcp --stdio > "${data_dir}/tools-${role}.json" || status=$?
  node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));console.log("  "+d.tools.map(t=>t.name).join(", "))' "${data_dir}/tools-${role}.json" || status=1
done
echo "MCP Inspector --strict: exit status ${status}"
exit "$status"
