"""Checks the reports of campaigns whose every judged case fails without a ratio (tests/report_failures_test.sh):
no summary may read as passing.
  report_failures_check.py WORK FAULT...
WORK/FAULT is the campaign of ext.faulty.FAULT (its report.json, report.md and report.html.dom, the page after
headless Chromium rendered it); WORK/all.{json,md,html.dom} is `driftcheck report` over all of them. Prints one line
per problem and exits 1 when there is any."""
import json
import math
import re
import sys
from html.parser import HTMLParser

# What each fault must read as: the backend's worst verdict, its worst cell's text and the ratio report.json holds.
EXPECTED = {
    "nan": ("nan_mismatch", "NaN/Inf", math.inf),
    "error": ("error", "no output: backend error", math.nan),
    "crash": ("crash", "no output: worker crash", math.nan),
    "hang": ("timeout", "no output: timeout", math.nan),
}

problems = []


def check(ok, what):
    if not ok:
        problems.append(what)


def number(v):
    return float(v) if isinstance(v, str) else v  # "inf" and "nan" are strings in driftcheck's JSON


def same_nonfinite(v, expected):
    v = number(v)
    return math.isnan(v) if math.isnan(expected) else v == expected


def check_json(name, report, fault):
    verdict, _, ratio = EXPECTED[fault]
    for b in report["backends"]:
        where = f"{name}: backend {b['name']}"
        check(b["cases_run"] > 0, f"{where} ran no case")
        check(b["passed"] == 0, f"{where} passed {b['passed']} cases")
        check(b.get("worst_verdict") == verdict, f"{where} worst_verdict {b.get('worst_verdict')!r}, not {verdict}")
        check(same_nonfinite(b["worst_ratio"], ratio), f"{where} worst_ratio {b['worst_ratio']}, not {ratio}")
        for fmt, d in b["drift"].items():
            h = d["ratio_histogram"]
            counted = h["nonfinite"] if fault == "nan" else h.get("no_output", 0)
            check(counted == d["cases"], f"{where} {fmt}: {counted} of {d['cases']} cases counted as {verdict}")
            check(h["zeros"] == 0 and not h["bins"], f"{where} {fmt}: a ratio was binned: {h}")
            check(not math.isfinite(number(d["worst_ratio"])), f"{where} {fmt}: finite worst {d['worst_ratio']}")
            check(not math.isfinite(number(d["p99_ratio"])), f"{where} {fmt}: finite p99 {d['p99_ratio']}")
    check(report["groups"], f"{name}: no finding group")
    for g in report["groups"]:
        check(g["verdict"] == verdict, f"{name}: group {g['id']} verdict {g['verdict']}")
        check(same_nonfinite(g["worst_ratio"], ratio), f"{name}: group {g['id']} worst {g['worst_ratio']}")
    for f in report["findings"]:
        check(same_nonfinite(f["worst_ratio"], ratio), f"{name}: finding {f['id']} worst {f['worst_ratio']}")


def table_rows(md, heading):
    """The rows of the first table under `heading` in Markdown, as lists of cells."""
    part = md.split(heading, 1)[1]
    rows = []
    for line in part.splitlines()[2:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[2:] if rows and set(rows[1][0]) <= set("-:") else rows


def reads_as_passing(text):
    try:
        return float(text) <= 1
    except ValueError:
        return False


def check_markdown(name, md, faults):
    rows = table_rows(md, "## Backends")
    check(len(rows) == len(faults), f"{name}: {len(rows)} backend rows for {len(faults)} backends")
    for row in rows:
        fault = row[0].rsplit(".", 1)[1]
        worst = row[7]
        check(worst == EXPECTED[fault][1], f"{name}: {row[0]} worst cell {worst!r}, not {EXPECTED[fault][1]!r}")
        check(not reads_as_passing(worst), f"{name}: {row[0]} worst cell reads as passing: {worst!r}")
    for line in md.splitlines():
        m = re.match(r"1\. \*\*(\S+)\*\* .* — worst (.*) — `", line)
        if m:
            fault = m.group(1).rsplit(".", 1)[1]
            check(m.group(2) == EXPECTED[fault][1], f"{name}: group line of {m.group(1)} says worst {m.group(2)!r}")


class Page(HTMLParser):
    """Every table (its header cells and its rows of (class, text) cells), every badge, and the text of every SVG
    text element (Vega's axis labels)."""

    def __init__(self):
        super().__init__()
        self.tables, self.svg_text, self.badges = [], [], []
        self._cell = self._text = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"headers": [], "rows": []})
        if tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        if tag in ("td", "th"):
            self._cell = [tag, a.get("class") or "", ""]
        if tag == "text":
            self._text = ""
        if tag == "span" and "badge" in (a.get("class") or ""):
            self.badges.append(a["class"])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self.tables:
            kind, cls, text = self._cell
            table = self.tables[-1]
            if kind == "th" and not table["rows"][-1]:
                table["headers"].append(text.strip())
            else:
                table["rows"][-1].append((cls, text.strip()))
            self._cell = None
        if tag == "text" and self._text is not None:
            self.svg_text.append(self._text)
            self._text = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[2] += data
        if self._text is not None:
            self._text += data


def check_html(name, dom, faults):
    p = Page()
    p.feed(dom)
    plots = dom.count('class="plot"')
    rendered = re.search(r'data-plots-rendered="(\d+)"', dom)
    check(rendered and int(rendered.group(1)) == plots,
          f"{name}: {plots} plots, rendered {rendered.group(1) if rendered else None}")
    check(not re.search(r'data-spec="spec\d+">plot failed', dom), f"{name}: a plot failed")
    texts = set()
    for t in p.tables:
        # The columns that summarise how bad a backend or group is: worst, p99 and, in "Runs side by side",
        # every run's column.
        side_by_side = t["headers"][:1] == ["backend"] and t["headers"][1:] == faults
        for row in t["rows"]:
            for i, (cls, text) in enumerate(row):
                texts.add(text)
                check("pass" not in cls.split(), f"{name}: a cell styled as passing: {text!r}")
                header = t["headers"][i] if i < len(t["headers"]) else ""
                if "worst" in header or header == "p99" or (side_by_side and i > 0):
                    check(not reads_as_passing(text.split(" (")[0]),
                          f"{name}: column {header!r} reads as passing: {text!r}")
    check(not any("b-pass" in b for b in p.badges), f"{name}: a 'within tolerance' badge")
    for fault in faults:
        check(EXPECTED[fault][1] in texts, f"{name}: no cell reads {EXPECTED[fault][1]!r}")
        # The error distribution's bar for cases without a ratio, labelled on its axis.
        label = "NaN/Inf" if fault == "nan" else "no output"
        check(label in p.svg_text, f"{name}: the error histogram has no {label!r} bar")


def main():
    work, faults = sys.argv[1], sys.argv[2:]
    for fault in faults:
        d = f"{work}/{fault}"
        with open(f"{d}/report.json") as f:
            check_json(fault, json.load(f), fault)
        with open(f"{d}/report.md") as f:
            check_markdown(fault, f.read(), [fault])
        with open(f"{d}/report.html.dom") as f:
            check_html(fault, f.read(), [fault])
    with open(f"{work}/all.md") as f:
        md = f.read()
    for fault in faults:
        check(f"ext.faulty.{fault}" in md, f"all.md does not name ext.faulty.{fault}")
    with open(f"{work}/all.html.dom") as f:
        check_html("all", f.read(), faults)
    for line in problems:
        print("FAIL:", line)
    if not problems:
        print(f"report_failures: {len(faults)} campaigns failing by {', '.join(faults)}: no summary reads as passing")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
