"""A Triton fused dual RMSNorm + concat (the EAGLE3 drafter's layer-0 input), judged by
driftcheck. Written for this example; it computes what vLLM's eagle3 fused_dual_rmsnorm_cat computes.

One program per (row, half): grid (N, 2). Half 0 normalises e with w_e into out[:, :H], half 1 h with w_h into
out[:, H:]. Numerics (declared in triton_dual_rmsnorm_cat.toml: output_roundings = 1): the row loaded and
converted to fp32; tl.sum of squares in fp32; s = rsqrt(sum / H + eps) in fp32; w' = w or 1 + w in fp32;
y = x * s * w' in fp32, rounded once (round to nearest even) by the store's conversion. Rows, halves and weights
are addressed by their strides, so padded, misaligned and aliased layouts are read where they are.

--planted-bug weight_rounded_early: x * s is rounded to the activation dtype before the weight multiply, a second
rounding where one is declared (vllm#42325 / PR #42379, pytorch#177163).
"""

import argparse

import driftcheck as dc

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda")
parser.add_argument("--planted-bug", choices=["weight_rounded_early"])
args = parser.parse_args()

try:
    import torch
    import triton
    import triton.language as tl
except ImportError as e:
    dc.unavailable(f"triton is not importable ({e}); this example needs a GPU with Triton")
else:

    @triton.jit
    def dual_rmsnorm_cat_kernel(e_ptr, h_ptr, we_ptr, wh_ptr, out_ptr, H, eps,
                                e_row, e_col, h_row, h_col, we_st, wh_st, out_row, out_col,
                                ONE_PLUS: tl.constexpr, ROUND_EARLY: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        half = tl.program_id(1)
        cols = tl.arange(0, BLOCK)
        mask = cols < H
        if half == 0:
            x = tl.load(e_ptr + row * e_row + cols * e_col, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(we_ptr + cols * we_st, mask=mask, other=0.0).to(tl.float32)
        else:
            x = tl.load(h_ptr + row * h_row + cols * h_col, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(wh_ptr + cols * wh_st, mask=mask, other=0.0).to(tl.float32)
        if ONE_PLUS:
            w = 1.0 + w
        s = tl.rsqrt(tl.sum(x * x, axis=0) / H + eps)
        xs = x * s
        if ROUND_EARLY:
            xs = xs.to(out_ptr.dtype.element_ty).to(tl.float32)
        y = xs * w
        tl.store(out_ptr + row * out_row + (half * H + cols) * out_col, y.to(out_ptr.dtype.element_ty), mask=mask)


@dc.dual_rmsnorm_cat(tensors="torch", device=args.device)
def dual_rmsnorm_cat(case):
    e, h, w_e, w_h, out = case.e, case.h, case.w_e, case.w_h, case.out
    rows, hidden = e.shape
    if rows == 0:
        return
    block = triton.next_power_of_2(hidden)
    dual_rmsnorm_cat_kernel[(rows, 2)](
        e, h, w_e, w_h, out, hidden, case.params.eps,
        e.stride(0), e.stride(1), h.stride(0), h.stride(1), w_e.stride(0), w_h.stride(0),
        out.stride(0), out.stride(1),
        ONE_PLUS=case.params.weight_mode == "one_plus", ROUND_EARLY=args.planted_bug == "weight_rounded_early",
        BLOCK=block, num_warps=8 if block >= 4096 else (4 if block >= 1024 else 2))


if __name__ == "__main__":
    dc.serve()
