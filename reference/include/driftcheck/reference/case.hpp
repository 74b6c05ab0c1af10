// A Case: one op, its parameters and its named tensors (inputs and preallocated outputs), as a backend
// receives it.
//
// Tensor names per op (inputs; outputs; in-place). Outputs are allocated by whoever builds the case, with the
// layout the case wants to exercise (strides, offsets, guard bands); backends write into them.
//   rmsnorm          x [N, H], w [H], residual [N, H] (optional)  ->  y [N, H]; residual <- x + residual (in
//   place) concat           a [N, Ha], b [N, Hb]                          ->  out [N, Ha + Hb]
//   dual_rmsnorm_cat e [N, H], h [N, H], w_e [H], w_h [H]          ->  out [N, 2H] = [rmsnorm(e, w_e),
//   rmsnorm(h, w_h)] attention        q [T, Hq, D], k_cache / v_cache [num_blocks, block_size, Hkv, D],
//   block_table [S, max_blocks]
//                    (i32), seq_lens [S] (i32, keys of each sequence incl. its new tokens), query_start_loc
//                    [S + 1] (i32, prefix sums of query lengths, T at the end), sinks [Hq] (fp32, optional),
//                    k_new / v_new [T, Hkv, D] (activation dtype, optional, both or neither: the layer's
//                    new keys and values as the caller has them before writing the cache; the cache slots of
//                    the new tokens hold what vLLM's cache write stores from them)
//                    ->  o [T, Hq, D], lse [T, Hq] (fp32)
// Attention semantics (the reference defines them; docs/REFERENCE.md explains):
//   query j of sequence s (query length q, seq_len L) sits at absolute position p = L - q + j (causal
//   alignment at the end); it sees key t when (!causal || t <= p) && (window == 0 || p - t < window) && t <
//   L. logits s_t = scale * q.k_t * k_scale, then softcap c > 0 maps s -> c * tanh(s / c); a sink adds
//   exp(sink_h) to the softmax denominator and nothing to the numerator; lse = log(sum_t exp(s_t) [+
//   exp(sink_h)]); o = sum_t exp(s_t - lse) * v_t * v_scale. A row that sees no key and has no sink yields o
//   = 0, lse = -inf; with a sink, o = 0 and lse = sink_h. Rows see no key only when causal and q > L (queries
//   at p < 0).
//   Where the new tokens' K/V come from (NewKv): from the cache (k_t = k_cache * k_scale for every key), or,
//   for sequences with query length > 1 (prefill and extend), from k_new / v_new for the new-token positions
//   p >= L - q (key L - q + j is k_new[query_start_loc[s] + j], without k_scale); decode sequences read the
//   cache either way.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "driftcheck/reference/tensor.hpp"

namespace driftcheck {

enum class OpKind : std::uint8_t { kRmsNorm, kConcat, kDualRmsNormCat, kAttention };
inline constexpr OpKind kAllOps[] = {OpKind::kRmsNorm, OpKind::kConcat, OpKind::kDualRmsNormCat,
                                     OpKind::kAttention};

// How the weight multiplies the normalised row: w (Llama) or (1 + w) (Gemma).
enum class WeightMode : std::uint8_t { kPlain, kOnePlus };

struct RmsNormParams {
  double eps = 1e-6;
  WeightMode weight_mode = WeightMode::kPlain;
  bool residual = false;  // fused residual add: z = x + residual; residual <- z; y = rmsnorm(z)
};

struct ConcatParams {};

struct DualRmsNormCatParams {
  double eps = 1e-6;
  WeightMode weight_mode = WeightMode::kPlain;
};

struct AttentionParams {
  std::int64_t num_q_heads = 1;
  std::int64_t num_kv_heads = 1;
  std::int64_t head_dim = 64;
  std::int64_t block_size = 16;
  double scale = 0.125;
  bool causal = true;
  std::int64_t window = 0;  // sliding window in keys (0: none); query at p sees keys p - window < t <= p
  double softcap = 0.0;     // 0: none
  double k_scale = 1.0;     // dequantisation scales of the KV cache (meaningful for fp8, 1 otherwise)
  double v_scale = 1.0;
  bool has_sinks = false;
};

// Where an attention kernel reads the new tokens' keys and values (case.hpp header comment): every key from
// the paged cache, or those of prefill/extend sequences (query length > 1) from the k_new / v_new inputs, as
// vLLM backends with a separate prefill path do (the cache write and the attention read the same inputs).
enum class NewKv : std::uint8_t { kCache, kInputs };

using OpParams = std::variant<RmsNormParams, ConcatParams, DualRmsNormCatParams, AttentionParams>;

struct Case {
  OpKind op = OpKind::kRmsNorm;
  OpParams params;
  std::map<std::string, Tensor, std::less<>> tensors;
  std::uint64_t seed = 0;  // campaign seed and index this case came from (0, 0 when built by hand)
  std::uint64_t index = 0;

  const Tensor& tensor(std::string_view name) const;  // throws InvalidArgument naming the missing tensor
  Tensor& tensor(std::string_view name);
  bool has(std::string_view name) const { return tensors.find(name) != tensors.end(); }
  template <class P>
  const P& get() const {
    return std::get<P>(params);
  }

  // A deep copy: every storage is copied once and views that shared a storage share the copy, so aliasing and
  // guard bands survive.
  Case clone() const;
};

// Names of the tensors an op reads, writes, and updates in place, given a case (optional tensors included
// only when present).
struct OpSignature {
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;  // written; in-place tensors appear in both lists
};
OpSignature op_signature(const Case& c);

std::string_view op_name(OpKind op);
bool parse_op(std::string_view name, OpKind* out);

// Throws InvalidArgument with a one-line message naming the first problem: missing tensor, shape or dtype
// mismatch, eps < 0, Hq % Hkv != 0, a block-table entry outside the cache, a context longer than its table
// row, query length longer than the sequence in a non-causal case, non-monotonic query_start_loc.
void validate(const Case& c);

}  // namespace driftcheck
