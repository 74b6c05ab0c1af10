// The naive same-precision baseline of each op and the per-element error model (docs/ORACLE.md).
//
// The baseline is the straightforward algorithm in the activation dtype, as FlashAttention's tests define it:
// every intermediate rounded to the activation dtype, sums accumulated in fp32. Its error against the fp64
// reference is the error scale a same-precision implementation cannot avoid; for attention the oracle
// tolerates twice that (with the error model as floor).
//
// The error model turns the case's inputs into per-element bounds (ErrorModel): fp32 arithmetic error growing
// with the reduction length (gamma_n = n u / (1 - n u), the worst case), each declared extra rounding, and
// for attention the softmax-weighted magnitude of V that every perturbation of the weights is multiplied by.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>

#include "driftcheck/fuzz/oracle.hpp"

namespace driftcheck::fuzz {
namespace {

constexpr double kU32 = 0x1p-24;

double gamma(std::int64_t n, double u) {
  const double nu = static_cast<double>(n) * u;
  return nu / (1.0 - nu);
}

// x rounded once to nearest-even in t. Values inside bf16's or fp16's normal range take a fast path on the
// double's bits (dropping the low mantissa bits with a round-half-even carry is exactly RNE, since x itself
// is exact); fp32 rounds in hardware; everything else (subnormals, overflow, fp8) goes through round_to.
double rnd(DType t, double x) {
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

Tensor f64_tensor(const Shape& shape, const std::vector<double>& v) {
  Tensor t = Tensor::zeros(DType::kF64, shape);
  t.copy_from(v);
  return t;
}

double weight_value(WeightMode m, double w) {
  return m == WeightMode::kPlain ? w : 1.0 + w;
}

// ---------------------------------------------------------------------------------------------------------------
// Row norms: rmsnorm (with optional residual) and the two halves of dual_rmsnorm_cat share one row routine.

struct NormRow {
  std::vector<double> z;  // the normalised input (x, or x + residual exactly)
  std::vector<double> w;  // the effective weight (w or 1 + w), exact
  double eps = 0;
};

NormRow load_row(const Tensor& x, const Tensor* residual, const Tensor& w, WeightMode mode, double eps,
                 std::int64_t r) {
  const std::int64_t h = x.size(1);
  NormRow row;
  row.eps = eps;
  row.z.resize(static_cast<std::size_t>(h));
  row.w.resize(static_cast<std::size_t>(h));
  for (std::int64_t i = 0; i < h; ++i) {
    const double res = residual ? residual->at({r, i}) : 0.0;
    row.z[static_cast<std::size_t>(i)] = x.at({r, i}) + res;
    row.w[static_cast<std::size_t>(i)] = weight_value(mode, w.at({i}));
  }
  return row;
}

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

RowOpSet row_ops(const Case& c) {
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
