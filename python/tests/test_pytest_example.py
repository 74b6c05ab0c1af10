"""examples/pytest run as its CI would run it: `python3 -m pytest examples/pytest` (Debian: python3-pytest) with the
built driftcheck (DRIFTCHECK_BIN) and the plugin from this checkout. The correct kernels and the gate pass (each
gate check a result of its own); each planted bug fails with its finding group, shrunk case, report and a replay
command that, run as printed, fails the same way."""

import os
import re
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

import harness

BIN = os.environ.get("DRIFTCHECK_BIN")
EXAMPLE = os.path.join(harness.REPO, "examples", "pytest")


def has_module(name):
    return subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True).returncode == 0


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = harness.PACKAGE_ROOT
    # the gate's backends file runs `python3`: this interpreter (Debian's, with torch) must be the one found
    e["PATH"] = os.path.dirname(sys.executable) + os.pathsep + e.get("PATH", "")
    e.pop("DRIFTCHECK_BACKENDS", None)
    e.pop("PYTEST_ADDOPTS", None)
    return e


@unittest.skipUnless(BIN and has_module("pytest") and has_module("torch"),
                     "needs DRIFTCHECK_BIN (CTest sets it), pytest and torch (Debian: python3-pytest, python3-torch)")
class Example(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp(prefix="dc-example-")
        junit = os.path.join(cls.out, "junit.xml")
        # a case budget: the same cases on every machine, so the planted bugs are found wherever CI runs
        argv = [sys.executable, "-m", "pytest", "-p", "driftcheck.pytest_plugin", "-p", "no:cacheprovider",
                EXAMPLE, "--driftcheck-cases", "300", "--driftcheck-out", os.path.join(cls.out, "runs"),
                f"--junitxml={junit}", "-o", "junit_family=xunit1", "-rA"]
        cls.proc = subprocess.run(argv, cwd=harness.REPO, env=env(), capture_output=True, text=True, timeout=1500)
        cls.results = {}
        for tc in ET.parse(junit).iter("testcase"):
            outcome, message = "passed", ""
            for child in tc:
                if child.tag in ("failure", "error", "skipped"):
                    outcome, message = child.tag, child.get("message") or ""
            cls.results[tc.get("name")] = (outcome, message)

    def outcome(self, name):
        self.assertIn(name, self.results, f"{name} did not run:\n{self.proc.stdout[-3000:]}")
        return self.results[name]

    def test_correct_kernels_and_the_gate_pass(self):
        for name in ("test_rmsnorm", "test_paged_decode", "test_gate"):
            outcome, message = self.outcome(name)
            self.assertEqual(outcome, "passed", f"{name}: {message}")
        checks = [n for n in self.results if n.startswith("ext.mykernels.")]
        self.assertEqual(sorted(checks), ["ext.mykernels.paged_decode attention baseline",
                                          "ext.mykernels.paged_decode attention budget",
                                          "ext.mykernels.rmsnorm rmsnorm baseline",
                                          "ext.mykernels.rmsnorm rmsnorm budget"])
        for n in checks:
            self.assertEqual(self.results[n][0], "passed", n)
        self.assertEqual(self.proc.returncode, 1)  # the two planted bugs, and nothing else
        self.assertIn("2 failed, 7 passed", self.proc.stdout)

    def check_planted(self, name, kernel, group):
        outcome, message = self.outcome(name)
        self.assertEqual(outcome, "failure", message)
        self.assertIn(f"DriftFound: driftcheck: kernel {kernel}", message)
        self.assertRegex(message, group)
        self.assertIn("shrunk case: ", message)
        report = re.search(r"report: (\S+)", message).group(1)
        self.assertTrue(os.path.exists(report), report)
        replay = re.search(r"replay: (.*)", message).group(1)
        r = subprocess.run(replay, shell=True, cwd=tempfile.gettempdir(), env=env(), capture_output=True, text=True,
                           timeout=600)
        self.assertEqual(r.returncode, 1, f"{replay}\n{r.stdout}{r.stderr}")
        self.assertRegex(r.stdout, rf"FAIL ext\.pytest\.mykernels\.\w+\.{kernel} ")
        return message

    def test_rmsnorm_planted_bug_fails_with_its_repro(self):
        message = self.check_planted("test_rmsnorm_planted_bug", "rmsnorm_planted_bug",
                                     r"beyond_tolerance \[residual add\] \d+ cases")
        self.assertIn("shrunk case: rmsnorm bf16, 1 x 8, residual", message)

    def test_paged_decode_planted_bug_fails_with_its_repro(self):
        self.check_planted("test_paged_decode_planted_bug", "paged_decode_planted_bug",
                           r"\[seq_len % block_size != 0\] \d+ cases")


if __name__ == "__main__":
    unittest.main()
