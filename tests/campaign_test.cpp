// Campaign runner, journal and bundles, on test backends of the rmsnorm op registered in a private registry:
// "exact" writes the fp64 reference rounded once (a correct kernel), "zero" writes zeros (fails every case
// that is not all-zero), "never" declines every case. Covers determinism, replay of case k alone, resume
// after a kill with a torn journal line, zero-case backends as errors, deduplication, and bundle / journal
// file handling.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/bundle.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/features.hpp"
#include "driftcheck/fuzz/group_hints.hpp"
#include "driftcheck/fuzz/journal.hpp"
#include "driftcheck/fuzz/known_findings.hpp"
#include "scratch_dir.hpp"

namespace driftcheck::fuzz {
namespace {

enum class Behaviour { kExact, kZero, kNever, kOffline };

class TestBackend : public Backend {
 public:
  TestBackend(std::string name, Behaviour b) : name_(std::move(name)), behaviour_(b) {}
  std::string_view name() const override { return name_; }
  std::string_view description() const override { return "campaign test backend"; }
  BackendKind kind() const override { return BackendKind::kCpu; }
  bool available(std::string* why) const override {
    if (behaviour_ != Behaviour::kOffline) return true;
    *why = "no device here";
    return false;
  }
  OpKind op() const override { return OpKind::kRmsNorm; }
  Support supports(const Case&) const override {
    return behaviour_ == Behaviour::kNever ? Support::no("test backend declines every case") : Support::yes();
  }
  void run(Case& c) const override {
    const Outputs ref = reference(c);  // computed before any write: y may alias x
    for (const auto& name : op_signature(c).outputs) {
      const std::vector<double> v = ref.at(name).to_f64();
      c.tensor(name).copy_from(behaviour_ == Behaviour::kExact ? v : std::vector<double>(v.size(), 0.0));
    }
  }

 private:
  std::string name_;
  Behaviour behaviour_;
};

const Registry& test_registry() {
  static const Registry reg = [] {
    Registry r;
    r.add(std::make_unique<TestBackend>("test.rmsnorm.exact", Behaviour::kExact));
    r.add(std::make_unique<TestBackend>("test.rmsnorm.zero", Behaviour::kZero));
    r.add(std::make_unique<TestBackend>("test.rmsnorm.never", Behaviour::kNever));
    r.add(std::make_unique<TestBackend>("test.rmsnorm.offline", Behaviour::kOffline));
    return r;
  }();
  return reg;
}

std::filesystem::path fresh_dir(const std::string& name) {
  return testing::fresh_scratch_dir("campaign_test", name);
}

CampaignOptions options(const std::filesystem::path& dir, std::string globs, std::uint64_t cases) {
  CampaignOptions o;
  o.ops = {OpKind::kRmsNorm};
  o.backend_globs = std::move(globs);
  o.cases = cases;
  o.seed = 5;
  o.jobs = 2;
  o.out_dir = dir;
  o.gen.large_shapes = false;
  o.shrink_steps = 10;
  o.checkpoint_seconds =
      0;  // a checkpoint on every monitor tick, so a cut journal has several to choose from
  o.backends = &test_registry();
  return o;
}

std::set<std::string> finding_ids(const reports::Report& r) {
  std::set<std::string> ids;
  for (const auto& f : r.findings) ids.insert(f.id);
  return ids;
}

const reports::BackendReport& backend(const reports::Report& r, std::string_view name) {
  for (const auto& b : r.backends)
    if (b.name == name) return b;
  throw std::runtime_error("no such backend in report");
}

constexpr std::uint64_t kCases = 16;

TEST(Campaign, SameSeedGivesTheSameFindingsAndCounts) {
  const auto a = run_campaign(options(fresh_dir("det_a"), "test.rmsnorm.exact,test.rmsnorm.zero", kCases));
  auto o = options(fresh_dir("det_b"), "test.rmsnorm.exact,test.rmsnorm.zero", kCases);
  o.jobs = 1;  // a different interleaving of workers must not change the stream
  const auto b = run_campaign(o);
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_EQ(a.report.cases, static_cast<std::int64_t>(kCases));
  EXPECT_FALSE(a.report.findings.empty());
  EXPECT_EQ(finding_ids(a.report), finding_ids(b.report));
  for (const auto* name : {"test.rmsnorm.exact", "test.rmsnorm.zero"}) {
    EXPECT_EQ(backend(a.report, name).passed, backend(b.report, name).passed) << name;
    EXPECT_EQ(backend(a.report, name).failures_by_verdict, backend(b.report, name).failures_by_verdict)
        << name;
  }
  EXPECT_EQ(backend(a.report, "test.rmsnorm.exact").passed, static_cast<std::int64_t>(kCases));
  EXPECT_TRUE(backend(a.report, "test.rmsnorm.zero").first_finding_s.has_value());
}

TEST(Campaign, CaseKReplaysAloneAndEveryGroupHasAShrunkBundle) {
  const auto dir = fresh_dir("replay");
  const auto r = run_campaign(options(dir, "test.rmsnorm.zero", kCases));
  ASSERT_FALSE(r.report.findings.empty());
  const Backend& zero = *test_registry().find("test.rmsnorm.zero");
  const Backend& exact = *test_registry().find("test.rmsnorm.exact");
  for (const auto& f : r.report.findings) {
    // The stream case, drawn on its own, fails the same way: every finding is replayable without a bundle.
    Case c = materialize(draw_case(OpKind::kRmsNorm, f.seed, f.case_index, {false}).value());
    const CheckResult alone = check_case(zero, std::move(c));
    ASSERT_TRUE(alone.support.ok);
    EXPECT_EQ(verdict_name(alone.evaluation.verdict), f.verdict);
    if (f.bundle.empty()) continue;
    Bundle b = read_bundle(dir / f.bundle);
    EXPECT_EQ(b.finding.at("case_index"), f.case_index);
    EXPECT_EQ(verdict_name(check_case(zero, std::move(b.pristine)).evaluation.verdict), f.verdict);
  }
  ASSERT_FALSE(r.report.groups.empty());
  std::size_t members = 0;
  for (const auto& g : r.report.groups) {
    members += g.members.size();
    // The representative is the shrunk case: it fails the same way, and passes on a correct backend.
    ASSERT_TRUE(g.shrunk) << g.id;
    Bundle b = read_bundle(dir / g.representative);
    EXPECT_EQ(b.finding.at("backend"), "test.rmsnorm.zero");
    EXPECT_EQ(verdict_name(check_case(zero, std::move(b.pristine)).evaluation.verdict), g.verdict);
    Bundle again = read_bundle(dir / g.representative);
    EXPECT_EQ(check_case(exact, std::move(again.pristine)).evaluation.verdict, Verdict::kPass);
  }
  EXPECT_EQ(members, r.report.findings.size()) << "every finding is in exactly one group";
}

const reports::FindingGroup& largest_group(const reports::Report& r, std::string_view backend) {
  const reports::FindingGroup* best = nullptr;
  for (const auto& g : r.groups)
    if (g.backend == backend && (best == nullptr || g.cases > best->cases)) best = &g;
  if (best == nullptr) throw std::runtime_error("no group of " + std::string(backend));
  return *best;
}

// Two planted bugs of different causes in one campaign: each mutant's findings (one per shape class)
// collapse into groups whose cause is the feature set the bug needs, found by shrinking and ablation, not
// told: the rmsnorm mutant that ignores the row stride needs padded rows and more than one row (row 0 is
// right); the attention mutant that maps query heads to KV heads by modulo needs GQA. Every representative
// replays: it fails on the mutant and passes on the twin the mutant was made from.
TEST(Campaign, TwoPlantedBugsGroupByTheirCauses) {
  const auto dir = fresh_dir("two_bugs");
  auto o = options(dir, "mutant.rmsnorm.stride_ignored,mutant.attn.gqa_modulo", 96);
  o.ops = {OpKind::kRmsNorm, OpKind::kAttention};
  o.backends = &registry();
  o.shrink_steps = 100;
  o.shrink_seconds = 120;  // a bound, not a target: the phase ends when every finding is explained
  const auto r = run_campaign(o);
  ASSERT_EQ(r.exit_code, 1);
  const auto& stride = largest_group(r.report, "mutant.rmsnorm.stride_ignored");
  EXPECT_EQ(stride.features, (std::vector<std::string>{"row stride != width", "batch of rows"}));
  EXPECT_TRUE(stride.shrunk && stride.confirmed) << stride.id;
  const auto& gqa = largest_group(r.report, "mutant.attn.gqa_modulo");
  EXPECT_EQ(gqa.features, std::vector<std::string>{"GQA"});
  EXPECT_TRUE(gqa.shrunk && gqa.confirmed) << gqa.id;
  // Far fewer groups than signatures, and every failing case counted once in some group.
  std::int64_t grouped = 0, failing = 0;
  for (const auto& g : r.report.groups) grouped += g.cases;
  for (const auto& b : r.report.backends)
    for (const auto& [v, n] : b.failures_by_verdict) failing += n;
  EXPECT_EQ(grouped, failing);
  // Each backend's row names the upstream code it models, as `driftcheck list` does.
  for (const auto& b : r.report.backends)
    EXPECT_EQ(b.upstream, registry().find(b.name)->provenance()) << b.name;
  // One group per bug: the signatures of each (backend, verdict), over several shape classes, have one cause.
  std::set<std::string> finding_classes;
  for (const auto& f : r.report.findings) finding_classes.insert(f.backend + "|" + f.verdict);
  EXPECT_EQ(r.report.groups.size(), finding_classes.size()) << "grouping collapses shape classes";
  EXPECT_GT(r.report.findings.size(), r.report.groups.size());
  // Judged as the campaign judges: the twin's known upstream defects repaired in the mutant and in the twin
  // (a padded row of the csrc twin is its misaligned-vector finding, docs/FINDINGS.md).
  const auto as_judged = [](const Backend& b) -> std::shared_ptr<const Backend> {
    std::shared_ptr<const Backend> repaired = repaired_backend(builtin_known_findings(), b);
    return repaired ? repaired : std::shared_ptr<const Backend>(&b, [](const Backend*) {});
  };
  for (const auto& g : r.report.groups) {
    if (!g.shrunk) continue;
    const Backend& mutant = *registry().find(g.backend);
    Bundle b = read_bundle(dir / g.representative);
    EXPECT_EQ(verdict_name(check_case(*as_judged(mutant), std::move(b.pristine)).evaluation.verdict),
              g.verdict)
        << g.id;
    Bundle again = read_bundle(dir / g.representative);
    const Backend& twin = *registry().find(mutant.mutates());
    EXPECT_EQ(check_case(*as_judged(twin), std::move(again.pristine)).evaluation.verdict, Verdict::kPass)
        << g.id;
  }
  // Disk: bundles for groups and at most two drawn ones per (backend, verdict).
  std::set<std::string> classes;
  for (const auto& g : r.report.groups) classes.insert(g.backend + "|" + g.verdict);
  std::size_t bundles = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "findings")) bundles += e.is_directory();
  EXPECT_LE(bundles, r.report.groups.size() + 2 * classes.size());
}

// One bug, one group (issue #22): a campaign over a kernel with one cause reports one group per verdict it
// fails with, whatever shape classes its cases fall in, and the group says what the cause is in words.
std::vector<reports::FindingGroup> groups_of(const reports::Report& r, std::string_view backend) {
  std::vector<reports::FindingGroup> out;
  for (const auto& g : r.groups)
    if (g.backend == backend) out.push_back(g);
  return out;
}

// One line per group, for a failure message: its verdict, cause and size.
std::string describe(const std::vector<reports::FindingGroup>& groups) {
  std::string out;
  for (const auto& g : groups) {
    out += "\n  " + g.verdict + " {";
    for (const auto& f : g.features) out += f + "; ";
    out += "} " + std::to_string(g.members.size()) + " findings: " + g.detail.substr(0, 160);
  }
  return out;
}

CampaignResult one_cause_campaign(const std::string& name, const std::string& backend) {
  auto o = options(fresh_dir(name), backend, 400);
  o.backends = &registry();
  o.gen.large_shapes = true;
  o.shrink_steps = 200;
  o.shrink_seconds = 600, o.shrink_seconds_per_finding = 600;  // bounded by steps, not by the machine
  return run_campaign(o);
}

// The row's mean square rounded once to the activation dtype: every element of a row moves by one relative
// error. It fails in every dtype and alignment class, beyond the tolerance on some rows and off the declared
// rounding points on most: one group, over several shape classes, whose detail says in words what the
// rounding-level findings among its members show.
TEST(OneCause, MeanSquareRoundedOnceIsOneGroup) {
  const auto r = one_cause_campaign("mean_square", "mutant.rmsnorm.mean_square_rounded");
  ASSERT_EQ(r.exit_code, 1);
  const auto groups = groups_of(r.report, "mutant.rmsnorm.mean_square_rounded");
  ASSERT_EQ(groups.size(), 1u) << describe(groups);
  const auto& g = groups.front();
  std::set<std::string> classes, member_verdicts;
  for (const auto& f : r.report.findings) classes.insert(f.shape_class);
  for (const auto& m : g.members) member_verdicts.insert(m.verdict);
  EXPECT_GT(classes.size(), 1u) << "the findings span several shape classes";
  EXPECT_EQ(g.members.size(), r.report.findings.size());
  EXPECT_EQ(g.verdict, "beyond_tolerance");
  EXPECT_EQ(member_verdicts, (std::set<std::string>{"beyond_statistical_bound", "beyond_tolerance"}));
  EXPECT_TRUE(g.features.empty()) << describe(groups);
  // In words: the declared rounding points, the share of elements off them against a correct kernel's, the
  // p-value.
  EXPECT_NE(g.detail.find("the same cause at rounding level in"), std::string::npos) << g.detail;
  EXPECT_NE(g.detail.find("beyond the declared rounding points (fp32 math over a sum of squares"),
            std::string::npos)
      << g.detail;
  EXPECT_NE(g.detail.find("where a correct kernel puts none"), std::string::npos) << g.detail;
  EXPECT_NE(g.detail.find("p-value"), std::string::npos) << g.detail;
}

// eps hard-coded to 1e-5: every group's cause is an eps (below 1e-5, or 0), one group for each, and the hint
// asks whether the kernel uses the eps it is given.
TEST(OneCause, EpsHardCodedIsAGroupPerEpsThatNamesIt) {
  const auto r = one_cause_campaign("eps_fixed", "mutant.rmsnorm.eps_fixed");
  ASSERT_EQ(r.exit_code, 1);
  const auto groups = groups_of(r.report, "mutant.rmsnorm.eps_fixed");
  ASSERT_FALSE(groups.empty());
  std::set<std::string> eps;
  for (const auto& g : groups) {
    ASSERT_TRUE(has_any(g.features, {"eps < 1e-5", "eps = 0"})) << describe(groups);
    eps.insert(has_all(g.features, {"eps = 0"}) ? "eps = 0" : "eps < 1e-5");
    EXPECT_NE(g.detail.find("does the kernel use the eps it is given?"), std::string::npos) << g.detail;
  }
  EXPECT_EQ(eps.size(), groups.size()) << describe(groups);
}

// Features implied by a more specific one are left out of a cause; both stay in a case's features (a group
// still explains every case that has its cause).
TEST(OneCause, ImpliedFeaturesAreLeftOutOfACause) {
  CaseSpec s;
  s.op = OpKind::kRmsNorm;
  s.params = RmsNormParams{};
  s.hidden = 4096;
  EXPECT_TRUE(has_all(case_features(s), {"H > 256", "H > 2048"}));
  const auto cause = without_implied(case_features(s));
  EXPECT_TRUE(has_all(cause, {"H > 2048"}));
  EXPECT_FALSE(has_any(cause, {"H > 256"}));
  // Each eps edit moves eps across 1e-5; eps = 0 is its own feature.
  std::get<RmsNormParams>(s.params).eps = 1e-6;
  EXPECT_TRUE(has_all(case_features(s), {"eps < 1e-5"}));
  EXPECT_TRUE(has_all(case_features(*without_feature(s, "eps < 1e-5")), {"eps >= 1e-5"}));
  std::get<RmsNormParams>(s.params).eps = 0;
  EXPECT_FALSE(has_any(case_features(s), {"eps < 1e-5", "eps >= 1e-5"}));
  // Head sizes that are not a multiple of 32 go to the next multiple.
  CaseSpec a;
  a.op = OpKind::kAttention;
  AttentionParams p;
  p.head_dim = 80;
  a.params = p;
  EXPECT_TRUE(has_all(case_features(a), {"head_dim % 32 != 0"}));
  EXPECT_EQ(std::get<AttentionParams>(without_feature(a, "head_dim % 32 != 0")->params).head_dim, 96);
}

// A NaN group whose cause includes a mask and an inf/NaN key or value (or the poison of unused slots) says
// that a masked key reached P.V; other groups get no such hint.
TEST(GroupHints, MaskedInfOrNanReachingPVIsNamed) {
  EXPECT_TRUE(group_hint("nan_mismatch", {"query_len > 1", "inf input"})
                  .starts_with("a masked key's infinite value reached P.V (P = 0 times inf is NaN)"));
  EXPECT_TRUE(group_hint("nan_mismatch", {"GQA", "sliding window", "NaN input"})
                  .starts_with("a masked key's NaN reached the softmax or P.V"));
  EXPECT_TRUE(group_hint("nan_mismatch", {"seq_len % block_size != 0"})
                  .starts_with("an unused cache slot's NaN/inf reached P.V"));
  EXPECT_EQ(group_hint("nan_mismatch", {"inf input"}), "");                       // no mask
  EXPECT_EQ(group_hint("nan_mismatch", {"GQA", "query_len > 1"}), "");            // no inf/NaN
  EXPECT_EQ(group_hint("beyond_tolerance", {"query_len > 1", "inf input"}), "");  // not NaN
  EXPECT_EQ(with_group_hint("nan_mismatch", {"spare pages"}, "o[0, 0, 0]: nan where the reference is 1")
                .substr(0, 40),
            "an unused cache slot's NaN/inf reached P");
  EXPECT_TRUE(
      with_group_hint("nan_mismatch", {"spare pages"}, "o[0, 0, 0]: nan").ends_with("; o[0, 0, 0]: nan"));
  // Removing a special value is an edit ablation can test.
  CaseSpec s;
  s.special = Special::kInfInput;
  EXPECT_TRUE(has_all(case_features(s), {"inf input"}));
  EXPECT_FALSE(has_any(case_features(*without_feature(s, "inf input")), {"inf input", "NaN input"}));
}

// The planted bug of vllm#30887 (masked P times the garbage V of the last tile): its groups say so.
TEST(GroupHints, MaskedPTimesVGroupSaysAMaskedKeyReachedPV) {
  const auto dir = fresh_dir("masked_pv");
  auto o = options(dir, "mutant.attn.masked_p_times_v", 120);
  o.ops = {OpKind::kAttention};
  o.backends = &registry();
  o.shrink_steps = 100;
  o.shrink_seconds = 60;
  const auto r = run_campaign(o);
  ASSERT_EQ(r.exit_code, 1);
  bool nan_group = false;
  for (const auto& g : r.report.groups) {
    if (g.verdict != "nan_mismatch") continue;
    nan_group = true;
    EXPECT_TRUE(g.detail.find("reached P.V") != std::string::npos) << g.id << ": " << g.detail;
  }
  EXPECT_TRUE(nan_group);
}

TEST(Campaign, DrawingCaseKDoesNotDependOnWhatWasDrawnBefore) {
  nlohmann::json late = draw_case(OpKind::kRmsNorm, 5, 11, {false}).value();
  for (std::uint64_t k = 0; k < 11; ++k) (void)draw_case(OpKind::kRmsNorm, 5, k, {false}).value();
  EXPECT_EQ(late, nlohmann::json(draw_case(OpKind::kRmsNorm, 5, 11, {false}).value()));
}

TEST(Campaign, DeduplicatesBySignature) {
  const auto dir = fresh_dir("dedup");
  const auto r = run_campaign(options(dir, "test.rmsnorm.zero", kCases));
  // Expected signatures, recomputed case by case.
  const Backend& zero = *test_registry().find("test.rmsnorm.zero");
  std::set<std::string> expected;
  std::int64_t failing = 0;
  for (std::uint64_t k = 0; k < kCases; ++k) {
    const CaseSpec spec = draw_case(OpKind::kRmsNorm, 5, k, {false}).value();
    const CheckResult c = check_case(zero, materialize(spec));
    if (!is_failure(c.evaluation.verdict)) continue;
    ++failing;
    expected.insert(std::string(verdict_name(c.evaluation.verdict)) + "|" + shape_class(spec));
  }
  std::set<std::string> got;
  for (const auto& f : r.report.findings) got.insert(f.verdict + "|" + f.shape_class);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(r.report.findings.size(), expected.size()) << "one finding per signature";
  std::int64_t reported_failing = 0;
  for (const auto& [v, n] : backend(r.report, "test.rmsnorm.zero").failures_by_verdict) reported_failing += n;
  EXPECT_EQ(reported_failing, failing) << "every failing case is counted even when deduplicated";
  std::int64_t by_signature = 0, by_group = 0;
  for (const auto& f : r.report.findings) by_signature += f.cases;
  for (const auto& g : r.report.groups) by_group += g.cases;
  EXPECT_EQ(by_signature, failing) << "each signature counts its own failing cases";
  EXPECT_EQ(by_group, failing) << "each group counts the cases of the signatures it explains";
}

std::vector<std::string> lines_of(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// The "killed" run is built from two runs whose journals do not depend on timing: the first quarter of the
// cases, then resumed to half of them. Its journal is cut back to the first run's last checkpoint (written
// once discovery of the quarter ended, so it exists however the monitor's ticks fell), keeping every finding
// record (they were flushed before the kill), report files gone, and a torn half-line at the end.
TEST(Campaign, ResumeAfterAKillWithATornLineLosesNothing) {
  const std::string globs = "test.rmsnorm.exact,test.rmsnorm.zero";
  const auto full = run_campaign(options(fresh_dir("resume_full"), globs, kCases));

  const auto dir = fresh_dir("resume_cut");
  (void)run_campaign(options(dir, globs, kCases / 4));
  auto half = options(dir, globs, kCases / 2);
  half.resume = true;
  (void)run_campaign(half);
  const auto journal = dir / "journal.jsonl";
  std::vector<std::string> kept;
  std::optional<std::string> checkpoint;
  std::size_t findings_after_checkpoint = 0;
  for (const auto& line : lines_of(journal)) {
    const auto j = nlohmann::json::parse(line);
    const std::string type = j.at("type");
    if (type == "progress" && j.at("completed") == kCases / 4) checkpoint = line;
    if (type == "finding" && j.at("case_index") >= kCases / 4) ++findings_after_checkpoint;
    if (type != "progress" && type != "end") kept.push_back(line);
  }
  ASSERT_TRUE(checkpoint.has_value()) << "the first run's closing checkpoint";
  // Without findings past the checkpoint the test would not show that resume keeps them.
  ASSERT_GT(findings_after_checkpoint, 0u);
  kept.push_back(*checkpoint);
  {
    std::ofstream out(journal, std::ios::trunc);
    for (const auto& l : kept) out << l << "\n";
    out << R"({"type":"progress","completed":)";  // torn: the kill landed mid-write
  }
  std::filesystem::remove(dir / "report.json");

  auto o = options(dir, globs, kCases);
  o.resume = true;
  const auto resumed = run_campaign(o);
  EXPECT_EQ(resumed.report.cases, static_cast<std::int64_t>(kCases));
  EXPECT_EQ(finding_ids(resumed.report), finding_ids(full.report));
  for (const auto* name : {"test.rmsnorm.exact", "test.rmsnorm.zero"}) {
    EXPECT_EQ(backend(resumed.report, name).cases_run, backend(full.report, name).cases_run) << name;
    EXPECT_EQ(backend(resumed.report, name).failures_by_verdict,
              backend(full.report, name).failures_by_verdict);
  }
  for (const auto& f : resumed.report.findings) {
    if (!f.bundle.empty()) {
      EXPECT_TRUE(std::filesystem::exists(dir / f.bundle / "case.json"));
    }
  }
  for (const auto& g : resumed.report.groups)
    EXPECT_TRUE(std::filesystem::exists(dir / g.representative / "case.json"));
  std::int64_t full_cases = 0, resumed_cases = 0;
  for (const auto& g : full.report.groups) full_cases += g.cases;
  for (const auto& g : resumed.report.groups) resumed_cases += g.cases;
  EXPECT_EQ(resumed_cases, full_cases) << "failing cases are counted once across the kill";
  // The torn line is gone and the journal reads cleanly again.
  EXPECT_FALSE(read_journal(journal).torn_tail);
}

TEST(Campaign, RefusesToMixIntoAnExistingCampaign) {
  const auto dir = fresh_dir("exists");
  (void)run_campaign(options(dir, "test.rmsnorm.exact", 2));
  EXPECT_THROW(run_campaign(options(dir, "test.rmsnorm.exact", 2)), UsageError);
}

TEST(Campaign, ABackendThatRunsZeroCasesIsAnError) {
  const auto clean = run_campaign(options(fresh_dir("zero_ok"), "test.rmsnorm.exact", 4));
  EXPECT_EQ(clean.exit_code, 0);
  EXPECT_TRUE(clean.report.errors.empty());
  const auto r = run_campaign(options(fresh_dir("zero_never"), "test.rmsnorm.exact,test.rmsnorm.never", 4));
  EXPECT_EQ(r.exit_code, 1);
  const auto& never = backend(r.report, "test.rmsnorm.never");
  EXPECT_EQ(never.cases_run, 0);
  EXPECT_EQ(never.unsupported, 4);
  EXPECT_NE(never.error.find("test backend declines every case"), std::string::npos) << never.error;
  ASSERT_EQ(r.report.errors.size(), 1u);
}

// Named exactly, an unavailable backend is asked for and fails as zero-case; matched by a glob it is skipped
// and listed as unavailable.
TEST(Campaign, UnavailableBackendsFailWhenNamedAndAreListedWhenGlobbed) {
  const auto named =
      run_campaign(options(fresh_dir("offline_named"), "test.rmsnorm.exact,test.rmsnorm.offline", 2));
  EXPECT_EQ(named.exit_code, 1);
  EXPECT_NE(backend(named.report, "test.rmsnorm.offline").error.find("unavailable: no device here"),
            std::string::npos);
  const auto globbed =
      run_campaign(options(fresh_dir("offline_glob"), "test.rmsnorm.ex*,test.rmsnorm.off*", 2));
  EXPECT_EQ(globbed.exit_code, 0);
  EXPECT_EQ(globbed.report.unavailable, std::vector<std::string>{"test.rmsnorm.offline: no device here"});
}

TEST(Campaign, UnknownBackendGlobIsAUsageError) {
  EXPECT_THROW(run_campaign(options(fresh_dir("unknown"), "test.nosuch.*", 2)), UsageError);
}

TEST(Campaign, AnOpWithoutABackendIsAnError) {
  auto o = options(fresh_dir("op_without"), "test.rmsnorm.exact", 2);
  o.ops = {OpKind::kRmsNorm, OpKind::kConcat};
  const auto r = run_campaign(o);
  EXPECT_EQ(r.exit_code, 1);
  ASSERT_EQ(r.report.errors.size(), 1u);
  EXPECT_NE(r.report.errors[0].find("concat"), std::string::npos);
}

// A case whose views share storage and leave guard bands: the bundle must give back the same bytes and
// layout.
Case aliased_case() {
  Case c;
  c.op = OpKind::kRmsNorm;
  c.params = RmsNormParams{};
  auto storage = std::make_shared<Storage>(DType::kBF16, 64);
  for (std::int64_t i = 0; i < 64; ++i) storage->store(i, 0.25 * static_cast<double>(i) - 3.0);
  c.tensors["x"] = Tensor::view(storage, {2, 8}, {12, 1}, 3);
  c.tensors["y"] = Tensor::view(storage, {2, 8}, {12, 1}, 3);  // in place: y aliases x
  c.tensors["w"] = Tensor::view(std::make_shared<Storage>(DType::kBF16, 8), {8}, {1}, 0);
  return c;
}

TEST(Bundle, TensorFileKeepsAliasingGuardsAndBytes) {
  const auto dir = fresh_dir("tensors");
  std::filesystem::create_directories(dir);
  const Case c = aliased_case();
  write_tensors(dir / "t.bin", c);
  const auto back = read_tensors(dir / "t.bin");
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back.at("x").storage(), back.at("y").storage()) << "aliasing must survive";
  EXPECT_EQ(back.at("x").storage()->bytes, c.tensor("x").storage()->bytes) << "guard bands included";
  EXPECT_EQ(back.at("x").strides(), (Shape{12, 1}));
  EXPECT_EQ(back.at("x").offset(), 3);
  EXPECT_EQ(back.at("w").dtype(), DType::kBF16);
}

// An empty storage (a zero-row case's output) reads back empty; found by fuzz_tensors under UBSan (memcpy
// from an empty vector's null data()).
TEST(Bundle, TensorFileKeepsEmptyStorages) {
  const auto dir = fresh_dir("empty_tensors");
  std::filesystem::create_directories(dir);
  Case c;
  c.op = OpKind::kRmsNorm;
  c.tensors["y"] = Tensor::view(std::make_shared<Storage>(DType::kBF16, 0), {0, 8}, {8, 1}, 0);
  write_tensors(dir / "t.bin", c);
  const auto back = read_tensors(dir / "t.bin");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(back.at("y").storage()->bytes.empty());
  EXPECT_EQ(back.at("y").shape(), (Shape{0, 8}));
}

// A bundle written before attention cases carried the new tokens' K/V inputs (no k_new / v_new) reads back
// with the inputs materialize() derives from the same caches and value seed, bit for bit.
TEST(Bundle, OldAttentionBundlesGetTheNewTokensInputsDerived) {
  const CaseSpec spec = draw_case(OpKind::kAttention, 12, 3).value();
  const Case fresh = materialize(spec);
  Case old = fresh.clone();
  old.tensors.erase("k_new");
  old.tensors.erase("v_new");
  const auto dir = fresh_dir("old_attention_bundle");
  FindingRecord f;
  f.id = "old", f.backend = "cpu.attn.triton_unified", f.replay = "r", f.shape_class = "s";
  write_bundle(dir, spec, old, f);
  const Bundle b = read_bundle(dir);
  for (const char* name : {"k_new", "v_new"}) {
    ASSERT_TRUE(b.pristine.has(name)) << name;
    EXPECT_EQ(b.pristine.tensor(name).to_f64(), fresh.tensor(name).to_f64()) << name;
  }
}

void expect_bundle_error(const std::filesystem::path& file, const std::string& content) {
  std::ofstream(file, std::ios::binary | std::ios::trunc) << content;
  EXPECT_THROW(read_tensors(file), BundleError) << content.size();
}

TEST(Bundle, MalformedTensorFilesAreRejected) {
  const auto dir = fresh_dir("bad_tensors");
  std::filesystem::create_directories(dir);
  write_tensors(dir / "good.bin", aliased_case());
  std::ifstream in(dir / "good.bin", std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), {});
  expect_bundle_error(dir / "bad.bin", "");
  expect_bundle_error(dir / "bad.bin", "NOTATENSORFILE");
  for (std::size_t cut : {std::size_t{10}, good.size() / 2, good.size() - 1})
    expect_bundle_error(dir / "bad.bin", good.substr(0, cut));
  expect_bundle_error(dir / "bad.bin", good + "x");
  std::string wrong_version = good;
  wrong_version[8] = 99;
  expect_bundle_error(dir / "bad.bin", wrong_version);
  EXPECT_THROW(read_tensors(dir / "missing.bin"), BundleError);
  EXPECT_THROW(read_bundle(dir / "no_bundle_here"), BundleError);
}

// A header whose fields have the wrong JSON types is not a header: a JournalError, never nlohmann's
// type_error escaping (fuzz_journal found "format":1 after 565,500 runs).
TEST(Journal, AHeaderWithFieldsOfTheWrongTypeIsRejected) {
  for (const char* header : {R"({"type":"header","format":1})", R"({"type":"header","format":{},"x":1})"}) {
    const std::string text = std::string(header) + "\n";
    EXPECT_THROW(parse_journal(text, "j.jsonl"), JournalError) << header;
  }
}

TEST(Journal, ToleratesATornLastLineAndRejectsCorruptionElsewhere) {
  const auto dir = fresh_dir("journal");
  std::filesystem::create_directories(dir);
  const auto path = dir / "journal.jsonl";
  {
    Journal j = Journal::create(path, {{"args", {{"seed", 1}}}});
    j.append({{"type", "progress"}, {"completed", 3}});
  }
  EXPECT_THROW(Journal::create(path, {}), JournalError) << "never overwrite a journal";
  std::ofstream(path, std::ios::app) << R"({"type":"finding","id":)";
  auto contents = read_journal(path);
  EXPECT_TRUE(contents.torn_tail);
  ASSERT_EQ(contents.records.size(), 2u);
  EXPECT_EQ(contents.records[0].at("format_version"), kJournalFormatVersion);
  {
    Journal j = Journal::reopen(path);
    j.append({{"type", "progress"}, {"completed", 4}});
  }
  contents = read_journal(path);
  EXPECT_FALSE(contents.torn_tail);
  ASSERT_EQ(contents.records.size(), 3u);
  EXPECT_EQ(contents.records[2].at("completed"), 4);

  std::ofstream(path, std::ios::app) << "garbage\n"
                                     << R"({"type":"progress"})"
                                     << "\n";
  EXPECT_THROW(read_journal(path), JournalError);
  std::ofstream(path, std::ios::trunc) << R"({"type":"header","format":"other"})"
                                       << "\n";
  EXPECT_THROW(read_journal(path), JournalError);
}

}  // namespace
}  // namespace driftcheck::fuzz
