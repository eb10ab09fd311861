#!/usr/bin/env python3
"""Runs mtc on one bad model and checks that it fails the way users are promised:

    FILE:LINE:COL: error: MESSAGE          (the first line of stderr)
      the offending source line            (quoted as written)
      ^                                    (under column COL)

exit status 1, nothing on stdout, and no output file left behind.

usage: check_error.py MTC MODEL [EXPECT]
EXPECT is "LINE:COL: error: MESSAGE-PREFIX" or ": error: MESSAGE-PREFIX" for
errors without a location; by default it is read from the model's first
line, "# expect: ...".
"""
import os
import re
import subprocess
import sys
import tempfile


def fail(msg, proc=None):
    print("FAIL:", msg)
    if proc is not None:
        print("--- exit status", proc.returncode)
        print("--- stdout\n" + proc.stdout)
        print("--- stderr\n" + proc.stderr)
    sys.exit(1)


def main():
    mtc, model = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3:
        expect = sys.argv[3]
    else:
        with open(model, encoding="utf-8") as f:
            first = f.readline()
        m = re.match(r"# expect: (.*)", first)
        if not m:
            fail(f"{model} has no '# expect:' first line")
        expect = m.group(1).strip()

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.bin")
        proc = subprocess.run([mtc, model, "-o", out, "--summary"], capture_output=True, text=True,
                              errors="replace", timeout=60)
        if os.path.exists(out):
            fail("an output file was written for a bad model", proc)
    if proc.returncode != 1:
        fail(f"exit status {proc.returncode}, expected 1", proc)
    if proc.stdout:
        fail("something was printed on stdout", proc)
    lines = proc.stderr.split("\n")
    want = model + (":" if expect[0].isdigit() else "") + expect
    if not lines[0].startswith(want):
        fail(f"first line of stderr\n  {lines[0]!r}\ndoes not start with\n  {want!r}", proc)

    loc = re.match(r"(\d+):(\d+):", expect)
    if not loc:
        return
    line, col = int(loc.group(1)), int(loc.group(2))
    with open(model, "rb") as f:
        src = f.read().decode("utf-8", "replace").split("\n")
    quoted = "".join("?" if ord(c) < 0x20 and c != "\t" else c for c in src[line - 1]) if line <= len(src) else ""
    if len(lines) < 3 or lines[1] != "  " + quoted:
        fail(f"second line should quote source line {line}: {quoted!r}", proc)
    caret = "  " + "".join("\t" if c == "\t" else " " for c in src[line - 1][: col - 1]) + "^"
    if lines[2] != caret:
        fail(f"third line should be a caret under column {col}: {caret!r}", proc)


if __name__ == "__main__":
    main()
