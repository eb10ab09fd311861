#!/bin/sh
# tests/gpu/run.sh: the one script for a machine with a GPU (tests/gpu/README.md).
# Builds mt, runs the NVRTC tests, then gpu_check: flash attention and every
# fused kernel of two models against plain references on the device, with
# times; the table comes last. A few minutes; exit status 0 when all pass.
#   tests/gpu/run.sh [MODEL.mt...]      (default: the two tiny examples)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${MT_GPU_BUILD:-$root/build-gpu}
jobs=$(nproc 2>/dev/null || echo 4)
cd "$root"
if [ $# -eq 0 ]; then set -- examples/gpt2-tiny.mt examples/llama-tiny.mt; fi

command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "run.sh: nvidia-smi not found; trying the driver anyway"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMT_WERROR=ON -DMT_SANITIZERS=OFF -DMT_FUZZ=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target mtc test_cuda gpu_check
# every example's kernels compile for sm_80 and sm_90 (no GPU needed; here for completeness)
ctest --test-dir "$build" -R '^cuda_' -j"$jobs" --output-on-failure
timeout 900 "$build/tests/gpu_check" "$@"
