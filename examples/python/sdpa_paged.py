"""torch.nn.functional.scaled_dot_product_attention under one SDPA backend, on driftcheck's paged-KV cases.

The runner gathers each sequence's keys and values through the block table into contiguous [L, Hkv, D] tensors
(exact copies), dequantises fp8 caches as act(fp32(k) * k_scale) (the rounding `kv_dequant_rounded` declares;
16-bit caches at scale 1 are used as they are), maps query head h to kv head h / (Hq / Hkv) by
repeat_interleave, and calls SDPA once per sequence with the reference's visibility: causal alignment at the end
(query j of q sits at p = L - q + j), a sliding window as a boolean mask where the backend takes one, the keys
before every row's window left out (a mask is an added -inf: a NaN or infinite key or value under it would reach
the row).

Backends (--sdpa-backend) and what they compute (declared in sdpa_paged.toml):
- MATH: with torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(False) (torch >= 2.5) the math path upcasts
  q, k, v to fp32, so logits, softmax and P.V are fp32 and o is rounded once; fp32 matmuls are pinned to IEEE
  (no TF32). Returns no lse.
- FLASH_ATTENTION: FlashAttention-2, fp32 accumulation, P rounded to the activation dtype before P.V. Called
  through torch.ops.aten._scaled_dot_product_flash_attention (what SDPA dispatches to, and what torch's own
  causal_lower_right bias uses), which also returns the kernel's lse; its causal mask is aligned at the end. It
  takes no mask: no sliding window.
- EFFICIENT_ATTENTION (CUTLASS memory-efficient) and CUDNN_ATTENTION: fp32 accumulation, P rounded before P.V;
  masks as boolean attn_mask.
MATH, EFFICIENT and CUDNN return no lse through the public API: this runner writes lse from its own fp32
logsumexp of the same (gathered, dequantised, head-expanded) q and K and mask (paged.lse_fp32), so for them the
lse check judges the runner's glue and the kernel is judged through o.
Nothing in SDPA expresses a logit softcap or attention sinks: such cases are unsupported with that reason.

--planted-bug gqa_modulo: kv heads expanded with repeat instead of repeat_interleave, so query head h reads kv head
h % Hkv (the GQA head-mapping bug class); shows whenever Hkv > 1 and Hq > Hkv.
"""

import argparse
import re
import warnings

import driftcheck as dc
from driftcheck import paged

BACKENDS = ("MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")

parser = argparse.ArgumentParser()
parser.add_argument("--sdpa-backend", choices=BACKENDS, required=True)
parser.add_argument("--device", default="cuda")
parser.add_argument("--planted-bug", choices=["gqa_modulo"])
args = parser.parse_args()
BACKEND = args.sdpa_backend


def _setup():
    """None when this torch can run the chosen backend with the declared numerics, else why not."""
    try:
        import torch
        from torch.nn.attention import SDPBackend  # noqa: F401 (torch >= 2.3)
    except ImportError as e:
        return f"torch with torch.nn.attention.sdpa_kernel (>= 2.3) is not importable ({e})"
    torch.set_float32_matmul_precision("highest")  # fp32 matmuls in IEEE fp32, never TF32
    if BACKEND == "MATH":
        if not hasattr(torch.backends.cuda, "allow_fp16_bf16_reduction_math_sdp"):
            return f"torch {torch.__version__}'s math SDPA computes in the activation dtype (fp32 upcast: >= 2.5)"
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(False)
    if BACKEND == "FLASH_ATTENTION" and not torch.backends.cuda.is_flash_attention_available():
        return f"torch {torch.__version__} was built without FlashAttention"
    if BACKEND == "CUDNN_ATTENTION" and not torch.backends.cudnn.is_available():
        return "cuDNN is not available to torch"
    return None


_why_not = _setup()
if _why_not:
    dc.unavailable(_why_not)
else:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel


@dc.attention(tensors="torch", device=args.device)
def attention(case):
    p = case.params
    group = p.num_q_heads // p.num_kv_heads
    with sdpa_kernel([getattr(SDPBackend, BACKEND)]):
        for seq in paged.sequences(case):
            if seq.q_len == 0:
                continue
            if p.causal and seq.q_len > seq.seq_len:
                raise dc.Unsupported(f"sequence {seq.index}: {seq.q_len} queries, {seq.seq_len} keys: rows before "
                                     "the first key have no SDPA convention")
            q = case.q[seq.q_start : seq.q_end]
            # Keys no row sees (before every row's window) are not passed: SDPA masks by adding -inf, so a NaN
            # or infinite K/V there would reach every row (NaN + -inf, 0 x inf), which no kernel that skips them
            # does. Keys masked for some rows only stay, under the mask.
            visible = paged.visible(seq, p.causal, p.window)
            first = int(visible.any(axis=0).argmax()) if visible.any() else 0
            k = kv_heads(dequantised(case, "k_cache", seq, p.k_scale), group)[first:]
            v = kv_heads(dequantised(case, "v_cache", seq, p.v_scale), group)[first:]
            visible = visible[:, first:]
            tensors = aligned(t.transpose(0, 1).unsqueeze(0).contiguous() for t in (q, k, v))
            o, lse = sdpa(*tensors, seq, p, visible)
            case.o[seq.q_start : seq.q_end].copy_(o[0].transpose(0, 1))
            if lse is None:  # the public API returns none: the runner's own fp32 lse (see the docstring)
                lse = paged.lse_fp32(q, k, p.scale, visible)
            else:
                lse = lse[0, :, : seq.q_len].transpose(0, 1)
            case.lse[seq.q_start : seq.q_end].copy_(lse)


def dequantised(case, name, seq, scale):
    """[L, Hkv, D] keys or values of one sequence in the activation dtype."""
    kv = paged.gather(case[name], seq, case.params.block_size)
    if not dc.dtypes.is_fp8(case.dtype(name)):
        return kv
    return (dc.dtypes.to_float(kv, case.dtype(name)) * scale).to(case.q.dtype)


def aligned(tensors):
    """The fused backends need 16-byte aligned data pointers and torch's dispatcher does not check them: on the
    H200 (torch 2.11) a misaligned q view (a decode row, which .contiguous() does not copy) made EFFICIENT raise
    "p.query_ptr is not correctly aligned" and CUDNN and FLASH fault with a sticky "misaligned address"
    (docs/results/gpu/h200-4197d19-external-examples.md). Such a case is declined with that reason; MATH takes any view."""
    tensors = list(tensors)
    if BACKEND != "MATH":
        for name, t in zip("qkv", tensors):
            if t.data_ptr() % 16:
                raise dc.Unsupported(f"{BACKEND} needs 16-byte aligned q, k, v; {name} starts at byte "
                                     f"{t.data_ptr() % 16} of 16 (torch does not check this before the kernel)")
    return tensors


def kv_heads(kv, group):
    if args.planted_bug == "gqa_modulo":
        return kv.repeat(1, group, 1)
    return kv.repeat_interleave(group, dim=1)


def sdpa(q, k, v, seq, p, visible):
    """o [1, Hq, q_len, D] and lse [1, Hq, >= q_len] (or None) of one sequence; `visible` [q_len, keys passed]."""
    if BACKEND == "FLASH_ATTENTION":
        out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, p.causal, False, scale=p.scale)
        return out[0], out[1]
    # SDPA's is_causal aligns at the top left, which is the reference's alignment only when q_len == keys passed
    top_left = p.causal and not p.window and seq.q_len == k.shape[2]
    mask = None if visible.all() or top_left else torch.as_tensor(visible, device=q.device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=top_left and seq.q_len > 1,
                                               scale=p.scale)
            return o, None
        except RuntimeError as e:
            if "No available kernel" not in str(e) and "no kernel found to launch" not in str(e):
                raise
            why = "; ".join(re.sub(r"\s+", " ", str(w.message)) for w in caught) or str(e)
            raise dc.Unsupported(f"{BACKEND} declined q_len {seq.q_len}, L {seq.seq_len}, D {q.shape[-1]}: {why}")


@attention.supports
def _(case):
    p = case.params
    if p.softcap > 0:
        return "SDPA has no logit softcap"
    if p.has_sinks:
        return "SDPA has no attention sinks"
    if p.window and BACKEND == "FLASH_ATTENTION":
        return "FLASH_ATTENTION under SDPA takes no mask: no sliding window"
    act, kv = case.dtype("q"), case.dtype("k_cache")
    if act not in ("bf16", "fp16"):
        return f"q is {act}: SDPA's fused backends take bf16/fp16"
    if not dc.dtypes.is_fp8(kv) and (kv != act or p.k_scale != 1 or p.v_scale != 1):
        return f"{kv} cache with q {act}, k_scale {p.k_scale}, v_scale {p.v_scale}: only fp8 caches are dequantised"
    return None


if __name__ == "__main__":
    dc.serve()
