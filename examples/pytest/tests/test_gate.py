import os

import driftcheck as dc

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ci", "driftcheck.toml")


def test_gate():
    # each backend x op x check of the gate is also a test result of its own: test_gate::<backend> <op> <check>
    dc.gate(CONFIG)
