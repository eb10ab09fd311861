#!/usr/bin/env bash
# README.md opens with two commands, run and test; .ci/run must run the
# second one verbatim, so CI tests what the README promises.
set -eu
src=$1
cmds=$(awk '/^```sh$/{f=1; next} /^```$/{if (f) exit} f' "$src/README.md")
[ "$(printf '%s\n' "$cmds" | grep -c .)" -eq 2 ] || { echo "FAIL: README must open with a block of exactly two commands"; exit 1; }
test_cmd=$(printf '%s\n' "$cmds" | sed -n 2p)
grep -qxF -- "$test_cmd" "$src/.ci/run" || { echo "FAIL: .ci/run does not run the README's test command:"; echo "  $test_cmd"; exit 1; }
echo "ok: .ci/run runs the README's test command"
