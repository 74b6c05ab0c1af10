#!/usr/bin/env python3
"""Time budgets and scaling of `driftcheck fuzz`, measured in one run (docs/CAMPAIGN.md "Time budget").

    bench/campaign_scaling.py DRIFTCHECK OUT_DIR [--jobs 1,4,16] [--op attention] [--backend 'cpu.*']
                              [--seconds 10] [--seed 5] [--env K=V ...] [--label NAME] [--processes]

Runs one campaign per --jobs value with the same stream and budget, and prints a Markdown table: wall time of the
whole process against the budget (the goal: within budget + max(1 s, 5%)), the phases the report shows, cases and
checks, checks per second of discovery and its ratio to the one-job rate divided by the job count (1.0 is linear
scaling), cases abandoned at the deadline, and what the process cost the machine (user and system CPU seconds,
minor page faults, voluntary context switches: lock waits and sleeps) from getrusage. --env runs every campaign with
that environment variable set (an allocator tunable, DRIFTCHECK_REFERENCE=cpu) so that two rows of one run can be
compared. --processes adds, for each --jobs value J above 1, a row of J separate one-job processes run at once (the
shards i/J of the same stream, --shard): the machine's own scaling with nothing shared between the workers (no
lock, no allocator, no cache line), against which the in-process rows are read."""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time


def run_one(binary, out, jobs, args, env):
    shutil.rmtree(out, ignore_errors=True)
    cmd = [binary, "fuzz", "--op", args.op, "--backend", args.backend, "--seconds", str(args.seconds), "--seed",
           str(args.seed), "--jobs", str(jobs), "--out", out, "--progress", "none"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in (0, 1):
        sys.exit(f"campaign_scaling: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    phases = {ph["name"]: ph["seconds"] for ph in report.get("phases", [])}
    return {
        "jobs": jobs, "wall": wall, "exit": p.returncode, "cases": report["cases"], "checks": report["checks"],
        "discovery": phases.get("discovery", report["seconds"]), "phases": phases,
        "abandoned": report.get("cases_abandoned", 0), "not_started": report.get("cases_not_started", 0),
        "heatmaps_left_out": report.get("heatmaps_left_out", 0),
        "user": after.ru_utime - before.ru_utime, "sys": after.ru_stime - before.ru_stime,
        "minflt": after.ru_minflt - before.ru_minflt, "nvcsw": after.ru_nvcsw - before.ru_nvcsw,
        "command": " ".join(cmd),
    }


def run_processes(binary, out, n, args, env):
    """n one-job campaigns at once, shard i/n each; their checks over the longest discovery."""
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    procs = []
    for i in range(n):
        d = os.path.join(out, f"shard{i}")
        cmd = [binary, "fuzz", "--op", args.op, "--backend", args.backend, "--seconds", str(args.seconds), "--seed",
               str(args.seed), "--jobs", "1", "--shard", f"{i}/{n}", "--out", d, "--progress", "none"]
        procs.append((subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True),
                      d, cmd))
    rows = []
    for p, d, cmd in procs:
        _, err = p.communicate()
        if p.returncode not in (0, 1):
            sys.exit(f"campaign_scaling: {' '.join(cmd)} exited {p.returncode}:\n{err[-2000:]}")
        with open(os.path.join(d, f"shard-{len(rows)}-of-{n}", "report.json")) as f:
            rows.append(json.load(f))
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    discovery = [next((ph["seconds"] for ph in r.get("phases", []) if ph["name"] == "discovery"), r["seconds"])
                 for r in rows]
    return {
        "jobs": n, "label": f"{n} x 1 job", "wall": wall, "exit": 0, "cases": sum(r["cases"] for r in rows),
        "checks": sum(r["checks"] for r in rows),
        # Each process's rate over its own discovery: the machine's throughput with n independent workers.
        "rate": sum(r["checks"] / t for r, t in zip(rows, discovery) if t > 0),
        "discovery": max(discovery), "phases": {},
        "abandoned": sum(r.get("cases_abandoned", 0) for r in rows),
        "not_started": sum(r.get("cases_not_started", 0) for r in rows),
        "heatmaps_left_out": sum(r.get("heatmaps_left_out", 0) for r in rows),
        "user": after.ru_utime - before.ru_utime, "sys": after.ru_stime - before.ru_stime,
        "minflt": after.ru_minflt - before.ru_minflt, "nvcsw": after.ru_nvcsw - before.ru_nvcsw,
        "command": "",
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("driftcheck")
    ap.add_argument("out")
    ap.add_argument("--jobs", default="1,4,16")
    ap.add_argument("--op", default="attention")
    ap.add_argument("--backend", default="cpu.*")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--label", default="")
    ap.add_argument("--processes", action="store_true")
    args = ap.parse_args()
    env = dict(os.environ)
    for kv in args.env:
        k, _, v = kv.partition("=")
        env[k] = v
    rows = []
    for j in map(int, args.jobs.split(",")):
        rows.append(run_one(args.driftcheck, os.path.join(args.out, f"jobs{j}"), j, args, env))
        if args.processes and j > 1:
            rows.append(run_processes(args.driftcheck, os.path.join(args.out, f"procs{j}"), j, args, env))
    slack = max(1.0, 0.05 * args.seconds)
    print(f"\n{args.label or 'campaigns'}: --op {args.op} --backend '{args.backend}' --seconds {args.seconds:g} "
          f"--seed {args.seed}{''.join(' ' + e for e in args.env)}; goal: wall <= {args.seconds + slack:.2f} s\n")
    print("| jobs | wall s | within goal | discovery s | after discovery s | cases | checks | checks/s | "
          "scaling | not started | abandoned | heatmaps left out | user s | sys s | minor faults | vol. ctx switches |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = None
    for r in rows:
        rate = r.get("rate", r["checks"] / r["discovery"] if r["discovery"] > 0 else 0.0)
        if base is None and r["jobs"] == 1:
            base = rate
        scaling = f"{rate / (base * r['jobs']):.2f}" if base else "-"
        after = sum(v for k, v in r["phases"].items() if k != "discovery")
        print(f"| {r.get('label', r['jobs'])} | {r['wall']:.2f} | {'yes' if r['wall'] <= args.seconds + slack else 'NO'} | "
              f"{r['discovery']:.2f} | {after:.2f} | {r['cases']} | {r['checks']} | {rate:.1f} | {scaling} | "
              f"{r['not_started']} | {r['abandoned']} | {r['heatmaps_left_out']} | {r['user']:.1f} | {r['sys']:.1f} | {r['minflt']} | "
              f"{r['nvcsw']} |")
    return 0 if all(r["wall"] <= args.seconds + slack for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
