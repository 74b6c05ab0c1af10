"""RMSNorm with the fused residual add, in PyTorch: vLLM's RMSNorm.forward_native written out.

x (and the residual) to fp32; with a residual, z = x + residual in fp32 and residual <- act(z); the variance from
z; s = rsqrt(mean(z^2) + eps) in fp32; y = act(act(z * s) * w): two roundings to the activation dtype (Gemma's
1 + w: the row times (1 + w) in fp32, one rounding). Its tests declare that: numerics {"output_roundings": 2}.

`rmsnorm_planted_bug` is the same kernel with a planted bug of the fused-add class: the residual is added and
written back, but the norm is taken of x alone.
"""

import torch

import driftcheck as dc


def _norm(z, w, eps, weight_mode):
    s = torch.rsqrt(z.pow(2).mean(dim=-1, keepdim=True) + eps)
    if weight_mode == "one_plus":
        return (z * s * (1 + w.float())).to(w.dtype)
    return (z * s).to(w.dtype) * w


@dc.rmsnorm(tensors="torch", device="cpu")
def rmsnorm(case):
    p = case.params
    z = case.x.float()
    if p.residual:
        z = z + case.residual.float()
        case.residual.copy_(z)
    case.y.copy_(_norm(z, case.w, p.eps, p.weight_mode))


@dc.rmsnorm(tensors="torch", device="cpu")
def rmsnorm_planted_bug(case):
    p = case.params
    x = case.x.float()
    if p.residual:
        case.residual.copy_(x + case.residual.float())
    case.y.copy_(_norm(x, case.w, p.eps, p.weight_mode))  # the bug: the norm of x, not of x + residual
