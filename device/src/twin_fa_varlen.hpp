// Private: the two kernels of vLLM ROCM_AITER_FA's prefill/extend path, for the aiter_fa twin: aiter's
// flash_attn_varlen_func (one FlashAttention forward pass over contiguous K/V rows) and vLLM's Triton
// merge_attn_states (two partial outputs combined by their LSEs). docs/BACKENDS.md (cpu.attn.aiter_fa) gives
// the upstream lines and what is approximated.
#pragma once

#include <cstdint>
#include <vector>

#include "driftcheck/device/twin_common.hpp"

namespace driftcheck::twin {

// One pass's result for one query row: o rounded to the activation dtype (the pass writes a tensor of it) and
// the natural-log LSE in fp32.
struct FaPartial {
  std::vector<float> o;
  float lse = 0.0f;
};

// A FlashAttention forward pass of one query row over key/value rows [lo, hi] of k and v ([rows][d], values
// of the activation dtype): logits `dot * qk_log2` (softmax_scale * log2(e) in fp32) in the log2 domain, an
// online softmax over tiles of `tile` keys with exp2, P rounded to act before P.V, fp32 accumulation,
// o = act(acc / l), lse = (m + log2(l)) ln 2. A row with no key gives o = 0 and lse = -inf.
// With softcap > 0 (natural units; the repaired twin only: vLLM passes none) the logit is
// `c * tanh(dot * scale / c) * log2(e)` instead.
FaPartial fa_varlen_row(DType act, const float* q, const float* k, const float* v, std::int64_t d,
                        std::int64_t lo, std::int64_t hi, float qk_log2, std::int64_t tile,
                        float scale = 0.0f, float softcap = 0.0f);

// vLLM's Triton merge_attn_states for one row: LSEs of +inf read as -inf, m = max, p = e^(lse_p - m),
// s = e^(lse_s - m), out = o_p * (p / (p + s)) + o_s * (s / (p + s)) in fp32, stored in act; returns
// log(p + s) + m (the output LSE the kernel writes when asked).
float merge_attn_states_row(DType act, const FaPartial& prefix, const FaPartial& suffix, float* out);

}  // namespace driftcheck::twin
