#!/usr/bin/env bash
# Runs one libFuzzer binary in the current directory and reports as a test:
# exit 0 when it ran its time out clean, else the fuzzer's own exit code.
# The fuzzer's output goes to fuzz.log; on a failure only what explains it
# is printed (the coverage lines are dropped, so a CI log cut to its first and
# last lines still shows the report), then each input it saved as base64:
#   base64 -d > crash && FUZZER crash       (with the same environment)
# reproduces it (inputs up to 6000 bytes; longer ones are named by sha1).
# usage: run_libfuzzer.sh FUZZER ARGS...   (artifacts are written to ./)
set -uo pipefail
"$@" -artifact_prefix=./ >fuzz.log 2>&1
rc=$?
if [ $rc -eq 0 ]; then
  grep -E '^(Done|stat::)' fuzz.log || true
  exit 0
fi
grep -vE '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|RELOAD)' fuzz.log | tail -n 120
for f in crash-* leak-* oom-* timeout-* slow-unit-*; do
  [ -f "$f" ] || continue
  if [ "$(wc -c <"$f")" -le 6000 ]; then
    echo "--- $f, $(wc -c <"$f") bytes, as base64:"
    base64 -w 120 "$f"
  else # too long for a CI log that keeps its ends
    echo "--- $f, $(wc -c <"$f") bytes (not printed: over 6000), sha1 $(sha1sum <"$f" | cut -c1-40)"
  fi
done
echo "run_libfuzzer.sh: the fuzzer failed (exit $rc)" >&2
exit $rc
