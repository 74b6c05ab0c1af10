// The shared paged-attention twin. Per sequence and KV head, the keys and values the sequence owns are
// gathered once through the block table into fp32 panels (dequantised the way the kernel dequantises); every
// query row of that head then walks the panel with the kernel's schedule. Only slots below seq_len are
// gathered, so the poisoned slots of a case never reach a correct twin (real kernels read whole tiles and
// select them away).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "twin_attention.hpp"
#include "twin_fa_varlen.hpp"

namespace driftcheck::twin {

namespace {

constexpr float kLog2e = 1.44269504088896340736f;
constexpr double kLog2eDouble = 1.4426950408889634;  // RCP_LN2 as the Triton kernels spell it
constexpr float kLn2 = 0.69314718055994530942f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// ROCM_ATTN custom kernel constants: masked logits and the bias that keeps its divisions finite.
constexpr float kMaskedLogit = -std::numeric_limits<float>::max();
constexpr float kSumBias = 1e-6f;
// vllm#24486: the kernel block size the mutant assumes pages are made of.
constexpr std::int64_t kKernelBlock = 16;
// ROCM_AITER_FA: context tokens gathered per chunk, shared by the batch's extends (_CP_TOKENS_PER_ITER_ROCM).
constexpr std::int64_t kCpTokensPerIter = 32 * 1024;
// ROCM_ATTN: the reason suffix of what only its custom decode kernel rejects.
constexpr std::string_view kDecodeRows =
    " (this batch's decode rows go to ROCM_ATTN's custom paged kernel: use_rocm_custom_paged_attention "
    "holds for it)";
// ROCM_ATTN prefix prefill and Triton decode: the bias of their final division, acc / (L + 1e-10) (fp32).
constexpr float kPrefillDivBias = 1e-10f;
// ROCM_ATTN Triton decode (kernel_paged_attention_2d): the logit of a key outside the window.
constexpr float kWindowMaskedLogit = -10000.0f;

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
  // ll4mi with fp8 MFMAs (AttnKernel::fp8_mfma and an fp8 cache): q and P rounded to this format; kF32: none.
  DType mfma_fp8 = DType::kF32;
  // Unified (kTiled) kernels: the launcher's choices.
  bool split = false;     // the 3D (split-KV) path
  std::int64_t tile = 0;  // KV tile of the chosen path
  std::int64_t segments = 1;
  std::int64_t block_m = 16;  // query-head rows per program (BLOCK_M)
};

std::vector<std::int32_t> load_ints(const Tensor& t) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i)
    out[static_cast<std::size_t>(i)] = load_i32(*t.storage(), t.index_of_linear(i));
  return out;
}

float exp_of(ExpImpl e, float x) {
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
float natural_lse(ExpImpl e, float m, float l) {
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
    if (k_.windowed_decode)
      window_twin_ = std::make_unique<AttentionTwin>(this->info(), *k_.windowed_decode, bug_);
  }

  Support supports(const Case& c) const override;
  void run(Case& c) const override;
  // The defects of both kernels when windowed decode rows run another one (names shared by kernels are one
  // defect: repairing it repairs both).
  std::vector<std::string> modelled_defects() const override {
    std::vector<std::string> out = defects_on(k_, kDefects);
    if (k_.windowed_decode)
      for (std::string& d : defects_on(*k_.windowed_decode, kDefects))
        if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(std::move(d));
    return out;
  }
  std::unique_ptr<Backend> without_defects(const std::vector<std::string>& names) const override {
    AttnKernel k = k_;
    bool any = repair_defects(k, kDefects, names);
    if (k_.windowed_decode) {
      AttnKernel w = *k_.windowed_decode;
      any = repair_defects(w, kDefects, names) || any;
      k.windowed_decode = std::make_shared<const AttnKernel>(std::move(w));
    }
    if (!any) return nullptr;
    return std::make_unique<AttentionTwin>(info(), std::move(k), bug_);
  }

 private:
  // The upstream defects the kernel parameters can reproduce (docs/FINDINGS.md names each).
  static constexpr std::array<DefectSwitch<AttnKernel>, 15> kDefects{{
      {"softcap_from_exp", &AttnKernel::softcap_from_exp},
      {"page_tail_unmasked", &AttnKernel::page_tail_unmasked},
      {"masked_p_times_v", &AttnKernel::masked_p_times_v},
      {"empty_tile_step", &AttnKernel::empty_tile_step},
      {"warp_partials_in_act", &AttnKernel::warp_partials_in_act},
      {"reduce_padded_slots", &AttnKernel::reduce_padded_slots},
      {"context_requantised", &AttnKernel::context_requantised},
      {"heads_addressed_dense", &AttnKernel::heads_addressed_dense},
      {"softcap_dropped", &AttnKernel::softcap_dropped},
      {"e5m2_read_as_e4m3", &AttnKernel::e5m2_read_as_e4m3},
      {"window_one_short", &AttnKernel::window_one_short},
      {"nan_row_zeroed", &AttnKernel::nan_row_zeroed},
      {"window_logit_finite", &AttnKernel::window_logit_finite},
      {"paged_2d_tail_unmasked", &AttnKernel::paged_2d_tail_unmasked},
      {"swa_new_kv_from_cache", &AttnKernel::swa_new_kv_from_cache},
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

// ---- support

template <class T>
std::string join(const std::vector<T>& v, std::string_view last_sep) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += i + 1 == v.size() ? std::string(last_sep) : ", ";
    s += fmt::format("{}", v[i]);
  }
  return s;
}

bool contains(const std::vector<std::int64_t>& v, std::int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

bool has_decode_sequence(const Case& c) {
  const std::vector<std::int32_t> qsl = load_ints(c.tensor("query_start_loc"));
  for (std::size_t s = 0; s + 1 < qsl.size(); ++s)
    if (qsl[s + 1] - qsl[s] == 1) return true;
  return false;
}

// Whether ROCM_AITER_FA splits some extend's context into more than one chunk: contexts above
// _CP_TOKENS_PER_ITER_ROCM / num_extends (the extends: query length > 1 with a context), none with a window
// (extend_for_sliding_window gathers at most query length + window tokens in one pass).
// The builder's max_context_chunk, _CP_TOKENS_PER_ITER_ROCM // num_extends (the extends: sequences with query
// length > 1 and a context), and the longest extend context.
struct ExtendChunks {
  std::int64_t chunk = kCpTokensPerIter, longest = 0;
};
ExtendChunks extend_chunk_size(const std::vector<std::int32_t>& qsl, const std::vector<std::int32_t>& lens) {
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

bool extend_chunks(const Case& c) {
  if (c.get<AttentionParams>().window > 0) return false;
  const ExtendChunks e =
      extend_chunk_size(load_ints(c.tensor("query_start_loc")), load_ints(c.tensor("seq_lens")));
  return e.longest > e.chunk;
}

bool AttentionTwin::reaches_ll4mi_decode(const Case& c) const {
  return k_.schedule == AttnSchedule::kLl4mi && has_decode_sequence(c) &&
         !(k_.windowed_decode && c.get<AttentionParams>().window > 0);
}

// use_rocm_custom_paged_attention (vllm/platforms/rocm.py, gfx9 branch, read at e2a00c7) for a batch, as
// chunked_prefill_paged_decode evaluates it: the SLIDING_WINDOW it is passed (window - 1 from ROCM_ATTN) is
// 0, head size 64/128, block size 16/32, GQA 1..16, max_seq_len <= 128K, no sinks (q bf16/fp16, the
// power-of-two page, VLLM_ROCM_CUSTOM_PAGED_ATTN on and aiter's paged attention off hold for every case the
// twin accepts). A twin without the Triton decode path sends every decode row to its one decode kernel.
bool AttentionTwin::custom_decode(const AttentionParams& p, std::int64_t max_seq_len) const {
  if (!k_.triton_decode_2d) return true;
  const std::int64_t passed = passed_window(p);
  const std::int64_t ratio = p.num_kv_heads > 0 ? p.num_q_heads / p.num_kv_heads : 0;
  return passed <= 0 && contains(k_.head_dims, p.head_dim) && contains(k_.block_sizes, p.block_size) &&
         ratio >= 1 && ratio <= k_.max_gqa_ratio && max_seq_len <= k_.custom_max_seq_len && !p.has_sinks;
}

bool AttentionTwin::custom_decode(const Case& c) const {
  if (!k_.triton_decode_2d) return true;
  const std::vector<std::int32_t> lens = load_ints(c.tensor("seq_lens"));
  const std::int64_t longest = lens.empty() ? 0 : *std::max_element(lens.begin(), lens.end());
  return custom_decode(c.get<AttentionParams>(), longest);
}

// The window a twin's backend passes its kernels: ROCM_ATTN's (window - 1, 0)[0], the layer's window less one
// (defect window_one_short; 0 is none); the layer's window otherwise.
std::int64_t AttentionTwin::passed_window(const AttentionParams& p) const {
  return p.window > 0 && k_.window_one_short ? p.window - 1 : p.window;
}

// The window ROCM_ATTN's Triton kernels apply (SLIDING_WINDOW): the passed window; the window mutant's one
// wider.
std::int64_t AttentionTwin::kernel_window(const AttentionParams& p) const {
  const std::int64_t sw = passed_window(p);
  return sw > 0 && bug_ == AttnBug::kWindowOffByOne ? sw + 1 : sw;
}

// ROCM_ATTN: decode rows on the Triton decode kernel dequantise fp8 K/V to act as the prefill rows do, so in
// a batch routed there every row rounds (kv_dequant_rounded); on the custom kernel decode rows read fp8
// exactly and only the prefill rows round (kv_dequant_rounded_prefill, declared).
Numerics AttentionTwin::numerics_for(const Case& c) const {
  Numerics n = numerics();
  if (k_.triton_decode_2d && c.op == OpKind::kAttention && c.has("seq_lens") && c.has("query_start_loc") &&
      has_decode_sequence(c) && !custom_decode(c))
    n.kv_dequant_rounded = true;
  // ROCM_AITER_FA gathers an extend's context in chunks of 32768 / (extends in the batch) tokens and merges
  // them in act: a sequence whose context exceeds its batch's chunk has outputs that depend on the batch.
  if (k_.aiter_fa_extend && c.op == OpKind::kAttention && c.has("query_start_loc") && c.has("seq_lens") &&
      extend_chunks(c))
    n.batch_invariant = false;
  // ROCM_AITER_FA declares fp8 MFMAs for its decode rows (the error model's term is 0 outside fp8 decode
  // rows); a case says whether they happen: an fp8 cache, and decode rows on paged_attention_v1 (a windowed
  // batch's run the unified kernel, which keeps q and P in act).
  if (n.fp8_mfma_decode && c.op == OpKind::kAttention && c.has("query_start_loc") && c.has("k_cache") &&
      (!is_fp8(c.tensor("k_cache").dtype()) || !reaches_ll4mi_decode(c)))
    n.fp8_mfma_decode = false;
  return n;
}

Support AttentionTwin::supports_kv(const Case& c) const {
  const std::string& who = k_.name_for_reasons;
  const DType kv = c.tensor("k_cache").dtype();
  if (kv != c.tensor("v_cache").dtype()) return Support::no("k_cache and v_cache differ in dtype");
  if (kv == c.tensor("o").dtype()) return Support::yes();
  if (!is_fp8(kv))
    return Support::no(fmt::format("KV cache {}: {} reads the activation dtype or fp8", dtype_name(kv), who));
  // ROCM_AITER_FA: fp8 decode rows reach paged_attention_v1's fp8 MFMAs only without a window (windowed
  // decode runs the unified kernel). q is converted to fp8 there without a clamp: what the conversion makes
  // of a value beyond the format's range is not modelled.
  if (k_.fp8_mfma && reaches_ll4mi_decode(c)) {
    const FloatFormat f = float_format_of(kv);
    const Tensor& q = c.tensor("q");
    const std::vector<double> qv = q.to_f64();
    const std::vector<std::int32_t> qsl = load_ints(c.tensor("query_start_loc"));
    const auto row = static_cast<std::size_t>(q.numel() / std::max<std::int64_t>(q.size(0), 1));
    for (std::size_t s = 0; s + 1 < qsl.size(); ++s) {
      if (qsl[s + 1] - qsl[s] != 1) continue;
      for (std::size_t i = 0; i < row; ++i) {
        const double x = qv[static_cast<std::size_t>(qsl[s]) * row + i];
        if (std::isinf(x) || std::fabs(x) > max_finite(f))
          return Support::no(fmt::format(
              "q element {} of decode token {} is {}, beyond {}'s largest value {}: {} converts q to the "
              "cache's fp8 without a clamp (v_cvt_pk_fp8_f32), an overflow the twin does not model",
              i, qsl[s], x, dtype_name(kv), max_finite(f), who));
      }
    }
  }
  // ROCM_ATTN: decode rows go to the custom paged kernel (kv_dtypes) or the Triton decode kernel, prefill
  // rows to the Triton prefix prefill (both pp_kv_dtypes); a batch needs every kernel it reaches to read its
  // cache.
  const bool custom_rows = (!k_.prefix_prefill || has_decode_sequence(c)) && custom_decode(c);
  const std::vector<DType>& allowed = custom_rows ? k_.kv_dtypes : k_.pp_kv_dtypes;
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), kv) == allowed.end()) {
    std::vector<std::string_view> names;
    for (DType t : allowed) names.push_back(dtype_name(t));
    return Support::no(fmt::format("KV cache {}: {} stores fp8 as {} only{}", dtype_name(kv), who,
                                   join(names, " or "), k_.prefix_prefill ? kDecodeRows : ""));
  }
  return Support::yes();
}

Support AttentionTwin::supports(const Case& c) const {
  const auto& p = c.get<AttentionParams>();
  const std::string& who = k_.name_for_reasons;
  if (Support s = check_act_dtype(c.tensor("o"), "o"); !s.ok) return s;
  if (c.tensor("q").dtype() != c.tensor("o").dtype())
    return Support::no("q and o differ in dtype: the kernel reads and writes the activation dtype");
  if (Support s = supports_kv(c); !s.ok) return s;
  if (p.block_size % 16 != 0)
    return Support::no(fmt::format("block_size {}: {} needs a multiple of 16", p.block_size, who));
  if (!k_.block_sizes.empty() && !contains(k_.block_sizes, p.block_size))
    return Support::no(fmt::format("block_size {}: {} supports KV block sizes {} only", p.block_size, who,
                                   join(k_.block_sizes, " and ")));
  // ROCM_ATTN: what only the custom paged kernel restricts applies to batches whose decode rows it runs; the
  // others run the Triton kernels alone (prefix prefill, kernel_paged_attention_2d).
  const bool decode_rows = !k_.prefix_prefill || has_decode_sequence(c);
  const bool custom_rows = decode_rows && custom_decode(c);
  const std::string_view decode_note = k_.prefix_prefill ? kDecodeRows : "";
  if (!custom_rows && !k_.pp_head_dims.empty() && !contains(k_.pp_head_dims, p.head_dim))
    return Support::no(fmt::format("head_dim {}: {} supports head sizes {} only", p.head_dim, who,
                                   join(k_.pp_head_dims, " and ")));
  if (custom_rows && !k_.head_dims.empty() && !contains(k_.head_dims, p.head_dim))
    return Support::no(fmt::format("head_dim {}: {} supports head sizes {} only{}", p.head_dim, who,
                                   join(k_.head_dims, " and "), decode_note));
  if (p.head_dim < k_.min_head_dim || (k_.max_head_dim > 0 && p.head_dim > k_.max_head_dim))
    return Support::no(fmt::format("head_dim {}: {} supports head sizes {}..{}", p.head_dim, who,
                                   k_.min_head_dim,
                                   k_.max_head_dim > 0 ? fmt::format("{}", k_.max_head_dim) : ""));
  const std::int64_t ratio = p.num_kv_heads > 0 ? p.num_q_heads / p.num_kv_heads : 0;
  if (custom_rows && k_.max_gqa_ratio > 0 && ratio > k_.max_gqa_ratio)
    return Support::no(
        fmt::format("GQA ratio {}: {} supports 1..{}{}", ratio, who, k_.max_gqa_ratio, decode_note));
  // The window the decode kernel is passed: ROCM_ATTN's custom kernel is reached with a window of 1 (passed
  // as 0: no window).
  if (custom_rows && passed_window(p) > 0 && !k_.window)
    return Support::no(fmt::format("sliding window: {} has none{}", who, decode_note));
  if (p.softcap > 0 && !k_.softcap_unmodelled.empty())
    return Support::no(fmt::format("softcap: {}", k_.softcap_unmodelled));
  if (p.softcap > 0 && !k_.softcap) return Support::no(fmt::format("softcap: {} has none", who));
  if (custom_rows && p.has_sinks && k_.sinks == SinkPath::kNone)
    return Support::no(fmt::format("sinks: {} has none{}", who, decode_note));
  if (!p.causal && !k_.non_causal)
    return Support::no(fmt::format("non-causal attention: {}", k_.causal_reason.empty()
                                                                   ? fmt::format("{} is causal only", who)
                                                                   : k_.causal_reason));
  if (k_.tile_divides_block_3d) {
    const Batch b = shape_of(c);
    if (b.hkv > 0 && b.hq % b.hkv == 0 && static_cast<std::int64_t>(b.query_start.size()) == b.num_seqs + 1) {
      Plan pl{};
      plan_launch(b, pl);
      if (pl.split && pl.tile > b.bs && pl.tile % b.bs != 0)
        return Support::no(
            fmt::format("block_size {}: this batch takes {}'s 3D path, whose select_3d_config asserts "
                        "\"TILE_SIZE needs to "
                        "be divisible by block_size\" (TILE_SIZE = min(64, next_pow2(block_size)) = {})",
                        p.block_size, who, pl.tile));
    }
  }
  if (k_.aiter_fa_extend) return supports_extend(c);
  if (k_.triton_decode_2d && !custom_decode(c)) {
    // kernel_paged_attention_2d runs one program per sequence and returns only for query lengths above 1.
    const std::vector<std::int32_t> qsl = load_ints(c.tensor("query_start_loc"));
    for (std::size_t s = 0; s + 1 < qsl.size(); ++s)
      if (qsl[s + 1] == qsl[s])
        return Support::no(fmt::format(
            "sequence {} has query length 0: ROCM_ATTN's Triton kernel_paged_attention_2d skips only query "
            "lengths above 1, so its program for that sequence writes output row {} (another sequence's, or "
            "past the last: a race or an overrun the twin does not model)",
            s, qsl[s]));
  }
  if (k_.prefix_prefill) return supports_prefix_prefill(c);
  if (k_.max_query_len > 0) {
    const std::vector<std::int32_t> qsl = load_ints(c.tensor("query_start_loc"));
    for (std::size_t s = 0; s + 1 < qsl.size(); ++s)
      if (qsl[s + 1] - qsl[s] > k_.max_query_len)
        return Support::no(
            k_.long_query_unmodelled.empty()
                ? fmt::format("query length {}: {} is a decode kernel (query length <= {})",
                              qsl[s + 1] - qsl[s], who, k_.max_query_len)
                : fmt::format("query length {}: {}", qsl[s + 1] - qsl[s], k_.long_query_unmodelled));
  }
  return Support::yes();
}

// ROCM_ATTN's prefill/extend rows (chunked_prefill_paged_decode -> context_attention_fwd): what the Triton
// prefix prefill reads and which sequences it handles as the twin models them.
Support AttentionTwin::supports_prefix_prefill(const Case& c) const {
  const std::vector<std::int32_t> qsl = load_ints(c.tensor("query_start_loc"));
  const std::vector<std::int32_t> lens = load_ints(c.tensor("seq_lens"));
  for (std::size_t s = 0; s < lens.size(); ++s) {
    const std::int64_t ql = qsl[s + 1] - qsl[s];
    if (ql <= 1) continue;
    if (!c.has("k_new"))
      return Support::no(
          "ROCM_ATTN's prefill/extend rows run the Triton context_attention_fwd, which reads the new tokens' "
          "K/V from the layer's inputs (k_new, v_new); the case does not carry them");
    if (!c.get<AttentionParams>().causal)
      return Support::no(
          "non-causal attention: ROCM_ATTN is a decoder backend (RocmAttentionImpl raises for encoder "
          "self-attention) and context_attention_fwd masks the new tokens causally");
    if (ql > lens[s])
      return Support::no(
          fmt::format("query length {} > seq_len {}: vLLM schedules no more new tokens than the "
                      "sequence holds",
                      ql, lens[s]));
  }
  return Support::yes();
}

// ROCM_AITER_FA's prefill/extend path (rocm_aiter_fa.py forward / extend_forward): what it reads and which
// batches it handles as the twin models them.
Support AttentionTwin::supports_extend(const Case& c) const {
  const auto& p = c.get<AttentionParams>();
  const std::vector<std::int32_t> qsl = load_ints(c.tensor("query_start_loc"));
  const std::vector<std::int32_t> lens = load_ints(c.tensor("seq_lens"));
  for (std::size_t s = 0; s < lens.size(); ++s) {
    const std::int64_t ql = qsl[s + 1] - qsl[s], ctx = lens[s] - ql;
    if (ql <= 1) continue;
    if (!c.has("k_new"))
      return Support::no(
          "ROCM_AITER_FA's prefill/extend path reads the new tokens' K/V from the layer's inputs "
          "(k_new, v_new), which the case does not carry");
    if (!p.causal)
      return Support::no(
          "non-causal attention: ROCM_AITER_FA is a decoder backend; its prefill/extend passes "
          "run flash_attn_varlen_func with causal=True");
    if (ctx < 0)
      return Support::no(
          fmt::format("query length {} > seq_len {}: vLLM schedules no more new tokens than the "
                      "sequence holds",
                      ql, lens[s]));
  }
  return Support::yes();
}

// ---- case resolution

// The index tensors a kernel trusts, checked before any address is formed from them: an out-of-range
// seq_len or query_start_loc (or, in slot_index, block-table entry) is an `error` verdict naming the tensor
// and index, never an out-of-bounds read. A correct kernel only reads what the contract lets it read, so
// these fire for malformed cases and for mutants that read where they must not.
void check_indices(const Batch& b) {
  const std::int64_t rows = b.table->size(0), per_row = b.table->size(1) * b.bs;
  if (static_cast<std::int64_t>(b.query_start.size()) != b.num_seqs + 1 || rows < b.num_seqs)
    throw BackendError(fmt::format("query_start_loc has {} entries and block_table {} rows for {} sequences",
                                   b.query_start.size(), rows, b.num_seqs));
  for (std::int64_t s = 0; s < b.num_seqs; ++s) {
    const std::int32_t len = b.seq_lens[static_cast<std::size_t>(s)];
    if (len < 0 || len > per_row)
      throw BackendError(
          fmt::format("seq_lens[{}] = {}: outside [0, {}] (block_table rows hold {} blocks of {})", s, len,
                      per_row, b.table->size(1), b.bs));
  }
  const std::int64_t tokens = std::min(b.q->size(0), b.o->size(0));
  for (std::int64_t s = 0; s <= b.num_seqs; ++s) {
    const std::int32_t at = b.query_start[static_cast<std::size_t>(s)];
    const std::int32_t prev = s == 0 ? 0 : b.query_start[static_cast<std::size_t>(s - 1)];
    if (at < prev || at > tokens)
      throw BackendError(fmt::format("query_start_loc[{}] = {}: outside [{}, {}] (q has {} tokens)", s, at,
                                     prev, tokens, tokens));
  }
}

// What the launcher sees of a case (no outputs, no index checks): enough for plan_launch.
Batch AttentionTwin::shape_of(const Case& c) const {
  Batch b{};
  b.p = &c.get<AttentionParams>();
  b.q = &c.tensor("q");
  b.k = &c.tensor("k_cache");
  b.v = &c.tensor("v_cache");
  b.table = &c.tensor("block_table");
  b.seq_lens = load_ints(c.tensor("seq_lens"));
  b.query_start = load_ints(c.tensor("query_start_loc"));
  b.act = c.tensor("o").dtype();
  b.num_seqs = static_cast<std::int64_t>(b.seq_lens.size());
  b.hq = b.p->num_q_heads;
  b.hkv = b.p->num_kv_heads;
  b.d = b.p->head_dim;
  b.bs = b.p->block_size;
  b.num_tokens = b.query_start.empty() ? 0 : b.query_start.back();
  const auto bounds = static_cast<std::int64_t>(b.query_start.size()) - 1;
  for (std::int64_t s = 0; s < b.num_seqs; ++s) {
    if (s < bounds)
      b.max_query_len = std::max<std::int64_t>(b.max_query_len, b.query_start[s + 1] - b.query_start[s]);
    b.max_seq_len = std::max<std::int64_t>(b.max_seq_len, b.seq_lens[static_cast<std::size_t>(s)]);
  }
  b.context_chunk = extend_chunk_size(b.query_start, b.seq_lens).chunk;
  return b;
}

Batch AttentionTwin::resolve(Case& c) const {
  Batch b = shape_of(c);
  b.o = &c.tensor("o");
  b.lse = &c.tensor("lse");
  if (c.has("k_new")) b.k_new = &c.tensor("k_new"), b.v_new = &c.tensor("v_new");
  check_indices(b);
  if (b.p->has_sinks && bug_ != AttnBug::kSinkDropped) {
    const Tensor& sinks = c.tensor("sinks");
    const float fold = k_.exp == ExpImpl::kExp2Folded ? kLog2e : 1.0f;
    for (std::int64_t h = 0; h < b.hq; ++h)
      b.sinks.push_back(load(*sinks.storage(), sinks.index({h})) * fold);
  }
  return b;
}

// The CUDA-graph capture size closest to x (the first of equally close ones, in list order).
std::int64_t snap_to_capture_size(std::int64_t x, const std::vector<std::int64_t>& sizes) {
  std::int64_t best = x;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    if (i == 0 || std::abs(sizes[i] - x) < std::abs(best - x)) best = sizes[i];
  return best;
}

std::int64_t cdiv(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;  // C truncation, as Triton's integer division
}

std::int64_t next_pow2(std::int64_t x) {
  return static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(std::max<std::int64_t>(x, 1))));
}

// The launcher's choices of a unified kernel: 2D or 3D, tile, segments, BLOCK_M.
void AttentionTwin::plan_launch(const Batch& b, Plan& pl) const {
  const std::int64_t ratio = b.hq / b.hkv;
  pl.block_m = ratio <= 16 ? 16 : next_pow2(ratio);
  if (k_.launch == UnifiedLaunch::kVllm) {
    // TRITON_ATTN: MIN_LAUNCH_GRID_SIZE_2D (128) / Hkv, snapped to a capture size when decode CUDA graphs
    // are on (the default).
    const std::int64_t threshold = snap_to_capture_size(128 / b.hkv, k_.capture_sizes);
    pl.split = k_.split_segments > 0 && b.max_query_len <= 1 && b.num_seqs <= threshold;
    pl.tile = pl.split ? k_.tile_decode : k_.tile_prefill;
    if (k_.window_tile_window > 0 && b.p->window == k_.window_tile_window &&
        contains(k_.window_tile_head_dims, b.d))
      pl.tile = k_.window_tile;
    pl.segments = pl.split ? k_.split_segments : 1;
    return;
  }
  // aiter unified_attention (CDNA): target 4 programs per CU; the 3D kernel runs `occ` times more per CU.
  const bool all_decode = b.max_query_len == 1;
  const std::int64_t target = 4 * k_.device_cus;
  const std::int64_t q_blocks = all_decode ? b.num_seqs : b.num_tokens / (pl.block_m / ratio) + b.num_seqs;
  const std::int64_t grid_2d = q_blocks * b.hkv;
  const std::int64_t decode_tile = std::min<std::int64_t>(64, next_pow2(b.bs));
  // Head sizes from 512: use_2d_kernel takes the 2D path for every batch with a prefill, and the 3D path
  // runs 4 warps (occupancy 2 * 4 / 4 = 2) with at least 16 segments.
  const bool wide = b.d >= 512;
  pl.split = !(b.p->window > 0 || b.max_seq_len <= 512 || grid_2d > target || (wide && !all_decode));
  if (!pl.split) {
    pl.tile = all_decode ? decode_tile : b.d >= 512 ? 16 : b.d >= 256 ? 32 : 64;
    if (!all_decode && b.d < 256 && b.max_query_len >= 256) pl.block_m = 128;
    return;
  }
  pl.tile = decode_tile;
  const std::int64_t occ = wide ? 2 : 4;
  const std::int64_t max_segments = std::min<std::int64_t>(128, cdiv(b.max_seq_len, pl.tile));
  const std::int64_t min_segments = std::min<std::int64_t>(wide ? 16 : 8, max_segments);
  std::int64_t n = std::min(cdiv(occ * target, grid_2d), max_segments);
  pl.segments = next_pow2(std::max(n, min_segments));
}

Plan AttentionTwin::plan(const Batch& b) const {
  const bool folded = k_.exp == ExpImpl::kExp2Folded;
  const bool after = k_.dequant == KvDequant::kScaleAfter;
  Plan pl{};
  if (k_.schedule == AttnSchedule::kTiled) plan_launch(b, pl);
  if (k_.schedule == AttnSchedule::kLl4mi) {
    // ll4mi: scale2 = scale * k_scale formed in the kernel in fp32, applied to the fp32 dot product.
    pl.qk_mul = static_cast<float>(b.p->scale) * static_cast<float>(b.p->k_scale);
  } else if (k_.scale_folded_in_fp32) {
    // aiter: qk_scale = scale * RCP_LN2, then * k_descale in fp32. The 2D kernel declares `scale` a
    // tl.constexpr, so scale * RCP_LN2 is folded in double and rounded to fp32 once; the 3D kernel takes a
    // runtime fp32 scale and multiplies in fp32 (two roundings).
    const float scale_log2e =
        pl.split ? static_cast<float>(b.p->scale) * kLog2e : static_cast<float>(b.p->scale * kLog2eDouble);
    pl.qk_mul = scale_log2e * (after ? static_cast<float>(b.p->k_scale) : 1.0f);
  } else {
    // Host-side folding in double, one cast to fp32, as the launchers pass their scalars.
    pl.qk_mul = static_cast<float>(b.p->scale * (after ? b.p->k_scale : 1.0) * (folded ? kLog2eDouble : 1.0));
  }
  const double cap_fold = folded && !k_.softcap_from_exp ? kLog2eDouble : 1.0;
  // softcap_dropped without the extend path: the backend gives this kernel no softcap at all.
  const bool dropped = k_.softcap_dropped && !k_.aiter_fa_extend;
  pl.softcap =
      bug_ == AttnBug::kSoftcapMissing || dropped ? 0.0f : static_cast<float>(b.p->softcap * cap_fold);
  pl.v_mul = static_cast<float>(after ? b.p->v_scale : 1.0);
  if (k_.fp8_mfma && is_fp8(b.k->dtype())) pl.mfma_fp8 = b.k->dtype();
  return pl;
}

// ---- KV gather

std::int64_t AttentionTwin::slot_index(const Batch& b, const Tensor& cache, std::int64_t s, std::int64_t t,
                                       std::int64_t g) const {
  const Tensor& tb = *b.table;
  const std::int64_t j = t / b.bs;
  const std::int64_t row = bug_ == AttnBug::kTableStrideIgnored ? tb.size(1) : tb.strides()[0];
  std::int64_t page = load_i32(*tb.storage(), tb.offset() + s * row + j * tb.strides()[1]);
  if (page < 0 || page >= cache.size(0))
    throw BackendError(
        fmt::format("block_table[{}, {}] = {}: outside the cache's {} blocks", s, j, page, cache.size(0)));
  std::int64_t slot = t % b.bs;
  if (bug_ == AttnBug::kPageConversion && b.bs >= 64) {
    // Pages of bs tokens taken for kernel blocks of 16: the page id addresses a 16-token block directly.
    const std::int64_t flat = page * kKernelBlock + t % kKernelBlock;
    page = flat / b.bs;
    slot = flat % b.bs;
  }
  const Shape& st = cache.strides();
  return cache.offset() + page * st[0] + slot * st[1] + g * st[2];
}

DType misread_fp8(DType t) {
  if (t == DType::kF8E4M3FN) return DType::kF8E4M3FNUZ;
  if (t == DType::kF8E4M3FNUZ) return DType::kF8E4M3FN;
  return t;
}

void AttentionTwin::gather_one(const Batch& b, const Tensor& cache, double scale, std::int64_t s,
                               std::int64_t g, std::vector<float>& out, std::int64_t rows) const {
  DType as = bug_ == AttnBug::kFp8FnFnuzSwapped ? misread_fp8(cache.dtype()) : cache.dtype();
  if (k_.e5m2_read_as_e4m3 && as == DType::kF8E5M2) as = k_.fp8_view;
  out.resize(static_cast<std::size_t>(rows * b.d));
  const bool rounded = k_.dequant == KvDequant::kRoundedToAct;
  const float sc = static_cast<float>(scale);
  for (std::int64_t t = 0; t < rows; ++t) {
    float* dst = out.data() + t * b.d;
    load_run_as(*cache.storage(), as, slot_index(b, cache, s, t, g), cache.strides()[3], b.d, dst);
    if (rounded)
      for (std::int64_t i = 0; i < b.d; ++i) dst[i] = round_act(b.act, dst[i] * sc);
  }
}

void AttentionTwin::gather(const Batch& b, const Plan& pl, std::int64_t s, std::int64_t g,
                           Panel& panel) const {
  panel.valid = b.seq_lens[static_cast<std::size_t>(s)];
  // Kernels that load whole pages (aiter unified with tile == block size, the ll4mi kernels, the
  // masked-P-times-V mutant) also read
  // the slots past seq_len in the last page, where a case keeps its poison.
  const bool whole_pages =
      bug_ == AttnBug::kMaskedPTimesV ||
      (k_.page_tail_unmasked && (k_.schedule == AttnSchedule::kLl4mi || pl.tile == b.bs));
  panel.rows = whole_pages ? cdiv(panel.valid, b.bs) * b.bs : panel.valid;
  gather_one(b, *b.k, b.p->k_scale, s, g, panel.k, panel.rows);
  gather_one(b, *b.v, b.p->v_scale, s, g, panel.v, panel.rows);
  panel.v_nonfinite.assign(static_cast<std::size_t>(panel.rows), 0);
  for (std::int64_t t = 0; t < panel.rows; ++t) {
    const float* vt = panel.v.data() + t * b.d;
    panel.v_nonfinite[static_cast<std::size_t>(t)] =
        std::any_of(vt, vt + b.d, [](float x) { return !std::isfinite(x); });
  }
}

// K and V rows as a kernel's dots see them: x = to(fp32(x) * scale) in place, the scales applied as the
// reference applies them (act caches carry scale 1). `to` is act for the Triton kernels' `.to(q.dtype)`, or
// the cache's fp8 for cp_mha_gather_cache's re-quantising cast.
void dequantise_to(DType to, const Batch& b, std::vector<float>& keys, std::vector<float>& values) {
  const bool act = to == b.act;  // round_act: the same RNE as round_to, on the fast path
  for (auto [x, scale] : {std::pair{&keys, b.p->k_scale}, std::pair{&values, b.p->v_scale}})
    for (float& e : *x) {
      const float v = e * static_cast<float>(scale);
      e = act ? round_act(to, v) : static_cast<float>(round_to(to, v));
    }
}

// Rows [q0, q0 + n) of a new tokens' input (k_new or v_new, [T, Hkv, D]) for KV head g, into dst ([n][d]).
void load_new_rows(const Tensor& input, std::int64_t q0, std::int64_t n, std::int64_t g, std::int64_t d,
                   float* dst) {
  const Shape& st = input.strides();
  for (std::int64_t j = 0; j < n; ++j)
    load_run(*input.storage(), input.offset() + (q0 + j) * st[0] + g * st[1], st[2], d, dst + j * d);
}

// ---- one query row

Row AttentionTwin::make_row(const Batch& b, const float* q, const Panel& panel, std::int64_t s,
                            std::int64_t j) const {
  const std::int64_t len = panel.valid;
  const std::int64_t qlen = b.query_start[s + 1] - b.query_start[s];
  const std::int64_t pos = len - qlen + j;  // causal alignment at the end
  std::int64_t hi = b.p->causal ? pos + (bug_ == AttnBug::kCausalOffByOne ? 1 : 0) : len - 1;
  std::int64_t lo = b.p->window > 0 ? pos - b.p->window + (bug_ == AttnBug::kWindowOffByOne ? 0 : 1) : 0;
  return {q, &panel, std::max<std::int64_t>(lo, 0), std::min(hi, len - 1), j, qlen};
}

float AttentionTwin::logit(const Batch& b, const Plan& pl, const Row& r, std::int64_t t) const {
  const float* kt = r.panel->k.data() + t * b.d;
  float dot = 0.0f;
  for (std::int64_t i = 0; i < b.d; ++i) dot += r.q[i] * kt[i];
  const float s = bug_ == AttnBug::kLogitsRounded ? round_act(b.act, pl.qk_mul * dot) : pl.qk_mul * dot;
  if (pl.softcap <= 0.0f) return s;
  if (!k_.softcap_from_exp)
    return pl.softcap * std::tanh(k_.softcap_times_rcp ? s * (1.0f / pl.softcap) : s / pl.softcap);
  // Triton kernels form tanh from two exponentials of s / c (aiter: exp2 of the log2-domain logit over the
  // natural cap, the same e^(s/c)); each overflows past |s / c| ~ 88.7 and inf / inf is NaN.
  const float d = s / pl.softcap;
  const float p1 = exp_of(k_.exp, d), p2 = exp_of(k_.exp, -d);
  const float capped = pl.softcap * (p1 - p2) / (p1 + p2);
  return k_.exp == ExpImpl::kExp2Folded ? capped * kLog2e : capped;
}

// One tile's scores (keys outside [first, last] masked to -inf) and the new running max (maxnum: a NaN logit
// does not win; a -inf max becomes 0), the accumulator rescaled to it. Returns {new max, alpha}; st.m and L
// are the caller's to update.
std::pair<float, float> AttentionTwin::tile_max(const Batch& b, const Plan& pl, const Row& r, std::int64_t t0,
                                                std::int64_t t1, std::int64_t first, std::int64_t last,
                                                State& st, std::vector<float>& scores) const {
  float m = st.m;
  for (std::int64_t t = t0; t < t1; ++t) {
    const float s = t >= first && t <= last ? logit(b, pl, r, t) : kNegInf;
    scores[static_cast<std::size_t>(t - t0)] = s;
    m = std::fmax(m, s);
  }
  if (m == kNegInf || bug_ == AttnBug::kNoMaxSubtraction) m = 0.0f;
  const float alpha = exp_of(k_.exp, st.m - m);
  for (float& a : st.acc) a *= alpha;
  return {m, alpha};
}

State fresh_state(std::int64_t d, float m) {
  State st;
  st.m = m;
  st.acc.assign(static_cast<std::size_t>(d), 0.0f);
  return st;
}

TileBounds AttentionTwin::block_tiles(const Batch& b, const Plan& pl, const Row& r) const {
  const std::int64_t ratio = b.hq / b.hkv, len = r.panel->valid, tile = pl.tile, w = b.p->window;
  const std::int64_t block_q = std::max<std::int64_t>(pl.block_m / ratio, 1);
  const std::int64_t span = (pl.block_m - 1) / ratio;  // query positions a block spans, less one
  const std::int64_t qpos_lo = r.j / block_q * block_q, ctx = len - r.qlen;
  TileBounds tb;
  tb.load_end = std::min(ctx + qpos_lo + span + 1, len);  // max_seq_prefix_len
  tb.tile_end = cdiv(tb.load_end, tile);
  if (w > 0) {
    const std::int64_t qpos_hi = std::min(qpos_lo + span, r.qlen - 1);
    tb.tile_start = std::max<std::int64_t>(0, (ctx + qpos_lo - w + 1) / tile);
    tb.tile_end = std::min((ctx + qpos_hi) / tile + 1, tb.tile_end);
    if (k_.window_v_zeroed) tb.window_v_from = ctx + qpos_lo - w + 1;
  }
  // A tile of exactly one page is loaded without a mask (aiter); the mutant reads to the page end.
  if (k_.page_tail_unmasked && tile == b.bs) tb.load_end = std::max(tb.load_end, tb.tile_end * tile);
  if (bug_ == AttnBug::kMaskedPTimesV) tb.load_end = std::max(tb.load_end, cdiv(len, b.bs) * b.bs);
  return tb;
}

// One softmax step of a unified kernel for one row: masked logits are -inf, the tile max joins the running
// max (maxnum: a NaN logit does not win), a -inf max becomes 0, so a row with no visible key yet gets M = 0
// and L = 0 from a tile that is empty for it. P.V runs over the whole loaded tile: a masked P is 0, which
// leaves the sum alone unless V is NaN or infinite there.
void AttentionTwin::unified_tile(const Batch& b, const Plan& pl, const Row& r, const TileBounds& tb,
                                 std::int64_t t0, State& st, std::vector<float>& scores) const {
  const std::int64_t tile = pl.tile;
  if (!k_.empty_tile_step && (r.hi < t0 || r.lo >= t0 + tile))
    return;  // repaired: a tile empty for the
             // row leaves its state alone
  scores.resize(static_cast<std::size_t>(tile));
  const auto [m, alpha] = tile_max(b, pl, r, t0, t0 + tile, r.lo, r.hi, st, scores);
  float tile_sum = 0.0f;
  const std::int64_t end = std::min(t0 + tile, tb.load_end);
  for (std::int64_t t = t0; t < t0 + tile; ++t) {
    const float p = exp_of(k_.exp, scores[static_cast<std::size_t>(t - t0)] - m);
    tile_sum += p;
    if (t >= end || t < tb.window_v_from) continue;  // V loaded as 0, or zeroed outside the window
    const float pv = k_.p_rounded ? round_act(b.act, p) : p;
    if (pv == 0.0f && !r.panel->v_nonfinite[static_cast<std::size_t>(t)]) continue;
    // Repaired, a key the row must not see stays out of P.V; a visible key whose P underflowed is still
    // multiplied (0 * inf = NaN is fp32 softmax, not this defect). The masked-P-times-V mutant always
    // multiplies (its bug), even with the twin's defect repaired.
    const bool masked = t < r.lo || t > r.hi;
    if (masked && !k_.masked_p_times_v && bug_ != AttnBug::kMaskedPTimesV) continue;
    const float* vt = r.panel->v.data() + t * b.d;
    for (std::int64_t i = 0; i < b.d; ++i) st.acc[static_cast<std::size_t>(i)] += pv * vt[i];
  }
  st.l = k_.l_fma ? std::fma(st.l, alpha, tile_sum) : st.l * alpha + tile_sum;
  st.m = m;
}

// Unified kernels: the 2D path (one state over the block's tiles) or the 3D path (segments of
// cdiv(L, segments * tile) tiles, fp32 partial states merged by max-rescaled sums; the sink is the initial
// max of segment 0; a merged sum of 0 gives 0, not 0 / 0).
float AttentionTwin::tiled_row(const Batch& b, const Plan& pl, const Row& r, std::int64_t h,
                               float* out) const {
  const float sink = b.sinks.empty() ? kNegInf : b.sinks[static_cast<std::size_t>(h)];
  const std::int64_t len = r.panel->valid;
  const TileBounds tb = block_tiles(b, pl, r);
  const std::int64_t per_seg = pl.split ? cdiv(len, pl.segments * pl.tile) : tb.tile_end;
  std::vector<State> segs;
  std::vector<float> scores;
  for (std::int64_t sg = 0; sg < pl.segments; ++sg) {
    if (pl.split && sg * per_seg * pl.tile >= len) break;  // the segment returns early; reduce masks it
    segs.push_back(fresh_state(b.d, sg == 0 ? sink : kNegInf));
    const std::int64_t lo = std::max(sg * per_seg, tb.tile_start);
    const std::int64_t hi = pl.split ? std::min((sg + 1) * per_seg, tb.tile_end) : tb.tile_end;
    for (std::int64_t j = lo; j < hi; ++j) unified_tile(b, pl, r, tb, j * pl.tile, segs.back(), scores);
  }
  if (segs.empty()) segs.push_back(fresh_state(b.d, sink));
  if (!pl.split) {
    const State& st = segs.front();
    for (std::int64_t i = 0; i < b.d; ++i)
      out[i] = k_.launch == UnifiedLaunch::kAiter ? st.acc[static_cast<std::size_t>(i)] * (pl.v_mul / st.l)
                                                  : st.acc[static_cast<std::size_t>(i)] / st.l;
    return natural_lse(k_.exp, st.m, st.l);
  }
  float m = kNegInf;
  for (const State& s : segs) m = std::fmax(m, s.m);
  float l = 0.0f;
  std::fill(out, out + b.d, 0.0f);
  for (const State& s : segs) {
    // reduce_segments weighs each segment by exp(m_i - m) unguarded: a row whose segments all hold M = -inf
    // gets exp(-inf - -inf) = NaN. With the empty-tile step every segment that ran a tile hands a row without
    // keys M = 0, L = 0 (the reduce's expsum == 0 guard then writes 0), so only a q-block that ran no tile
    // reaches it. Repaired, a row that sees no key is empty on both paths: a segment that saw none weighs 0.
    const bool saw_none = !k_.empty_tile_step && s.m == kNegInf;
    const float w = bug_ == AttnBug::kUnscaledSplitMerge ? 1.0f : saw_none ? 0.0f : exp_of(k_.exp, s.m - m);
    l += s.l * w;
    for (std::int64_t i = 0; i < b.d; ++i) out[i] += s.acc[static_cast<std::size_t>(i)] * pl.v_mul * w;
  }
  for (std::int64_t i = 0; i < b.d; ++i) out[i] = l == 0.0f ? 0.0f : out[i] / l;
  return natural_lse(k_.exp, m, l);
}

// vLLM's addx4: bf16 partials added in fp32 and truncated to bf16 (the upper 16 bits kept); fp16 partials
// added as halves, rounded to nearest.
float add_act(DType act, float x, float y) {
  const float s = x + y;
  return act == DType::kBF16 ? round_act_toward_zero(act, s) : round_act(act, s);
}

// The mfma16 kernels' exp sum over one 64-token warp (pa_kernels.cuh:512-529 at aiter@e4048607, the same in
// vLLM's paged_attention_ll4mi_QKV_mfma16_kernel): the QK MFMA leaves token 16 * d + 4 * r + i (d, i in 0..3)
// in lane row r, each lane sums its 16 tokens in (d, i) order, then __shfl_xor over 32 and 16 lanes adds the
// rows as (s0 + s2) + (s1 + s3). Tokens past the loaded count add nothing (the kernel adds 0.0f).
float mfma16_warp_sum(const float* x, std::int64_t n) {
  constexpr std::int64_t kRows = 4, kTokensPerRowStep = 4, kSteps = 4;
  std::array<float, kRows> row{};
  for (std::int64_t r = 0; r < kRows; ++r)
    for (std::int64_t d = 0; d < kSteps; ++d)
      for (std::int64_t i = 0; i < kTokensPerRowStep; ++i) {
        const std::int64_t t = d * kRows * kTokensPerRowStep + r * kTokensPerRowStep + i;
        if (t < n) row[static_cast<std::size_t>(r)] += x[t];
      }
  return (row[0] + row[2]) + (row[1] + row[3]);
}

// vLLM's mfma4 kernel's exp sum over one 64-token warp (csrc/rocm/attention.cu:1106-1134 at vllm 4388f06):
// after the 4x4 transpose lane 16 r + 4 k + h holds tokens 16 r + 4 k + i (i in 0..3) of head h and sums them
// in order; `v_add_f32_dpp row_ror:4` then `row_ror:8` add, within each row of 16 lanes, the value of the
// lane 4 (then 8) below, rotating (DPP rotate right: lane i reads lane (i - N) mod 16), so group 0 of row r
// holds R_r = (a_1 + a_2) + (a_3 + a_0); `ds_bpermute` gives group k of every row R_k, and the same two steps
// leave (R_1 + R_2) + (R_3 + R_0) in lanes 0..3, which write the warp's sum. Tokens past the loaded count add
// 0.
float mfma4_warp_sum(const float* x, std::int64_t n) {
  constexpr std::int64_t kRows = 4, kGroups = 4, kTokens = 4;
  const auto rotated = [](const std::array<float, 4>& a) { return (a[1] + a[2]) + (a[3] + a[0]); };
  std::array<float, kRows> row{};
  for (std::int64_t r = 0; r < kRows; ++r) {
    std::array<float, kGroups> group{};
    for (std::int64_t k = 0; k < kGroups; ++k)
      for (std::int64_t i = 0; i < kTokens; ++i) {
        const std::int64_t t = 16 * r + 4 * k + i;
        group[static_cast<std::size_t>(k)] += t < n ? x[t] : 0.0f;
      }
    row[static_cast<std::size_t>(r)] = rotated(group);
  }
  return rotated(row);
}

// One partition of an ll4mi kernel (paged_attention_ll4mi_QKV_mfma16 / _mfma4): per warp of `warp_tokens`
// keys, the max logit m_w and the sum of e^(s - m_w) over the keys below seq_len (a masked key carries
// -FLT_MAX and still counts: e^0 = 1 in a warp with no visible key); the partition max M and sum
// S = sum_w S_w e^(m_w - M); P = act(e^(s - m_w) * (1 / (S + 1e-6) * e^(m_w - M))). P.V runs over every key
// of the partition the kernel loads (whole pages: P = 0 past seq_len): in fp32 over the partition and
// rounded once (mfma16), or per warp, each warp's result rounded and the warps summed in act (mfma4).
Ll4miPartition AttentionTwin::ll4mi_partition(const Batch& b, const Plan& pl, const Row& r,
                                              std::int64_t begin, std::vector<float>& p) const {
  const std::int64_t len = r.panel->valid, end = std::min(begin + k_.partition, len);
  // Whole pages gathered (page_tail_unmasked): the kernel loads V for tokens past seq_len too, each from the
  // last context block at slot t % block_size, and multiplies it with P = 0.
  const bool loads_past = r.panel->rows > len;
  const std::int64_t last_page = (cdiv(len, b.bs) - 1) * b.bs;
  const std::int64_t warps = k_.partition / k_.warp_tokens;
  const bool mfma4 = b.hq / b.hkv <= k_.mfma4_max_gqa;
  std::vector<float> warp_max(static_cast<std::size_t>(warps), kMaskedLogit),
      warp_sum(static_cast<std::size_t>(warps), 0.0f), warp_scale(static_cast<std::size_t>(warps));
  p.assign(static_cast<std::size_t>(k_.partition), 0.0f);
  const auto at = [&](std::int64_t t) -> float& { return p[static_cast<std::size_t>(t - begin)]; };
  Ll4miPartition part;
  for (std::int64_t w = 0; w < warps; ++w) {
    const std::int64_t t0 = begin + w * k_.warp_tokens, t1 = std::min(t0 + k_.warp_tokens, end);
    float& m = warp_max[static_cast<std::size_t>(w)];
    for (std::int64_t t = t0; t < t1; ++t) {
      at(t) = t >= r.lo && t <= r.hi ? logit(b, pl, r, t) : kMaskedLogit;
      m = std::fmax(m, at(t));
    }
    if (bug_ == AttnBug::kNoMaxSubtraction) m = 0.0f;
    for (std::int64_t t = t0; t < t1; ++t) at(t) = exp_of(k_.exp, at(t) - m);
    warp_sum[static_cast<std::size_t>(w)] =
        mfma4 ? mfma4_warp_sum(&at(t0), t1 - t0) : mfma16_warp_sum(&at(t0), t1 - t0);
    part.max = std::fmax(part.max, m);
  }
  for (std::int64_t w = 0; w < warps; ++w) {
    warp_scale[static_cast<std::size_t>(w)] =
        exp_of(k_.exp, warp_max[static_cast<std::size_t>(w)] - part.max);
    // `sum += S_w * e^(m_w - M)`: one expression, contracted to an FMA by hipcc (fp-contract is on for HIP).
    part.sum =
        std::fma(warp_sum[static_cast<std::size_t>(w)], warp_scale[static_cast<std::size_t>(w)], part.sum);
  }
  const float inv = 1.0f / (part.sum + kSumBias);
  // P to act by from_floatx4, or (fp8 MFMAs) to the cache's fp8 by v_cvt_pk_fp8_f32 (pa_kernels.cuh:596-651).
  for (std::int64_t t = begin; t < end; ++t) {
    const float x = at(t) * (inv * warp_scale[static_cast<std::size_t>((t - begin) / k_.warp_tokens)]);
    at(t) = pl.mfma_fp8 == DType::kF32 ? round_act(b.act, x) : static_cast<float>(round_to(pl.mfma_fp8, x));
  }
  const bool per_warp = k_.warp_partials_in_act && mfma4;
  std::vector<float> acc(static_cast<std::size_t>(b.d), 0.0f);
  part.out.assign(static_cast<std::size_t>(b.d), 0.0f);
  for (std::int64_t w = 0; w < warps; ++w) {
    const std::int64_t t0 = begin + w * k_.warp_tokens;
    // Tokens whose V the kernel loads and multiplies: mfma16 (vLLM, aiter pa_v1) runs the SV MFMAs of all
    // four warps' tokens to the partition's end; mfma4 skips a warp that starts at or past seq_len (its
    // output is 0) and runs the others to the warp's end. Past seq_len the V block index is clamped to the
    // last context block, so token t reads that block's slot t % block_size: its tail, and from the next
    // block boundary on its valid slots again.
    const std::int64_t t_end = !loads_past          ? std::min(t0 + k_.warp_tokens, end)
                               : mfma4 && t0 >= len ? t0
                                                    : t0 + k_.warp_tokens;
    for (std::int64_t t = t0; t < t_end; ++t) {
      const float pt = at(t);  // 0 past seq_len
      const std::int64_t row = t < len ? t : last_page + t % b.bs;
      if (pt == 0.0f && !r.panel->v_nonfinite[static_cast<std::size_t>(row)]) continue;
      // Repaired, a valid key outside the row's window stays out of P.V.
      if (t < len && (t < r.lo || t > r.hi) && !k_.masked_p_times_v) continue;
      const float* vt = r.panel->v.data() + row * b.d;
      for (std::int64_t i = 0; i < b.d; ++i) acc[static_cast<std::size_t>(i)] += pt * vt[i];
    }
    if (!per_warp) continue;
    for (std::size_t i = 0; i < acc.size(); ++i) {
      part.out[i] = add_act(b.act, part.out[i], round_act(b.act, acc[i] * pl.v_mul));
      acc[i] = 0.0f;
    }
  }
  if (!per_warp)
    for (std::size_t i = 0; i < acc.size(); ++i) part.out[i] = round_act(b.act, acc[i] * pl.v_mul);
  return part;
}

// ll4mi: the partitions, then paged_attention_ll4mi_reduce_kernel, which runs for a single partition too:
// weights w_j = S_j * expf(M_j - M) (an accurate expf there), G = their butterfly sum, o = (sum_j out_j w_j,
// contracted to FMAs) * (1 / (G + 1e-6)). The kernels write no LSE: the twin reports M + log(G). An empty
// sequence (no partition; the reduce would read partition -1) is written as o = 0, lse = -inf.
float AttentionTwin::ll4mi_row(const Batch& b, const Plan& pl, const Row& r, float* out) const {
  const std::int64_t len = r.panel->valid;
  std::fill(out, out + b.d, 0.0f);
  if (len == 0) return kNegInf;
  std::vector<Ll4miPartition> parts;
  std::vector<float> p;
  for (std::int64_t begin = 0; begin < len; begin += k_.partition)
    parts.push_back(ll4mi_partition(b, pl, r, begin, p));
  float m = parts.front().max;
  for (const Ll4miPartition& q : parts) m = std::fmax(m, q.max);
  // G as the reduce's first warp forms it: lane l holds partitions l, l + 64, ... (NPAR_LOOPS passes, summed
  // in order; slots past the last partition weigh 0), then a __shfl_xor butterfly over masks 32, 16, ..., 1,
  // after which every lane holds the same tree sum.
  constexpr std::size_t kLanes = 64;
  std::vector<float> w;
  std::array<float, kLanes> lane{};
  for (std::size_t j = 0; j < parts.size(); ++j) {
    w.push_back(parts[j].sum * std::exp(parts[j].max - m));
    lane[j % kLanes] = j < kLanes ? w.back() : lane[j % kLanes] + w.back();
  }
  for (std::size_t mask = kLanes / 2; mask >= 1; mask /= 2) {
    std::array<float, kLanes> next{};
    for (std::size_t l = 0; l < kLanes; ++l) next[l] = lane[l] + lane[l ^ mask];
    lane = next;
  }
  const float g = lane[0];
  for (std::size_t j = 0; j < parts.size(); ++j)
    for (std::int64_t i = 0; i < b.d; ++i)
      out[i] = std::fma(parts[j].out[static_cast<std::size_t>(i)], w[j], out[i]);
  if (k_.reduce_padded_slots) {
    // pa_kernels.cuh:1016-1095 at aiter@e4048607 (vLLM's reduce alike): JCHUNK 16, then 32, then MAX_NPAR 64
    // slots per pass; a slot past the last partition reads the last partition's output with weight 0.
    const std::size_t n = parts.size();
    const std::size_t slots = n <= 16 ? 16 : n <= 32 ? 32 : (n + 63) / 64 * 64;
    const std::vector<float>& last = parts.back().out;
    for (std::size_t j = n; j < slots; ++j)
      for (std::int64_t i = 0; i < b.d; ++i)
        out[i] = std::fma(last[static_cast<std::size_t>(i)], 0.0f, out[i]);
  }
  const float inv = 1.0f / (g + kSumBias);
  for (std::int64_t i = 0; i < b.d; ++i) out[i] *= inv;
  return m + std::log(g);
}

// ---- ROCM_AITER_FA prefill/extend

// Context rows [0, ctx) as cp_mha_gather_cache writes them to the act workspace (fp8: `(k.to(fp32) *
// k_scale).to(kv_dtype)`, a second quantisation of the dequantised value (defect context_requantised;
// repaired: rounded to act); otherwise the stored value, no scale), and the new tokens' rows from the inputs.
void AttentionTwin::extend_panels(const Batch& b, std::int64_t s, std::int64_t g, Panel& context,
                                  Panel& fresh) const {
  const std::int64_t q0 = b.query_start[s], ql = b.query_start[s + 1] - q0;
  context.valid = context.rows = b.seq_lens[static_cast<std::size_t>(s)] - ql;
  gather_one(b, *b.k, b.p->k_scale, s, g, context.k, context.rows);
  gather_one(b, *b.v, b.p->v_scale, s, g, context.v, context.rows);
  const DType kv = b.k->dtype();
  if (is_fp8(kv)) dequantise_to(k_.context_requantised ? kv : b.act, b, context.k, context.v);
  fresh.valid = fresh.rows = ql;
  if (bug_ == AttnBug::kExtendNewKvFromCache) {
    // The mutant: the new tokens' rows [ctx, seq_len) read back from their cache slots (what the cache write
    // stored: fp8 codes dequantised with the scale and rounded to act once; act caches as stored) instead of
    // the inputs. The same values as the inputs wherever the cache holds them exactly.
    std::vector<float> all;
    for (const auto& [cache, scale, out] :
         {std::tuple{b.k, b.p->k_scale, &fresh.k}, std::tuple{b.v, b.p->v_scale, &fresh.v}}) {
      gather_one(b, *cache, scale, s, g, all, context.rows + ql);
      out->assign(all.begin() + context.rows * b.d, all.end());
      if (is_fp8(kv))
        for (float& e : *out) e = static_cast<float>(round_to(b.act, e * static_cast<float>(scale)));
    }
    return;
  }
  for (const auto& [input, out] : {std::pair{b.k_new, &fresh.k}, std::pair{b.v_new, &fresh.v}}) {
    out->resize(static_cast<std::size_t>(ql * b.d));
    load_new_rows(*input, q0, ql, g, b.d, out->data());
  }
}

// One prefill/extend sequence: per row, the new tokens attended causally (flash_attn_varlen_func on the
// inputs), the context non-causally (on the gathered workspace), both o in act and merged by
// merge_attn_states (context as the prefix); a prefill (no context) is the first pass alone. The kernels
// write no LSE for the caller: the twin reports the merge's (or the pass's).
void AttentionTwin::extend_sequence(const Batch& b, std::int64_t s) const {
  const std::int64_t q0 = b.query_start[s], ql = b.query_start[s + 1] - q0;
  const std::int64_t ctx = b.seq_lens[static_cast<std::size_t>(s)] - ql, w = b.p->window;
  const float qk_log2 = static_cast<float>(b.p->scale) * kLog2e;
  // vLLM passes the passes no logits_soft_cap (defect softcap_dropped); repaired, they cap the logits.
  const float cap = k_.softcap_dropped ? 0.0f : static_cast<float>(b.p->softcap);
  const float sc = static_cast<float>(b.p->scale);
  // The context's chunks (extend_chunk_size). A sequence with a shorter context than the batch's longest gets
  // empty chunks after its own; merging one (o = 0, LSE -inf, or +inf, which the merge reads as -inf) leaves
  // the merged output and LSE as they were, so they are not run.
  const std::int64_t chunk = b.context_chunk;
  Panel context, fresh;
  std::vector<float> q(static_cast<std::size_t>(b.d)), out(q.size());
  const Shape &qs = b.q->strides(), &os = b.o->strides();
  for (std::int64_t g = 0; g < b.hkv; ++g) {
    extend_panels(b, s, g, context, fresh);
    for (std::int64_t h = g * (b.hq / b.hkv); h < (g + 1) * (b.hq / b.hkv); ++h) {
      for (std::int64_t j = 0; j < ql; ++j) {
        const std::int64_t tok = q0 + j;
        load_run(*b.q->storage(), b.q->offset() + tok * qs[0] + h * qs[1], qs[2], b.d, q.data());
        const std::int64_t lo =
            w > 0 ? std::max<std::int64_t>(0, j - w + 1) : 0;  // w > 0 only without context
        const FaPartial suffix = fa_varlen_row(b.act, q.data(), fresh.k.data(), fresh.v.data(), b.d, lo, j,
                                               qk_log2, k_.fa_tile, sc, cap);
        float lse = suffix.lse;
        if (ctx > 0) {
          // The context in chunks of `chunk` tokens, one non-causal pass each; the chunk outputs merged in
          // order (prefix: the chunks so far, suffix: the next), each merge stored in act with its LSE.
          FaPartial prefix = fa_varlen_row(b.act, q.data(), context.k.data(), context.v.data(), b.d, 0,
                                           std::min(chunk, ctx) - 1, qk_log2, k_.fa_tile, sc, cap);
          for (std::int64_t c0 = chunk; c0 < ctx; c0 += chunk) {
            const FaPartial next = fa_varlen_row(b.act, q.data(), context.k.data(), context.v.data(), b.d, c0,
                                                 std::min(c0 + chunk, ctx) - 1, qk_log2, k_.fa_tile, sc, cap);
            FaPartial merged;
            merged.o.resize(static_cast<std::size_t>(b.d));
            merged.lse = merge_attn_states_row(b.act, prefix, next, merged.o.data());
            prefix = std::move(merged);
          }
          lse = merge_attn_states_row(b.act, prefix, suffix, out.data());
        } else {
          out = suffix.o;
        }
        const std::int64_t base = b.o->offset() + tok * os[0] + h * os[1];
        for (std::int64_t i = 0; i < b.d; ++i)
          store(*b.o->storage(), base + i * os[2], out[static_cast<std::size_t>(i)]);
        store(*b.lse->storage(), b.lse->index({tok, h}), lse);
      }
    }
  }
}

// ---- ROCM_ATTN prefill/extend: vLLM's Triton context_attention_fwd (prefix_prefill.py _fwd_kernel)

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
PrefillRow start_row(std::int64_t d, const std::vector<float>& sinks, std::int64_t h) {
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
void prefill_step(DType act, std::int64_t d, const PrefillTile& tile, bool masked_p_times_v, bool nan_max,
                  PrefillRow& st) {
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

std::vector<char> nonfinite_rows(const std::vector<float>& x, std::int64_t rows, std::int64_t d) {
  std::vector<char> out(static_cast<std::size_t>(rows));
  for (std::int64_t t = 0; t < rows; ++t)
    out[static_cast<std::size_t>(t)] =
        std::any_of(x.begin() + t * d, x.begin() + (t + 1) * d, [](float e) { return !std::isfinite(e); });
  return out;
}

// One extend (query length > 1 after a context) of a windowed ROCM_AITER_FA layer: extend_for_sliding_window
// (rocm_aiter_fa.py at 002d0eb6). The builder's swa_seqlen = min(seq_len, query length + window) tokens
// ending at seq_len are gathered from the paged cache by cp_mha_gather_cache into an act workspace (fp8: the
// dequantised value cast back to the cache's fp8 and widened, defect context_requantised; act caches as
// stored), the new tokens included (defect swa_new_kv_from_cache; repaired, their rows from k_new / v_new);
// then one flash_attn_varlen_func pass, causal (bottom-right aligned) with window (w - 1, 0), no softcap
// (defect softcap_dropped), written as the output with no merge. aiter drops a left window >= max_seqlen_k,
// which changes nothing: every gathered key is then within the window.
void AttentionTwin::swa_extend_sequence(const Batch& b, std::int64_t s) const {
  const std::int64_t q0 = b.query_start[s], ql = b.query_start[s + 1] - q0;
  const std::int64_t len = b.seq_lens[static_cast<std::size_t>(s)], w = b.p->window;
  const std::int64_t gathered = std::min(len, ql + w), first = len - gathered;
  const float qk_log2 = static_cast<float>(b.p->scale) * kLog2e;
  const float cap = k_.softcap_dropped ? 0.0f : static_cast<float>(b.p->softcap);
  const float sc = static_cast<float>(b.p->scale);
  const DType kv = b.k->dtype();
  std::vector<float> keys, values, q(static_cast<std::size_t>(b.d));
  const Shape &qs = b.q->strides(), &os = b.o->strides();
  for (std::int64_t g = 0; g < b.hkv; ++g) {
    for (const auto& [cache, scale, out] :
         {std::tuple{b.k, b.p->k_scale, &keys}, std::tuple{b.v, b.p->v_scale, &values}}) {
      gather_one(b, *cache, scale, s, g, *out, len);
      out->erase(out->begin(), out->begin() + first * b.d);
    }
    if (is_fp8(kv)) dequantise_to(k_.context_requantised ? kv : b.act, b, keys, values);
    // The extend mutant's bug is reading the new tokens from the cache: it keeps doing so when the twin's
    // defect is repaired.
    if (!k_.swa_new_kv_from_cache && bug_ != AttnBug::kExtendNewKvFromCache)
      for (const auto& [input, out] : {std::pair{b.k_new, &keys}, std::pair{b.v_new, &values}})
        load_new_rows(*input, q0, ql, g, b.d, out->data() + (gathered - ql) * b.d);
    for (std::int64_t h = g * (b.hq / b.hkv); h < (g + 1) * (b.hq / b.hkv); ++h) {
      for (std::int64_t j = 0; j < ql; ++j) {
        const std::int64_t tok = q0 + j;
        load_run(*b.q->storage(), b.q->offset() + tok * qs[0] + h * qs[1], qs[2], b.d, q.data());
        const std::int64_t hi = gathered - ql + j;  // the row's own position in the gathered window
        const std::int64_t lo = std::max<std::int64_t>(0, hi - w + 1);
        const FaPartial r = fa_varlen_row(b.act, q.data(), keys.data(), values.data(), b.d, lo, hi, qk_log2,
                                          k_.fa_tile, sc, cap);
        const std::int64_t base = b.o->offset() + tok * os[0] + h * os[1];
        for (std::int64_t i = 0; i < b.d; ++i)
          store(*b.o->storage(), base + i * os[2], r.o[static_cast<std::size_t>(i)]);
        store(*b.lse->storage(), b.lse->index({tok, h}), r.lse);
      }
    }
  }
}

// A ROCM_ATTN Triton kernel's logit (prefix prefill, Triton decode): fp32(scale) * dot(q, k), the dot in fp32
// (sequential: the MFMA order is approximated); the backend passes these kernels no softcap (defect
// softcap_dropped; repaired, c * tanh(s / c)).
float AttentionTwin::triton_logit(const Batch& b, const float* q, const float* k) const {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < b.d; ++i) acc += q[i] * k[i];
  const float qk_mul = static_cast<float>(b.p->scale);
  const float s = bug_ == AttnBug::kLogitsRounded ? round_act(b.act, qk_mul * acc) : qk_mul * acc;
  const float cap =
      k_.softcap_dropped || bug_ == AttnBug::kSoftcapMissing ? 0.0f : static_cast<float>(b.p->softcap);
  return cap > 0.0f ? cap * std::tanh(s / cap) : s;
}

// One prefill/extend sequence under ROCM_ATTN (chunked_prefill_paged_decode calls context_attention_fwd with
// skip_decode when some query length is above 1). Per q head and query row j (program block j / BLOCK_M):
// the sink as initial max (l = 1), the context [0, ctx) from the paged cache in tiles of 32 keys with no
// causal mask (fp8: K, V = act(fp32(kv) * scale) before the dots; prefix_prefill.py:163-266), then the new
// tokens from the key/value inputs in tiles of 64 keys up to the block's end, causal (273-334); logits
// `fp32(scale) * dot`, -inf where masked; window `pos - key < SLIDING_WINDOW`; o = act(acc / (l + 1e-10))
// (336). The kernel writes no LSE: the twin reports m + log(l).
void AttentionTwin::prefix_prefill_sequence(const Batch& b, std::int64_t s) const {
  const std::int64_t q0 = b.query_start[s], ql = b.query_start[s + 1] - q0, d = b.d;
  const std::int64_t ctx = b.seq_lens[static_cast<std::size_t>(s)] - ql;
  // SLIDING_WINDOW as the kernel receives it (window - 1: defect window_one_short; 0: none).
  const std::int64_t sw = kernel_window(*b.p);
  const bool masked_pv = k_.masked_p_times_v || bug_ == AttnBug::kMaskedPTimesV;
  std::vector<float> ctx_k, ctx_v, new_k(static_cast<std::size_t>(ql * d)), new_v(new_k.size());
  std::vector<float> q(static_cast<std::size_t>(d)), out(q.size());
  const Shape &qs = b.q->strides(), &os = b.o->strides();
  const auto dot = [&](const float* k) { return triton_logit(b, q.data(), k); };
  PrefillTile tile;
  // Slot i of the tile holds key/value row `row` of (k, v); a masked slot keeps its V (masked P times V).
  const auto put = [&](std::size_t i, const float* k, const float* v, char v_bad, bool visible) {
    tile.v[i] = v;
    tile.v_nonfinite[i] = v_bad;
    if (!visible) return;
    tile.masked[i] = 0;
    tile.scores[i] = dot(k);
  };
  for (std::int64_t g = 0; g < b.hkv; ++g) {
    gather_one(b, *b.k, b.p->k_scale, s, g, ctx_k, std::max<std::int64_t>(ctx, 0));
    gather_one(b, *b.v, b.p->v_scale, s, g, ctx_v, std::max<std::int64_t>(ctx, 0));
    dequantise_to(b.act, b, ctx_k, ctx_v);
    for (const auto& [input, dst] : {std::pair{b.k_new, &new_k}, std::pair{b.v_new, &new_v}})
      load_new_rows(*input, q0, ql, g, d, dst->data());
    const std::vector<char> ctx_bad = nonfinite_rows(ctx_v, std::max<std::int64_t>(ctx, 0), d);
    const std::vector<char> new_bad = nonfinite_rows(new_v, ql, d);
    for (std::int64_t h = 0; h < b.hq; ++h) {
      if (kv_head(b, h) != g) continue;
      for (std::int64_t j = 0; j < ql; ++j) {
        load_run(*b.q->storage(), b.q->offset() + (q0 + j) * qs[0] + h * qs[1], qs[2], d, q.data());
        PrefillRow st = start_row(d, b.sinks, h);
        // Context: every key below ctx, no causal mask; the window measured from the row's position ctx + j.
        for (std::int64_t t0 = 0; t0 < ctx; t0 += k_.pp_ctx_tile) {
          tile.reset(k_.pp_ctx_tile);
          for (std::int64_t t = t0; t < std::min(t0 + k_.pp_ctx_tile, ctx); ++t) {
            put(static_cast<std::size_t>(t - t0), ctx_k.data() + t * d, ctx_v.data() + t * d,
                ctx_bad[static_cast<std::size_t>(t)], !(sw > 0 && ctx + j - t >= sw));
          }
          prefill_step(b.act, d, tile, masked_pv, k_.nan_row_zeroed, st);
        }
        // New tokens: tiles of BLOCK_N up to the end of the row's BLOCK_M block, causal.
        const std::int64_t block_end = (j / k_.pp_block_m + 1) * k_.pp_block_m;
        const std::int64_t hi = j + (bug_ == AttnBug::kCausalOffByOne ? 1 : 0);
        for (std::int64_t n0 = 0; n0 < block_end; n0 += k_.pp_block_n) {
          tile.reset(k_.pp_block_n);
          for (std::int64_t n = n0; n < std::min(n0 + k_.pp_block_n, ql); ++n) {
            put(static_cast<std::size_t>(n - n0), new_k.data() + n * d, new_v.data() + n * d,
                new_bad[static_cast<std::size_t>(n)], !(n > hi || (sw > 0 && j - n >= sw)));
          }
          prefill_step(b.act, d, tile, masked_pv, k_.nan_row_zeroed, st);
        }
        for (std::int64_t i = 0; i < d; ++i)
          out[static_cast<std::size_t>(i)] =
              round_act(b.act, st.acc[static_cast<std::size_t>(i)] / (st.l + kPrefillDivBias));
        const std::int64_t base = b.o->offset() + (q0 + j) * os[0] + h * os[1];
        for (std::int64_t i = 0; i < d; ++i)
          store(*b.o->storage(), base + i * os[2], out[static_cast<std::size_t>(i)]);
        store(*b.lse->storage(), b.lse->index({q0 + j, h}), st.m + std::log(st.l));
      }
    }
  }
}

// The element run [first, first + n) of a tensor's storage that a kernel addressing it densely touches;
// outside the storage the real kernel would read or write out of bounds: an error naming the tensor.
void check_dense_run(const Tensor& t, const char* name, std::int64_t first, std::int64_t n) {
  if (first < 0 || first + n > t.storage()->numel())
    throw BackendError(
        fmt::format("{}: the kernel's dense address {}..{} lies outside the tensor's storage of {} "
                    "elements",
                    name, first, first + n - 1, t.storage()->numel()));
}

// One decode sequence (query length 1) under ROCM_ATTN's Triton kernel_paged_attention_2d
// (chunked_prefill_paged_decode.py at 69f87df), per q head of each KV head: the sink as the initial max (L =
// 1); tiles of one page over [0, cdiv(seq_len, block_size) * block_size), K and V loaded through the block
// table without the sequence mask (the last page's tail slots enter P.V with P = 0: defect
// paged_2d_tail_unmasked; repaired, loaded as 0), fp8 dequantised to act before the dots; logits -inf past
// seq_len; keys outside the window (`context_len - key >= SLIDING_WINDOW`, context_len = seq_len - 1) at the
// finite -10000 (defect window_logit_finite; repaired, out of the softmax and P.V); the prefix prefill's
// softmax step; o = act(acc / (L + 1e-10)). q and o are addressed through their token and head strides, their
// elements as dense (the kernel adds tl.arange to the row address). The kernel writes no LSE: the twin
// reports m + log(L).
void AttentionTwin::triton_decode_sequence(const Batch& b, std::int64_t s) const {
  const std::int64_t tok = b.query_start[s], d = b.d, bs = b.bs;
  const std::int64_t len = b.seq_lens[static_cast<std::size_t>(s)];
  const std::int64_t loaded = cdiv(len, bs) * bs;
  const std::int64_t sw = kernel_window(*b.p);
  const bool tail = k_.paged_2d_tail_unmasked || bug_ == AttnBug::kMaskedPTimesV;
  std::vector<float> keys, values, q(static_cast<std::size_t>(d)), out(q.size());
  const Shape &qs = b.q->strides(), &os = b.o->strides();
  PrefillTile tile;
  for (std::int64_t g = 0; g < b.hkv; ++g) {
    gather_one(b, *b.k, b.p->k_scale, s, g, keys, loaded);
    gather_one(b, *b.v, b.p->v_scale, s, g, values, loaded);
    dequantise_to(b.act, b, keys, values);
    const std::vector<char> bad = nonfinite_rows(values, loaded, d);
    for (std::int64_t h = 0; h < b.hq; ++h) {
      if (kv_head(b, h) != g) continue;
      const std::int64_t q_at = b.q->offset() + tok * qs[0] + h * qs[1];
      check_dense_run(*b.q, "q", q_at, d);
      load_run(*b.q->storage(), q_at, 1, d, q.data());
      PrefillRow st = start_row(d, b.sinks, h);
      for (std::int64_t t0 = 0; t0 < loaded; t0 += bs) {
        tile.reset(bs);
        // A slot whose V stays nullptr is out of P.V (loaded as 0, or masked by a repair); every other slot
        // is multiplied with its P, masked (logit -inf, P = 0) or not.
        for (std::int64_t t = t0; t < t0 + bs; ++t) {
          const auto i = static_cast<std::size_t>(t - t0);
          const bool outside = t < len && sw > 0 && len - 1 - t >= sw;
          if ((t >= len && !tail) || (outside && !k_.window_logit_finite)) continue;
          tile.v[i] = values.data() + t * d;
          tile.v_nonfinite[i] = bad[static_cast<std::size_t>(t)];
          if (t >= len) continue;  // logit -inf
          tile.masked[i] = 0;
          tile.scores[i] = outside ? kWindowMaskedLogit : triton_logit(b, q.data(), keys.data() + t * d);
        }
        prefill_step(b.act, d, tile, /*masked_p_times_v=*/true, k_.nan_row_zeroed, st);
      }
      for (std::int64_t i = 0; i < d; ++i)
        out[static_cast<std::size_t>(i)] =
            round_act(b.act, st.acc[static_cast<std::size_t>(i)] / (st.l + kPrefillDivBias));
      const std::int64_t o_at = b.o->offset() + tok * os[0] + h * os[1];
      check_dense_run(*b.o, "o", o_at, d);
      for (std::int64_t i = 0; i < d; ++i) store(*b.o->storage(), o_at + i, out[static_cast<std::size_t>(i)]);
      store(*b.lse->storage(), b.lse->index({tok, h}), st.m + std::log(st.l));
    }
  }
}

float AttentionTwin::compute_row(const Batch& b, const Plan& pl, const Row& r, std::int64_t h,
                                 float* out) const {
  switch (k_.schedule) {
    case AttnSchedule::kTiled:
      return tiled_row(b, pl, r, h, out);
    case AttnSchedule::kLl4mi:
      return ll4mi_row(b, pl, r, out);
  }
  return 0.0f;
}

// The rows of one sequence that a paged (non-extend) kernel computes, written to o and lse.
void AttentionTwin::paged_sequence(const Batch& b, const Plan& pl, std::int64_t s, Panel& panel) const {
  const std::int64_t q0 = b.query_start[s], qlen = b.query_start[s + 1] - q0;
  std::vector<float> q(static_cast<std::size_t>(b.d)), out(q.size());
  const Shape& qs = b.q->strides();
  const Shape& os = b.o->strides();
  // ll4mi: q at `token * q_stride + head * D`, o at `(token * Hq + head) * D` (heads_addressed_dense).
  const bool dense = k_.heads_addressed_dense;
  for (std::int64_t g = 0; g < b.hkv; ++g) {
    gather(b, pl, s, g, panel);
    for (std::int64_t h = 0; h < b.hq; ++h) {
      if (kv_head(b, h) != g) continue;
      for (std::int64_t j = 0; j < qlen; ++j) {
        const std::int64_t tok = q0 + j;
        const std::int64_t q_at = b.q->offset() + tok * qs[0] + h * (dense ? b.d : qs[1]);
        if (dense) check_dense_run(*b.q, "q", q_at, b.d);
        load_run(*b.q->storage(), q_at, dense ? 1 : qs[2], b.d, q.data());
        // fp8 MFMAs: q * q_scale (1) converted to the cache's fp8 (pa_kernels.cuh:378-411).
        if (pl.mfma_fp8 != DType::kF32)
          for (float& x : q) x = static_cast<float>(round_to(pl.mfma_fp8, x));
        const float lse = compute_row(b, pl, make_row(b, q.data(), panel, s, j), h, out.data());
        const std::int64_t o_at =
            dense ? b.o->offset() + (tok * b.hq + h) * b.d : b.o->offset() + tok * os[0] + h * os[1];
        if (dense) check_dense_run(*b.o, "o", o_at, b.d);
        for (std::int64_t i = 0; i < b.d; ++i)
          store(*b.o->storage(), o_at + i * (dense ? 1 : os[2]), out[static_cast<std::size_t>(i)]);
        store(*b.lse->storage(), b.lse->index({tok, h}), lse);
      }
    }
  }
}

void AttentionTwin::run(Case& c) const {
  const Batch b = resolve(c);
  const Plan pl = plan(b);
  // Windowed decode rows on another kernel, called on them alone with max_seqlen_q = 1 (its launch choices
  // see a decode batch; max_seqlen_k stays the whole batch's, as vLLM passes attn_metadata.max_seq_len).
  const bool windowed = window_twin_ && b.p->window > 0;
  Batch bw = b;
  bw.max_query_len = 1;
  const Plan plw = windowed ? window_twin_->plan(bw) : pl;
  // ROCM_ATTN: decode rows on the Triton decode kernel unless use_rocm_custom_paged_attention holds; the
  // custom kernel has no window and is reached with a window only when it is passed as 0 (a window of 1 less
  // one): its rows see every key.
  const bool triton_decode = !custom_decode(*b.p, b.max_seq_len);
  AttentionParams unwindowed;
  Batch bc = b;
  if (k_.triton_decode_2d && !triton_decode && b.p->window > 0) {
    unwindowed = *b.p;
    unwindowed.window = 0;
    bc.p = &unwindowed;
  }
  Panel panel;
  for (std::int64_t s = 0; s < b.num_seqs; ++s) {
    const std::int64_t qlen = b.query_start[s + 1] - b.query_start[s];
    if (qlen == 0) continue;
    if (k_.aiter_fa_extend && qlen > 1) {
      const bool swa = b.p->window > 0 && b.seq_lens[static_cast<std::size_t>(s)] > qlen;
      if (swa)
        swa_extend_sequence(b, s);
      else
        extend_sequence(b, s);
      continue;
    }
    if (k_.prefix_prefill && qlen > 1) {
      prefix_prefill_sequence(b, s);
      continue;
    }
    if (triton_decode)
      triton_decode_sequence(b, s);
    else if (windowed)
      window_twin_->paged_sequence(bw, plw, s, panel);
    else
      paged_sequence(bc, pl, s, panel);
  }
}

}  // namespace

std::unique_ptr<Backend> make_attention_backend(TwinInfo info, AttnKernel kernel, AttnBug bug) {
  info.op = OpKind::kAttention;
  return std::make_unique<AttentionTwin>(std::move(info), std::move(kernel), bug);
}

}  // namespace driftcheck::twin
