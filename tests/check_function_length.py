#!/usr/bin/env python3
"""No function of the C sources is over 150 lines, but switch tables.

usage: check_function_length.py ROOT [--list]

Reads every .c, .h and .inc file under ROOT's common/, dsl/, compiler/,
runtime/ and bench/ (tests/ is left out: a test may be one long list of
checks). A function is found as the code writes it (K&R): a header at the
top level with its parameter list, then `{`, and the body up to the
matching `}`, with comments, strings and preprocessor lines left out of the
count of braces. Its length is the lines from that `{` to that `}`, both
counted. A switch table is a function whose body is mostly the
case labels of one switch (an op's or a kind's table): it may be longer.
So may the functions of ALLOWED, each with its reason. Prints each function
over the limit and exits 1 if there is any; --list prints every function
with its length, longest first.
"""
import os
import re
import sys

LIMIT = 150
DIRS = ("common", "dsl", "compiler", "runtime", "bench")
EXTENSIONS = (".c", ".h", ".inc")

# (path, function): why it may be longer. Keep it short: a function here is
# one that reads best whole, not one that nobody has split yet.
ALLOWED = {
    ("compiler/fuse/fuse.c", "node_val"): "the value of a node by its op: a switch table of every elementwise op",
    ("runtime/plan_read.c", "check_instr"): "the checks of an instruction by its kind: a switch table of every kind",
}


# What blank_out makes spaces: comments, string and character literals, and
# preprocessor lines with their continuations. The leftmost match wins, so
# a quote inside a comment, or `//` inside a string, is not taken for more.
NOT_CODE = re.compile(r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*""",
                      re.S | re.M)


def blank_out(text):
    """text with what is not code made spaces (newlines kept), so that its braces and parentheses do not count."""
    return NOT_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def function_name(header):
    """The name a top-level header declares a function of, or None when it is not a function (a struct, an
    initializer, an extern block)."""
    header = re.sub(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)", " ", header)
    if "=" in header.split("(")[0] or re.match(r"\s*(typedef|struct|union|enum)\b[^(]*$", header):
        return None
    m = re.search(r"([A-Za-z_]\w*)\s*\(", header)
    return m.group(1) if m and ")" in header else None


def functions(text):
    """(name, first line, last line) of each function body in text, lines counted from 1."""
    code = blank_out(text)
    found = []
    depth = 0
    header_from = 0  # where the text before the next top-level `{` starts
    for i, c in enumerate(code):
        if c == "{":
            if depth == 0:
                name = function_name(code[header_from:i])
                start = (code.count("\n", 0, i) + 1, name)
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                line, name = start
                if name:
                    found.append((name, line, code.count("\n", 0, i) + 1))
                header_from = i + 1
        elif c == ";" and depth == 0:
            header_from = i + 1
    return found


def is_switch_table(body):
    """Whether a body is mostly one switch's case labels: one switch, and a case label on at least half of its
    lines."""
    code = blank_out(body)
    lines = [l for l in code.split("\n") if l.strip()]
    cases = sum(1 for l in lines if re.match(r"\s*(case\b|default\s*:)", l))
    return len(re.findall(r"\bswitch\s*\(", code)) == 1 and cases * 2 >= len(lines)


def sources(root):
    for d in DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(EXTENSIONS):
                    yield os.path.join(dirpath, f)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    every, over = [], []
    for path in sources(root):
        rel = os.path.relpath(path, root)
        text = open(path, encoding="utf-8").read()
        lines = text.split("\n")
        for name, first, last in functions(text):
            length = last - first + 1
            every.append((length, rel, first, name))
            if length <= LIMIT or (rel, name) in ALLOWED:
                continue
            if is_switch_table("\n".join(lines[first - 1:last])):
                continue
            over.append((length, rel, first, name))
    if "--list" in sys.argv[2:]:
        for length, rel, first, name in sorted(every, reverse=True):
            print(f"{length:5d} {rel}:{first}: {name}")
    if not every:
        sys.exit(f"FAIL: no function found under {root}'s {', '.join(DIRS)}")
    stale = [key for key in ALLOWED if not any((rel, name) == key for _, rel, _, name in every)]
    for rel, name in stale:
        print(f"FAIL: {rel}: no function {name}, which ALLOWED names: take it out of the list")
    for length, rel, first, name in sorted(over, reverse=True):
        print(f"FAIL: {rel}:{first}: {name} is {length} lines, over {LIMIT}: split it into functions that each do one "
              f"thing")
    if over or stale:
        sys.exit(1)
    print(f"ok: {len(every)} functions, none over {LIMIT} lines but switch tables")


if __name__ == "__main__":
    main()
