"""The driftcheck command line for the Python package's build (setup.py): a given binary, or a CMake build of the
C++ sources.

- DRIFTCHECK_BINARY=PATH: that driftcheck is put in the package as it is; nothing is built. This is how the
  project's CI makes a wheel from the binary its tests were built and run with (one C++ build per CI run).
- Otherwise the C++ sources are configured and built with CMake (target `driftcheck` only: no tests, no
  benchmarks), in DRIFTCHECK_CMAKE_BUILD_DIR if set, else in setuptools' build folder (python/build/cmake for
  `pip install ./python`, so a second install rebuilds only what changed). The sources are the checkout's (the
  folder above python/), or the cpp/ folder of an sdist, or DRIFTCHECK_SOURCE_DIR. DRIFTCHECK_CMAKE_ARGS adds
  configure arguments (for example -DDRIFTCHECK_CUDA=OFF); CMAKE_BUILD_PARALLEL_LEVEL sets the build's jobs.

Before anything runs, the tools and libraries are checked: anything missing ends the build with one message that
names every missing Debian 12 package.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

# The C++ sources an sdist carries (under cpp/) so that a wheel can be built from it: what CMake reads when the
# tests and benchmarks are off.
CPP_SOURCES = ["CMakeLists.txt", "cmake", "reference", "device", "reports", "fuzz", "examples/plugins",
               "golden/known-findings.toml"]

# The libraries the build needs (.ci/setup installs them), checked with dpkg on Debian before CMake runs.
LIBRARY_PACKAGES = ["libeigen3-dev", "librapidcheck-dev", "libcli11-dev", "nlohmann-json3-dev", "libfmt-dev",
                    "libtomlplusplus-dev", "libssl-dev"]
MIN_CMAKE = (3, 25)


class BuildError(Exception):
    """The one message a failed build of the command line ends with."""


def log(msg: str) -> None:
    sys.stderr.write(f"driftcheck build: {msg}\n")
    sys.stderr.flush()


def is_source_root(path: str) -> bool:
    try:
        with open(os.path.join(path, "CMakeLists.txt")) as f:
            return "project(driftcheck" in f.read()
    except OSError:
        return False


def source_root(package_dir: str) -> str:
    """The C++ source tree: DRIFTCHECK_SOURCE_DIR, an sdist's cpp/, or the checkout above python/."""
    env = os.environ.get("DRIFTCHECK_SOURCE_DIR")
    candidates = [env] if env else [os.path.join(package_dir, "cpp"), os.path.dirname(package_dir)]
    for c in candidates:
        if c and is_source_root(c):
            return os.path.abspath(c)
    raise BuildError(
        "driftcheck: the C++ sources of the driftcheck command line are not here (looked in "
        f"{', '.join(candidates)}): build from a checkout of the repository (pip install ./python) or from its "
        "sdist, or give a built binary in DRIFTCHECK_BINARY")


def _dpkg_missing(packages) -> list | None:
    """The packages dpkg does not list as installed; None where there is no dpkg (not Debian)."""
    if not shutil.which("dpkg-query"):
        return None
    missing = []
    for p in packages:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True)
        if "install ok installed" not in r.stdout:
            missing.append(p)
    return missing


def missing_packages(env=None) -> list:
    """Debian packages the build lacks: tools found by PATH, libraries by dpkg (on Debian; elsewhere CMake's own
    check names them)."""
    env = os.environ if env is None else env
    missing = []
    cmake = shutil.which("cmake", path=env.get("PATH"))
    if cmake is None:
        missing.append("cmake")
    else:
        out = subprocess.run([cmake, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"(\d+)\.(\d+)", out)
        if m and (int(m.group(1)), int(m.group(2))) < MIN_CMAKE:
            missing.append(f"cmake (>= {MIN_CMAKE[0]}.{MIN_CMAKE[1]}, found {m.group(0)})")
    path = env.get("PATH")
    if not any(shutil.which(n.split()[0], path=path) for n in [env.get("CXX") or "c++", "g++", "clang++"]):
        missing.append("g++")
    if not (shutil.which("ninja", path=path) or shutil.which("make", path=path)):
        missing.append("make")
    libs = _dpkg_missing(LIBRARY_PACKAGES)
    missing += libs or []
    return missing


def check_dependencies(env=None) -> None:
    missing = missing_packages(env)
    if missing:
        names = [m.split()[0] for m in missing]
        raise BuildError(
            f"driftcheck: building the driftcheck command line needs {', '.join(missing)}; on Debian 12: "
            f"apt-get install {' '.join(dict.fromkeys(names))} (or give a built binary in DRIFTCHECK_BINARY)")


def cmake_error(output: str) -> str:
    """driftcheck's own configure message (cmake/DriftcheckDependencies.cmake), unwrapped, else CMake's errors."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("driftcheck: missing build dependencies"):
            text = [line.strip()]
            for more in lines[i + 1:]:
                if not more.startswith("  ") or not more.strip():
                    break
                text.append(more.strip())
            return " ".join(text)
    errors = [i for i, l in enumerate(lines) if l.startswith("CMake Error")]
    if errors:
        return "\n".join(lines[errors[0]: errors[0] + 8])
    return "\n".join(lines[-15:])


def configured_source(build_dir: str) -> str | None:
    """The source tree a CMake build folder was configured for (its CMakeCache.txt), or None."""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:INTERNAL="):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def cmake_build(source: str, build_dir: str, own_build_dir: bool = False) -> str:
    """Configures and builds target `driftcheck` in build_dir; returns the binary's path. own_build_dir: the folder
    is the build's own (setuptools' build folder), cleared when it was configured for another source tree (a
    checkout copied or moved with its python/build)."""
    env = dict(os.environ)
    check_dependencies(env)
    configured = configured_source(build_dir)
    if own_build_dir and configured and os.path.realpath(configured) != os.path.realpath(source):
        log(f"{build_dir} was configured for {configured}: starting it afresh")
        shutil.rmtree(build_dir)
    os.makedirs(build_dir, exist_ok=True)
    args = ["cmake", "-S", source, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DDRIFTCHECK_BUILD_TESTS=OFF",
            "-DDRIFTCHECK_BUILD_BENCH=OFF", "-DDRIFTCHECK_HIP_AMD_CHECK=OFF"]
    if shutil.which("ninja") and not os.path.exists(os.path.join(build_dir, "Makefile")):
        args += ["-G", "Ninja"]
    if shutil.which("ccache"):
        args += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache",
                 "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"]
        env.setdefault("CCACHE_BASEDIR", source)
        env.setdefault("CCACHE_NOHASHDIR", "1")
    args += shlex.split(env.get("DRIFTCHECK_CMAKE_ARGS", ""))
    log(f"configuring the driftcheck command line: {' '.join(shlex.quote(a) for a in args)}")
    r = subprocess.run(args, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(cmake_error(r.stdout + "\n" + r.stderr))
    jobs = env.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    build = ["cmake", "--build", build_dir, "--target", "driftcheck", "-j", jobs]
    log(f"building it (a few minutes the first time): {' '.join(build)}")
    r = subprocess.run(build, env=env, stdout=sys.stderr, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise BuildError(f"driftcheck: building the driftcheck command line failed (exit {r.returncode}); "
                         f"its output is above (build folder {build_dir})")
    path = os.path.join(build_dir, "fuzz", "driftcheck")
    if not os.access(path, os.X_OK):
        raise BuildError(f"driftcheck: the build finished without {path}")
    return path


def given_binary() -> str | None:
    """DRIFTCHECK_BINARY, checked: an executable file that runs (`driftcheck list` exits 0)."""
    path = os.environ.get("DRIFTCHECK_BINARY")
    if not path:
        return None
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise BuildError(f"driftcheck: DRIFTCHECK_BINARY={path} is not an executable file")
    r = subprocess.run([path, "list"], capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(f"driftcheck: DRIFTCHECK_BINARY={path} does not run (`driftcheck list` exit "
                         f"{r.returncode}): {r.stderr.strip()[-300:]}")
    return os.path.abspath(path)


def driftcheck_binary(package_dir: str, default_build_dir: str) -> str:
    given = given_binary()
    if given:
        log(f"using DRIFTCHECK_BINARY={given} (nothing built)")
        return given
    source = source_root(package_dir)
    given_dir = os.environ.get("DRIFTCHECK_CMAKE_BUILD_DIR")
    return cmake_build(source, os.path.abspath(given_dir or default_build_dir), own_build_dir=not given_dir)
