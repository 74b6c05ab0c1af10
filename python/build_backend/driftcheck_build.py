"""The build backend of the driftcheck package (pyproject.toml names it): setuptools' own, once it is checked that
setuptools and wheel are there, so that a machine without them gets one line naming the Debian packages instead of
a traceback. What the build does (the driftcheck command line, from a CMake build or a given binary) is in
setup.py and driftcheck_cmake.py; docs/PYTHON.md, "Installing", says how to run it."""

import sys

_missing = []
try:
    import setuptools  # noqa: F401
except ImportError:
    _missing.append("python3-setuptools")
try:
    import wheel  # noqa: F401
except ImportError:
    _missing.append("python3-wheel")
if _missing:
    sys.stderr.write(
        f"driftcheck: building the Python package needs {' and '.join(_missing)} (Debian 12: apt-get install "
        f"{' '.join(_missing)}; in a virtual environment made with --system-site-packages they come from the "
        "system)\n")
    sys.exit(1)

from setuptools.build_meta import *  # noqa: E402,F401,F403  (the PEP 517 hooks)
