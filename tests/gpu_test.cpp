// GPU backends under the oracle. On a machine with a GPU: every gpu.* backend passes generated cases of its
// op; every mutant.gpu.* backend is caught within a bounded number of generated cases; the GPU kernels match
// the CPU twins the docs say they match, bit for bit, declining and faulting on the same cases with the same
// messages (docs/gpu/README.md, "GPU kernels and their twins");
// runs from many threads at once (one device slot each, no lock) give the bits of runs one at a time. Without
// a GPU each must report itself unavailable with a reason (and run nothing). Built without a GPU toolchain,
// the registry must hold no gpu.* backend at all.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "case_builders.hpp"
#include "driftcheck/device/backend.hpp"
#include "driftcheck/device/device_reference.hpp"
#if DRIFTCHECK_HAVE_GPU
#include "driftcheck/device/gpu.hpp"
#endif
#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/known_findings.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck {
namespace {

constexpr std::uint64_t kSeed = 20261130;

std::vector<const Backend*> gpu_backends() {
  return registry().match("gpu.*", false);
}

bool gpu_here() {
  const auto b = gpu_backends();
  return !b.empty() && b.front()->available(nullptr);
}

// Generated cases of an op, prepared once per op for every test of this file.
const std::vector<fuzz::PreparedCase>& prepared(OpKind op, std::uint64_t count) {
  static std::map<OpKind, std::vector<fuzz::PreparedCase>> cache;
  auto& v = cache[op];
  for (std::uint64_t k = v.size(); k < count; ++k) {
    Case c = fuzz::materialize(fuzz::draw_case(op, kSeed, k).value());
    c.seed = kSeed;
    c.index = k;
    v.push_back(fuzz::prepare(std::move(c)));
  }
  return v;
}

std::uint64_t cases_for(OpKind op) {
  return op == OpKind::kAttention ? 200 : 300;
}

// A backend (or mutant) with the upstream defects it reproduces repaired (docs/FINDINGS.md: gpu.rmsnorm.cuda
// faults on misaligned rows as vLLM's kernel does), as the campaign judges mutants and the CPU tests judge
// twins' numerics: here the numerics and each mutant's own bug are on trial; GpuTwins checks the faults.
const Backend& judged(const Backend& b) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Backend>, std::less<>> repaired;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = repaired.find(b.name());
  if (it == repaired.end())
    it = repaired.emplace(b.name(), fuzz::repaired_backend(fuzz::builtin_known_findings(), b)).first;
  return it->second ? *it->second : b;
}

TEST(GpuBackends, OneForEveryOpWhenBuiltNoneOtherwise) {
#if DRIFTCHECK_HAVE_GPU
  for (OpKind op : kAllOps) {
    int n = 0;
    for (const Backend* b : gpu_backends()) n += b->op() == op;
    EXPECT_GE(n, 1) << "no GPU backend for " << op_name(op);
  }
  EXPECT_GE(registry().match("mutant.gpu.*", true).size(), 18u);
#else
  EXPECT_TRUE(gpu_backends().empty());
  EXPECT_TRUE(registry().match("mutant.gpu.*", true).empty());
#endif
}

TEST(GpuBackends, UnavailableOnesSayWhy) {
  for (const Backend* b : registry().match("gpu.*,mutant.gpu.*", true)) {
    std::string why;
    if (!b->available(&why)) {
      EXPECT_NE(why.find("no GPU"), std::string::npos) << b->name() << ": " << why;
    }
  }
}

// The same stream of generated cases a campaign draws, judged by the oracle (metamorphic checks included).
TEST(GpuBackends, PassGeneratedCases) {
  if (!gpu_here()) GTEST_SKIP() << "no GPU";
  for (const Backend* b : gpu_backends()) {
    int ran = 0;
    for (const fuzz::PreparedCase& pc : prepared(b->op(), cases_for(b->op()))) {
      if (!b->supports(pc.input).ok) continue;
      const fuzz::Evaluation e = fuzz::evaluate(judged(*b), pc);
      ++ran;
      EXPECT_FALSE(fuzz::is_failure(e.verdict))
          << b->name() << " case " << pc.input.index << ": " << fuzz::verdict_name(e.verdict) << ": "
          << e.detail
          << "\nspec: " << nlohmann::json(fuzz::draw_case(b->op(), kSeed, pc.input.index).value()).dump();
    }
    // Generated cases spread over each op's variants (e.g. a third of rmsnorm cases carry a residual), so a
    // backend of one variant sees a share of them; a few dozen judged cases per backend is the floor.
    EXPECT_GE(ran, 25) << b->name() << " declined nearly every generated case";
  }
}

// The proof's other direction on the device: each GPU mutant fails the oracle within the cases the CPU
// mutants face in tests/proof_test.cpp.
TEST(GpuMutants, EveryOneIsCaught) {
  if (!gpu_here()) GTEST_SKIP() << "no GPU";
  for (const Backend* m : registry().match("mutant.gpu.*", true)) {
    const auto& cases = prepared(m->op(), cases_for(m->op()));
    std::size_t index = 0;
    fuzz::Evaluation caught;
    for (; index < cases.size(); ++index) {
      caught = fuzz::evaluate(judged(*m), cases[index]);
      if (fuzz::is_failure(caught.verdict)) break;
    }
    EXPECT_LT(index, cases.size()) << m->name() << " (" << m->bug_class() << ") survived " << cases.size()
                                   << " cases";
    if (index < cases.size())
      std::cout << "[gpu proof] " << m->name() << ": caught at case " << index << " as "
                << fuzz::verdict_name(caught.verdict) << ": " << caught.detail << "\n";
  }
}

// Every byte of every storage a run leaves (outputs, in-place inputs, guard bands).
bool same_bytes(const Case& a, const Case& b, std::int64_t* differing_elements = nullptr) {
  bool same = true;
  for (const auto& [name, t] : a.tensors) {
    const auto& x = t.storage()->bytes;
    const auto& y = b.tensor(name).storage()->bytes;
    if (x == y) continue;
    same = false;
    if (differing_elements == nullptr) return false;
    const auto size = static_cast<std::size_t>(dtype_size(t.dtype()));
    for (std::size_t i = 0; i + size <= x.size(); i += size)
      *differing_elements += std::memcmp(x.data() + i, y.data() + i, size) != 0;
  }
  return same;
}

Case run_clone(const Backend& b, const Case& c) {
  Case out = c.clone();
  b.run(out);
  return out;
}

// A run's result: the storages it left, or the error it reported (BackendError: a fault of the kernel).
struct Outcome {
  Case result;
  std::string error;
};

Outcome run_outcome(const Backend& b, const Case& c) {
  Outcome o{c.clone(), {}};
  try {
    b.run(o.result);
  } catch (const BackendError& e) {
    o.error = e.what();
  }
  return o;
}

// docs/gpu/README.md, "GPU kernels and their twins": which kernel the CPU side predicts bit for bit, and
// whether it ports the twin's supports and faults as well (then every case is declined by both with the same
// reason or by neither, and every run faults in both with the same message or in neither). The norm twins'
// orders are written for CUDA's warp of 32: on another warp the GPU computes the twin with that warp
// (gpu_reduce_test), not the registered one, and those claims are not made.
struct TwinClaim {
  const char* gpu;
  const char* twin;
  bool bit_for_bit;
  bool same_supports;
  bool warp32_only;
};
constexpr TwinClaim kTwinClaims[] = {
    {"gpu.rmsnorm.cuda", "cpu.rmsnorm.cuda", true, true, true},
    {"gpu.rmsnorm.fused_add", "cpu.rmsnorm.fused_add", true, true, true},
    {"gpu.dual.fused", "cpu.dual.fused", true, true, true},
    {"gpu.concat.copy", "cpu.concat.copy", true, true, false},
    {"gpu.attn.paged_online", "cpu.attn.triton_unified", false, false, false},
};

// The device's warp size (the norm claims are made for 32); asked only with a GPU.
int device_warp() {
#if DRIFTCHECK_HAVE_GPU
  return gpu_warp_size();
#else
  return 0;
#endif
}

TEST(GpuTwins, MatchWhereTheDocsSaySo) {
  if (!gpu_here()) GTEST_SKIP() << "no GPU";
  const int warp = device_warp();
  for (const TwinClaim& claim : kTwinClaims) {
    const Backend* g = registry().find(claim.gpu);
    const Backend* t = registry().find(claim.twin);
    ASSERT_TRUE(g && t) << claim.gpu << " / " << claim.twin;
    const bool claimed = claim.bit_for_bit && (warp == 32 || !claim.warp32_only);
    int both = 0, identical = 0, faulted = 0, declined = 0;
    std::int64_t differing = 0;
    for (const fuzz::PreparedCase& pc : prepared(g->op(), cases_for(g->op()))) {
      const Support gs = g->supports(pc.input), ts = t->supports(pc.input);
      const std::string spec = nlohmann::json(fuzz::draw_case(g->op(), kSeed, pc.input.index).value()).dump();
      if (claim.same_supports) {
        EXPECT_EQ(gs.ok, ts.ok) << claim.gpu << ": " << gs.reason << " / " << claim.twin << ": " << ts.reason
                                << "\nspec: " << spec;
        EXPECT_EQ(gs.reason, ts.reason) << claim.gpu << " vs " << claim.twin << "\nspec: " << spec;
      }
      if (!gs.ok || !ts.ok) {
        declined += !gs.ok && !ts.ok;
        continue;
      }
      ++both;
      const Outcome go = run_outcome(*g, pc.input), to = run_outcome(*t, pc.input);
      if (claim.same_supports) {
        EXPECT_EQ(go.error, to.error)
            << claim.gpu << " vs " << claim.twin << " on case " << pc.input.index << "\nspec: " << spec;
      }
      if (!go.error.empty() || !to.error.empty()) {
        faulted += !go.error.empty() && !to.error.empty();
        continue;
      }
      const bool same = same_bytes(go.result, to.result, &differing);
      identical += same;
      if (claimed) {
        EXPECT_TRUE(same) << claim.gpu << " vs " << claim.twin << " differ on case " << pc.input.index << ": "
                          << spec;
      }
    }
    EXPECT_GE(both, 25) << claim.gpu << " and " << claim.twin << " share too few cases";
    std::cout << "[twins] " << claim.gpu << " vs " << claim.twin << ": " << identical << " of "
              << both - faulted << " cases bit-identical, " << differing
              << " differing elements (documented: " << (claimed ? "bit for bit" : "not bit for bit")
              << ", warp " << warp << "); " << faulted << " faulted in both, " << declined
              << " declined by both\n";
  }
}

// No lock around the device: 16 threads running every GPU backend on the same cases at once, each on its
// own leased slot and stream, must give the bits of one run at a time (a slot mix-up, a shared buffer or a
// missing wait shows as a difference).
TEST(GpuBackends, ConcurrentRunsGiveTheBitsOfSequentialOnes) {
  if (!gpu_here()) GTEST_SKIP() << "no GPU";
  std::vector<std::pair<const Backend*, const Case*>> work;
  std::vector<Case> expected;
  for (const Backend* b : gpu_backends())
    for (const fuzz::PreparedCase& pc : prepared(b->op(), 60))
      if (b->supports(pc.input).ok) work.emplace_back(&judged(*b), &pc.input);
  for (const auto& [b, c] : work) expected.push_back(run_clone(*b, *c));
  std::vector<int> mismatches(16, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        for (std::size_t i = static_cast<std::size_t>(t); i < work.size(); i += 5) {
          try {
            mismatches[static_cast<std::size_t>(t)] +=
                !same_bytes(run_clone(*work[i].first, *work[i].second), expected[i]);
          } catch (const std::exception&) {
            ++mismatches[static_cast<std::size_t>(t)];
          }
        }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 16; ++t) EXPECT_EQ(mismatches[static_cast<std::size_t>(t)], 0) << "thread " << t;
  EXPECT_GE(work.size(), 100u);
}

#if DRIFTCHECK_HAVE_GPU
// docs/REFERENCE.md, "The attention reference on a GPU": each of the CPU and GPU references is within e of
// the exact attention, so they differ by at most 2e per element, with (u = 2^-53, gamma_k = k u / (1 - k u),
// per query row: n visible keys, c = |scale k_scale|, G = max_t c sum_d |q_d k_td|, S' = the largest |logit|
// or |sink| plus eps_s, M_d = |v_scale| sum_t p_t |v_td|):
//   eps_s  = gamma_{D+2} G + 6 u softcap                                   (logits)
//   theta  = expm1(2 eps_s) + gamma_{2n+4} + 16 u (S' + 2)                  (softmax weights, relative)
//   e_o(d) = (theta + gamma_{2n+4}) M_d + n |v_scale| max_t |v_td| 2^-1022   (outputs)
//   e_lse  = eps_s + gamma_{2n+4} + 16 u (S' + 2) + 8 u (|lse| + S')       (lse)
struct RowBound {
  std::vector<double> o;  // e_o per d
  double lse = 0;
};

double gamma(double k) {
  const double u = 0x1p-53;
  return k * u / (1 - k * u);
}

std::vector<RowBound> agreement_bounds(const Case& c, const Outputs& ref) {
  const auto& p = c.get<AttentionParams>();
  const double u = 0x1p-53, scale = std::fabs(p.scale * p.k_scale), vs = std::fabs(p.v_scale);
  const Tensor &q = c.tensor("q"), &kc = c.tensor("k_cache"), &vc = c.tensor("v_cache"),
               &tab = c.tensor("block_table");
  const auto lse = ref.at("lse").to_f64();
  const std::int64_t d_n = p.head_dim, group = p.num_q_heads / p.num_kv_heads;
  std::vector<RowBound> out(static_cast<std::size_t>(q.size(0) * p.num_q_heads));
  const std::int64_t seqs = c.tensor("seq_lens").size(0);
  std::vector<double> qrow(static_cast<std::size_t>(d_n)), k(static_cast<std::size_t>(d_n)), v(k.size());
  for (std::int64_t s = 0; s < seqs; ++s) {
    const auto len = static_cast<std::int64_t>(c.tensor("seq_lens").at({s}));
    const auto q0 = static_cast<std::int64_t>(c.tensor("query_start_loc").at({s}));
    const auto ql = static_cast<std::int64_t>(c.tensor("query_start_loc").at({s + 1})) - q0;
    for (std::int64_t j = 0; j < ql; ++j) {
      const std::int64_t pos = len - ql + j;
      const std::int64_t hi = p.causal ? std::min(pos + 1, len) : len;
      const std::int64_t lo = p.window > 0 ? std::max<std::int64_t>(0, pos - p.window + 1) : 0;
      for (std::int64_t h = 0; h < p.num_q_heads; ++h) {
        const std::size_t row = static_cast<std::size_t>((q0 + j) * p.num_q_heads + h);
        q.storage()->load_f64(q.offset() + (q0 + j) * q.strides()[0] + h * q.strides()[1], q.strides()[2],
                              d_n, qrow.data());
        const double sink = p.has_sinks ? c.tensor("sinks").at({h}) : -INFINITY;
        double g_max = 0, s_max = p.has_sinks ? std::fabs(sink) : 0, m = sink;
        std::vector<double> logits, mag(static_cast<std::size_t>(d_n), 0.0);
        std::vector<std::vector<double>> values;
        for (std::int64_t t = std::min(lo, hi); t < hi; ++t) {
          const auto block = static_cast<std::int64_t>(tab.at({s, t / p.block_size}));
          const std::int64_t g = h / group;
          kc.storage()->load_f64(kc.offset() + block * kc.strides()[0] +
                                     (t % p.block_size) * kc.strides()[1] + g * kc.strides()[2],
                                 kc.strides()[3], d_n, k.data());
          vc.storage()->load_f64(vc.offset() + block * vc.strides()[0] +
                                     (t % p.block_size) * vc.strides()[1] + g * vc.strides()[2],
                                 vc.strides()[3], d_n, v.data());
          double dot = 0, abs_dot = 0;
          for (std::int64_t d = 0; d < d_n; ++d) dot += qrow[d] * k[d], abs_dot += std::fabs(qrow[d] * k[d]);
          double l = dot * p.scale * p.k_scale;
          if (p.softcap > 0) l = p.softcap * std::tanh(l / p.softcap);
          logits.push_back(l);
          values.push_back(v);
          g_max = std::max(g_max, scale * abs_dot);
          s_max = std::max(s_max, std::fabs(l));
          m = std::max(m, l);
        }
        const auto n = static_cast<double>(logits.size());
        double z = p.has_sinks ? std::exp(sink - m) : 0;
        for (double l : logits) z += std::exp(l - m);
        const double eps_s = gamma(static_cast<double>(d_n) + 2) * g_max + 6 * u * p.softcap;
        const double s_prime = s_max + eps_s;
        const double theta = std::expm1(2 * eps_s) + gamma(2 * n + 4) + 16 * u * (s_prime + 2);
        RowBound& b = out[row];
        b.o.assign(static_cast<std::size_t>(d_n), 0.0);
        for (std::int64_t d = 0; d < d_n; ++d) {
          double md = 0, vmax = 0;
          for (std::size_t t = 0; t < logits.size(); ++t) {
            md += std::exp(logits[t] - m) / z * std::fabs(values[t][static_cast<std::size_t>(d)]);
            vmax = std::max(vmax, std::fabs(values[t][static_cast<std::size_t>(d)]));
          }
          b.o[static_cast<std::size_t>(d)] =
              1.01 * (theta + gamma(2 * n + 4)) * vs * md + n * vs * vmax * 0x1p-1022;  // 1.01: second order
        }
        b.lse = 1.01 *
                (eps_s + gamma(2 * n + 4) + 16 * u * (s_prime + 2) + 8 * u * (std::fabs(lse[row]) + s_prime));
      }
    }
  }
  return out;
}

// Largest |gpu - cpu| / (2 e) over every element (> 1 breaks the bound); non-finite values must match.
double agreement_ratio(const Case& c, const Outputs& cpu, const Outputs& gpu, std::string* where) {
  const auto bounds = agreement_bounds(c, cpu);
  const auto d_n = static_cast<std::size_t>(c.get<AttentionParams>().head_dim);
  double worst = 0;
  for (const char* name : {"o", "lse"}) {
    const auto a = cpu.at(name).to_f64(), b = gpu.at(name).to_f64();
    for (std::size_t i = 0; i < a.size(); ++i) {
      const bool is_o = name[0] == 'o';
      const RowBound& rb = bounds[is_o ? i / d_n : i];
      const double bound = 2 * (is_o ? rb.o[i % d_n] : rb.lse);
      double r = 0;
      if (!std::isfinite(a[i]) || !std::isfinite(b[i]))
        r = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i] ? 0 : INFINITY;
      else if (a[i] != b[i])
        r = bound > 0 ? std::fabs(a[i] - b[i]) / bound : INFINITY;
      if (r > worst) {
        worst = r;
        *where = std::string(name) + "[" + std::to_string(i) + "]: cpu " + std::to_string(a[i]) + ", gpu " +
                 std::to_string(b[i]) + ", bound " + std::to_string(bound);
      }
    }
  }
  return worst;
}

// MiniMax-M3 decode shapes (64 q heads, 4 KV heads, head size 128, block size 128) and the features the
// generator draws rarely at size: a speculative step, fp8 KV with scales, window, softcap and sinks.
std::vector<Case> large_attention_cases() {
  std::vector<Case> out;
  for (int variant = 0; variant < 4; ++variant) {
    builders::AttentionSpec s = builders::minimax_m3_spec({8192, 3000}, {1, variant == 0 ? 1 : 4});
    s.spare_blocks = 2;
    if (variant == 1) {
      s.kv_dtype = DType::kF8E4M3FN;
      s.params.k_scale = 0.0625;
      s.params.v_scale = 0.5;
    }
    if (variant == 2) s.params.window = 1024, s.params.softcap = 30, s.q_stddev = 3;
    if (variant == 3) s.params.has_sinks = true, s.params.causal = false;
    out.push_back(builders::attention_case(s, 7 + static_cast<std::uint64_t>(variant)));
  }
  return out;
}

// The GPU's fp64 attention reference against the CPU's on every generated attention case of the suite's
// seed and on large MiniMax-M3-shaped cases: within the derived bound everywhere, declined only where a value
// it reads is not finite.
TEST(GpuReference, AgreesWithTheCpuReferenceWithinTheFp64Bound) {
  if (!gpu_here()) GTEST_SKIP() << "no GPU";
  int compared = 0, declined = 0;
  double worst = 0;
  const auto check = [&](const Case& c, const std::string& what) {
    const Outputs cpu = reference(c);
    const std::optional<Outputs> gpu = gpu_reference_attention(c);
    if (!gpu) {
      ++declined;
      return;
    }
    ++compared;
    std::string where;
    const double r = agreement_ratio(c, cpu, *gpu, &where);
    worst = std::max(worst, r);
    EXPECT_LE(r, 1.0) << what << ": " << where;
  };
  for (const fuzz::PreparedCase& pc : prepared(OpKind::kAttention, cases_for(OpKind::kAttention)))
    check(pc.input, "generated case " + std::to_string(pc.input.index));
  int big = 0;
  for (const Case& c : large_attention_cases()) check(c, "MiniMax-shaped case " + std::to_string(big++));
  std::cout << "[gpu reference] " << compared << " cases within the bound (worst |gpu - cpu| / bound "
            << worst << "), " << declined << " declined (non-finite values read)\n";
  EXPECT_GE(compared, 150);
}

// device_reference() takes the GPU for a large attention case and the CPU for a small one.
TEST(GpuReference, DeviceReferenceUsesTheGpuWhereItPays) {
  if (!gpu_here()) GTEST_SKIP() << "no GPU";
  if (const char* env = std::getenv("DRIFTCHECK_REFERENCE"); env && std::string_view(env) != "auto")
    GTEST_SKIP() << "DRIFTCHECK_REFERENCE=" << env;
  const Case big = large_attention_cases().front();
  const auto via_gpu = gpu_reference_attention(big).value();
  const Outputs chosen = device_reference(big);
  EXPECT_EQ(chosen.at("o").storage()->bytes, via_gpu.at("o").storage()->bytes);
  builders::AttentionSpec tiny;  // 16 keys, 4 heads of 8: far below the GPU's threshold
  tiny.params.num_q_heads = tiny.params.num_kv_heads = 4;
  tiny.params.head_dim = 8;
  tiny.params.block_size = 16;
  tiny.query_lens = {1};
  tiny.seq_lens = {16};
  const Case small = builders::attention_case(tiny, 1);
  EXPECT_EQ(device_reference(small).at("o").storage()->bytes, reference(small).at("o").storage()->bytes);
}
#endif

}  // namespace
}  // namespace driftcheck
