"""The pytest anchor of the GPU campaign benchmark (docs/results/gpu-campaign-anchor.md): attention tested the way
kernel repositories test it, as a plain parametrized pytest suite.

Each test draws random queries, keys and values for a batch of sequences (query length, context length), runs the
kernel under test, torch's scaled_dot_product_attention on the GPU in bf16 or fp16, sequence by sequence with the
GQA heads repeated and an explicit mask (causal aligned to the end of the context, optionally a sliding window),
and compares it with a float32 reference written out (softmax(q k^T * scale + mask) v) under
torch.testing.assert_close with the absolute and relative tolerances such suites use. One test is one case: the
anchor's rate is tests per second of the pytest session.

    python3 -m pytest -q -p no:cacheprovider bench/attention_anchor

It needs a CUDA GPU (every test is skipped without one); bench/attention_anchor.sh measures it next to a
driftcheck campaign in one run.
"""
import pytest
import torch

# (query length, context length) per sequence: decode, speculative, chunked prefill and full prefill batches.
SEQ_LENS = [
    [(1, 523), (1, 37), (1, 2011)],
    [(1, 1328), (5, 18), (1, 463)],
    [(16, 16), (64, 1024), (129, 129)],
    [(7, 300), (1, 9), (33, 515), (1, 4096)],
]
NUM_HEADS = [(4, 4), (8, 2), (16, 2)]  # (query heads, KV heads)
HEAD_SIZES = [64, 128, 256]
DTYPES = [torch.bfloat16, torch.float16]
SLIDING_WINDOWS = [None, 256]
CAUSAL = [True, False]

# What kernel test suites of this kind accept for half-precision attention outputs.
ATOL, RTOL = 2e-2, 1e-2


def mask_for(q_len, kv_len, causal, window, device):
    """True where query row i may attend key j: causal aligned to the end of the context, and within the window."""
    i = torch.arange(q_len, device=device)[:, None] + (kv_len - q_len)
    j = torch.arange(kv_len, device=device)[None, :]
    allowed = torch.ones(q_len, kv_len, dtype=torch.bool, device=device)
    if causal:
        allowed &= j <= i
    if window is not None:
        allowed &= i - j < window
    return allowed


def ref_attention(q, k, v, scale, allowed):
    """float32 reference of one sequence: q [Hq, Lq, D], k/v [Hq, Lk, D]."""
    logits = torch.einsum("hqd,hkd->hqk", q.float(), k.float()) * scale
    logits = logits.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(logits, dim=-1)
    p = torch.nan_to_num(p)  # a row with nothing to attend to is 0
    return torch.einsum("hqk,hkd->hqd", p, v.float())


@pytest.mark.parametrize("seq_lens", SEQ_LENS)
@pytest.mark.parametrize("num_heads", NUM_HEADS)
@pytest.mark.parametrize("head_size", HEAD_SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sliding_window", SLIDING_WINDOWS)
@pytest.mark.parametrize("causal", CAUSAL)
@torch.inference_mode()
def test_attention(seq_lens, num_heads, head_size, dtype, sliding_window, causal):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    torch.manual_seed(0)
    device = "cuda"
    hq, hkv = num_heads
    scale = head_size**-0.5
    for q_len, kv_len in seq_lens:
        q = torch.randn(hq, q_len, head_size, dtype=dtype, device=device)
        k = torch.randn(hkv, kv_len, head_size, dtype=dtype, device=device)
        v = torch.randn(hkv, kv_len, head_size, dtype=dtype, device=device)
        k_rep = k.repeat_interleave(hq // hkv, dim=0)
        v_rep = v.repeat_interleave(hq // hkv, dim=0)
        allowed = mask_for(q_len, kv_len, causal, sliding_window, device)
        out = torch.nn.functional.scaled_dot_product_attention(q, k_rep, v_rep, attn_mask=allowed, scale=scale)
        ref = ref_attention(q, k_rep, v_rep, scale, allowed)
        # Rows that attend to nothing are NaN in SDPA and 0 in the reference: compare the others.
        live = allowed.any(dim=-1)
        torch.testing.assert_close(out[:, live].float(), ref[:, live], atol=ATOL, rtol=RTOL)
