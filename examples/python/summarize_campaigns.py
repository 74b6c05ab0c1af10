"""Summarises the campaigns gpu-campaigns.sh ran: per external backend cases, rate and verdicts; whether each
correct example was clean and each planted bug was found; the protocol's overhead per run request and the
external/built-in rate on the same cases.

    python3 summarize_campaigns.py DIR   # reads DIR/*/report.json and DIR/*.stats, writes DIR/summary.md

A backend named `*.planted_*` must have findings; any other must have run cases and have none (known findings, the
upstream defects a twin reproduces, are not findings), or only findings that expected-findings.toml lists (the real
kernel's own behaviour, each with what was seen and where); one that is unavailable on the machine (no vllm, no Triton)
is listed with its reason. Exits 1 when any result is unexpected. Pair campaigns (DIR/pair-*/) hold an
external and a built-in backend on the same cases with the same declared numerics, so both ran the same number
of times per case (metamorphic reruns included): the difference of their check times divided by the external's
run requests (counted by the Python worker, DIR/pair-*.stats) is the protocol's cost per request.
"""

import glob
import json
import os
import sys
import tomllib


def load_reports(d):
    reports = {}
    for path in sorted(glob.glob(os.path.join(d, "*", "report.json"))):
        with open(path) as f:
            reports[os.path.basename(os.path.dirname(path))] = json.load(f)
    return reports


def load_stats(d, name):
    """Summed worker-side counts of a campaign: run requests, seconds inside the worker, kernel ms."""
    path = os.path.join(d, name + ".stats")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        lines = [json.loads(x) for x in f if x.strip()]
    return {"workers": len(lines), "runs": sum(x["run"]["count"] for x in lines),
            "seconds": sum(x["run"]["seconds"] for x in lines), "kernel_ms": sum(x["kernel_ms"] for x in lines)}


def load_expected(path=os.path.join(os.path.dirname(os.path.abspath(__file__)), "expected-findings.toml")):
    """The listed findings of correct examples (expected-findings.toml says what each means)."""
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    if doc.get("format") != "driftcheck.example-findings" or doc.get("version") != 1:
        sys.exit(f"{path}: not a driftcheck.example-findings file of version 1")
    return doc.get("finding", [])


def listing(group, expected):
    """The id of the entry that lists a finding group, or None."""
    for e in expected:
        if group["backend"] not in e["backends"] or group["verdict"] not in e["verdicts"]:
            continue
        if not set(e.get("features", [])) <= set(group["features"]):
            continue
        inputs = e.get("inputs")
        if inputs and not all(m["shape_class"].endswith(tuple(inputs)) for m in group["members"]):
            continue
        return e["id"]
    return None


def result(b, unavailable, report=None, expected=()):
    if b["name"] in unavailable:
        return "unavailable: " + unavailable[b["name"]]
    if b["cases_run"] == 0:
        return "NO CASES RUN" + (f": {b['error']}" if b["error"] else "")
    if ".planted_" in b["name"]:
        return "caught" if b["distinct_findings"] else "NOT CAUGHT"
    if b["distinct_findings"] == 0:
        return "clean"
    groups = [g for g in (report or {}).get("groups", []) if g["backend"] == b["name"]]
    ids = [listing(g, expected) for g in groups]
    if groups and all(ids):
        return "clean but for listed findings: " + ", ".join(sorted(set(ids)))
    unlisted = [f"{g['verdict']} {g['features']}" for g, i in zip(groups, ids) if i is None]
    return "FINDINGS" + (f": not listed: {'; '.join(unlisted)}" if unlisted else "")


def worst_cell(b):
    """The backend's worst case as the report says it: a ratio, or what its verdict was (NaN/Inf, no output)."""
    ratio, verdict = b.get("worst_ratio"), b.get("worst_verdict", "")
    if ratio is None:
        return "-"
    ratio = float(ratio)  # "inf" and "nan" are strings in report.json
    if verdict in ("error", "crash", "timeout"):
        return f"no output: {verdict}"
    if verdict in ("nan_mismatch", "inf_mismatch") or ratio != ratio or ratio == float("inf"):
        return "NaN/Inf"
    return f"{ratio:.3g}" + (f" ({verdict})" if verdict else "")


def unavailable_map(r):
    """Backends this machine cannot run (no vllm, no Triton): those the campaign listed as unavailable, and those
    it was asked for by name, which then ran zero cases saying why ("... ran zero cases: unavailable: WHY")."""
    out = {}
    for u in r.get("unavailable", []):
        name, _, why = u.partition(":")
        out[name.strip()] = why.strip()
    for b in r["backends"]:
        marker = " ran zero cases: unavailable: "
        if b["cases_run"] == 0 and marker in (b.get("error") or ""):
            out[b["name"]] = b["error"].split(marker, 1)[1]
    return out


def campaigns_table(d, reports):
    lines = ["| backend | result | cases run | unsupported | cases/s | worst ratio | failures | top unsupported | "
             "worker ms/run (kernel) |", "|---|---|---:|---:|---:|---:|---|---|---:|"]
    unexpected = []
    expected = load_expected()
    for name, r in reports.items():
        if name.startswith("pair-"):
            continue
        unavailable = unavailable_map(r)
        for b in r["backends"]:
            if not b["name"].startswith("ext."):
                continue
            res = result(b, unavailable, r, expected)
            failures = ", ".join(f"{v} {n}" for v, n in b["failures_by_verdict"].items()) or "-"
            reasons = "; ".join(f"{x['reason']} ({x['count']}x)" for x in b["top_unsupported_reasons"][:2]) or "-"
            rate = b["cases_run"] / r["seconds"] if r["seconds"] else 0.0
            st = load_stats(d, name)
            worker = f"{1e3 * st['seconds'] / st['runs']:.3f} ({st['kernel_ms'] / st['runs']:.3f})" if st and \
                st["runs"] else "-"
            worst = worst_cell(b)
            lines.append(f"| {b['name']} | {res} | {b['cases_run']} | {b['unsupported']} | {rate:.1f} | "
                         f"{worst} | {failures} | {reasons} | {worker} |")
            if res.split(":")[0] in ("NO CASES RUN", "NOT CAUGHT", "FINDINGS"):
                unexpected.append(f"{b['name']}: {res}")
        for e in r.get("errors", []):
            if not any(n in e for n in unavailable):
                unexpected.append(f"{name}: {e}")
    return lines, unexpected


def findings_of_correct_backends(reports, per_backend=4):
    """What a correct backend was found doing, one line per finding (verdict, shape class, detail), so that the
    summary alone says why without the campaign archive."""
    rows = []
    for name, r in reports.items():
        seen = {}
        for f in r.get("findings", []):
            b = f["backend"]
            if ".planted_" in b or seen.get(b, 0) >= per_backend:
                continue
            seen[b] = seen.get(b, 0) + 1
            detail = " ".join(str(f.get("detail", "")).split())[:300]
            rows.append(f"- {b} ({name}): {f['verdict']} on {f.get('shape_class', '?')}: {detail}")
    return rows


def missing_reports(d, reports):
    """Campaigns that wrote no report (a backend that failed its handshake is bad input: exit 2): their log's
    last line says why."""
    rows = []
    for log in sorted(glob.glob(os.path.join(d, "*.log"))):
        name = os.path.basename(log)[:-4]
        if name in reports:
            continue
        with open(log) as f:
            last = ([x.strip() for x in f if x.strip()] or ["(empty log)"])[-1]
        rows.append(f"{name}: no report: {last}")
    return rows


def per_case_ms(b):
    n = b["cases_run"] + b["unsupported"]
    return 1e3 * b["check_seconds"] / n if n else float("nan")


def pairs_table(d, reports):
    lines = ["| pair | backend | cases run | check ms per case | result |", "|---|---|---:|---:|---|"]
    for name, r in reports.items():
        if not name.startswith("pair-"):
            continue
        unavailable = unavailable_map(r)
        ext = [b for b in r["backends"] if b["name"].startswith("ext.")]
        builtin = [b for b in r["backends"] if not b["name"].startswith("ext.")]
        for b in ext + builtin:
            lines.append(f"| {name} | {b['name']} | {b['cases_run']} | {per_case_ms(b):.4f} | "
                         f"{result(b, unavailable)} |")
        st = load_stats(d, name)
        if ext and builtin and ext[0]["cases_run"] and builtin[0]["cases_run"]:
            e, g = ext[0], builtin[0]
            ratio = per_case_ms(g) / per_case_ms(e)
            extra = ""
            if st and st["runs"]:
                per_request = (e["check_seconds"] - g["check_seconds"]) / st["runs"] * 1e3
                extra = f"; **{per_request:.4f} ms per run request** over {st['runs']} requests"
            lines.append(f"| {name} | external vs built-in | | | rate ratio {ratio:.2f}{extra} |")
    return lines


def main(d):
    reports = load_reports(d)
    camp, unexpected = campaigns_table(d, reports)
    unexpected += missing_reports(d, reports)
    text = "\n".join(
        ["# Example runners: campaigns", ""] + camp
        + ["", "## External vs built-in on the same cases", ""] + pairs_table(d, reports)
        + ["", f"{len(unexpected)} unexpected results" + (":" if unexpected else ".")]
        + [f"- {u}" for u in unexpected]
        + ["", "## Findings of the correct backends (the first few of each)", ""]
        + (findings_of_correct_backends(reports) or ["none"])) + "\n"
    with open(os.path.join(d, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    # A correct example with a finding, a planted bug not caught or a campaign that could not run fails the run
    # (.ci/gpu-check's examples part).
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
