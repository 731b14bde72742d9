#!/usr/bin/env bash
# Fuzzes the HTTP API against its own OpenAPI document with schemathesis (all checks), on a stack
# of its own seeded with what the document's examples name: the accounts payer and payee (USD, the
# payer funded), as docs/api.md's walk-through opens them, and an admin key for every route. The
# explicit-examples phase then creates charges, refunds and deposits; the other phases fuzz around them.
#
#   pip install schemathesis        # once (the command is `st`)
#   scripts/schemathesis.sh         # prints schemathesis's summary; exits with its status
#
# Settings (environment): PORT (API, default 3300; the Temporal Web UI on PORT+1), MAX_EXAMPLES per
# operation and phase (default 30), SPEC (another document to test the same app against, e.g. an
# older /openapi.json saved to a file), ST (the schemathesis command), CHARGEGUARD_DATA_DIR (default
# .data/schemathesis, removed first: every run starts from an empty ledger). Slow (minutes): not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."

port="${PORT:-3300}"
max_examples="${MAX_EXAMPLES:-30}"
st="${ST:-st}"
data_dir="$(realpath -m "${CHARGEGUARD_DATA_DIR:-.data/schemathesis}")"
api="http://127.0.0.1:${port}"
spec="${SPEC:-${api}/openapi.json}"
startup_wait_s=300

command -v "$st" > /dev/null || { echo "schemathesis not found: pip install schemathesis (or set ST)" >&2; exit 2; }
rm -rf "$data_dir"
mkdir -p "$data_dir"
log="${data_dir}/start.log"

# A fuzzer sends far more than an agent: limits high enough that the run tests behaviour, not the
# rate limiter (429 is documented, and test/api-rate-limits.test.ts covers it).
export CHARGEGUARD_DATA_DIR="$data_dir"
export RATE_LIMIT_KEY_PER_SECOND=100000 RATE_LIMIT_KEY_BURST=100000 RATE_LIMIT_TENANT_PER_SECOND=100000 RATE_LIMIT_TENANT_BURST=100000
export RATE_LIMIT_STRANGER_PER_SECOND=100000 RATE_LIMIT_STRANGER_BURST=100000 OPEN_HOLDS_KEY_MAX=100000 OPEN_HOLDS_TENANT_MAX=100000
export RATE_LIMIT_WEBHOOK_ADDRESS_PER_SECOND=100000 RATE_LIMIT_WEBHOOK_ADDRESS_BURST=100000
export RATE_LIMIT_HEALTH_PER_SECOND=100000 RATE_LIMIT_HEALTH_BURST=100000

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

admin_key="$(npx tsx src/cli/main.ts api-keys create --tenant schemathesis --role admin --label schemathesis --json |
  node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).key))')"
auth="Authorization: Bearer ${admin_key}"
json='Content-Type: application/json'
for account in payer payee; do
  curl -sf "${api}/v1/accounts" -H "$auth" -H "$json" -H "Idempotency-Key: open-${account}" -d "{\"id\": \"${account}\", \"currency\": \"USD\"}" > /dev/null
done
# Enough for every charge the run makes (each at most CHARGE_AMOUNT_MINOR_MAX would not fit: most are declined, which is a 2xx too).
curl -sf "${api}/v1/accounts/payer/deposits" -H "$auth" -H "$json" -H 'Idempotency-Key: seed-payer' -d '{"amount": 100000000000}' > /dev/null

# The charges the cancel and capture examples name: made with manual capture, as their descriptions say.
for key in order-1002 order-1003; do
  curl -sf "${api}/v1/charges" -H "$auth" -H "$json" -H "Idempotency-Key: ${key}" \
    -d "{\"order_id\": \"${key#order-}\", \"payer_account_id\": \"payer\", \"payee_account_id\": \"payee\", \"amount\": 2500, \"currency\": \"USD\", \"capture\": \"manual\"}" > /dev/null
done

# The seeded run's document: the served one, with the create-charge body narrowed to what this
# stack holds (payer pays payee, in USD; no payment provider is configured here) and the one-of
# headers to the key, so generated charges reach the workflow instead of stopping at "unknown
# account" or "neither/both headers" (400). Every other field (amounts, metadata, descriptions,
# keys) is fuzzed as the document states it.
if [ -z "${SPEC:-}" ]; then
  spec="${data_dir}/openapi.seeded.json"
  curl -sf "${api}/openapi.json" | node -e '
    let text = "";
    process.stdin.on("data", (d) => (text += d)).on("end", () => {
      const document = JSON.parse(text);
      const create = document.components.schemas.CreateChargeRequest;
      create.properties.payer_account_id = { ...create.properties.payer_account_id, enum: ["payer"] };
      create.properties.payee_account_id = { ...create.properties.payee_account_id, enum: ["payee"] };
      create.properties.currency = { ...create.properties.currency, enum: ["USD"] };
      create.oneOf = create.oneOf.filter((branch) => branch.required.includes("payer_account_id"));
      create.oneOf[0].properties.payer_account_id = create.properties.payer_account_id;
      // OpenAPI cannot say "one of these two headers" (the descriptions do; a fuzzer reads no
      // descriptions): the key alone, required, on the creates that take one.
      for (const [path, method] of [["/v1/charges", "post"], ["/v1/accounts/{id}/deposits", "post"]]) {
        const operation = document.paths[path][method];
        operation.parameters = operation.parameters.filter((p) => p.name !== "idempotency-token");
        for (const p of operation.parameters) if (p.name === "idempotency-key") p.required = true;
      }
      process.stdout.write(JSON.stringify(document));
    });
  ' > "$spec"
fi

status=0
# /mcp requires this Accept (its description says so; OpenAPI cannot declare Accept as a parameter); the other routes ignore it.
[ -f "$spec" ] && spec="$(realpath "$spec")"
# Run in the data dir: schemathesis keeps a cache of past failures (.schemathesis/) in its working
# directory and replays them first; each run starts without one, so runs compare.
(cd "$data_dir" && "$st" run "$spec" --url "$api" --checks all -H "$auth" -H "Accept: application/json, text/event-stream" \
  --max-examples "$max_examples" --workers 1 --report junit,har --report-dir "${data_dir}/report" --no-color) || status=$?

# What the money path saw: the answers to creates, from the run's HAR file.
node -e '
  const fs = require("node:fs");
  const dir = process.argv[1];
  const har = fs.readdirSync(dir).filter((f) => f.startsWith("har-")).map((f) => JSON.parse(fs.readFileSync(`${dir}/${f}`, "utf8")));
  const counts = {};
  for (const { log } of har) for (const { request, response } of log.entries) {
    const path = new URL(request.url).pathname.replace(/\/v1\/(charges|accounts)\/[^/]+/, "/v1/$1/{}").replace(/refunds\/[^/]+$/, "refunds/{}");
    const name = `${request.method} ${path}`;
    counts[name] ??= {};
    const status = String(response.status);
    counts[name][status] = (counts[name][status] ?? 0) + 1;
  }
  for (const name of Object.keys(counts).sort()) console.log(name.padEnd(42), JSON.stringify(counts[name]));
' "${data_dir}/report"
exit "$status"
