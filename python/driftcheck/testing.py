"""Judging a kernel from a test: `driftcheck.fuzz(kernel, numerics=...)` runs a campaign on a kernel written with
the decorators, `driftcheck.gate(config)` runs `driftcheck gate` (docs/PYTHON.md, "pytest").

    import driftcheck as dc
    from mykernels import my_rmsnorm            # @dc.rmsnorm(tensors="torch") def my_rmsnorm(case): ...

    def test_my_rmsnorm():
        dc.fuzz(my_rmsnorm, numerics={"output_roundings": 2}, seconds=30)

`fuzz` writes a backends file for the kernel (its worker is `python3 -m driftcheck.kernel_worker MODULE:NAME`, run
by this interpreter with this process's sys.path), runs `driftcheck fuzz` on it and reads the campaign's
report.json. On a finding it raises DriftFound, an AssertionError whose message holds each finding group's line,
its shrunk case's shape and a replay command that runs as printed, and the report's path. A kernel driftcheck
cannot run (not importable, a numerics or supports key it does not know, a crash at start-up) raises
DriftcheckError: under the pytest plugin a test error with the reason, not a failure. A kernel unavailable on this
machine (it called `driftcheck.unavailable`, or wants a GPU that is not there) is skipped under pytest.

Nothing here imports pytest: the calls work from any script; the plugin (driftcheck.pytest_plugin) only adds the
command-line options, a folder per test, skips and the gate's per-check results.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from typing import Optional, Sequence, Union

from .api import Kernel

DEFAULT_SECONDS = 20.0  # driftcheck fuzz's own default budget
MARKER = "driftcheck-pytest.json"  # written into each folder these calls own, so a re-run may clear it


class DriftcheckError(Exception):
    """driftcheck could not judge the kernel (or run the gate): the reason is the message. The pytest plugin
    reports it as a test error, not a failure."""


class DriftFound(AssertionError):
    """The campaign found drift: the message lists the finding groups with their shrunk cases and replay
    commands; `result` is the FuzzResult."""

    def __init__(self, message: str, result: "FuzzResult"):
        super().__init__(message)
        self.result = result


class NothingJudged(AssertionError):
    """The kernel declined every case of the campaign (its supports), so nothing was judged."""


class GateFailed(AssertionError):
    """`driftcheck gate` failed: the message lists the failed checks; `result` is the GateResult."""

    def __init__(self, message: str, result: "GateResult"):
        super().__init__(message)
        self.result = result


class Unavailable(Exception):
    """The kernel cannot run on this machine (outside pytest; under the plugin the test is skipped)."""


@dataclasses.dataclass
class Settings:
    """What the pytest options (--driftcheck-seconds, -cases, -seed, -out) impose on every call; None: the call's
    own value."""

    seconds: Optional[float] = None
    cases: Optional[int] = None
    seed: Optional[int] = None
    out: Optional[str] = None


class Context:
    """Where calls run outside pytest: a fresh temporary folder each, no overrides."""

    settings = Settings()
    label = None

    def folder(self, kind: str, name: str) -> str:
        return tempfile.mkdtemp(prefix=f"driftcheck-{kind}-{name}-")

    def skip(self, reason: str) -> None:
        raise Unavailable(reason)

    def record(self, key: str, value: str) -> None:
        pass

    def report_checks(self, result: "GateResult") -> None:
        pass


_context: Context = Context()


def _set_context(ctx: Optional[Context]) -> None:
    """The pytest plugin installs its context around each test (and removes it after)."""
    global _context
    _context = ctx if ctx is not None else Context()


# ---- the driftcheck command -----------------------------------------------------------------------------------


def bundled_binary() -> str:
    """Where an installed package keeps its driftcheck command line (driftcheck/_bin/driftcheck)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "driftcheck")


def binary() -> str:
    """The driftcheck command these calls run: $DRIFTCHECK_BIN, else the one installed with this package, else
    `driftcheck` on PATH."""
    env = os.environ.get("DRIFTCHECK_BIN")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise DriftcheckError(f"DRIFTCHECK_BIN={env} is not an executable file")
        return os.path.abspath(env)
    bundled = bundled_binary()
    if os.access(bundled, os.X_OK):
        return bundled
    found = shutil.which("driftcheck")
    if found:
        return found
    raise DriftcheckError(
        "no driftcheck command: install this package with its command line (pip install ./python, "
        "docs/PYTHON.md) or set DRIFTCHECK_BIN to a built driftcheck (build/fuzz/driftcheck)")


def command_name(path: str) -> str:
    """How a printed command names the binary: `driftcheck` when that is what PATH finds (the same file, or this
    installation's console script running it), else its absolute path."""
    found = shutil.which("driftcheck")
    if found:
        if os.path.realpath(found) == os.path.realpath(path):
            return "driftcheck"
        scripts = sysconfig.get_path("scripts")
        if (os.path.realpath(path) == os.path.realpath(bundled_binary()) and scripts
                and os.path.realpath(os.path.dirname(found)) == os.path.realpath(scripts)):
            return "driftcheck"
    return shlex.quote(os.path.abspath(path))


def _run(argv: list, folder: str, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """Runs driftcheck with its stdout and stderr in FOLDER/driftcheck.log."""
    full = dict(os.environ)
    full.pop("DRIFTCHECK_BACKENDS", None)  # the call says which backends files it loads
    full.update(env or {})
    log = os.path.join(folder, "driftcheck.log")
    with open(log, "wb") as f:
        f.write(("$ " + " ".join(shlex.quote(a) for a in argv) + "\n").encode())
        f.flush()
        return subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=full, check=False)


def _log_problem(folder: str) -> str:
    """driftcheck's own error lines from the log (`driftcheck: ...`), else its last lines."""
    try:
        with open(os.path.join(folder, "driftcheck.log"), errors="replace") as f:
            lines = [l.rstrip("\n") for l in f][1:]
    except OSError:
        return "(no log)"
    ours = [l for l in lines if l.startswith("driftcheck:") or l.startswith("error:")]
    return "\n".join(ours[-5:] if ours else lines[-10:])


# ---- the backends file ----------------------------------------------------------------------------------------

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_value(v) -> str:
    """A TOML value (inline tables and arrays) for the types a backends file holds."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v:
            return "nan"
        if v in (float("inf"), float("-inf")):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        items = []
        for k, x in v.items():
            key = k if _BARE_KEY.match(str(k)) else json.dumps(str(k))
            items.append(f"{key} = {toml_value(x)}")
        return "{ " + ", ".join(items) + " }" if items else "{}"
    raise TypeError(f"{type(v).__name__} value {v!r} has no TOML form here")


@dataclasses.dataclass
class KernelRef:
    op: str
    target: str  # MODULE:NAME the worker imports
    file: Optional[str]  # the module's source file, the worker's fallback
    label: str  # for messages: "my_rmsnorm (kernels/rmsnorm.py)"


def kernel_ref(kernel: Union[Kernel, str]) -> KernelRef:
    """Where a worker process finds `kernel`: a Kernel object from a decorator, or "MODULE:NAME"."""
    from . import kernel_worker

    if isinstance(kernel, str):
        try:
            k = kernel_worker.load(kernel)
        except Exception as e:
            raise DriftcheckError(f"kernel {kernel} is not importable: {type(e).__name__}: {e}") from None
        module = sys.modules.get(kernel.partition(":")[0])
        file = getattr(module, "__file__", None)
        return KernelRef(k.op, kernel, file, f"{kernel}" + (f" ({_rel(file)})" if file else ""))
    if not isinstance(kernel, Kernel):
        raise DriftcheckError(f"{kernel!r} is not a kernel: decorate it with @driftcheck.rmsnorm, "
                              "@driftcheck.concat, @driftcheck.dual_rmsnorm_cat or @driftcheck.attention")
    fn = kernel.fn
    module_name = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", getattr(fn, "__name__", "?"))
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise DriftcheckError(
            f"kernel {qualname} is not importable: it is defined inside a function, and driftcheck runs the kernel "
            "in a worker process that imports it by name; define it at module level")
    module = sys.modules.get(module_name) if module_name else None
    file = getattr(module, "__file__", None)
    if module is None:
        raise DriftcheckError(f"kernel {qualname} is not importable: its module {module_name!r} is not loaded")
    if module_name == "__main__":
        if not file:
            raise DriftcheckError(f"kernel {qualname} is not importable: it is defined in an interactive session")
        module_name = os.path.splitext(os.path.basename(file))[0]
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if obj is not kernel:
        raise DriftcheckError(
            f"kernel {qualname} is not importable as {module_name}:{qualname} (the name holds "
            f"{type(obj).__name__}): bind the decorator's result to the function's name")
    return KernelRef(kernel.op, f"{module_name}:{qualname}", file, f"{qualname} ({_rel(file)})")


def _rel(path: Optional[str]) -> str:
    if not path:
        return "?"
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def backend_name(ref: KernelRef) -> str:
    """ext.<this> for a kernel: pytest.<module>.<name>, in the characters a backends file allows."""
    raw = "pytest." + ref.target.replace(":", ".")
    return re.sub(r"[^a-z0-9_.-]", "_", raw.lower())


def _python_path() -> str:
    """This process's sys.path, absolute: the worker imports the kernel's module as this process did."""
    # the interpreter's own folders (its standard library and site-packages) it finds by itself
    own = tuple(os.path.join(os.path.abspath(prefix), "lib") + os.sep for prefix in {sys.prefix, sys.base_prefix})
    seen, out = set(), []
    for p in sys.path:
        p = os.path.abspath(p or os.getcwd())
        if p not in seen and os.path.isdir(p) and not (p + os.sep).startswith(own):
            seen.add(p)
            out.append(p)
    return os.pathsep.join(out)


def backends_file_text(ref: KernelRef, name: str, numerics, supports: Optional[dict], env: Optional[dict],
                       timeout_s: Optional[float], twin: Optional[str], origin: str) -> str:
    if isinstance(numerics, str):
        if not numerics.startswith("like:"):
            raise DriftcheckError(f"numerics {numerics!r}: a table of numerics fields, or 'like:<built-in backend>' "
                                  "(docs/PROTOCOL.md section 6)")
    elif not isinstance(numerics, dict):
        raise DriftcheckError(f"numerics must be a dict of numerics fields or 'like:<backend>', not "
                              f"{type(numerics).__name__} (docs/PROTOCOL.md section 6)")
    if supports is not None and not isinstance(supports, dict):
        raise DriftcheckError(f"supports must be a dict of static supports keys, not {type(supports).__name__}")
    command = [sys.executable, "-m", "driftcheck.kernel_worker", ref.target]
    if ref.file:
        command += ["--file", os.path.abspath(ref.file)]
    worker_env = {"PYTHONPATH": _python_path()}
    worker_env.update(env or {})
    lines = [
        f"# Written by driftcheck.fuzz for {origin}: the backends file of `driftcheck fuzz` and of the replay",
        "# commands printed with its findings (DRIFTCHECK_BACKENDS=this file driftcheck replay BUNDLE).",
        'format = "driftcheck.backends"',
        "version = 1",
        "",
        "[[backend]]",
        f"name = {toml_value(name)}",
        f"op = {toml_value(ref.op)}",
        f"description = {toml_value('kernel ' + ref.label + ', judged from a test')}",
        f"provenance = {toml_value(ref.target + (' ' + os.path.abspath(ref.file) if ref.file else ''))}",
        f"command = {toml_value(command)}",
        f"cwd = {toml_value(os.getcwd())}",
        f"env = {toml_value(worker_env)}",
        f"numerics = {toml_value(numerics)}",
    ]
    if twin:
        lines.append(f"twin = {toml_value(twin)}")
    if timeout_s is not None:
        lines.append(f"timeout_s = {toml_value(float(timeout_s))}")
    if supports:
        lines += ["", "[backend.supports]"] + [f"{k} = {toml_value(v)}" for k, v in supports.items()]
    return "\n".join(lines) + "\n"


# ---- fuzz -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class FuzzResult:
    kernel: str  # label
    backend: str  # ext.<name>
    folder: str  # the campaign's --out
    backends_file: str
    command: list  # argv of `driftcheck fuzz`
    exit_code: int
    report: dict  # report.json
    binary: str

    @property
    def report_html(self) -> str:
        return os.path.join(self.folder, "report.html")

    @property
    def entry(self) -> dict:
        return next((b for b in self.report.get("backends", []) if b.get("name") == self.backend), {})

    @property
    def cases_run(self) -> int:
        return int(self.entry.get("cases_run", 0))

    @property
    def failed(self) -> int:
        return sum(self.entry.get("failures_by_verdict", {}).values())

    @property
    def groups(self) -> list:
        return [g for g in self.report.get("groups", []) if g.get("backend") == self.backend]

    @property
    def findings(self) -> list:
        return [f for f in self.report.get("findings", []) if f.get("backend") == self.backend]

    def replay_command(self, bundle: Optional[str] = None, member: Optional[dict] = None) -> str:
        """A replay command that runs as printed: the backends file through DRIFTCHECK_BACKENDS (the kernel is an
        external backend), the bundle by absolute path, or the case by seed and index."""
        prefix = f"DRIFTCHECK_BACKENDS={shlex.quote(self.backends_file)} {command_name(self.binary)} replay"
        if bundle:
            return f"{prefix} {shlex.quote(os.path.join(self.folder, bundle))}"
        return (f"{prefix} --seed {member['seed']} --case {member['case_index']} --op {self.entry.get('op')} "
                f"--backend {self.backend}")

    def group_replay(self, g: dict) -> str:
        if g.get("representative"):
            return self.replay_command(bundle=g["representative"])
        members = g.get("members") or []
        return self.replay_command(bundle=members[0].get("bundle") or None, member=members[0])

    def summary(self) -> str:
        """The failure message: one line per finding group, its shrunk case and replay command; the report."""
        seed = self.report.get("seed")
        groups = self.groups
        head = (f"driftcheck: kernel {self.kernel} drifts: {self.failed} of {self.cases_run} cases failed "
                f"({self.backend}, seed {seed})")
        n = len(groups)
        lines = [head + (f", {n} finding group{'s' if n != 1 else ''} by cause:" if groups else ":")]
        for g in groups[:10]:
            cause = " + ".join(g.get("features") or []) or "any case"
            lines.append(f"  {g['verdict']} [{cause}] {g['cases']} cases: {g.get('detail', '')}")
            lines.append(f"    shrunk case: {g.get('shape', '?')}" if g.get("shrunk")
                         else f"    case (not shrunk): {g.get('shape', '?')}")
            lines.append(f"    replay: {self.group_replay(g)}")
        if len(groups) > 10:
            lines.append(f"  ... {len(groups) - 10} more groups in the report")
        if not groups:
            for f in self.findings[:5]:
                lines.append(f"  {f.get('verdict')} {f.get('shape_class', '')}: {f.get('detail', '')}")
                lines.append(f"    replay: {self.replay_command(bundle=f.get('bundle') or None, member=f)}")
            for err in self.report.get("errors", []):
                lines.append(f"  error: {err}")
        lines.append(f"report: {self.report_html}")
        return "\n".join(lines)


def fuzz(kernel: Union[Kernel, str], *, numerics: Union[dict, str], supports: Optional[dict] = None,
         seconds: Optional[float] = None, cases: Optional[int] = None, seed: Optional[int] = None,
         jobs: Optional[int] = None, shrink_seconds: Optional[float] = None, name: Optional[str] = None,
         twin: Optional[str] = None, env: Optional[dict] = None, timeout_s: Optional[float] = None,
         out: Optional[str] = None, args: Sequence[str] = ()) -> FuzzResult:
    """Runs a driftcheck campaign on `kernel` and returns its FuzzResult; raises DriftFound on a finding.

    kernel: a function decorated with @driftcheck.rmsnorm / concat / dual_rmsnorm_cat / attention, at module level
      (the worker imports it by name), or "MODULE:NAME".
    numerics: what the kernel computes, the backends file's `numerics` (a dict such as {"output_roundings": 2}, or
      "like:<built-in backend>"): the oracle's tolerance comes from it (docs/PROTOCOL.md section 6).
    supports: the backends file's static supports ({"dtypes": ["bf16", "fp16"], "head_dims": [64, 128]}); the
      kernel's own @kernel.supports function still answers for each case.
    seconds / cases: the budget (default 20 s); seed: the campaign seed (default 1). Under pytest,
      --driftcheck-seconds, --driftcheck-cases and --driftcheck-seed override them.
    jobs, shrink_seconds: as `driftcheck fuzz`; name: the backend's name (ext.<name>; default pytest.<module>.<kernel>);
      twin: the built-in CPU twin that models the kernel (known findings); env: added to the worker's environment;
      timeout_s: per request; out: the campaign folder (under pytest, one per test below --driftcheck-out);
      args: further `driftcheck fuzz` arguments.
    """
    __tracebackhide__ = True
    ctx = _context
    ref = kernel_ref(kernel)
    bname = name or backend_name(ref)
    if not re.match(r"^[a-z0-9_.-]+$", bname):
        raise DriftcheckError(f"name {bname!r}: a backend name is made of a-z, 0-9, '_', '.' and '-'")
    backend = "ext." + bname
    s = ctx.settings
    if s.cases is not None:
        budget = ["--cases", str(int(s.cases))]
    elif s.seconds is not None:
        budget = ["--seconds", repr(float(s.seconds))]
    elif cases is not None:
        budget = ["--cases", str(int(cases))]
    else:
        budget = ["--seconds", repr(float(seconds if seconds is not None else DEFAULT_SECONDS))]
    seed = s.seed if s.seed is not None else (seed if seed is not None else 1)
    folder = os.path.abspath(out) if out else ctx.folder("fuzz", bname)
    _own(folder, {"kind": "fuzz", "kernel": ref.target, "test": ctx.label})
    bin_path = binary()
    backends_file = os.path.join(folder, "backends.toml")
    with open(backends_file, "w") as f:
        f.write(backends_file_text(ref, bname, numerics, supports, env, timeout_s, twin, ctx.label or ref.label))
    argv = [bin_path, "fuzz", "--backends", backends_file, "--backend", backend, "--out", folder,
            "--seed", str(int(seed))] + budget
    if jobs is not None:
        argv += ["--jobs", str(int(jobs))]
    if shrink_seconds is not None:
        argv += ["--shrink-seconds", repr(float(shrink_seconds))]
    argv += list(args)
    ctx.record("driftcheck_report", os.path.join(folder, "report.html"))
    proc = _run(argv, folder)
    report_path = os.path.join(folder, "report.json")
    if proc.returncode == 2 or not os.path.exists(report_path):
        raise DriftcheckError(f"driftcheck could not run kernel {ref.label} (exit {proc.returncode}):\n"
                              f"{_log_problem(folder)}\nlog: {os.path.join(folder, 'driftcheck.log')}")
    with open(report_path) as f:
        report = json.load(f)
    result = FuzzResult(ref.label, backend, folder, backends_file, argv, proc.returncode, report, bin_path)
    if proc.returncode == 3:
        raise DriftcheckError(f"driftcheck reported an internal or device error on kernel {ref.label}: "
                              f"{'; '.join(report.get('errors', [])) or _log_problem(folder)}")
    if result.cases_run == 0:
        error = result.entry.get("error", "") or "; ".join(report.get("errors", []))
        m = re.search(r"ran zero cases: unavailable: (.*)", error)
        if m:
            ctx.skip(f"kernel {ref.label} is unavailable here: {m.group(1)}")
        raise NothingJudged(f"driftcheck judged no case of kernel {ref.label}: {error}\nreport: {result.report_html}")
    if proc.returncode != 0 or result.failed or result.findings:
        raise DriftFound(result.summary(), result)
    return result


def _own(folder: str, what: dict) -> None:
    """Makes FOLDER a fresh folder of these calls: one they wrote before (it has the marker) is cleared; any other
    non-empty folder is refused rather than deleted."""
    if os.path.isdir(folder) and os.listdir(folder):
        if not os.path.exists(os.path.join(folder, MARKER)):
            raise DriftcheckError(f"{folder} is not empty and was not written by driftcheck.fuzz or driftcheck.gate: "
                                  "give another folder")
        shutil.rmtree(folder)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, MARKER), "w") as f:
        json.dump(what, f)
        f.write("\n")


# ---- gate -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class GateCheck:
    backend: str
    op: str
    check: str  # golden, corpus, budget, baseline
    status: str  # passed, failed, skipped
    message: str
    details: str
    seconds: float

    @property
    def name(self) -> str:
        return f"{self.backend} {self.op} {self.check}"


@dataclasses.dataclass
class GateResult:
    config: str
    folder: str
    command: list
    exit_code: int
    report: dict  # gate.json
    checks: list  # GateCheck
    replay_prefix: str  # what runs the gate's `driftcheck replay ...` lines as printed
    replay_binary: str  # the binary's `... replay`, for lines that name their backends file already

    @property
    def errors(self) -> list:
        return list(self.report.get("errors", []))

    @property
    def failed(self) -> list:
        return [c for c in self.checks if c.status == "failed"]

    def runnable(self, text: str) -> str:
        """The gate's replay lines made runnable as printed: the binary's name and, for a line that does not name
        the backends file itself (driftcheck writes --backends for external backends), the config's in
        DRIFTCHECK_BACKENDS."""
        def fix(m):
            line = m.group(2)
            if "--backends" in line or "--plugin" in line:
                return f"{m.group(1)}{self.replay_binary} {line}"
            return f"{m.group(1)}{self.replay_prefix} {line}"

        return re.sub(r"(?m)^(\s*)driftcheck replay (.*)$", fix, text)

    def check_text(self, c: GateCheck) -> str:
        return f"{c.name}: {c.message}" + (f"\n{self.runnable(c.details).rstrip()}" if c.details else "")

    def summary(self) -> str:
        lines = [f"driftcheck gate {_rel(self.config)}: FAILED ({len(self.failed)} of {len(self.checks)} checks"
                 f"{', ' + str(len(self.errors)) + ' errors' if self.errors else ''})"]
        lines += [f"  gate: {e}" for e in self.errors]
        for c in self.failed:
            lines += ["  " + l for l in self.check_text(c).splitlines()]
        lines.append(f"summary: {os.path.join(self.folder, 'summary.md')}")
        return "\n".join(lines)


def _gate_backends_file(config: str) -> Optional[str]:
    """The config's [gate] backends_file, absolute, read with tomllib where this Python has it."""
    try:
        import tomllib
    except ImportError:
        return None
    try:
        with open(config, "rb") as f:
            data = tomllib.load(f)
    except (OSError, ValueError):
        return None
    path = data.get("gate", {}).get("backends_file")
    return os.path.join(os.path.dirname(os.path.abspath(config)), path) if isinstance(path, str) else None


def gate(config: str, *, jobs: Optional[int] = None, mutants: bool = False, backends: Sequence[str] = (),
         out: Optional[str] = None, args: Sequence[str] = ()) -> GateResult:
    """Runs `driftcheck gate --config CONFIG` (docs/GATE.md) and returns its GateResult; raises GateFailed when the
    gate fails. Under pytest each backend x op x check of the gate is also reported as a test result of its own
    (`<test>::<backend> <op> <check>`, in the terminal and in --junitxml). A bad config (exit 2) or an internal
    error (exit 3) raises DriftcheckError. backends: more backends files (--backends); args: more arguments."""
    __tracebackhide__ = True
    ctx = _context
    config = os.path.abspath(config)
    if not os.path.isfile(config):
        raise DriftcheckError(f"gate config {config} does not exist")
    folder = os.path.abspath(out) if out else ctx.folder("gate", re.sub(r"[^A-Za-z0-9_.-]", "_",
                                                                         os.path.basename(config)))
    _own(folder, {"kind": "gate", "config": config, "test": ctx.label})
    bin_path = binary()
    argv = [bin_path, "gate", "--config", config, "--out", folder, "--junit", os.path.join(folder, "junit.xml"),
            "--summary", os.path.join(folder, "summary.md")]
    if jobs is not None:
        argv += ["--jobs", str(int(jobs))]
    if mutants:
        argv.append("--mutants")
    for b in backends:
        argv += ["--backends", os.path.abspath(b)]
    argv += list(args)
    ctx.record("driftcheck_gate_summary", os.path.join(folder, "summary.md"))
    proc = _run(argv, folder)
    path = os.path.join(folder, "gate.json")
    if proc.returncode in (2, 3) or not os.path.exists(path):
        raise DriftcheckError(f"driftcheck gate could not run {config} (exit {proc.returncode}):\n"
                              f"{_log_problem(folder)}\nlog: {os.path.join(folder, 'driftcheck.log')}")
    with open(path) as f:
        report = json.load(f)
    checks = [GateCheck(c.get("backend", ""), c.get("op", ""), c.get("check", ""), c.get("status", ""),
                        c.get("message", ""), c.get("details", ""), float(c.get("seconds", 0.0)))
              for c in report.get("checks", [])]
    files = [f for f in [_gate_backends_file(config)] + [os.path.abspath(b) for b in backends] if f]
    prefix = (f"DRIFTCHECK_BACKENDS={shlex.quote(':'.join(files))} " if files else "") + \
        f"{command_name(bin_path)} replay"
    result = GateResult(config, folder, argv, proc.returncode, report, checks, prefix,
                        f"{command_name(bin_path)} replay")
    ctx.report_checks(result)
    if proc.returncode != 0 or result.failed:
        raise GateFailed(result.summary(), result)
    return result


__all__ = ["DriftFound", "DriftcheckError", "FuzzResult", "GateCheck", "GateFailed", "GateResult", "NothingJudged",
           "Settings", "Unavailable", "binary", "fuzz", "gate"]
