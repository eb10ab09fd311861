#!/bin/sh
# gpu_run_dry: tests/gpu/run.sh's stages and deadline without a GPU
# (MT_GPU_DRY=1: each stage takes its planned seconds on the script's own
# clock). At a 540 s deadline every stage runs and the exit status is 0; at
# 200 s the stages that no longer fit are skipped, each with its line, the
# exit status is 1; both leave at most 8 files under $OUT, the tables after
# every stage and at the end.
#   check_run_dry.sh SRC WORK
set -u
src=$1 work=$2
rm -rf "$work" && mkdir -p "$work/pre"
echo 0123abc >"$work/pre/commit.txt"
fail() { echo "gpu_run_dry: $*"; exit 1; }
run() { # DEADLINE NAME: run.sh dry, its exit status in $rc
  MT_GPU_DRY=1 MT_GPU_PREBUILT="$work/pre" MT_GPU_DEADLINE_S=$1 MT_GPU_WORK="$work/$2" OUT="$work/$2/out" \
    "$src/tests/gpu/run.sh" >"$work/$2.stdout" 2>&1
  rc=$?
  n=$(ls "$work/$2/out" | wc -l)
  [ "$n" -le 8 ] || fail "$2: $n files under OUT, more than 8"
  for f in session.log table.txt runs.tar.xz commit.txt; do [ -s "$work/$2/out/$f" ] || fail "$2: no $f under OUT"; done
  cmp -s "$work/$2.stdout" "$work/$2/out/session.log" || fail "$2: session.log is not what run.sh printed"
}
run 540 full
[ $rc = 0 ] || fail "full: exit status $rc, expected 0"
grep -q skipped "$work/full/stages.tsv" && fail "full: a stage was skipped at 540 s"
ran=$(grep -c '	ok	' "$work/full/stages.tsv")
[ "$ran" = 9 ] || fail "full: $ran stages ran, expected 9"
tables=$(grep -c '^== stages$' "$work/full/out/session.log")
[ "$tables" = 10 ] || fail "full: the tables printed $tables times, expected 10 (after each of 9 stages and at the end)"
tail -n 1 "$work/full/out/session.log" | grep -q '^ok' || fail "full: the session does not end with ok"
run 200 short
[ $rc = 1 ] || fail "short: exit status $rc, expected 1"
printf 'setup\tok\ngpu_check\tok\nsdpa\tok\nplans\tok\nrun_llama3.2-1b\tok\nmegatrain\tskipped\nrun_llama3.2-3b\tskipped\ntiny_gpt2-tiny\tskipped\ntiny_llama-tiny\tskipped\n' >"$work/expected"
cut -f1,2 "$work/short/stages.tsv" | diff "$work/expected" - || fail "short: not the stages expected at a 200 s deadline"
grep -q '^== megatrain: skipped: 27 s left before the deadline, it needs 60$' "$work/short/out/session.log" ||
  fail "short: no line saying why megatrain was skipped"
tail -n 1 "$work/short/out/session.log" | grep -q '^FAILED or skipped: megatrain run_llama3.2-3b tiny_gpt2-tiny tiny_llama-tiny ' || fail "short: no closing line naming the skipped stages"
echo "gpu_run_dry: 540 s: 9 stages, 10 tables; 200 s: 4 stages skipped with their lines; OUT within 8 files"
