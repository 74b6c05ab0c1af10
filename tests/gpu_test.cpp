// GPU backends under the oracle. On a machine with a GPU every gpu.* backend must pass generated cases of its
// op; without one each must report itself unavailable with a reason (and run nothing). Built without a GPU
// toolchain, the registry must hold no gpu.* backend at all.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck {
namespace {

std::vector<const Backend*> gpu_backends() {
  return registry().match("gpu.*", false);
}

TEST(GpuBackends, OneForEveryOpWhenBuiltNoneOtherwise) {
#if DRIFTCHECK_HAVE_GPU
  for (OpKind op : kAllOps) {
    int n = 0;
    for (const Backend* b : gpu_backends()) n += b->op() == op;
    EXPECT_GE(n, 1) << "no GPU backend for " << op_name(op);
  }
#else
  EXPECT_TRUE(gpu_backends().empty());
#endif
}

TEST(GpuBackends, UnavailableOnesSayWhy) {
  for (const Backend* b : gpu_backends()) {
    std::string why;
    if (!b->available(&why)) {
      EXPECT_NE(why.find("no GPU"), std::string::npos) << b->name() << ": " << why;
    }
  }
}

// The same stream of generated cases a campaign draws, judged by the oracle (metamorphic checks included).
TEST(GpuBackends, PassGeneratedCases) {
  constexpr std::uint64_t kSeed = 20261130;
  constexpr std::uint64_t kCases = 150;
  for (const Backend* b : gpu_backends()) {
    std::string why;
    if (!b->available(&why)) continue;  // checked above; nothing can run here
    int ran = 0;
    for (std::uint64_t k = 0; k < kCases; ++k) {
      const fuzz::CaseSpec spec = fuzz::draw_case(b->op(), kSeed, k).value();
      Case c = fuzz::materialize(spec);
      if (!b->supports(c).ok) continue;
      const fuzz::PreparedCase prepared = fuzz::prepare(std::move(c));
      const fuzz::Evaluation e = fuzz::evaluate(*b, prepared);
      ++ran;
      EXPECT_FALSE(fuzz::is_failure(e.verdict))
          << b->name() << " case " << k << ": " << fuzz::verdict_name(e.verdict) << ": " << e.detail
          << "\nspec: " << nlohmann::json(spec).dump();
    }
    // Generated cases spread over each op's variants (e.g. a third of rmsnorm cases carry a residual), so a
    // backend of one variant sees a share of them; a few dozen judged cases per backend is the floor.
    EXPECT_GE(ran, 25) << b->name() << " declined nearly every generated case";
  }
}

}  // namespace
}  // namespace driftcheck
