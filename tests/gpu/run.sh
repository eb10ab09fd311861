#!/bin/bash
# tests/gpu/run.sh: the one prepared session for a lent GPU (tests/gpu/README.md).
# At most MT_GPU_DEADLINE_S seconds (default 540: 9 minutes) from its start:
# each stage checks the time left first and is skipped, with a line saying
# so, when less is left than it needs; a stage that runs gets at most the
# time left less what the last tables and the packing need. After each stage
# the tables (tests/gpu/report.py) are printed first, then the end of the
# stage's log; the tables come again at the end. Everything goes into at most
# 8 files under $OUT (else $MT_GPU_WORK/out): session.log (all that this
# prints), table.txt, gpu_check.log, peers.log, runs.tar.xz (the runs'
# traces, metrics, plans' explanations, nvidia-smi samples, the profile, the
# stages' logs) and commit.txt. Exit status 0 when every stage ran and passed.
#
# The stages, most telling first: setup (the card's clocks, power and
# memory, read only), tiny_* (gpt2-tiny and llama-tiny on cuda and on cpu,
# the same losses: the cuda backend's paths), gpu_check (attention and the
# fused kernels against their references, attention's times, the bf16 GEMM
# rate on random operands, the MoE kernels' share), sdpa (PyTorch's
# attention on each backend at gpu_check's shapes), plans (mtrun
# --calibrate, the profile from this session's measurements, mtc for Llama
# 3.2 1B and 3B under a 16 GB cap), run_llama3.2-1b, megatrain (MegaTrain's
# code on Llama 3.2 1B at the same batch), run_llama3.2-3b.
#
# MT_GPU_PREBUILT=DIR  the build tests/gpu/prebuild.sh made (the lent machine
#                      cannot build mt: the documented path); without it, a
#                      machine that can build does so into build-gpu/ first
# MT_GPU_DRY=1         no GPU: each stage only says what it would run, and
#                      takes its planned seconds on a clock of its own (the
#                      suite's gpu_run_dry checks the deadline logic so)
# MT_GPU_MODELS        "MODEL:BATCH ..." (default llama3.2-1b:16 llama3.2-3b:16)
#   tests/gpu/run.sh
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
deadline=${MT_GPU_DEADLINE_S:-540}
reserve=15 # seconds kept for the last tables and the packing
dry=${MT_GPU_DRY:-0}
pre=${MT_GPU_PREBUILT:-}
work=${MT_GPU_WORK:-${TMPDIR:-/tmp}/mt-gpu-work}
out=${OUT:-$work/out}
rm -rf "$work/runs" "$work/logs" && mkdir -p "$work/runs" "$work/logs" "$out"
: >"$work/stages.tsv"
exec > >(tee "$out/session.log") 2>&1
teepid=$!
trap 'exec >&- 2>&-; wait $teepid' EXIT # session.log complete before the call returns

t0=$(date +%s)
fake=0 # the dry run's clock: seconds its stages have taken
now() { if [ "$dry" = 1 ]; then echo "$fake"; else echo $(($(date +%s) - t0)); fi; }
left() { echo $((deadline - $(now))); }
failed=""

tables() { python3 tests/gpu/report.py "$work"; }
pack() { # everything into $out, at most 8 files
  for f in gpu_check.log peers.log; do [ -f "$work/$f" ] && cp "$work/$f" "$out/$f"; done
  [ -f "$work/commit.txt" ] && cp "$work/commit.txt" "$out/commit.txt"
  tar -C "$work" --exclude='*.bin' --exclude='*.cu' -cf - runs logs stages.tsv \
    $(cd "$work" && ls card.txt calibrate.log profile.target 2>/dev/null) | xz -1 >"$out/runs.tar.xz" # no plans: 6 MB each
}

# stage NAME NEEDS CAP COMMAND...: runs COMMAND (a shell line) with its output
# in $work/logs/NAME.log, given at most min(CAP, time left - reserve) seconds;
# skipped when less than NEEDS is left. Then the tables, then the log's end.
stage() {
  local name=$1 needs=$2 cap=$3 cmd=$4 have st s0 limit
  have=$(($(left) - reserve))
  if [ "$have" -lt "$needs" ]; then
    echo "== $name: skipped: ${have} s left before the deadline, it needs $needs"
    printf '%s\tskipped\t0\t%s s left, needs %s\n' "$name" "$have" "$needs" >>"$work/stages.tsv"
    failed="$failed $name"
    return 1
  fi
  limit=$((cap < have ? cap : have))
  echo "== $name: (at most $limit s) $cmd"
  s0=$(now)
  if [ "$dry" = 1 ]; then
    echo "dry run: $cmd" >"$work/logs/$name.log"
    fake=$((fake + needs))
    st=ok
  elif timeout -k 5 "$limit" bash -c "set -o pipefail; $cmd" >"$work/logs/$name.log" 2>&1; then
    st=ok
  else
    st=$?
    [ "$st" = 124 ] || [ "$st" = 137 ] && st="timed out after $limit s" || st="FAILED (exit $st)"
    failed="$failed $name"
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$st" "$(($(now) - s0))" "" >>"$work/stages.tsv"
  tables
  echo "-- $name: the end of its log"
  tail -n 12 "$work/logs/$name.log"
  echo "== $name: $st in $(($(now) - s0)) s, $(left) s left"
  pack
  [ "$st" = ok ]
}

# ---------------------------------------------------------------- setup
if [ -n "$pre" ]; then
  bin=$(cd "$pre" && pwd)
  cp "$bin/commit.txt" "$work/commit.txt" 2>/dev/null || echo unknown >"$work/commit.txt"
  lib=$work/lib
  if [ "$dry" != 1 ]; then
    mkdir -p "$lib" && xz -dc "$bin/lib.tar.xz" | tar -C "$lib" -xf - || { echo "run.sh: cannot unpack $bin/lib.tar.xz"; exit 1; }
  fi
  # NCCL is not carried (218 MB): the image's nvidia-nccl wheel beside PyTorch has it
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  export LD_LIBRARY_PATH=$lib/lib:/usr/local/cuda/lib64${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  bin=${MT_GPU_BUILD:-$root/build-gpu}
  git rev-parse HEAD >"$work/commit.txt" 2>/dev/null || echo unknown >"$work/commit.txt"
  stage build 120 300 "cmake -S '$root' -B '$bin' -DCMAKE_BUILD_TYPE=Release -DMT_WERROR=ON -DMT_SANITIZERS=OFF \
    -DMT_FUZZ=OFF && cmake --build '$bin' -j$(nproc) --target mtc mtrun mt_cuda gpu_check" || exit 1
fi
echo "run.sh: binaries of commit $(cat "$work/commit.txt") in $bin; deadline $deadline s${pre:+; prebuilt}"
smi_q=clocks.sm,clocks.mem,power.draw,memory.used,utilization.gpu
if [ "$dry" != 1 ] && command -v nvidia-smi >/dev/null; then # the whole session, every second (reading only)
  nvidia-smi --query-gpu=timestamp,$smi_q,temperature.gpu --format=csv,noheader \
    -lms 1000 >"$work/logs/smi_session.csv" 2>/dev/null &
  smi_session=$!
  trap 'kill $smi_session 2>/dev/null; exec >&- 2>&-; wait $teepid' EXIT
fi
stage setup 3 30 "nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,\
power.draw,power.limit,temperature.gpu,memory.total,memory.used --format=csv | tee '$work/card.txt'; \
nproc; free -g | head -2"

# ---------------------------------------------------------------- the tiny examples, cuda against cpu
# first: the only GPU check of the cuda backend's paths (replay, copies, the host store), so the deadline
# never cuts them
for m in gpt2-tiny llama-tiny; do
  stage "tiny_$m" 30 90 "python3 tests/check_cuda_emu.py gpu '$bin/mtc' '$bin/mtrun' - - '$root' '$work/logs/train-$m' examples/$m.mt"
done

# ---------------------------------------------------------------- the card's kernels
# attention against its reference and timed (warmed, repeated: D 64, 128, 256, T 2048 to 16384), the
# tiny examples' fused kernels, the bf16 GEMM rate, cuMemGetInfo, the MoE kernels at Mixtral's layer
# and the streamed models' matrix products at their shapes (batch x 4096 tokens; the row-local ones in 4 or 8
# chunks, the --tile mtc picks at 16 GB; the plans are made later, on this machine's calibration)
gemms=$(for spec in ${MT_GPU_MODELS:-llama3.2-1b:16 llama3.2-3b:16}; do
  python3 tests/gpu/report.py --gemm-shapes "examples/${spec%%:*}.mt" $((${spec#*:} * 4096)) 4,8; done | tr '\n' ' ')
stage gpu_check 60 200 "'$bin/tests/gpu_check' $gemms examples/gpt2-tiny.mt examples/llama-tiny.mt | tee '$work/gpu_check.log'"
grep -h '^device memory:' "$work/gpu_check.log" >>"$work/card.txt" 2>/dev/null
# PyTorch's attention at the same shapes, each backend
stage sdpa 25 90 "python3 -u tests/gpu/sdpa_peer.py --device cuda --deadline 80 | tee -a '$work/peers.log'"

# ---------------------------------------------------------------- Llama 3.2 streamed
# a profile of this machine from this session's measurements (tests/gpu/profile.sh): h200's figures but for
# what gpu_check measured above (the cuBLAS bf16 rate on random operands; attention's and the MoE kernels'
# shares of it) and the host as mtrun --calibrate measures it (memory, cores, AdamW, the gradients' add),
# device memory capped at 16 GB; no prediction when a measured figure is missing
stage plans 30 90 "'$bin/mtrun' --calibrate --out '$work/host.target' | tee '$work/calibrate.log' && \
sh tests/gpu/profile.sh schedules/h200.target '$work/host.target' '$work/gpu_check.log' '$work/profile.target' && \
for spec in ${MT_GPU_MODELS:-llama3.2-1b:16 llama3.2-3b:16}; do m=\${spec%%:*}; b=\${spec#*:}; d='$work/runs/'\$m; \
mkdir -p \$d && cp examples/\$m.mt \$d/model.mt && '$bin/mtc' examples/\$m.mt --target '$work/profile.target' --batch \$b \
--seq 4096 --explain -o \$d/plan.bin --trace \$d/predicted.json >\$d/explain.txt 2>&1 || { cat \$d/explain.txt; exit 1; }; \
grep 'chosen' \$d/explain.txt; done"

# one streamed run: nvidia-smi sampled every 100 ms (reading only), mtrun's lines stamped with the seconds since launch
run_model() {
  local d=$work/runs/$1
  echo "nvidia-smi --query-gpu=$smi_q --format=csv,noheader,nounits -lms 100 >$d/smi.csv 2>/dev/null & smi=\$!; sleep 0.3; \
stdbuf -oL '$bin/mtrun' $d/plan.bin --device cuda --steps 4 --val-batches 0 --no-save --data examples/data/tinyshakespeare.txt \
--log $d/metrics.jsonl --trace $d/trace.json 2>&1 | python3 -u -c 'import sys, time
t0 = time.monotonic()
for l in sys.stdin: print(f\"{time.monotonic() - t0:.3f} {l}\", end=\"\")' | tee $d/mtrun.log; rc=\$?; kill \$smi; exit \$rc"
}
# each model, MegaTrain's code after the first (Llama 3.2 1B) at its batch
first=1
for spec in ${MT_GPU_MODELS:-llama3.2-1b:16 llama3.2-3b:16}; do
  m=${spec%%:*}
  stage "run_$m" $((first ? 40 : 60)) 150 "$(run_model "$m")"
  [ $first = 1 ] && stage megatrain 60 150 "[ -d '$bin/megatrain/infinity' ] || \
{ echo 'no MegaTrain in $bin (tests/gpu/prebuild.sh with MEGATRAIN_GIT)'; exit 1; }; python3 -u tests/gpu/megatrain_peer.py \
--megatrain '$bin/megatrain' --batch ${spec#*:} --seq 4096 --steps 4 | tee -a '$work/peers.log'"
  first=0
done


echo
echo "== the tables, at $(now) s of $deadline"
tables | tee "$out/table.txt"
pack
ls -l "$out"
if [ -n "$failed" ]; then echo "FAILED or skipped:$failed (logs in $out/runs.tar.xz)"; exit 1; fi
echo "ok (everything in $out)"
