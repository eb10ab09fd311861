#!/bin/sh
# bench/cpu_predict.sh: the cpu cost model against the cpu backend, in one run.
# Calibrates this machine (mtrun --calibrate), then for llama-tiny, gpt2-tiny
# and GPT-2 small (batch 4, seq 64, f32) plans for that profile and prints
# mtc's predicted step against the measured one (build/bench/step_bench), and
# last one line a model: measured/predicted (the target: 0.75 to 1.25).
#   bench/cpu_predict.sh [BUILD_DIR]      (default build; run from the source tree)
set -eu
build=${1:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(cd "$dir" && "$OLDPWD/$build/mtrun" --calibrate --out local.target) || exit 1
summary=""
for model in llama-tiny gpt2-tiny gpt2; do
    line=$("$build/bench/step_bench" "examples/$model.mt" --target "$dir/local.target" --steps 5 | grep '^predicted') || exit 1
    echo "$model: $line"
    summary="$summary$(printf '%-11s %s' "$model" "$(echo "$line" | sed 's/.*measured\/predicted/measured\/predicted/')")
"
done
printf '\n%s' "$summary"
