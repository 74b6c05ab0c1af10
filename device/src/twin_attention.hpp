// Private: paged-KV attention twins as one parameterised CPU kernel. An AttnKernel says how a real kernel
// walks the keys (tiles, split-KV segments, partitions), which exponential it uses, where it rounds and how
// it merges partial states: what every path shares, then each modelled path's own switches (read by that
// path's file, attention_<path>.cpp), then what the kernel accepts. An AttnBug switches on one deliberate
// deviation for a mutant. Layout and semantics: case.hpp.
#pragma once

#include <memory>
#include <vector>

#include "driftcheck/device/twin_common.hpp"

namespace driftcheck::twin {

// How a row's keys are scheduled and partial results combined.
enum class AttnSchedule : std::uint8_t {
  kTiled,  // Triton unified kernels: online softmax over KV tiles of BLOCK_M query blocks, optional split-KV
           // segments merged by max-rescaled sums (UnifiedLaunch says how the launcher picks tiles and paths)
  // ll4mi paged decode kernels (vLLM csrc/rocm/attention.cu, aiter pa_kernels.cuh): 256-token partitions of
  // four 64-token warps; per-warp max and exp sum, P = e^(s - m_w) (1 / (S + 1e-6)) e^(m_w - M) rounded to
  // act, partition outputs rounded to act, then a reduce over partitions dividing by (global sum + 1e-6).
  kLl4mi,
};

enum class ExpImpl : std::uint8_t {
  kExp,         // natural exp, correctly rounded (no modelled kernel uses it since the #8 review)
  kExp2Folded,  // exp2 with log2(e) folded into the logit scale, softcap and sinks (aiter kernels)
  kFastExp,     // exp(x) as exp2(x * log2(e)): CUDA/HIP __expf and Triton's tl.exp (ex2.approx on NVIDIA)
};

enum class KvDequant : std::uint8_t {
  kRoundedToAct,  // K, V = act(fp32(kv) * scale) before the dot products (Triton unified)
  kScaleAfter,    // K, V read exactly; k_scale applied to the logits, v_scale to the output
};

enum class SinkPath : std::uint8_t {
  kNone,        // the kernel has no sinks
  kInitialMax,  // Triton: the running max starts at the sink logit, with L = 1.0 standing for exp(sink -
                // sink)
};

// How a unified (kTiled) kernel's launcher picks the 2D or 3D path, the KV tile and the segment count.
enum class UnifiedLaunch : std::uint8_t {
  // vLLM triton_unified_attention.py + TRITON_ATTN backend: 3D when every query length is <= 1 and
  // num_seqs <= threshold, threshold = 128 / Hkv snapped to the closest CUDA-graph capture size; 2D tile
  // `tile_prefill`, 3D tile `tile_decode`, both `window_tile` for Gemma3's (window 1024, D 128/256);
  // `split_segments` segments.
  kVllm,
  // aiter unified_attention.py (CDNA): 2D when a window is set, max_seqlen_k <= 512 or the 2D grid exceeds
  // 4 programs per CU; tiles min(64, next_pow2(block_size)) for decode batches and the 3D path, 64 (32 from
  // D 256) for prefill; segments from the CU count (`device_cus`).
  kAiter,
};

struct AttnKernel;

// The switches of the ll4mi / paged_attention_v1 decode kernels (AttnSchedule::kLl4mi).
struct Ll4miSwitches {
  int partition = 256;   // keys per partition (one workgroup)
  int warp_tokens = 64;  // keys per warp: the max and exp sum are per warp first
  // GQA ratios up to this take vLLM's mfma4 kernel (0: none); above it the mfma16 kernel sums the whole
  // partition's P.V in fp32 and rounds once.
  std::int64_t mfma4_max_gqa = 0;
  // mfma4: each warp's P.V is rounded to act and the four warp results are summed in act (bf16: fp32 add
  // then truncation; fp16: RNE half adds): up to four roundings of a partition output, three of them biased
  // toward zero in bf16. Repaired, the mfma4 kernel sums in fp32 and rounds once like mfma16.
  bool warp_partials_in_act = false;
  // The ll4mi reduce reads 16, 32 or 64 partition slots per pass; slots past the last partition repeat the
  // last partition's output with weight 0, so `acc += out_last * 0` turns an infinite output element into
  // NaN. Repaired, only the real partitions are summed.
  bool reduce_padded_slots = false;
  // The ll4mi decode kernels address q as `q + token * q_stride + head * HEAD_SIZE` and the reduce writes o
  // at `out + (token * num_heads + head) * HEAD_SIZE`: only q's token stride is passed, heads and elements
  // are taken as dense and o as contiguous. A q with padded heads is misread and a strided o miswritten (into
  // its padding and other rows). Repaired, q and o are read and written through their strides.
  bool heads_addressed_dense = false;
  // aiter's paged_attention_v1 with an fp8 cache runs QK and P.V on fp8 MFMAs: q (times q_scale, which vLLM
  // never passes: 1) and the normalised P are converted to the cache's fp8 format by v_cvt_pk_fp8_f32 (RNE)
  // and K, V enter as stored; k_scale scales the logits, v_scale the partition output. Without it (vLLM's
  // custom kernel) fp8 K/V are widened to act exactly and q, P stay in act.
  bool fp8_mfma = false;
};

// The switches of the unified (kTiled) kernels: vLLM's Triton unified attention and aiter's port of it.
struct UnifiedSwitches {
  int tile_prefill = 32;  // KV tile of the 2D path (vLLM)
  int tile_decode = 16;   // KV tile of the 3D path (vLLM)
  UnifiedLaunch launch = UnifiedLaunch::kVllm;
  int split_segments = 0;                   // vLLM 3D path: segments per sequence (0: never split)
  std::vector<std::int64_t> capture_sizes;  // vLLM: CUDA-graph capture sizes the 3D threshold snaps to
  std::int64_t window_tile_window = 0;      // vLLM Gemma3 rule: this window with head dims below ...
  std::vector<std::int64_t> window_tile_head_dims;
  int window_tile = 32;             // ... uses this tile on both paths
  int device_cus = 0;               // aiter: compute units of the modelled device (MI300X 304, MI355X 256)
  bool window_v_zeroed = false;     // vLLM: V outside the window of the block's FIRST query zeroed first
  bool page_tail_unmasked = false;  // aiter: a tile of exactly one page is loaded without the seq mask
  bool l_fma = false;               // L * alpha + l_j contracted to one FMA (Triton on NVIDIA)
  // aiter: scale * log2(e) * k_scale formed in the kernel (2D: scale * log2(e) a constexpr folded in double,
  // then * k_scale in fp32; 3D: all in fp32).
  bool scale_folded_in_fp32 = false;
  // ROCM_AITER_UNIFIED_ATTN:
  // aiter select_3d_config: TILE_SIZE = min(64, next_pow2(block_size)) and, when that exceeds the block size,
  // `assert TILE_SIZE % block_size == 0`: the 3D path rejects block sizes such as 48 (the 2D path has no
  // such check and gathers the tile across pages).
  bool tile_divides_block_3d = false;
};

struct FaExtendSwitches {
  // ROCM_AITER_FA's prefill/extend path (rows of sequences with query length > 1): the new tokens'
  // K/V from the k_new / v_new inputs, attended causally by one flash_attn_varlen pass; with a context, the
  // context gathered by cp_mha_gather_cache (fp8: re-quantised, act(fp8(fp32(k) * k_scale))) and attended
  // non-causally by a second pass; both outputs rounded to act and combined by merge_attn_states.
  bool aiter_fa_extend = false;
  // The gather's `.to(k_dtype)` casts the dequantised context back to the cache's fp8 dtype before the act
  // workspace stores it: a second fp8 rounding (up to 2^-4 relative for e4m3) of every context key and value
  // unless the scale is a power of two. Repaired, the dequantised value is rounded to act once.
  bool context_requantised = false;
  // With a sliding window an extend runs extend_for_sliding_window instead: the last min(seq_len, query
  // length + window) tokens gathered from the cache by the same cp_mha_gather_cache (so the new tokens too,
  // as the cache write stored them: fp8-quantised), then one causal pass with window (w - 1, 0) and no merge.
  // The new tokens' keys and values are the cache's copies where every other extend and prefill attends the
  // layer's inputs. Repaired, the new tokens' rows come from k_new / v_new.
  bool swa_new_kv_from_cache = false;
  std::int64_t fa_tile = 128;  // keys per tile of the FlashAttention passes (CK's kN0 for these head sizes)
  // Decode rows of a case with a sliding window run this kernel instead (ROCM_AITER_FA sends windowed decode
  // to aiter's Triton unified_attention, called on the decode rows alone with max_seqlen_q = 1).
  std::shared_ptr<const AttnKernel> windowed_decode;
};

struct PrefixPrefillSwitches {
  // ROCM_ATTN's prefill/extend path (rows of sequences with query length > 1 when some query length is
  // above 1): vLLM's Triton context_attention_fwd (prefix_prefill.py _fwd_kernel). One program per (sequence,
  // q head, block of `pp_block_m` query rows): the context from the paged cache in tiles of `pp_ctx_tile`
  // keys with no causal mask (fp8: act(fp32(kv) * scale) before the dots), then the new tokens' K/V from the
  // k_new / v_new inputs in tiles of `pp_block_n` keys up to the block's end, causally masked; masked logits
  // -inf, exp with the -inf guards, P rounded to act before P.V, fp32 acc, `L * alpha + l_j` as an FMA, o =
  // act(acc / (L + 1e-10)). Decode rows (query length 1) keep the ll4mi path above.
  bool prefix_prefill = false;
  std::int64_t pp_block_m = 128, pp_block_n = 64, pp_ctx_tile = 32;
  std::vector<std::int64_t> pp_head_dims;  // the backend's head sizes (prefill rows; decode rows: head_dims)
  std::vector<DType> pp_kv_dtypes;         // fp8 caches the prefill kernel reads (decode rows: kv_dtypes)
  // ROCM_ATTN passes its (window - 1, 0) tuple's first element as SLIDING_WINDOW, which the kernel compares
  // as `pos - key < SLIDING_WINDOW`: one key fewer than the window sees, and no window at all for window 1.
  // Repaired, the kernel sees the window's w keys.
  bool window_one_short = false;
  // tl.max / tl.maximum drop NaN (maxnum), so a row whose visible logits are all NaN keeps m = -inf and the
  // kernel's -inf guards set every p and alpha to 0: the row writes o = 0 where the math gives NaN. Repaired,
  // the running max propagates NaN.
  bool nan_row_zeroed = false;
};

struct TritonDecodeSwitches {
  // ROCM_ATTN's Triton decode kernel (chunked_prefill_paged_decode.py kernel_paged_attention_2d): the
  // decode rows of a batch for which use_rocm_custom_paged_attention (vllm/platforms/rocm.py, gfx9) is false
  // (SLIDING_WINDOW > 0, sinks, head sizes other than `head_dims`, GQA ratios above `max_gqa_ratio`,
  // max_seq_len above `custom_max_seq_len`; the other conditions hold for every case the twin accepts). One
  // program per (sequence, KV head) over its GQA heads: tiles of one page (BLOCK_SIZE = block_size), fp8 K/V
  // = act(fp32(kv) * scale), logits fp32(scale) * dot, -inf past seq_len, the prefix prefill's softmax step
  // (maxnum, -inf guards, P rounded to act, L * alpha + l_j as an FMA), o = act(acc / (L + 1e-10)).
  bool triton_decode_2d = false;
  std::int64_t custom_max_seq_len = 128 * 1024;
  // kernel_paged_attention_2d loads K and V of a whole page with no sequence mask (only the head-size mask),
  // so the slots of the last page past seq_len enter P.V with P = 0: a NaN or an infinity there (a freed or
  // never-written slot) makes the row NaN. Repaired, those slots are loaded as 0.
  bool paged_2d_tail_unmasked = false;
  // kernel_paged_attention_2d masks a key outside the window with the finite logit -10000, not -inf: it stays
  // in the running max, the sums and P.V. A tile of keys all outside the window gives them weight 1 (an
  // infinite or NaN value there makes the row NaN once a later tile's alpha of 0 multiplies it), and a row
  // whose visible logits lie near -10000 or below gives weight to the keys it must not see (all of it below
  // about -10090, where exp(s + 10000) underflows). Repaired, a key
  // outside the window stays out of the softmax and of P.V.
  bool window_logit_finite = false;
};

// What the kernel accepts (supports()).
struct AttnAccepts {
  std::vector<std::int64_t> block_sizes;  // empty: any multiple of 16
  std::vector<std::int64_t> head_dims;    // empty: any in [min_head_dim, max_head_dim]
  std::int64_t min_head_dim = 1;
  std::int64_t max_head_dim = 0;   // 0: no upper bound
  std::vector<DType> kv_dtypes;    // KV dtypes besides the activation dtype; empty: every fp8
  std::int64_t max_gqa_ratio = 0;  // 0: any
  std::int64_t max_query_len = 0;  // 0: any
  bool window = true;
  bool softcap = true;
  bool non_causal = true;
  std::string name_for_reasons;  // "ROCM_ATTN custom kernel", used in Support::no reasons
  std::string causal_reason;     // why non-causal is rejected ("unified_attention asserts causal")
  // Paths of the real kernel the twin does not model: when set, such cases are unsupported with this reason
  // (the twin declines rather than model them wrongly).
  std::string softcap_unmodelled;     // a logit softcap
  std::string long_query_unmodelled;  // query length > max_query_len
};

// One modelled kernel: what every path shares, then each path's own switches (its file in
// device/src/attention_<path>.cpp reads them), then what it accepts.
struct AttnKernel {
  AttnSchedule schedule = AttnSchedule::kTiled;
  ExpImpl exp = ExpImpl::kFastExp;
  KvDequant dequant = KvDequant::kRoundedToAct;
  SinkPath sinks = SinkPath::kInitialMax;
  bool p_rounded = true;  // P rounded to the activation dtype before P.V
  // Triton's S = where(mask, S, -inf) keeps masked entries in the tile: they still enter P.V with P = 0, so
  // a non-finite V at a masked key inside the loaded tile gives 0 * inf = NaN.
  bool masked_p_times_v = true;
  // A tile with no visible key for one row of its block still runs that row's softmax step: with no key seen
  // yet (M = -inf, no sink) the max clamps to 0 and L becomes 0, so later P = exp(s) may underflow (NaN
  // from 0 / 0, or 0 where P rounds to 0 in fp16). The 3D merge's unguarded exp(m_i - m) belongs to it: a
  // q-block that runs no tile leaves every segment at M = -inf, and exp(-inf - -inf) is NaN. Repaired, a row
  // that sees no key is empty on both paths.
  bool empty_tile_step = true;
  bool softcap_from_exp = true;  // c (e^(s/c) - e^(-s/c)) / (e^(s/c) + e^(-s/c)): NaN past |s/c| ~ 88.7
  // Otherwise c * tanh(s / c); with this, c * tanhf(s * fp32(1 / c)) (ck_tile's LogitsSoftCap with the host's
  // reciprocal, as aiter's paged_attention_v1 applies it).
  bool softcap_times_rcp = false;
  // The backend passes the layer's logits soft cap to none of these kernels' calls, so a softcap case runs
  // uncapped there: with aiter_fa_extend the prefill/extend passes (ROCM_AITER_FA: flash_attn_varlen_func
  // gets no logits_soft_cap; its decode kernels do get it), otherwise the kernel itself (ROCM_ATTN:
  // chunked_prefill_paged_decode takes no softcap). Repaired, the logits are capped (c * tanh(s / c)).
  bool softcap_dropped = false;
  // vLLM's backend views every quantised KV cache as the platform's fp8 dtype (`key_cache.view(
  // self.fp8_dtype)`, current_platform.fp8_dtype(): e4m3fnuz on MI300X, e4m3fn on MI355X), whatever
  // kv_cache_dtype wrote it: an fp8_e5m2 cache's bytes are decoded as `fp8_view`. Repaired, e5m2 is decoded
  // as e5m2.
  bool e5m2_read_as_e4m3 = false;
  DType fp8_view = DType::kF8E4M3FN;
  Ll4miSwitches ll4mi;
  UnifiedSwitches unified;
  FaExtendSwitches fa;
  PrefixPrefillSwitches prefill;
  TritonDecodeSwitches triton_decode;
  AttnAccepts accepts;
};

// One deliberate deviation per mutant (sources in docs/BACKENDS.md).
enum class AttnBug : std::uint8_t {
  kNone,
  kMaskedPTimesV,       // masked P (0) multiplied with V instead of selected away: poisoned slots leak
                        // (vllm#30887)
  kPageConversion,      // block_size >= 64: page id used as a 16-token kernel block id (vllm#24486)
  kFp8FnFnuzSwapped,    // e4m3fn bytes decoded as e4m3fnuz and vice versa (vllm#45562)
  kNoMaxSubtraction,    // exp(s) without the running max: overflows for large logits
  kUnscaledSplitMerge,  // split-KV merge without the exp(m_i - m) rescale
  kGqaModulo,           // kv head h % Hkv instead of h / (Hq / Hkv)
  kCausalOffByOne,      // sees one future key
  kWindowOffByOne,      // sliding window one key too wide
  kSoftcapMissing,      // softcap not applied to the scaled logits
  kSinkDropped,         // the sink never enters the denominator
  kTableStrideIgnored,  // block table row s read at s * max_blocks: a slice of a wider table read as dense
  kLogitsRounded,       // scale * q.k stored in the activation dtype before the softmax (bf16 score tile)
  // ROCM_AITER_FA prefill/extend (AttnKernel::fa.aiter_fa_extend): the causal pass over the new tokens reads
  // their K/V back from their paged-cache slots (dequantised to act) instead of the k_new / v_new inputs.
  kExtendNewKvFromCache,
};

std::unique_ptr<Backend> make_attention_backend(TwinInfo info, AttnKernel kernel,
                                                AttnBug bug = AttnBug::kNone);

// The kernels and identities the twins declare, so mutants reuse exactly the same parameters.
AttnKernel triton_unified_kernel();
TwinInfo triton_unified_info();
AttnKernel aiter_fa_kernel();
TwinInfo aiter_fa_info();

// aiter's Triton unified_attention (CDNA paths) on a device of `cus` compute units whose fp8 KV is `fp8`
// (the kernel of the cpu.attn.aiter_unified_* twins; ROCM_AITER_FA's windowed decode rows run it too).
AttnKernel aiter_unified_kernel(int cus, DType fp8);

// vLLM's default CUDA-graph capture sizes (CompilationConfig): 1, 2, 4, then steps of 8 to 256, then 16 to
// 512.
std::vector<std::int64_t> vllm_default_capture_sizes();

}  // namespace driftcheck::twin
