#!/bin/sh
# tests/gpu/run.sh: the one script for a machine with a GPU (tests/gpu/README.md).
# Builds mt, runs the NVRTC tests and gpu_check (flash attention and the fused
# kernels against plain references on the device, with times, and the bf16
# GEMM rate), trains both tiny examples on cuda and on cpu (f32 and bf16) and
# compares the losses, then trains llama3.2-1b and llama3.2-3b a few steps
# with plans compiled for a 16 GB device cap, so that they stream, and prints
# the table of measured against predicted last (tests/gpu/report.py). About
# 6 minutes on one H200. Logs, traces and the table go to $OUT when set
# (else build-gpu/out). Exit status 0 when every stage passed.
# MT_GPU_PREBUILT=DIR: a machine that cannot build mt (no flex, bison, LLVM
# or OpenBLAS, and nothing to install them from) takes the build
# tests/gpu/prebuild.sh made elsewhere: the binaries in DIR, the libraries
# they load packed in DIR/lib.tar.xz. The build and the NVRTC stage (which
# the ordinary suite runs with no GPU) are skipped then.
#   tests/gpu/run.sh
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${MT_GPU_BUILD:-$root/build-gpu}
pre=${MT_GPU_PREBUILT:-}
[ -z "$pre" ] || build=$(cd "$pre" && pwd)
out=${OUT:-$build/out}
jobs=$(nproc 2>/dev/null || echo 4)
cd "$root"
mkdir -p "$out"
failed=""
stage() { # stage NAME COMMAND...: runs it, its output into $out/NAME.log and here
    name=$1
    shift
    echo "== $name: $*"
    t0=$(date +%s)
    if "$@" >"$out/$name.log" 2>&1; then st=ok; else st="FAILED (exit $?)"; failed="$failed $name"; fi
    tail -n 25 "$out/$name.log"
    echo "== $name: $st in $(($(date +%s) - t0)) s"
}

command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "run.sh: nvidia-smi not found; trying the driver anyway"
if [ -n "$pre" ]; then
  tee "$out/commit.txt" <"$build/commit.txt"
  lib=${TMPDIR:-/tmp}/mt-gpu-lib
  mkdir -p "$lib" && xz -dc "$build/lib.tar.xz" | tar -C "$lib" -xf - || { echo "run.sh: cannot unpack $build/lib.tar.xz"; exit 1; }
  LD_LIBRARY_PATH=$lib/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LD_LIBRARY_PATH
  echo "== build: prebuilt in $build (tests/gpu/prebuild.sh); the NVRTC stage is the ordinary suite's"
else
  git -C "$root" rev-parse HEAD 2>/dev/null | tee "$out/commit.txt"
  stage build sh -c "cmake -S '$root' -B '$build' -DCMAKE_BUILD_TYPE=Release -DMT_WERROR=ON -DMT_SANITIZERS=OFF -DMT_FUZZ=OFF \
    && cmake --build '$build' -j$jobs --target mtc mtrun mt_cuda test_cuda gpu_check"
  [ -z "$failed" ] || { echo "run.sh: the build failed ($out/build.log)"; exit 1; }
  # every example's kernels compile for sm_80 and sm_90 (no GPU needed; the ordinary suite runs these too)
  stage nvrtc ctest --test-dir "$build" -R '^cuda_(emitter|nvrtc_)' -j"$jobs" --output-on-failure
fi
# flash attention and the tiny examples' fused kernels on the device; the bf16 GEMM rate
stage gpu_check timeout 300 "$build/tests/gpu_check" examples/gpt2-tiny.mt examples/llama-tiny.mt
gemm=$(sed -n 's/^bf16 GEMM (cuBLAS, 8192^3): \([0-9.]*\) TFLOP\/s/\1/p' "$out/gpu_check.log" | head -n 1)

# the tiny examples on cuda and on cpu, f32 and bf16 (remat layer and offload): the same losses
for m in gpt2-tiny llama-tiny; do
  stage "train_$m" timeout 300 python3 tests/check_cuda_emu.py gpu "$build/mtc" "$build/mtrun" - - "$root" \
    "$out/train-$m" "examples/$m.mt"
done

# Llama 3.2 1B and 3B streamed: a profile of this machine (h200's GPU, the
# host as mtrun --calibrate measures it, its AdamW rate too, no NVMe tier)
# with device memory capped at 16 GB
"$build/mtrun" --calibrate --out "$out/host.target" >"$out/calibrate.log" 2>&1 || failed="$failed calibrate"
{
  grep -v -E '^(name|device_memory|host_memory|host_memory_bandwidth|host_cores|host_adamw_bandwidth|tier_[a-z_]*) *=' schedules/h200.target
  echo "name = h200-lent-16g"
  echo "device_memory = 16e9"
  grep -E '^(host_memory|host_memory_bandwidth|host_cores|host_adamw_bandwidth) *=' "$out/host.target"
} >"$out/h200-16g.target"
runs=""
for spec in ${MT_GPU_MODELS:-llama3.2-1b:16 llama3.2-3b:16}; do # (MODEL:BATCH ...: a shorter run)
  m=${spec%%:*} batch=${spec#*:} d="$out/$m"
  mkdir -p "$d"
  cp "examples/$m.mt" "$d/model.mt"
  stage "plan_$m" "$build/mtc" "examples/$m.mt" --target "$out/h200-16g.target" --batch "$batch" --seq 4096 \
    --explain -o "$d/plan.bin" --trace "$d/predicted.json"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 100 >"$d/memory.txt" 2>/dev/null &
  smi=$!
  stage "run_$m" timeout 240 "$build/mtrun" "$d/plan.bin" --device cuda --steps 4 --val-batches 0 \
    --data examples/data/tinyshakespeare.txt \
    --log "$d/metrics.jsonl" --trace "$d/trace.json"
  kill $smi 2>/dev/null
  runs="$runs $d"
done

echo
[ -n "$gemm" ] || { gemm=0; failed="$failed gemm_rate"; }
python3 tests/gpu/report.py "$gemm" $runs | tee "$out/table.txt" || failed="$failed report"
if [ -n "$failed" ]; then echo "FAILED:$failed (logs in $out)"; exit 1; fi
echo "ok (logs, traces and table.txt in $out)"
