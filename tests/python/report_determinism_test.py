"""A campaign's report is a function of its seed and case count alone (docs/CAMPAIGN.md "Replay"): the same
mutant campaign with one job, with two jobs, and killed with SIGKILL mid-run then resumed gives the same
report.json (timings apart) and the same bundles, byte for byte.
  report_determinism_test.py DRIFTCHECK WORK_DIR"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

bin_, work = sys.argv[1], sys.argv[2]
# The grouping phase, and each finding in it, gets all the time it needs (its steps bound it): a report depends
# on its budget only when it runs out.
ARGS = ["--mutants", "--backend", "mutant.*", "--cases", "360", "--seed", "3", "--shrink-seconds", "3600",
        "--shrink-seconds-per-finding", "3600", "--progress", "none"]
# What may differ between two runs of one campaign: wall-clock figures and the command line itself.
TIMING = {"seconds", "check_seconds", "found_after_s", "first_finding_s", "reference_seconds", "command",
          "phases"}


def fuzz(out, jobs, *extra, args=ARGS):
    return subprocess.run([bin_, "fuzz", *args, "--jobs", str(jobs), "--out", out, *extra], cwd=work,
                          capture_output=True, text=True, timeout=900)


def stripped(value):
    if isinstance(value, dict):
        return {k: stripped(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [stripped(v) for v in value]
    return value


def report(out):
    with open(os.path.join(work, out, "report.json")) as f:
        # Paths name the campaign directory; everything else must match.
        return stripped(json.loads(f.read().replace(out + "/", "OUT/")))


def bundles(out):
    root = os.path.join(work, out, "findings")
    files = {}
    for d, _, names in os.walk(root):
        for n in names:
            with open(os.path.join(d, n), "rb") as f:
                files[os.path.relpath(os.path.join(d, n), root)] = f.read().replace(out.encode() + b"/", b"OUT/")
    return files


def first_difference(a, b, path=""):
    if type(a) is not type(b):
        return f"{path}: {str(a)[:80]} | {str(b)[:80]}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}/{k}: in one only"
            d = first_difference(a[k], b[k], f"{path}/{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items | {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {str(a)[:100]} | {str(b)[:100]}"


shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
problems = []
one = fuzz("one", 1)
if one.returncode != 1:
    sys.exit(f"FAIL: campaign exit {one.returncode}: {one.stderr[-2000:]}")
two = fuzz("two", 2)
# Killed while it runs (after a third of the one-job run's time, the checkpoint every 2 s having recorded part
# of it), then resumed. A kill that came too late still leaves a complete run, which must match too.
killed = subprocess.Popen([bin_, "fuzz", *ARGS, "--jobs", "2", "--out", "killed"], cwd=work,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(max(2.5, 0.4 * float(json.load(open(os.path.join(work, "one/report.json")))["seconds"])))
killed.send_signal(signal.SIGKILL)
killed.wait()
# A resumed campaign takes its stream from its journal: only the budget is given again.
resumed = fuzz("killed", 2, "--resume", args=["--cases", "360", "--progress", "none"]) if not os.path.exists(os.path.join(work, "killed/report.json")) else None
for name, run in (("two jobs", two), ("killed and resumed", resumed)):
    if run is not None and run.returncode != 1:
        problems.append(f"{name}: exit {run.returncode}: {run.stderr[-1000:]}")
base_report, base_bundles = report("one"), bundles("one")
if not base_report["groups"] or len(base_bundles) < 10:
    problems.append("the one-job campaign found too little to compare")
for name, out in (("two jobs", "two"), ("killed and resumed", "killed")):
    d = first_difference(base_report, report(out))
    if d:
        problems.append(f"{name}: report.json differs at {d}")
    b = bundles(out)
    if sorted(b) != sorted(base_bundles):
        problems.append(f"{name}: bundle files differ: {sorted(set(b) ^ set(base_bundles))[:5]}")
    else:
        changed = [k for k in b if b[k] != base_bundles[k]]
        if changed:
            problems.append(f"{name}: {len(changed)} bundle files differ, first {changed[0]}")
for p in problems:
    print("FAIL:", p)
if not problems:
    print(f"report_determinism: {len(base_report['findings'])} findings, {len(base_report['groups'])} groups and "
          f"{len(base_bundles)} bundle files identical with one job, two jobs, and killed + resumed"
          f"{'' if resumed else ' (the kill came after the run ended)'}")
sys.exit(1 if problems else 0)
