#!/bin/sh
# smoke.sh HARNESS FUZZ_DIR NAME REGRESSIONS SECONDS: every seed and every
# past finding through HARNESS once, then SECONDS of new inputs (a scratch
# corpus: make fuzz keeps the real one). Any crash, sanitizer report, leak,
# timeout or out-of-memory fails the test. The new inputs come from a fixed
# seed, so a test run explores the same inputs on every machine (as far as
# its speed allows in SECONDS): a change is judged, not the dice. Fresh
# exploration is make fuzz's job.
harness=$1 fuzz=$2 name=$3 regressions=$4 seconds=$5
scratch=$(mktemp -d)
mkdir -p "$scratch/corpus"
set -- "$scratch/corpus" "$fuzz/seeds/$name"
if [ -d "$regressions/$name" ]; then set -- "$@" "$regressions/$name"; fi
"$harness" -seed=1 -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 \
  -print_final_stats=1 -artifact_prefix="$scratch/" "$@" >"$scratch/log" 2>&1
rc=$?
grep -v '^INFO:\|^#[0-9]*.*\(NEW\|REDUCE\|pulse\)\|^\s*NEW_FUNC' "$scratch/log" | tail -n 60
if [ $rc -ne 0 ]; then
  echo "smoke: $name failed (exit $rc); the input is in $scratch" >&2
  exit 1
fi
rm -rf "$scratch"
