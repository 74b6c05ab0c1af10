// The fp64 attention reference, checked independently: against straightforward loops that follow case.hpp's
// definition literally, against properties the math guarantees (weights sum to 1, o is a convex combination
// of V rows), and against metamorphic relations that must hold bit for bit (paged vs contiguous cache,
// permuted physical blocks) or within fp64 rounding (GQA vs MHA with repeated K/V heads).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "case_builders.hpp"
#include "driftcheck/reference/reference.hpp"

namespace driftcheck {
namespace {

using builders::AttentionSpec;

constexpr double kU = 0x1p-53;  // unit roundoff of fp64

rc::Gen<AttentionSpec> gen_spec() {
  return rc::gen::exec([] {
    AttentionSpec s;
    AttentionParams& p = s.params;
    p.num_kv_heads = *rc::gen::inRange<std::int64_t>(1, 3);
    p.num_q_heads = p.num_kv_heads * *rc::gen::element<std::int64_t>(1, 2, 4);
    p.head_dim = *rc::gen::inRange<std::int64_t>(1, 17);
    p.block_size = *rc::gen::element<std::int64_t>(1, 2, 3, 5, 16);
    p.causal = *rc::gen::arbitrary<bool>();
    p.window = *rc::gen::element<std::int64_t>(0, 0, 1, 3, 8);
    p.softcap = *rc::gen::element(0.0, 0.0, 5.0, 30.0);
    p.has_sinks = *rc::gen::arbitrary<bool>();
    p.scale = *rc::gen::element(0.125, 0.35, 1.0);
    s.kv_dtype = *rc::gen::element(DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3FN,
                                   DType::kF8E4M3FNUZ, DType::kF8E5M2);
    if (is_fp8(s.kv_dtype)) {
      p.k_scale = *rc::gen::element(0.5, 1.0, 2.5);
      p.v_scale = *rc::gen::element(0.25, 1.0, 3.0);
    }
    s.q_dtype = *rc::gen::element(DType::kF32, DType::kBF16);
    const int seqs = *rc::gen::inRange(1, 4);
    for (int i = 0; i < seqs; ++i) {
      const auto len = *rc::gen::inRange<std::int64_t>(0, 40);
      // Causal cases may have more queries than keys: the first rows then see nothing (fully masked).
      s.seq_lens.push_back(len);
      s.query_lens.push_back(*rc::gen::inRange<std::int64_t>(0, len + (p.causal ? 3 : 1)));
    }
    s.spare_blocks = *rc::gen::inRange<std::int64_t>(0, 3);
    s.shuffle_blocks = *rc::gen::arbitrary<bool>();
    return s;
  });
}

Case draw_case() {
  const AttentionSpec spec = *gen_spec();
  return builders::attention_case(spec, *rc::gen::arbitrary<std::uint64_t>());
}

// One output row: query j of sequence s at position pos, q head h.
struct RowRef {
  std::int64_t seq, token, pos, head, len;
};

template <class F>
void for_each_row(const Case& c, F&& f) {
  const auto& p = c.get<AttentionParams>();
  const Tensor& qsl = c.tensor("query_start_loc");
  for (std::int64_t s = 0; s < c.tensor("seq_lens").size(0); ++s) {
    const auto len = static_cast<std::int64_t>(c.tensor("seq_lens").at({s}));
    const auto first = static_cast<std::int64_t>(qsl.at({s}));
    const auto q_len = static_cast<std::int64_t>(qsl.at({s + 1})) - first;
    for (std::int64_t j = 0; j < q_len; ++j) {
      for (std::int64_t h = 0; h < p.num_q_heads; ++h) f(RowRef{s, first + j, len - q_len + j, h, len});
    }
  }
}

// case.hpp: key t is visible from position pos when (!causal || t <= pos) && (window == 0 || pos - t <
// window).
std::vector<std::int64_t> visible_keys(const AttentionParams& p, const RowRef& r) {
  std::vector<std::int64_t> keys;
  for (std::int64_t t = 0; t < r.len; ++t) {
    if ((!p.causal || t <= r.pos) && (p.window == 0 || r.pos - t < p.window)) keys.push_back(t);
  }
  return keys;
}

double cache_at(const Case& c, const char* cache, const RowRef& r, std::int64_t t, std::int64_t d) {
  const auto& p = c.get<AttentionParams>();
  const auto block = static_cast<std::int64_t>(c.tensor("block_table").at({r.seq, t / p.block_size}));
  return c.tensor(cache).at({block, t % p.block_size, r.head / (p.num_q_heads / p.num_kv_heads), d});
}

// The row computed by loops, with error bounds for comparing two fp64 evaluations of it. Logits: a D-term dot
// product and three scalings, each evaluation off by at most E = (D + 4) u |scale k_scale| sum_d |q_d k_d| (+
// 2u cap for softcap, whose tanh has slope <= 1). lse = m + log(sum): two evaluations differ by at most 2E in
// m and in the exponents, plus the L-term sum's (L + 4) u relative error (log turns it into an absolute one),
// plus u |lse| for the final add: tol_lse = 4E + (2L + 8) u (1 + |lse|). o = sum_t exp(s_t - lse) v_t: each
// weight is off by relatively tol_lse + 2E + 2u, the sum adds (L + 4) u, all times max |v| |v_scale|.
struct NaiveRow {
  std::vector<double> o;
  double lse = -std::numeric_limits<double>::infinity();
  double tol_o = 0;
  double tol_lse = 0;
};

// Physical (block, slot) of logical key t of the row's sequence.
std::pair<std::int64_t, std::int64_t> slot_of(const Case& c, const RowRef& r, std::int64_t t) {
  const std::int64_t bs = c.get<AttentionParams>().block_size;
  return {static_cast<std::int64_t>(c.tensor("block_table").at({r.seq, t / bs})), t % bs};
}

NaiveRow naive_row(const Case& c, const RowRef& r) {
  const auto& p = c.get<AttentionParams>();
  const Tensor& q = c.tensor("q");
  const Tensor& k_cache = c.tensor("k_cache");
  const Tensor& v_cache = c.tensor("v_cache");
  const std::int64_t g = r.head / (p.num_q_heads / p.num_kv_heads);
  const std::vector<std::int64_t> keys = visible_keys(p, r);
  std::vector<double> logits;
  double logit_err = 0;
  double v_max = 0;
  for (const std::int64_t t : keys) {
    const auto [block, slot] = slot_of(c, r, t);
    double dot = 0;
    double abs_dot = 0;
    for (std::int64_t d = 0; d < p.head_dim; ++d) {
      const double prod = q.at({r.token, r.head, d}) * k_cache.at({block, slot, g, d});
      dot += prod;
      abs_dot += std::fabs(prod);
      v_max = std::max(v_max, std::fabs(v_cache.at({block, slot, g, d})));
    }
    double s = p.scale * dot * p.k_scale;
    if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
    logits.push_back(s);
    const double e = static_cast<double>(p.head_dim + 4) * kU * std::fabs(p.scale * p.k_scale) * abs_dot;
    logit_err = std::max(logit_err, e + 2 * kU * p.softcap);
  }
  const double sink = p.has_sinks ? c.tensor("sinks").at({r.head}) : -std::numeric_limits<double>::infinity();
  NaiveRow row;
  row.o.assign(static_cast<std::size_t>(p.head_dim), 0.0);
  if (keys.empty() && !p.has_sinks) return row;
  double m = sink;
  for (const double s : logits) m = std::max(m, s);
  double sum = p.has_sinks ? std::exp(sink - m) : 0.0;
  for (const double s : logits) sum += std::exp(s - m);
  row.lse = m + std::log(sum);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const double weight = std::exp(logits[i] - row.lse);
    const auto [block, slot] = slot_of(c, r, keys[i]);
    for (std::int64_t d = 0; d < p.head_dim; ++d) {
      row.o[static_cast<std::size_t>(d)] += weight * v_cache.at({block, slot, g, d}) * p.v_scale;
    }
  }
  const auto len = static_cast<double>(r.len);
  row.tol_lse = 4 * logit_err + (2 * len + 8) * kU * (1 + std::fabs(row.lse));
  row.tol_o = (row.tol_lse + 2 * logit_err + (len + 6) * kU) * v_max * std::fabs(p.v_scale);
  return row;
}

double out_at(const Outputs& out, const char* name, const RowRef& r, std::int64_t d = -1) {
  return d < 0 ? out.at(name).at({r.token, r.head}) : out.at(name).at({r.token, r.head, d});
}

bool same_bits(const Outputs& a, const Outputs& b) {
  for (const char* name : {"o", "lse"}) {
    const std::vector<double> x = a.at(name).to_f64();
    const std::vector<double> y = b.at(name).to_f64();
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::bit_cast<std::uint64_t>(x[i]) != std::bit_cast<std::uint64_t>(y[i])) return false;
    }
  }
  return true;
}

// Checks every row of `got` against the loops within the derived tolerance (tol_scale widens it for
// comparisons of two references, each within the bound of the loops).
void expect_matches_loops(const Case& c, const Outputs& got, double tol_scale = 1.0) {
  for_each_row(c, [&](const RowRef& r) {
    const NaiveRow want = naive_row(c, r);
    const double lse = out_at(got, "lse", r);
    if (std::isinf(want.lse)) {
      RC_ASSERT(lse == want.lse);
    } else {
      RC_ASSERT(std::fabs(lse - want.lse) <= tol_scale * want.tol_lse);
    }
    for (std::int64_t d = 0; d < c.get<AttentionParams>().head_dim; ++d) {
      RC_ASSERT(std::fabs(out_at(got, "o", r, d) - want.o[static_cast<std::size_t>(d)]) <=
                tol_scale * want.tol_o);
    }
  });
}

RC_GTEST_PROP(ReferenceAttention, MatchesStraightforwardLoops, ()) {
  const Case c = draw_case();
  expect_matches_loops(c, reference(c));
}

RC_GTEST_PROP(ReferenceAttention, IsDeterministic, ()) {
  const Case c = draw_case();
  RC_ASSERT(same_bits(reference(c), reference(c)));
}

// With every V entry 1 (and v_scale 1) o is the sum of the softmax weights: 1, or 1 - exp(sink - lse) with a
// sink, up to the (L + 4) u rounding of the weights' sum; 0 for a row that sees nothing.
RC_GTEST_PROP(ReferenceAttention, SoftmaxWeightsSumToOne, ()) {
  Case c = draw_case();
  auto p = c.get<AttentionParams>();
  p.v_scale = 1.0;
  c.params = p;
  Tensor& v = c.tensor("v_cache");
  v.copy_from(std::vector<double>(static_cast<std::size_t>(v.numel()), 1.0));
  const Outputs out = reference(c);
  for_each_row(c, [&](const RowRef& r) {
    const double lse = out_at(out, "lse", r);
    const double sink = p.has_sinks ? c.tensor("sinks").at({r.head}) : -INFINITY;
    const double want = std::isinf(lse) ? 0.0 : 1.0 - std::exp(sink - lse);
    for (std::int64_t d = 0; d < p.head_dim; ++d) {
      RC_ASSERT(std::fabs(out_at(out, "o", r, d) - want) <= (static_cast<double>(r.len) + 8) * kU);
    }
  });
}

// o / v_scale is a convex combination of the visible V rows (a sub-convex one with a sink, which adds weight
// to nothing): every coordinate lies within their range (extended to 0 with a sink), up to the sum's
// rounding.
RC_GTEST_PROP(ReferenceAttention, OutputIsConvexCombinationOfValues, ()) {
  const Case c = draw_case();
  const auto& p = c.get<AttentionParams>();
  const Outputs out = reference(c);
  for_each_row(c, [&](const RowRef& r) {
    const std::vector<std::int64_t> keys = visible_keys(p, r);
    for (std::int64_t d = 0; d < p.head_dim; ++d) {
      double lo = p.has_sinks || keys.empty() ? 0.0 : INFINITY;
      double hi = -lo;
      for (const std::int64_t t : keys) {
        const double v = cache_at(c, "v_cache", r, t, d) * p.v_scale;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      const double slack = (static_cast<double>(r.len) + 8) * kU * std::max(std::fabs(lo), std::fabs(hi));
      const double o = out_at(out, "o", r, d);
      RC_ASSERT(o >= lo - slack);
      RC_ASSERT(o <= hi + slack);
    }
  });
}

// The same case on a cache with one block per sequence (block_size = the longest context).
Case contiguous_copy(const Case& c) {
  auto p = c.get<AttentionParams>();
  const Tensor& lens = c.tensor("seq_lens");
  std::int64_t longest = 1;
  for (std::int64_t s = 0; s < lens.size(0); ++s)
    longest = std::max(longest, static_cast<std::int64_t>(lens.at({s})));
  Case out = c.clone();
  p.block_size = longest;
  out.params = p;
  Tensor table = Tensor::zeros(DType::kI32, {lens.size(0), 1});
  for (std::int64_t s = 0; s < lens.size(0); ++s) table.set({s, 0}, static_cast<double>(s));
  out.tensors["block_table"] = table;
  for (const char* name : {"k_cache", "v_cache"}) {
    Tensor cache = Tensor::zeros(c.tensor(name).dtype(), {std::max<std::int64_t>(lens.size(0), 1), longest,
                                                          p.num_kv_heads, p.head_dim});
    cache.copy_from(std::vector<double>(static_cast<std::size_t>(cache.numel()), NAN));
    for (std::int64_t s = 0; s < lens.size(0); ++s) {
      for (std::int64_t t = 0; t < static_cast<std::int64_t>(lens.at({s})); ++t) {
        for (std::int64_t g = 0; g < p.num_kv_heads; ++g) {
          for (std::int64_t d = 0; d < p.head_dim; ++d) {
            const RowRef first_q_head_of_g{s, 0, 0, g * (p.num_q_heads / p.num_kv_heads), 0};
            cache.set({s, t, g, d}, cache_at(c, name, first_q_head_of_g, t, d));
          }
        }
      }
    }
    out.tensors[name] = cache;
  }
  return out;
}

RC_GTEST_PROP(ReferenceAttention, PagedEqualsContiguousBitForBit, ()) {
  const Case c = draw_case();
  RC_ASSERT(same_bits(reference(c), reference(contiguous_copy(c))));
}

// Physical block b moves to perm[b] and the table follows: logically nothing changed.
Case permute_blocks(const Case& c, std::uint64_t seed) {
  Case out = c.clone();
  const std::int64_t blocks = c.tensor("k_cache").size(0);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (const char* name : {"k_cache", "v_cache"}) {
    const Tensor& from = c.tensor(name);
    Tensor& to = out.tensor(name);
    const std::int64_t per_block = from.numel() / blocks;
    for (std::int64_t i = 0; i < from.numel(); ++i) {
      const std::int64_t moved = perm[static_cast<std::size_t>(i / per_block)] * per_block + i % per_block;
      to.storage()->store_bits(to.index_of_linear(moved), from.storage()->load_bits(from.index_of_linear(i)));
    }
  }
  Tensor& table = out.tensor("block_table");
  for (std::int64_t i = 0; i < table.numel(); ++i) {
    const auto b = static_cast<std::int64_t>(table.storage()->load(table.index_of_linear(i)));
    if (b >= 0)
      table.storage()->store(table.index_of_linear(i),
                             static_cast<double>(perm[static_cast<std::size_t>(b)]));
  }
  return out;
}

RC_GTEST_PROP(ReferenceAttention, PermutingPhysicalBlocksChangesNoBit, ()) {
  const Case c = draw_case();
  RC_ASSERT(same_bits(reference(c), reference(permute_blocks(c, *rc::gen::arbitrary<std::uint64_t>()))));
}

// MHA with each kv head repeated for its q heads: the same math as GQA. The two references group rows into
// GEMMs differently, so they agree within twice the loops' bound rather than bit for bit.
Case repeat_kv_heads(const Case& c) {
  auto p = c.get<AttentionParams>();
  const std::int64_t group = p.num_q_heads / p.num_kv_heads;
  Case out = c.clone();
  for (const char* name : {"k_cache", "v_cache"}) {
    const Tensor& from = c.tensor(name);
    Tensor to = Tensor::zeros(from.dtype(), {from.size(0), from.size(1), p.num_q_heads, p.head_dim});
    for (std::int64_t i = 0; i < to.numel(); ++i) {
      const std::int64_t d = i % p.head_dim;
      const std::int64_t h = i / p.head_dim % p.num_q_heads;
      const std::int64_t slot = i / (p.head_dim * p.num_q_heads);
      const std::int64_t src = (slot * p.num_kv_heads + h / group) * p.head_dim + d;
      to.storage()->store_bits(i, from.storage()->load_bits(from.index_of_linear(src)));
    }
    out.tensors[name] = to;
  }
  p.num_kv_heads = p.num_q_heads;
  out.params = p;
  return out;
}

RC_GTEST_PROP(ReferenceAttention, GqaEqualsMhaWithRepeatedKvHeads, ()) {
  const Case c = draw_case();
  RC_PRE(c.get<AttentionParams>().num_q_heads > c.get<AttentionParams>().num_kv_heads);
  expect_matches_loops(c, reference(repeat_kv_heads(c)), 2.0);
}

AttentionSpec fixed_spec() {
  AttentionSpec s;
  s.params.num_q_heads = 4;
  s.params.num_kv_heads = 1;
  s.params.head_dim = 16;
  s.params.block_size = 7;
  s.query_lens = {3};
  s.seq_lens = {10};
  return s;
}

TEST(ReferenceAttention, RowsThatSeeNoKeyGiveZeroAndMinusInfinity) {
  AttentionSpec s = fixed_spec();
  s.query_lens = {5};
  s.seq_lens = {2};  // causal, 5 queries on 2 keys: positions -3..1, the first three rows see nothing
  for (const bool sinks : {false, true}) {
    s.params.has_sinks = sinks;
    const Case c = builders::attention_case(s, 7);
    const Outputs out = reference(c);
    for (std::int64_t h = 0; h < 4; ++h) {
      for (std::int64_t j = 0; j < 5; ++j) {
        const double lse = out.at("lse").at({j, h});
        if (j < 3) {
          EXPECT_EQ(lse, sinks ? c.tensor("sinks").at({h}) : -INFINITY) << j;
          for (std::int64_t d = 0; d < 16; ++d) EXPECT_EQ(out.at("o").at({j, h, d}), 0.0);
        } else {
          EXPECT_TRUE(std::isfinite(lse));
        }
      }
    }
  }
}

// NaN in a key/value that some rows see and others do not (outside their window): only the rows that see it
// turn NaN, because masked weights never multiply it (0 * NaN would be NaN).
TEST(ReferenceAttention, NanOutsideAWindowDoesNotLeak) {
  AttentionSpec s = fixed_spec();
  s.params.window = 3;
  s.query_lens = {10};
  Case c = builders::attention_case(s, 11);
  for (std::int64_t d = 0; d < 16; ++d) {
    c.tensor("v_cache").set({0, 0, 0, d}, NAN);  // key 0 of the only sequence (block 0, slot 0)
    c.tensor("k_cache").set({0, 0, 0, d}, NAN);
  }
  const Outputs out = reference(c);
  for (std::int64_t j = 0; j < 10; ++j) {
    const bool sees_key0 = j < 3;
    EXPECT_EQ(std::isnan(out.at("o").at({j, 0, 0})), sees_key0) << j;
    EXPECT_EQ(std::isnan(out.at("lse").at({j, 1})), sees_key0) << j;
  }
}

// Long prefills split into many query tiles (GQA 4: 64 queries per tile), with the key range of each tile cut
// by causality and the window; block size 544 as in MiniMax-M3's configuration.
TEST(ReferenceAttention, MultiTilePrefillMatchesLoops) {
  for (const std::int64_t window : {0, 100}) {
    AttentionSpec s = fixed_spec();
    s.params.block_size = 544;
    s.params.head_dim = 8;  // the loops cost T x L x D: keep this test fast under sanitizers
    s.params.window = window;
    s.params.softcap = 20.0;
    s.query_lens = {130, 1};
    s.seq_lens = {620, 700};
    s.shuffle_blocks = true;
    s.spare_blocks = 1;
    const Case c = builders::attention_case(s, 5);
    const Outputs out = reference(c);
    for_each_row(c, [&](const RowRef& r) {
      const NaiveRow want = naive_row(c, r);
      ASSERT_NEAR(out_at(out, "lse", r), want.lse, want.tol_lse);
      for (std::int64_t d = 0; d < s.params.head_dim; ++d)
        ASSERT_NEAR(out_at(out, "o", r, d), want.o[static_cast<std::size_t>(d)], want.tol_o);
    });
  }
}

// --- The written semantics, pinned by hand
// ------------------------------------------------------------------ Five places where docs/REFERENCE.md,
// docs/EXCHANGE.md and case.hpp once disagreed or were silent (issue 26): each test below builds a case small
// enough that its softmax is written down exactly in the comments, so each expected value is derived here and
// not by another implementation. One q head and one KV head, head size 1 or 2, scale 1 unless a test says
// otherwise.

AttentionSpec hand_spec(std::int64_t head_dim, std::vector<std::int64_t> query_lens,
                        std::vector<std::int64_t> seq_lens, DType kv = DType::kF32) {
  AttentionSpec s = builders::one_head(DType::kF32, 0, 0);
  s.params.head_dim = head_dim;
  s.kv_dtype = kv;
  s.query_lens = std::move(query_lens);
  s.seq_lens = std::move(seq_lens);
  return s;
}

// Key t of sequence s holds the stored values k and v (what the cache slot encodes, before k_scale/v_scale).
void set_key(Case& c, std::int64_t s, std::int64_t t, const std::vector<double>& k,
             const std::vector<double>& v) {
  const std::int64_t bs = c.get<AttentionParams>().block_size;
  const auto block = static_cast<std::int64_t>(c.tensor("block_table").at({s, t / bs}));
  for (std::size_t d = 0; d < k.size(); ++d) {
    c.tensor("k_cache").set({block, t % bs, 0, static_cast<std::int64_t>(d)}, k[d]);
    c.tensor("v_cache").set({block, t % bs, 0, static_cast<std::int64_t>(d)}, v[d]);
  }
}

void set_query(Case& c, std::int64_t token, const std::vector<double>& q) {
  for (std::size_t d = 0; d < q.size(); ++d)
    c.tensor("q").set({token, 0, static_cast<std::int64_t>(d)}, q[d]);
}

// Token `token` (q head 0) has lse and o within a few roundings of the hand-derived values (each derivation
// is a handful of fp64 operations and library exp/log calls, 2 ulp each): 16 u relative.
void expect_row(const Outputs& out, std::int64_t token, double lse, const std::vector<double>& o,
                const std::string& what) {
  const double got_lse = out.at("lse").at({token, 0});
  EXPECT_NEAR(got_lse, lse, 16 * kU * std::fabs(lse)) << what << ": lse of token " << token;
  for (std::size_t d = 0; d < o.size(); ++d) {
    const double got = out.at("o").at({token, 0, static_cast<std::int64_t>(d)});
    EXPECT_NEAR(got, o[d], 16 * kU * std::fabs(o[d])) << what << ": o[" << d << "] of token " << token;
  }
}

// k_scale and v_scale apply once: the cache holds the stored values K_t, V_t, and
//   s_t = scale * k_scale * (q . K_t),   o = v_scale * sum_t p_t V_t.
// A decode row (p = 1) over two keys, fp8 e4m3fn cache, scale 0.5, k_scale 2, v_scale 4, q = 1, stored
// K = (1, 0), V = (1, 0):
//   s_0 = 0.5 * 2 * 1 = 1, s_1 = 0;  lse = log(e + 1);  p_0 = e / (1 + e);  o = 4 * p_0 * 1 = 4e / (1 + e).
// Reading REFERENCE.md's old text literally (k_t = K_t k_scale, then s_t = scale (q . k_t) k_scale) gives
// s_0 = 2, lse = log(1 + e^2); v_scale twice gives o = 16e / (1 + e); a scale left out gives s_0 = 0.5 or
// o = e / (1 + e).
TEST(ReferenceAttention, KvScalesApplyOnce) {
  AttentionSpec s = hand_spec(1, {1}, {2}, DType::kF8E4M3FN);
  s.params.scale = 0.5;
  s.params.k_scale = 2.0;
  s.params.v_scale = 4.0;
  Case c = builders::attention_case(s, 1);
  set_query(c, 0, {1.0});
  set_key(c, 0, 0, {1.0}, {1.0});
  set_key(c, 0, 1, {0.0}, {0.0});
  const double e = std::exp(1.0);
  expect_row(reference(c), 0, std::log1p(e), {4 * e / (1 + e)}, "scales once");
}

// The window hides past keys only: key t is visible from position p when
//   t < L  &&  (!causal || t <= p)  &&  (window == 0 || p - t < window),
// so without causality every later key t > p stays visible whatever the window. Four keys with K = 0 (every
// logit 0: a visible key weighs 1/n) and V_t = t; four queries at p = 0..3; window 2 (p - t < 2: t >= p - 1).
//   non-causal: p = 0 and p = 1 see {0, 1, 2, 3}: o = 6/4 = 1.5, lse = log 4; p = 2 sees {1, 2, 3}: o = 2,
//               lse = log 3; p = 3 sees {2, 3}: o = 2.5, lse = log 2.
//   causal:     p = 0 sees {0}: o = 0, lse = 0; p = 1 {0, 1}: o = 0.5, lse = log 2; p = 2 {1, 2}: o = 1.5;
//               p = 3 {2, 3}: o = 2.5 (lse = log 2 for these three).
// A window that also bounded future keys (p - window < t <= p, as case.hpp once said, or |p - t| < window)
// would give p = 0 the keys {0} or {0, 1} when non-causal: o = 0 or 0.5, not 1.5.
TEST(ReferenceAttention, NonCausalWindowHidesOnlyPastKeys) {
  for (const bool causal : {false, true}) {
    AttentionSpec s = hand_spec(1, {4}, {4});
    s.params.causal = causal;
    s.params.window = 2;
    Case c = builders::attention_case(s, 2);
    for (std::int64_t t = 0; t < 4; ++t) {
      set_key(c, 0, t, {0.0}, {static_cast<double>(t)});
      set_query(c, t, {1.0});
    }
    const Outputs out = reference(c);
    const std::string what = causal ? "causal window 2" : "non-causal window 2";
    if (!causal) {
      expect_row(out, 0, std::log(4.0), {1.5}, what);
      expect_row(out, 1, std::log(4.0), {1.5}, what);
      expect_row(out, 2, std::log(3.0), {2.0}, what);
      expect_row(out, 3, std::log(2.0), {2.5}, what);
    } else {
      EXPECT_EQ(out.at("lse").at({0, 0}), 0.0);
      EXPECT_EQ(out.at("o").at({0, 0, 0}), 0.0);
      expect_row(out, 1, std::log(2.0), {0.5}, what);
      expect_row(out, 2, std::log(2.0), {1.5}, what);
      expect_row(out, 3, std::log(2.0), {2.5}, what);
    }
  }
}

// A sink is a logit of its own (not scaled, not capped) that joins the max subtraction and the denominator,
// never the numerator:
//   m = max(sink_h, max_t s_t),  lse = m + log(exp(sink_h - m) + sum_t exp(s_t - m)),
//   o = v_scale * sum_t exp(s_t - m) V_t / (exp(sink_h - m) + sum_t exp(s_t - m)).
// Sequence 0 (sink 1000): causal, two queries on one key (K = 0, so s_0 = 0; V = 1), positions -1 and 0.
//   p = -1 sees no key: m = 1000, lse = 1000 + log(e^0) = 1000 exactly, o = 0. Were the sink outside the max
//          (m = -inf), exp(1000 - m) = inf and lse = -inf + inf = NaN.
//   p = 0: m = 1000, the denominator is e^0 + e^-1000 = 1 (e^-1000 underflows to 0 in fp64): lse = 1000 and
//          o = e^-1000 / 1 = 0, both exact. Outside the max (m = 0) the denominator e^1000 + 1 overflows: lse
//          would be +inf.
// Sequence 1 (sink 0, in a case of its own): one decode query on one key with s_0 = 0 and V = 1:
//   lse = log(e^0 + e^0) = log 2, o = e^0 / 2 = 0.5 (a sink in the numerator too would give o = 1).
TEST(ReferenceAttention, SinkJoinsTheMaxSubtraction) {
  {
    AttentionSpec s = hand_spec(1, {2}, {1});
    s.params.has_sinks = true;
    Case c = builders::attention_case(s, 3);
    c.tensor("sinks").set({0}, 1000.0);
    set_key(c, 0, 0, {0.0}, {1.0});
    set_query(c, 0, {1.0});
    set_query(c, 1, {1.0});
    const Outputs out = reference(c);
    for (std::int64_t token : {0, 1}) {
      EXPECT_EQ(out.at("lse").at({token, 0}), 1000.0) << token;
      EXPECT_EQ(out.at("o").at({token, 0, 0}), 0.0) << token;
    }
  }
  {
    AttentionSpec s = hand_spec(1, {1}, {1});
    s.params.has_sinks = true;
    Case c = builders::attention_case(s, 4);
    c.tensor("sinks").set({0}, 0.0);
    set_key(c, 0, 0, {0.0}, {1.0});
    set_query(c, 0, {1.0});
    expect_row(reference(c), 0, std::log(2.0), {0.5}, "sink 0");
  }
}

// An infinite element of q is no special case: the logit is the fp64 dot product, so q = (inf, 0) gives
// q . K = inf * K_0 + 0 * K_1: +-inf for K_0 > 0 / K_0 < 0, NaN for K_0 = 0 (inf * 0). Then, without a soft
// cap, the softmax with max subtraction:
//   a +inf logit: m = +inf and its exp(s - m) = exp(inf - inf) = NaN: the row's o and lse are NaN;
//   -inf logits: exp(-inf - m) = 0 weighs nothing, unless every visible logit is -inf and there is no sink:
//     then m = -inf and exp(-inf + inf) = NaN (o and lse NaN); with a sink m = sink: lse = sink, o = 0;
//   a NaN logit: NaN.
// With a soft cap c, s -> c tanh(s / c) maps +-inf to +-c exactly (tanh(+-inf) = +-1) and NaN to NaN.
// Decode rows, one per sequence, D = 2, V of each key given below.
//   no cap:  K = (1, 0) -> +inf: NaN;  K = (-1, 0) alone -> -inf: NaN;  K = (0, 1) -> NaN: NaN.
//   sink 0.5, no cap:  K = (-1, 0) alone: m = 0.5, lse = 0.5 + log(e^0) = 0.5, o = 0 * V = 0.
//   cap 5:  keys (1, 0) and (-1, 0) with V = (1, 2) and (3, 4): s = (5, -5), m = 5,
//           lse = 5 + log(1 + e^-10), p = (1, e^-10) / (1 + e^-10), o = (1 + 3 e^-10, 2 + 4 e^-10) / (1 +
//           e^-10); K = (0, 1) alone: NaN logit, NaN row.
TEST(ReferenceAttention, InfiniteQueryElementFollowsIeeeArithmetic) {
  const std::vector<double> q = {INFINITY, 0.0};
  {
    Case c = builders::attention_case(hand_spec(2, {1, 1, 1}, {1, 1, 1}), 5);
    set_key(c, 0, 0, {1.0, 0.0}, {1.0, 2.0});
    set_key(c, 1, 0, {-1.0, 0.0}, {1.0, 2.0});
    set_key(c, 2, 0, {0.0, 1.0}, {1.0, 2.0});
    for (std::int64_t token = 0; token < 3; ++token) set_query(c, token, q);
    const Outputs out = reference(c);
    for (std::int64_t token = 0; token < 3; ++token) {
      EXPECT_TRUE(std::isnan(out.at("lse").at({token, 0}))) << token;
      EXPECT_TRUE(std::isnan(out.at("o").at({token, 0, 0}))) << token;
      EXPECT_TRUE(std::isnan(out.at("o").at({token, 0, 1}))) << token;
    }
  }
  {
    AttentionSpec s = hand_spec(2, {1}, {1});
    s.params.has_sinks = true;
    Case c = builders::attention_case(s, 6);
    c.tensor("sinks").set({0}, 0.5);
    set_key(c, 0, 0, {-1.0, 0.0}, {1.0, 2.0});
    set_query(c, 0, q);
    const Outputs out = reference(c);
    EXPECT_EQ(out.at("lse").at({0, 0}), 0.5);
    EXPECT_EQ(out.at("o").at({0, 0, 0}), 0.0);
    EXPECT_EQ(out.at("o").at({0, 0, 1}), 0.0);
  }
  {
    AttentionSpec s = hand_spec(2, {1, 1}, {2, 1});
    s.params.softcap = 5.0;
    Case c = builders::attention_case(s, 7);
    set_key(c, 0, 0, {1.0, 0.0}, {1.0, 2.0});
    set_key(c, 0, 1, {-1.0, 0.0}, {3.0, 4.0});
    set_key(c, 1, 0, {0.0, 1.0}, {1.0, 2.0});
    set_query(c, 0, q);
    set_query(c, 1, q);
    const Outputs out = reference(c);
    const double small = std::exp(-10.0);
    expect_row(out, 0, 5.0 + std::log1p(small),
               {(1 + 3 * small) / (1 + small), (2 + 4 * small) / (1 + small)}, "cap 5");
    EXPECT_TRUE(std::isnan(out.at("lse").at({1, 0})));
    EXPECT_TRUE(std::isnan(out.at("o").at({1, 0, 0})));
  }
}

// Where the new tokens' K/V come from (NewKv). Sequence 0 extends a one-key context by two tokens (query
// length 2, L = 3, positions 1 and 2); sequence 1 is a decode step (query length 1, L = 2, position 1). Every
// context key is K = V = 0; every new token's inputs are k_new = v_new = a = 1.03125, and its fp8 e4m3fn
// cache slot holds what the cache write stores from them: a / k_scale and a / v_scale quantised. With
// (k_scale, v_scale) = (1, 1) the slots hold 1 and 1 (e4m3fn's neighbours of 1.03125 are 1 and 1.125); with
// (2, 0.5) they hold 0.5 and 2 (neighbours 0.5 / 0.5625 and 2 / 2.25): the dequantised cache is 1 either way.
// q = 1.
//   NewKv::kCache: every key is the dequantised cache, k_t = k_scale K_t = 1, v_t = v_scale V_t = 1:
//     token 0 (p = 1, keys 0, 1): s = (0, 1), lse = log(1 + e), o = e / (1 + e);
//     token 1 (p = 2, keys 0..2): s = (0, 1, 1), lse = log(1 + 2e), o = 2e / (1 + 2e);
//     token 2 (decode, keys 0, 1): lse = log(1 + e), o = e / (1 + e).
//   NewKv::kInputs: the new keys of sequence 0 are the inputs themselves, without any scale: k = v = a:
//     token 0: lse = log(1 + e^a), o = a e^a / (1 + e^a);  token 1: lse = log(1 + 2 e^a), o = 2a e^a / (1 + 2
//     e^a); token 2: a decode sequence reads the cache either way: as above.
// Scaling the inputs (k_new k_scale) would make s = 2a with k_scale 2; reading the inputs in a decode
// sequence would change token 2.
TEST(ReferenceAttention, NewTokensComeFromTheCacheOrTheInputsAsDeclared) {
  const double a = 1.03125;
  for (const auto& [k_scale, v_scale] : {std::pair{1.0, 1.0}, std::pair{2.0, 0.5}}) {
    AttentionSpec s = hand_spec(1, {2, 1}, {3, 2}, DType::kF8E4M3FN);
    s.params.k_scale = k_scale;
    s.params.v_scale = v_scale;
    Case c = builders::attention_case(s, 8);
    for (const char* name : {"k_new", "v_new"}) c.tensors[name] = Tensor::zeros(DType::kF32, {3, 1, 1});
    set_key(c, 0, 0, {0.0}, {0.0});
    set_key(c, 1, 0, {0.0}, {0.0});
    // Tokens 0 and 1 are keys 1 and 2 of sequence 0, token 2 is key 1 of sequence 1.
    const std::vector<std::pair<std::int64_t, std::int64_t>> new_keys = {{0, 1}, {0, 2}, {1, 1}};
    for (std::int64_t token = 0; token < 3; ++token) {
      const auto [seq, t] = new_keys[static_cast<std::size_t>(token)];
      c.tensor("k_new").set({token, 0, 0}, a);
      c.tensor("v_new").set({token, 0, 0}, a);
      set_key(c, seq, t, {round_to(DType::kF8E4M3FN, a / k_scale)},
              {round_to(DType::kF8E4M3FN, a / v_scale)});
      set_query(c, token, {1.0});
    }
    const std::string what = "k_scale " + std::to_string(k_scale);
    const double e = std::exp(1.0), ea = std::exp(a);
    const Outputs cache = reference_attention(c, NewKv::kCache);
    expect_row(cache, 0, std::log1p(e), {e / (1 + e)}, what + ", cache");
    expect_row(cache, 1, std::log1p(2 * e), {2 * e / (1 + 2 * e)}, what + ", cache");
    expect_row(cache, 2, std::log1p(e), {e / (1 + e)}, what + ", cache");
    const Outputs inputs = reference_attention(c, NewKv::kInputs);
    expect_row(inputs, 0, std::log1p(ea), {a * ea / (1 + ea)}, what + ", inputs");
    expect_row(inputs, 1, std::log1p(2 * ea), {2 * a * ea / (1 + 2 * ea)}, what + ", inputs");
    expect_row(inputs, 2, std::log1p(e), {e / (1 + e)}, what + ", inputs");
    EXPECT_TRUE(same_bits(reference(c), cache)) << "reference() is the cache semantics";
  }
}

}  // namespace
}  // namespace driftcheck
