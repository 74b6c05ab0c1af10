// Speed of the fp64 reference. The attention prefill (2048 queries x 2048 keys, D = 128, 8 heads) is compared
// with Eigen's own fp64 GEMM measured in the same run: the reference does two GEMMs per tile plus gathers,
// masking and exp, so its GFLOP/s over Eigen's is the share of time spent in useful matrix products. Flops
// are counted as 4 T S D H for a full (non-causal) attention and 4 D H times the number of visible (query,
// key) pairs, T (T + 1) / 2 per head, for a causal one. Small fuzz-sized cases of each op report cases per
// second.
#include <benchmark/benchmark.h>

#include <Eigen/Dense>
#include <cstdio>
#include <map>
#include <string>

// The bench reuses the tests' hand-built valid cases rather than a copy of them.
#include "../tests/case_builders.hpp"
#include "driftcheck/reference/reference.hpp"

namespace driftcheck {
namespace {

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void set_gflops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops_per_iteration * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// C[m, n] = A[m, k] B[k, n]: the square case, and the two shapes of the attention reference's tiles
// (logits: 256 x 128 by 128 x 2048; P.V: 256 x 2048 by 2048 x 128).
void BM_EigenGemm(benchmark::State& state) {
  const auto m = state.range(0);
  const auto k = state.range(1);
  const auto n = state.range(2);
  const Matrix a = Matrix::Random(m, k);
  const Matrix b = Matrix::Random(k, n);
  Matrix c(m, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_gflops(state, 2.0 * static_cast<double>(m * k * n));
}
BENCHMARK(BM_EigenGemm)
    ->Args({1024, 1024, 1024})
    ->Args({256, 128, 2048})
    ->Args({256, 2048, 128})
    ->Unit(benchmark::kMillisecond);

Case prefill_case(std::int64_t tokens, bool causal) {
  builders::AttentionSpec s;
  s.params.num_q_heads = 8;
  s.params.num_kv_heads = 8;
  s.params.head_dim = 128;
  s.params.block_size = 16;
  s.params.causal = causal;
  s.params.scale = 1.0 / std::sqrt(128.0);
  s.query_lens = {tokens};
  s.seq_lens = {tokens};
  s.q_dtype = DType::kBF16;
  s.kv_dtype = DType::kBF16;
  s.shuffle_blocks = true;
  return builders::attention_case(s, 1);
}

void BM_AttentionPrefill(benchmark::State& state) {
  const std::int64_t t = state.range(0);
  const bool causal = state.range(1) != 0;
  const Case c = prefill_case(t, causal);
  for (auto _ : state) benchmark::DoNotOptimize(reference(c));
  const double pairs =
      causal ? static_cast<double>(t) * static_cast<double>(t + 1) / 2 : static_cast<double>(t * t);
  set_gflops(state, 4.0 * 128 * 8 * pairs);
}
BENCHMARK(BM_AttentionPrefill)
    ->ArgNames({"T", "causal"})
    ->Args({2048, 0})
    ->Args({2048, 1})
    ->Unit(benchmark::kMillisecond);

void run_cases(benchmark::State& state, const Case& c) {
  for (auto _ : state) benchmark::DoNotOptimize(reference(c));
  state.SetItemsProcessed(state.iterations());  // items/s = cases/s
}

void BM_SmallRmsNorm(benchmark::State& state) {
  run_cases(state, builders::rmsnorm_case(4, 96, DType::kBF16, RmsNormParams{1e-6, WeightMode::kPlain, true},
                                          1, {8, 3, 4}));
}
void BM_SmallConcat(benchmark::State& state) {
  run_cases(state, builders::concat_case(4, 96, 96, DType::kBF16, 1, {8, 3, 4}));
}
void BM_SmallDualRmsNormCat(benchmark::State& state) {
  run_cases(state, builders::dual_case(4, 96, DType::kBF16, DualRmsNormCatParams{}, 1, {8, 3, 4}));
}
// A mixed batch as fuzzing draws it: a decode, a speculative 4-token step and a short prefill, GQA 4.
void BM_SmallAttention(benchmark::State& state) {
  builders::AttentionSpec s;
  s.params.num_q_heads = 8;
  s.params.num_kv_heads = 2;
  s.params.head_dim = 64;
  s.params.block_size = 16;
  s.query_lens = {1, 4, 17};
  s.seq_lens = {40, 33, 17};
  s.q_dtype = DType::kBF16;
  s.kv_dtype = DType::kF8E4M3FN;
  s.params.k_scale = 0.5;
  s.spare_blocks = 2;
  run_cases(state, builders::attention_case(s, 1));
}
BENCHMARK(BM_SmallRmsNorm);
BENCHMARK(BM_SmallConcat);
BENCHMARK(BM_SmallDualRmsNormCat);
BENCHMARK(BM_SmallAttention);

// Keeps every run's GFLOP/s so main() can print the ratios after the console output.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      const auto it = r.counters.find("GFLOP/s");
      if (it != r.counters.end()) gflops[r.benchmark_name()] = it->second.value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> gflops;
};

}  // namespace
}  // namespace driftcheck

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  driftcheck::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const auto& g = reporter.gflops;
  for (const auto& [name, value] : g) {
    if (name.rfind("BM_AttentionPrefill", 0) != 0) continue;
    for (const auto& [gemm, gemm_value] : g) {
      if (gemm.rfind("BM_EigenGemm", 0) == 0) {
        std::printf("%s: %.2f GFLOP/s = %.0f%% of %s (%.2f GFLOP/s)\n", name.c_str(), value,
                    100.0 * value / gemm_value, gemm.c_str(), gemm_value);
      }
    }
  }
  benchmark::Shutdown();
  return 0;
}
