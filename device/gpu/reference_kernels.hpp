// The fp64 attention reference on the GPU (docs/REFERENCE.md, "The attention reference on a GPU"): the
// definition of reference_attention (logits, softcap, sinks, windows, causal alignment, GQA, fp8 scales),
// every value decoded exactly to double and every operation in double, with the keys of a row split into
// chunks whose partial softmax states are merged in chunk order. It is not the CPU's summation order, so it
// agrees with the CPU reference within the fp64 bound derived in docs/REFERENCE.md, not bit for bit.
#pragma once

#include <cstdint>

#include "kernels.hpp"

namespace driftcheck::gpu {

// Per lane, head_dim / warp values of q, k, v: head_dim <= kRefDimsPerLane * 32 on every warp size.
inline constexpr int kRefDimsPerLane = 16;
inline constexpr std::int64_t kRefMaxHeadDim = kRefDimsPerLane * 32;

struct ReferenceArgs {
  DeviceView q, k_cache, v_cache, block_table, seq_lens, query_start_loc, sinks;
  std::int64_t num_tokens = 0, num_seqs = 0, num_q_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  double logit_scale = 0;  // scale * k_scale, formed on the host exactly as the CPU reference forms it
  double softcap = 0, v_scale = 1;
  std::int64_t window = 0;
  bool causal = true;
  bool has_sinks = false;
  std::int64_t chunk = 0;      // keys per partial state
  std::int64_t splits = 0;     // chunks per row: ceil(longest sequence / chunk)
  double* partials = nullptr;  // [tokens, q heads, splits, head_dim + 2]: o, then max and sum of exp
  double* o = nullptr;         // [tokens, q heads, head_dim], contiguous
  double* lse = nullptr;       // [tokens, q heads]
  // Set to 1 when a value the reference reads (q, a visible key or value, a sink) is NaN or infinite: the GPU
  // result is then not used (the CPU computes such cases; which NaN or infinity comes out depends on the
  // order).
  int* nonfinite = nullptr;
};

hipError_t launch_reference_attention(const ReferenceArgs& args, hipStream_t stream);

}  // namespace driftcheck::gpu
