#!/usr/bin/env bash
# Runs the front-end fuzzer for a bounded time from a seed corpus made of the
# examples and the error cases. Fails on any crash, leak, overflow or UB.
# usage: run_fuzz.sh FUZZER SOURCE_DIR WORK_DIR SECONDS
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
fuzzer=$1 src=$2 work=$3 seconds=$4
rm -rf "$work"
mkdir -p "$work/corpus"
cp "$src"/examples/*.mt "$src"/tests/errors/*.mt "$src"/tests/errors/*.bin "$work/corpus/"
cd "$work"
"$here/run_libfuzzer.sh" "$fuzzer" -dict="$src/tests/fuzz/mt.dict" -max_total_time="$seconds" -max_len=8192 \
          -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 corpus
