"""checks.py: what the tests/check_*.py scripts share.

    from checks import check, finish, losses, run

run() runs a command and captures its output; check() records a failed
check, with the exit status and the tails of the command's output when one
is given; finish() prints every failure and one summary line, and returns
the exit status ctest reads (1 when any check failed).
"""
import json
import subprocess

failures = []


def run(*args, timeout=900, env=None, cwd=None):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def check(cond, what, p=None):
    if not cond:
        out = "" if p is None else f"\n    exit {p.returncode}\n    stdout {p.stdout[-800:]!r}\n    stderr {p.stderr[-800:]!r}"
        failures.append(what + out)
    return cond


def losses(path):
    """The training losses of a metrics log (JSON lines), in order."""
    return [json.loads(line)["loss"] for line in open(path) if '"loss"' in line]


def finish(summary="checks"):
    for f in failures:
        print("FAIL:", f)
    print(f"{'FAIL' if failures else 'ok'}: {len(failures)} failed {summary}")
    return 1 if failures else 0
