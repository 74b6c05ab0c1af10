"""The package as pip installs it (docs/PYTHON.md, "Installing"): `python3 -m build` (Debian: python3-build;
python3-setuptools-whl and python3-wheel-whl, which pip installs offline into build's isolated environment through
PIP_NO_INDEX and PIP_FIND_LINKS; without them python3-setuptools and python3-wheel with --no-isolation) makes an
sdist carrying the C++ sources and, from it, a wheel with the driftcheck command line inside; the wheel installs
offline into a fresh virtual environment (python3-venv), whose `driftcheck` lists the backends and runs a campaign,
whose runner serves a worker without this checkout, and whose pytest loads the plugin from the package's entry
point.

The binary put in the wheel is the one CTest built (DRIFTCHECK_BINARY=$DRIFTCHECK_BIN), so this test builds no C++;
the from-source build (`pip install ./python` running CMake) is .ci/pip-from-source. The build-dependency checks
(missing packages named in one message) run here without building anything."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
import zipfile

import harness

BIN = os.environ.get("DRIFTCHECK_BIN")
sys.path.insert(0, os.path.join(harness.PACKAGE_ROOT, "build_backend"))
import driftcheck_cmake  # noqa: E402


def has_module(name):
    return subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True).returncode == 0


def clean_env(extra=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("DRIFTCHECK_", "PYTHON", "PIP_"))}
    e.update(extra or {})
    return e


def source_copy(dest):
    """What an sdist is made from: python/ (without its tests) and the C++ sources, in a folder of their own so
    that the build writes nothing into the checkout."""
    shutil.copytree(harness.PACKAGE_ROOT, os.path.join(dest, "python"),
                    ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
    for rel in driftcheck_cmake.CPP_SOURCES:
        src, dst = os.path.join(harness.REPO, rel), os.path.join(dest, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        (shutil.copytree if os.path.isdir(src) else shutil.copyfile)(src, dst)


@unittest.skipUnless(BIN and all(has_module(m) for m in ("build", "setuptools", "wheel", "venv", "pytest")),
                     "needs DRIFTCHECK_BIN (CTest sets it) and python3-build, python3-setuptools, python3-wheel, "
                     "python3-venv, python3-pytest")
class Wheel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="dc-wheel-")
        src = os.path.join(cls.tmp, "src")
        source_copy(src)
        cls.dist = os.path.join(cls.tmp, "dist")
        # `python3 -m build python` as it is: an sdist, then the wheel built from the unpacked sdist, each in an
        # isolated environment whose setuptools and wheel pip takes offline from Debian's wheels
        # (python3-setuptools-whl, python3-wheel-whl); without them, the environment's own (--no-isolation)
        wheels = "/usr/share/python-wheels"
        isolated = all(any(f.startswith(p) for f in os.listdir(wheels)) for p in ("setuptools-", "wheel-")) \
            if os.path.isdir(wheels) else False
        cls.isolated = isolated
        cls.build = subprocess.run(
            [sys.executable, "-m", "build"] + ([] if isolated else ["--no-isolation"]) +
            ["--outdir", cls.dist, os.path.join(src, "python")],
            env=clean_env({"DRIFTCHECK_BINARY": BIN, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheels}),
            capture_output=True, text=True, timeout=900)
        assert cls.build.returncode == 0, cls.build.stdout[-3000:] + cls.build.stderr[-3000:]
        cls.wheel = next(os.path.join(cls.dist, f) for f in os.listdir(cls.dist) if f.endswith(".whl"))
        cls.sdist = next(os.path.join(cls.dist, f) for f in os.listdir(cls.dist) if f.endswith(".tar.gz"))
        cls.venv = os.path.join(cls.tmp, "venv")
        # Debian's NumPy and torch are the package's dependencies here: offline, nothing is downloaded
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", cls.venv], check=True, timeout=300)
        cls.python = os.path.join(cls.venv, "bin", "python")
        cls.install = subprocess.run([cls.python, "-m", "pip", "install", "--no-index", "--quiet", cls.wheel],
                                     env=clean_env(), capture_output=True, text=True, timeout=600)

    def venv_env(self, extra=None):
        e = clean_env(extra)
        e["PATH"] = os.path.join(self.venv, "bin") + os.pathsep + e.get("PATH", "")
        return e

    def test_sdist_carries_the_cpp_sources_and_the_wheel_the_binary(self):
        import tarfile

        with tarfile.open(self.sdist) as t:
            names = t.getnames()
        for rel in ("cpp/CMakeLists.txt", "cpp/cmake/DriftcheckDependencies.cmake", "cpp/fuzz/cli/src/main.cpp",
                    "cpp/golden/known-findings.toml", "build_backend/driftcheck_cmake.py", "setup.py"):
            self.assertTrue(any(n.endswith("/" + rel) for n in names), rel)
        self.assertRegex(os.path.basename(self.wheel), r"^driftcheck-0\.1\.0-py3-none-linux_\w+\.whl$")
        with zipfile.ZipFile(self.wheel) as z:
            info = z.getinfo("driftcheck/_bin/driftcheck")
            entry_points = z.read("driftcheck-0.1.0.dist-info/entry_points.txt").decode()
        self.assertTrue((info.external_attr >> 16) & 0o111, "the binary is not executable in the wheel")
        self.assertEqual(info.file_size, os.path.getsize(BIN))
        self.assertIn("driftcheck = driftcheck._cli:main", entry_points)
        self.assertIn("[pytest11]\ndriftcheck = driftcheck.pytest_plugin", entry_points)
        log = self.build.stderr + self.build.stdout
        self.assertIn(f"using DRIFTCHECK_BINARY={os.path.abspath(BIN)}", log)
        if self.isolated:  # setuptools and wheel from Debian's wheels into build's own environment, offline
            self.assertIn("Installing packages in isolated environment... (setuptools>=61, wheel)", log)

    def test_the_installed_command_lists_and_runs_a_campaign(self):
        self.assertEqual(self.install.returncode, 0, self.install.stderr)
        driftcheck = os.path.join(self.venv, "bin", "driftcheck")
        p = subprocess.run([driftcheck, "list"], env=self.venv_env(), capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("ops: rmsnorm concat dual_rmsnorm_cat attention", p.stdout)
        self.assertIn("cpu.rmsnorm.native", p.stdout)
        # a campaign of a built-in twin and of a NumPy worker served by the installed runner (no checkout on
        # the path: the worker's python is the environment's)
        backends = os.path.join(self.tmp, "backends.toml")
        with open(backends, "w") as f:
            f.write(textwrap.dedent(f"""\
                format = "driftcheck.backends"
                version = 1
                [[backend]]
                name = "installed.rmsnorm"
                op = "rmsnorm"
                command = ["{self.python}", "{harness.example('rmsnorm_numpy.py')[1]}"]
                numerics = {{ output_roundings = 1 }}
            """))
        out = os.path.join(self.tmp, "campaign")
        p = subprocess.run([driftcheck, "fuzz", "--backends", backends, "--backend",
                            "cpu.rmsnorm.native,ext.installed.rmsnorm", "--cases", "60", "--out", out],
                           env=self.venv_env(), capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertRegex(p.stderr, r"ext\.installed\.rmsnorm\s+60\s+60\s+0\s+0")
        self.assertRegex(p.stderr, r"cpu\.rmsnorm\.native\s+(\d+)\s+\1\s+\d+\s+0")  # it declines some
        self.assertTrue(os.path.exists(os.path.join(out, "report.html")))

    def test_pytest_in_the_environment_loads_the_plugin_and_prints_runnable_repros(self):
        self.assertEqual(self.install.returncode, 0, self.install.stderr)
        root = os.path.join(self.tmp, "project")
        os.makedirs(root)
        with open(os.path.join(root, "test_k.py"), "w") as f:
            f.write(textwrap.dedent("""\
                import numpy as np
                import driftcheck as dc

                @dc.concat(tensors="numpy")
                def swapped(case):  # a planted bug: the halves in the wrong order
                    case.out[...] = np.concatenate([case.b, case.a], axis=1)

                def test_swapped():
                    dc.fuzz(swapped, numerics="like:cpu.concat.copy")
            """))
        p = subprocess.run([self.python, "-m", "pytest", "-p", "no:cacheprovider", "--driftcheck-cases", "40"],
                           cwd=root, env=self.venv_env(), capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 1, p.stdout[-3000:] + p.stderr[-2000:])
        self.assertIn(f"driftcheck: {os.path.join(self.venv, 'lib')}", p.stdout)  # the header: the bundled binary
        replay = re.search(r"replay: (.*)", p.stdout).group(1)
        self.assertRegex(replay, r"^DRIFTCHECK_BACKENDS=\S+ driftcheck replay ")  # the environment's command
        r = subprocess.run(replay, shell=True, env=self.venv_env(), capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        # The first group's verdict, reproduced: the halves swapped are not bit-exact, or an infinity moved.
        self.assertRegex(r.stdout, r"FAIL ext\.pytest\.test_k\.swapped (not_exact|inf_mismatch|nan_mismatch):")


class BuildDependencies(unittest.TestCase):
    def test_missing_tools_are_named_in_one_message(self):
        empty = tempfile.mkdtemp(prefix="dc-nopath-")
        with self.assertRaises(driftcheck_cmake.BuildError) as e:
            driftcheck_cmake.check_dependencies({"PATH": empty})
        message = str(e.exception)
        self.assertIn("needs cmake, g++, make", message)
        self.assertIn("apt-get install cmake g++ make", message)

    @unittest.skipUnless(shutil.which("cmake"), "no cmake")
    def test_missing_libraries_are_named_in_one_message(self):
        # CMake's own check (cmake/DriftcheckDependencies.cmake), through the build step: two libraries hidden
        build_dir = tempfile.mkdtemp(prefix="dc-cmake-")
        extra = {"DRIFTCHECK_CMAKE_ARGS": "-DCMAKE_DISABLE_FIND_PACKAGE_fmt=TRUE "
                 "-DCMAKE_DISABLE_FIND_PACKAGE_tomlplusplus=TRUE -DDRIFTCHECK_CUDA=OFF"}
        old = {k: os.environ.get(k) for k in extra}
        os.environ.update(extra)
        try:
            with self.assertRaises(driftcheck_cmake.BuildError) as e:
                driftcheck_cmake.cmake_build(harness.REPO, build_dir)
        finally:
            for k, v in old.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        self.assertEqual(str(e.exception), "driftcheck: missing build dependencies: fmt 9, tomlplusplus 3; on "
                                           "Debian 12: apt-get install libfmt-dev libtomlplusplus-dev")

    def test_missing_setuptools_and_wheel_are_named(self):
        code = ("import sys; sys.modules['setuptools'] = None; sys.modules['wheel'] = None; "
                f"sys.path.insert(0, {os.path.join(harness.PACKAGE_ROOT, 'build_backend')!r}); "
                "import driftcheck_build")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("needs python3-setuptools and python3-wheel (Debian 12: apt-get install python3-setuptools "
                      "python3-wheel", p.stderr)

    def test_a_given_binary_must_run(self):
        bad = os.path.join(tempfile.mkdtemp(prefix="dc-bin-"), "driftcheck")
        with open(bad, "w") as f:
            f.write("#!/bin/sh\necho broken >&2\nexit 3\n")
        os.chmod(bad, 0o755)
        os.environ["DRIFTCHECK_BINARY"] = bad
        try:
            with self.assertRaises(driftcheck_cmake.BuildError) as e:
                driftcheck_cmake.given_binary()
        finally:
            del os.environ["DRIFTCHECK_BINARY"]
        self.assertIn("does not run (`driftcheck list` exit 3): broken", str(e.exception))

    def test_without_the_cpp_sources_the_build_says_where_it_looked(self):
        with self.assertRaises(driftcheck_cmake.BuildError) as e:
            driftcheck_cmake.source_root(os.path.join(tempfile.mkdtemp(prefix="dc-nosrc-"), "python"))
        self.assertIn("the C++ sources of the driftcheck command line are not here", str(e.exception))


if __name__ == "__main__":
    unittest.main()
