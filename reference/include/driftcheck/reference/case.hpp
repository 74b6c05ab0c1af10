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
// Attention semantics (the reference defines them; docs/REFERENCE.md section 3 says the same in more words):
//   query j of sequence s (query length q, seq_len L) sits at absolute position p = L - q + j (causal
//   alignment at the end); it sees key t when
//     t < L && (!causal || t <= p) && (window == 0 || p - t < window):
//   the window bounds past keys only, so without causality every later key t > p stays visible.
//   K_t, V_t: the values stored for key t (k_cache / v_cache at its slot, decoded exactly); k_scale and
//   v_scale dequantise them, each applied once:
//     s_t = (scale * k_scale) * (q . K_t), then a softcap c > 0 maps s_t -> c * tanh(s_t / c);
//     m = max(sink_h, max_t s_t) over the visible keys, d = exp(sink_h - m) + sum_t exp(s_t - m) (the sink
//     terms only with sinks; the sink is neither scaled nor capped);
//     lse = m + log(d);  o = v_scale * sum_t (exp(s_t - m) / d) * V_t.
//   All in fp64 with IEEE semantics: an infinite element of q gives +-inf logits (NaN where it meets a zero
//   K element); a +inf logit makes the row's o and lse NaN (exp(inf - inf)); a -inf one weighs 0, unless
//   every visible logit is -inf and there is no sink (then NaN); a softcap maps +-inf to +-c.
//   A row that sees no key and has no sink yields o = 0, lse = -inf; with a sink, o = 0 and lse = sink_h
//   (the sink is the max). Rows see no key only when causal and q > L (queries at p < 0).
//   Where the new tokens' K/V come from (NewKv): from the cache for every key (NewKv::kCache: reference(),
//   and the exchange files' `reference.*` unless exported with --new-kv inputs), or, for sequences with
//   query length > 1 (prefill and extend), from k_new / v_new for the new-token positions t >= L - q
//   (NewKv::kInputs): key L - q + j's dequantised key and value are k_new[query_start_loc[s] + j] and
//   v_new[...] themselves, no scale applied (the reference uses K_t = k_new / k_scale, V_t = v_new / v_scale
//   in the formulas above); decode sequences read the cache either way.
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
  // Sliding window in keys (0: none): a query at p sees keys with p - t < window, i.e. t > p - window; it
  // bounds past keys only (causal: p - window < t <= p; non-causal: every t > p - window, later keys
  // included).
  std::int64_t window = 0;
  double softcap = 0.0;  // 0: none
  double k_scale = 1.0;  // dequantisation scales of the KV cache, each applied once: logit (scale * k_scale)
  double v_scale = 1.0;  // * (q . K_t), output v_scale * sum p_t V_t (meaningful for fp8, 1 otherwise)
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
