// What the backend tests share (tests/*_twins_test.cpp, registry_test.cpp, mutants_test.cpp): running a
// backend on a clone of a case, the worst error over a tolerance derived from the roundings a twin declares,
// the cases each family is checked on, and the probe cases that expose one rounding or one bug.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include "case_builders.hpp"
#include "driftcheck/device/backend.hpp"
#include "driftcheck/device/builtin.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/device/twin_common.hpp"
#include "driftcheck/device/twin_norm.hpp"
#include "driftcheck/fuzz/known_findings.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/spec.hpp"
#include "driftcheck/reference/reference.hpp"

namespace driftcheck::twin_checks {

using builders::AttentionSpec;

using builders::Layout;

inline const Backend& get(std::string_view name) {
  const Backend* b = registry().find(name);
  if (b == nullptr) throw std::runtime_error("backend not registered: " + std::string(name));
  return *b;
}

// ---- helpers

inline Case run_clone(const Backend& b, const Case& c) {
  Case out = c.clone();
  b.run(out);
  return out;
}

// True when any byte of any output storage (guard bands included) differs.
inline bool outputs_differ(const Case& a, const Case& b) {
  for (const std::string& name : op_signature(a).outputs) {
    if (a.tensor(name).storage()->bytes != b.tensor(name).storage()->bytes) return true;
  }
  return false;
}

// The per-element tolerance of an output given its name and reference value.
using Bound = std::function<double(const std::string&, double)>;

// Largest |out - ref| / bound over every output element (infinity for a NaN or an unmatched infinity);
// `where` names the worst element.
inline double worst_ratio(const Case& ran, const Outputs& ref, const Bound& bound, std::string* where) {
  double worst = 0;
  for (const auto& [name, expected] : ref) {
    const std::vector<double> got = ran.tensor(name).to_f64();
    const std::vector<double> want = expected.to_f64();
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double err = std::isinf(want[i]) && got[i] == want[i] ? 0.0 : std::fabs(got[i] - want[i]);
      const double ratio = std::isnan(err) ? INFINITY : err / bound(name, want[i]);
      if (ratio > worst) {
        worst = ratio;
        *where = name + "[" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " +
                 std::to_string(want[i]);
      }
    }
  }
  return worst;
}

// ---- norm twins against the reference

// Tolerance from the declared roundings: each rounding to the output format costs at most u relative to the
// value it rounds (no cancellation happens after the reduction, so relative bounds hold per element); a
// rounded residual z (fused add) perturbs the scale by at most one more u; the fp32 reduction of H squares
// costs at most H * 2^-24 in the scale (plus a few fp32 ops); R * denorm_min covers results in the subnormal
// range, where rounding errors are absolute.
inline double norm_bound(const Numerics& n, DType act, std::int64_t h, bool residual, double ref) {
  const double u = unit_roundoff(act);
  const double rel = (n.output_roundings + (residual ? 1 : 0)) * u + static_cast<double>(h + 8) * 0x1p-24;
  const double tiny = act == DType::kBF16 ? 0x1p-133 : 0x1p-24;
  return rel * std::fabs(ref) + n.output_roundings * tiny;
}

// Runs `b` on c and returns its worst ratio against the reference under the tolerance `declared` declares.
inline double norm_ratio(const Backend& b, const Numerics& declared, const Case& c, std::string* where) {
  const Tensor& out = c.has("y") ? c.tensor("y") : c.tensor("out");
  const DType act = out.dtype();
  const std::int64_t h = c.has("x") ? c.tensor("x").size(1) : c.tensor("e").size(1);
  const bool res = c.has("residual");
  return worst_ratio(
      run_clone(b, c), reference(c),
      [&](const std::string& name, double r) {
        // The residual output is x + r rounded once.
        return name == "residual" ? unit_roundoff(act) * std::fabs(r) : norm_bound(declared, act, h, res, r);
      },
      where);
}

struct NormCase {
  std::string label;
  Case c;
};

inline std::vector<NormCase> rmsnorm_cases() {
  std::vector<NormCase> v;
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (WeightMode mode : {WeightMode::kPlain, WeightMode::kOnePlus}) {
      for (bool residual : {false, true}) {
        RmsNormParams p;
        p.eps = 1e-5;
        p.weight_mode = mode;
        p.residual = residual;
        const std::string label = std::string(dtype_name(t)) + (residual ? "/residual" : "") +
                                  (mode == WeightMode::kOnePlus ? "/1+w" : "");
        v.push_back({label + "/7", builders::rmsnorm_case(2, 7, t, p, 10)});  // one partial warp
        v.push_back({label + "/96", builders::rmsnorm_case(3, 96, t, p, 11)});
        v.push_back({label + "/5125/strided", builders::rmsnorm_case(2, 5125, t, p, 12, Layout{7, 3, 5})});
        v.push_back({label + "/4096/aligned", builders::rmsnorm_case(2, 4096, t, p, 13, Layout{8, 8, 8})});
      }
    }
  }
  return v;
}

inline bool reason_has(const Support& s, std::string_view text) {
  return !s.ok && s.reason.find(text) != std::string::npos;
}

// Numerics tests run the twins with their known upstream defects repaired (a fault on misaligned rows, an
// unmasked page tail, ...): those are checked apart, here the rounding model is.
inline const Backend& numerics_of(const Backend& b) {
  static std::map<std::string, std::unique_ptr<Backend>, std::less<>> repaired;
  auto it = repaired.find(b.name());
  if (it == repaired.end())
    it = repaired.emplace(b.name(), fuzz::repaired_backend(fuzz::builtin_known_findings(), b)).first;
  return it->second ? *it->second : b;
}

// ---- support

inline AttentionSpec attn_spec(DType act, DType kv, std::int64_t block_size) {
  AttentionSpec s;
  s.params.num_q_heads = 4;
  s.params.num_kv_heads = 2;
  s.params.head_dim = 64;
  s.params.block_size = block_size;
  s.params.scale = 0.125;
  s.q_dtype = act;
  s.kv_dtype = kv;
  s.query_lens = {1, 5, 1};
  s.seq_lens = {37, 20, 300};
  s.spare_blocks = 2;
  s.shuffle_blocks = true;
  return s;
}

inline Support supports(std::string_view backend, const AttentionSpec& s) {
  return get(backend).supports(builders::attention_case(s, 1));
}

// ROCM_AITER_FA's twin declines, with the reason, what it does not model: extend rows without the new tokens'
// inputs, fp8 caches on decode rows that reach paged_attention_v1 (q and P quantised to fp8 there). Softcap
// runs (paged_attention_v1's LogitsSoftCap, the unified kernel's on windowed decode, dropped on prefill and
// extend), and fp8 windowed decode (the unified kernel).
inline Case with_new_kv(const AttentionSpec& s, std::uint64_t seed);

// The case of spec s with the new tokens' K/V inputs (k_new, v_new) derived from its caches, as generated
// cases carry them.
inline Case with_new_kv(const AttentionSpec& s, std::uint64_t seed) {
  Case c = builders::attention_case(s, seed);
  fuzz::add_new_kv(c, seed);
  return c;
}

// ---- attention twins against the reference

inline std::vector<AttentionSpec> attention_specs() {
  std::vector<AttentionSpec> v;
  for (DType act : {DType::kBF16, DType::kF16}) {
    for (DType kv : {act, DType::kF8E4M3FN, DType::kF8E4M3FNUZ, DType::kF8E5M2}) {
      for (std::int64_t bs : {16, 32, 64}) {
        AttentionSpec s = attn_spec(act, kv, bs);
        if (is_fp8(kv)) {
          s.params.k_scale = 0.5;
          s.params.v_scale = 2.0;
        }
        v.push_back(s);
        s.query_lens = {1, 1, 1};  // decode only: Triton's split-KV path, partitioned decode kernels
        v.push_back(s);
      }
    }
  }
  for (DType act : {DType::kBF16, DType::kF16}) {
    AttentionSpec d = attn_spec(act, act, 16);
    d.query_lens = {1, 1, 1};
    d.params.num_q_heads = 16;  // GQA 8: ROCM_ATTN's mfma16 kernel
    v.push_back(d);
    d.params.num_q_heads = 4;
    d.params.window = 40;  // decode with a window and nothing else (aiter_fa: the unified kernel)
    v.push_back(d);
  }
  AttentionSpec f = attn_spec(DType::kBF16, DType::kBF16, 16);
  f.params.window = 9;
  f.params.softcap = 5.0;
  f.params.has_sinks = true;
  f.q_stddev = 3.0;
  v.push_back(f);
  f.query_lens = {1, 1, 1};
  v.push_back(f);
  f.params.causal = false;
  f.params.window = 0;
  v.push_back(f);
  f.query_lens = {3, 20, 2};  // non-causal prefill
  v.push_back(f);
  // Prefill and extend only (ROCM_ATTN's prefix prefill): two query blocks of 128 rows, a window and sinks,
  // a head size the decode kernels lack with e5m2, GQA 8 with fnuz.
  AttentionSpec pf = attn_spec(DType::kBF16, DType::kBF16, 16);
  pf.query_lens = {3, 150, 2};
  pf.seq_lens = {3, 300, 40};
  v.push_back(pf);
  pf.params.window = 20;
  pf.params.has_sinks = true;
  pf.q_stddev = 3.0;
  v.push_back(pf);
  AttentionSpec e5 = attn_spec(DType::kF16, DType::kF8E5M2, 32);
  e5.params.head_dim = 96;
  e5.params.k_scale = 0.5;
  e5.params.v_scale = 2.0;
  e5.query_lens = {7, 64, 65};
  e5.seq_lens = {7, 100, 200};
  v.push_back(e5);
  AttentionSpec g8 = attn_spec(DType::kF16, DType::kF8E4M3FNUZ, 16);
  g8.params.num_q_heads = 16;
  g8.params.k_scale = 0.75;
  g8.params.v_scale = 1.25;
  g8.query_lens = {7, 64, 65};
  g8.seq_lens = {7, 100, 200};
  v.push_back(g8);
  // Decode rows ROCM_ATTN sends to its Triton decode kernel: fp8 with a window (dequantised to act), e5m2
  // with head size 96, GQA 32 with sinks.
  AttentionSpec td = attn_spec(DType::kBF16, DType::kF8E4M3FN, 16);
  td.query_lens = {1, 1, 1};
  td.params.window = 40;
  td.params.k_scale = 0.5;
  td.params.v_scale = 2.0;
  v.push_back(td);
  td.params.window = 0;
  td.kv_dtype = DType::kF8E5M2;
  td.params.head_dim = 96;
  v.push_back(td);
  // ROCM_AITER_FA's windowed extend (extend_for_sliding_window: one pass over the window gathered from the
  // cache) with fp8 and non-power-of-two scales.
  AttentionSpec swa = attn_spec(DType::kBF16, DType::kF8E4M3FN, 16);
  swa.query_lens = {3, 5, 2};
  swa.params.window = 12;
  swa.params.k_scale = 0.75;
  swa.params.v_scale = 1.25;
  v.push_back(swa);
  AttentionSpec gs = attn_spec(DType::kF16, DType::kF16, 32);
  gs.query_lens = {1, 4, 1};
  gs.params.num_q_heads = 64;
  gs.params.has_sinks = true;
  v.push_back(gs);
  return v;
}

// Unused slots carry NaN (the builders poison them); max_abs must skip those.
inline double finite_max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_f64())
    if (std::isfinite(v)) m = std::max(m, std::fabs(v));
  return m;
}

// Tolerance from the declared numerics, per element of o, relative to the largest |v| the row can mix (o is a
// convex combination of V rows): P rounded costs u, a rounded partial output u, the output rounding u |o|.
// KV dequantised to the activation dtype perturbs every logit by at most u * scale * sum_i |q_i k_i| <= u *
// scale * |q|_1 * max|k| (times k_scale), which moves the softmax weights by at most expm1(2x) that; V
// rounded costs another u. fp8 MFMAs (decode rows of an fp8 cache: q and P rounded to the cache's fp8, unit
// roundoff u8, half-subnormal s8) perturb every logit by at most (u8 |q|_1 + s8 D) * scale * max|k| and P by
// u8 relative or s8 absolute per key. 1e-5 covers fp32 arithmetic (exp, sums of at most a few hundred terms).
struct AttnBound {
  double o, lse;
};

inline AttnBound attention_bound(const Numerics& n, const Case& c) {
  const auto& p = c.get<AttentionParams>();
  const double u = unit_roundoff(c.tensor("o").dtype());
  const double vmax = finite_max_abs(c.tensor("v_cache")) * p.v_scale;
  double qmax_l1 = 0;
  const std::vector<double> q = c.tensor("q").to_f64();
  for (std::size_t row = 0; row < q.size(); row += static_cast<std::size_t>(p.head_dim)) {
    double l1 = 0;
    for (std::int64_t i = 0; i < p.head_dim; ++i) l1 += std::fabs(q[row + static_cast<std::size_t>(i)]);
    qmax_l1 = std::max(qmax_l1, l1);
  }
  const double kmax = finite_max_abs(c.tensor("k_cache")) * p.k_scale;
  // Dequantisation rounds nothing when the cache already holds activation-dtype values at scale 1.
  const DType kv = c.tensor("k_cache").dtype();
  const bool dequant_rounds = (n.kv_dequant_rounded || n.kv_dequant_rounded_prefill) &&
                              (kv != c.tensor("o").dtype() || p.k_scale != 1.0 || p.v_scale != 1.0);
  const bool fp8_mfma = n.fp8_mfma_decode && is_fp8(kv);
  const double u8 = fp8_mfma ? unit_roundoff(kv) : 0.0, s8 = fp8_mfma ? 0.5 * ulp(kv, 0.0) : 0.0;
  const double keys = static_cast<double>(c.tensor("block_table").size(1) * p.block_size);
  const double dlogit = (dequant_rounds ? u * p.scale * qmax_l1 * kmax : 0.0) +
                        (u8 * qmax_l1 + s8 * static_cast<double>(p.head_dim)) * p.scale * kmax;
  const double o = vmax * ((n.p_rounded ? u : 0) + (n.partials_rounded ? u : 0) + (dequant_rounds ? u : 0) +
                           u8 + keys * s8 + std::expm1(2 * dlogit) + 1e-5);
  return {o, dlogit + 1e-5};
}

// The reference is the one of the declared source of the new tokens' K/V (case.hpp NewKv) where the case
// carries the inputs.
inline double attention_ratio(const Backend& b, const Numerics& declared, const Case& c, std::string* where) {
  const AttnBound bound = attention_bound(declared, c);
  const double u = unit_roundoff(c.tensor("o").dtype());
  return worst_ratio(
      run_clone(b, c), reference_attention(c, c.has("k_new") ? declared.new_kv : NewKv::kCache),
      [&](const std::string& name, double r) {
        return name == "lse" ? bound.lse * (1 + std::fabs(r)) : bound.o + u * std::fabs(r);
      },
      where);
}

// Probes of one kernel decision read through the twin's lse: a one-sequence decode case whose q and keys are
// all 0 except the elements a test sets (key t's first element through the block table), so every logit is
// q[0] * k_t[0] * scale, exact in fp32.
inline Case probe_case(std::int64_t hq, std::int64_t seq_len, double scale, std::uint64_t seed) {
  AttentionSpec s = builders::one_head(DType::kBF16, 1, seq_len);
  s.params.num_q_heads = hq;
  s.params.head_dim = 64;
  s.params.scale = scale;
  s.poison_unused = false;
  Case c = builders::attention_case(s, seed);
  for (const char* name : {"k_cache", "q"})
    c.tensor(name).copy_from(std::vector<double>(static_cast<std::size_t>(c.tensor(name).numel()), 0.0));
  for (std::int64_t h = 0; h < hq; ++h) c.tensor("q").set({0, h, 0}, 1.0);
  return c;
}

inline void set_key(Case& c, std::int64_t t, double k0) {
  const std::int64_t bs = c.get<AttentionParams>().block_size;
  const auto page = static_cast<std::int64_t>(c.tensor("block_table").at({0, t / bs}));
  c.tensor("k_cache").set({page, t % bs, 0, 0}, k0);
}

// ROCM_ATTN prefill probes: one sequence of `ql` new tokens after `ctx` context tokens, one head of 32, scale
// 1, bf16; q is e_0 in every row, every key and value 0 except what a test sets, so a logit is k[0] of its
// key. The context lives in the cache, the new tokens in k_new / v_new; the cache rows of the new tokens hold
// -1000 in V[0], which a kernel reading them instead of the inputs would show.
inline Case prefill_probe(std::int64_t ql, std::int64_t ctx, std::int64_t window = 0) {
  AttentionSpec s = builders::one_head(DType::kBF16, ql, ctx + ql);
  s.params.window = window;
  s.poison_unused = false;
  Case c = builders::attention_case(s, 9);
  for (const char* name : {"k_cache", "v_cache", "q"})
    c.tensor(name).copy_from(std::vector<double>(static_cast<std::size_t>(c.tensor(name).numel()), 0.0));
  for (std::int64_t j = 0; j < ql; ++j) c.tensor("q").set({j, 0, 0}, 1.0);
  for (std::int64_t t = ctx; t < ctx + ql; ++t) {
    const auto page = static_cast<std::int64_t>(c.tensor("block_table").at({0, t / 16}));
    c.tensor("v_cache").set({page, t % 16, 0, 0}, -1000.0);
  }
  for (const char* name : {"k_new", "v_new"}) c.tensors[name] = Tensor::zeros(DType::kBF16, {ql, 1, 32});
  return c;
}

inline void set_cache(Case& c, const char* cache, std::int64_t t, double x) {
  const auto page = static_cast<std::int64_t>(c.tensor("block_table").at({0, t / 16}));
  c.tensor(cache).set({page, t % 16, 0, 0}, x);
}

// ROCM_ATTN decode probes: one decode row (query length 1) over `len` keys, one head, scale 1, bf16, head
// size `d` (32 takes the Triton decode kernel whatever the window: use_rocm_custom_paged_attention needs
// 64/128), block size `bs`; q is e_0, every key and value 0 except what a test sets (a logit is k[0] of its
// key); the unused cache slots keep their NaN poison unless `poison` is off.
inline Case decode_probe(std::int64_t len, std::int64_t window, std::int64_t d = 32, std::int64_t bs = 16,
                         bool poison = false) {
  AttentionSpec s = builders::one_head(DType::kBF16, 1, len);
  s.params.window = window;
  s.params.head_dim = d;
  s.params.block_size = bs;
  s.poison_unused = poison;
  Case c = builders::attention_case(s, 11);
  for (const char* name : {"k_cache", "v_cache"}) {
    Tensor& t = c.tensor(name);
    if (!poison) t.copy_from(std::vector<double>(static_cast<std::size_t>(t.numel()), 0.0));
    for (std::int64_t k = 0; k < len && poison; ++k) {
      const auto page = static_cast<std::int64_t>(c.tensor("block_table").at({0, k / bs}));
      for (std::int64_t i = 0; i < d; ++i) t.set({page, k % bs, 0, i}, 0.0);
    }
  }
  c.tensor("q").copy_from(std::vector<double>(static_cast<std::size_t>(c.tensor("q").numel()), 0.0));
  c.tensor("q").set({0, 0, 0}, 1.0);
  return c;
}

inline void set_slot(Case& c, const char* cache, std::int64_t t, double x) {
  const std::int64_t bs = c.get<AttentionParams>().block_size;
  const auto page = static_cast<std::int64_t>(c.tensor("block_table").at({0, t / bs}));
  c.tensor(cache).set({page, t % bs, 0, 0}, x);
}

// ---- mutants

inline Case scaled_rmsnorm(double factor) {
  Case c = builders::rmsnorm_case(2, 64, DType::kBF16, {}, 5);
  std::vector<double> x = c.tensor("x").to_f64();
  for (double& v : x) v *= factor;
  c.tensor("x").copy_from(x);
  return c;
}

inline Case attention_with(const std::function<void(AttentionSpec&)>& edit) {
  AttentionSpec s = attn_spec(DType::kBF16, DType::kBF16, 16);
  edit(s);
  return builders::attention_case(s, 3);
}

// ROCM_AITER_FA's prefill/extend path on an fp8 cache: two extends over contexts and a 20-token prefill, no
// decode row (paged_attention_v1 with fp8 is declined), k_scale 0.5 and v_scale 2. The new tokens' K/V inputs
// are the generator's (fuzz::add_new_kv): values inside each stored fp8 code's rounding interval, so they
// differ from the dequantised cache by up to half an fp8 ulp.
inline Case fp8_extend_case(double q_stddev, std::vector<std::int64_t> query_lens = {3, 20, 2},
                            std::vector<std::int64_t> seq_lens = {37, 20, 300}) {
  AttentionSpec s = attn_spec(DType::kBF16, DType::kF8E4M3FN, 16);
  s.query_lens = std::move(query_lens);
  s.seq_lens = std::move(seq_lens);
  s.params.k_scale = 0.5;
  s.params.v_scale = 2.0;
  s.q_stddev = q_stddev;
  Case c = builders::attention_case(s, 3);
  fuzz::add_new_kv(c, 3);
  return c;
}

// c with the new tokens' K/V inputs replaced by what the cache holds for them: act(stored * scale).
inline Case inputs_from_cache(const Case& c) {
  Case out = c.clone();
  const auto& p = c.get<AttentionParams>();
  const DType act = c.tensor("q").dtype();
  const Tensor& table = c.tensor("block_table");
  for (std::int64_t s = 0; s < c.tensor("seq_lens").size(0); ++s) {
    const auto len = static_cast<std::int64_t>(c.tensor("seq_lens").at({s}));
    const auto q0 = static_cast<std::int64_t>(c.tensor("query_start_loc").at({s}));
    const auto ql = static_cast<std::int64_t>(c.tensor("query_start_loc").at({s + 1})) - q0;
    for (std::int64_t j = 0; j < ql; ++j) {
      const std::int64_t pos = len - ql + j;
      const auto block = static_cast<std::int64_t>(table.at({s, pos / p.block_size}));
      for (const auto& [input, cache, scale] :
           {std::tuple{"k_new", "k_cache", p.k_scale}, std::tuple{"v_new", "v_cache", p.v_scale}})
        for (std::int64_t g = 0; g < p.num_kv_heads; ++g)
          for (std::int64_t d = 0; d < p.head_dim; ++d)
            out.tensor(input).set(
                {q0 + j, g, d}, round_to(act, c.tensor(cache).at({block, pos % p.block_size, g, d}) * scale));
    }
  }
  return out;
}

// For each mutant, a case that exposes it: the twin and the mutant must write different bytes.
inline std::map<std::string, Case> exposing_cases() {
  std::map<std::string, Case> m;
  RmsNormParams res;
  res.residual = true;
  m["mutant.rmsnorm.stride_ignored"] = builders::rmsnorm_case(4, 64, DType::kBF16, {}, 1, Layout{8, 0, 0});
  // rms_norm writes a contiguous output (TORCH_CHECK(out.is_contiguous())): only x is strided.
  m["mutant.rmsnorm.stride_ignored"].tensors["y"] = builders::matrix(DType::kBF16, 4, 64);
  m["mutant.rmsnorm.residual_reread"] = builders::rmsnorm_case(2, 64, DType::kBF16, res, 1);
  m["mutant.rmsnorm.eps_outside_rsqrt"] = scaled_rmsnorm(1e-4);  // mean(x^2) ~ 1e-8, far below eps
  m["mutant.rmsnorm.act_accumulation"] = builders::rmsnorm_case(1, 1024, DType::kBF16, {}, 1);
  m["mutant.rmsnorm.oob_write"] = builders::rmsnorm_case(2, 64, DType::kBF16, {}, 1, Layout{0, 0, 4});
  m["mutant.dual.weight_rounded_early"] = builders::dual_case(2, 256, DType::kBF16, {}, 1);
  // Sub-bound precision loss (the statistical tier's mutants): rows wide enough for a difference to show.
  m["mutant.rmsnorm.squares_in_act"] = builders::rmsnorm_case(1, 4096, DType::kBF16, {}, 1);
  m["mutant.rmsnorm.one_plus_weight_rounded"] =
      builders::rmsnorm_case(2, 256, DType::kBF16, {1e-6, WeightMode::kOnePlus, false}, 1);
  m["mutant.rmsnorm.fast_rsqrt"] = builders::rmsnorm_case(4, 1024, DType::kF16, {}, 1);
  m["mutant.rmsnorm.output_toward_zero"] = builders::rmsnorm_case(2, 256, DType::kBF16, {}, 1);
  m["mutant.rmsnorm.mean_square_rounded"] = builders::rmsnorm_case(4, 1024, DType::kBF16, {}, 1);
  // eps 1e-6 where the mutant adds 1e-5: mean(x^2) ~ 1e-6 makes the difference about 4x in the scale.
  m["mutant.rmsnorm.eps_fixed"] = scaled_rmsnorm(1e-3);
  m["mutant.dual.halves_swapped"] = builders::dual_case(2, 64, DType::kBF16, {}, 1);
  m["mutant.concat.halves_swapped"] = builders::concat_case(2, 8, 8, DType::kBF16, 1);
  m["mutant.attn.masked_p_times_v"] = attention_with([](AttentionSpec&) {});  // 37 % 16 != 0: poison in page
  m["mutant.attn.page_conversion"] = attention_with([](AttentionSpec& s) { s.params.block_size = 64; });
  m["mutant.attn.fp8_fn_fnuz_swapped"] =
      attention_with([](AttentionSpec& s) { s.kv_dtype = DType::kF8E4M3FN; });
  m["mutant.attn.no_max_subtraction"] = attention_with([](AttentionSpec& s) { s.q_stddev = 100; });
  m["mutant.attn.logits_rounded"] = attention_with([](AttentionSpec& s) { s.q_stddev = 10; });
  m["mutant.attn.unscaled_split_merge"] = attention_with([](AttentionSpec& s) { s.query_lens = {1, 1, 1}; });
  m["mutant.attn.gqa_modulo"] = attention_with([](AttentionSpec&) {});
  m["mutant.attn.causal_off_by_one"] = attention_with([](AttentionSpec&) {});
  m["mutant.attn.window_off_by_one"] = attention_with([](AttentionSpec& s) { s.params.window = 8; });
  m["mutant.attn.softcap_missing"] = attention_with([](AttentionSpec& s) {
    s.params.softcap = 5;
    s.q_stddev = 3;
  });
  Case sinks = attention_with([](AttentionSpec& s) { s.params.has_sinks = true; });
  sinks.tensor("sinks").copy_from(std::vector<double>(4, 3.0));  // a sink worth ~20 keys: visible in o
  m["mutant.attn.sink_dropped"] = std::move(sinks);
  // The block table as a column slice of a wider table (rows 3 entries wider than the view), every entry no
  // sequence owns holding block 0: a kernel that ignores the row stride reads other sequences' blocks.
  Case sliced = attention_with([](AttentionSpec&) {});
  const Tensor dense = sliced.tensor("block_table");
  Tensor wide = Tensor::padded(DType::kI32, dense.shape(), dense.size(1) + 3, 0, 0);
  for (std::int64_t r = 0; r < dense.size(0); ++r)
    for (std::int64_t j = 0; j < dense.size(1); ++j) wide.set({r, j}, std::max(dense.at({r, j}), 0.0));
  sliced.tensor("block_table") = wide;
  m["mutant.attn.table_stride_ignored"] = std::move(sliced);
  // Seven 4-token prefills and an extend, q small: the first row of a prefill sees key 0 alone, so its o is
  // that token's V input (or, for the mutant, its dequantised cache value: up to 0.4 fp8 ulp away), and with
  // |q| small the bound's logit term (proportional to |q|, attention_bound) leaves about 3 bf16 roundings of
  // max|v| to exceed.
  m["mutant.attn.extend_new_kv_from_cache"] =
      fp8_extend_case(0.02, {4, 4, 4, 4, 4, 4, 4, 3}, {4, 4, 4, 4, 4, 4, 4, 37});
  return m;
}

}  // namespace driftcheck::twin_checks
