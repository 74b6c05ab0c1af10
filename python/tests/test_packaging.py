"""`pip install ./python` gives an importable package that serves workers (Debian: python3-pip)."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import harness


def has_pip():
    probe = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    return probe.returncode == 0


@unittest.skipUnless(has_pip(), "pip is not installed for this interpreter (Debian: python3-pip)")
class PipInstall(unittest.TestCase):
    def test_install_and_serve(self):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "src")  # a copy: the in-tree build must not write into the checkout
            shutil.copytree(harness.PACKAGE_ROOT, src, ignore=shutil.ignore_patterns("tests", "__pycache__"))
            target = os.path.join(d, "site")
            p = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation",
                                "--no-deps", "--no-index", "--target", target, src], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertTrue(os.path.exists(os.path.join(target, "driftcheck", "worker.py")))
            # a worker served from the installed copy only (no source checkout on the path)
            w = harness.FakeDriftcheck(harness.example("rmsnorm_numpy.py"), env={"PYTHONPATH": target})
            kind, hello = w.hello("rmsnorm")
            self.assertTrue(hello["available"])
            self.assertEqual(w.close()[0], 0)


if __name__ == "__main__":
    unittest.main()
