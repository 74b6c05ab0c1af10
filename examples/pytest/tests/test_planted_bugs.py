"""These two tests fail, on purpose: each kernel has a planted bug, and the failure message is driftcheck's
report of it (the finding groups, the shrunk case and a replay command that runs as printed)."""

import driftcheck as dc

from mykernels.paged_decode import paged_decode_planted_bug
from mykernels.rmsnorm import rmsnorm_planted_bug
from test_paged_decode import NUMERICS as DECODE_NUMERICS, SUPPORTS as DECODE_SUPPORTS
from test_rmsnorm import NUMERICS as RMSNORM_NUMERICS


def test_rmsnorm_planted_bug():
    dc.fuzz(rmsnorm_planted_bug, numerics=RMSNORM_NUMERICS, seconds=30)


def test_paged_decode_planted_bug():
    dc.fuzz(paged_decode_planted_bug, numerics=DECODE_NUMERICS, supports=DECODE_SUPPORTS, seconds=30)
