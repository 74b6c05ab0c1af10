#!/usr/bin/env python3
"""Two driftcheck binaries' campaign throughput, measured alternately in one run.

    bench/binary_compare.py BEFORE AFTER OUT_DIR [--ops rmsnorm,attention] [--jobs 1,2] [--seconds 6]
                            [--repeats 3] [--backend 'cpu.*'] [--seed 5]

For each op and --jobs value it runs the two binaries' campaigns (same stream, same budget) one after the other,
--repeats times, so that load from elsewhere falls on both alike, and prints a Markdown table: the median
checks per second of discovery of each, their ratio, and the median user and system CPU seconds and minor page
faults (getrusage of the campaign process). Reads the rows as bench/campaign_scaling.py writes them."""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from campaign_scaling import run_one  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("out")
    ap.add_argument("--ops", default="rmsnorm,attention")
    ap.add_argument("--jobs", default="1,2")
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backend", default="cpu.*")
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    env = dict(os.environ)
    print(f"before: {args.before}\nafter: {args.after}\n--backend '{args.backend}' --seconds {args.seconds:g} "
          f"--seed {args.seed}, {args.repeats} alternating runs each, medians\n")
    print("| op | jobs | before checks/s | after checks/s | after / before | user s (b / a) | sys s (b / a) | "
          "minor faults (b / a) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for op in args.ops.split(","):
        args.op = op
        for jobs in (int(j) for j in args.jobs.split(",")):
            rows = {"before": [], "after": []}
            for r in range(args.repeats):
                for name in ("before", "after"):
                    binary = getattr(args, name)
                    row = run_one(binary, os.path.join(args.out, f"{op}-{jobs}-{name}-{r}"), jobs, args, env)
                    row["rate"] = row["checks"] / row["discovery"] if row["discovery"] > 0 else 0.0
                    rows[name].append(row)

            def med(name, key):
                return statistics.median(x[key] for x in rows[name])

            b, a = med("before", "rate"), med("after", "rate")
            print(f"| {op} | {jobs} | {b:.1f} | {a:.1f} | {a / b if b > 0 else 0:.2f} | "
                  f"{med('before', 'user'):.1f} / {med('after', 'user'):.1f} | "
                  f"{med('before', 'sys'):.2f} / {med('after', 'sys'):.2f} | "
                  f"{med('before', 'minflt'):.0f} / {med('after', 'minflt'):.0f} |", flush=True)


if __name__ == "__main__":
    main()
