#!/bin/sh
# bench/cpu_predict.sh: the cpu cost model against the cpu backend, in one run.
# For llama-tiny, gpt2-tiny and GPT-2 small (batch 4, seq 64, f32), and
# llama-tiny and gpt2-tiny in bf16 (the plain attention kernel and libm's
# scalar double maths the cpu backend runs bf16 with): calibrates
# this machine (mtrun --calibrate) right before the model's steps and again
# right after, so that the prediction sees the machine's share the steps saw
# on a machine others may be using; plans for the first profile and measures
# the median step (build/bench/step_bench; 21 steps, GPT-2 small 5); prints
# mtc's predicted step for each profile, and last, one line a model:
# measured/predicted, the prediction the mean of the two (the target: 0.75
# to 1.25), with how busy the CPUs were (everyone's work, from /proc/stat,
# over the second before the first calibration) and the load average.
#   bench/cpu_predict.sh [BUILD_DIR]      (default build; run from the source tree)
set -eu
build=${1:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# "CPUs busy N%, load L": the share of the CPUs' time not idle over a second,
# and the 1-minute load average.
busy() {
    a=$(grep '^cpu ' /proc/stat)
    sleep 1
    b=$(grep '^cpu ' /proc/stat)
    printf '%s\n%s\n' "$a" "$b" | awk 'NR == 1 { for (i = 2; i <= NF; i++) t0 += $i; i0 = $5 + $6 }
        NR == 2 { for (i = 2; i <= NF; i++) t1 += $i; i1 = $5 + $6
                  printf "CPUs busy %.0f%%", 100 * (1 - (i1 - i0) / (t1 - t0)) }'
    printf ', load %s' "$(cut -d' ' -f1 /proc/loadavg)"
}

# calibrate NAME: the profile $dir/NAME.target; prints its memcpy and sgemm rates
# (sgemm1: on one thread, which a tiny model's GEMMs run at).
calibrate() {
    (cd "$dir" && "$OLDPWD/$build/mtrun" --calibrate --out "$1.target") >"$dir/$1.log" || {
        cat "$dir/$1.log"
        exit 1
    }
    grep -E '^  (memcpy|sgemm)' "$dir/$1.log" | awk '{ printf "%s %s %s  ", $1, $2, $3 }'
}

summary=""
for run in llama-tiny:f32 gpt2-tiny:f32 gpt2:f32 llama-tiny:bf16 gpt2-tiny:bf16; do
    model=${run%:*} dtype=${run#*:}
    load=$(busy)
    echo "$model: $load; calibrated before: $(calibrate "$model")"
    steps=21
    [ "$model" = gpt2 ] && steps=5 # its steps take seconds
    line=$("$build/bench/step_bench" "examples/$model.mt" --target "$dir/$model.target" --steps $steps --dtype $dtype |
        grep '^predicted') || exit 1
    echo "$model: $line"
    echo "$model: calibrated after: $(calibrate "$model-after")"
    after=$("$build/mtc" "examples/$model.mt" --target "$dir/$model-after.target" --dtype $dtype --batch 4 --seq 64 --explain \
        --json | python3 -c 'import json, sys; print(next(p["predicted_step_s"] for p in json.load(sys.stdin)["policies"] if p.get("chosen")) * 1e3)')
    result=$(echo "$line" | awk -v after="$after" '{
        for (i = 1; i < NF; i++) { if ($(i + 1) == "ms/step;") before = $i; if ($i == "measured" && $(i + 2) == "ms") measured = $(i + 1) }
        printf "measured/predicted %.2f (%.1f ms against %.1f and %.1f predicted before and after)", measured / ((before + after) / 2), measured, before, after }')
    summary="$summary$(printf '%-16s %s; %s' "$model $dtype" "$result" "$load")
"
done
printf '\n%s' "$summary"
