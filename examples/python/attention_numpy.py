"""A CPU paged attention in NumPy, judged by driftcheck (runs anywhere, CI included).

Numerics (declared in attention_numpy.toml): everything in fp32. K and V of each sequence are gathered through
the block table (slots below seq_len only) and dequantised in fp32 (fp32(kv) * scale, not rounded to the
activation dtype); logits = scale * q.k (BLAS sgemm), then softcap c * tanh(s / c); masked keys get -inf; one
softmax per row with max subtraction, a sink adding exp(sink - m) to the denominator; o = (P.V) / denominator,
P.V over the keys a row sees (a masked key's value never reaches it, however stale or infinite),
rounded once to the activation dtype; lse = m + log(denominator) in fp32. A row that sees no key writes o = 0 and
lse = -inf (the sink's value with a sink), the reference's convention. Each sequence is computed on its own, so
no row depends on the rest of the batch.

--planted-bug gqa_modulo: query head h reads kv head h % Hkv instead of h / (Hq / Hkv).

    driftcheck fuzz --backends examples/python/attention_numpy.toml --backend ext.numpy.attention --seconds 60
"""

import argparse

import numpy as np

import driftcheck as dc
from driftcheck import paged

parser = argparse.ArgumentParser()
parser.add_argument("--planted-bug", choices=["gqa_modulo"])
args = parser.parse_args()
f32 = np.float32


@dc.attention(tensors="numpy")
def attention(case):
    p = case.params
    heads = np.arange(p.num_q_heads)
    kv_head = heads % p.num_kv_heads if args.planted_bug == "gqa_modulo" else heads // (
        p.num_q_heads // p.num_kv_heads)
    q_all = case.load("q", f32)  # [T, Hq, D]
    sinks = case.load("sinks", f32)[:, None] if p.has_sinks else None  # [Hq, 1]
    o_all = np.zeros(q_all.shape, f32)
    lse_all = np.full(q_all.shape[:2], -np.inf, f32)
    for seq in paged.sequences(case):
        if seq.q_len == 0:
            continue
        k = kv_of(case, "k_cache", seq, p.k_scale)[:, kv_head]  # [L, Hq, D]
        v = kv_of(case, "v_cache", seq, p.v_scale)[:, kv_head]
        q = q_all[seq.q_start : seq.q_end].transpose(1, 0, 2)  # [Hq, n, D]
        s = np.matmul(q, k.transpose(1, 2, 0)) * f32(p.scale)  # [Hq, n, L]
        if p.softcap > 0:
            s = f32(p.softcap) * np.tanh(s / f32(p.softcap))
        visible = paged.visible(seq, p.causal, p.window)  # [n, L]
        s = np.where(visible[None], s, f32(-np.inf))
        m = s.max(axis=2, initial=-np.inf)  # [Hq, n]
        if sinks is not None:
            m = np.maximum(m, sinks)
        m_safe = np.where(np.isfinite(m), m, f32(0))  # a row that sees nothing: every term is exp(-inf) = 0
        e = np.exp(s - m_safe[..., None])
        denom = e.sum(axis=2, dtype=f32) + (np.exp(sinks - m_safe) if sinks is not None else f32(0))
        # Only an empty row (denominator exactly 0) writes 0; a NaN key or value propagates as NaN.
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            o = np.where(denom[..., None] == 0, f32(0), p_dot_v(e, v, visible) / denom[..., None])
            lse = np.where(denom == 0, m, m_safe + np.log(denom))
        o_all[seq.q_start : seq.q_end] = o.transpose(1, 0, 2)
        lse_all[seq.q_start : seq.q_end] = lse.T
    case.store("o", o_all)
    case.store("lse", lse_all)


def p_dot_v(e, v, visible):
    """P.V [Hq, n, D] over the keys each row sees: a masked key's value is never multiplied in, as a real kernel
    skips masked tile entries, so an infinite or NaN value a row does not see (a stale page, a key outside the
    window) leaves it finite; P = 0 times inf would be NaN. e [Hq, n, L], v [L, Hq, D], visible [n, L]."""
    finite = np.isfinite(v).all(axis=(1, 2))  # [L]
    pv = np.matmul(e, np.where(finite[:, None, None], v, f32(0)).transpose(1, 0, 2))
    for t in np.flatnonzero(~finite):  # few: only keys that hold an infinite or NaN value
        pv += np.where(visible[None, :, t, None], e[:, :, t, None] * v[t][:, None, :], f32(0))
    return pv


def kv_of(case, name, seq, scale):
    """[L, Hkv, D] fp32 keys or values of one sequence, dequantised in fp32."""
    raw = paged.gather(case[name], seq, case.params.block_size)
    return dc.dtypes.decode(raw, case.dtype(name), f32) * f32(scale)


if __name__ == "__main__":
    dc.serve()
