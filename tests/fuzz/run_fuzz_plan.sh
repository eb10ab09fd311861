#!/usr/bin/env bash
# Runs the plan reader's fuzzer for a bounded time. test_plan writes the
# seed plans (the tiny examples, each scheduled for h200, streamed with
# offload and with selective recomputation on tiny-1layer, and laid out by
# hand with every instruction kind and kernel blob: eight plans, the most
# fuzz_plan takes); they are both the corpus of whole files and the plans the
# fuzzer patches (MT_FUZZ_PLAN_SEED, see fuzz_plan.c), with one small patch
# per section to start from, and the inputs that once failed (plan-found/,
# each run again first). Fails on any crash, leak, overflow or UB.
# usage: run_fuzz_plan.sh FUZZER TEST_PLAN SOURCE_DIR WORK_DIR SECONDS
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
fuzzer=$1 test_plan=$2 src=$3 work=$4 seconds=$5
rm -rf "$work"
mkdir -p "$work/corpus"
if ! (cd "$src" && "$test_plan" "$work/seeds" examples/gpt2-tiny.mt examples/llama-tiny.mt) >"$work/seeds.log" 2>&1; then
  cat "$work/seeds.log"
  echo "run_fuzz_plan.sh: test_plan could not write the seed plans" >&2
  exit 1
fi
cp "$work"/seeds/*.plan "$src"/tests/fuzz/plan-found/* "$work/corpus/"
for s in 0 1 2 3 4 5 6; do # section s, seed s, offset 16, two bytes
  printf "\\x0$s\\x0$s\\x10\\x00\\x00\\x00\\xff\\x7f" >"$work/corpus/patch-$s"
done
cd "$work"
seeds=
for m in gpt2-tiny llama-tiny; do
  for v in "" -offload -selective -by-hand; do
    seeds="$seeds${seeds:+:}$work/seeds/$m$v.plan"
  done
done
MT_FUZZ_PLAN_SEED="$seeds" \
  "$here/run_libfuzzer.sh" "$fuzzer" -max_total_time="$seconds" -max_len=32768 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 corpus
