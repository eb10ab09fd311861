"""checks.py: what the tests/check_*.py scripts share.

    from checks import check, finish, losses, run

run() runs a command and captures its output; fail() stops at a failure
(for scripts whose later checks need the earlier ones); check() records a failed
check, with the exit status and the tails of the command's output when one
is given; finish() prints every failure and one summary line, and returns
the exit status ctest reads (1 when any check failed).
"""
import json
import subprocess
import sys

failures = []


def run(*args, timeout=900, env=None, cwd=None):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def fail(msg, p=None):
    """Stops the script at its first failure: the message, and the tails of
    the command's output when one is given; exit status 1."""
    print("FAIL:", msg)
    if p is not None:
        print(p.stdout[-3000:], p.stderr[-3000:])
    sys.exit(1)


def check(cond, what, p=None):
    if not cond:
        out = "" if p is None else f"\n    exit {p.returncode}\n    stdout {p.stdout[-800:]!r}\n    stderr {p.stderr[-800:]!r}"
        failures.append(what + out)
    return cond


def last_run(path):
    """The records of a metrics log's last run (mtrun appends each run to its log: a new one starts with a config
    record from step 0, a resumed part goes on with its run)."""
    recs = [json.loads(line) for line in open(path)]
    starts = [i for i, r in enumerate(recs) if "config" in r and r["config"].get("from_step") == 0]
    return recs[starts[-1]:] if starts else recs


def losses(path):
    """The training losses of a metrics log's last run (JSON lines), in order."""
    return [r["loss"] for r in last_run(path) if "loss" in r]


def finish(summary="checks"):
    for f in failures:
        print("FAIL:", f)
    print(f"{'FAIL' if failures else 'ok'}: {len(failures)} failed {summary}")
    return 1 if failures else 0


def measured_trace_errors(measured, predicted, steps):
    """What is wrong with mtrun --trace's file `measured` of `steps` steps, against
    mtc --trace's `predicted` of the same plan: the same named tracks; every
    instruction the prediction shows, `steps` times, under the prediction's name;
    each track's events in order without overlap. [] when nothing."""
    errors = []
    try:
        got = json.load(open(measured))["traceEvents"]
        want = json.load(open(predicted))["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        return [f"the traces do not parse: {e}"]
    tracks = lambda ev: sorted((e["tid"], e["args"]["name"]) for e in ev if e.get("ph") == "M")
    if tracks(got) != tracks(want) or len(tracks(got)) != 5: # (the fifth, collectives, used by sharded plans)
        errors.append(f"tracks {tracks(got)} against the prediction's {tracks(want)}")
    names = {e["args"]["instruction"]: e["name"] for e in want if e.get("ph") == "X"}
    seen = {}
    for e in got:
        if e.get("ph") != "X":
            continue
        i = e["args"]["instruction"]
        seen[i] = seen.get(i, 0) + 1
        if i in names and e["name"] != names[i]:
            errors.append(f"instruction {i} is '{e['name']}', the prediction's '{names[i]}'")
        if not (e["dur"] >= 0 and e["ts"] >= 0):
            errors.append(f"instruction {i} at {e['ts']} for {e['dur']} us")
    missing = [i for i in names if seen.get(i) != steps]
    if missing:
        errors.append(f"{len(missing)} of the prediction's {len(names)} instructions not timed {steps} times "
                      f"(first: {missing[0]}, {seen.get(missing[0], 0)} times)")
    for tid in {e["tid"] for e in got if e.get("ph") == "X"}:
        ev = sorted((e["ts"], e["dur"]) for e in got if e.get("ph") == "X" and e["tid"] == tid)
        bad = [k for k in range(1, len(ev)) if ev[k][0] < ev[k - 1][0] + ev[k - 1][1] - 1e-3]
        if bad:
            errors.append(f"track {tid}: {len(bad)} events overlap the one before")
    return errors[:5]
