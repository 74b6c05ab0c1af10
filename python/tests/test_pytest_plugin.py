"""driftcheck.fuzz, driftcheck.gate and the pytest plugin, through pytest run in a subprocess on small projects of
NumPy kernels (Debian: python3-pytest; python3-pytest-xdist for the -n test), with the built driftcheck
(DRIFTCHECK_BIN): a clean kernel passes, a planted bug fails with its finding groups, shrunk case, report and a
replay command that reproduces the failure when run as printed; a kernel driftcheck cannot run is a test error with
the reason; an unavailable one is skipped; the options reach the campaign; each test has its own folder, with and
without xdist; the gate's checks are results of their own."""

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import unittest
import xml.etree.ElementTree as ET

import harness

BIN = os.environ.get("DRIFTCHECK_BIN")


def has_module(name):
    return subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True).returncode == 0


HAS_PYTEST = has_module("pytest")
HAS_XDIST = has_module("xdist")

# A NumPy RMSNorm (fp32 math, one rounding) and the same kernel whose norm ignores the residual it adds.
KERNELS = '''
import numpy as np
import driftcheck as dc


def _rows(case, name):
    return np.ascontiguousarray(case.load(name, np.float32))


def _norm(case, z):
    p = case.params
    w = case.load("w", np.float32)
    if p.weight_mode == "one_plus":
        w = np.float32(1) + w
    mean = np.sum(z * z, axis=1, dtype=np.float32, keepdims=True) / np.float32(z.shape[1])
    case.store("y", (z * (np.float32(1) / np.sqrt(mean + np.float32(p.eps)))) * w)


@dc.rmsnorm(tensors="numpy")
def good(case):
    z = _rows(case, "x")
    if case.params.residual:
        z = z + _rows(case, "residual")
        case.store("residual", z)
    _norm(case, z)


@dc.rmsnorm(tensors="numpy")
def bad(case):
    x = _rows(case, "x")
    if case.params.residual:
        case.store("residual", x + _rows(case, "residual"))
    _norm(case, x)  # the planted bug: the norm of x, not of x + residual
'''

NUMERICS = '{"output_roundings": 1}'


def env(extra=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = harness.PACKAGE_ROOT
    e["PATH"] = os.path.dirname(sys.executable) + os.pathsep + e.get("PATH", "")  # python3 with NumPy first
    e.pop("DRIFTCHECK_BACKENDS", None)
    e.pop("PYTEST_ADDOPTS", None)
    e.update(extra or {})
    return e


def project(files):
    """A temporary project: {relative path: text}."""
    root = tempfile.mkdtemp(prefix="dc-pytest-")
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
    return root


def run_pytest(root, *args, extra_env=None, cwd=None):
    """pytest in root (or cwd) with the plugin; returns (process, {test name: (outcome, message)})."""
    junit = os.path.join(root, "junit.xml")
    argv = [sys.executable, "-m", "pytest", "-p", "driftcheck.pytest_plugin", "-p", "no:cacheprovider",
            f"--junitxml={junit}", "-o", "junit_family=xunit1"] + list(args)
    p = subprocess.run(argv, cwd=cwd or root, env=env(extra_env), capture_output=True, text=True, timeout=900)
    results = {}
    if os.path.exists(junit):
        for tc in ET.parse(junit).iter("testcase"):
            outcome, message = "passed", ""
            for child in tc:
                if child.tag in ("failure", "error", "skipped"):
                    outcome, message = child.tag, (child.get("message") or "") + "\n" + (child.text or "")
            results[tc.get("name")] = (outcome, message)
    return p, results


def replay_lines(message):
    return [m.group(1) for m in re.finditer(r"replay: (.*)", message)]


@unittest.skipUnless(BIN and HAS_PYTEST, "needs DRIFTCHECK_BIN (CTest sets it) and pytest (Debian: python3-pytest)")
class Fuzz(unittest.TestCase):
    def test_clean_kernel_passes_and_planted_bug_fails_with_a_repro_that_runs(self):
        root = project({"kernels.py": KERNELS, "test_k.py": f"""
            import driftcheck as dc
            from kernels import good, bad

            def test_good():
                r = dc.fuzz(good, numerics={NUMERICS}, seconds=600)
                assert r.cases_run == 120 and r.failed == 0

            def test_bad():
                dc.fuzz(bad, numerics={NUMERICS})
        """})
        p, res = run_pytest(root, "--driftcheck-cases", "120")
        self.assertEqual(p.returncode, 1, p.stdout[-3000:])
        self.assertEqual(res["test_good"][0], "passed", res["test_good"][1])
        outcome, message = res["test_bad"]
        self.assertEqual(outcome, "failure")
        self.assertIn("DriftFound: driftcheck: kernel bad (kernels.py) drifts", message)
        self.assertRegex(message, r"beyond_tolerance \[[^\]]*residual[^\]]*\] \d+ cases: y\[")  # the group line
        self.assertRegex(message, r"shrunk case: rmsnorm \w+, \d+ x \d+")
        report = re.search(r"report: (\S+)", message).group(1)
        self.assertTrue(os.path.exists(report), report)
        replays = replay_lines(message)
        self.assertTrue(replays)
        self.assertIn("DRIFTCHECK_BACKENDS=", replays[0])
        # the printed command, run as printed, in a shell, from another folder: the same failure
        r = subprocess.run(replays[0], shell=True, cwd=tempfile.gettempdir(), env=env(), capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("FAIL ext.pytest.kernels.bad beyond_tolerance", r.stdout)
        # and on the clean kernel (--backend), the same bundle passes: the repro is the kernel's, not the case's
        good = subprocess.run(replays[0] + " --backend ext.pytest.kernels.good", shell=True, env=env(),
                              capture_output=True, text=True, timeout=300)
        self.assertNotEqual(good.returncode, 0)  # ext.pytest.kernels.good is not in this test's backends file
        self.assertIn("unknown backend", good.stderr)

    def test_kernels_driftcheck_cannot_run_are_errors_with_the_reason(self):
        root = project({"kernels.py": KERNELS, "broken_in_worker.py": """
            import os
            import driftcheck as dc
            if os.environ.get("DRIFTCHECK_PROTOCOL"):  # imports here, not in the worker
                raise ImportError("no module named 'my_extension' in the worker")

            @dc.rmsnorm(tensors="numpy")
            def k(case):
                pass
        """, "test_e.py": f"""
            import driftcheck as dc
            from kernels import good

            def test_wrong_numerics_key():
                dc.fuzz(good, numerics={{"output_rounding": 1}}, cases=10)

            def test_wrong_supports_key():
                dc.fuzz(good, numerics={NUMERICS}, supports={{"head_dims": [64]}}, cases=10)

            def test_local_kernel():
                @dc.rmsnorm(tensors="numpy")
                def local(case):
                    pass
                dc.fuzz(local, numerics={NUMERICS}, cases=10)

            def test_not_importable_in_the_worker():
                from broken_in_worker import k
                dc.fuzz(k, numerics={NUMERICS}, cases=10)

            def test_not_importable_by_name():
                dc.fuzz("no_such_module:k", numerics={NUMERICS}, cases=10)
        """})
        p, res = run_pytest(root)
        self.assertEqual(p.returncode, 1, p.stdout[-3000:])
        for name, reason in (
                ("test_wrong_numerics_key", 'unknown key "output_rounding" in numerics'),
                ("test_wrong_supports_key", "head_dims"),
                ("test_local_kernel", "defined inside a function"),
                ("test_not_importable_in_the_worker",
                 "kernel broken_in_worker:k is not importable in the worker: ImportError: no module named "
                 "'my_extension' in the worker"),
                ("test_not_importable_by_name", "kernel no_such_module:k is not importable")):
            outcome, message = res[name]
            self.assertEqual(outcome, "error", f"{name}: {outcome} {message}")
            self.assertIn("DriftcheckError", message, name)
            self.assertIn(reason, message, name)
        self.assertRegex(p.stdout, r"5 errors")

    def test_kernel_in_the_test_file_under_each_import_mode(self):
        # prepend (pytest's default) puts the test's folder on sys.path; importlib does not, and from another
        # folder the module's name (tests.test_in_file) does not import: the worker loads it from its file
        test = KERNELS + f"""

def test_in_file():
    r = dc.fuzz(good, numerics={NUMERICS}, cases=20)
    assert r.cases_run == 20
"""
        for mode in ("prepend", "importlib"):
            with self.subTest(mode=mode):
                root = project({"tests/test_in_file.py": test})
                p, res = run_pytest(root, f"--import-mode={mode}", "--rootdir", root, os.path.join(root, "tests"),
                                    cwd=tempfile.mkdtemp(prefix="dc-elsewhere-"))
                self.assertEqual(p.returncode, 0, p.stdout[-3000:])
                self.assertEqual(res["test_in_file"][0], "passed")

    def test_unavailable_kernel_is_skipped_with_its_reason(self):
        root = project({"gpu_kernel.py": """
            import driftcheck as dc
            dc.unavailable("torch.cuda.is_available() is False")

            @dc.rmsnorm(tensors="numpy")
            def k(case):
                pass
        """, "test_u.py": f"""
            import driftcheck as dc
            from gpu_kernel import k

            def test_k():
                dc.fuzz(k, numerics={NUMERICS}, cases=10)
        """})
        p, res = run_pytest(root)
        self.assertEqual(p.returncode, 0, p.stdout[-3000:])
        outcome, message = res["test_k"]
        self.assertEqual(outcome, "skipped")
        self.assertIn("unavailable here: torch.cuda.is_available() is False", message)

    def test_declining_every_case_is_a_failure(self):
        root = project({"kernels.py": KERNELS, "test_d.py": f"""
            import driftcheck as dc
            from kernels import good

            def test_nothing_judged():
                dc.fuzz(good, numerics={NUMERICS}, supports={{"dtypes": ["fp64"]}}, cases=10)
        """})
        p, res = run_pytest(root)
        outcome, message = res["test_nothing_judged"]
        self.assertEqual(outcome, "failure", message)
        self.assertIn("NothingJudged", message)
        self.assertIn("all 10 of its cases unsupported", message)

    def test_options_reach_the_campaign_and_each_test_has_its_own_folder(self):
        files = {"kernels.py": KERNELS, "test_o.py": f"""
            import driftcheck as dc
            from kernels import good

            def test_one():
                dc.fuzz(good, numerics={NUMERICS}, seconds=600, seed=3)

            def test_two():
                dc.fuzz(good, numerics={NUMERICS}, cases=5000)
                dc.fuzz(good, numerics={NUMERICS}, cases=5000)  # a second call: a second folder
        """}
        for xdist in ([], ["-n", "2"]) if HAS_XDIST else ([],):
            with self.subTest(xdist=xdist):
                root = project(files)
                out = os.path.join(root, "dc-out")
                p, res = run_pytest(root, "--driftcheck-cases", "37", "--driftcheck-seed", "5", "--driftcheck-out",
                                    out, *xdist)
                self.assertEqual(p.returncode, 0, p.stdout[-3000:])
                folders = sorted(os.listdir(out))
                self.assertEqual(len(folders), 3, folders)
                self.assertEqual(len([f for f in folders if "test_two" in f]), 2, folders)
                for f in folders:
                    with open(os.path.join(out, f, "report.json")) as fh:
                        report = json.load(fh)
                    self.assertEqual(report["cases"], 37, f)
                    self.assertEqual(report["seed"], 5, f)
                    self.assertIn("--cases 37", report["command"])
                # a second run into the same --driftcheck-out clears each test's folder first
                p, _ = run_pytest(root, "--driftcheck-cases", "11", "--driftcheck-out", out, *xdist)
                self.assertEqual(p.returncode, 0, p.stdout[-3000:])
                self.assertEqual(sorted(os.listdir(out)), folders)
                with open(os.path.join(out, folders[0], "report.json")) as fh:
                    self.assertEqual(json.load(fh)["cases"], 11)

    def test_usage_errors_of_the_options(self):
        root = project({"test_x.py": "def test_x():\n    pass\n"})
        p, _ = run_pytest(root, "--driftcheck-cases", "10", "--driftcheck-seconds", "5")
        self.assertEqual(p.returncode, 4, p.stdout + p.stderr)
        self.assertIn("--driftcheck-seconds and --driftcheck-cases exclude each other", p.stderr)

    def test_outside_pytest(self):
        root = project({"kernels.py": KERNELS, "script.py": f"""
            import driftcheck as dc
            from kernels import good, bad
            r = dc.fuzz(good, numerics={NUMERICS}, cases=30)
            print("clean", r.cases_run, r.failed)
            try:
                dc.fuzz(bad, numerics={NUMERICS}, cases=60)
            except dc.DriftFound as e:
                print("found", e.result.failed > 0, "replay:" in str(e))
            try:
                dc.fuzz(good, numerics=[1], cases=30)
            except dc.DriftcheckError as e:
                print("error", e)
        """})
        p = subprocess.run([sys.executable, "script.py"], cwd=root, env=env(), capture_output=True, text=True,
                           timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("clean 30 0", p.stdout)
        self.assertIn("found True True", p.stdout)
        self.assertIn("error numerics must be a dict", p.stdout)


GATE = """
format_version = 1

[gate]
backends = [{backends}]
backends_file = "{examples}/python/rmsnorm_numpy.toml"
seed = 7
cases = 100
baseline = "{baseline}"
corpus = "{examples}/gate/corpus"

[budgets.default]
allowed_verdicts = ["pass"]
"""


@unittest.skipUnless(BIN and HAS_PYTEST, "needs DRIFTCHECK_BIN (CTest sets it) and pytest (Debian: python3-pytest)")
class Gate(unittest.TestCase):
    def gate_project(self, backends, baseline):
        examples = os.path.dirname(harness.EXAMPLES)
        config = GATE.format(backends=", ".join(f'"{b}"' for b in backends), examples=examples,
                             baseline=baseline)
        return project({"gate.toml": config, "test_g.py": """
            import driftcheck as dc

            def test_gate():
                dc.gate("gate.toml")
        """})

    def test_each_check_is_a_result_and_failures_carry_replays_that_run(self):
        root = self.gate_project(["ext.numpy.rmsnorm", "ext.numpy.rmsnorm.planted_stride_ignored"], "baseline.json")
        subprocess.run([BIN, "gate", "--config", "gate.toml", "--out", "first", "--quiet"], cwd=root, env=env(),
                       capture_output=True)
        b = subprocess.run([BIN, "baseline", "update", "--config", "gate.toml", "--out", "first"], cwd=root,
                           env=env(), capture_output=True, text=True)
        self.assertTrue(os.path.exists(os.path.join(root, "baseline.json")), b.stderr)
        # the planted bug fails its budget and the corpus cases that came from it; the clean kernel passes all
        p, res = run_pytest(root)
        self.assertEqual(p.returncode, 1, p.stdout[-3000:])
        clean, planted = "ext.numpy.rmsnorm rmsnorm", "ext.numpy.rmsnorm.planted_stride_ignored rmsnorm"
        for check in ("corpus", "budget", "baseline"):
            self.assertEqual(res[f"{clean} {check}"][0], "passed", res[f"{clean} {check}"])
        self.assertEqual(res[f"{planted} budget"][0], "failure")
        self.assertIn("verdict nan_mismatch", res[f"{planted} budget"][1])
        self.assertEqual(res[f"{planted} corpus"][0], "failure")
        outcome, message = res["test_gate"]
        self.assertEqual(outcome, "failure")
        self.assertIn("GateFailed", message)
        self.assertIn(f"{planted} budget", message)
        # Each replay line runs as printed: driftcheck names the backends file on the line (--backends).
        replays = [l.strip() for l in message.splitlines() if " replay " in l and "--backends " in l]
        self.assertTrue(replays, message)
        r = subprocess.run(replays[0], shell=True, env=env(), capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 1, replays[0] + "\n" + r.stdout + r.stderr)
        self.assertIn("FAIL ext.numpy.rmsnorm.planted_stride_ignored", r.stdout)

    def test_a_bad_config_is_an_error(self):
        root = self.gate_project(["ext.no_such_backend"], "baseline.json")
        p, res = run_pytest(root)
        outcome, message = res["test_gate"]
        self.assertEqual(outcome, "error", message)
        self.assertIn("driftcheck gate could not run", message)


if __name__ == "__main__":
    unittest.main()
