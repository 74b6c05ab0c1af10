// The fp64 attention reference at MiniMax-M3 decode shapes (64 query heads, 4 KV heads, head size 128, block
// size 128, bf16 q and KV cache), CPU (reference(): Eigen GEMMs) against GPU (gpu_reference_attention: the
// kernels of device/gpu/reference_kernels.hip, transfers included), measured in one run on a machine with a
// GPU. For contexts of 8k, 32k and 128k tokens and a decode step (1 query) and a speculative verification
// step (4 queries) of one sequence it prints cases/s of each on one thread, and with --jobs threads at once
// (a campaign's workers: the CPU reference scales with cores, the GPU ones share one device), the GPU/CPU
// ratios, and the largest |GPU - CPU| relative to the largest |o| (docs/REFERENCE.md bounds it; gpu_test
// checks the bound element by element). Then what the rest of prepare() costs at the same shapes (the naive
// same-precision baseline and the error model, on the CPU), which is what bounds a campaign at these shapes
// once the reference is on the GPU.
//
//   gpu_reference_bench [--seconds S] [--jobs J]     (S: measuring time per point, default 2)
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string_view>
#include <thread>

#include "../tests/case_builders.hpp"
#include "driftcheck/device/gpu.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/oracle.hpp"

namespace driftcheck {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

Case minimax_decode(std::int64_t context, std::int64_t queries) {
  builders::AttentionSpec s = builders::minimax_m3_spec({context}, {queries});
  s.poison_unused = false;  // no unused slot but the last block's tail: poisoning 128k tokens costs seconds
  return builders::attention_case(s, static_cast<std::uint64_t>(context + queries));
}

// Cases per second of `f` on `threads` threads at once, each repeating it for about `seconds` (at least
// once).
double rate(int threads, double seconds, const std::function<void()>& f) {
  std::atomic<long> done{0};
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&] {
      do {
        f();
        ++done;
      } while (seconds_since(start) < seconds);
    });
  for (auto& t : pool) t.join();
  return static_cast<double>(done.load()) / seconds_since(start);
}

double max_relative_difference(const Outputs& a, const Outputs& b) {
  const auto x = a.at("o").to_f64(), y = b.at("o").to_f64();
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    diff = std::max(diff, std::fabs(x[i] - y[i])), scale = std::max(scale, std::fabs(x[i]));
  return scale > 0 ? diff / scale : diff;
}

}  // namespace
}  // namespace driftcheck

int main(int argc, char** argv) {
  using namespace driftcheck;
  double seconds = 2;
  int jobs = 16;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--seconds" && i + 1 < argc)
      seconds = std::atof(argv[++i]);
    else if (arg == "--jobs" && i + 1 < argc)
      jobs = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: gpu_reference_bench [--seconds S] [--jobs J]\n");
      return 2;
    }
  }
  const auto probe = registry().match("gpu.*", false);
  std::string why;
  if (probe.empty() || !probe.front()->available(&why)) {
    std::printf("gpu_reference_bench: no GPU here (%s): nothing to measure\n", why.c_str());
    return 1;
  }
  std::printf(
      "fp64 attention reference, MiniMax-M3 decode shapes (Hq 64, Hkv 4, D 128, block 128, bf16), %d jobs\n",
      jobs);
  std::printf("%8s %4s | %10s %10s %7s | %10s %10s %7s | %9s\n", "context", "q", "cpu 1/s", "gpu 1/s", "x",
              std::to_string(jobs).append(" cpu/s").c_str(), std::to_string(jobs).append(" gpu/s").c_str(),
              "x", "max rel");
  for (const std::int64_t context : {8192, 32768, 131072}) {
    for (const std::int64_t queries : {1, 4}) {
      const Case c = minimax_decode(context, queries);
      const Outputs cpu = reference(c);
      const auto gpu = gpu_reference_attention(c);  // also the warm-up
      if (!gpu) {
        std::printf("%8lld %4lld | the GPU declined the case\n", static_cast<long long>(context),
                    static_cast<long long>(queries));
        continue;
      }
      const double cpu1 = rate(1, seconds, [&] { (void)reference(c); });
      const double gpu1 = rate(1, seconds, [&] { (void)gpu_reference_attention(c); });
      const double cpun = rate(jobs, seconds, [&] { (void)reference(c); });
      const double gpun = rate(jobs, seconds, [&] { (void)gpu_reference_attention(c); });
      std::printf("%8lld %4lld | %10.2f %10.2f %7.1f | %10.2f %10.2f %7.1f | %9.1e\n",
                  static_cast<long long>(context), static_cast<long long>(queries), cpu1, gpu1, gpu1 / cpu1,
                  cpun, gpun, gpun / cpun, max_relative_difference(cpu, *gpu));
      std::fflush(stdout);
    }
  }
  std::printf(
      "\nthe rest of prepare() on the CPU (naive baseline + error model), one thread, decode step:\n");
  for (const std::int64_t context : {8192, 32768, 131072}) {
    const Case c = minimax_decode(context, 1);
    const auto t0 = Clock::now();
    const Outputs baseline = fuzz::naive_baseline(c);
    const double t_baseline = seconds_since(t0);
    const auto t1 = Clock::now();
    (void)fuzz::error_model(c, reference(c), baseline);
    std::printf("%8lld tokens: naive baseline %.3f s, error model (with a CPU reference) %.3f s\n",
                static_cast<long long>(context), t_baseline, seconds_since(t1));
    std::fflush(stdout);
  }
  return 0;
}
