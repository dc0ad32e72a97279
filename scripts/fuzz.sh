#!/usr/bin/env bash
# make fuzz: runs every libFuzzer harness of the sanitized build for
# FUZZ_TIME seconds (default 600), FUZZ_JOBS at a time (default 1).
#
#   scripts/fuzz.sh BUILD_SAN [HARNESS...]
#
# Each harness keeps a growing corpus in BUILD_SAN/fuzz/corpus/HARNESS (the
# seeds of test/fuzz/make_corpus.py and the regressions are read as well)
# and writes what it finds to BUILD_SAN/fuzz/findings/HARNESS/. One line per
# run is appended to BUILD_SAN/fuzz/runs.log: harness, seconds, executions,
# corpus size, findings. A finding's input belongs in
# test/fuzz/regressions/HARNESS/ once fixed.
set -uo pipefail
san=${1:?usage: fuzz.sh BUILD_SAN [HARNESS...]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
time=${FUZZ_TIME:-600}
jobs=${FUZZ_JOBS:-1}
fuzz=$san/fuzz
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  for b in "$san"/bin/fuzz-*; do harnesses+=("$(basename "$b" | sed 's/^fuzz-//')"); done
fi
# shellcheck source=/dev/null
. "$san/sanitizer-env.sh"
export CLEAVE_FUZZ_ASSETS=$fuzz/assets

run_one() {
  local h=$1 log
  mkdir -p "$fuzz/corpus/$h" "$fuzz/findings/$h"
  log=$fuzz/findings/$h/last-run.log
  local start=$SECONDS
  local dirs=("$fuzz/corpus/$h" "$fuzz/seeds/$h")
  if [ -d "$here/test/fuzz/regressions/$h" ]; then dirs+=("$here/test/fuzz/regressions/$h"); fi
  # -fork: a finding is saved and the run goes on (one worker: the cores are
  # the jobs').
  "$san/bin/fuzz-$h" -fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1 \
    -max_total_time="$time" -timeout=60 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$fuzz/findings/$h/" "${dirs[@]}" \
    >"$log" 2>&1
  local rc=$? execs found
  # Fork mode reports "#N ... exec/s" lines; the last N is the total.
  execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
  found=$(find "$fuzz/findings/$h" -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' | wc -l)
  printf '%s %-12s %6ds %10s execs %6d corpus %d findings rc=%d\n' "$(date -u +%FT%TZ)" \
    "$h" $((SECONDS - start)) "${execs:-?}" "$(ls "$fuzz/corpus/$h" | wc -l)" "$found" "$rc" \
    | tee -a "$fuzz/runs.log"
}

if [ ! -d "$fuzz/seeds" ]; then
  echo "fuzz: no seeds in $fuzz/seeds (make test, or test/fuzz/make_corpus.py)" >&2
  exit 1
fi
i=0
for h in "${harnesses[@]}"; do
  run_one "$h" &
  i=$((i + 1))
  if [ $((i % jobs)) -eq 0 ]; then wait; fi
done
wait
