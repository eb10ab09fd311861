#!/bin/sh
# gpu_run_dry: tests/gpu/run.sh's stages and deadline without a GPU
# (MT_GPU_DRY=1: each stage takes its planned seconds on the script's own
# clock). At a 540 s deadline every stage runs and the exit status is 0; at
# 200 s the stages that no longer fit (the streamed runs: the tiny
# cuda-against-cpu stages run right after setup) are skipped, each with its line, the
# exit status is 1; both leave at most 8 files under $OUT, the tables after
# every stage and at the end. Then tests/gpu/profile.sh: the profile takes
# the session's measured figures, and refuses without one.
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
# the tiny cuda-against-cpu stages first, so a short session still runs them
printf 'setup\tok\ntiny_gpt2-tiny\tok\ntiny_llama-tiny\tok\ngpu_check\tok\nsdpa\tok\nplans\tok\nrun_llama3.2-1b\tskipped\nmegatrain\tskipped\nrun_llama3.2-3b\tskipped\n' >"$work/expected"
cut -f1,2 "$work/short/stages.tsv" | diff "$work/expected" - || fail "short: not the stages expected at a 200 s deadline"
grep -q '^== megatrain: skipped: 7 s left before the deadline, it needs 60$' "$work/short/out/session.log" ||
  fail "short: no line saying why megatrain was skipped"
tail -n 1 "$work/short/out/session.log" | grep -q '^FAILED or skipped: run_llama3.2-1b megatrain run_llama3.2-3b ' || fail "short: no closing line naming the skipped stages"
# the prediction's profile: this session's measurements, not h200.target's constants; none without them
printf 'host_memory = 1e12\nhost_memory_bandwidth = 4e11\nhost_cores = 16\nhost_adamw_bandwidth = 6e10\nhost_grads_add_bandwidth = 7e10\n' >"$work/host.target"
printf 'bf16 GEMM (cuBLAS, 8192^3): 788.0 TFLOP/s\n    matrix_flops_bf16 = 9.85e+14   # measured\n    attention_tc_fraction = 0.131   # measured\n    attention_tc_narrow_fraction = 0.117   # measured\n    moe_gemm_efficiency = 0.402   # measured\n' >"$work/gpu_check.log"
sh "$src/tests/gpu/profile.sh" "$src/schedules/h200.target" "$work/host.target" "$work/gpu_check.log" "$work/profile.target" >/dev/null ||
  fail "profile: refused the measured figures"
for kv in 'matrix_flops_bf16 = 9.85e+14' 'attention_tc_fraction = 0.131' 'attention_tc_narrow_fraction = 0.117' 'moe_gemm_efficiency = 0.402' \
  'host_grads_add_bandwidth = 7e10' 'host_cores = 16' 'device_memory = 16e9' 'hbm_bandwidth = 4.8e12'; do
  [ "$(grep -c "^${kv%% =*} *=" "$work/profile.target")" = 1 ] && grep -q "^$kv$" "$work/profile.target" ||
    fail "profile: not one '$kv' line"
done
grep -v moe_gemm "$work/gpu_check.log" >"$work/gpu_check_nomoe.log"
msg=$(sh "$src/tests/gpu/profile.sh" "$src/schedules/h200.target" "$work/host.target" "$work/gpu_check_nomoe.log" "$work/p2.target") &&
  fail "profile: made without a measured MoE share"
echo "$msg" | grep -q 'no moe_gemm_efficiency measured' || fail "profile: no line naming the missing figure: $msg"
echo "gpu_run_dry: 540 s: 9 stages, 10 tables; 200 s: the tiny stages ran first, 3 stages skipped with their lines; OUT within 8 files"
