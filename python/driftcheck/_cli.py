"""The `driftcheck` command an installed package provides: runs the driftcheck binary installed with it
(driftcheck/_bin/driftcheck), with the same arguments, in place of this process."""

import os
import sys

from .testing import bundled_binary


def main() -> None:
    path = bundled_binary()
    if not os.access(path, os.X_OK):
        sys.stderr.write(f"driftcheck: this installation has no driftcheck binary ({path}): install the package "
                         "from a checkout or an sdist (pip install ./python) or a wheel built with it, "
                         "docs/PYTHON.md\n")
        sys.exit(2)
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
