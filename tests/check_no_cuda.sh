#!/bin/sh
# The build without the CUDA toolkit: configures SRC into WORK with
# -DMT_CUDA=OFF (what CMake does where it finds no toolkit: the same
# branch), checks that CMake says what that leaves out, builds mtc, mtrun and
# gradcheck (ccache when there is one), and runs that tree's suite, which
# registers only what needs no CUDA (tests/CMakeLists.txt: mtc's model checks
# and errors, autodiff, tests/check_cpu_only.py), a few of them.
#
# usage: check_no_cuda.sh SRC WORK
set -eu
src=$1 work=$2
launcher=
if command -v ccache >/dev/null 2>&1; then launcher=-DCMAKE_C_COMPILER_LAUNCHER=ccache; fi
mkdir -p "$work"
cmake -S "$src" -B "$work" -DMT_CUDA=OFF -DMT_WERROR=ON -DMT_SANITIZERS=OFF -DMT_FUZZ=OFF $launcher \
      -DPython3_EXECUTABLE="$(command -v python3)" >"$work/configure.log" 2>&1 ||
    { cat "$work/configure.log"; echo "FAIL: configuring without CUDA"; exit 1; }
if ! grep -q "no CUDA toolkit" "$work/configure.log" || ! grep -q "Left out" "$work/configure.log"; then
    cat "$work/configure.log"
    echo "FAIL: CMake does not say what a build without the CUDA toolkit leaves out"
    exit 1
fi
if grep -q "mt_cuda\b" "$work/Makefile" 2>/dev/null; then
    echo "FAIL: the tree without CUDA still has the cuda backend's target"
    exit 1
fi
cmake --build "$work" -j2 --target mtc mtrun gradcheck >"$work/build.log" 2>&1 ||
    { tail -40 "$work/build.log"; echo "FAIL: building mtc and mtrun without CUDA"; exit 1; }
n=$(ctest --test-dir "$work" -N | sed -n 's/^Total Tests: //p')
if [ -z "$n" ] || [ "$n" -lt 10 ] || ctest --test-dir "$work" -N | grep -Eq 'Test +#[0-9]+: .*(cuda|emu_|nvrtc)'; then
    ctest --test-dir "$work" -N
    echo "FAIL: the tree without CUDA registers ${n:-no} tests, or some that need CUDA"
    exit 1
fi
# a few of them, to keep this test short: the cpu build's check, mtc's examples, two errors, two gradients
pick='^(cpu_only_build|mtc_examples|mtc_error_empty_file|mtc_error_missing_file|grad_matmul|grad_softmax)$'
ctest --test-dir "$work" --output-on-failure -j2 -R "$pick" || { echo "FAIL: the suite without CUDA"; exit 1; }
echo "ok: built without CUDA; $n tests registered there, these passed: $pick"
