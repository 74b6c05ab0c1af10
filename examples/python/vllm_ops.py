"""vLLM's own kernels, called from the installed `vllm` (a release, or your branch installed with `pip install -e`),
judged by driftcheck. One op per worker (--op); without an importable vllm the backend says unavailable, with why.

- `rms_norm`: vllm._custom_ops.rms_norm(out, x, w, eps) (csrc/layernorm_kernels.cu). x is passed as driftcheck laid
  it out (row stride included, the path #28103 fixed); out is a contiguous temporary copied into y (exact).
  Numerics of the built-in twin cpu.rmsnorm.cuda.
- `fused_add_rms_norm`: vllm._custom_ops.fused_add_rms_norm(x, residual, w, eps), in place: x <- y,
  residual <- x + residual. driftcheck's x is an input that must not change, so the kernel works on a contiguous
  copy of x and on the residual, and y is copied out. Numerics of cpu.rmsnorm.fused_add.
- `attention`: vLLM's Triton unified attention (unified_attention), on the case's own tensors: q, the paged caches
  [num_blocks, block_size, Hkv, D], block_table, seq_lens, query_start_loc, sinks, o written in place. It returns
  no lse. Numerics of cpu.attn.triton_unified.
- `dual_rmsnorm_cat`: the EAGLE3 fused_dual_rmsnorm_cat (Triton), given contiguous copies (it requires them); its
  result is copied into out. Numerics of cpu.dual.fused.

--planted-bug residual_not_written (fused_add_rms_norm): the kernel updates a copy of the residual that is never
written back (the residual-dropping class of PR #14464).
"""

import argparse
import importlib

import driftcheck as dc
from driftcheck import paged

OPS = {"rms_norm": "rmsnorm", "fused_add_rms_norm": "rmsnorm", "attention": "attention",
       "dual_rmsnorm_cat": "dual_rmsnorm_cat"}
ATTENTION_MODULES = ("vllm.attention.ops.triton_unified_attention", "vllm.v1.attention.ops.triton_unified_attention")
DUAL_MODULES = ("vllm.model_executor.layers.eagle3_aux_rmsnorm", "vllm.model_executor.models.eagle3_aux_rmsnorm")

parser = argparse.ArgumentParser()
parser.add_argument("--op", choices=sorted(OPS), required=True)
parser.add_argument("--device", default="cuda")
parser.add_argument("--planted-bug", choices=["residual_not_written"])
args = parser.parse_args()


def find(modules, name):
    """The first of modules that imports and has `name`; else None and why."""
    errors = []
    for m in modules:
        try:
            return getattr(importlib.import_module(m), name), None
        except (ImportError, AttributeError) as e:
            errors.append(f"{m}: {e}")
    return None, "; ".join(errors)


try:
    import torch
    import vllm  # noqa: F401

    torch.set_float32_matmul_precision("highest")  # the glue's fp32 lse in IEEE fp32, never TF32
except ImportError as e:
    dc.unavailable(f"vllm is not importable ({e}); install vLLM (or your branch: pip install -e) to run its ops")
    kernel_fn = None
else:
    if args.op in ("rms_norm", "fused_add_rms_norm"):
        kernel_fn, why = find(("vllm._custom_ops",), args.op)
    elif args.op == "attention":
        kernel_fn, why = find(ATTENTION_MODULES, "unified_attention")
    else:
        kernel_fn, why = find(DUAL_MODULES, "fused_dual_rmsnorm_cat")
    if kernel_fn is None:
        dc.unavailable(f"this vllm has no {args.op}: {why}")


def rmsnorm(case):
    p = case.params
    if args.op == "rms_norm":
        out = torch.empty(case.x.shape, dtype=case.x.dtype, device=case.x.device)
        kernel_fn(out, case.x, case.w, p.eps)
        case.y.copy_(out)
        return
    x = case.x.contiguous().clone()
    residual = case.residual.contiguous().clone()
    kernel_fn(x, residual, case.w, p.eps)
    if args.planted_bug != "residual_not_written":
        case.residual.copy_(residual)
    case.y.copy_(x)


def rmsnorm_supports(case):
    p = case.params
    if p.weight_mode != "plain":
        return "vLLM's rms_norm kernels multiply by w (Gemma's 1 + w is another kernel)"
    if args.op == "rms_norm" and p.residual:
        return "a residual case: that is fused_add_rms_norm (--op fused_add_rms_norm)"
    if args.op == "fused_add_rms_norm" and not p.residual:
        return "fused_add_rms_norm needs a residual"
    if case.dtype("x") not in ("bf16", "fp16", "fp32"):
        return f"x is {case.dtype('x')}"
    return None


def attention(case):
    p = case.params
    host_seq_lens, host_qsl = case.host("seq_lens"), case.host("query_start_loc")
    q_lens = host_qsl[1:] - host_qsl[:-1]
    kv_fp8 = dc.dtypes.is_fp8(case.dtype("k_cache"))
    scale = (lambda s: torch.tensor(s, dtype=torch.float32, device=case.q.device)) if kv_fp8 else (lambda s: None)
    kernel_fn(q=case.q, k=case.k_cache, v=case.v_cache, out=case.o, cu_seqlens_q=case.query_start_loc,
              max_seqlen_q=int(q_lens.max()), seqused_k=case.seq_lens, max_seqlen_k=int(host_seq_lens.max()),
              softmax_scale=p.scale, causal=True, window_size=(p.window - 1, 0) if p.window else (-1, -1),
              block_table=case.block_table, softcap=p.softcap, q_descale=None, k_descale=scale(p.k_scale),
              v_descale=scale(p.v_scale), sinks=case.get("sinks"))
    write_lse(case)


def write_lse(case):
    """unified_attention returns no lse: the runner's own fp32 logsumexp of the kernel's inputs (glue, so the
    kernel is judged through o; K dequantised as the kernel does, act(fp32(k) * k_scale))."""
    p = case.params
    group = p.num_q_heads // p.num_kv_heads
    for seq in paged.sequences(case):
        k = paged.gather(case.k_cache, seq, p.block_size)
        if dc.dtypes.is_fp8(case.dtype("k_cache")):
            k = (dc.dtypes.to_float(k, case.dtype("k_cache")) * p.k_scale).to(case.q.dtype)
        sinks = case.get("sinks")
        case.lse[seq.q_start : seq.q_end].copy_(paged.lse_fp32(
            case.q[seq.q_start : seq.q_end], k.repeat_interleave(group, dim=1), p.scale,
            paged.visible(seq, p.causal, p.window), p.softcap, sinks))


def attention_supports(case):
    p = case.params
    kv = case.dtype("k_cache")
    if not p.causal:
        return "unified_attention asserts causal"
    if kv == "fp8_e4m3fnuz" and torch.version.hip is None:
        return "fp8 e4m3fnuz is AMD's encoding: Triton on NVIDIA loads e4m3fn and e5m2"
    if not dc.dtypes.is_fp8(kv) and (p.k_scale != 1 or p.v_scale != 1):
        return f"{kv} cache with k_scale {p.k_scale}, v_scale {p.v_scale}: the kernel scales fp8 caches only"
    return None


def dual_rmsnorm_cat(case):
    p = case.params
    out = kernel_fn(case.e.contiguous(), case.h.contiguous(), case.w_e.contiguous(), case.w_h.contiguous(), p.eps)
    case.out.copy_(out)


def dual_supports(case):
    if case.params.weight_mode != "plain":
        return "fused_dual_rmsnorm_cat multiplies by w"
    return None


KERNELS = {"rmsnorm": (dc.rmsnorm, rmsnorm, rmsnorm_supports), "attention": (dc.attention, attention,
           attention_supports), "dual_rmsnorm_cat": (dc.dual_rmsnorm_cat, dual_rmsnorm_cat, dual_supports)}
decorator, fn, supports = KERNELS[OPS[args.op]]
decorator(fn, tensors="torch", device=args.device, supports=supports)

if __name__ == "__main__":
    dc.serve()
