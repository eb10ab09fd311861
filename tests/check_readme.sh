#!/usr/bin/env bash
# README.md opens with two commands, run and test; .ci/run must run the
# second one verbatim, so CI tests what the README promises. README.md keeps
# to 250 lines, and its links and docs/'s name files of the tree. The docs
# must stand alone: no file points at ../shared or DESIGN.md.
set -eu
src=$1
cmds=$(awk '/^```sh$/{f=1; next} /^```$/{if (f) exit} f' "$src/README.md")
[ "$(printf '%s\n' "$cmds" | grep -c .)" -eq 2 ] || { echo "FAIL: README must open with a block of exactly two commands"; exit 1; }
test_cmd=$(printf '%s\n' "$cmds" | sed -n 2p)
grep -qxF -- "$test_cmd" "$src/.ci/run" || { echo "FAIL: .ci/run does not run the README's test command:"; echo "  $test_cmd"; exit 1; }
# the docs stand alone: nothing in the tree points outside it (a clone has nothing there)
outside=$(cd "$src" && grep -rlE '\.\./shared|DESIGN\.md' --include='*.md' --include='*.c' --include='*.h' --include='*.py' \
          --include='*.sh' --include='*.txt' --include='*.mt' --exclude-dir=build --exclude-dir=.git . | grep -v '^./tests/check_readme.sh$' || true)
[ -z "$outside" ] || { echo "FAIL: these files point outside the repository (../shared, DESIGN.md):"; echo "$outside"; exit 1; }
[ -f "$src/docs/architecture.md" ] || { echo "FAIL: docs/architecture.md is missing"; exit 1; }
# README.md is the landing page: short, the reference is in docs/
lines=$(wc -l < "$src/README.md")
[ "$lines" -le 250 ] || { echo "FAIL: README.md has $lines lines; the landing page keeps to 250 (move the rest to docs/)"; exit 1; }
# every relative link of README.md and docs/*.md names a file of the tree
broken=$(cd "$src" && for f in README.md docs/*.md; do
             grep -oE '\]\([^)#:]+[)#]' "$f" | sed -E 's/^\]\(//; s/[)#]$//' |
             while read -r target; do [ -e "$(dirname "$f")/$target" ] || echo "$f: $target"; done
         done)
[ -z "$broken" ] || { echo "FAIL: these links name no file:"; echo "$broken"; exit 1; }
echo "ok: .ci/run runs the README's test command; README.md has $lines lines; every link names a file;"
echo "    the docs point nowhere outside the repository"
