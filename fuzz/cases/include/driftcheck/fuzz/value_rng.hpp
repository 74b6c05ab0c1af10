// Deterministic values for materialised cases and the acceptance proxy's drafter: std::mt19937_64 (its output
// sequence is fixed by the C++ standard) and arithmetic that is exact in IEEE double, so the same seed gives
// the same bits on every platform (std::normal_distribution is implementation-defined). Internal to dc_fuzz.
#pragma once

#include <cstdint>
#include <random>

namespace driftcheck::fuzz {

class ValueRng {
 public:
  ValueRng(std::uint64_t seed, std::uint64_t stream)
      : gen_(mix(seed ^ mix(stream + 0x9e3779b97f4a7c15ull))) {}
  std::uint64_t next() { return gen_(); }
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : gen_() % n; }
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1p-53; }  // [0, 1), exact
  // Irwin-Hall of four 16-bit uniforms, scaled to unit variance: mean 0, support +-2*sqrt(3). Every step is
  // exact except the final multiply by sqrt(3) (a correctly rounded constant), so the result is platform
  // independent.
  double normal() {
    const std::uint64_t x = gen_();
    double sum = 0;
    for (int k = 0; k < 4; ++k) sum += (static_cast<double>((x >> (16 * k)) & 0xffffu) + 0.5) * 0x1p-16;
    return (sum - 2.0) * 1.7320508075688772;
  }
  double sign() { return (gen_() & 1u) ? -1.0 : 1.0; }

 private:
  static std::uint64_t mix(std::uint64_t z) {  // splitmix64 finaliser: decorrelates nearby seeds
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::mt19937_64 gen_;
};

}  // namespace driftcheck::fuzz
