"""Keeps two reference pages honest against the code.

usage: check_docs.py SOURCE_DIR [CTEST BUILD_DIR]

docs/environment.md: its tables list every MT_* environment variable the
code reads, and no other. Read means: a C call of getenv (or a helper whose
name holds "env", not setenv) on the name as a string literal; os.getenv,
os.environ.get or os.environ[...] in Python; $NAME or ${NAME} in shell;
$ENV{NAME} in CMake. A row's "read by" column names every file that reads
its variable, and each file it names exists and names the variable.

tests/README.md: its table names every source file under common/, dsl/,
compiler/ and runtime/ (.c, .h, .y, .l, .cuh, .inc) in its first column;
each row names ctest tests in its second column, or says "none" and why in
its third. Every path the page names in backquotes exists, and every test it
names exists: in `CTEST -N` run in BUILD_DIR, or as a literal add_test name
of tests/CMakeLists.txt (a test of another configuration, such as
cpu_only_build), or as the mtc-asan_ twin of an mtc_ test.
"""
import fnmatch
import glob
import os
import re
import subprocess
import sys

from checks import check, finish

SCANNED = ("common", "dsl", "compiler", "runtime", "tools", "tests", "bench")
SOURCE_DIRS = ("common", "dsl", "compiler", "runtime")
SOURCE_EXTS = (".c", ".h", ".y", ".l", ".cuh", ".inc")
C_EXTS = (".c", ".h", ".inc", ".cuh", ".y", ".l", ".cc", ".cpp")

C_READ = re.compile(r'\b(\w*env\w*)\s*\(\s*"(MT_[A-Z0-9_]+)"')
PY_READ = re.compile(r'os\.(?:getenv|environ\.get)\(\s*["\'](MT_[A-Z0-9_]+)["\']'
                     r'|os\.environ\[\s*["\'](MT_[A-Z0-9_]+)["\']\s*\](?!\s*=[^=])')
SH_READ = re.compile(r'\$\{?(MT_[A-Z0-9_]+)')
CMAKE_READ = re.compile(r'\$ENV\{(MT_[A-Z0-9_]+)\}')
TICKED = re.compile(r'`([^`]+)`')


def files_under(root, dirs):
    """Every file under root/dir for dir in dirs, as paths relative to root."""
    for d in dirs:
        for base, subdirs, names in os.walk(os.path.join(root, d)):
            subdirs[:] = [s for s in subdirs if s != "__pycache__" and not s.startswith(".")]
            for name in names:
                yield os.path.relpath(os.path.join(base, name), root)


def is_shell(path, text):
    return path.endswith(".sh") or text.startswith("#!/bin/sh") or text.startswith("#!/usr/bin/env bash") \
        or text.startswith("#!/bin/bash")


def env_reads(path, text):
    """The MT_* variables one file reads."""
    if path.endswith(C_EXTS):
        return {name for fn, name in C_READ.findall(text) if fn not in ("setenv", "unsetenv")}
    if path.endswith(".py"):
        return {a or b for a, b in PY_READ.findall(text)}
    if os.path.basename(path) == "CMakeLists.txt" or path.endswith(".cmake"):
        return set(CMAKE_READ.findall(text))
    if is_shell(path, text):
        return set(SH_READ.findall(text))
    return set()


def read_text(root, path):
    try:
        with open(os.path.join(root, path), encoding="utf-8") as f:
            return f.read()
    except (UnicodeDecodeError, OSError):
        return None


def code_env(root):
    """{variable: [files that read it]} over the scanned folders."""
    found = {}
    for path in sorted(files_under(root, SCANNED)):
        if path == os.path.join("tests", "check_docs.py"):
            continue
        text = read_text(root, path)
        for name in env_reads(path, text) if text is not None else ():
            found.setdefault(name, []).append(path)
    return found


def table_rows(text):
    """The cells of every table row that is not a header or a rule."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|") or re.match(r"^\|[\s|:-]+\|$", line):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        rows.append(cells)
    return rows


def check_environment(root):
    page = os.path.join("docs", "environment.md")
    text = read_text(root, page) or ""
    documented = {}
    for cells in table_rows(text):
        names = TICKED.findall(cells[0])
        if len(names) != 1 or not names[0].startswith("MT_"):
            continue
        name = names[0]
        check(name not in documented, f"{page}: {name} has two rows")
        documented[name] = TICKED.findall(cells[1]) if len(cells) > 1 else []
    read = code_env(root)
    check(len(read) > 0, "no MT_* variable found in the code: the scan is broken")
    for name in sorted(set(read) - set(documented)):
        check(False, f"{page}: {name} is read by {', '.join(read[name])} but has no row")
    for name in sorted(set(documented) - set(read)):
        check(False, f"{page}: {name} has a row but no code reads it")
    for name, files in sorted(documented.items()):
        check(len(files) > 0, f"{page}: {name}: no file in its 'read by' column")
        for f in read.get(name, []):
            check(f in files, f"{page}: {name} is read by {f}, which its 'read by' column does not name")
        for f in files:
            body = read_text(root, f)
            check(body is not None, f"{page}: {name}: {f} does not exist")
            check(body is None or name in body, f"{page}: {name}: {f} does not name it")
    print(f"docs/environment.md: {len(documented)} variables documented, {len(read)} read by the code")


def known_tests(root, ctest, build):
    names = set()
    if ctest:
        out = subprocess.run([ctest, "-N"], cwd=build, capture_output=True, text=True)
        check(out.returncode == 0, f"{ctest} -N in {build} failed: {out.stderr}")
        names = set(re.findall(r"^\s*Test\s+#\d+:\s+(\S+)", out.stdout, re.M))
        check(len(names) > 0, f"{ctest} -N in {build} lists no test")
    cmake = read_text(root, os.path.join("tests", "CMakeLists.txt")) or ""
    names |= {n for n in re.findall(r"add_test\(\s*NAME\s+([^\s)]+)", cmake) if "$" not in n}
    names |= {"mtc-asan_" + n[len("mtc_"):] for n in names if n.startswith("mtc_")}
    return names


def path_exists(root, token):
    if any(c in token for c in "*?["):
        return bool(glob.glob(os.path.join(root, token)))
    return os.path.exists(os.path.join(root, token))


def check_tests_readme(root, ctest, build):
    page = os.path.join("tests", "README.md")
    text = read_text(root, page) or ""
    tests = known_tests(root, ctest, build)
    for token in sorted(set(TICKED.findall(text))):
        if "/" in token and " " not in token and not token.startswith(("-", "$", "http")):
            check(path_exists(root, token), f"{page}: `{token}` does not exist")
    covered = set()
    for cells in table_rows(text):
        files = [t for t in TICKED.findall(cells[0]) if t.startswith(tuple(d + "/" for d in SOURCE_DIRS))]
        if not files:
            continue
        covered |= set(files)
        named = TICKED.findall(cells[1]) if len(cells) > 1 else []
        if not named:
            says_why = cells[1].lower().startswith("none") and len(cells) > 2 and len(cells[2]) > 0
            check(says_why, f"{page}: the row of {files[0]} names no test and does not say why")
        for name in named:
            ok = any(fnmatch.fnmatchcase(t, name) for t in tests)
            check(ok, f"{page}: the row of {files[0]} names test `{name}`, which does not exist")
    sources = {p for p in files_under(root, SOURCE_DIRS) if p.endswith(SOURCE_EXTS)}
    for path in sorted(sources - covered):
        check(False, f"{page}: {path} has no row")
    print(f"tests/README.md: {len(covered & sources)} of {len(sources)} source files in the table, "
          f"{len(tests)} tests known")


def main():
    if len(sys.argv) not in (2, 4):
        sys.exit(__doc__)
    root = sys.argv[1]
    ctest, build = (sys.argv[2], sys.argv[3]) if len(sys.argv) == 4 else (None, None)
    check_environment(root)
    check_tests_readme(root, ctest, build)
    sys.exit(finish("checks of docs/environment.md and tests/README.md"))


if __name__ == "__main__":
    main()
