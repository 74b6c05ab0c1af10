// The naive same-precision baseline of each op (docs/ORACLE.md).
//
// The baseline is the straightforward algorithm in the activation dtype, as FlashAttention's tests define it:
// every intermediate rounded to the activation dtype, sums accumulated in fp32. Its error against the fp64
// reference is the error scale a same-precision implementation cannot avoid; for attention the oracle
// tolerates twice that (with the error model, error_model.cpp, as floor).
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "driftcheck/fuzz/oracle.hpp"
#include "model_internal.hpp"

namespace driftcheck::fuzz {
namespace {

using namespace model_internal;

// Naive: z rounded to act (an in-place residual is stored, then read back), fp32 sum of squares, mean and
// rsqrt rounded to act, x * s rounded, times the weight rounded.
void naive_row(const NormRow& row, DType act, bool round_z, std::span<double> y) {
  float ss = 0;
  std::vector<double> z(row.z);
  for (auto& v : z) {
    if (round_z) v = rnd(act, v);
    ss += static_cast<float>(v * v);
  }
  const double ms = rnd(act, static_cast<double>(ss) / static_cast<double>(z.size()));
  const double s = rnd(act, 1.0 / std::sqrt(rnd(act, ms + row.eps)));
  for (std::size_t i = 0; i < z.size(); ++i) y[i] = rnd(act, rnd(act, z[i] * s) * rnd(act, row.w[i]));
}

Outputs naive_rows(const Case& c) {
  const RowOpSet set = row_ops(c);
  const DType act = c.tensor(set.output).dtype();
  std::vector<double> y(static_cast<std::size_t>(set.rows * set.width));
  std::vector<double> res;
  for (const auto& part : set.parts) {
    const std::int64_t h = part.x->size(1);
    for (std::int64_t r = 0; r < set.rows; ++r) {
      const NormRow row = load_row(*part.x, part.residual, *part.w, set.mode, set.eps, r);
      naive_row(row, act, part.residual != nullptr,
                std::span(y).subspan(static_cast<std::size_t>(r * set.width + part.column),
                                     static_cast<std::size_t>(h)));
      if (part.residual)
        for (const double v : row.z) res.push_back(rnd(act, v));
    }
  }
  Outputs out;
  out[set.output] = f64_tensor({set.rows, set.width}, y);
  if (!res.empty()) out["residual"] = f64_tensor({set.rows, set.width}, res);
  return out;
}

struct AttnOut {
  std::vector<double> o, lse;
  Attn a;
  AttnOut(const Case& c, NewKv source) : a(c, source) {
    const std::int64_t tokens = c.tensor("q").size(0);
    o.assign(static_cast<std::size_t>(tokens * a.p.num_q_heads * a.p.head_dim), 0.0);
    lse.assign(static_cast<std::size_t>(tokens * a.p.num_q_heads), -std::numeric_limits<double>::infinity());
  }
  std::size_t row(std::int64_t t, std::int64_t h) const {
    return static_cast<std::size_t>(t * a.p.num_q_heads + h);
  }
  Outputs finish() const {
    const std::int64_t tokens = a.c.tensor("q").size(0);
    Outputs out;
    out["o"] = f64_tensor({tokens, a.p.num_q_heads, a.p.head_dim}, o);
    out["lse"] = f64_tensor({tokens, a.p.num_q_heads}, lse);
    return out;
  }
};

// Naive: K/V dequantised and rounded to act, q.k summed in fp32 and rounded, the logit (scaled, soft-capped)
// rounded, softmax in act (differences, exponentials, their fp32 sum and the quotients rounded), P.V summed
// in fp32 and rounded; lse in fp32.
// The fp32 sums run over keys in parallel (dot products) and over d in parallel (P.V), each element's own sum
// in the order of the definition: key by key for P.V, d by d for q.k.
Outputs naive_attention(const Case& c, NewKv source) {
  AttnOut out(c, source);
  const Attn& a = out.a;
  const std::size_t dim = static_cast<std::size_t>(a.p.head_dim);
  auto r = [&](double x) { return rnd(a.act, x); };
  std::vector<float> dot, acc(dim);
  std::vector<double> logit;
  for_each_row(
      a, true,
      [&](std::int64_t t, std::int64_t h, const std::vector<double>& q, const HeadKV& kv, std::int64_t lo,
          std::int64_t hi) {
        const bool sink = a.p.has_sinks;
        if (hi <= lo && !sink) return;
        const auto first = static_cast<std::size_t>(lo), n = static_cast<std::size_t>(hi - lo);
        dot.assign(n, 0.0f);
        for (std::size_t d = 0; d < dim; ++d) {
          const double qd = q[d], *k = kv.k_row(d) + first;
          for (std::size_t j = 0; j < n; ++j) dot[j] += static_cast<float>(qd * k[j]);
        }
        logit.resize(n);
        double m = sink ? r(a.sinks[static_cast<std::size_t>(h)]) : -std::numeric_limits<double>::infinity();
        for (std::size_t j = 0; j < n; ++j) {
          logit[j] = r(a.softcap(r(static_cast<double>(dot[j]) * a.p.scale)));
          m = std::max(m, logit[j]);
        }
        float sum =
            sink ? static_cast<float>(r(std::exp(r(a.sinks[static_cast<std::size_t>(h)] - m)))) : 0.0f;
        for (auto& l : logit) {
          l = r(std::exp(r(l - m)));
          sum += static_cast<float>(l);
        }
        const double denom = r(sum);
        for (auto& l : logit) l = r(l / denom);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (std::size_t j = 0; j < n; ++j) {
          const double p = logit[j], *v = kv.v.data() + (first + j) * dim;
          for (std::size_t d = 0; d < dim; ++d) acc[d] += static_cast<float>(p * v[d]);
        }
        for (std::size_t d = 0; d < dim; ++d) out.o[out.row(t, h) * dim + d] = r(acc[d]);
        out.lse[out.row(t, h)] = static_cast<float>(m + std::log(static_cast<double>(sum)));
      });
  return out.finish();
}

}  // namespace

Outputs naive_baseline(const Case& c, NewKv source) {
  switch (c.op) {
    case OpKind::kRmsNorm:
    case OpKind::kDualRmsNormCat:
      return naive_rows(c);
    case OpKind::kConcat:
      return reference_concat(c);  // data movement has no rounding to be naive about
    case OpKind::kAttention:
      return naive_attention(c, source);
  }
  return {};
}

}  // namespace driftcheck::fuzz
