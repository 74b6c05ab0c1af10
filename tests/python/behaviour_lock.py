"""The behaviour lock: a fixed set of campaigns whose reports and bundles must stay the same bit for bit across a
change that means to change no behaviour (a refactoring), checked against the digests in tests/python/behaviour_lock.json.

    behaviour_lock.py check  DRIFTCHECK FAULT_WORKER WORK_DIR   # ctest: exit 1 naming what moved
    behaviour_lock.py update DRIFTCHECK FAULT_WORKER WORK_DIR   # record the digests of this build (on purpose)
    behaviour_lock.py diff   DIR_A DIR_B                        # the first differences of two kept WORK_DIRs

The campaigns cover every op, every CPU twin and every CPU mutant over three seeds, and an external backend (the
protocol's worker, tests/fault_worker.cpp, serving a twin) with the grouping phase unbounded, so that they depend on
nothing but the code: report.json without its timings and the command line, and every file of every bundle, the
campaign folder's name replaced by OUT. GPU backends are left out (they are not on every machine). A change that
moves behaviour on purpose updates the lock in the same commit and says why (docs/ARCHITECTURE.md)."""
import hashlib
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LOCK = os.path.join(HERE, "behaviour_lock.json")
FORMAT = "driftcheck.behaviour"
CPU = "cpu.*,mutant.rmsnorm.*,mutant.dual.*,mutant.concat.*,mutant.attn.*"
# Grouping bounded by its steps (--shrink-steps, 1000 candidates) and never by the clock, so a loaded or slow
# (sanitised) build records the same groups.
COMMON = ["--jobs", "2", "--shrink-seconds", "3600", "--shrink-seconds-per-finding", "3600", "--progress", "none"]
CAMPAIGNS = {
    "seed1": ["--backend", CPU, "--cases", "240", "--seed", "1"],
    "seed2": ["--backend", CPU, "--cases", "240", "--seed", "2"],
    "seed3": ["--backend", CPU, "--cases", "240", "--seed", "3"],
    "external": ["--backends", "ext.toml", "--backend", "ext.lock.*", "--cases", "120", "--seed", "4"],
}
# The external backends: fault_worker serving a twin correctly, and planting an out-of-bounds write in every
# third case (by case index, so whichever worker runs it).
EXT_TOML = """format = "driftcheck.backends"
version = 1

[[backend]]
name = "lock.attn"
op = "attention"
command = ["fault_worker", "--backend", "cpu.attn.triton_unified"]
numerics = "like:cpu.attn.triton_unified"

[[backend]]
name = "lock.rmsnorm.guard"
op = "rmsnorm"
command = ["fault_worker", "--backend", "cpu.rmsnorm.cuda", "--fault", "guard", "--case-every", "3"]
numerics = "like:cpu.rmsnorm.cuda"
"""
TIMING = {"seconds", "check_seconds", "found_after_s", "first_finding_s", "reference_seconds", "command",
          "restart_seconds", "phases"}


def stripped(value):
    if isinstance(value, dict):
        return {k: stripped(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [stripped(v) for v in value]
    return value


def normalised(text, work, name):
    return text.replace(os.path.join(work, ""), "WORK/").replace(name + "/", "OUT/")


def run_campaigns(bin_, worker, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    with open(os.path.join(work, "ext.toml"), "w") as f:
        f.write(EXT_TOML)
    env = dict(os.environ, PATH=os.path.dirname(os.path.abspath(worker)) + os.pathsep + os.environ["PATH"])
    for name, args in CAMPAIGNS.items():
        p = subprocess.run([bin_, "fuzz", *args, *COMMON, "--out", name], cwd=work, env=env, capture_output=True,
                           text=True, timeout=1200)
        if p.returncode not in (0, 1):
            sys.exit(f"FAIL: campaign {name} exit {p.returncode}: {p.stderr[-2000:]}")


def digests(work):
    out = {}
    for name in CAMPAIGNS:
        d = os.path.join(work, name)
        with open(os.path.join(d, "report.json")) as f:
            report = stripped(json.loads(normalised(f.read(), work, name)))
        files = {}
        root = os.path.join(d, "findings")
        for folder, _, names in sorted(os.walk(root)):
            for n in sorted(names):
                path = os.path.join(folder, n)
                with open(path, "rb") as f:
                    data = f.read()
                if n.endswith(".json"):
                    data = normalised(data.decode(), work, name).encode()
                files[os.path.relpath(path, root)] = hashlib.sha256(data).hexdigest()
        canonical = json.dumps(report, sort_keys=True, separators=(",", ":")).encode()
        out[name] = {"report": hashlib.sha256(canonical).hexdigest(), "findings": len(report["findings"]),
                     "groups": len(report["groups"]), "files": files}
    return out


def main():
    mode = sys.argv[1]
    if mode == "diff":
        return diff(sys.argv[2], sys.argv[3])
    bin_, worker, work = sys.argv[2:5]
    run_campaigns(bin_, worker, work)
    now = digests(work)
    if mode == "update":
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                text=True).stdout.strip()
        with open(LOCK, "w") as f:
            json.dump({"format": FORMAT, "format_version": 1, "recorded_at": commit or "unknown",
                       "command": "python3 tests/python/behaviour_lock.py update DRIFTCHECK FAULT_WORKER WORK_DIR",
                       "campaigns": {k: {"args": CAMPAIGNS[k], **v} for k, v in now.items()}}, f, indent=1,
                      sort_keys=True)
            f.write("\n")
        print(f"behaviour_lock: recorded {len(now)} campaigns in {os.path.normpath(LOCK)}")
        return 0
    with open(LOCK) as f:
        lock = json.load(f)
    if lock.get("format") != FORMAT:
        sys.exit(f"FAIL: {LOCK} is not a {FORMAT} file")
    problems = []
    for name, want in lock["campaigns"].items():
        got = now.get(name)
        if got is None or want["args"] != CAMPAIGNS[name]:
            problems.append(f"{name}: the campaign's arguments changed; update the lock on purpose")
            continue
        if got["report"] != want["report"]:
            problems.append(f"{name}: report.json moved ({want['findings']} -> {got['findings']} findings, "
                            f"{want['groups']} -> {got['groups']} groups)")
        moved = sorted(k for k in set(want["files"]) | set(got["files"]) if want["files"].get(k) != got["files"].get(k))
        if moved:
            problems.append(f"{name}: {len(moved)} bundle files moved, first {moved[0]}")
    for p in problems:
        print("FAIL:", p)
    if problems:
        print(f"(recorded at {lock.get('recorded_at')}; keep WORK_DIR of both builds and run "
              f"`behaviour_lock.py diff DIR_A DIR_B` to see the first differences)")
        return 1
    print(f"behaviour_lock: {len(now)} campaigns bit-identical to the lock recorded at {lock.get('recorded_at')} "
          f"({sum(len(v['files']) for v in now.values())} bundle files)")
    return 0


def diff(a, b):
    for name in CAMPAIGNS:
        ra = stripped(json.loads(normalised(open(os.path.join(a, name, "report.json")).read(), a, name)))
        rb = stripped(json.loads(normalised(open(os.path.join(b, name, "report.json")).read(), b, name)))
        shown = 0
        for line in differences(ra, rb, name):
            print(line)
            shown += 1
            if shown == 20:
                break
    return 0


def differences(x, y, path):
    if type(x) is not type(y):
        yield f"{path}: {str(x)[:100]} | {str(y)[:100]}"
    elif isinstance(x, dict):
        for k in sorted(set(x) | set(y)):
            if k not in x or k not in y:
                yield f"{path}/{k}: in one only"
            else:
                yield from differences(x[k], y[k], f"{path}/{k}")
    elif isinstance(x, list):
        if len(x) != len(y):
            yield f"{path}: {len(x)} items | {len(y)}"
        for i, (u, v) in enumerate(zip(x, y)):
            yield from differences(u, v, f"{path}[{i}]")
    elif x != y:
        yield f"{path}: {str(x)[:100]} | {str(y)[:100]}"


if __name__ == "__main__":
    sys.exit(main())
