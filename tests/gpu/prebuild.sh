#!/bin/sh
# tests/gpu/prebuild.sh: what the lent GPU machine runs, built here (it has
# no flex, bison, LLVM 14 or OpenBLAS, and no way to install them):
#   OUT/mtc, mtrun, libmt_cuda.so, tests/gpu_check   the binaries
#   OUT/lib.tar.xz      the shared libraries they load that the machine's
#                       image lacks (all but the C library's, zlib's,
#                       CUDA's and NCCL's, which the image's nvidia-nccl
#                       wheel has: LLVM 14, OpenBLAS, Open MPI, liburing,
#                       cJSON and what those load), packed
#   OUT/megatrain/      MegaTrain's `infinity` package (its Python sources,
#                       from a git clone given as MEGATRAIN_GIT, a bare or
#                       work-tree git directory) and its commit, for
#                       tests/gpu/megatrain_peer.py; left out without it
#   OUT/commit.txt      the commit the binaries were built from
# run.sh takes it with MT_GPU_PREBUILT=OUT; a call of the device tool carries
# OUT (ignored by git) and the tracked tree, together at most 64 MiB: this
# script fails when they would be more. With --size-only it builds, copies
# and packs nothing: it lists the binaries and libraries and bounds the
# packed size (a quarter of the libraries' bytes: xz -6 packs them to 0.210),
# the check the suite runs (gpu_prebuild_size). The plans are made there, by the carried
# mtc, for a profile with that machine's calibrated host figures (two Llama
# 3.2 plans are 11 MiB, and their predictions must use that profile).
#   tests/gpu/prebuild.sh [--size-only] [BUILD_DIR [OUT_DIR]]   (defaults build, build-gpu-pre)
set -eu
size_only=0
[ "${1:-}" = --size-only ] && { size_only=1; shift; }
build=${1:-build}
out=${2:-build-gpu-pre}
root=$(cd "$(dirname "$0")/../.." && pwd)
limit=${MT_GPU_CARRY_LIMIT:-$((64 * 1024 * 1024))} # bytes (a test sets it lower to see the refusal)
bins="mtc mtrun libmt_cuda.so tests/gpu_check"
tree=$(git -C "$root" ls-files -z | (cd "$root" && xargs -0 stat -c %s) | awk '{s += $1} END {print s}')
fits() { # fits BYTES: the tracked tree and BYTES carried within the limit, or a refusal
  [ $(($1 + tree)) -le "$limit" ] && return 0
  echo "prebuild: the tracked tree ($tree bytes) and $out ($1 bytes) are over the $limit bytes a call carries" >&2
  return 1
}
fits 0 # the tree alone
[ $size_only = 1 ] || cmake --build "$build" -j2 --target mtc mtrun mt_cuda gpu_check
# the libraries to carry: NAME PATH a line
libs=$(for b in $bins; do ldd "$build/$b"; done | awk '$3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
  case $name in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libstdc++*|libgcc_s*|libz.so*|libcuda.so*|libcudart*|libcublas*|libnvrtc*|libnccl*) ;;
    *) echo "$name $path" ;;
  esac
done)
if [ $size_only = 1 ]; then # a listing: the binaries, and the libraries at xz -6's ratio on them (0.210 measured) bounded by 0.25
  b=$(for f in $bins; do stat -L -c %s "$build/$f"; done | awk '{s += $1} END {print s}')
  l=$(echo "$libs" | while read -r name path; do stat -L -c %s "$path"; done | awk '{s += $1} END {print s}')
  est=$((b + l / 4 + 400000)) # and MegaTrain's package, about 0.3 MB
  echo "prebuild --size-only: binaries $b bytes, libraries $l unpacked, $est carried at most: $(((est + tree) / 1048576)) MiB with the tree, of $((limit / 1048576))"
  fits "$est"
  exit 0
fi
rm -rf "$out" && mkdir -p "$out/tests" "$out/lib"
for b in $bins; do cp "$build/$b" "$out/$b"; done
echo "$libs" | while read -r name path; do cp -L "$path" "$out/lib/$name"; done
tar -C "$out" -cf - lib | xz -T2 -6 >"$out/lib.tar.xz"
rm -rf "$out/lib"
if [ -n "${MEGATRAIN_GIT:-}" ]; then
  mkdir -p "$out/megatrain"
  gd=$(git -C "$MEGATRAIN_GIT" rev-parse --absolute-git-dir)
  git --git-dir="$gd" ls-tree -r --name-only HEAD infinity | grep -E '\.py$' | while read -r f; do
    mkdir -p "$out/megatrain/$(dirname "$f")"
    git --git-dir="$gd" show "HEAD:$f" >"$out/megatrain/$f"
  done
  git --git-dir="$gd" rev-parse HEAD >"$out/megatrain/commit.txt"
fi
git -C "$root" rev-parse HEAD >"$out/commit.txt"
carried=$(du -sb "$out" | cut -f1)
echo "prebuild: $out holds $carried bytes, the tracked tree $tree: $(((carried + tree) / 1048576)) MiB of the $((limit / 1048576)) MiB a call carries"
fits "$carried"
