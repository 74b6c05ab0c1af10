# The repository's root conftest: pytest puts this folder on sys.path, so the tests import `mykernels`. The
# driftcheck plugin loads by itself once the package is installed (pip install ./python); from a checkout of
# driftcheck run pytest with `-p driftcheck.pytest_plugin` and python/ on PYTHONPATH (README.md here).
