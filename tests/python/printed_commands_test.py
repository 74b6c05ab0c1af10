"""Every command driftcheck prints runs as printed and reproduces what it names (docs/CAMPAIGN.md "Replay").

A campaign over an external backend (the NumPy RMSNorm with its planted stride bug, through the Python runner),
the same from a compile set (its stream replays must carry --compile-set), and a gate over the same backend, all
started from a scratch folder with a relative backends path. Every
`driftcheck ...` command they print is collected: the summary on stderr, report.json, report.md, report.html,
every bundle's finding.json, the gate's summary.md and junit.xml. Each is run as printed (the word `driftcheck`
being the binary under test), from the folder the campaign ran in: a replay must exit 1 and print FAIL with the
verdict of the finding it belongs to, a `corpus add` must exit 0. Then the bundle's record of its backends file:
replaying with the file changed is refused with exit 2 and one line.
  printed_commands_test.py DRIFTCHECK REPO_ROOT WORK_DIR"""
import html
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

bin_, root, work = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
problems = []
BACKEND = "ext.numpy.rmsnorm.planted_stride_ignored"


def check(ok, what):
    if not ok:
        problems.append(what)


def run(args, **kw):
    return subprocess.run(args, cwd=work, capture_output=True, text=True, timeout=600, **kw)


shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
# The backends file beside the campaign, named by a relative path, as a user would.
shutil.copy(os.path.join(root, "examples/python/rmsnorm_numpy.toml"), os.path.join(work, "k.toml"))
shutil.copy(os.path.join(root, "examples/python/rmsnorm_numpy.py"), os.path.join(work, "rmsnorm_numpy.py"))
toml = os.path.join(work, "k.toml")
with open(toml) as f:
    # The worker runs with this interpreter (the one ctest found with NumPy), not whatever `python3` PATH finds.
    text = f.read().replace("../../python", os.path.join(root, "python"))
    text = text.replace('command = ["python3",', f'command = [{json.dumps(sys.executable)},')
with open(toml, "w") as f:
    f.write(text)

fuzz = run([bin_, "fuzz", "--backends", "k.toml", "--backend", BACKEND, "--cases", "120", "--jobs", "2",
            "--seed", "4", "--out", "camp", "--progress", "none"])
check(fuzz.returncode == 1, f"campaign exit {fuzz.returncode}: {fuzz.stderr[-2000:]}")

# (command, verdict it must reproduce or None, where it was printed)
commands = []


def collect(text, where, verdict=None):
    for m in re.finditer(r"driftcheck (?:replay|corpus add|golden verify)[^`\n<\"]*", text):
        commands.append((html.unescape(m.group(0)).strip(), verdict, where))


def collect_campaign(out, stderr):
    collect(stderr, f"{out} summary")
    with open(os.path.join(work, out, "report.json")) as f:
        report = json.load(f)
    for g in report["groups"]:
        commands.append((g["replay"], g["verdict"], f"{out}/report.json group {g['id']}"))
        for m in g["members"]:
            commands.append((m["replay"], g["verdict"], f"{out}/report.json member {m['id']}"))
    for fi in report["findings"]:
        commands.append((fi["replay"], fi["verdict"], f"{out}/report.json finding {fi['id']}"))
    for h in report["heatmaps"]:
        commands.append((h["replay"], None, f"{out}/report.json heatmap"))
    for name in ("report.md", "report.html"):
        with open(os.path.join(work, out, name)) as f:
            collect(f.read(), f"{out}/{name}")
    findings = os.path.join(work, out, "findings")
    for d in sorted(os.listdir(findings)):
        with open(os.path.join(findings, d, "finding.json")) as f:
            fj = json.load(f)
        commands.append((fj["replay"], fj["verdict"], f"{out}/{d}/finding.json replay"))
        commands.append((fj["replay_stream"], None, f"{out}/{d}/finding.json replay_stream"))
    return report


collect_campaign("camp", fuzz.stderr)

# The same kernel fuzzed from a compile set (docs/CAMPAIGN.md "Compile sets"): its stream replays carry the flag,
# and without it they would draw other cases.
fuzz_set = run([bin_, "fuzz", "--backends", "k.toml", "--backend", BACKEND, "--cases", "60", "--jobs", "2",
                "--seed", "4", "--compile-set", "6", "--out", "camp_set", "--progress", "none"])
check(fuzz_set.returncode == 1, f"compile-set campaign exit {fuzz_set.returncode}: {fuzz_set.stderr[-2000:]}")
report_set = collect_campaign("camp_set", fuzz_set.stderr)
check(report_set.get("stream") == "--compile-set 6", f"compile-set campaign stream: {report_set.get('stream')}")
set_streams = [c for c, _, where in commands if where.startswith("camp_set") and " --seed " in c]
check(set_streams and all("--compile-set 6" in c for c in set_streams),
      f"compile-set stream replays without the flag: {set_streams[:3]}")

# The gate over the same backend: its summary and JUnit print the commands that replay its failures.
with open(os.path.join(work, "gate.toml"), "w") as f:
    f.write(f'format_version = 1\n[gate]\nbackends_file = "k.toml"\nbackends = ["{BACKEND}"]\nseed = 4\n'
            'cases = 60\nbaseline = "baseline.json"\n\n[budgets.default]\nallowed_verdicts = ["pass"]\n'
            'max_ratio = 1.0\nmax_share_beyond = 0.0\n')
gate = run([bin_, "gate", "--config", "gate.toml", "--out", "gate", "--progress", "none"])
check(gate.returncode == 1, f"gate exit {gate.returncode}: {gate.stderr[-2000:]}")
with open(os.path.join(work, "gate/summary.md")) as f:
    collect(f.read(), "gate summary.md")
for case in ET.parse(os.path.join(work, "gate/junit.xml")).getroot().iter("testcase"):
    for child in case:
        collect((child.text or "") + " " + (child.get("message") or ""), "gate junit.xml")

seen = {}
for cmd, verdict, where in commands:
    if cmd in seen:
        continue
    seen[cmd] = where
    argv = shlex.split(cmd)
    check(argv[0] == "driftcheck", f"{where}: not a driftcheck command: {cmd}")
    r = run([bin_] + argv[1:])
    if argv[1] == "corpus":
        check(r.returncode == 0, f"{where}: `{cmd}` exit {r.returncode}: {r.stderr.strip()}")
        continue
    check(r.returncode == 1, f"{where}: `{cmd}` exit {r.returncode}: {r.stderr.strip()}")
    check("\nFAIL " in "\n" + r.stdout, f"{where}: `{cmd}` printed no FAIL line: {r.stdout[-500:]}")
    if verdict:
        check(f"FAIL {BACKEND} {verdict}:" in r.stdout, f"{where}: `{cmd}` did not reproduce {verdict}: {r.stdout}")
check(any(c.startswith("driftcheck replay camp/findings/") for c in seen), "no bundle replay was printed")
check(any("--backends" in c for c in seen), "no stream replay naming its backends file was printed")
check(any(c.startswith("driftcheck corpus add") for c in seen), "no corpus command was printed")

# A bundle names its backends file by its hash: a changed file is refused, with the way out in one line.
bundle = next(c for c in seen if c.startswith("driftcheck replay camp/findings/"))
with open(toml, "a") as f:
    f.write("# edited after the campaign\n")
r = run([bin_] + shlex.split(bundle)[1:])
check(r.returncode == 2, f"replay after the backends file changed: exit {r.returncode}")
check(len(r.stderr.strip().splitlines()) == 1 and "has changed since the bundle was written" in r.stderr,
      f"replay after the backends file changed: {r.stderr!r}")

for p in problems:
    print("FAIL:", p)
if not problems:
    print(f"printed_commands: {len(seen)} distinct commands printed by a campaign and a gate ran as printed")
sys.exit(1 if problems else 0)
