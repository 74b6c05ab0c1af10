// What the naive baseline (baseline.cpp) and the error model (error_model.cpp) both read from a case: the
// format rounding they apply, the rows of the norm family, and the attention case with its per-head keys and
// values. Internal to the oracle.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "driftcheck/fuzz/oracle.hpp"

namespace driftcheck::fuzz::model_internal {

inline constexpr double kU32 = 0x1p-24;

inline double gamma(std::int64_t n, double u) {
  const double nu = static_cast<double>(n) * u;
  return nu / (1.0 - nu);
}

// x rounded once to nearest-even in t. Values inside bf16's or fp16's normal range take a fast path on the
// double's bits (dropping the low mantissa bits with a round-half-even carry is exactly RNE, since x itself
// is exact); fp32 rounds in hardware; everything else (subnormals, overflow, fp8) goes through round_to.
inline double rnd(DType t, double x) {
  if (t == DType::kF32) return static_cast<double>(static_cast<float>(x));
  const int drop = t == DType::kBF16 ? 52 - 7 : t == DType::kF16 ? 52 - 10 : 0;
  const double lo = t == DType::kBF16 ? 0x1p-126 : 0x1p-14;
  const double hi = t == DType::kBF16 ? 0x1.fep127 : 65504.0;
  const double a = std::fabs(x);
  if (drop == 0 || !(a >= lo && a <= hi)) return round_to(t, x);
  std::uint64_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  const std::uint64_t mask = (std::uint64_t{1} << drop) - 1;
  u += (mask >> 1) + ((u >> drop) & 1u);
  u &= ~mask;
  double r = 0;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

inline Tensor f64_tensor(const Shape& shape, const std::vector<double>& v) {
  Tensor t = Tensor::zeros(DType::kF64, shape);
  t.copy_from(v);
  return t;
}

inline double weight_value(WeightMode m, double w) {
  return m == WeightMode::kPlain ? w : 1.0 + w;
}

// ---------------------------------------------------------------------------------------------------------------
// Row norms: rmsnorm (with optional residual) and the two halves of dual_rmsnorm_cat share one row routine.

struct NormRow {
  std::vector<double> z;  // the normalised input (x, or x + residual exactly)
  std::vector<double> w;  // the effective weight (w or 1 + w), exact
  double eps = 0;
};

inline NormRow load_row(const Tensor& x, const Tensor* residual, const Tensor& w, WeightMode mode, double eps,
                        std::int64_t r) {
  const std::int64_t h = x.size(1);
  NormRow row;
  row.eps = eps;
  row.z.resize(static_cast<std::size_t>(h));
  row.w.resize(static_cast<std::size_t>(h));
  if (h == 0) return row;
  // Whole rows at once (decoding is exact: the same values as element by element).
  x.storage()->load_f64(x.index({r, 0}), x.strides()[1], h, row.z.data());
  w.storage()->load_f64(w.index({0}), w.strides()[0], h, row.w.data());
  std::vector<double> res;
  if (residual) {
    res.resize(static_cast<std::size_t>(h));
    residual->storage()->load_f64(residual->index({r, 0}), residual->strides()[1], h, res.data());
  }
  for (std::size_t i = 0; i < row.z.size(); ++i) {
    row.z[i] += residual ? res[i] : 0.0;
    row.w[i] = weight_value(mode, row.w[i]);
  }
  return row;
}

struct RowOp {
  const Tensor* x;
  const Tensor* residual;
  const Tensor* w;
  std::int64_t column;  // first column of this row op in the output
};

struct RowOpSet {
  std::vector<RowOp> parts;
  WeightMode mode;
  double eps;
  std::int64_t rows, width;  // width of the output
  std::string output;
};

inline RowOpSet row_ops(const Case& c) {
  if (c.op == OpKind::kRmsNorm) {
    const auto& p = c.get<RmsNormParams>();
    const Tensor& x = c.tensor("x");
    const Tensor* r = p.residual ? &c.tensor("residual") : nullptr;
    return {{{&x, r, &c.tensor("w"), 0}}, p.weight_mode, p.eps, x.size(0), x.size(1), "y"};
  }
  const auto& p = c.get<DualRmsNormCatParams>();
  const Tensor& e = c.tensor("e");
  const std::int64_t h = e.size(1);
  return {{{&e, nullptr, &c.tensor("w_e"), 0}, {&c.tensor("h"), nullptr, &c.tensor("w_h"), h}},
          p.weight_mode,
          p.eps,
          e.size(0),
          2 * h,
          "out"};
}

// ---------------------------------------------------------------------------------------------------------------
// Attention

struct Attn {
  const Case& c;
  const AttentionParams& p;
  DType act, kv;
  std::int64_t seqs, group;
  std::vector<double> sinks;
  NewKv source;

  explicit Attn(const Case& cs, NewKv src)
      : c(cs),
        p(cs.get<AttentionParams>()),
        act(cs.tensor("o").dtype()),
        kv(cs.tensor("k_cache").dtype()),
        seqs(cs.tensor("seq_lens").size(0)),
        group(p.num_q_heads / p.num_kv_heads),
        source(src) {
    if (p.has_sinks) sinks = cs.tensor("sinks").to_f64();
  }
  std::int64_t seq_len(std::int64_t s) const {
    return static_cast<std::int64_t>(c.tensor("seq_lens").at({s}));
  }
  std::int64_t q_start(std::int64_t s) const {
    return static_cast<std::int64_t>(c.tensor("query_start_loc").at({s}));
  }
  // Stored values (before the kv scale) of the first `len` keys of sequence s, kv head g: [len][D]. One run
  // of D elements per key (a slot's head is a run at the cache's innermost stride).
  std::vector<double> keys(std::string_view cache, std::int64_t s, std::int64_t len, std::int64_t g) const {
    const Tensor& t = c.tensor(cache);
    const Tensor& table = c.tensor("block_table");
    std::vector<double> out(static_cast<std::size_t>(len * p.head_dim));
    for (std::int64_t tok = 0; tok < len; ++tok) {
      const auto block = static_cast<std::int64_t>(table.at({s, tok / p.block_size}));
      t.storage()->load_f64(t.index({block, tok % p.block_size, g, 0}), t.strides()[3], p.head_dim,
                            out.data() + tok * p.head_dim);
    }
    return out;
  }
  // The new tokens of a prefill/extend sequence (query length ql > 1) read from k_new / v_new under
  // NewKv::kInputs (case.hpp): their rows of `x` ([len][D], dequantised) are replaced by the inputs' values.
  void new_tokens(std::string_view input, std::int64_t start, std::int64_t ql, std::int64_t len,
                  std::int64_t g, std::vector<double>& x) const {
    if (source == NewKv::kCache || ql <= 1) return;
    const Tensor& t = c.tensor(input);
    for (std::int64_t tok = std::max<std::int64_t>(0, len - ql); tok < len; ++tok)
      for (std::int64_t d = 0; d < p.head_dim; ++d)
        x[static_cast<std::size_t>(tok * p.head_dim + d)] = t.at({start + tok - (len - ql), g, d});
  }
  // Keys [lo, hi) that query j of a sequence (query length ql, seq_len len) sees (case.hpp semantics).
  std::pair<std::int64_t, std::int64_t> visible(std::int64_t len, std::int64_t ql, std::int64_t j) const {
    const std::int64_t pos = len - ql + j;
    const std::int64_t hi = p.causal ? std::min(pos + 1, len) : len;
    const std::int64_t lo = p.window > 0 ? std::max<std::int64_t>(0, pos - p.window + 1) : 0;
    return {std::min(lo, hi), hi};
  }
  double softcap(double x) const { return p.softcap > 0 ? p.softcap * std::tanh(x / p.softcap) : x; }
};

// One sequence's keys and values for one kv head, dequantised: K transposed ([D][len]: the dot products of
// one query with every key run over contiguous memory, key by key in parallel, each key's own sum still in
// order of d), V as stored ([len][D]).
struct HeadKV {
  std::size_t len = 0;
  std::vector<double> k_t, v;
  const double* k_row(std::size_t d) const { return k_t.data() + d * len; }
};

// Calls f(token, head, q row, head's K and V, [lo, hi)) for every query row and head. Keys and values are
// dequantised (times k_scale / v_scale) once per sequence and kv head, and rounded to the activation dtype
// when `round_to_act` (the naive baseline's dequantisation).
template <class F>
void for_each_row(const Attn& a, bool round_to_act, F&& f) {
  const Tensor& q = a.c.tensor("q");
  const auto dim = static_cast<std::size_t>(a.p.head_dim);
  std::vector<double> qrow(dim);
  const auto dequant = [&](std::vector<double> x, double scale) {
    for (auto& e : x) e = round_to_act ? rnd(a.act, e * scale) : e * scale;
    return x;
  };
  HeadKV kv;
  for (std::int64_t s = 0; s < a.seqs; ++s) {
    const std::int64_t len = a.seq_len(s), start = a.q_start(s), ql = a.q_start(s + 1) - start;
    for (std::int64_t g = 0; g < a.p.num_kv_heads; ++g) {
      auto k = dequant(a.keys("k_cache", s, len, g), a.p.k_scale);
      a.new_tokens("k_new", start, ql, len, g, k);  // values of the activation dtype: rounding them is exact
      kv.len = static_cast<std::size_t>(len);
      kv.k_t.resize(k.size());
      for (std::size_t t = 0; t < kv.len; ++t)
        for (std::size_t d = 0; d < dim; ++d) kv.k_t[d * kv.len + t] = k[t * dim + d];
      kv.v = dequant(a.keys("v_cache", s, len, g), a.p.v_scale);
      a.new_tokens("v_new", start, ql, len, g, kv.v);
      for (std::int64_t j = 0; j < ql; ++j) {
        const auto [lo, hi] = a.visible(len, ql, j);
        for (std::int64_t h = g * a.group; h < (g + 1) * a.group; ++h) {
          q.storage()->load_f64(q.index({start + j, h, 0}), q.strides()[2], a.p.head_dim, qrow.data());
          f(start + j, h, qrow, kv, lo, hi);
        }
      }
    }
  }
}

}  // namespace driftcheck::fuzz::model_internal
