#include "twin_fa_varlen.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace driftcheck::twin {
namespace {

constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// tl.exp on the merge kernel's fp32 values, as the other twins model it: exp2(x * log2(e)).
float fast_exp(float x) {
  return std::exp2(x * kLog2e);
}

}  // namespace

FaPartial fa_varlen_row(DType act, const float* q, const float* k, const float* v, std::int64_t d,
                        std::int64_t lo, std::int64_t hi, float qk_log2, std::int64_t tile, float scale,
                        float softcap) {
  FaPartial r;
  r.o.assign(static_cast<std::size_t>(d), 0.0f);
  if (hi < lo) {
    r.lse = kNegInf;
    return r;
  }
  std::vector<float> acc(static_cast<std::size_t>(d), 0.0f), s(static_cast<std::size_t>(tile));
  float m = kNegInf, l = 0.0f;
  for (std::int64_t t0 = lo; t0 <= hi; t0 += tile) {
    const std::int64_t t1 = std::min(hi + 1, t0 + tile);
    float tile_m = m;
    for (std::int64_t t = t0; t < t1; ++t) {
      float dot = 0.0f;
      for (std::int64_t i = 0; i < d; ++i) dot += q[i] * k[t * d + i];
      s[static_cast<std::size_t>(t - t0)] =
          softcap > 0.0f ? softcap * std::tanh(dot * scale / softcap) * kLog2e : dot * qk_log2;
      tile_m = std::fmax(tile_m, s[static_cast<std::size_t>(t - t0)]);
    }
    const float alpha = std::exp2(m - tile_m);
    l *= alpha;
    for (float& a : acc) a *= alpha;
    m = tile_m;
    for (std::int64_t t = t0; t < t1; ++t) {
      const float p = std::exp2(s[static_cast<std::size_t>(t - t0)] - m);
      l += p;
      const float pr = round_act(act, p);  // P converted to act for the P.V MFMA
      for (std::int64_t i = 0; i < d; ++i) acc[static_cast<std::size_t>(i)] += pr * v[t * d + i];
    }
  }
  for (std::int64_t i = 0; i < d; ++i)
    r.o[static_cast<std::size_t>(i)] = round_act(act, acc[static_cast<std::size_t>(i)] / l);
  r.lse = (m + std::log2(l)) * kLn2;
  return r;
}

float merge_attn_states_row(DType act, const FaPartial& prefix, const FaPartial& suffix, float* out) {
  const auto finite_or_neg_inf = [](float lse) { return lse == -kNegInf ? kNegInf : lse; };
  const float p_lse = finite_or_neg_inf(prefix.lse), s_lse = finite_or_neg_inf(suffix.lse);
  const float m = std::fmax(p_lse, s_lse);
  const float p_se = fast_exp(p_lse - m), s_se = fast_exp(s_lse - m);
  const float out_se = p_se + s_se;
  const float p_scale = p_se / out_se, s_scale = s_se / out_se;
  for (std::size_t i = 0; i < prefix.o.size(); ++i)
    out[i] = round_act(act, std::fma(prefix.o[i], p_scale, suffix.o[i] * s_scale));  // contracted
  return std::log(out_se) + m;
}

}  // namespace driftcheck::twin
