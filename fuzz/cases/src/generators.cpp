// Case generators: RapidCheck combinators weighted towards the boundaries real kernels break at
// (docs/ORACLE.md section 7), with sizes kept small in most cases so that a campaign checks >= 1000
// backend-cases per second on two cores. Every value is drawn inside rc::gen::exec in dependency order (a
// query length after its sequence length, a width cap after the row count), so every shrink RapidCheck tries
// replays the same constraints and stays a valid spec.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <tuple>
#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/profiles.hpp"
#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck::fuzz {
namespace {

using rc::gen::element;
using rc::gen::inRange;
using rc::gen::weightedElement;
using rc::gen::weightedOneOf;

template <class T>
std::pair<std::size_t, rc::Gen<T>> w(std::size_t weight, rc::Gen<T> g) {
  return {weight, std::move(g)};
}

// Element budget of a row op: rows * width <= 8K (tens of microseconds per backend run), so drafter widths
// come with one row.
constexpr std::int64_t kRowBudget = 8 * 1024;

rc::Gen<std::int64_t> gen_width(const GenOptions& opts) {
  using I = std::int64_t;
  // Small widths, odd ones and non-multiples of 8 (96 is one, 100 and 5125 are not), medium ones, drafter
  // widths.
  auto small = element<I>(1, 7, 8, 16, 31, 32, 63, 64, 96, 100, 127, 128, 129, 255, 256, 257, 320, 384, 512,
                          768, 1000, 1024);
  auto medium = element<I>(1536, 2048, 2050, 3000);
  auto large = element<I>(4096, 5125, 6144, 8192);
  if (!opts.large_shapes) return weightedOneOf<I>({w(10, small), w(4, inRange<I>(1, 300)), w(2, medium)});
  return weightedOneOf<I>({w(10, small), w(4, inRange<I>(1, 300)), w(2, medium), w(2, large)});
}

rc::Gen<std::int64_t> gen_rows(std::int64_t width) {
  using I = std::int64_t;
  const I cap = std::max<I>(1, kRowBudget / width);
  // Multi-row batches dominate: batch invariance can only be checked with two or more rows.
  return rc::gen::map(weightedOneOf<I>({w(2, rc::gen::just<I>(1)), w(5, inRange<I>(2, 9)),
                                        w(2, element<I>(16, 31, 64, 128))}),
                      [cap](I r) { return std::min(r, cap); });
}

rc::Gen<DType> gen_act_dtype() {
  return weightedElement<DType>({{6, DType::kBF16}, {3, DType::kF16}, {1, DType::kF32}});
}

// Layouts: half the cases are plain, the rest have row strides wider than the row and bases misaligned
// by 1..7.
void draw_layout(CaseSpec& s) {
  using I = std::int64_t;
  s.row_pad =
      *weightedOneOf<I>({w(4, rc::gen::just<I>(0)), w(3, inRange<I>(1, 9)), w(1, rc::gen::just<I>(64))});
  s.base_offset = *weightedOneOf<I>({w(1, rc::gen::just<I>(0)), w(1, inRange<I>(1, 8))});
}

// eps = 0 is only drawn with distributions whose rows keep a representable sum of squares.
double draw_eps(Distribution d) {
  if (d == Distribution::kSubnormal) return *element(1e-5, 1e-6);
  return *weightedElement<double>({{4, 1e-5}, {4, 1e-6}, {1, 0.0}});
}

Distribution draw_row_distribution() {
  return *weightedElement<Distribution>({{5, Distribution::kNormal},
                                         {2, Distribution::kOutlierChannels},
                                         {1, Distribution::kNearConstant},
                                         {1, Distribution::kNearMax},
                                         {1, Distribution::kSubnormal}});
}

// One case in sixteen carries a NaN or an infinity in its input (issue #8 item 7): a kernel must keep it in
// its own row (and, for concat, copy it bit for bit).
Special draw_row_special() {
  return *weightedElement<Special>({{30, Special::kNone}, {1, Special::kNanInput}, {1, Special::kInfInput}});
}

void draw_row_shape(CaseSpec& s, const GenOptions& opts) {
  s.act_dtype = *gen_act_dtype();
  s.kv_dtype = s.act_dtype;
  s.hidden = *gen_width(opts);
  s.rows = *gen_rows(s.hidden);
  draw_layout(s);
  s.distribution = draw_row_distribution();
  s.value_seed = *rc::gen::arbitrary<std::uint64_t>();
  s.special = draw_row_special();
}

CaseSpec draw_rmsnorm(const GenOptions& opts) {
  CaseSpec s;
  s.op = OpKind::kRmsNorm;
  draw_row_shape(s, opts);
  RmsNormParams p;
  p.eps = draw_eps(s.distribution);
  p.weight_mode = *weightedElement<WeightMode>({{3, WeightMode::kPlain}, {1, WeightMode::kOnePlus}});
  p.residual = *weightedElement<bool>({{2, false}, {1, true}});
  s.params = p;
  s.inplace_output = *weightedElement<bool>({{3, false}, {1, true}});
  // Half the out-of-place cases get a fresh contiguous y, as a caller of the csrc kernel (which checks
  // out.is_contiguous()) allocates it: with a strided x that is where a stride bug shows.
  s.contiguous_output = !s.inplace_output && *weightedElement<bool>({{1, false}, {1, true}});
  return s;
}

CaseSpec draw_dual(const GenOptions& opts) {
  CaseSpec s;
  s.op = OpKind::kDualRmsNormCat;
  draw_row_shape(s, opts);
  DualRmsNormCatParams p;
  p.eps = draw_eps(s.distribution);
  p.weight_mode = *weightedElement<WeightMode>({{3, WeightMode::kPlain}, {1, WeightMode::kOnePlus}});
  s.params = p;
  return s;
}

CaseSpec draw_concat(const GenOptions& opts) {
  CaseSpec s;
  s.op = OpKind::kConcat;
  draw_row_shape(s, opts);
  s.hidden_b = *gen_width(opts);
  s.rows = std::min(s.rows, std::max<std::int64_t>(1, kRowBudget / (s.hidden + s.hidden_b)));
  s.params = ConcatParams{};
  return s;
}

// ---------------------------------------------------------------------------------------------------------------
// Attention

struct AttnShape {
  std::int64_t kv_heads, ratio, head_dim, block_size;
};

AttnShape draw_attn_shape() {
  using I = std::int64_t;
  AttnShape a{};
  a.kv_heads = *weightedElement<I>({{4, 1}, {3, 2}, {2, 4}, {1, 8}});
  a.ratio = *weightedElement<I>({{3, 1}, {1, 2}, {3, 4}, {1, 8}, {1, 16}});  // GQA ratios of real models
  // 512: aiter unified attention's widest tiles (prefill tile 16, 2D for every prefill, 3D at occupancy 2).
  a.head_dim =
      *weightedElement<I>({{4, 64}, {3, 128}, {1, 16}, {1, 32}, {1, 80}, {1, 96}, {1, 256}, {1, 512}});
  // Block sizes of the backends' tables (powers of two, 544/784/1056), 48 (a multiple of 16 below the aiter
  // unified tile of 64: its 2D tiles span pages, its 3D path asserts) and small odd ones no kernel supports.
  a.block_size = *weightedElement<I>({{5, 16},
                                      {2, 32},
                                      {1, 48},
                                      {2, 64},
                                      {1, 128},
                                      {1, 256},
                                      {1, 544},
                                      {1, 784},
                                      {1, 1056},
                                      {1, 1},
                                      {1, 3},
                                      {1, 7}});
  // Keep a query row's work (Hq * D <= 512) and a physical block (block_size * Hkv * D) small: the reference,
  // the baseline and every backend run (three more for the metamorphic checks) scale with them.
  while (a.kv_heads * a.ratio * a.head_dim > 512 && a.kv_heads > 1) a.kv_heads /= 2;
  while (a.kv_heads * a.ratio * a.head_dim > 512 && a.ratio > 1) a.ratio /= 2;
  if (a.block_size >= 256) {
    a.kv_heads = 1;
    a.head_dim = std::min<std::int64_t>(a.head_dim, 64);
  }
  return a;
}

std::int64_t draw_seq_len(const GenOptions& opts) {
  using I = std::int64_t;
  // 15/16/17 and friends straddle block and tile edges; 255/256/257 the 256-token partitions; 511/512/513 the
  // 2D/3D switch of the unified kernel. Long contexts only in a small share (cost grows with them).
  auto small = inRange<I>(1, 65);
  auto edges = element<I>(15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129);
  auto partitions = element<I>(255, 256, 257, 511, 512, 513);
  auto long_ctx = element<I>(1023, 1025, 2048);
  if (!opts.large_shapes) return *weightedOneOf<I>({w(6, small), w(3, edges)});
  return *weightedOneOf<I>({w(32, small), w(12, edges), w(3, partitions), w(1, long_ctx)});
}

// One sequence: decode (1 query), speculative verification (k + 1 queries, k in 1, 3, 7) or prefill (the
// whole sequence when short, else a chunk, as chunked prefill does).
std::pair<std::int64_t, std::int64_t> draw_sequence(const GenOptions& opts, bool decode_only) {
  using I = std::int64_t;
  const I len = decode_only ? *inRange<I>(1, 17) : draw_seq_len(opts);
  const int kind = decode_only ? 0 : *weightedElement<int>({{4, 0}, {3, 1}, {2, 2}});
  I q = 1;
  if (kind == 1) q = std::min<I>(len, *element<I>(2, 4, 8));
  if (kind == 2) q = len <= 32 ? len : *inRange<I>(1, 17);
  return {q, len};
}

AttentionParams draw_attn_params(const AttnShape& a, DType kv) {
  using I = std::int64_t;
  AttentionParams p;
  p.num_kv_heads = a.kv_heads;
  p.num_q_heads = a.kv_heads * a.ratio;
  p.head_dim = a.head_dim;
  p.block_size = a.block_size;
  p.scale =
      *weightedElement<double>({{6, 1.0 / std::sqrt(static_cast<double>(a.head_dim))}, {1, 1.0}, {1, 0.05}});
  p.causal = *weightedElement<bool>({{9, true}, {1, false}});
  p.window = *weightedElement<I>({{5, 0}, {1, 1}, {1, 8}, {1, 16}, {1, 33}, {1, 128}});
  p.softcap = *weightedElement<double>({{6, 0.0}, {1, 30.0}, {1, 50.0}});
  p.has_sinks = *weightedElement<bool>({{4, false}, {1, true}});
  if (is_fp8(kv)) {  // scales != 1 exercise where a kernel applies them
    p.k_scale = *element(1.0, 0.5, 2.0, 0.0625, 0.017);
    p.v_scale = *element(1.0, 0.5, 2.0, 0.0625, 0.017);
  }
  return p;
}

// Layouts real callers pass (docs/ORACLE.md, "Layouts"), drawn after everything else so that a case's
// shape and values do not depend on them: the block table as a slice of a wider persistent table (row
// stride > width in 1 of 2 cases, other requests' rows around it in 1 of 3), with ids outside the cache in
// the entries no kernel may read in 1 of 8; q as the first columns of a fused qkv output in 1 of 4; K and V
// as views of one tensor in 1 of 2.
void draw_attention_layouts(CaseSpec& s) {
  using I = std::int64_t;
  const auto& p = std::get<AttentionParams>(s.params);
  s.table_pad_cols =
      *weightedOneOf<I>({w(2, rc::gen::just<I>(0)), w(1, inRange<I>(1, 5)), w(1, element<I>(16, 64))});
  s.table_rows_before = *weightedOneOf<I>({w(2, rc::gen::just<I>(0)), w(1, inRange<I>(1, 4))});
  s.table_rows_after = *weightedOneOf<I>({w(2, rc::gen::just<I>(0)), w(1, inRange<I>(1, 5))});
  s.table_poison = *weightedElement<bool>({{7, false}, {1, true}});
  s.q_token_pad = *weightedElement<bool>({{3, false}, {1, true}}) ? 2 * p.num_kv_heads * p.head_dim : 0;
  s.kv_layout = *weightedElement<KvLayout>(
      {{2, KvLayout::kSeparate}, {1, KvLayout::kBlockInterleaved}, {1, KvLayout::kStacked}});
}

// About one case in ten carries a special value: NaN in one live key element, an infinity in one live value
// element, or (causal, not a decode batch) a sequence with more queries than keys, whose first rows see no
// key.
void draw_attention_special(CaseSpec& s, bool decode_batch) {
  using I = std::int64_t;
  s.special = *weightedElement<Special>(
      {{27, Special::kNone}, {1, Special::kNanInput}, {1, Special::kInfInput}, {1, Special::kMaskedRows}});
  const bool causal = std::get<AttentionParams>(s.params).causal;
  if (s.special != Special::kMaskedRows) return;
  if (!causal || decode_batch) {
    s.special = Special::kNone;
    return;
  }
  const auto seq = static_cast<std::size_t>(*inRange<I>(0, static_cast<I>(s.seq_lens.size())));
  s.query_lens[seq] = s.seq_lens[seq] + *inRange<I>(1, 4);
}

CaseSpec draw_attention(const GenOptions& opts) {
  using I = std::int64_t;
  CaseSpec s;
  s.op = OpKind::kAttention;
  s.act_dtype = *weightedElement<DType>({{3, DType::kBF16}, {1, DType::kF16}});
  s.kv_dtype = *weightedElement<DType>(
      {{6, s.act_dtype}, {2, DType::kF8E4M3FN}, {1, DType::kF8E4M3FNUZ}, {1, DType::kF8E5M2}});
  AttnShape a = draw_attn_shape();
  // One case in six is a paged decode batch the partitioned decode kernels accept (ROCM_ATTN's custom kernel:
  // block size 16/32, head size 64/128, query length 1, no window, no sinks; ROCM_AITER_FA: block size
  // 16/32). Without it those twins see about one case in a hundred, and their 256-token partition merges go
  // untested.
  const bool paged_decode = *weightedElement<bool>({{5, false}, {1, true}});
  if (paged_decode) {
    a.block_size = *element<I>(16, 32);
    a.head_dim = *element<I>(64, 128);
    while (a.kv_heads * a.ratio * a.head_dim > 512 && a.kv_heads > 1) a.kv_heads /= 2;
    while (a.kv_heads * a.ratio * a.head_dim > 512 && a.ratio > 1) a.ratio /= 2;
  }
  // Batches: mostly 1..8 sequences; sometimes around 128 / Hkv, the split-KV threshold of the unified kernel,
  // then decode-only with short contexts and narrow heads to bound the cost.
  const bool split_edge =
      !paged_decode && a.block_size <= 64 && *weightedElement<bool>({{12, false}, {1, true}});
  if (split_edge) {
    a.head_dim = std::min<I>(a.head_dim, 64);
    a.ratio = std::min<I>(a.ratio, 2);
    a.kv_heads = std::min<I>(a.kv_heads, 2);
  }
  // Large blocks (>= 256 tokens) are costly to fill and poison: at most two sequences then.
  const I seqs =
      split_edge ? std::max<I>(1, 128 / a.kv_heads + *inRange<I>(-1, 2))
      : a.block_size >= 256
          ? *inRange<I>(1, 3)
          : *weightedOneOf<I>({w(4, rc::gen::just<I>(1)), w(4, inRange<I>(2, 5)), w(2, inRange<I>(5, 9))});
  for (I i = 0; i < seqs; ++i) {
    const auto [q, len] = draw_sequence(opts, split_edge);
    s.query_lens.push_back(paged_decode ? 1 : q);
    s.seq_lens.push_back(len);
  }
  s.params = draw_attn_params(a, s.kv_dtype);
  if (paged_decode) {
    auto& p = std::get<AttentionParams>(s.params);
    p.causal = true;
    p.window = 0;
    p.has_sinks = false;
  }
  s.spare_blocks = a.block_size >= 256 ? *inRange<I>(0, 2) : *weightedElement<I>({{1, 0}, {2, 1}, {1, 3}});
  s.block_table_seed = *weightedOneOf<std::uint64_t>(
      {w(1, rc::gen::just<std::uint64_t>(0)), w(2, inRange<std::uint64_t>(1, 1u << 30))});
  s.row_pad = *weightedOneOf<I>({w(4, rc::gen::just<I>(0)), w(1, inRange<I>(1, 9))});
  s.base_offset = *weightedOneOf<I>({w(1, rc::gen::just<I>(0)), w(1, inRange<I>(1, 8))});
  s.distribution = *weightedElement<Distribution>({{5, Distribution::kNormal},
                                                   {1, Distribution::kOutlierChannels},
                                                   {2, Distribution::kLargeLogits},
                                                   {1, Distribution::kNearMax},
                                                   {1, Distribution::kSubnormal},
                                                   {1, Distribution::kNearConstant}});
  s.value_seed = *rc::gen::arbitrary<std::uint64_t>();
  draw_attention_layouts(s);
  draw_attention_special(s, paged_decode || split_edge);
  return s;
}

// Findings with a special value get their own signatures.
std::string special_suffix(const CaseSpec& s) {
  return s.special == Special::kNone ? "" : fmt::format("/{}", special_name(s.special));
}

// ---------------------------------------------------------------------------------------------------------------
// Model profiles (profiles.hpp): a model's real shapes. Drawn only with --model, so the default stream above
// keeps its draw order.

// One case's work at real sizes is bounded: keys read over the batch (one 128k context, or many shorter ones)
// and query-key pairs (speculative and prefill queries times their contexts). At the bound a MiniMax-M3 case
// is a few GFLOP of fp64 reference and, with the metamorphic re-runs, tens of seconds of CPU twins on one
// core (2 jobs ran 24 minimax-m3 cases in 622 s with a pair bound of 256k); the GPU reference and kernels
// take milliseconds. Prefill chunks are therefore shorter than a serving engine's (a 2k-token chunk at a 64k
// context is 1000x the pair budget), and contexts beyond 16k come in 2 cases of 9.
constexpr std::int64_t kModelKeyBudget = 131072;
constexpr std::int64_t kModelPairBudget = 131072;

std::int64_t draw_model_context(const ModelProfile& m) {
  using I = std::int64_t;
  return *weightedOneOf<I>({w(4, inRange<I>(1, 2049)), w(3, inRange<I>(2049, 16385)),
                            w(1, inRange<I>(16385, 65537)), w(1, inRange<I>(65537, m.max_context + 1))});
}

// A forward step's sequences: decode (one query each), speculative verification (k + 1 queries, k the
// model's), a prefill chunk, or a mix of them, as a continuous-batching engine schedules them.
void draw_model_batch(CaseSpec& s, const ModelProfile& m) {
  using I = std::int64_t;
  const int mode = *weightedElement<int>({{3, 0}, {4, 1}, {1, 2}, {2, 3}});
  const I seqs =
      *weightedOneOf<I>({w(3, rc::gen::just<I>(1)), w(3, inRange<I>(2, 9)), w(2, inRange<I>(9, 65))});
  I keys_left = kModelKeyBudget, pairs_left = kModelPairBudget;
  for (I i = 0; i < seqs; ++i) {
    const I len = std::min(draw_model_context(m), std::max<I>(1, keys_left / (seqs - i)));
    const int kind = mode == 3 ? *inRange<int>(0, 3) : mode;
    I q = 1;
    if (kind == 1) q = *inRange<I>(m.spec_min, m.spec_max + 1) + 1;
    if (kind == 2) q = *inRange<I>(1, 257);
    q = std::min({q, len, std::max<I>(1, pairs_left / (seqs - i) / len)});
    s.query_lens.push_back(q);
    s.seq_lens.push_back(len);
    keys_left -= len, pairs_left = std::max<I>(0, pairs_left - q * len);
  }
}

CaseSpec draw_model_attention(const ModelProfile& m) {
  using I = std::int64_t;
  CaseSpec s;
  s.op = OpKind::kAttention;
  s.act_dtype = m.act_dtype, s.kv_dtype = m.kv_dtype;
  AttentionParams p;
  p.num_q_heads = m.q_heads, p.num_kv_heads = m.kv_heads, p.head_dim = m.head_dim,
  p.block_size = m.block_size;
  p.scale = 1.0 / std::sqrt(static_cast<double>(m.head_dim));
  p.causal = true;
  p.window =
      m.window > 0 && *element(false, true) ? m.window : 0;  // windowed layers alternate with full ones
  p.has_sinks = m.sinks;
  if (is_fp8(s.kv_dtype)) {  // per-tensor scales of a calibrated cache
    p.k_scale = *element(1.0, 0.5, 0.0625, 0.017);
    p.v_scale = *element(1.0, 0.5, 0.0625, 0.017);
  }
  s.params = p;
  draw_model_batch(s, m);
  s.spare_blocks = *inRange<I>(0, 9);
  s.block_table_seed = *inRange<std::uint64_t>(1, 1u << 30);  // an engine's pages are scattered
  s.distribution = *weightedElement<Distribution>(
      {{6, Distribution::kNormal}, {2, Distribution::kOutlierChannels}, {1, Distribution::kLargeLogits}});
  s.value_seed = *rc::gen::arbitrary<std::uint64_t>();
  draw_attention_layouts(s);
  return s;
}

// The norms and the concat at the model's width over the tokens of one step: a decode batch, its
// speculative verification, or a prefill chunk.
CaseSpec draw_model_rows(OpKind op, const ModelProfile& m) {
  using I = std::int64_t;
  CaseSpec s;
  s.op = op;
  s.act_dtype = s.kv_dtype = m.act_dtype;
  s.hidden = s.hidden_b = m.hidden;
  s.rows = *weightedOneOf<I>(
      {w(3, inRange<I>(1, 17)), w(3, inRange<I>(17, 257)), w(1, element<I>(512, 1024, 2048))});
  s.distribution = *weightedElement<Distribution>(
      {{6, Distribution::kNormal}, {3, Distribution::kOutlierChannels}, {1, Distribution::kNearConstant}});
  s.value_seed = *rc::gen::arbitrary<std::uint64_t>();
  if (op == OpKind::kRmsNorm) {
    // vLLM's fused_add_rms_norm updates x and the residual in place.
    s.params = RmsNormParams{m.rms_eps, WeightMode::kPlain, *element(false, true)};
    s.inplace_output = *element(false, true);
  } else if (op == OpKind::kDualRmsNormCat) {
    s.params = DualRmsNormCatParams{m.rms_eps, WeightMode::kPlain};
  } else {
    s.params = ConcatParams{};
  }
  return s;
}

CaseSpec draw_default(OpKind op, const GenOptions& opts);

// A profile's real shapes in 4 cases of 5; the default generator's small edge cases in the rest.
CaseSpec draw_for_model(OpKind op, const GenOptions& opts) {
  const ModelProfile* m = find_model_profile(opts.model);
  if (m == nullptr) throw InvalidArgument(fmt::format("unknown model profile '{}'", opts.model));
  if (!*weightedElement<bool>({{4, true}, {1, false}})) return draw_default(op, opts);
  return op == OpKind::kAttention ? draw_model_attention(*m) : draw_model_rows(op, *m);
}

CaseSpec draw_default(OpKind op, const GenOptions& opts) {
  switch (op) {
    case OpKind::kRmsNorm:
      return draw_rmsnorm(opts);
    case OpKind::kConcat:
      return draw_concat(opts);
    case OpKind::kDualRmsNormCat:
      return draw_dual(opts);
    case OpKind::kAttention:
      return draw_attention(opts);
  }
  return draw_rmsnorm(opts);
}

std::string_view attention_mode(const CaseSpec& s) {
  const bool any_decode =
      std::any_of(s.query_lens.begin(), s.query_lens.end(), [](auto q) { return q == 1; });
  const bool any_spec =
      std::any_of(s.query_lens.begin(), s.query_lens.end(), [](auto q) { return q > 1 && q <= 8; });
  const bool any_prefill =
      std::any_of(s.query_lens.begin(), s.query_lens.end(), [](auto q) { return q > 8; });
  const int kinds = int{any_decode} + int{any_spec} + int{any_prefill};
  if (kinds > 1) return "mixed";
  if (any_decode) return "decode";
  return any_spec ? "spec" : "prefill";
}

// ---------------------------------------------------------------------------------------------------------------
// Compile sets (GenOptions::compile_set): case k takes its compile-relevant fields from one of K templates,
// template j being case j of a stream of its own (seed, op, the same profile); its other fields stay case
// k's.

// The compile-relevant fields of `from` written into `to` (of the same op): the one list compile_key() and
// the templates share. Triton specialises a kernel on its constexpr arguments (dtypes, block sizes, feature
// flags), on integers equal to 1 or divisible by 16 and on pointers aligned to 16 bytes; torch.compile on
// exact sizes and strides. So widths, heads and head size, the block size and the layouts (which set the
// strides and the base alignment) are taken whole.
void copy_compile_fields(const CaseSpec& from, CaseSpec& to) {
  to.act_dtype = from.act_dtype, to.kv_dtype = from.kv_dtype;
  to.row_pad = from.row_pad, to.base_offset = from.base_offset;
  if (from.op == OpKind::kAttention) {
    const auto& f = std::get<AttentionParams>(from.params);
    auto& t = std::get<AttentionParams>(to.params);
    t.num_q_heads = f.num_q_heads, t.num_kv_heads = f.num_kv_heads, t.head_dim = f.head_dim;
    t.block_size = f.block_size, t.causal = f.causal, t.window = f.window, t.softcap = f.softcap;
    t.has_sinks = f.has_sinks;
    to.q_token_pad = from.q_token_pad, to.kv_layout = from.kv_layout;
    return;
  }
  to.hidden = from.hidden;
  if (from.op == OpKind::kConcat) to.hidden_b = from.hidden_b;
  if (from.op == OpKind::kRmsNorm) {
    const auto& f = std::get<RmsNormParams>(from.params);
    auto& t = std::get<RmsNormParams>(to.params);
    t.weight_mode = f.weight_mode, t.residual = f.residual;
    to.inplace_output = from.inplace_output, to.contiguous_output = from.contiguous_output;
  }
  if (from.op == OpKind::kDualRmsNormCat)
    std::get<DualRmsNormCatParams>(to.params).weight_mode =
        std::get<DualRmsNormCatParams>(from.params).weight_mode;
}

// Case s with template t's compile-relevant fields, and what its own draws derived from the fields it had
// redone for the new ones: the row bound of a row op, the default softmax scale 1/sqrt(D), fp8 scales (1
// outside fp8), at most two sequences and one spare block with blocks of 256 tokens or more (their fill
// cost), and masked rows only where the case stays causal.
void apply_compile_template(CaseSpec& s, const CaseSpec& t) {
  using I = std::int64_t;
  if (s.op != OpKind::kAttention) {
    copy_compile_fields(t, s);
    const I width = s.op == OpKind::kConcat ? s.hidden + s.hidden_b : s.hidden;
    s.rows = std::min(s.rows, std::max<I>(1, kRowBudget / width));
    return;
  }
  const bool was_fp8 = is_fp8(s.kv_dtype);
  const I old_dim = std::get<AttentionParams>(s.params).head_dim;
  copy_compile_fields(t, s);
  auto& p = std::get<AttentionParams>(s.params);
  if (p.scale == 1.0 / std::sqrt(static_cast<double>(old_dim)))
    p.scale = 1.0 / std::sqrt(static_cast<double>(p.head_dim));
  if (!is_fp8(s.kv_dtype)) {
    p.k_scale = p.v_scale = 1.0;
  } else if (!was_fp8) {
    const auto& tp = std::get<AttentionParams>(t.params);
    p.k_scale = tp.k_scale, p.v_scale = tp.v_scale;
  }
  if (p.block_size >= 256) {
    const std::size_t keep = std::min<std::size_t>(s.seq_lens.size(), 2);
    s.seq_lens.resize(keep), s.query_lens.resize(keep);
    s.spare_blocks = std::min<I>(s.spare_blocks, 1);
  }
  if (s.special == Special::kMaskedRows) {
    bool masked = false;
    for (std::size_t i = 0; i < s.seq_lens.size(); ++i) {
      if (!p.causal) s.query_lens[i] = std::min(s.query_lens[i], s.seq_lens[i]);
      masked = masked || s.query_lens[i] > s.seq_lens[i];
    }
    if (!masked) s.special = Special::kNone;
  }
}

CaseSpec draw_spec(OpKind op, const GenOptions& opts) {
  return opts.model.empty() ? draw_default(op, opts) : draw_for_model(op, opts);
}

using Templates = std::shared_ptr<const std::vector<CaseSpec>>;

rc::Gen<CaseSpec> gen_spec(OpKind op, const GenOptions& opts, Templates templates) {
  return rc::gen::exec([op, opts, templates] {
    CaseSpec s = draw_spec(op, opts);
    // The template is drawn last, so case k's other fields are case k's of the stream without a compile set.
    if (templates) apply_compile_template(s, (*templates)[*inRange<std::size_t>(0, templates->size())]);
    return s;
  });
}

constexpr int kSize = 100;  // RapidCheck's nominal maximum: ranges are drawn in full, within the safe limit

rc::Random stream_random(std::uint64_t seed, std::uint64_t index, OpKind op, std::uint64_t salt) {
  return rc::Random(rc::Random::Key{seed, index, static_cast<std::uint64_t>(op), salt});
}

constexpr std::uint64_t kStreamSalt = 0x64726966746368ull;   // "driftch"
constexpr std::uint64_t kCompileSalt = 0x636f6d70696c65ull;  // "compile"

// The K templates of (seed, op, profile), drawn once per process and kept (under generation_mutex()):
// template j is the same for every K > j, so a larger compile set only adds combinations.
Templates compile_templates(OpKind op, std::uint64_t seed, const GenOptions& opts) {
  using Key = std::tuple<std::uint64_t, OpKind, bool, std::string, int>;
  static std::map<Key, Templates> cache;
  const Key key{seed, op, opts.large_shapes, opts.model, opts.compile_set};
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() >= 256) cache.clear();  // many seeds in one process (tests): keep the memory bounded
  GenOptions plain = opts;
  plain.compile_set = 0;
  auto templates = std::make_shared<std::vector<CaseSpec>>();
  for (int j = 0; j < opts.compile_set; ++j)
    templates->push_back(gen_spec(op, plain, nullptr)(
                             stream_random(seed, static_cast<std::uint64_t>(j), op, kCompileSalt), kSize)
                             .value());
  return cache[key] = std::move(templates);
}

// RapidCheck's rc::gen::exec keeps the picks of the running generator in process-global state, so two threads
// generating (or evaluating a shrink, which re-runs the generator) at once corrupt each other ("operator* is
// not allowed in this context"). Every evaluation of a drawn shrinkable therefore runs under one process-wide
// recursive lock: value() and each step of the shrink sequence.
class LockedShrinks;

class LockedSpec {
 public:
  explicit LockedSpec(rc::Shrinkable<CaseSpec> inner) : inner_(std::move(inner)) {}
  CaseSpec value() const {
    const std::lock_guard lock(generation_mutex());
    return inner_.value();
  }
  rc::Seq<rc::Shrinkable<CaseSpec>> shrinks() const;

 private:
  rc::Shrinkable<CaseSpec> inner_;
};

class LockedShrinks {
 public:
  explicit LockedShrinks(rc::Seq<rc::Shrinkable<CaseSpec>> inner) : inner_(std::move(inner)) {}
  rc::Maybe<rc::Shrinkable<CaseSpec>> operator()() {
    const std::lock_guard lock(generation_mutex());
    auto next = inner_.next();
    if (!next) return rc::Nothing;
    return rc::makeShrinkable<LockedSpec>(std::move(*next));
  }

 private:
  rc::Seq<rc::Shrinkable<CaseSpec>> inner_;
};

rc::Seq<rc::Shrinkable<CaseSpec>> LockedSpec::shrinks() const {
  const std::lock_guard lock(generation_mutex());
  return rc::makeSeq<LockedShrinks>(inner_.shrinks());
}

}  // namespace

std::recursive_mutex& generation_mutex() {
  static std::recursive_mutex m;
  return m;
}

rc::Gen<CaseSpec> gen_case_spec(OpKind op, const GenOptions& opts) {
  if (opts.compile_set != 0)
    throw InvalidArgument("a compile set is drawn from its seed: draw_case, not gen_case_spec");
  return gen_spec(op, opts, nullptr);
}

rc::Shrinkable<CaseSpec> draw_case(OpKind op, std::uint64_t seed, std::uint64_t index,
                                   const GenOptions& opts) {
  if (opts.compile_set < 0 || opts.compile_set > kMaxCompileSet)
    throw InvalidArgument(fmt::format("compile set {}: 0 (off) to {}", opts.compile_set, kMaxCompileSet));
  const std::lock_guard lock(generation_mutex());
  Templates templates = opts.compile_set > 0 ? compile_templates(op, seed, opts) : nullptr;
  return rc::makeShrinkable<LockedSpec>(
      gen_spec(op, opts, std::move(templates))(stream_random(seed, index, op, kStreamSalt), kSize));
}

std::string compile_key(const CaseSpec& s) {
  CaseSpec k;  // every field at its default but the compile-relevant ones
  k.op = s.op;
  k.params = std::visit([](const auto& p) -> OpParams { return std::decay_t<decltype(p)>{}; }, s.params);
  copy_compile_fields(s, k);
  return nlohmann::json(k).dump();
}

std::string stream_args(const GenOptions& opts) {
  std::string out;
  if (!opts.model.empty()) out += " --model " + opts.model;
  if (opts.compile_set > 0) out += fmt::format(" --compile-set {}", opts.compile_set);
  return out;
}

// Coarse on purpose: a finding's signature is (op, backend, verdict, shape class), and one repro bundle is
// kept per signature. Attention classes name what selects a kernel path (batch mode, GQA or not, the
// block-size family, the KV format), not every parameter: a class per head dim and feature flag made a mutant
// campaign write thousands of near-identical bundles (about 2 GB in 60 s). The bundle's case.json keeps every
// parameter.
std::string shape_class(const CaseSpec& s) {
  if (s.op == OpKind::kAttention) {
    const auto& p = std::get<AttentionParams>(s.params);
    const bool power_of_two = (p.block_size & (p.block_size - 1)) == 0;
    const std::string_view blocks = p.block_size % 16 != 0 || !power_of_two ? "bs_other"
                                    : p.block_size <= 32                    ? "bs16_32"
                                                                            : "bs64_256";
    return fmt::format("attn/{}/{}/{}/{}{}", attention_mode(s),
                       p.num_q_heads == p.num_kv_heads ? "mha" : "gqa", blocks, dtype_name(s.kv_dtype),
                       special_suffix(s));
  }
  std::string c =
      fmt::format("{}/{}/h{}", op_name(s.op), dtype_name(s.act_dtype), s.hidden % 8 == 0 ? "8k" : "odd");
  if (s.op == OpKind::kConcat) c += s.hidden_b % 8 == 0 ? "+8k" : "+odd";
  if (s.op == OpKind::kRmsNorm && std::get<RmsNormParams>(s.params).residual) c += "/residual";
  if (s.inplace_output) c += "/inplace";
  if (s.row_pad > 0) c += "/strided";
  if (s.base_offset > 0) c += "/misaligned";
  return c + special_suffix(s);
}

}  // namespace driftcheck::fuzz
