#!/bin/sh
# tests/gpu/prebuild.sh: a build of mt for a GPU machine that cannot build
# it (no flex, bison, LLVM 14 or OpenBLAS there, and no way to install
# them), made here: the binaries tests/gpu/run.sh needs and, packed, the
# shared libraries they load beyond the C library's, zlib's and CUDA's
# (which the GPU machine has). run.sh takes it with MT_GPU_PREBUILT=DIR.
#   tests/gpu/prebuild.sh [BUILD_DIR [OUT_DIR]]   (defaults build, build-gpu-pre)
set -eu
build=${1:-build}
out=${2:-build-gpu-pre}
cmake --build "$build" -j2 --target mtc mtrun mt_cuda test_cuda gpu_check
rm -rf "$out" && mkdir -p "$out/tests" "$out/lib"
cp "$build/mtc" "$build/mtrun" "$build/libmt_cuda.so" "$out/"
cp "$build/tests/gpu_check" "$build/tests/test_cuda" "$out/tests/"
for f in "$out/mtc" "$out/mtrun" "$out/libmt_cuda.so" "$out/tests/gpu_check" "$out/tests/test_cuda"; do ldd "$f"; done |
  awk '$3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
    case $name in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libstdc++*|libgcc_s*|libz.so*|libcuda.so*|libcudart*|libcublas*|libnvrtc*) ;;
      *) cp -L "$path" "$out/lib/$name" ;;
    esac
  done
tar -C "$out" -cf - lib | xz -T2 -6 >"$out/lib.tar.xz"
rm -rf "$out/lib"
git rev-parse HEAD >"$out/commit.txt"
du -sh "$out"
