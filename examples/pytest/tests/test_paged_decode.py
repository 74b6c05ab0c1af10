import driftcheck as dc

from mykernels.paged_decode import paged_decode

# fp32 logits, softmax and P.V, the probabilities not rounded, K and V dequantised in fp32.
NUMERICS = {"p_rounded": False, "kv_dequant_rounded": False}
SUPPORTS = {"dtypes": ["bf16", "fp16"]}


def test_paged_decode():
    dc.fuzz(paged_decode, numerics=NUMERICS, supports=SUPPORTS, seconds=30)
