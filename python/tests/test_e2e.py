"""Campaigns through the real driftcheck binary (DRIFTCHECK_BIN) over the CPU examples: each correct example runs
cases and has no finding (exit 0), each planted bug is found (exit 1, a finding of the example's backend), and the
GPU examples are listed as unavailable with their reason."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import harness

BIN = os.environ.get("DRIFTCHECK_BIN")
try:
    import torch
except ImportError:
    torch = None


def toml(name):
    return os.path.join(harness.EXAMPLES, name)


def env():
    e = dict(os.environ)
    # The backends files run `python3`: this interpreter (Debian's, with NumPy and torch) must be the one found.
    e["PATH"] = os.path.dirname(sys.executable) + os.pathsep + e.get("PATH", "")
    e.pop("DRIFTCHECK_BACKENDS", None)
    return e


@unittest.skipUnless(BIN, "DRIFTCHECK_BIN is not set (CTest sets it to the built driftcheck)")
class Campaigns(unittest.TestCase):
    def fuzz(self, files, backend, cases, seed=11, jobs=2):
        out = tempfile.mkdtemp(prefix="dc-e2e-")
        argv = [BIN, "fuzz"] + [a for f in files for a in ("--backends", toml(f))] + [
            "--backend", backend, "--cases", str(cases), "--seed", str(seed), "--jobs", str(jobs), "--out", out,
            "--shrink-seconds", "5"]
        p = subprocess.run(argv, env=env(), capture_output=True, text=True, timeout=900)
        report_path = os.path.join(out, "report.json")
        self.assertTrue(os.path.exists(report_path), f"no report: exit {p.returncode}\n{p.stderr[-2000:]}")
        with open(report_path) as f:
            report = json.load(f)
        return p, report

    def backend(self, report, name):
        return next(b for b in report["backends"] if b["name"] == name)

    def expect_clean(self, files, name, cases):
        p, report = self.fuzz(files, name, cases)
        b = self.backend(report, name)
        self.assertEqual(p.returncode, 0, f"{name}: {report['findings'][:2]} {report['errors']}\n{p.stderr[-1500:]}")
        self.assertGreater(b["cases_run"], cases // 2, b)
        self.assertEqual(b["distinct_findings"], 0)
        return b

    def expect_caught(self, files, name, cases, verdicts):
        p, report = self.fuzz(files, name, cases)
        self.assertEqual(p.returncode, 1, p.stderr[-1500:])
        found = {f["verdict"] for f in report["findings"] if f["backend"] == name}
        self.assertTrue(found & set(verdicts), f"{name}: findings {found}, expected one of {verdicts}")

    def test_numpy_rmsnorm(self):
        self.expect_clean(["rmsnorm_numpy.toml"], "ext.numpy.rmsnorm", 300)
        self.expect_caught(["rmsnorm_numpy.toml"], "ext.numpy.rmsnorm.planted_stride_ignored", 100,
                           ["nan_mismatch", "beyond_tolerance", "inf_mismatch"])

    def test_numpy_attention(self):
        b = self.expect_clean(["attention_numpy.toml"], "ext.numpy.attention", 120)
        self.assertLess(b["worst_ratio"], 1.0)
        self.expect_caught(["attention_numpy.toml"], "ext.numpy.attention.planted_gqa_modulo", 60,
                           ["beyond_tolerance"])

    def test_concat_copy(self):
        self.expect_clean(["concat_copy.toml"], "ext.copy.concat.numpy", 300)
        self.expect_caught(["concat_copy.toml"], "ext.copy.concat.numpy.planted_halves_swapped", 50, ["not_exact"])

    @unittest.skipIf(torch is None, "torch is not importable")
    def test_torch_cpu_norms(self):
        self.expect_clean(["torch_norms.toml"], "ext.torch.rmsnorm.native", 150)
        self.expect_clean(["torch_norms.toml"], "ext.torch.dual.native", 150)
        self.expect_caught(["torch_norms.toml"], "ext.torch.rmsnorm.native.planted_residual_not_written", 100,
                           ["beyond_tolerance", "nan_mismatch"])
        self.expect_caught(["torch_norms.toml"], "ext.torch.dual.native.planted_halves_swapped", 50,
                           ["beyond_tolerance"])

    def test_common_mistakes_are_named(self):
        """A kernel that returns its result instead of writing it: every group's detail starts with the oracle's
        hint (docs/ORACLE.md). One that assigns floats to a raw bf16 view: the runner refuses the assignment, an
        error verdict naming it (docs/PYTHON.md)."""
        here = os.path.dirname(os.path.abspath(__file__))
        for mistake, hint in (("returns", "output y was never written (the kernel returned its result instead of "
                                          "writing into y?)"),
                              ("raw_floats", "TypeError: y is a raw bf16 view (NumPy holds bf16 as uint16 bit patterns) "
                                             "and was assigned float32 values")):
            with tempfile.TemporaryDirectory(prefix="dc-mistake-") as d:
                backends = os.path.join(d, "mistake.toml")
                with open(backends, "w") as f:
                    f.write('format = "driftcheck.backends"\nversion = 1\n[[backend]]\nname = "mistake"\n'
                            'op = "rmsnorm"\ncommand = ["python3", %s, "--mistake", "%s"]\n'
                            'env = { PYTHONPATH = %s }\nnumerics = { output_roundings = 1 }\n'
                            % (json.dumps(os.path.join(here, "mistakes_numpy.py")), mistake,
                               json.dumps(harness.PACKAGE_ROOT)))
                out = os.path.join(d, "out")
                p = subprocess.run([BIN, "fuzz", "--backends", backends, "--cases", "80", "--seed", "3", "--jobs", "2",
                                    "--out", out, "--shrink-seconds", "5", "-q"],
                                   env=env(), capture_output=True, text=True, timeout=900)
                self.assertEqual(p.returncode, 1, p.stderr[-1500:])
                with open(os.path.join(out, "report.json")) as f:
                    report = json.load(f)
                details = [g["detail"] for g in report["groups"]]
                self.assertTrue(details, report["findings"][:2])
                for detail in details:
                    self.assertTrue(detail.startswith(hint), f"{mistake}: {detail}")

    def test_gpu_examples_listed_unavailable_with_their_reason(self):
        files = ["sdpa_paged.toml", "triton_dual_rmsnorm_cat.toml", "vllm_ops.toml"]
        argv = [BIN, "list"] + [a for f in files for a in ("--backends", toml(f))]
        p = subprocess.run(argv, env=env(), capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        cuda = torch is not None and torch.cuda.is_available()
        for name, reason in (("ext.triton.dual", "triton is not importable"),
                             ("ext.vllm.unified_attention", "vllm is not importable")):
            line = next((l for l in p.stdout.splitlines() if name in l), "")
            if not cuda:
                self.assertIn("unavailable", p.stdout.split(name, 1)[1][:600], line)
                self.assertIn(reason, p.stdout.split(name, 1)[1][:600])


if __name__ == "__main__":
    unittest.main()
