"""driftcheck's pytest plugin: `driftcheck.fuzz` and `driftcheck.gate` inside tests (docs/PYTHON.md, "pytest").

Loaded by pytest through the package's `pytest11` entry point (name `driftcheck`) once the package is installed;
from a checkout without installing, `pytest -p driftcheck.pytest_plugin` with python/ on PYTHONPATH.

- Options: --driftcheck-seconds, --driftcheck-cases, --driftcheck-seed override every call's budget and seed;
  --driftcheck-out DIR puts each test's campaign in DIR/<test> (default: pytest's temporary folder, kept for the
  last three runs). Each test gets its own folder, named after its node id, so pytest-xdist workers never share
  one.
- A DriftcheckError (driftcheck could not judge the kernel: not importable, a numerics or supports key driftcheck
  does not know, a worker that dies at start-up, a bad gate config) is reported as a test error, not a failure; a
  kernel unavailable here is skipped with its reason; DriftFound and GateFailed are ordinary failures.
- `driftcheck.gate` reports each backend x op x check of the gate as a result of its own,
  `<test>::<backend> <op> <check>`, in the terminal and in --junitxml (under pytest-xdist when the worker ends,
  since a worker may only report the test it runs).
- Each test's report path is a JUnit property (`driftcheck_report`, `driftcheck_gate_summary`).
"""

from __future__ import annotations

import hashlib
import os
import re

import pytest

from . import testing


def pytest_addoption(parser):
    group = parser.getgroup("driftcheck", "driftcheck (differential numerical testing of kernels)")
    group.addoption("--driftcheck-seconds", type=float, default=None, metavar="S",
                    help="time budget of every driftcheck.fuzz campaign (overrides the test's own)")
    group.addoption("--driftcheck-cases", type=int, default=None, metavar="N",
                    help="case budget of every driftcheck.fuzz campaign instead of a time budget (deterministic)")
    group.addoption("--driftcheck-seed", type=int, default=None, metavar="SEED",
                    help="campaign seed of every driftcheck.fuzz campaign (default: the test's, else 1)")
    group.addoption("--driftcheck-out", default=None, metavar="DIR",
                    help="keep each test's campaign in DIR/<test> (default: pytest's temporary folder)")


def pytest_configure(config):
    o = config.option
    if o.driftcheck_seconds is not None and o.driftcheck_cases is not None:
        raise pytest.UsageError("--driftcheck-seconds and --driftcheck-cases exclude each other")
    if o.driftcheck_seconds is not None and not o.driftcheck_seconds > 0:
        raise pytest.UsageError("--driftcheck-seconds must be > 0")
    if o.driftcheck_cases is not None and o.driftcheck_cases < 1:
        raise pytest.UsageError("--driftcheck-cases must be >= 1")
    if o.driftcheck_seed is not None and o.driftcheck_seed < 0:
        raise pytest.UsageError("--driftcheck-seed must be >= 0")


def pytest_report_header(config):
    try:
        path = testing.binary()
    except testing.DriftcheckError as e:
        return f"driftcheck: {e}"
    source = "DRIFTCHECK_BIN" if os.environ.get("DRIFTCHECK_BIN") else (
        "installed with the package" if path == testing.bundled_binary() else "PATH")
    return f"driftcheck: {path} ({source})"


def folder_name(nodeid: str) -> str:
    """A test's folder: its node id in file-name characters, and a hash of the id so that two ids never share."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:100]
    return f"{readable}-{hashlib.sha256(nodeid.encode()).hexdigest()[:8]}"


class PytestContext(testing.Context):
    def __init__(self, item, base: str):
        o = item.config.option
        self.item = item
        self.settings = testing.Settings(o.driftcheck_seconds, o.driftcheck_cases, o.driftcheck_seed,
                                         o.driftcheck_out)
        self.label = item.nodeid
        self.base = base
        self.calls = 0

    def folder(self, kind: str, name: str) -> str:
        self.calls += 1
        sub = folder_name(self.item.nodeid)
        return os.path.join(self.base, sub if self.calls == 1 else f"{sub}-{self.calls}")

    def skip(self, reason: str) -> None:
        pytest.skip(reason)

    def record(self, key: str, value: str) -> None:
        self.item.user_properties.append((key, value))

    def report_checks(self, result: "testing.GateResult") -> None:
        """One test result per check of the gate, after the test's own id (`<test>::<backend> <op> <check>`)."""
        item = self.item
        for c in result.checks:
            outcome = {"passed": "passed", "failed": "failed"}.get(c.status, "skipped")
            if outcome == "failed":
                longrepr = result.check_text(c)
            elif outcome == "skipped":
                longrepr = (str(item.location[0]), item.location[1] or 0, f"Skipped: {c.message}")
            else:
                longrepr = None
            report = pytest.TestReport(
                nodeid=f"{item.nodeid}::{c.name}", location=item.location, keywords={c.check: 1},
                outcome=outcome, longrepr=longrepr, when="call", sections=[], duration=c.seconds)
            config = item.config
            if hasattr(config, "workeroutput"):
                # a pytest-xdist worker sends only its current test's reports: these go to the controller with
                # the worker's output, and the controller reports them (pytest_testnodedown below)
                data = config.hook.pytest_report_to_serializable(config=config, report=report)
                config.workeroutput.setdefault("driftcheck_checks", []).append(data)
            else:
                item.ihook.pytest_runtest_logreport(report=report)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: reports the gate checks a worker ran (PytestContext.report_checks)."""
    config = node.config
    for data in getattr(node, "workeroutput", {}).get("driftcheck_checks", []):
        report = config.hook.pytest_report_from_serializable(config=config, data=data)
        report.node = node
        config.hook.pytest_runtest_logreport(report=report)


@pytest.fixture(autouse=True)
def _driftcheck_context(request, tmp_path_factory):
    """Installs the test's context (options, its own folder, skips, gate checks) for driftcheck.fuzz/gate."""
    out = request.config.option.driftcheck_out
    base = os.path.abspath(out) if out else str(tmp_path_factory.getbasetemp() / "driftcheck")
    testing._set_context(PytestContext(request.node, base))
    try:
        yield
    finally:
        testing._set_context(None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    # driftcheck could not judge the kernel: an error of the test's set-up, not a failure of the kernel
    if call.when == "call" and call.excinfo is not None and call.excinfo.errisinstance(testing.DriftcheckError):
        report.when = "setup"
