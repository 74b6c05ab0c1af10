"""Paged-KV decode attention in PyTorch: one query token per sequence, keys and values read through the block
table.

Each sequence's K and V are gathered from the cache pages its block-table row names (slots below seq_len) and
dequantised in fp32 (code x k_scale, one fp32 rounding; fp8 caches too, with torch's float8 types or raw bytes);
query head h reads kv head h // (Hq / Hkv); logits = scale * q.k in fp32, capped c * tanh(s / c) with a softcap,
keys outside a sliding window not read; one fp32 softmax with max subtraction, a sink adding exp(sink - m) to the
denominator; o = P.V / denominator rounded once to the activation dtype, lse = m + log(denominator) in fp32.
Its tests declare that: numerics {"p_rounded": False, "kv_dequant_rounded": False}. Cases with a query length
other than 1 are declined (a decode kernel), so the campaign judges the decode batches of its stream.

`paged_decode_planted_bug` has a planted bug: it reads whole pages only, so the keys of a partly filled last page
(seq_len % block_size != 0) are never seen.
"""

import math

import torch

import driftcheck as dc
from driftcheck import paged


def _kv(case, name, seq, scale, whole_pages_only):
    bs = case.params.block_size
    if whole_pages_only:  # the planted bug
        seq = paged.Sequence(seq.index, seq.q_start, seq.q_len, seq.seq_len // bs * bs, seq.blocks)
    raw = paged.gather(case[name], seq, bs)  # [L, Hkv, D] in the cache's dtype
    return dc.dtypes.to_float(raw, case.dtype(name), scale)


def _decode(case, whole_pages_only=False):
    p = case.params
    group = p.num_q_heads // p.num_kv_heads
    q_all = dc.dtypes.to_float(case.q, case.dtype("q"))  # [S, Hq, D], exact in fp32
    sinks = case.sinks.float() if p.has_sinks else None
    o_all = torch.zeros(q_all.shape, dtype=torch.float32)
    lse_all = torch.full(q_all.shape[:2], -math.inf, dtype=torch.float32)
    for seq in paged.sequences(case):
        if seq.q_len != 1:
            raise dc.Unsupported(f"query length {seq.q_len}: a decode kernel takes one query per sequence")
        # the query sits at position seq_len - 1; with a sliding window it sees the last `window` keys only, and
        # the others are not read at all (their slots may hold anything)
        first = max(0, seq.seq_len - p.window) if p.window > 0 else 0
        k = _kv(case, "k_cache", seq, p.k_scale, whole_pages_only)[first:].repeat_interleave(group, dim=1)
        v = _kv(case, "v_cache", seq, p.v_scale, whole_pages_only)[first:].repeat_interleave(group, dim=1)
        q = q_all[seq.q_start]  # [Hq, D]
        s = torch.einsum("hd,lhd->hl", q, k) * p.scale  # [Hq, L]: fp32 logits
        if p.softcap > 0:
            s = p.softcap * torch.tanh(s / p.softcap)
        m = s.max(dim=1).values if s.shape[1] else torch.full((p.num_q_heads,), -math.inf)
        if sinks is not None:
            m = torch.maximum(m, sinks)
        m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(s - m_safe[:, None])
        denom = e.sum(dim=1) + (torch.exp(sinks - m_safe) if sinks is not None else 0)
        o = torch.einsum("hl,lhd->hd", e, v) / denom[:, None]
        o_all[seq.q_start] = torch.where(denom[:, None] == 0, torch.zeros_like(o), o)
        lse_all[seq.q_start] = torch.where(denom == 0, m, m_safe + torch.log(denom))
    case.o.copy_(o_all.to(case.o.dtype))
    case.lse.copy_(lse_all)


@dc.attention(tensors="torch", device="cpu")
def paged_decode(case):
    _decode(case)


@dc.attention(tensors="torch", device="cpu")
def paged_decode_planted_bug(case):
    _decode(case, whole_pages_only=True)


@paged_decode.supports
@paged_decode_planted_bug.supports
def _(case):
    # metadata only: a batch of decode rows has as many query tokens as sequences
    if case.shape("q")[0] != case.shape("seq_lens")[0]:
        return "not a decode batch (query tokens != sequences): a decode kernel takes one query per sequence"
