"""What torch SDPA writes for the log-sum-exp of a query row whose logits hold a NaN, backend by backend, on the
GPU: the evidence behind the SDPA example's declared lse convention (sdpa_paged.toml).

    python3 examples/python/sdpa_lse_nan.py      # prints one JSON object per backend and case

FLASH_ATTENTION returns its lse from the kernel; the other backends' public API returns none, so the row's lse
is also formed from the MATH backend's scores in fp32 (what the runner's glue writes)."""
import json
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def case(kind):
    torch.manual_seed(0)
    q = torch.randn(1, 2, 4, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 2, 8, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 2, 8, 64, device="cuda", dtype=torch.bfloat16)
    if kind == "nan_q":
        q[0, 0, 1, 3] = float("nan")  # row 1 of head 0: every logit NaN
    elif kind == "nan_k":
        k[0, 1, 5, 0] = float("nan")  # key 5 of head 1: one NaN logit in every row of head 1
    return q, k, v


def main():
    for kind in ("nan_q", "nan_k"):
        q, k, v = case(kind)
        scale = 1 / math.sqrt(q.shape[-1])
        s = (q.float() @ k.float().transpose(-1, -2)) * scale
        lse_math = torch.logsumexp(s, dim=-1)
        out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False, scale=scale)
        o_flash, lse_flash = out[0], out[1]
        with sdpa_kernel(SDPBackend.MATH):
            o_math = F.scaled_dot_product_attention(q, k, v, scale=scale)
        print(json.dumps({"case": kind, "torch": torch.__version__,
                          "lse_flash": [[str(x) for x in r] for r in lse_flash[0].float().tolist()],
                          "lse_math_fp32": [[str(x) for x in r] for r in lse_math[0].tolist()],
                          "o_flash_nan_rows": torch.isnan(o_flash.float()).any(-1)[0].tolist(),
                          "o_math_nan_rows": torch.isnan(o_math.float()).any(-1)[0].tolist()}))


if __name__ == "__main__":
    main()
