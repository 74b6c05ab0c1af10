"""vLLM's Triton kernels loaded from upstream source files at run time, with no vllm package: unified attention
called as the TRITON_ATTN backend calls it, and the EAGLE3 fused_dual_rmsnorm_cat. driftcheck runs them as
external backends (examples/upstream/vllm_upstream.toml, docs/UPSTREAM.md) and compares them with their twins.

The files come from $DRIFTCHECK_UPSTREAM (default: <repository>/upstream/vllm), an ignored folder that is never
committed. It holds a vLLM tree (or only these files of it) at the commit the twins are pinned to:
  vllm/v1/attention/ops/triton_unified_attention.py
  vllm/v1/attention/ops/triton_quant_kv/_helpers.py
  the file under vllm/ that defines fused_dual_rmsnorm_cat
  vllm/v1/attention/ops/prefix_prefill.py (--op prefix_prefill: ROCM_ATTN's prefill/extend kernel)
  vllm/v1/attention/ops/chunked_prefill_paged_decode.py (--op rocm_attn: ROCM_ATTN's whole attention call, its
      Triton decode kernel for the batches the custom HIP kernel does not take)
Only those files run. The other vllm modules they import are replaced by the small stand-ins below (envs,
logger, platforms, triton_utils, kv_cache_interface, _custom_ops), so torch and triton are all the machine
needs.

--op aiter_unified runs aiter's Triton unified_attention as vLLM's ROCM_AITER_UNIFIED_ATTN calls it, from
$DRIFTCHECK_UPSTREAM_AITER (default: <repository>/upstream/aiter), an aiter tree (or only these files of it):
  aiter/ops/triton/attention/unified_attention.py
  aiter/ops/triton/_triton_kernels/attention/unified_attention.py
with stand-ins for the aiter modules they import: the device is described as an MI355X (gfx950, 256 CUs, e4m3fn),
whose launch choices (2D/3D, tiles, segments) cpu.attn.aiter_unified_mi355x models; the AMD-only launch option
waves_per_eu (an occupancy hint) is dropped where the kernel does not declare it.

    python3 vllm_upstream.py --op attention   # or --op prefix_prefill, rocm_attn, aiter_unified, dual_rmsnorm_cat
"""

import argparse
import enum
import importlib
import logging
import os
import pathlib
import sys
import types

import driftcheck as dc
from driftcheck import paged

HERE = pathlib.Path(__file__).resolve().parent
UPSTREAM = pathlib.Path(os.environ.get("DRIFTCHECK_UPSTREAM", HERE.parent.parent / "upstream" / "vllm"))
UPSTREAM_AITER = pathlib.Path(os.environ.get("DRIFTCHECK_UPSTREAM_AITER", HERE.parent.parent / "upstream" / "aiter"))
AITER_UNIFIED = "aiter.ops.triton.attention.unified_attention"
# The modelled device: MI355X (cpu.attn.aiter_unified_mi355x): its CU count sets the launch's 2D/3D choice and
# segment count; its fp8 is e4m3fn, which Triton on NVIDIA has too (MI300X's e4m3fnuz it has not).
MI355X_CUS = 256
UNIFIED = "vllm.v1.attention.ops.triton_unified_attention"
# ROCM_ATTN's prefill/extend kernel (Triton, runs on NVIDIA too): vllm/v1/attention/ops/prefix_prefill.py.
PREFIX_PREFILL = "vllm.v1.attention.ops.prefix_prefill"
# ROCM_ATTN's forward: chunked_prefill_paged_decode (prefix prefill for rows of query length > 1, then the decode
# rows on the custom HIP kernel or the Triton kernel_paged_attention_2d).
CHUNKED = "vllm.v1.attention.ops.chunked_prefill_paged_decode"
# TRITON_ATTN's builder: MIN_LAUNCH_GRID_SIZE_2D and the segment count of the 3D path.
MIN_LAUNCH_GRID_SIZE_2D = 128
NUM_PAR_SOFTMAX_SEGMENTS = 16

parser = argparse.ArgumentParser()
parser.add_argument("--op", choices=["attention", "prefix_prefill", "rocm_attn", "aiter_unified", "dual_rmsnorm_cat"],
                    required=True)
parser.add_argument("--device", default="cuda")
args = parser.parse_args()


class KVQuantMode(enum.IntEnum):
    """vllm.v1.kv_cache_interface.KVQuantMode, values as triton_unified_attention.py's comments number them."""

    NONE = 0
    FP8_PER_TENSOR = 1
    INT8_PER_TOKEN_HEAD = 2
    FP8_PER_TOKEN_HEAD = 3
    INT4_PER_TOKEN_HEAD = 4
    INT2_PER_TOKEN_HEAD = 5


def package(name, path):
    """A package module whose submodules load from `path`, without running its __init__.py."""
    m = types.ModuleType(name)
    m.__path__ = [str(path)]
    sys.modules[name] = m
    return m


def install_stand_ins(torch, triton):
    """vllm (and the packages above the needed files) as bare packages over UPSTREAM, plus stand-ins for the
    modules the kernel files import that would pull in the rest of vLLM."""
    root = UPSTREAM / "vllm"
    package("vllm", root)
    for sub in ("v1", "v1.attention", "v1.attention.ops", "v1.attention.ops.triton_quant_kv",
                "model_executor", "model_executor.layers", "model_executor.models"):
        package(f"vllm.{sub}", root.joinpath(*sub.split(".")))
    modules = {
        "vllm.envs": {"VLLM_BATCH_INVARIANT": False},
        "vllm.logger": {"init_logger": logging.getLogger},
        "vllm.triton_utils": {"tl": importlib.import_module("triton.language"), "triton": triton},
        "vllm.v1.kv_cache_interface": {"KVQuantMode": KVQuantMode},
        "vllm.platforms": {"current_platform": Platform(torch)},
        # chunked_prefill_paged_decode's routing and its custom HIP kernel (not run here: rocm_attn declines the
        # batches whose decode rows reach it).
        "vllm.platforms.rocm": {"use_rocm_custom_paged_attention": use_rocm_custom_paged_attention},
        "vllm._custom_ops": {"paged_attention_rocm": custom_paged_attention_not_run},
    }
    for name, attrs in modules.items():
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m


class Platform:
    """current_platform: the fp8 type the backend stores fp8 caches as (e4m3fn on CUDA, fnuz on MI300)."""

    def __init__(self, torch):
        self.torch = torch

    def is_cuda(self):
        return self.torch.version.hip is None

    def is_rocm(self):
        return self.torch.version.hip is not None

    def get_device_capability(self):
        return tuple(self.torch.cuda.get_device_capability())

    def has_device_capability(self, capability):
        major, minor = self.get_device_capability()
        return major * 10 + minor >= capability

    def fp8_dtype(self):
        if self.is_rocm() and "gfx94" in self.torch.cuda.get_device_properties(0).gcnArchName:
            return self.torch.float8_e4m3fnuz
        return self.torch.float8_e4m3fn


def install_aiter_stand_ins(torch):
    """aiter (and the packages above the two unified-attention files) as bare packages over UPSTREAM_AITER, plus
    stand-ins for the aiter utility modules they import, describing an MI355X."""
    root = UPSTREAM_AITER / "aiter"
    package("aiter", root)
    for sub in ("ops", "ops.triton", "ops.triton.attention", "ops.triton._triton_kernels",
                "ops.triton._triton_kernels.attention", "ops.triton._triton_kernels.flash_attn_triton_amd",
                "ops.triton.utils", "ops.triton.utils._triton"):
        package(f"aiter.{sub}", root.joinpath(*sub.split(".")))
    arch = types.SimpleNamespace(name="gfx950", is_rdna=False, is_cdna=True)
    modules = {
        "aiter.ops.triton.utils._triton.kernel_repr": {"make_kernel_repr": lambda name, keys: lambda *a, **k: name},
        "aiter.ops.triton.utils.types": {"e4m3_dtype": torch.float8_e4m3fn},
        "aiter.ops.triton.utils.device_info": {"get_num_sms": lambda: MI355X_CUS},
        "aiter.ops.triton.utils._triton.arch_info": {"get_arch": lambda: arch.name},
        "aiter.ops.triton._triton_kernels.flash_attn_triton_amd.utils": {"get_arch": lambda: arch},
    }
    for name, attrs in modules.items():
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m


class DropAmdOptions:
    """A Triton kernel whose launches drop the AMD-only options (waves_per_eu) it does not declare as
    parameters: the CUDA backend rejects unknown launch options, and they set occupancy, not arithmetic."""

    AMD_ONLY = ("waves_per_eu",)

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        launch = self.kernel[grid]
        declared = set(self.kernel.arg_names)
        return lambda **kw: launch(**{k: v for k, v in kw.items() if k in declared or k not in self.AMD_ONLY})


def use_rocm_custom_paged_attention(qtype, head_size, block_size, gqa_ratio, max_seq_len, sliding_window,
                                    kv_cache_dtype, alibi_slopes=None, sinks=None):
    """vllm/platforms/rocm.py's choice on gfx9 (MI300/MI355), read at e2a00c7: the custom HIP decode kernel
    takes a batch with SLIDING_WINDOW 0, fp16/bf16 q, head size 64 or 128, block size 16 or 32, GQA 1..16,
    max_seq_len <= 128K and no sinks (VLLM_ROCM_CUSTOM_PAGED_ATTN on and aiter's paged attention off, their
    defaults). cpu.attn.rocm_custom routes with the same conditions."""
    return (sliding_window in (0, (-1, -1)) and qtype in (torch.float16, torch.bfloat16)
            and head_size in (64, 128) and block_size in (16, 32) and 1 <= gqa_ratio <= 16
            and max_seq_len <= 128 * 1024 and sinks is None)


def custom_paged_attention_not_run(*args, **kwargs):
    """The custom HIP kernel does not run on this machine: rocm_attn declines every batch whose decode rows it
    would compute, so a call here is a runner defect."""
    raise RuntimeError("ops.paged_attention_rocm reached for a batch the runner should have declined")


def dual_module():
    """The module under vllm/ that defines fused_dual_rmsnorm_cat (its file moved between releases)."""
    for path in sorted((UPSTREAM / "vllm").rglob("*.py")):
        if "def fused_dual_rmsnorm_cat" in path.read_text(errors="replace"):
            rel = path.relative_to(UPSTREAM).with_suffix("")
            for i in range(1, len(rel.parts) - 1):
                name = ".".join(rel.parts[: i + 1])
                if name not in sys.modules:
                    package(name, UPSTREAM.joinpath(*rel.parts[: i + 1]))
            return importlib.import_module(".".join(rel.parts))
    raise ImportError(f"no file under {UPSTREAM / 'vllm'} defines fused_dual_rmsnorm_cat")


kernel_fn = None
try:
    import torch
    import triton

    if not torch.cuda.is_available():
        raise ImportError("no CUDA/HIP device")
    install_stand_ins(torch, triton)
    if args.op == "attention":
        kernel_fn = importlib.import_module(UNIFIED).unified_attention
    elif args.op == "prefix_prefill":
        kernel_fn = importlib.import_module(PREFIX_PREFILL).context_attention_fwd
    elif args.op == "rocm_attn":
        kernel_fn = importlib.import_module(CHUNKED).chunked_prefill_paged_decode
    elif args.op == "aiter_unified":
        install_aiter_stand_ins(torch)
        aiter_module = importlib.import_module(AITER_UNIFIED)
        for name in ("kernel_unified_attention_2d", "kernel_unified_attention_3d", "reduce_segments"):
            setattr(aiter_module, name, DropAmdOptions(getattr(aiter_module, name)))
        kernel_fn = aiter_module.unified_attention
    else:
        kernel_fn = dual_module().fused_dual_rmsnorm_cat
    torch.set_float32_matmul_precision("highest")  # the glue lse in IEEE fp32, never TF32
except (ImportError, OSError) as e:
    where = UPSTREAM_AITER if args.op == "aiter_unified" else UPSTREAM
    dc.unavailable(f"upstream files not usable from {where} ({e}); docs/UPSTREAM.md says what to put there")


def capture_sizes():
    """vLLM's default CUDA-graph capture sizes (the list cpu.attn.triton_unified snaps to)."""
    return [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))


def seq_threshold_3d(num_kv_heads):
    """TRITON_ATTN: MIN_LAUNCH_GRID_SIZE_2D // Hkv, snapped to the closest capture size (decode CUDA graphs on)."""
    t = MIN_LAUNCH_GRID_SIZE_2D // num_kv_heads
    return min(capture_sizes(), key=lambda x: abs(x - t))


def attention(case):
    """TritonAttentionImpl.forward's call: causal, window (W - 1, 0), per-tensor fp8 scales expanded to
    (num_seqs, Hkv), the 3D segment buffers the builder preallocates, FP8_PER_TENSOR for fp8 caches."""
    p = case.params
    seq_lens, qsl = case.host("seq_lens"), case.host("query_start_loc")
    num_seqs = len(seq_lens)
    fp8 = dc.dtypes.is_fp8(case.dtype("k_cache"))
    dev = case.q.device
    scales = [torch.tensor([s], dtype=torch.float32, device=dev).expand(num_seqs, p.num_kv_heads)
              for s in (p.k_scale, p.v_scale)]
    threshold = seq_threshold_3d(p.num_kv_heads)
    rows = max(threshold, int(qsl[-1]))
    padded = triton.next_power_of_2(p.head_dim)
    segm = [torch.empty((rows, p.num_q_heads, NUM_PAR_SOFTMAX_SEGMENTS) + extra, dtype=torch.float32, device=dev)
            for extra in ((padded,), (), ())]
    kernel_fn(q=case.q, k=case.k_cache, v=case.v_cache, out=case.o, cu_seqlens_q=case.query_start_loc,
              max_seqlen_q=int((qsl[1:] - qsl[:-1]).max()), seqused_k=case.seq_lens,
              max_seqlen_k=int(seq_lens.max()), softmax_scale=p.scale, causal=True,
              window_size=(p.window - 1, 0) if p.window else (-1, -1), block_table=case.block_table,
              softcap=p.softcap, q_descale=None, k_descale=scales[0], v_descale=scales[1],
              seq_threshold_3D=threshold, num_par_softmax_segments=NUM_PAR_SOFTMAX_SEGMENTS,
              softmax_segm_output=segm[0], softmax_segm_max=segm[1], softmax_segm_expsum=segm[2],
              sinks=case.get("sinks"), kv_quant_mode=KVQuantMode.FP8_PER_TENSOR if fp8 else KVQuantMode.NONE)
    # The glue's cap as the kernel forms it (from exponentials: NaN past |s/c| ~ 88.7, as the twin's lse).
    write_lse(case, softcap_from_exp=True)


def write_lse(case, new_kv_from_inputs=False, softcap=None, window=None, k_cache=None, k_dtype=None,
              k_rounded=True, softcap_from_exp=False):
    """The kernel writes no lse: the runner's own fp32 logsumexp (glue; compare `o` only, --outputs o). It reads
    the keys the kernel reads: the cache, or for a kernel that takes the new tokens' keys from the layer's inputs
    (new_kv = "inputs", context_attention_fwd) the context from the cache and the new tokens of sequences with
    query length > 1 from k_new (decode rows read the cache); softcap and window: the ones the kernel applies
    (None: the case's; a window of 0 is none). k_cache / k_dtype: the cache as the kernel views it (None: the
    case's); k_rounded: fp8 keys dequantised and rounded to the activation dtype before the dot (Triton kernels
    that dequantise K), or exact (kernels that fold k_scale into the logit scale); softcap_from_exp: the cap
    formed from exponentials (lse_fp32)."""
    p = case.params
    group = p.num_q_heads // p.num_kv_heads
    cache = case.k_cache if k_cache is None else k_cache
    dtype = case.dtype("k_cache") if k_dtype is None else k_dtype
    for seq in paged.sequences(case):
        k = paged.gather(cache, seq, p.block_size)
        if dc.dtypes.is_fp8(dtype):
            k = dc.dtypes.to_float(k, dtype) * p.k_scale
            k = k.to(case.q.dtype) if k_rounded else k
        if new_kv_from_inputs and seq.q_len > 1:
            k = torch.cat([k[: seq.seq_len - seq.q_len], case.k_new[seq.q_start : seq.q_end].to(k.dtype)])
        case.lse[seq.q_start : seq.q_end].copy_(paged.lse_fp32(
            case.q[seq.q_start : seq.q_end], k.repeat_interleave(group, dim=1), p.scale,
            paged.visible(seq, p.causal, p.window if window is None else window),
            p.softcap if softcap is None else softcap, case.get("sinks"), softcap_from_exp))


def unified_supports(case, kernel, head_check, backend, fnuz_reason, scales_note):
    """What a unified-attention backend and its kernel reject, in their words: the kernel's causal assert, the
    backend's head sizes (>= 32) and block sizes (multiples of 16), an e4m3fnuz cache when `fnuz_reason` is set,
    and scales on a cache that is not fp8 (which the kernel would apply or ignore unlike the reference)."""
    p = case.params
    kv = case.dtype("k_cache")
    if not p.causal:
        return f"{kernel} asserts causal (\"Only causal attention is supported\")"
    if p.head_dim < 32:
        return f"head_dim {p.head_dim}: {head_check} >= 32"
    if p.block_size % 16:
        return f"block_size {p.block_size}: {backend} needs a multiple of 16"
    if kv == "fp8_e4m3fnuz" and fnuz_reason:
        return fnuz_reason
    if not dc.dtypes.is_fp8(kv) and (p.k_scale != 1 or p.v_scale != 1):
        return f"{kv} cache with k_scale {p.k_scale}, v_scale {p.v_scale}: {scales_note} scales fp8 caches only"
    return None


def attention_supports(case):
    """What the TRITON_ATTN backend and unified_attention reject."""
    return unified_supports(
        case, "unified_attention", "TritonAttentionBackend.supports_head_size needs", "TRITON_ATTN",
        "fp8 e4m3fnuz is ROCm MI300's format: on CUDA fp8 caches are e4m3fn or e5m2" if torch.version.hip is None
        else None, "the kernel")


def paged_views(case):
    """The case's caches as vLLM's paged layout: K [blocks, Hkv, D / x, bs, x], V [blocks, Hkv, D, bs] (views of
    the case's [blocks, bs, Hkv, D] storage; fp8 caches as uint8, which the ops view as the kv_cache_dtype's fp8
    type), and that kv_cache_dtype."""
    kv = case.dtype("k_cache")
    fp8 = dc.dtypes.is_fp8(kv)
    kc, vc = case.k_cache.contiguous(), case.v_cache.contiguous()
    if fp8:
        kc, vc = kc.view(torch.uint8), vc.view(torch.uint8)
    blocks, bs, hkv, d = kc.shape
    x = 16 // kc.element_size()
    k_cache = kc.view(blocks, bs, hkv, d // x, x).permute(0, 2, 3, 1, 4)
    v_cache = vc.permute(0, 2, 3, 1)
    kv_cache_dtype = ("fp8_e5m2" if kv == "fp8_e5m2" else "fp8") if fp8 else "auto"
    return k_cache, v_cache, kv_cache_dtype


def prefix_prefill(case):
    """ROCM_ATTN's prefill/extend rows as chunked_prefill_paged_decode calls context_attention_fwd (vLLM
    rocm_attn.py at f65b079, chunked_prefill_paged_decode.py at 69f87df): the new tokens' K/V from the layer's
    inputs (k_new, v_new), the context from the cache in vLLM's 5D/4D paged layout (views of the case's caches),
    sliding_window = window - 1 (RocmAttentionImpl's tuple, passed unchanged), skip_decode, no softcap (the
    backend passes none), per-tensor scales as 1-element fp32 tensors. Batches with decode rows are declined:
    those rows go to ROCM_ATTN's HIP decode kernel, which does not run here."""
    p = case.params
    seq_lens, qsl = case.host("seq_lens"), case.host("query_start_loc")
    qlens = qsl[1:] - qsl[:-1]
    if (qlens <= 1).any():
        raise dc.Unsupported("rows of query length <= 1 go to ROCM_ATTN's decode kernel (HIP), not run here")
    if (qlens > seq_lens).any():  # the twin declines these too (cpu.attn.rocm_custom's supports)
        raise dc.Unsupported("query length > seq_len: vLLM schedules no more new tokens than the sequence holds")
    k_cache, v_cache, kv_cache_dtype = paged_views(case)
    dev = case.q.device
    scales = [torch.tensor([s], dtype=torch.float32, device=dev) for s in (p.k_scale, p.v_scale)]
    kernel_fn(q=case.q, k=case.get("k_new"), v=case.get("v_new"), o=case.o, kv_cache_dtype=kv_cache_dtype,
              k_cache=k_cache, v_cache=v_cache, b_loc=case.block_table, b_start_loc=case.query_start_loc,
              b_seq_len=case.seq_lens, max_seq_len=int(seq_lens.max()), max_input_len=int(qlens.max()),
              k_scale=scales[0], v_scale=scales[1], alibi_slopes=None,
              sliding_window=p.window - 1 if p.window else 0, sm_scale=p.scale, skip_decode=True,
              fp8_out_scale=None, sinks=case.get("sinks"))
    # The kernel reads k_new, applies no softcap and keeps keys with pos - key < window - 1 (0: no window).
    write_lse(case, new_kv_from_inputs=True, softcap=0.0, window=p.window - 1 if p.window else 0)


def prefix_prefill_supports(case):
    """What ROCM_ATTN's backend and context_attention_fwd reject (decode rows are declined when run)."""
    p = case.params
    kv = case.dtype("k_cache")
    if not p.causal:
        return "non-causal attention: ROCM_ATTN is a decoder backend; context_attention_fwd masks causally"
    if p.head_dim not in (32, 64, 96, 128, 160, 192, 224, 256):
        return f"head_dim {p.head_dim}: RocmAttentionBackend supports 32..256 by 32"
    if p.block_size not in (16, 32):
        return f"block_size {p.block_size}: RocmAttentionBackend supports kernel block sizes 16 and 32"
    if kv == "fp8_e4m3fnuz" and torch.version.hip is None:
        return "fp8 e4m3fnuz is ROCm MI300's format: on CUDA fp8 caches are e4m3fn or e5m2"
    if not dc.dtypes.is_fp8(kv) and (p.k_scale != 1 or p.v_scale != 1):
        return f"{kv} cache with k_scale {p.k_scale}, v_scale {p.v_scale}: the kernel scales fp8 caches only"
    return None


def rocm_attn(case):
    """ROCM_ATTN's attention call as RocmAttentionImpl.forward makes it (rocm_attn.py at f65b079):
    chunked_prefill_paged_decode with the layer's key/value (k_new, v_new; None in a pure decode batch without
    them), the caches in vLLM's paged layout, sliding_window = window - 1 (-1 without one), no softcap, per-tensor
    scales as 1-element fp32 tensors, sinks. The function runs the prefix prefill for rows of query length > 1
    and then the decode kernel use_rocm_custom_paged_attention picks: batches whose decode rows would go to the
    custom HIP kernel are declined (it does not run here), the others run kernel_paged_attention_2d."""
    p = case.params
    seq_lens, qsl = case.host("seq_lens"), case.host("query_start_loc")
    qlens = qsl[1:] - qsl[:-1]
    if (qlens > seq_lens).any():  # the twin declines these too (cpu.attn.rocm_custom's supports)
        raise dc.Unsupported("query length > seq_len: vLLM schedules no more new tokens than the sequence holds")
    if (qlens > 1).any() and case.get("k_new") is None:
        raise dc.Unsupported("prefill/extend rows need the layer's key/value inputs (k_new, v_new)")
    window = p.window - 1 if p.window else -1  # RocmAttentionImpl's (window - 1, 0)[0]
    custom = use_rocm_custom_paged_attention(case.q.dtype, p.head_dim, p.block_size,
                                             p.num_q_heads // p.num_kv_heads, int(seq_lens.max()),
                                             max(window, 0), None, None, case.get("sinks"))
    if custom and (qlens == 1).any():
        raise dc.Unsupported("decode rows of this batch go to ROCM_ATTN's custom HIP kernel "
                             "(use_rocm_custom_paged_attention holds), which does not run here")
    if not custom and (qlens == 0).any():  # the twin declines these too
        raise dc.Unsupported("a sequence of query length 0: kernel_paged_attention_2d writes another "
                             "sequence's output row for it")
    if custom:  # no decode row: the custom kernel's programs would all return
        sys.modules["vllm._custom_ops"].paged_attention_rocm = lambda *a, **k: None
    k_cache, v_cache, kv_cache_dtype = paged_views(case)
    dev = case.q.device
    scales = [torch.tensor([s], dtype=torch.float32, device=dev) for s in (p.k_scale, p.v_scale)]
    try:
        kernel_fn(query=case.q, key=case.get("k_new"), value=case.get("v_new"), output=case.o,
                  kv_cache_dtype=kv_cache_dtype, key_cache=k_cache, value_cache=v_cache,
                  block_table=case.block_table, query_start_loc=case.query_start_loc, seq_lens=case.seq_lens,
                  max_seq_len=int(seq_lens.max()), max_query_len=int(qlens.max()), k_scale=scales[0],
                  v_scale=scales[1], alibi_slopes=None, sliding_window=window, sm_scale=p.scale,
                  output_scale=None, sinks=case.get("sinks"))
    finally:
        sys.modules["vllm._custom_ops"].paged_attention_rocm = custom_paged_attention_not_run
    # Both kernels read the new tokens of prefill rows from k_new, apply no softcap and keep keys with
    # pos - key < window - 1 (0: no window).
    write_lse(case, new_kv_from_inputs=True, softcap=0.0, window=p.window - 1 if p.window else 0)


def aiter_unified(case):
    """RocmAiterUnifiedAttentionImpl.forward's call (vllm rocm_aiter_unified_attn.py): causal, window (W - 1, 0),
    the layer's softcap and sinks, per-tensor k/v scales, every fp8 cache viewed as the platform's fp8 (MI355X:
    e4m3fn), so an fp8_e5m2 cache's bytes are read as e4m3fn as vLLM does. The kernel writes no lse."""
    p = case.params
    qsl, seq_lens = case.host("query_start_loc"), case.host("seq_lens")
    k, v = case.k_cache, case.v_cache
    fp8 = dc.dtypes.is_fp8(case.dtype("k_cache"))
    if fp8:
        k, v = k.view(torch.uint8).view(torch.float8_e4m3fn), v.view(torch.uint8).view(torch.float8_e4m3fn)
    dev = case.q.device
    k_descale, v_descale = (torch.tensor([s], dtype=torch.float32, device=dev) for s in (p.k_scale, p.v_scale))
    try:
        kernel_fn(q=case.q, k=k, v=v, out=case.o, cu_seqlens_q=case.query_start_loc,
                  max_seqlen_q=int((qsl[1:] - qsl[:-1]).max()), seqused_k=case.seq_lens,
                  max_seqlen_k=int(seq_lens.max()), softmax_scale=p.scale, causal=True,
                  window_size=(p.window - 1, 0) if p.window else (-1, -1), block_table=case.block_table,
                  softcap=p.softcap, q_descale=None, k_descale=k_descale, v_descale=v_descale,
                  sinks=case.get("sinks"))
    except AssertionError as e:  # the launcher's own checks (the 3D path's TILE_SIZE % block_size)
        raise dc.Unsupported(f"aiter unified_attention asserts: {e}") from e
    except triton.runtime.errors.OutOfResources as e:
        raise dc.Unsupported(f"Triton on this GPU: {e}") from e
    # The glue reads K as the kernel does: fp8 bytes as e4m3fn, dequantised exactly (aiter folds k_scale into
    # its logit scale), the softcap from exponentials.
    write_lse(case, k_cache=k, k_dtype="fp8_e4m3fn" if fp8 else None, k_rounded=False, softcap_from_exp=True)


def aiter_unified_supports(case):
    """What ROCM_AITER_UNIFIED_ATTN and aiter's unified_attention reject."""
    return unified_supports(
        case, "aiter unified_attention", "RocmAiterUnifiedAttentionBackend supports head sizes",
        "ROCM_AITER_UNIFIED_ATTN",
        "fp8 e4m3fnuz is MI300X's format: the modelled device (MI355X) and Triton on NVIDIA use e4m3fn", "vLLM")


def dual_rmsnorm_cat(case):
    case.out.copy_(kernel_fn(case.e, case.h, case.w_e, case.w_h, case.params.eps))


def dual_supports(case):
    """fused_dual_rmsnorm_cat raises on non-contiguous inputs and has no (1 + w) mode."""
    if case.params.weight_mode != "plain":
        return "fused_dual_rmsnorm_cat has no Gemma (1 + w) mode"
    if not (case.contiguous("e") and case.contiguous("h")):  # a supports call has no tensors
        return "fused_dual_rmsnorm_cat raises \"inputs must be contiguous\""
    return None


if args.op == "attention":
    dc.attention(attention, tensors="torch", device=args.device, supports=attention_supports)
elif args.op == "prefix_prefill":
    dc.attention(prefix_prefill, tensors="torch", device=args.device, supports=prefix_prefill_supports)
elif args.op == "rocm_attn":  # the same backend checks as the prefix prefill's
    dc.attention(rocm_attn, tensors="torch", device=args.device, supports=prefix_prefill_supports)
elif args.op == "aiter_unified":
    dc.attention(aiter_unified, tensors="torch", device=args.device, supports=aiter_unified_supports)
else:
    dc.dual_rmsnorm_cat(dual_rmsnorm_cat, tensors="torch", device=args.device, supports=dual_supports)

if __name__ == "__main__":
    dc.serve()
