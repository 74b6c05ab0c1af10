// Structural shrinking (docs/CAMPAIGN.md "Findings, deduplication, shrinking"): the smaller variants of a
// case spec a shrinker tries, the structure that makes a repro big first (whole sequences, contexts, heads,
// head size, rows, widths), then layouts and features, then values; and the one-line shape reports print.
#include <algorithm>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck::fuzz {
namespace {

using I = std::int64_t;

// Smaller values for a size, smallest first: the floor, half way, one less (shrinking converges in a few
// passes whatever the failure threshold is).
std::vector<I> smaller(I value, I floor) {
  std::vector<I> out;
  for (const I v : {floor, floor + (value - floor) / 2, value - 1})
    if (v >= floor && v < value && std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  return out;
}

struct Candidates {
  const CaseSpec& base;
  std::vector<CaseSpec> out;
  void add(const std::function<void(CaseSpec&)>& change) {
    CaseSpec c = base;
    change(c);
    out.push_back(std::move(c));
  }
  template <class T>
  void lower(T CaseSpec::*field, T floor) {
    if (base.*field > floor) add([&](CaseSpec& c) { c.*field = floor; });
  }
  // A size or layout amount: the floor, half way, one less.
  void reduce(I CaseSpec::*field) {
    for (const I v : smaller(base.*field, 0)) add([&](CaseSpec& c) { c.*field = v; });
  }
};

void sequences(Candidates& c) {
  const CaseSpec& s = c.base;
  const auto n = static_cast<I>(s.seq_lens.size());
  const auto keep = [&](I first, I count) {
    c.add([=](CaseSpec& t) {
      t.query_lens = {s.query_lens.begin() + first, s.query_lens.begin() + first + count};
      t.seq_lens = {s.seq_lens.begin() + first, s.seq_lens.begin() + first + count};
    });
  };
  if (n > 2) keep(0, n / 2), keep(n / 2, n - n / 2);  // halves first: a 128-sequence batch in a few steps
  for (I i = 0; i < n && n > 1; ++i)
    c.add([i](CaseSpec& t) {
      t.query_lens.erase(t.query_lens.begin() + i);
      t.seq_lens.erase(t.seq_lens.begin() + i);
    });
  for (I i = 0; i < n; ++i) {
    for (const I len : smaller(s.seq_lens[i], std::max<I>(s.query_lens[i], 1)))
      c.add([i, len](CaseSpec& t) { t.seq_lens[i] = len; });
    for (const I q : smaller(s.query_lens[i], 1)) c.add([i, q](CaseSpec& t) { t.query_lens[i] = q; });
  }
}

void heads(Candidates& c) {
  const auto& p = std::get<AttentionParams>(c.base.params);
  const I ratio = p.num_q_heads / std::max<I>(p.num_kv_heads, 1);
  const auto set = [&](I kv, I r) {
    c.add([=](CaseSpec& t) {
      auto& q = std::get<AttentionParams>(t.params);
      q.num_kv_heads = kv, q.num_q_heads = kv * r;
    });
  };
  for (const I kv : smaller(p.num_kv_heads, 1)) set(kv, ratio);
  for (const I r : smaller(ratio, 1)) set(p.num_kv_heads, r);
  for (const I d : {16, 32, 64})
    if (d < p.head_dim) c.add([d](CaseSpec& t) { std::get<AttentionParams>(t.params).head_dim = d; });
  if (p.block_size > 16) c.add([](CaseSpec& t) { std::get<AttentionParams>(t.params).block_size = 16; });
}

void attention_features(Candidates& c) {
  const auto& p = std::get<AttentionParams>(c.base.params);
  const auto param = [&](bool applies, const std::function<void(AttentionParams&)>& change) {
    if (applies) c.add([&](CaseSpec& t) { change(std::get<AttentionParams>(t.params)); });
  };
  param(p.softcap != 0, [](AttentionParams& q) { q.softcap = 0; });
  param(p.window != 0, [](AttentionParams& q) { q.window = 0; });
  param(p.has_sinks, [](AttentionParams& q) { q.has_sinks = false; });
  param(p.k_scale != 1 || p.v_scale != 1, [](AttentionParams& q) { q.k_scale = q.v_scale = 1; });
  c.reduce(&CaseSpec::spare_blocks);
  c.reduce(&CaseSpec::table_pad_cols);
  c.reduce(&CaseSpec::table_rows_before);
  c.reduce(&CaseSpec::table_rows_after);
  c.lower(&CaseSpec::q_token_pad, I{0});
  c.lower(&CaseSpec::block_table_seed, std::uint64_t{0});
  if (c.base.table_poison) c.add([](CaseSpec& t) { t.table_poison = false; });
  if (c.base.kv_layout != KvLayout::kSeparate) c.add([](CaseSpec& t) { t.kv_layout = KvLayout::kSeparate; });
}

void norm_shape(Candidates& c) {
  for (const I r : smaller(c.base.rows, 1)) c.add([r](CaseSpec& t) { t.rows = r; });
  for (const I h : smaller(c.base.hidden, 1)) c.add([h](CaseSpec& t) { t.hidden = h; });
  if (c.base.op == OpKind::kConcat)
    for (const I h : smaller(c.base.hidden_b, 1)) c.add([h](CaseSpec& t) { t.hidden_b = h; });
}

void norm_features(Candidates& c) {
  if (c.base.inplace_output) c.add([](CaseSpec& t) { t.inplace_output = false; });
  if (auto* p = std::get_if<RmsNormParams>(&c.base.params)) {
    if (p->residual) c.add([](CaseSpec& t) { std::get<RmsNormParams>(t.params).residual = false; });
    if (p->weight_mode != WeightMode::kPlain)
      c.add([](CaseSpec& t) { std::get<RmsNormParams>(t.params).weight_mode = WeightMode::kPlain; });
  }
  if (auto* p = std::get_if<DualRmsNormCatParams>(&c.base.params); p && p->weight_mode != WeightMode::kPlain)
    c.add([](CaseSpec& t) { std::get<DualRmsNormCatParams>(t.params).weight_mode = WeightMode::kPlain; });
}

}  // namespace

std::vector<CaseSpec> shrink_candidates(const CaseSpec& s) {
  Candidates c{s, {}};
  if (s.op == OpKind::kAttention) {
    sequences(c);
    heads(c);
    attention_features(c);
  } else {
    norm_shape(c);
    norm_features(c);
  }
  c.reduce(&CaseSpec::row_pad);
  c.reduce(&CaseSpec::base_offset);
  if (s.distribution != Distribution::kNormal)
    c.add([](CaseSpec& t) { t.distribution = Distribution::kNormal; });
  return std::move(c.out);
}

std::string shape_line(const CaseSpec& s) {
  std::string line = fmt::format("{} {}", op_name(s.op), dtype_name(s.act_dtype));
  if (s.op == OpKind::kAttention) {
    const auto& p = std::get<AttentionParams>(s.params);
    line += fmt::format(", kv {}, {} seq (query {}, context {}), heads {}/{}, head_dim {}, block_size {}",
                        dtype_name(s.kv_dtype), s.seq_lens.size(), fmt::join(s.query_lens, "+"),
                        fmt::join(s.seq_lens, "+"), p.num_q_heads, p.num_kv_heads, p.head_dim, p.block_size);
    if (p.window > 0) line += fmt::format(", window {}", p.window);
    if (p.softcap > 0) line += fmt::format(", softcap {:g}", p.softcap);
    if (p.has_sinks) line += ", sinks";
    if (s.table_pad_cols + s.table_rows_before + s.table_rows_after > 0)
      line += fmt::format(", table slice (+{} cols, {} rows above, {} below)", s.table_pad_cols,
                          s.table_rows_before, s.table_rows_after);
    if (s.table_poison) line += ", poisoned table";
    if (s.kv_layout != KvLayout::kSeparate) line += ", shared kv storage";
    if (s.q_token_pad > 0) line += ", q in fused qkv";
  } else {
    line += fmt::format(", {} x {}", s.rows, s.hidden);
    if (s.op == OpKind::kConcat) line += fmt::format("+{}", s.hidden_b);
    if (s.inplace_output) line += ", in place";
    if (const auto* p = std::get_if<RmsNormParams>(&s.params); p && p->residual) line += ", residual";
  }
  if (s.row_pad > 0) line += fmt::format(", row pad {}", s.row_pad);
  if (s.base_offset > 0) line += fmt::format(", offset {}", s.base_offset);
  return line;
}

}  // namespace driftcheck::fuzz
