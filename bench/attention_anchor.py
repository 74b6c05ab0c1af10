#!/usr/bin/env python3
"""A GPU attention campaign against the pytest anchor, measured in one run (issue: 100x the anchor's cases/s).

    bench/attention_anchor.py DRIFTCHECK OUT_DIR [--seconds 30] [--jobs 16] [--seed 5] [--pythonpath DIR]

Runs, one after the other on the same machine: the anchor, bench/attention_anchor/ (a plain parametrized pytest
suite comparing torch SDPA with a float32 reference, one test per case, as kernel repositories test attention),
then `driftcheck fuzz --op attention --backend 'gpu.*' --jobs J --seconds S`. Prints a Markdown table: the anchor's
tests, its pytest session time (junit XML) and whole-process wall time, each as cases per second; the campaign's
cases judged and discovery seconds (report.json) as cases per second; and the ratio of the campaign's rate to the
anchor's session rate (the figure; the goal is 100). --pythonpath puts a directory holding pytest in front of
PYTHONPATH (the GPU machine has torch but may lack pytest). Exits 1 when the anchor did not pass in full or the
campaign failed."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))


def run_anchor(out, pythonpath):
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    xml = os.path.join(out, "anchor.xml")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.join(HERE, "attention_anchor"),
           "--junitxml", xml]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    with open(os.path.join(out, "anchor.txt"), "w") as f:
        f.write(p.stdout + p.stderr)
    if not os.path.exists(xml):
        sys.exit(f"attention_anchor: pytest wrote no report (exit {p.returncode}):\n{(p.stdout + p.stderr)[-2000:]}")
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    return {"rc": p.returncode, "wall": wall, "session": float(suite.get("time")), **counts,
            "command": " ".join(cmd[1:])}


def run_campaign(driftcheck, out, args):
    d = os.path.join(out, "campaign")
    shutil.rmtree(d, ignore_errors=True)
    cmd = [driftcheck, "fuzz", "--op", "attention", "--backend", "gpu.*", "--jobs", str(args.jobs), "--seconds",
           str(args.seconds), "--seed", str(args.seed), "--out", d, "--progress", "none"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    with open(os.path.join(out, "campaign.txt"), "w") as f:
        f.write(p.stdout + p.stderr)
    if p.returncode not in (0, 1):
        sys.exit(f"attention_anchor: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    with open(os.path.join(d, "report.json")) as f:
        r = json.load(f)
    phases = {ph["name"]: ph["seconds"] for ph in r.get("phases", [])}
    return {"rc": p.returncode, "wall": wall, "cases": r["cases"], "checks": r["checks"],
            "discovery": phases.get("discovery", r["seconds"]), "findings": len(r.get("findings", [])),
            "backends": len(r.get("backends", [])), "command": " ".join(cmd)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("driftcheck")
    ap.add_argument("out")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--pythonpath", default="")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    a = run_anchor(args.out, args.pythonpath)
    c = run_campaign(args.driftcheck, args.out, args)
    ran = a["tests"] - a["skipped"]
    anchor_rate = ran / a["session"] if a["session"] > 0 else 0.0
    rate = c["cases"] / c["discovery"] if c["discovery"] > 0 else 0.0
    print(f"anchor: python3 {a['command']}\ncampaign: {c['command']}\n")
    print("| suite | cases | failed | seconds | cases/s |")
    print("|---|---|---|---|---|")
    print(f"| anchor (pytest session) | {ran} | {a['failures'] + a['errors']} | {a['session']:.2f} | "
          f"{anchor_rate:.1f} |")
    print(f"| anchor (whole process) | {ran} | | {a['wall']:.2f} | {ran / a['wall']:.1f} |")
    print(f"| driftcheck (discovery) | {c['cases']} | {c['findings']} findings | {c['discovery']:.2f} | {rate:.1f} |")
    print(f"| driftcheck (whole process) | {c['cases']} | | {c['wall']:.2f} | {c['cases'] / c['wall']:.1f} |")
    ratio = rate / anchor_rate if anchor_rate > 0 else float("nan")
    print(f"\nratio: driftcheck {rate:.1f} cases/s / anchor {anchor_rate:.1f} cases/s = {ratio:.1f}x (goal 100x); "
          f"{c['checks']} checks over {c['backends']} backends")
    ok = ran > 0 and a["rc"] == 0 and c["rc"] in (0, 1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
