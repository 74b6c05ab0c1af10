// The paged-attention twin's shared parts (docs/BACKENDS.md): the batch and launch plan a case resolves to,
// the panels of gathered keys and values, a query row's online-softmax state, and the AttentionTwin class
// whose methods each modelled kernel path defines in its own file (attention_<path>.cpp). Internal to
// dc_device.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "twin_attention.hpp"
#include "twin_fa_varlen.hpp"

namespace driftcheck::twin::attention {

inline constexpr float kLog2e = 1.44269504088896340736f;
inline constexpr double kLog2eDouble = 1.4426950408889634;  // RCP_LN2 as the Triton kernels spell it
inline constexpr float kLn2 = 0.69314718055994530942f;
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// ROCM_ATTN custom kernel constants: masked logits and the bias that keeps its divisions finite.
inline constexpr float kMaskedLogit = -std::numeric_limits<float>::max();
inline constexpr float kSumBias = 1e-6f;
// vllm#24486: the kernel block size the mutant assumes pages are made of.
inline constexpr std::int64_t kKernelBlock = 16;
// ROCM_AITER_FA: context tokens gathered per chunk, shared by the batch's extends (_CP_TOKENS_PER_ITER_ROCM).
inline constexpr std::int64_t kCpTokensPerIter = 32 * 1024;
// ROCM_ATTN: the reason suffix of what only its custom decode kernel rejects.
inline constexpr std::string_view kDecodeRows =
    " (this batch's decode rows go to ROCM_ATTN's custom paged kernel: use_rocm_custom_paged_attention "
    "holds for it)";
// ROCM_ATTN prefix prefill and Triton decode: the bias of their final division, acc / (L + 1e-10) (fp32).
inline constexpr float kPrefillDivBias = 1e-10f;
// ROCM_ATTN Triton decode (kernel_paged_attention_2d): the logit of a key outside the window.
inline constexpr float kWindowMaskedLogit = -10000.0f;

// The case, resolved once.
struct Batch {
  const AttentionParams* p;
  const Tensor* q;
  const Tensor* k;
  const Tensor* v;
  const Tensor* table;
  Tensor* o;
  Tensor* lse;
  const Tensor* k_new = nullptr;  // the new tokens' K/V inputs, when the case has them
  const Tensor* v_new = nullptr;
  std::vector<std::int32_t> seq_lens, query_start;
  std::vector<float> sinks;  // per q head, in the kernel's logit domain
  DType act;
  std::int64_t num_seqs, hq, hkv, d, bs;
  std::int64_t max_query_len, max_seq_len, num_tokens;
  std::int64_t context_chunk = 0;  // ROCM_AITER_FA: tokens per gathered context chunk (extend_chunk_size)
};

// Per-case constants of the kernel's arithmetic.
struct Plan {
  float qk_mul;   // logits = qk_mul * dot(q, k)
  float softcap;  // natural units; 0: none
  float v_mul;    // applied to the output (scale-after kernels) or 1
  // ll4mi with fp8 MFMAs (AttnKernel::ll4mi.fp8_mfma and an fp8 cache): q and P rounded to this format; kF32:
  // none.
  DType mfma_fp8 = DType::kF32;
  // Unified (kTiled) kernels: the launcher's choices.
  bool split = false;     // the 3D (split-KV) path
  std::int64_t tile = 0;  // KV tile of the chosen path
  std::int64_t segments = 1;
  std::int64_t block_m = 16;  // query-head rows per program (BLOCK_M)
};

inline std::vector<std::int32_t> load_ints(const Tensor& t) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i)
    out[static_cast<std::size_t>(i)] = load_i32(*t.storage(), t.index_of_linear(i));
  return out;
}

inline float exp_of(ExpImpl e, float x) {
  switch (e) {
    case ExpImpl::kExp:
      return std::exp(x);
    case ExpImpl::kExp2Folded:
      return std::exp2(x);
    case ExpImpl::kFastExp:
      return std::exp2(x * kLog2e);
  }
  return 0.0f;
}

// A state (running max m, sum l, both in the logit domain) as a natural-log LSE.
inline float natural_lse(ExpImpl e, float m, float l) {
  return e == ExpImpl::kExp2Folded ? (m + std::log2(l)) * kLn2 : m + std::log(l);
}

// Keys and values of one (sequence, kv head), rows x D, as the kernel sees them before the dot products.
struct Panel {
  std::vector<float> k, v;
  std::vector<char> v_nonfinite;  // per gathered row: V holds a NaN or an infinity (0 * it is NaN)
  std::int64_t rows = 0;   // gathered rows: seq_len, or whole pages when the kernel reads the page tail
  std::int64_t valid = 0;  // seq_len
};

// One query row.
struct Row {
  const float* q;
  const Panel* panel;
  std::int64_t lo, hi;   // visible keys [lo, hi]
  std::int64_t j, qlen;  // query index in its sequence, and the sequence's query length
};

struct State {
  float m = kNegInf;
  float l = 1.0f;
  std::vector<float> acc;
};

// One partition of an ll4mi kernel: its max logit, exp sum relative to that max, and output in act.
struct Ll4miPartition {
  float max = kMaskedLogit;
  float sum = 0.0f;
  std::vector<float> out;
};

// The tile range a unified kernel's program walks. A program covers BLOCK_M rows: the GQA heads of BLOCK_Q
// consecutive queries of one sequence. They share one tile range and one load bound (vLLM
// compute_tile_loop_bounds), so a tile may hold no visible key for one of them and still run its softmax
// step for it.
struct TileBounds {
  std::int64_t tile_start = 0, tile_end = 0;  // tiles [start, end) of the block
  std::int64_t load_end = 0;                  // keys at or past this are loaded as 0 (tile_mask)
  std::int64_t window_v_from = std::numeric_limits<std::int64_t>::min();  // V of keys below it zeroed
};

class AttentionTwin final : public TwinBackend {
 public:
  AttentionTwin(TwinInfo info, AttnKernel kernel, AttnBug bug)
      : TwinBackend(std::move(info)), k_(std::move(kernel)), bug_(bug) {
    if (k_.fa.windowed_decode)
      window_twin_ = std::make_unique<AttentionTwin>(this->info(), *k_.fa.windowed_decode, bug_);
  }

  Support supports(const Case& c) const override;
  void run(Case& c) const override;
  // The defects of both kernels when windowed decode rows run another one (names shared by kernels are one
  // defect: repairing it repairs both).
  std::vector<std::string> modelled_defects() const override {
    std::vector<std::string> out = defects_on(k_, kDefects);
    if (k_.fa.windowed_decode)
      for (std::string& d : defects_on(*k_.fa.windowed_decode, kDefects))
        if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(std::move(d));
    return out;
  }
  std::unique_ptr<Backend> without_defects(const std::vector<std::string>& names) const override {
    AttnKernel k = k_;
    bool any = repair_defects(k, kDefects, names);
    if (k_.fa.windowed_decode) {
      AttnKernel w = *k_.fa.windowed_decode;
      any = repair_defects(w, kDefects, names) || any;
      k.fa.windowed_decode = std::make_shared<const AttnKernel>(std::move(w));
    }
    if (!any) return nullptr;
    return std::make_unique<AttentionTwin>(info(), std::move(k), bug_);
  }

 private:
  // The upstream defects the kernel parameters can reproduce (docs/FINDINGS.md names each).
  static constexpr std::array<DefectSwitch<AttnKernel>, 15> kDefects{{
      defect<AttnKernel, &AttnKernel::softcap_from_exp>("softcap_from_exp"),
      defect<AttnKernel, &AttnKernel::unified, &UnifiedSwitches::page_tail_unmasked>("page_tail_unmasked"),
      defect<AttnKernel, &AttnKernel::masked_p_times_v>("masked_p_times_v"),
      defect<AttnKernel, &AttnKernel::empty_tile_step>("empty_tile_step"),
      defect<AttnKernel, &AttnKernel::ll4mi, &Ll4miSwitches::warp_partials_in_act>("warp_partials_in_act"),
      defect<AttnKernel, &AttnKernel::ll4mi, &Ll4miSwitches::reduce_padded_slots>("reduce_padded_slots"),
      defect<AttnKernel, &AttnKernel::fa, &FaExtendSwitches::context_requantised>("context_requantised"),
      defect<AttnKernel, &AttnKernel::ll4mi, &Ll4miSwitches::heads_addressed_dense>("heads_addressed_dense"),
      defect<AttnKernel, &AttnKernel::softcap_dropped>("softcap_dropped"),
      defect<AttnKernel, &AttnKernel::e5m2_read_as_e4m3>("e5m2_read_as_e4m3"),
      defect<AttnKernel, &AttnKernel::prefill, &PrefixPrefillSwitches::window_one_short>("window_one_short"),
      defect<AttnKernel, &AttnKernel::prefill, &PrefixPrefillSwitches::nan_row_zeroed>("nan_row_zeroed"),
      defect<AttnKernel, &AttnKernel::triton_decode, &TritonDecodeSwitches::window_logit_finite>(
          "window_logit_finite"),
      defect<AttnKernel, &AttnKernel::triton_decode, &TritonDecodeSwitches::paged_2d_tail_unmasked>(
          "paged_2d_tail_unmasked"),
      defect<AttnKernel, &AttnKernel::fa, &FaExtendSwitches::swa_new_kv_from_cache>("swa_new_kv_from_cache"),
  }};

  Numerics numerics_for(const Case& c) const override;
  Support supports_kv(const Case& c) const;
  std::int64_t passed_window(const AttentionParams& p) const;
  std::int64_t kernel_window(const AttentionParams& p) const;
  bool custom_decode(const AttentionParams& p, std::int64_t max_seq_len) const;
  bool custom_decode(const Case& c) const;
  // Whether a decode row of the case runs this twin's own ll4mi kernel (ROCM_AITER_FA: without a window;
  // windowed decode rows run the unified kernel).
  bool reaches_ll4mi_decode(const Case& c) const;
  float triton_logit(const Batch& b, const float* q, const float* k) const;
  void triton_decode_sequence(const Batch& b, std::int64_t s) const;
  Support supports_extend(const Case& c) const;
  Batch shape_of(const Case& c) const;
  Support supports_prefix_prefill(const Case& c) const;
  Batch resolve(Case& c) const;
  Plan plan(const Batch& b) const;
  void plan_launch(const Batch& b, Plan& pl) const;
  std::int64_t kv_head(const Batch& b, std::int64_t h) const {
    return bug_ == AttnBug::kGqaModulo ? h % b.hkv : h / (b.hq / b.hkv);
  }
  std::int64_t slot_index(const Batch& b, const Tensor& cache, std::int64_t s, std::int64_t t,
                          std::int64_t g) const;
  void gather(const Batch& b, const Plan& pl, std::int64_t s, std::int64_t g, Panel& panel) const;
  void gather_one(const Batch& b, const Tensor& cache, double scale, std::int64_t s, std::int64_t g,
                  std::vector<float>& out, std::int64_t rows) const;
  Row make_row(const Batch& b, const float* q, const Panel& panel, std::int64_t s, std::int64_t j) const;
  float logit(const Batch& b, const Plan& pl, const Row& r, std::int64_t t) const;
  std::pair<float, float> tile_max(const Batch& b, const Plan& pl, const Row& r, std::int64_t t0,
                                   std::int64_t t1, std::int64_t first, std::int64_t last, State& st,
                                   std::vector<float>& scores) const;
  TileBounds block_tiles(const Batch& b, const Plan& pl, const Row& r) const;
  void unified_tile(const Batch& b, const Plan& pl, const Row& r, const TileBounds& tb, std::int64_t t0,
                    State& st, std::vector<float>& scores) const;
  float compute_row(const Batch& b, const Plan& pl, const Row& r, std::int64_t h, float* out) const;
  float tiled_row(const Batch& b, const Plan& pl, const Row& r, std::int64_t h, float* out) const;
  Ll4miPartition ll4mi_partition(const Batch& b, const Plan& pl, const Row& r, std::int64_t begin,
                                 std::vector<float>& p) const;
  float ll4mi_row(const Batch& b, const Plan& pl, const Row& r, float* out) const;
  void extend_sequence(const Batch& b, std::int64_t s) const;
  void swa_extend_sequence(const Batch& b, std::int64_t s) const;
  void paged_sequence(const Batch& b, const Plan& pl, std::int64_t s, Panel& panel) const;
  void extend_panels(const Batch& b, std::int64_t s, std::int64_t g, Panel& context, Panel& fresh) const;
  void prefix_prefill_sequence(const Batch& b, std::int64_t s) const;

  AttnKernel k_;
  AttnBug bug_;
  std::unique_ptr<AttentionTwin> window_twin_;  // k_.windowed_decode's twin
};

// Whether ROCM_AITER_FA splits some extend's context into more than one chunk: contexts above
// _CP_TOKENS_PER_ITER_ROCM / num_extends (the extends: query length > 1 with a context), none with a window
// (extend_for_sliding_window gathers at most query length + window tokens in one pass).
// The builder's max_context_chunk, _CP_TOKENS_PER_ITER_ROCM // num_extends (the extends: sequences with query
// length > 1 and a context), and the longest extend context.
struct ExtendChunks {
  std::int64_t chunk = kCpTokensPerIter, longest = 0;
};

inline ExtendChunks extend_chunk_size(const std::vector<std::int32_t>& qsl,
                                      const std::vector<std::int32_t>& lens) {
  std::int64_t extends = 0;
  ExtendChunks r;
  for (std::size_t s = 0; s + 1 < qsl.size() && s < lens.size(); ++s) {
    const std::int64_t ql = qsl[s + 1] - qsl[s];
    if (ql <= 1 || lens[s] <= ql) continue;
    ++extends;
    r.longest = std::max<std::int64_t>(r.longest, lens[s] - ql);
  }
  r.chunk = kCpTokensPerIter / std::max<std::int64_t>(extends, 1);
  return r;
}

inline bool contains(const std::vector<std::int64_t>& v, std::int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The element run [first, first + n) of a tensor's storage that a kernel addressing it densely touches;
// outside the storage the real kernel would read or write out of bounds: an error naming the tensor.
inline void check_dense_run(const Tensor& t, const char* name, std::int64_t first, std::int64_t n) {
  if (first < 0 || first + n > t.storage()->numel())
    throw BackendError(
        fmt::format("{}: the kernel's dense address {}..{} lies outside the tensor's storage of {} "
                    "elements",
                    name, first, first + n - 1, t.storage()->numel()));
}

inline std::int64_t cdiv(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;  // C truncation, as Triton's integer division
}

inline State fresh_state(std::int64_t d, float m) {
  State st;
  st.m = m;
  st.acc.assign(static_cast<std::size_t>(d), 0.0f);
  return st;
}

// K and V rows as a kernel's dots see them: x = to(fp32(x) * scale) in place, the scales applied as the
// reference applies them (act caches carry scale 1). `to` is act for the Triton kernels' `.to(q.dtype)`, or
// the cache's fp8 for cp_mha_gather_cache's re-quantising cast.
inline void dequantise_to(DType to, const Batch& b, std::vector<float>& keys, std::vector<float>& values) {
  const bool act = to == b.act;  // round_act: the same RNE as round_to, on the fast path
  for (auto [x, scale] : {std::pair{&keys, b.p->k_scale}, std::pair{&values, b.p->v_scale}})
    for (float& e : *x) {
      const float v = e * static_cast<float>(scale);
      e = act ? round_act(to, v) : static_cast<float>(round_to(to, v));
    }
}

// Rows [q0, q0 + n) of a new tokens' input (k_new or v_new, [T, Hkv, D]) for KV head g, into dst ([n][d]).
inline void load_new_rows(const Tensor& input, std::int64_t q0, std::int64_t n, std::int64_t g,
                          std::int64_t d, float* dst) {
  const Shape& st = input.strides();
  for (std::int64_t j = 0; j < n; ++j)
    load_run(*input.storage(), input.offset() + (q0 + j) * st[0] + g * st[1], st[2], d, dst + j * d);
}

// One row's online-softmax state in the prefix prefill kernel (m_i, l_i, acc of one row of the program's
// BLOCK_M rows).
struct PrefillRow {
  float m = kNegInf;
  float l = 0.0f;
  std::vector<float> acc;
};

// A Triton ROCM_ATTN kernel's row state at its start: acc 0; the sink (fp32, natural units) as the initial
// max with L = 1 where it is above -inf, else M = -inf, L = 0 (prefix_prefill.py:141-150,
// chunked_prefill_paged_decode.py:106-115).
inline PrefillRow start_row(std::int64_t d, const std::vector<float>& sinks, std::int64_t h) {
  PrefillRow st;
  st.acc.assign(static_cast<std::size_t>(d), 0.0f);
  if (!sinks.empty()) {
    st.m = sinks[static_cast<std::size_t>(h)];
    st.l = st.m > kNegInf ? 1.0f : 0.0f;
  }
  return st;
}

// Keys (rows of K and V, `d` wide) of one tile as the kernel loaded them; a row the tile reads past the
// sequence (masked load) is nullptr, V loaded as 0.
struct PrefillTile {
  std::vector<float> scores;      // the row's logits, -inf where masked
  std::vector<const float*> v;    // V rows, nullptr for a masked load (0)
  std::vector<char> v_nonfinite;  // V row holds a NaN or an infinity
  std::vector<char> masked;       // the row must not see this key (causal, window, past the end)

  // n slots, each masked (logit -inf) with no V (loaded as 0) until filled.
  void reset(std::int64_t n) {
    scores.assign(static_cast<std::size_t>(n), kNegInf);
    v.assign(static_cast<std::size_t>(n), nullptr);
    v_nonfinite.assign(static_cast<std::size_t>(n), 0);
    masked.assign(static_cast<std::size_t>(n), 1);
  }
};

// One softmax step of _fwd_kernel for one row (prefix_prefill.py:235-266 for the context, 313-334 for the new
// tokens): m_ij = maximum(m_i, max(qk)) (maxnum); p = exp(qk - m_ij), 0 where m_ij is -inf; l_ij = sum(p);
// alpha = exp(m_i - m_ij), 0 where m_i is -inf; acc *= alpha; acc = dot(act(p), V, acc) over the whole tile
// (a masked p = 0 still multiplies its V: 0 * inf = NaN); l_i = l_i * alpha + l_ij as one FMA. With
// `nan_max` false (defect nan_row_zeroed repaired) the max propagates a NaN logit.
inline void prefill_step(DType act, std::int64_t d, const PrefillTile& tile, bool masked_p_times_v,
                         bool nan_max, PrefillRow& st) {
  const std::size_t n = tile.scores.size();
  float m = st.m;
  for (float x : tile.scores)
    m = !nan_max && (std::isnan(x) || std::isnan(m)) ? std::numeric_limits<float>::quiet_NaN()
                                                     : std::fmax(m, x);
  float l_j = 0.0f;
  std::vector<float> p(n);
  for (std::size_t t = 0; t < n; ++t) {
    p[t] = m == kNegInf ? 0.0f : exp_of(ExpImpl::kFastExp, tile.scores[t] - m);
    l_j += p[t];
  }
  const float alpha = st.m == kNegInf ? 0.0f : exp_of(ExpImpl::kFastExp, st.m - m);
  for (float& a : st.acc) a *= alpha;
  for (std::size_t t = 0; t < n; ++t) {
    if (tile.v[t] == nullptr) continue;  // V loaded as 0: adds 0
    const float pr = round_act(act, p[t]);
    if (pr == 0.0f && !tile.v_nonfinite[t]) continue;
    if (tile.masked[t] && !masked_p_times_v) continue;  // repaired: a masked key stays out of P.V
    const float* vt = tile.v[t];
    for (std::int64_t i = 0; i < d; ++i) st.acc[static_cast<std::size_t>(i)] += pr * vt[i];
  }
  st.l = std::fma(st.l, alpha, l_j);
  st.m = m;
}

inline std::vector<char> nonfinite_rows(const std::vector<float>& x, std::int64_t rows, std::int64_t d) {
  std::vector<char> out(static_cast<std::size_t>(rows));
  for (std::int64_t t = 0; t < rows; ++t)
    out[static_cast<std::size_t>(t)] =
        std::any_of(x.begin() + t * d, x.begin() + (t + 1) * d, [](float e) { return !std::isfinite(e); });
  return out;
}

}  // namespace driftcheck::twin::attention
