// The backend registry (names, globs, duplicates, mutants naming their twin) and the twins' fast fp16
// rounding against the exact encoder.
#include <gtest/gtest.h>

#include "twin_checks.hpp"

namespace driftcheck {
namespace {

using namespace twin_checks;

// ---- registry

TEST(Registry, NamesAreUniqueAndFollowTheScheme) {
  std::set<std::string_view> names;
  for (const auto& b : registry().all()) {
    EXPECT_TRUE(names.insert(b->name()).second) << b->name();
    EXPECT_FALSE(b->description().empty()) << b->name();
    const std::string prefix = std::string(backend_kind_name(b->kind())) + ".";
    EXPECT_EQ(b->name().substr(0, prefix.size()), prefix) << b->name();
    // GPU mutants are their CPU counterpart's name with "gpu." inserted: mutant.gpu.<op>.<bug>.
    const auto dots = b->name().starts_with("mutant.gpu.") ? 3 : 2;
    EXPECT_EQ(std::count(b->name().begin(), b->name().end(), '.'), dots) << b->name();
  }
}

TEST(Registry, EveryMutantNamesARegisteredTwinOfItsOpAndABugClass) {
  int mutants = 0;
  for (const auto& b : registry().all()) {
    if (b->kind() != BackendKind::kMutant) {
      EXPECT_TRUE(b->mutates().empty()) << b->name();
      continue;
    }
    ++mutants;
    const Backend* twin = registry().find(b->mutates());
    ASSERT_NE(twin, nullptr) << b->name() << " mutates unknown " << b->mutates();
    EXPECT_EQ(twin->kind(), b->name().starts_with("mutant.gpu.") ? BackendKind::kGpu : BackendKind::kCpu);
    EXPECT_EQ(twin->op(), b->op()) << b->name();
    EXPECT_FALSE(b->bug_class().empty()) << b->name();
  }
  EXPECT_GE(mutants, 14);
}

TEST(Registry, MatchHonoursGlobsListsAndTheMutantSwitch) {
  const Registry& r = registry();
  EXPECT_EQ(r.match("cpu.attn.*", false).size(), 5u);
  EXPECT_EQ(r.match("cpu.rmsnorm.*,cpu.dual.*", false).size(), 7u);
  EXPECT_TRUE(r.match("mutant.*", false).empty());
  EXPECT_GE(r.match("mutant.*", true).size(), 14u);
  EXPECT_EQ(r.match("cpu.concat.copy", false).size(), 1u);
  for (const Backend* b : r.match("*", false)) EXPECT_NE(b->kind(), BackendKind::kMutant) << b->name();
  EXPECT_EQ(r.match("cpu.rmsnorm.cud?, cpu.rmsnorm.cuda", false).size(), 1u);  // a union, no duplicates
  EXPECT_TRUE(r.match("", true).empty());
}

TEST(Registry, GlobMatch) {
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("cpu.*", "cpu.attn.aiter_fa"));
  EXPECT_TRUE(glob_match("*.aiter_*", "cpu.attn.aiter_fa"));
  EXPECT_TRUE(glob_match("cpu.?ual.*", "cpu.dual.fused"));
  EXPECT_FALSE(glob_match("cpu.?", "cpu.dual"));
  EXPECT_FALSE(glob_match("cpu.attn", "cpu.attn.x"));
  EXPECT_FALSE(glob_match("*.fused", "cpu.dual.fused_add"));
  EXPECT_TRUE(glob_match("a*b*c", "axxbyyc"));
  EXPECT_FALSE(glob_match("a*b*c", "axxbyy"));
}

TEST(Registry, RejectsDuplicatesAndReportsUnknownNames) {
  Registry r;
  r.add(twin::make_cpu_concat_copy());
  EXPECT_THROW(r.add(twin::make_cpu_concat_copy()), InvalidArgument);
  EXPECT_EQ(r.find("cpu.nope.nope"), nullptr);
  EXPECT_EQ(backend_kind_name(BackendKind::kMutant), "mutant");
}

// ---- formats

// f16_bits against the exact encoder: every fp16 value, its neighbours and the midpoints around it (ties), in
// both signs, plus overflow and NaN.
TEST(TwinFormats, FastFp16RoundingMatchesTheExactEncoder) {
  std::vector<float> probes = {65504.0f, 65519.99f, 65520.0f, 1e30f,
                               INFINITY, 0x1p-25f,  0x1p-24f, 0x1.8p-25f};
  for (std::uint32_t code = 0; code < 0x7c00u; ++code) {
    const float v = static_cast<float>(decode(kFormatF16, code));
    const float next = static_cast<float>(decode(kFormatF16, code + 1));
    const float mid = v + (next - v) / 2;  // exact in fp32
    for (float x : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) probes.push_back(x);
  }
  int checked = 0;
  for (float p : probes) {
    for (float x : {p, -p}) {
      ASSERT_EQ(twin::f16_bits(x), encode(kFormatF16, x)) << x;
      ++checked;
    }
  }
  EXPECT_EQ(twin::f16_bits(NAN), encode(kFormatF16, NAN));
  EXPECT_GT(checked, 4 * 0x7c00);
}

}  // namespace
}  // namespace driftcheck
