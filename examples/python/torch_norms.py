"""RMSNorm and the unfused EAGLE3 layer-0 chain (rmsnorm(e), rmsnorm(h), cat) in PyTorch, judged by driftcheck.

Two implementations of the norm, chosen with --norm:
- `native` (torch >= 1.13, CPU or GPU): vLLM's RMSNorm.forward_native written out in torch ops: x to fp32; with a
  residual, z = x + residual in fp32 and residual <- act(z), the variance from the unrounded z; s = rsqrt(mean(z^2)
  + eps) in fp32; y = act(act(z * s) * w): two roundings (Gemma's (1 + w): w' = 1 + w in fp32, the row in fp32,
  one rounding). Declared output_roundings = 2.
- `functional`: torch.nn.functional.rms_norm (torch >= 2.4). Since torch 2.8 (`torch._fused_rms_norm`) it computes
  in fp32 with the weight multiplied in fp32 and rounds once, on both its fused and composite paths; older
  composites rounded x * s before the weight. Declared output_roundings = 1, so an older torch says unavailable.
  A residual is added by a torch add (z = act(x + residual), residual <- z, y = rms_norm(z)): the oracle allows
  the variance of the rounded z (docs/ORACLE.md, the #52104 term).
The chain (dual_rmsnorm_cat) normalises e with w_e and h with w_h with the chosen norm and writes torch.cat of
the halves into the output.

--planted-bug residual_not_written: the residual add goes to a temporary and the updated residual is never written
back (the residual-dropping class of vLLM PR #14464, #11672).
--planted-bug halves_swapped: the chain concatenates [norm(h), norm(e)] (the drafter input's concat order).
"""

import argparse

import driftcheck as dc

parser = argparse.ArgumentParser()
parser.add_argument("--norm", choices=["native", "functional"], default="native")
parser.add_argument("--device", default="cpu")
parser.add_argument("--planted-bug", choices=["residual_not_written", "halves_swapped"])
args = parser.parse_args()

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    dc.unavailable(f"torch is not importable ({e})")
else:
    if args.norm == "functional" and not hasattr(F, "rms_norm"):
        dc.unavailable(f"torch {torch.__version__} has no torch.nn.functional.rms_norm (added in 2.4)")
    elif args.norm == "functional" and not hasattr(torch, "_fused_rms_norm"):
        dc.unavailable(f"torch {torch.__version__}'s F.rms_norm rounds x * s before the weight (two roundings); "
                       "this backend declares one (torch >= 2.8)")


def norm(z, w, eps, weight_mode):
    """RMSNorm of rows z: fp32 rows for `native`, activation-dtype rows for `functional`; returns act rows."""
    if args.norm == "native":
        s = torch.rsqrt(z.pow(2).mean(dim=-1, keepdim=True) + eps)
        if weight_mode == "one_plus":
            return (z * s * (1 + w.float())).to(w.dtype)
        return (z * s).to(w.dtype) * w
    if weight_mode == "one_plus":  # (1 + w) formed in fp32: the row in fp32, one rounding at the end
        return F.rms_norm(z.float(), (z.shape[-1],), 1 + w.float(), eps).to(w.dtype)
    return F.rms_norm(z, (z.shape[-1],), w, eps)


def rows(t):
    return t.float() if args.norm == "native" else t


@dc.rmsnorm(tensors="torch", device=args.device)
def rmsnorm(case):
    p = case.params
    z = rows(case.x)
    if p.residual:
        z = z + rows(case.residual)  # native: fp32 add; functional: an act add (one rounding), as add + norm do
        if args.planted_bug != "residual_not_written":
            case.residual.copy_(z)
    case.y.copy_(norm(z, case.w, p.eps, p.weight_mode))


@dc.dual_rmsnorm_cat(tensors="torch", device=args.device)
def dual_rmsnorm_cat(case):
    p = case.params
    ye = norm(rows(case.e), case.w_e, p.eps, p.weight_mode)
    yh = norm(rows(case.h), case.w_h, p.eps, p.weight_mode)
    halves = [yh, ye] if args.planted_bug == "halves_swapped" else [ye, yh]
    case.out.copy_(torch.cat(halves, dim=-1))


if __name__ == "__main__":
    dc.serve()
