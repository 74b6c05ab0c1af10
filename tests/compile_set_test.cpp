// Compile sets (GenOptions::compile_set, `driftcheck fuzz --compile-set K`, a backends file's `compile_set`):
// every case's compile-relevant parameters come from K combinations fixed by (seed, op) while the rest of
// case k stays case k of the default stream; the cases stay valid (correct twins pass them); a backend that
// declares a set gets it, sees at most K specialisations as a JIT compiler keys them, and a resumed
// campaign keeps it; the report names it.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/device/registry.hpp"
#include "driftcheck/external/backends_file.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/spec.hpp"
#include "driftcheck/reference/reference.hpp"
#include "scratch_dir.hpp"

namespace driftcheck::fuzz {
namespace {

GenOptions with_set(int k) {
  GenOptions g;
  g.compile_set = k;
  return g;
}

TEST(CompileSet, EachOpMeetsAtMostKCombinationsAndKeepsTheRestOfItsCase) {
  for (const OpKind op : kAllOps) {
    std::set<std::string> keys, default_keys;
    int same_values = 0;
    for (std::uint64_t k = 0; k < 300; ++k) {
      const CaseSpec s = draw_case(op, 7, k, with_set(4)).value();
      const CaseSpec d = draw_case(op, 7, k).value();
      keys.insert(compile_key(s));
      default_keys.insert(compile_key(d));
      // The free parameters are the default stream's case k.
      same_values += s.value_seed == d.value_seed && s.distribution == d.distribution;
      // ... trimmed to the generator's cost bounds for the combination's shape: a row op's 8K elements,
      // at most two sequences with blocks of 256 tokens or more; masked rows only where causal.
      if (op == OpKind::kAttention) {
        const auto& p = std::get<AttentionParams>(s.params);
        EXPECT_LE(s.seq_lens.size(), d.seq_lens.size());
        for (std::size_t i = 0; i < s.seq_lens.size(); ++i) EXPECT_EQ(s.seq_lens[i], d.seq_lens[i]);
        if (p.block_size >= 256) {
          EXPECT_LE(s.seq_lens.size(), 2u);
        }
        EXPECT_LE(p.num_q_heads * p.head_dim, 512);
        if (s.special == Special::kMaskedRows) {
          EXPECT_TRUE(p.causal);
        }
        for (std::size_t i = 0; i < s.seq_lens.size() && !p.causal; ++i)
          EXPECT_LE(s.query_lens[i], s.seq_lens[i]);
      } else {
        EXPECT_LE(s.rows, d.rows);
        const std::int64_t width = s.hidden + (op == OpKind::kConcat ? s.hidden_b : 0);
        EXPECT_TRUE(s.rows == 1 || s.rows * width <= 8192) << s.rows << " x " << width;
      }
    }
    // Each of 4 templates is picked with probability 1/4 in 300 cases: all of them come.
    EXPECT_EQ(keys.size(), 4u) << op_name(op);
    // Without a set nearly every case is a new specialisation (282 to 299 of 300 at seed 7, printed below).
    EXPECT_GT(default_keys.size(), 250u) << op_name(op);
    std::cout << op_name(op) << ": " << default_keys.size() << " compile keys in 300 cases without a set\n";
    EXPECT_EQ(same_values, 300) << op_name(op);
  }
}

TEST(CompileSet, ALargerSetOnlyAddsCombinations) {
  for (const OpKind op : kAllOps) {
    std::set<std::string> four, eight;
    for (std::uint64_t k = 0; k < 400; ++k) {
      four.insert(compile_key(draw_case(op, 3, k, with_set(4)).value()));
      eight.insert(compile_key(draw_case(op, 3, k, with_set(8)).value()));
    }
    EXPECT_EQ(four.size(), 4u);
    EXPECT_GE(eight.size(), 7u);  // two templates may draw the same combination
    for (const auto& key : four) EXPECT_TRUE(eight.count(key)) << op_name(op) << " " << key;
    // Another seed, another set.
    std::set<std::string> other;
    for (std::uint64_t k = 0; k < 100; ++k)
      other.insert(compile_key(draw_case(op, 4, k, with_set(4)).value()));
    EXPECT_NE(other, four) << op_name(op);
  }
}

TEST(CompileSet, ZeroIsTheDefaultStreamAndBadSizesAreRefused) {
  for (const OpKind op : kAllOps)
    for (std::uint64_t k = 0; k < 20; ++k)
      EXPECT_EQ(nlohmann::json(draw_case(op, 5, k, with_set(0)).value()),
                nlohmann::json(draw_case(op, 5, k).value()));
  EXPECT_THROW((void)draw_case(OpKind::kRmsNorm, 1, 0, with_set(kMaxCompileSet + 1)), InvalidArgument);
  EXPECT_THROW((void)draw_case(OpKind::kRmsNorm, 1, 0, with_set(-1)), InvalidArgument);
  EXPECT_THROW((void)gen_case_spec(OpKind::kRmsNorm, with_set(2)), InvalidArgument);
}

// With a model profile the templates come from the profile's stream: most of them are its real shapes.
TEST(CompileSet, WithAModelTheCombinationsAreTheModelsShapes) {
  GenOptions g = with_set(4);
  g.model = "llama-3.1-8b-eagle3";
  std::set<std::string> keys;
  int real = 0;
  for (std::uint64_t k = 0; k < 200; ++k) {
    const CaseSpec s = draw_case(OpKind::kDualRmsNormCat, 2, k, g).value();
    keys.insert(compile_key(s));
    real += s.hidden == 4096;
  }
  EXPECT_LE(keys.size(), 4u);
  EXPECT_GT(real, 0);
}

// Shrinking a drawn case (RapidCheck's shrinks of the same draw) stays inside the set: a shrink costs no new
// compile.
TEST(CompileSet, RapidChecksShrinksStayInTheSet) {
  std::set<std::string> keys;
  for (std::uint64_t k = 0; k < 200; ++k)
    keys.insert(compile_key(draw_case(OpKind::kAttention, 9, k, with_set(3)).value()));
  ASSERT_LE(keys.size(), 3u);
  const auto drawn = draw_case(OpKind::kAttention, 9, 11, with_set(3));
  int seen = 0;
  for (auto shrinks = drawn.shrinks(); seen < 60;) {
    auto next = shrinks.next();
    if (!next) break;
    EXPECT_TRUE(keys.count(compile_key(next->value()))) << nlohmann::json(next->value()).dump();
    ++seen;
  }
  EXPECT_GT(seen, 5);
}

// What a JIT compiler (Triton) keys a row kernel's specialisation on: each tensor's format, its widths (not
// the row count, which is only the grid), whether each stride is 1, a multiple of 16 or neither, and (with
// `alignment`) the base's 16-byte alignment; and the op's flags.
std::string specialisation(const Case& c, bool alignment) {
  std::string key = nlohmann::json(c.params.index()).dump();
  if (const auto* p = std::get_if<RmsNormParams>(&c.params))
    key += fmt::format("/w{}r{}", static_cast<int>(p->weight_mode), p->residual);
  std::set<const void*> storages;
  for (const auto& [name, t] : c.tensors) {
    key += fmt::format("|{}:{}", name, dtype_name(t.dtype()));
    for (std::int64_t d = 1; d < t.dim(); ++d) key += fmt::format(",{}", t.size(d));
    for (const std::int64_t st : t.strides()) key += st == 1 ? ",s1" : st % 16 == 0 ? ",s16" : ",s";
    if (alignment) key += (t.offset() * dtype_size(t.dtype())) % 16 == 0 ? ",a16" : ",a";
    if (!storages.insert(t.storage().get()).second) key += ",aliased";  // an in-place output
  }
  return key;
}

// A correct rmsnorm kernel (the fp64 reference rounded once) that records the specialisations it meets and
// declares a compile set, as a Triton kernel's backends-file entry does. The oracle's batch-invariance
// re-runs pass each row alone as a view into the batch, whose base may be aligned where the batch's is not
// (or the reverse): with the alignment, a combination is at most two specialisations; without it, one.
class JitBackend final : public Backend {
 public:
  explicit JitBackend(int compile_set) : compile_set_(compile_set) {}
  std::string_view name() const override { return "test.jit"; }
  std::string_view description() const override { return "compile set test backend"; }
  BackendKind kind() const override { return BackendKind::kExternal; }
  OpKind op() const override { return OpKind::kRmsNorm; }
  Support supports(const Case&) const override { return Support::yes(); }
  int compile_set() const override { return compile_set_; }
  void run(Case& c) const override {
    {
      const std::lock_guard lock(mu_);
      seen_.insert(specialisation(c, true));
      shapes_.insert(specialisation(c, false));
    }
    const Outputs ref = reference(c);  // computed before any write: y may alias x
    for (const auto& name : op_signature(c).outputs) c.tensor(name).copy_from(ref.at(name).to_f64());
  }
  // Specialisations met, with the alignment and without.
  std::size_t seen() const {
    const std::lock_guard lock(mu_);
    return seen_.size();
  }
  std::size_t shapes() const {
    const std::lock_guard lock(mu_);
    return shapes_.size();
  }
  void forget() {
    const std::lock_guard lock(mu_);
    seen_.clear(), shapes_.clear();
  }

 private:
  int compile_set_;
  mutable std::mutex mu_;
  mutable std::set<std::string> seen_, shapes_;
};

CampaignOptions options(const Registry& r, const std::string& dir, std::uint64_t cases) {
  CampaignOptions o;
  o.ops = {OpKind::kRmsNorm};
  o.backend_globs = "test.jit";
  o.cases = cases;
  o.seed = 5;
  o.jobs = 2;
  o.shrink_seconds = 0;
  o.out_dir = testing::fresh_scratch_dir("compile_set_test", dir);
  o.backends = &r;
  return o;
}

TEST(CompileSet, ABackendThatDeclaresOneGetsItAndAResumeKeepsIt) {
  Registry r;
  auto owned = std::make_unique<JitBackend>(3);
  JitBackend* jit = owned.get();
  r.add(std::move(owned));

  auto o = options(r, "declared", 80);
  const auto first = run_campaign(o);
  EXPECT_EQ(first.exit_code, 0);
  EXPECT_EQ(first.report.stream, "--compile-set 3");
  EXPECT_LE(jit->shapes(), 3u);
  EXPECT_GE(jit->shapes(), 2u);
  EXPECT_LE(jit->seen(), 6u);

  // Resumed to 160 cases: the journal's compile set, the same 3 specialisations at most.
  o.resume = true, o.cases = 160;
  const auto second = run_campaign(o);
  EXPECT_EQ(second.report.stream, "--compile-set 3");
  EXPECT_EQ(second.report.cases, 160);
  EXPECT_LE(jit->shapes(), 3u);
  EXPECT_LE(jit->seen(), 6u);

  // --compile-set 0 turns the declared set off: the default stream, and many specialisations.
  jit->forget();
  auto off = options(r, "off", 80);
  off.compile_set = 0;
  const auto plain = run_campaign(off);
  EXPECT_TRUE(plain.report.stream.empty()) << plain.report.stream;
  EXPECT_GT(jit->shapes(), 20u);

  // --compile-set 5 wins over the declared 3.
  jit->forget();
  auto five = options(r, "five", 80);
  five.compile_set = 5;
  EXPECT_EQ(run_campaign(five).report.stream, "--compile-set 5");
  EXPECT_LE(jit->shapes(), 5u);
  EXPECT_GT(jit->shapes(), 3u);
  EXPECT_LE(jit->seen(), 10u);
}

// Every op's cases drawn from a compile set are valid cases that the correct CPU twins pass (their known
// upstream findings aside): the template's shape replaces the case's without breaking what the case's other
// draws assumed (row bounds, scales, masked rows, the cost of big blocks). A twin whose supported space the
// set leaves out judges nothing, and its error says that the compile set is why.
TEST(CompileSet, CorrectTwinsPassCompileSetCases) {
  CampaignOptions o;
  o.backend_globs = "cpu.*";
  o.cases = 200;
  o.seed = 11;
  o.jobs = 2;
  o.shrink_seconds = 0;
  o.compile_set = 4;
  o.out_dir = testing::fresh_scratch_dir("compile_set_test", "twins");
  const auto result = run_campaign(o);
  EXPECT_TRUE(result.report.findings.empty()) << result.report.findings.front().id;
  std::map<std::string, int> judged;  // backends that judged cases, by op
  for (const auto& b : result.report.backends) {
    EXPECT_EQ(b.worst_verdict, "") << b.name;
    if (b.cases_run > 0) {
      ++judged[b.op];
      EXPECT_TRUE(b.error.empty()) << b.error;
    } else {
      EXPECT_NE(b.error.find("ran zero cases: all"), std::string::npos) << b.error;
      EXPECT_NE(b.error.find("compile set of 4"), std::string::npos) << b.error;
    }
  }
  EXPECT_EQ(judged.size(), 4u) << "every op is judged by some twin";
  // Errors are zero-case backends only.
  for (const auto& e : result.report.errors) EXPECT_NE(e.find("ran zero cases"), std::string::npos) << e;
}

TEST(CompileSet, TheBackendsFileKeyIsReadAndBadValuesNamed) {
  const auto decl = [](const std::string& value) {
    return fmt::format(R"(format = "driftcheck.backends"
version = 1

[[backend]]
name = "jit"
op = "rmsnorm"
numerics = "like:cpu.rmsnorm.native"
compile_set = {}
)",
                       value);
  };
  const auto read = [&](const std::string& value) {
    return external::load_backends_text(decl(value), "jit.toml", registry(), false);
  };
  EXPECT_EQ(read("8").at(0).compile_set, 8);
  EXPECT_EQ(read("0").at(0).compile_set, 0);
  for (const std::string bad : {"-1", "65", "\"8\"", "2.5"}) {
    try {
      read(bad);
      ADD_FAILURE() << "compile_set = " << bad << " was accepted";
    } catch (const external::BackendFileError& e) {
      EXPECT_NE(std::string(e.what()).find("compile_set"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("jit.toml:"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace driftcheck::fuzz
