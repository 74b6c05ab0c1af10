// The per-element error model of each op (docs/ORACLE.md section 5).
//
// The error model turns the case's inputs into per-element bounds (ErrorModel): fp32 arithmetic error growing
// with the reduction length (gamma_n = n u / (1 - n u), the worst case), each declared extra rounding, and
// for attention the softmax-weighted magnitude of V that every perturbation of the weights is multiplied by.
// The tolerance a backend gets from it adds the rounding terms it declares (rounding_terms.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "driftcheck/fuzz/oracle.hpp"
#include "model_internal.hpp"

namespace driftcheck::fuzz {
namespace {

using namespace model_internal;

double exact_scale(std::span<const double> z, double eps) {
  double ss = 0;
  for (const double v : z) ss += v * v;
  return 1.0 / std::sqrt(ss / static_cast<double>(z.size()) + eps);
}

// Per-element error terms of one normalised row (docs/ORACLE.md, "RMSNorm"), written into the spans of `out`:
//   base: fp32 sum of squares (gamma_H), the mean, eps add, rsqrt (up to 2 ulp in fast versions), the two
//         multiplies: |y| (gamma_H / 2 + 10 u32) since s = (ms + eps)^-1/2 halves the relative error of ms;
//         with a residual also |y(rounded z) - y(z)|: kernels normalise the stored (rounded) sum.
//   intermediate: an extra rounding of z * s to act, then scaled by the weight: |w| * 0.5 ulp(|z s|).
//   scaled, weight, scaled_rounded_z, ref_rounded_z: what the statistical tier evaluates the declared
//         rounding skeleton from (section 9).
struct RowModel {
  std::span<double> base, inter, scaled, weight, scaled_rz, ref_rz;
};

void model_row(const NormRow& row, DType act, bool residual, const RowModel& out) {
  const auto h = static_cast<std::int64_t>(row.z.size());
  const double rel = 0.5 * gamma(h, kU32) + 10 * kU32;
  const double s = exact_scale(row.z, row.eps);
  std::vector<double> zr(row.z);
  for (auto& v : zr) v = rnd(act, v);
  const double sr = exact_scale(zr, row.eps);
  for (std::size_t i = 0; i < row.z.size(); ++i) {
    const double y = row.z[i] * s * row.w[i], yr = zr[i] * sr * row.w[i];
    // fp32 products that land in fp32's subnormal range (fp32 and bf16 activations) round with an absolute
    // error up to 2^-150 each: z * s (then scaled by the weight) and the product with the weight.
    out.base[i] =
        rel * std::fabs(y) + (residual ? std::fabs(yr - y) : 0.0) + (std::fabs(row.w[i]) + 1) * 0x1p-150;
    const double pre = std::fabs(row.z[i] * s) * (1 + rel + 2 * unit_roundoff(act));
    out.inter[i] = std::fabs(row.w[i]) * 0.5 * ulp(act, pre);
    out.scaled[i] = row.z[i] * s;
    out.weight[i] = row.w[i];
    out.scaled_rz[i] = residual ? zr[i] * sr : out.scaled[i];
    out.ref_rz[i] = residual ? yr : y;
  }
}

ErrorModels model_rows(const Case& c, const Outputs& ref) {
  const RowOpSet set = row_ops(c);
  const DType act = c.tensor(set.output).dtype();
  ErrorModel y;
  y.dtype = act;
  const auto n = static_cast<std::size_t>(set.rows * set.width);
  for (auto* v : {&y.base, &y.intermediate, &y.scaled, &y.weight, &y.scaled_rounded_z, &y.ref_rounded_z})
    v->resize(n);
  for (const auto& part : set.parts) {
    const std::int64_t h = part.x->size(1);
    y.row_length = h;
    for (std::int64_t r = 0; r < set.rows; ++r) {
      const auto at = static_cast<std::size_t>(r * set.width + part.column);
      const auto span = [&](std::vector<double>& v) {
        return std::span(v).subspan(at, static_cast<std::size_t>(h));
      };
      const NormRow row = load_row(*part.x, part.residual, *part.w, set.mode, set.eps, r);
      model_row(row, act, part.residual != nullptr,
                {span(y.base), span(y.intermediate), span(y.scaled), span(y.weight), span(y.scaled_rounded_z),
                 span(y.ref_rounded_z)});
    }
  }
  ErrorModels m;
  m[set.output] = std::move(y);
  if (const auto it = ref.find("residual"); it != ref.end()) {
    // z = x + r in fp32 (relative error u32), then rounded once to act.
    ErrorModel res;
    res.dtype = act;
    for (const double v : it->second.to_f64()) res.base.push_back(kU32 * std::fabs(v));
    m["residual"] = std::move(res);
  }
  return m;
}

// The factors a logit error bound e moves softmax weights by (below): exp(2e) and expm1(2e). The same for
// every element of a query row, so computed once per row.
struct LogitError {
  double exp_2e, expm1_2e;
  explicit LogitError(double e) : exp_2e(std::exp(2 * e)), expm1_2e(std::expm1(2 * e)) {}
};

// One output element's softmax-weighted view of V (docs/ORACLE.md, "Attention"): M_d = sum_t p_t |v_td|, the
// largest |v_td| over the visible keys, and the width of the hull [min(0, min_t v_td), max(0, max_t v_td)].
struct SoftmaxRow {
  double mw, vmax, hull;

  // How far o_d = sum_t p_t v_td can move when every logit moves by at most e: each weight by a factor within
  // [exp(-2e), exp(2e)] (numerator and normaliser), so o_d by at most expm1(2e) M_d; and, whatever the
  // weights, both o_d and the reference lie in the hull (weights are >= 0 and sum to at most 1, a sink
  // taking the rest), so never by more than its width. The second bound keeps the term finite where the
  // first overflows (fp8 K rounded to the activation dtype with logits x1024: 2e in the hundreds).
  double shift(const LogitError& e) const { return mw == 0 ? 0.0 : std::min(e.expm1_2e * mw, hull); }
  // sum_t p~_t |v_td| for weights moved that way: at most exp(2e) M_d, and at most max |v_td| (they sum to
  // 1).
  double magnitude(const LogitError& e) const { return mw == 0 ? 0.0 : std::min(e.exp_2e * mw, vmax); }
};

// An infinite reference o_d = sum_t p_t v_td comes from the keys whose v_td is that infinity. A kernel
// multiplies each by its own P (fp32, or rounded to the activation dtype), formed from logits off by at most
// e (both the key's and the max: a factor within exp(+-2e)), possibly already normalised (kernels that divide
// before P.V: the ROCm custom and aiter pa kernels) and possibly through rescales that only make it smaller
// (each factor <= 1). The smallest weight any of these schedules may give the strongest such key is its
// normalised weight p_t / z moved down by exp(2e) and a few roundings of exp and the rescales (16 u32).
double inf_log_weight(const std::vector<double>& weight, double z, const std::vector<double>& v,
                      std::int64_t lo, std::size_t dim, std::size_t d, double inf, double e) {
  double strongest = 0;
  for (std::size_t j = 0; j < weight.size(); ++j)
    if (v[(static_cast<std::size_t>(lo) + j) * dim + d] == inf)
      strongest = std::max(strongest, weight[j] / z);
  return std::log(strongest) - 2 * e - 16 * kU32;
}

// One query row's logits over its visible keys (unrounded, as the error model reads them): G = max_t |scale|
// sum_d |q_d k_td|, S = max |logit|, the softmax weights exp(logit - m) and their sum z (a sink included).
// The dot products run over all keys at once, d by d: each key's sums keep the order of d.
struct RowLogits {
  std::vector<double> weight, dot, mag, k1;
  double g_max = 0, s_max = 0, z = 0, k1_max = 0;  // k1_max = max_t sum_d |k_td|

  void compute(const Attn& a, const std::vector<double>& q, const HeadKV& kv, std::int64_t lo,
               std::int64_t hi, std::int64_t h) {
    const auto first = static_cast<std::size_t>(lo), n = static_cast<std::size_t>(hi - lo);
    dot.assign(n, 0.0);
    mag.assign(n, 0.0);
    k1.assign(n, 0.0);
    for (std::size_t d = 0; d < q.size(); ++d) {
      const double qd = q[d], *k = kv.k_row(d) + first;
      for (std::size_t j = 0; j < n; ++j) {
        const double x = qd * k[j];
        dot[j] += x;
        mag[j] += std::fabs(x);
        k1[j] += std::fabs(k[j]);
      }
    }
    k1_max = n == 0 ? 0.0 : *std::max_element(k1.begin(), k1.end());
    const double ks = std::fabs(a.p.scale);
    double m =
        a.p.has_sinks ? a.sinks[static_cast<std::size_t>(h)] : -std::numeric_limits<double>::infinity();
    g_max = s_max = 0;
    weight.resize(n);
    for (std::size_t j = 0; j < n; ++j) {
      weight[j] = a.softcap(a.p.scale * dot[j]);
      g_max = std::max(g_max, ks * mag[j]);
      s_max = std::max(s_max, std::fabs(weight[j]));
      m = std::max(m, weight[j]);
    }
    z = a.p.has_sinks ? std::exp(a.sinks[static_cast<std::size_t>(h)] - m) : 0.0;
    for (auto& l : weight) z += (l = std::exp(l - m));
  }
};

// Per element d of one query row, over its visible keys in order: M_d = sum_t p_t |v_td|, max_t |v_td|, the
// hull's ends, and the statistical tier's sums of p_t^2 v_td^2, p_t^2 |v_td| and p_t^2 (the last the same for
// every d). Accumulated key by key over all d at once: each element's sums keep the order of the keys.
struct WeightedV {
  std::vector<double> mw, vmax, v_lo, v_hi, p2v2, p2v;
  double p2 = 0;

  void accumulate(const std::vector<double>& weight, double z, const HeadKV& kv, std::size_t first,
                  std::size_t dim) {
    for (auto* x : {&mw, &vmax, &v_lo, &v_hi, &p2v2, &p2v}) x->assign(dim, 0.0);
    p2 = 0;
    for (std::size_t j = 0; j < weight.size(); ++j) {
      const double pt = weight[j] / z, pt2 = pt * pt, *v = kv.v.data() + (first + j) * dim;
      p2 += pt2;
      for (std::size_t d = 0; d < dim; ++d) {
        const double vs = v[d], vd = std::fabs(vs);
        mw[d] += pt * vd;
        vmax[d] = std::max(vmax[d], vd);
        v_lo[d] = std::min(v_lo[d], vs);
        v_hi[d] = std::max(v_hi[d], vs);
        p2v2[d] += pt2 * vd * vd;
        p2v[d] += pt2 * vd;
      }
    }
  }
};

// docs/ORACLE.md, "Attention": per query row, n visible keys, G = max_t |scale k_scale| sum_d |q_d k_td|,
// S = max |logit|, M_d = sum_t p_t |v_td| v_scale (the softmax-weighted magnitude, >= |o_d|).
ErrorModels model_attention(const Case& c, const Outputs& ref, const Outputs& naive, NewKv source) {
  const Attn a(c, source);
  const auto dim = static_cast<std::size_t>(a.p.head_dim);
  const double ua = unit_roundoff(a.act), sub = 0.5 * ulp(a.act, 0.0);
  const bool fp8 = is_fp8(a.kv);
  ErrorModel o, lse;
  o.dtype = a.act;
  lse.dtype = DType::kF32;
  const std::size_t n_o = c.tensor("o").numel() > 0 ? static_cast<std::size_t>(c.tensor("o").numel()) : 0;
  for (auto* v :
       {&o.base, &o.p_rounding, &o.kv_dequant_rounding, &o.partials_rounding, &o.baseline, &o.typical_p,
        &o.typical_kv, &o.variance_p, &o.variance_kv, &o.fp8_mfma_rounding, &o.fp8_logit_error})
    v->assign(n_o, 0);
  // fp8 MFMAs (Numerics::fp8_mfma_decode): q and P rounded to the cache's format, u8 its unit roundoff, sub8
  // half its smallest subnormal.
  const double u8 = fp8 ? unit_roundoff(a.kv) : 0.0, sub8 = fp8 ? 0.5 * ulp(a.kv, 0.0) : 0.0;
  o.fp8_p_underflow = sub8;
  o.inf_log_weight.assign(n_o, -std::numeric_limits<double>::infinity());
  const std::size_t n_l = n_o / std::max<std::size_t>(dim, 1);
  for (auto* v :
       {&lse.base, &lse.p_rounding, &lse.kv_dequant_rounding, &lse.baseline, &lse.fp8_mfma_rounding})
    v->assign(n_l, 0);
  // Which rows belong to prefill/extend sequences (query length > 1): Numerics::kv_dequant_rounded_prefill.
  o.prefill_row.assign(n_o, 0);
  lse.prefill_row.assign(n_l, 0);
  {
    const std::vector<double> qsl = c.tensor("query_start_loc").to_f64();
    for (std::size_t s = 0; s + 1 < qsl.size(); ++s) {
      if (qsl[s + 1] - qsl[s] <= 1) continue;
      for (auto t = static_cast<std::size_t>(qsl[s]); t < static_cast<std::size_t>(qsl[s + 1]); ++t)
        for (std::size_t h = 0; h < static_cast<std::size_t>(a.p.num_q_heads); ++h) {
          const std::size_t row = t * static_cast<std::size_t>(a.p.num_q_heads) + h;
          if (row >= n_l) continue;
          lse.prefill_row[row] = 1;
          std::fill_n(o.prefill_row.begin() + static_cast<std::ptrdiff_t>(row * dim), dim, std::uint8_t{1});
        }
    }
  }
  const auto ref_o = ref.at("o").to_f64(), ref_l = ref.at("lse").to_f64();
  const auto nv_o = naive.at("o").to_f64(), nv_l = naive.at("lse").to_f64();
  RowLogits rl;
  WeightedV wv;
  for_each_row(
      a, false,
      [&](std::int64_t t, std::int64_t h, const std::vector<double>& q, const HeadKV& kv, std::int64_t lo,
          std::int64_t hi) {
        const std::size_t row = static_cast<std::size_t>(t * a.p.num_q_heads + h);
        double q1 = 0;
        for (const double x : q) q1 += std::fabs(x);
        rl.compute(a, q, kv, lo, hi, h);
        const std::vector<double>& logit = rl.weight;
        const double g_max = rl.g_max, s_max = rl.s_max, z = rl.z;
        wv.accumulate(logit, z, kv, static_cast<std::size_t>(lo), dim);
        const auto n = hi - lo;
        const double ds = (gamma(a.p.head_dim, kU32) + 4 * kU32) * g_max + 8 * kU32 * (s_max + a.p.softcap);
        const double dk = fp8 ? ua * g_max + std::fabs(a.p.scale) * q1 * sub : 0.0;
        // q rounded to fp8 (decode rows): |q^_d - q_d| <= u8 |q_d| + sub8, so every logit moves by at most
        // |scale| sum_d (u8 |q_d| + sub8) |k_td| (k dequantised: k_scale is applied after the dot).
        const bool decode = fp8 && lse.prefill_row[row] == 0;
        // The fp32 dot of the rounded q has its own error bound, ds's on G moved by at most dq (|q^_d| <=
        // |q_d| + u8 |q_d| + sub8): (gamma_D + 4 u32) dq more.
        const double dq = decode ? (u8 * g_max + std::fabs(a.p.scale) * sub8 * rl.k1_max) *
                                       (1 + gamma(a.p.head_dim, kU32) + 4 * kU32)
                                 : 0.0;
        double row_naive = 0;
        const double c_base = (5.0 * static_cast<double>(n) + 32) * kU32;
        const LogitError e1(ds), e2(ds + dk), e1q(ds + dq), e3(ds + dk + dq);
        const double grow = std::exp(std::min(4 * (ds + dk), 700.0));
        for (std::size_t d = 0; d < dim; ++d) {
          const double mw = wv.mw[d], vmax = wv.vmax[d], v_lo = wv.v_lo[d], v_hi = wv.v_hi[d],
                       p2v2 = wv.p2v2[d], p2v = wv.p2v[d], p2 = wv.p2;
          const std::size_t i = row * dim + d;
          if (std::isinf(ref_o[i]))
            o.inf_log_weight[i] = inf_log_weight(logit, z, kv.v, lo, dim, d, ref_o[i], ds + dk);
          const SoftmaxRow sr{mw, vmax, v_hi - v_lo};
          // The relative terms (exp, rescales, sums; P, partials rounded) scale the weights the logit error
          // left, whose weighted magnitude is m1 (m2 with the fp8 rounding's logit error on top).
          const double m1 = sr.magnitude(e1), m2 = sr.magnitude(e2);
          o.base[i] = sr.shift(e1) + c_base * m1;
          o.p_rounding[i] = ua * m1 + static_cast<double>(n) * sub * vmax;
          // With both, the logits are off by ds + dk: this term is what that adds to base's shift(ds), and to
          // every relative term through m2 >= m1.
          o.kv_dequant_rounding[i] =
              fp8 ? ua * m2 + sub + (sr.shift(e2) - sr.shift(e1)) + (c_base + 2 * ua) * (m2 - m1) : 0.0;
          o.partials_rounding[i] = ua * m1 + sub;
          if (decode) {
            // fp8 MFMAs: the logits are off by dq more, on top of ds (Ta) or of ds + dk when the KV term is
            // declared too (Tb; shift is convex but capped by the hull, so neither alone covers both); the
            // relative terms of base, P, partials and V (c_base + 3 u_a) grow with the magnitude; P rounded
            // to fp8 adds u8 per weight and sub8 absolute per key (in partition-normalised units, <= 1 of the
            // global weight).
            const double m1q = sr.magnitude(e1q), m3 = sr.magnitude(e3);
            const double rel = c_base + 3 * ua, per_key = static_cast<double>(n) * sub8 * vmax;
            const double ta = (sr.shift(e1q) - sr.shift(e1)) + rel * (m1q - m1) + u8 * m1q + per_key;
            const double tb = (sr.shift(e3) - sr.shift(e2)) + rel * (m3 - m2) + u8 * m3 + per_key;
            o.fp8_mfma_rounding[i] = std::max(ta, tb);
            o.fp8_logit_error[i] = dq;
          }
          // Statistical tier (section 9): the same terms split into what stays worst case and the rounding
          // errors taken as independent, mean zero, each within u_a of its weight (hypothesis H). P rounded:
          // c_t = u_a p~_t (|v_td| + |o_d|) (kernels normalise by the sum of unrounded or of rounded P);
          // V rounded: c_t = u_a p~_t |v_td|; p~_t <= exp(2 e) p_t for the weights the logit error left.
          const double od = std::isfinite(ref_o[i]) ? std::fabs(ref_o[i]) : 0.0;
          o.typical_p[i] = static_cast<double>(n) * sub * vmax;
          o.variance_p[i] = ua * ua * grow * (p2v2 + 2 * od * p2v + od * od * p2);
          if (fp8) {
            o.typical_kv[i] = sub + (sr.shift(e2) - sr.shift(e1)) + (c_base + 2 * ua) * (m2 - m1);
            o.variance_kv[i] = ua * ua * grow * p2v2;
          }
          if (std::isfinite(nv_o[i]) && std::isfinite(ref_o[i]))
            row_naive = std::max(row_naive, std::fabs(nv_o[i] - ref_o[i]));
        }
        for (std::size_t d = 0; d < dim; ++d) o.baseline[row * dim + d] = row_naive;
        // A row that sees no key has lse = -inf, judged by the NaN/Inf policy: no tolerance term for it.
        const double lse_mag = std::isfinite(ref_l[row]) ? std::fabs(ref_l[row]) : 0.0;
        lse.base[row] = ds + (2.0 * static_cast<double>(n) + 16) * kU32 + 2 * kU32 * lse_mag;
        lse.p_rounding[row] = ua;
        lse.kv_dequant_rounding[row] = dk;
        lse.fp8_mfma_rounding[row] = dq;
        if (std::isfinite(nv_l[row]) && std::isfinite(ref_l[row]))
          lse.baseline[row] = std::fabs(nv_l[row] - ref_l[row]);
      });
  ErrorModels out;
  out["o"] = std::move(o);
  out["lse"] = std::move(lse);
  return out;
}

}  // namespace

ErrorModels error_model(const Case& c, const Outputs& reference, const Outputs& baseline, NewKv source) {
  switch (c.op) {
    case OpKind::kRmsNorm:
    case OpKind::kDualRmsNormCat:
      return model_rows(c, reference);
    case OpKind::kConcat: {
      ErrorModels m;
      ErrorModel& out = m["out"];
      out.dtype = c.tensor("out").dtype();
      out.exact = true;
      return m;
    }
    case OpKind::kAttention:
      return model_attention(c, reference, baseline, source);
  }
  return {};
}

}  // namespace driftcheck::fuzz
