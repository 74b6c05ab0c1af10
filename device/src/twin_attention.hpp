// Private: paged-KV attention twins as one parameterised CPU kernel. An AttnKernel says how a real kernel
// walks the keys (tiles, split-KV segments, partitions), which exponential it uses, where it rounds and how
// it merges partial states; an AttnBug switches on one deliberate deviation for a mutant. Layout and
// semantics: case.hpp.
#pragma once

#include <memory>
#include <vector>

#include "twin_common.hpp"

namespace driftcheck::twin {

// How a row's keys are scheduled and partial results combined.
enum class AttnSchedule : std::uint8_t {
  kTiled,  // online softmax over KV tiles; optional split-KV segments merged by max-rescaled sums
  kPartitionNormalized,  // ROCM_ATTN custom kernel: per partition max, exp, P normalised by (sum + 1e-6),
                         // rounded
  kPartitionLse,         // ROCM_AITER_FA: normalised partial outputs with their LSE, merged by LSE
};

enum class ExpImpl : std::uint8_t {
  kExp,         // natural exp (Triton unified)
  kExp2Folded,  // exp2 with log2(e) folded into the logit scale, softcap and sinks (aiter kernels)
  kFastExp,     // exp(x) as exp2(x * log2(e)) (CUDA/HIP __expf), logits in the natural domain
};

enum class KvDequant : std::uint8_t {
  kRoundedToAct,  // K, V = act(fp32(kv) * scale) before the dot products (Triton unified)
  kScaleAfter,    // K, V read exactly; k_scale applied to the logits, v_scale to the output
};

enum class SinkPath : std::uint8_t {
  kNone,          // the kernel has no sinks
  kInitialMax,    // Triton: the running max starts at the sink logit, with L = 1.0 standing for exp(sink -
                  // sink)
  kPartialState,  // a partial state with lse = sink and output 0, merged like the others
};

struct AttnKernel {
  AttnSchedule schedule = AttnSchedule::kTiled;
  ExpImpl exp = ExpImpl::kExp;
  KvDequant dequant = KvDequant::kRoundedToAct;
  SinkPath sinks = SinkPath::kInitialMax;
  bool p_rounded = true;          // P rounded to the activation dtype before P.V
  int tile_prefill = 32;          // KV tile of the single-pass path (Triton 2D) / of extend rows (aiter FA)
  int tile_decode = 16;           // KV tile of the split-KV path (Triton 3D) / of decode rows (aiter FA)
  int split_segments = 0;         // Triton 3D path: segments per sequence (0: never split)
  int split_max_seq_heads = 128;  // ... taken when all query lengths are 1 and num_seqs * Hkv <= this
  int partition = 256;  // partition schedules: keys per partition (decode rows only for kPartitionLse)
  // What the kernel accepts (supports()).
  std::vector<std::int64_t> block_sizes;  // empty: any multiple of 16
  std::vector<std::int64_t> head_dims;    // empty: any
  std::int64_t max_gqa_ratio = 0;         // 0: any
  std::int64_t max_query_len = 0;         // 0: any
  bool window = true;
  bool non_causal = true;
  std::string name_for_reasons;  // "ROCM_ATTN custom kernel", used in Support::no reasons
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
};

std::unique_ptr<Backend> make_attention_backend(TwinInfo info, AttnKernel kernel,
                                                AttnBug bug = AttnBug::kNone);

// The kernels and identities the twins declare, so mutants reuse exactly the same parameters.
AttnKernel triton_unified_kernel();
TwinInfo triton_unified_info();

}  // namespace driftcheck::twin
