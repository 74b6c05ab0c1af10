"""The worker `driftcheck.fuzz` starts for a kernel written with the decorators (docs/PYTHON.md, pytest):

    python3 -m driftcheck.kernel_worker MODULE:NAME [--file PATH]

It imports MODULE (the test process's sys.path reaches it through PYTHONPATH, set in the backends file the call
writes), or, when that name does not import, the module's source file PATH under that name; finds the kernel NAME
in it and serves that kernel alone, whatever else the module registers. A kernel that cannot be imported ends the
worker before its hello with one line on stderr, which driftcheck reports as a bad backend (exit 2) and
`driftcheck.fuzz` as a test error.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from . import api, worker


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _from_file(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load(target: str, path: str = None) -> api.Kernel:
    """The kernel registered as NAME in MODULE (`target` = "MODULE:NAME"); raises with the reason otherwise."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"'{target}' is not MODULE:NAME")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        # the module itself is not on the path (pytest's importlib import mode): its file, under its name; a
        # module that was found but failed (an import inside it) fails the same way from its file
        missing = e.name or ""
        if not path or not (module_name == missing or module_name.startswith(missing + ".")):
            raise
        module = _from_file(module_name, path)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"module {module_name} has no '{attr}'")
        obj = getattr(obj, part)
    if not isinstance(obj, api.Kernel):
        raise TypeError(f"{target} is a {type(obj).__name__}, not a kernel registered with a driftcheck decorator "
                        "(@driftcheck.rmsnorm, @driftcheck.attention, ...)")
    return obj


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python3 -m driftcheck.kernel_worker")
    parser.add_argument("target", help="MODULE:NAME of the kernel")
    parser.add_argument("--file", help="the module's source file, imported from there when MODULE does not import")
    args = parser.parse_args(argv)
    try:
        kernel = load(args.target, args.file)
    except BaseException as e:  # anything the kernel's module raised at import, SystemExit included
        if isinstance(e, KeyboardInterrupt):
            raise
        sys.stderr.write(f"driftcheck: kernel {args.target} is not importable in the worker: {_first_line(e)}\n")
        sys.stderr.flush()
        sys.exit(2)
    api.serve_only(kernel)
    worker.serve()


if __name__ == "__main__":
    main()
