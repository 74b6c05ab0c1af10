// GPU backends under the oracle. On a machine with a GPU: every gpu.* backend passes generated cases of its
// op; every mutant.gpu.* backend is caught within a bounded number of generated cases; the GPU kernels match
// the CPU twins the docs say they match, bit for bit (docs/gpu/README.md, "GPU kernels and their twins");
// runs from many threads at once (one device slot each, no lock) give the bits of runs one at a time. Without
// a GPU each must report itself unavailable with a reason (and run nothing). Built without a GPU toolchain,
// the registry must hold no gpu.* backend at all.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "driftcheck/device/backend.hpp"
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

TEST(GpuBackends, OneForEveryOpWhenBuiltNoneOtherwise) {
#if DRIFTCHECK_HAVE_GPU
  for (OpKind op : kAllOps) {
    int n = 0;
    for (const Backend* b : gpu_backends()) n += b->op() == op;
    EXPECT_GE(n, 1) << "no GPU backend for " << op_name(op);
  }
  EXPECT_GE(registry().match("mutant.gpu.*", true).size(), 17u);
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
      const fuzz::Evaluation e = fuzz::evaluate(*b, pc);
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
      caught = fuzz::evaluate(*m, cases[index]);
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

// docs/gpu/README.md, "GPU kernels and their twins": which kernel the CPU side predicts bit for bit.
struct TwinClaim {
  const char* gpu;
  const char* twin;
  bool bit_for_bit;
};
constexpr TwinClaim kTwinClaims[] = {
    {"gpu.rmsnorm.cuda", "cpu.rmsnorm.cuda", true},
    {"gpu.rmsnorm.fused_add", "cpu.rmsnorm.fused_add", true},
    {"gpu.dual.fused", "cpu.dual.fused", true},
    {"gpu.concat.copy", "cpu.concat.copy", true},
    {"gpu.attn.paged_online", "cpu.attn.triton_unified", false},
};

TEST(GpuTwins, MatchWhereTheDocsSaySo) {
  if (!gpu_here()) GTEST_SKIP() << "no GPU";
  for (const TwinClaim& claim : kTwinClaims) {
    const Backend* g = registry().find(claim.gpu);
    const Backend* t = registry().find(claim.twin);
    ASSERT_TRUE(g && t) << claim.gpu << " / " << claim.twin;
    int both = 0, identical = 0;
    std::int64_t differing = 0;
    for (const fuzz::PreparedCase& pc : prepared(g->op(), cases_for(g->op()))) {
      if (!g->supports(pc.input).ok || !t->supports(pc.input).ok) continue;
      ++both;
      const bool same = same_bytes(run_clone(*g, pc.input), run_clone(*t, pc.input), &differing);
      identical += same;
      if (claim.bit_for_bit) {
        EXPECT_TRUE(same) << claim.gpu << " vs " << claim.twin << " differ on case " << pc.input.index << ": "
                          << nlohmann::json(fuzz::draw_case(g->op(), kSeed, pc.input.index).value()).dump();
      }
    }
    EXPECT_GE(both, 25) << claim.gpu << " and " << claim.twin << " share too few cases";
    std::cout << "[twins] " << claim.gpu << " vs " << claim.twin << ": " << identical << " of " << both
              << " cases bit-identical, " << differing << " differing elements (documented: "
              << (claim.bit_for_bit ? "bit for bit" : "not bit for bit") << ")\n";
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
      if (b->supports(pc.input).ok) work.emplace_back(b, &pc.input);
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

}  // namespace
}  // namespace driftcheck
