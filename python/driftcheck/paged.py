"""Paged-KV attention helpers with the reference's semantics (docs/REFERENCE.md section 3), for kernels that
take contiguous K/V (torch SDPA, a NumPy loop): walk the batch's sequences, gather each one's keys and values
through the block table, and build the visibility mask the reference defines.

Query j of a sequence with q queries and L keys sits at p = L - q + j (causal alignment at the end) and sees key t
when t < L and (not causal or t <= p) and (window == 0 or p - t < window). Only slots t < L of the blocks a
sequence uses are read: the rest of the cache may hold poison.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Sequence:
    index: int
    q_start: int  # first token row of this sequence in q / o / lse
    q_len: int
    seq_len: int  # keys, including the new tokens
    blocks: np.ndarray  # physical block ids of logical blocks 0 .. ceil(seq_len / block_size) - 1

    @property
    def q_end(self) -> int:
        return self.q_start + self.q_len

    def positions(self) -> np.ndarray:
        """Absolute position of each query row (negative for rows before the first key)."""
        return np.arange(self.seq_len - self.q_len, self.seq_len)


def sequences(case) -> list:
    """The batch's sequences, read from the host copies of block_table, seq_lens and query_start_loc."""
    bs = case.params.block_size
    table = case.host("block_table")
    seq_lens = case.host("seq_lens")
    qsl = case.host("query_start_loc")
    out = []
    for s, seq_len in enumerate(int(x) for x in seq_lens):
        used = -(-seq_len // bs)
        out.append(
            Sequence(s, int(qsl[s]), int(qsl[s + 1]) - int(qsl[s]), seq_len, np.array(table[s, :used], np.int64))
        )
    return out


def visible(seq: Sequence, causal: bool, window: int) -> np.ndarray:
    """bool [q_len, seq_len]: which keys each query row sees."""
    p = seq.positions()[:, None]
    t = np.arange(seq.seq_len)[None, :]
    mask = np.ones((seq.q_len, seq.seq_len), dtype=bool)
    if causal:
        mask &= t <= p
    if window:
        mask &= p - t < window
    return mask


def gather(cache, seq: Sequence, block_size: int):
    """Keys (or values) 0 .. seq_len - 1 of one sequence as a contiguous [seq_len, kv_heads, head_dim] copy,
    from a [num_blocks, block_size, kv_heads, head_dim] cache (torch tensor or NumPy array)."""
    if isinstance(cache, np.ndarray):
        pages = cache[seq.blocks]
    else:
        import torch

        pages = cache.index_select(0, torch.as_tensor(seq.blocks, device=cache.device))
    flat = pages.reshape((len(seq.blocks) * block_size,) + tuple(cache.shape[2:]))
    return flat[: seq.seq_len]


def lse_fp32(q, k, scale, visible, softcap=0.0, sinks=None, softcap_from_exp=False):
    """fp32 log-sum-exp of one sequence's logits, for kernels that return none (SDPA's public API, vLLM's unified
    attention): q [n, Hq, D] and k [L, Hq, D] (kv heads already expanded) torch tensors, visible the bool [n, L]
    mask of `visible()`, sinks [Hq] or None. Returns [n, Hq]. This is glue, not the kernel: lse judged from it
    checks the runner's gather, head mapping and mask, and the kernel only through o. softcap_from_exp: the cap
    formed as Triton kernels form it, c (e^(s/c) - e^(-s/c)) / (e^(s/c) + e^(-s/c)) in fp32, NaN past |s/c| ~ 88.7
    where an exponential overflows (the glue of a kernel with that defect must show it as the kernel does)."""
    import torch

    s = torch.einsum("nhd,lhd->hnl", q.float(), k.float()) * scale
    if softcap > 0 and softcap_from_exp:
        x = s / softcap
        p1, p2 = torch.exp(x), torch.exp(-x)
        s = softcap * (p1 - p2) / (p1 + p2)
    elif softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~torch.as_tensor(visible, device=s.device)[None], float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.float()[:, None, None].expand(-1, s.shape[1], 1)], dim=2)
    return torch.logsumexp(s, dim=2).transpose(0, 1)
