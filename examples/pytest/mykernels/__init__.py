"""A small kernel repository, as a kernel team keeps one: torch kernels with tests in pytest (examples/pytest)."""
