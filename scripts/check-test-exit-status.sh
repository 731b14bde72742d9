#!/usr/bin/env bash
# Proves that the test command's exit status tells the truth: the suite's own vitest config, with its
# global setup (embedded PostgreSQL, the Temporal dev server, a worker), runs three fixtures:
#   passing       → must exit 0
#   failing       → must exit non-zero (a failed assertion)
#   broken-suite  → must exit non-zero (a suite that throws while loading runs no test)
# Prints one line per fixture and exits non-zero if any status was wrong.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
wrong=0
for fixture in passing failing broken-suite; do
  log=".data/exit-status-${fixture}.log"
  mkdir -p .data
  CHARGEGUARD_TEST_FIXTURE="${fixture}" npx vitest run --project dev --reporter=dot --outputFile.json=".data/exit-status-${fixture}.json" >"${log}" 2>&1
  status=$?
  if [[ "${fixture}" == "passing" ]]; then expected="0"; ok=$(( status == 0 )); else expected="non-zero"; ok=$(( status != 0 )); fi
  if (( ok )); then
    echo "exit status: ${fixture} fixture exited ${status} (expected ${expected}): ok"
  else
    echo "exit status: ${fixture} fixture exited ${status} (expected ${expected}): WRONG; its output (${log}):"
    tail -n 30 "${log}"
    wrong=1
  fi
done
exit "${wrong}"
