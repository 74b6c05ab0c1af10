#!/usr/bin/env python3
"""Throughput of a kernel compiled just in time, with and without a compile set, measured in one run
(docs/CAMPAIGN.md "Compile sets"; issue #24 item 5).

    bench/compile_set_bench.py DRIFTCHECK OUT_DIR --backends FILE --backend NAME [--compile-set 8]
                               [--jobs 1,16] [--seconds 20] [--warm-cases 200] [--seed 5]

For the compile set K (default: the one the backends file declares) and for none (0), it first runs a warm-up
campaign of --warm-cases cases with one job (the K specialisations compile once and land in the JIT's on-disk
cache: Triton's ~/.triton/cache, inductor's /tmp/torchinductor_$USER), then one timed campaign per --jobs value
with the same seed, each a fresh process whose workers load what the warm-up compiled. Without a set, the warm-up
compiles what its cases meet; the timed campaigns go past them and compile on most new cases, as a user's campaign
does. It prints a Markdown table: cases judged per second of discovery, the backend's cases run and declined,
worker restarts, wall time; and the goals of issue #24 (the Triton example at >= 100 cases/s with 1 job after
warm-up and >= 1,000 with 16). Goal lines hold only for the set; the no-set rows are the anchor."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time


def campaign(binary, out, args, jobs, compile_set, seconds=None, cases=None):
    shutil.rmtree(out, ignore_errors=True)
    cmd = [binary, "fuzz", "--backends", args.backends, "--backend", args.backend, "--seed", str(args.seed),
           "--jobs", str(jobs), "--compile-set", str(compile_set), "--shrink-seconds", "0", "--out", out,
           "--progress", "none"]
    cmd += ["--seconds", str(seconds)] if seconds else ["--cases", str(cases)]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode not in (0, 1):
        sys.exit(f"compile_set_bench: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    phases = {ph["name"]: ph["seconds"] for ph in report.get("phases", [])}
    backend = next(b for b in report["backends"] if b["name"] == args.backend)
    discovery = phases.get("discovery", report["seconds"])
    return {"jobs": jobs, "set": compile_set, "wall": wall, "cases": report["cases"], "discovery": discovery,
            "rate": report["cases"] / discovery if discovery > 0 else 0.0, "run": backend["cases_run"],
            "declined": backend["unsupported"], "restarts": backend.get("worker_restarts", 0),
            "errors": report["errors"], "stream": report.get("stream", ""), "command": " ".join(cmd)}


def declared_set(binary, args):
    p = subprocess.run([binary, "list", "--backends", args.backends], capture_output=True, text=True)
    lines = p.stdout.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(args.backend + " "):
            for follow in lines[i + 1:]:
                if not follow.startswith("      "):
                    break
                if follow.strip().startswith("compile set: "):
                    return int(follow.strip().split()[2])
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("driftcheck")
    ap.add_argument("out")
    ap.add_argument("--backends", required=True)
    ap.add_argument("--backend", required=True)
    ap.add_argument("--compile-set", type=int, help="default: the backends file's compile_set")
    ap.add_argument("--jobs", default="1,16")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warm-cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    k = args.compile_set if args.compile_set is not None else declared_set(args.driftcheck, args)
    if k <= 0:
        sys.exit(f"compile_set_bench: {args.backend} declares no compile set; pass --compile-set K")
    jobs = [int(j) for j in args.jobs.split(",")]
    rows = []
    for s in (k, 0):
        warm = campaign(args.driftcheck, os.path.join(args.out, f"set{s}", "warm"), args, 1, s,
                        cases=args.warm_cases)
        print(f"warm-up, compile set {s}: {warm['cases']} cases in {warm['wall']:.1f} s "
              f"({warm['rate']:.1f} cases/s of discovery)", flush=True)
        for j in jobs:
            rows.append(campaign(args.driftcheck, os.path.join(args.out, f"set{s}", f"jobs{j}"), args, j, s,
                                 seconds=args.seconds))
    print(f"\n{args.backend} ({args.backends}), seed {args.seed}, --seconds {args.seconds:g} after a warm-up of "
          f"{args.warm_cases} cases\n")
    print("| compile set | jobs | cases | discovery s | cases/s | run | declined | worker restarts | wall s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['set'] or 'none'} | {r['jobs']} | {r['cases']} | {r['discovery']:.2f} | {r['rate']:.1f} | "
              f"{r['run']} | {r['declined']} | {r['restarts']} | {r['wall']:.1f} |")
    for r in rows:
        for e in r["errors"]:
            print(f"error (set {r['set']}, {r['jobs']} jobs): {e}")
    print()
    by = {(r["set"], r["jobs"]): r for r in rows}
    for j, goal in ((1, 100.0), (16, 1000.0)):
        if (k, j) in by:
            rate = by[(k, j)]["rate"]
            print(f"goal (issue #24, for the Triton example): {j} job{'s' if j > 1 else ''} with compile set {k} >= {goal:g} cases/s: {rate:.1f} "
                  f"({'met' if rate >= goal else 'NOT met'})")
        if (k, j) in by and (0, j) in by and by[(0, j)]["rate"] > 0:
            print(f"compile set {k} / none at {j} jobs: {by[(k, j)]['rate'] / by[(0, j)]['rate']:.1f}x")
    print("\ncommands:")
    for r in rows:
        print(f"  {r['command']}")


if __name__ == "__main__":
    main()
