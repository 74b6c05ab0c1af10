"""The driftcheck package with its command line inside (docs/PYTHON.md, "Installing"). The metadata is in
pyproject.toml; this file adds the three build steps setuptools cannot express there:

- build_py puts the driftcheck binary in the package (driftcheck/_bin/driftcheck): DRIFTCHECK_BINARY, or a CMake
  build of the C++ sources (build_backend/driftcheck_cmake.py);
- the wheel is tagged for this platform (it holds a native binary) but for any Python 3;
- sdist carries the C++ sources under cpp/, so a wheel can be built from the sdist alone.
"""

import os
import shutil
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "build_backend"))
import driftcheck_cmake  # noqa: E402


class BuildPyWithBinary(build_py):
    def run(self):
        super().run()
        build_temp = self.get_finalized_command("build").build_temp
        try:
            binary = driftcheck_cmake.driftcheck_binary(HERE, os.path.join(os.path.dirname(build_temp), "cmake"))
        except driftcheck_cmake.BuildError as e:
            sys.stderr.write(f"{e}\n")
            raise SystemExit(1)
        target = os.path.join(self.build_lib, "driftcheck", "_bin", "driftcheck")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(binary, target)
        os.chmod(target, 0o755)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a native binary inside: installed as platform-specific (platlib), the wheel not pure


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform  # the Python code runs on any Python 3; the binary on this platform


class SdistWithSources(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        try:
            root = driftcheck_cmake.source_root(HERE)
        except driftcheck_cmake.BuildError as e:
            sys.stderr.write(f"{e}\n")
            raise SystemExit(1)
        for rel in driftcheck_cmake.CPP_SOURCES:
            src, dst = os.path.join(root, rel), os.path.join(base_dir, "cpp", rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if os.path.isdir(src):
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copyfile(src, dst)


setup(distclass=BinaryDistribution,
      cmdclass={"build_py": BuildPyWithBinary, "bdist_wheel": PlatformWheel, "sdist": SdistWithSources})
