// Generators and specs: draw_case is a pure function of (seed, index, op); specs survive JSON; every spec
// (and every shrink of one) materialises into a case validate() accepts; the boundary shapes of
// docs/ORACLE.md section 7 actually appear; values and poison are where the spec says.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck::fuzz {
namespace {

nlohmann::json as_json(const CaseSpec& s) {
  nlohmann::json j;
  to_json(j, s);
  return j;
}

std::vector<CaseSpec> draws(OpKind op, int n, std::uint64_t seed = 7) {
  std::vector<CaseSpec> out;
  for (int i = 0; i < n; ++i) out.push_back(draw_case(op, seed, static_cast<std::uint64_t>(i)).value());
  return out;
}

TEST(DrawCase, IsAFunctionOfSeedIndexAndOp) {
  for (const OpKind op : kAllOps) {
    EXPECT_EQ(as_json(draw_case(op, 3, 11).value()), as_json(draw_case(op, 3, 11).value()));
    std::set<std::string> distinct;
    for (std::uint64_t i = 0; i < 20; ++i) distinct.insert(as_json(draw_case(op, 3, i).value()).dump());
    EXPECT_GT(distinct.size(), 15u) << op_name(op);
    EXPECT_NE(as_json(draw_case(op, 3, 5).value()), as_json(draw_case(op, 4, 5).value()));
  }
}

RC_GTEST_PROP(CaseSpecJson, RoundTrips, ()) {
  const auto op = *rc::gen::elementOf(std::vector<OpKind>(std::begin(kAllOps), std::end(kAllOps)));
  const CaseSpec s = *gen_case_spec(op);
  CaseSpec back;
  from_json(as_json(s), back);
  RC_ASSERT(as_json(back) == as_json(s));
}

TEST(CaseSpecJson, MalformedSpecsNameTheField) {
  const nlohmann::json good = as_json(draw_case(OpKind::kAttention, 1, 1).value());
  const auto message = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    CaseSpec s;
    try {
      from_json(j, s);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message([](auto& j) { j.erase("rows"); }).find("'rows': missing"), std::string::npos);
  EXPECT_NE(message([](auto& j) { j["hidden"] = "wide"; }).find("'hidden'"), std::string::npos);
  EXPECT_NE(message([](auto& j) { j["act_dtype"] = "bf17"; }).find("'act_dtype'"), std::string::npos);
  EXPECT_NE(message([](auto& j) { j["distribution"] = "cauchy"; }).find("'distribution'"), std::string::npos);
  EXPECT_NE(message([](auto& j) { j["params"].erase("block_size"); }).find("'block_size'"),
            std::string::npos);
  EXPECT_NE(message([](auto& j) { j["query_lens"].push_back(1); }).find("'query_lens'"), std::string::npos);
  EXPECT_NE(message([](auto& j) { j["op"] = "gemm"; }).find("'op'"), std::string::npos);
  EXPECT_NE(message([](auto& j) { j["base_offset"] = -1; }).find("'base_offset'"), std::string::npos);
  EXPECT_EQ(message([](auto&) {}), "accepted");
}

TEST(Materialize, EveryDrawnSpecIsAValidCase) {
  for (const OpKind op : kAllOps) {
    for (const auto& s : draws(op, 150)) {
      const Case c = materialize(s);
      EXPECT_NO_THROW(validate(c)) << as_json(s).dump();
    }
  }
}

TEST(Materialize, IsDeterministic) {
  for (const OpKind op : kAllOps) {
    const CaseSpec s = draw_case(op, 9, 2).value();
    const Case a = materialize(s), b = materialize(s);
    for (const auto& [name, t] : a.tensors)
      EXPECT_EQ(t.storage()->bytes, b.tensor(name).storage()->bytes) << name;
  }
}

// The new tokens' K/V inputs are what the cache write stored: the same values where the cache is not fp8;
// fp8, values of the activation dtype that quantise (value / scale, saturating) to the stored codes and are
// spread over the codes' rounding intervals (not the dequantised values themselves).
TEST(Materialize, NewKvInputsQuantiseToTheStoredCache) {
  int fp8_cases = 0, fp8_spread = 0;
  for (const auto& s : draws(OpKind::kAttention, 150)) {
    const Case c = materialize(s);
    const auto& p = c.get<AttentionParams>();
    const std::vector<double> lens = c.tensor("seq_lens").to_f64(),
                              qsl = c.tensor("query_start_loc").to_f64();
    bool spread = false;
    for (const auto& [input, cache, scale] :
         {std::tuple{"k_new", "k_cache", p.k_scale}, std::tuple{"v_new", "v_cache", p.v_scale}}) {
      const Tensor &in = c.tensor(input), &st = c.tensor(cache);
      ASSERT_EQ(in.dtype(), s.act_dtype);
      for (std::size_t q = 0; q < lens.size(); ++q) {
        const auto len = static_cast<std::int64_t>(lens[q]), start = static_cast<std::int64_t>(qsl[q]);
        const std::int64_t ql = static_cast<std::int64_t>(qsl[q + 1]) - start;
        for (std::int64_t pos = std::max<std::int64_t>(0, len - ql); pos < len; ++pos) {
          const auto block = static_cast<std::int64_t>(
              c.tensor("block_table").at({static_cast<std::int64_t>(q), pos / p.block_size}));
          for (std::int64_t g = 0; g < p.num_kv_heads; ++g)
            for (std::int64_t d = 0; d < p.head_dim; ++d) {
              const double v = in.at({start + pos - (len - ql), g, d});
              const double stored = st.at({block, pos % p.block_size, g, d});
              if (std::isnan(stored)) {
                EXPECT_TRUE(std::isnan(v));
              } else if (is_fp8(s.kv_dtype)) {
                ASSERT_EQ(round_to(s.kv_dtype, v / scale, Overflow::kSaturate), stored)
                    << input << " " << as_json(s).dump();
                spread |= v != round_to(s.act_dtype, stored * scale);
              } else {
                ASSERT_EQ(v, stored * scale) << input;
              }
            }
        }
      }
    }
    fp8_cases += is_fp8(s.kv_dtype);
    fp8_spread += spread;
  }
  EXPECT_GT(fp8_cases, 20);
  EXPECT_EQ(fp8_spread, fp8_cases);
}

// Pins the value stream: mt19937_64 and exact Irwin-Hall sums make these bits the same on every platform.
TEST(Materialize, ValuesArePinned) {
  CaseSpec s;
  s.op = OpKind::kRmsNorm;
  s.params = RmsNormParams{};
  s.rows = 1;
  s.hidden = 4;
  s.value_seed = 42;
  const auto x = materialize(s).tensor("x").to_f64();
  // A change here changes every campaign's cases: update only with a note in the change log.
  const std::vector<double> expected{0.20703125, 1.84375, 1.03125, -0.5703125};
  EXPECT_EQ(x, expected);
}

TEST(Materialize, GuardBandsAndUnusedKvSlotsArePoisoned) {
  CaseSpec s = draw_case(OpKind::kAttention, 5, 0).value();
  s.seq_lens = {17};
  s.query_lens = {1};
  s.spare_blocks = 1;
  auto p = std::get<AttentionParams>(s.params);
  p.block_size = 16;
  s.params = p;
  const Case c = materialize(s);
  const Tensor& k = c.tensor("k_cache");
  const auto table = c.tensor("block_table");
  const auto second = static_cast<std::int64_t>(table.at({0, 1}));
  // Slot 1 of the second block is key 17: past seq_len 17, never read by a correct kernel.
  const double poisoned = k.at({second, 1, 0, 0});
  EXPECT_TRUE(!std::isfinite(poisoned) || std::fabs(poisoned) >= 240.0 || std::fabs(poisoned) > 1e4)
      << poisoned;
  EXPECT_TRUE(std::isfinite(k.at({second, 0, 0, 0})));
  const Tensor& o = c.tensor("o");
  const double before = o.storage()->load(o.offset() - 1);
  EXPECT_TRUE(!std::isfinite(before) || std::fabs(before) >= 240.0) << before;
}

// The block table as a slice of a wider table (issue #12): rows table_pad_cols wider than the view, other
// requests' rows around it holding ids of blocks sequences own; with table_poison, every entry no kernel may
// read is outside the cache, while every entry a kernel reads is valid.
TEST(Materialize, BlockTableIsASliceOfAWiderTable) {
  CaseSpec s = draw_case(OpKind::kAttention, 5, 0).value();
  s.seq_lens = {17, 40};
  s.query_lens = {1, 1};
  s.spare_blocks = 1;
  auto p = std::get<AttentionParams>(s.params);
  p.block_size = 16;
  s.params = p;
  s.table_pad_cols = 4;
  s.table_rows_before = 2;
  s.table_rows_after = 1;
  for (const bool poison : {false, true}) {
    s.table_poison = poison;
    const Case c = materialize(s);
    EXPECT_NO_THROW(validate(c));
    const Tensor& t = c.tensor("block_table");
    const std::int64_t blocks = c.tensor("k_cache").size(0);  // 2 + 3 + 1 spare
    ASSERT_EQ(t.shape(), (Shape{2, 3}));
    EXPECT_EQ(t.strides(), (Shape{7, 1}));
    const Storage& st = *t.storage();
    const std::int64_t first = t.offset() - 2 * 7;  // the wider table's first element
    for (std::int64_t r = 0; r < 5; ++r) {
      for (std::int64_t j = 0; j < 7; ++j) {
        const double id = st.load(first + r * 7 + j);
        const bool read = r >= 2 && r < 4 && j < (r == 2 ? 2 : 3);  // blocks sequences 0 and 1 own
        const bool valid = id >= 0 && id < static_cast<double>(blocks);
        EXPECT_TRUE(read || valid != poison) << "row " << r << " col " << j << ": " << id;
        if (read) {
          EXPECT_TRUE(valid) << id;
        }
      }
    }
  }
}

TEST(CaseSpecJson, SpecsWithoutLayoutFieldsReadAsTheDenseLayout) {
  nlohmann::json j = as_json(draw_case(OpKind::kAttention, 1, 1).value());
  for (const char* f : {"table_pad_cols", "table_rows_before", "table_rows_after", "table_poison",
                        "q_token_pad", "kv_layout"})
    j.erase(f);
  CaseSpec s;
  from_json(j, s);
  EXPECT_EQ(s.table_pad_cols + s.table_rows_before + s.table_rows_after + s.q_token_pad, 0);
  EXPECT_FALSE(s.table_poison);
  EXPECT_EQ(s.kv_layout, KvLayout::kSeparate);
  j["kv_layout"] = "paged";
  EXPECT_THROW(from_json(j, s), InvalidArgument);
}

TEST(Materialize, InplaceOutputAliasesTheInput) {
  CaseSpec s;
  s.op = OpKind::kRmsNorm;
  s.params = RmsNormParams{};
  s.rows = 3;
  s.hidden = 96;
  s.row_pad = 5;
  s.base_offset = 3;
  s.inplace_output = true;
  const Case c = materialize(s);
  EXPECT_EQ(c.tensor("y").storage(), c.tensor("x").storage());
  EXPECT_EQ(c.tensor("y").offset(), c.tensor("x").offset());
  EXPECT_EQ(c.tensor("x").strides()[0], 101);
}

// Every shrink RapidCheck would try keeps the spec valid (query_len <= seq_len and friends).
TEST(Shrinking, ShrunkSpecsStayValid) {
  for (const OpKind op : kAllOps) {
    for (std::uint64_t i = 0; i < 6; ++i) {
      auto shrinkable = draw_case(op, 21, i);
      for (int depth = 0; depth < 6; ++depth) {
        auto shrinks = shrinkable.shrinks();
        int tried = 0;
        rc::Maybe<rc::Shrinkable<CaseSpec>> first;
        while (auto next = shrinks.next()) {
          if (!first) first = *next;
          EXPECT_NO_THROW(validate(materialize(next->value()))) << as_json(next->value()).dump();
          if (++tried == 12) break;
        }
        if (!first) break;
        shrinkable = *first;
      }
    }
  }
}

TEST(Generators, BoundaryShapesAppear) {
  std::set<std::int64_t> widths, pads, offsets, block_sizes, seq_lens, ratios, dims, query_lens;
  bool inplace = false, residual = false, eps0 = false, mixed = false, fp8_scaled = false, sinks = false,
       window = false, softcap = false, permuted = false, spare = false, split_edge = false,
       table_strided = false, table_offset = false, table_poison = false, fused_qkv = false;
  std::set<KvLayout> kv_layouts;
  std::set<Distribution> dists;
  for (const auto& s : draws(OpKind::kRmsNorm, 600)) {
    widths.insert(s.hidden);
    pads.insert(s.row_pad);
    offsets.insert(s.base_offset);
    inplace |= s.inplace_output;
    residual |= std::get<RmsNormParams>(s.params).residual;
    eps0 |= std::get<RmsNormParams>(s.params).eps == 0.0;
    dists.insert(s.distribution);
  }
  for (const std::int64_t w : {96, 5125, 4096, 6144, 8192, 7, 257}) EXPECT_TRUE(widths.count(w)) << w;
  EXPECT_TRUE(pads.count(64));
  for (std::int64_t o = 1; o <= 7; ++o) EXPECT_TRUE(offsets.count(o)) << o;
  EXPECT_TRUE(inplace && residual && eps0);
  EXPECT_EQ(dists.size(), 5u);
  for (const auto& s : draws(OpKind::kAttention, 800)) {
    const auto& p = std::get<AttentionParams>(s.params);
    block_sizes.insert(p.block_size);
    ratios.insert(p.num_q_heads / p.num_kv_heads);
    dims.insert(p.head_dim);
    seq_lens.insert(s.seq_lens.begin(), s.seq_lens.end());
    query_lens.insert(s.query_lens.begin(), s.query_lens.end());
    std::set<bool> decode;
    for (const auto q : s.query_lens) decode.insert(q == 1);
    mixed |= decode.size() == 2;
    fp8_scaled |= is_fp8(s.kv_dtype) && (p.k_scale != 1.0 || p.v_scale != 1.0);
    sinks |= p.has_sinks;
    window |= p.window > 0;
    softcap |= p.softcap > 0;
    permuted |= s.block_table_seed != 0;
    spare |= s.spare_blocks > 0;
    split_edge |= s.seq_lens.size() >= 60;
    table_strided |= s.table_pad_cols > 0 && s.seq_lens.size() >= 2;
    table_offset |= s.table_rows_before > 0;
    table_poison |= s.table_poison;
    fused_qkv |= s.q_token_pad > 0;
    kv_layouts.insert(s.kv_layout);
  }
  EXPECT_TRUE(table_strided && table_offset && table_poison && fused_qkv);
  EXPECT_EQ(kv_layouts.size(), 3u);
  // 48 and 512: what aiter unified attention accepts beyond powers of two and head size 256 (its 2D tiles
  // across pages, its 3D assert, its widest tiles).
  for (const std::int64_t b : {16, 32, 48, 64, 128, 256, 544, 784, 1056, 3})
    EXPECT_TRUE(block_sizes.count(b)) << b;
  for (const std::int64_t r : {1, 4, 8, 16}) EXPECT_TRUE(ratios.count(r)) << r;
  for (const std::int64_t d : {64, 128, 512}) EXPECT_TRUE(dims.count(d)) << d;
  for (const std::int64_t l : {15, 16, 17, 255, 256, 257, 511, 512, 513}) EXPECT_TRUE(seq_lens.count(l)) << l;
  for (const std::int64_t q : {1, 2, 4, 8}) EXPECT_TRUE(query_lens.count(q)) << q;
  EXPECT_TRUE(mixed && fp8_scaled && sinks && window && softcap && permuted && spare && split_edge);
}

TEST(Generators, ShapeClassSeparatesModes) {
  std::set<std::string> classes;
  std::set<std::string> modes;
  for (const auto& s : draws(OpKind::kAttention, 200)) {
    classes.insert(shape_class(s));
    modes.insert(shape_class(s).substr(0, shape_class(s).find('/', 5)));
  }
  // Coarse by design (at most 4 modes x 2 x 3 block families x 5 KV formats), yet many of them appear.
  EXPECT_GT(classes.size(), 20u);
  EXPECT_LE(classes.size(), 4u * 2 * 3 * 5);
  EXPECT_EQ(modes, (std::set<std::string>{"attn/decode", "attn/mixed", "attn/prefill", "attn/spec"}));
  const CaseSpec r = draw_case(OpKind::kRmsNorm, 1, 1).value();
  EXPECT_EQ(shape_class(r).rfind("rmsnorm/", 0), 0u) << shape_class(r);
}

}  // namespace
}  // namespace driftcheck::fuzz
