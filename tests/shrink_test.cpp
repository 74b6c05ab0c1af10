// Shrinking (docs/CAMPAIGN.md "Findings, deduplication, grouping by cause"): the candidates a shrinker tries
// are valid cases, structure first; and a campaign that finds a structural attention bug groups it under a
// representative that is a minimal repro (one or two sequences, short contexts, a few KB) that no single
// further step shrinks; a twin's finding shrinks to a case its known upstream defects do not explain.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/bundle.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/features.hpp"
#include "driftcheck/fuzz/known_findings.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "scratch_dir.hpp"

namespace driftcheck::fuzz {
namespace {

std::int64_t sum(const std::vector<std::int64_t>& v) {
  std::int64_t s = 0;
  for (const auto x : v) s += x;
  return s;
}

// Every candidate of every op's drawn cases materialises (a shrinker never builds an invalid case) and is
// smaller in what it changes; attention candidates start with the batch (halves, then single sequences).
TEST(Shrink, CandidatesAreValidSmallerCasesStructureFirst) {
  for (const OpKind op : {OpKind::kRmsNorm, OpKind::kConcat, OpKind::kDualRmsNormCat, OpKind::kAttention}) {
    for (std::uint64_t i = 0; i < 12; ++i) {
      const CaseSpec s = draw_case(op, 77, i, GenOptions{false}).value();
      for (const CaseSpec& c : shrink_candidates(s)) {
        ASSERT_NO_THROW(materialize(c)) << op_name(op) << " case " << i << ": " << shape_line(c);
        EXPECT_LE(c.rows * c.hidden, s.rows * s.hidden);
        EXPECT_LE(sum(c.seq_lens), sum(s.seq_lens));
        EXPECT_LE(c.seq_lens.size(), s.seq_lens.size());
      }
      if (op != OpKind::kAttention || s.seq_lens.size() < 3) continue;
      const auto first = shrink_candidates(s).front();
      EXPECT_EQ(first.seq_lens.size(), s.seq_lens.size() / 2) << "halves of the batch come first";
    }
  }
  CaseSpec minimal;  // one row of one element, nothing else to drop
  minimal.hidden = 1;
  EXPECT_TRUE(shrink_candidates(minimal).empty());
}

TEST(Shrink, ShapeLineSaysTheShapeInOneLine) {
  CaseSpec s;
  s.op = OpKind::kAttention;
  AttentionParams p;
  p.num_q_heads = 4, p.num_kv_heads = 2, p.head_dim = 64, p.block_size = 16;
  s.params = p;
  s.query_lens = {1, 3};
  s.seq_lens = {17, 40};
  s.table_pad_cols = 2;
  EXPECT_EQ(
      shape_line(s),
      "attention bf16, kv bf16, 2 seq (query 1+3, context 17+40), heads 4/2, head_dim 64, block_size 16, "
      "table slice (+2 cols, 0 rows above, 0 below)");
}

// mutant.attn.table_stride_ignored reads block-table rows at s * width: it needs two sequences and a table
// whose rows are further apart than its width. The shrunk repro keeps exactly that and little else.
TEST(Shrink, AStructuralAttentionBugShrinksToAFewKilobytes) {
  const auto dir = testing::fresh_scratch_dir("shrink_test", "structural");
  CampaignOptions o;
  o.ops = {OpKind::kAttention};
  o.backend_globs = "mutant.attn.table_stride_ignored";
  o.include_mutants = true;
  o.cases = 40;
  o.seed = 3;
  o.jobs = 1;
  o.out_dir = dir;
  o.shrink_seconds = 120;
  o.shrink_seconds_per_finding = 120;  // a loaded test machine must not cut the descent short
  const CampaignResult r = run_campaign(o);
  ASSERT_FALSE(r.report.findings.empty());
  ASSERT_FALSE(r.report.groups.empty());
  // Every finding's cause is a group whose representative is the shrunk (and ablated) case.
  const Backend& named = *registry().find("mutant.attn.table_stride_ignored");
  const auto repaired = repaired_backend(builtin_known_findings(), named);  // as the campaign judges it
  const Backend& m = repaired ? *repaired : named;
  for (const auto& g : r.report.groups) {
    ASSERT_TRUE(g.shrunk) << g.id << " not shrunk within the budget";
    const Bundle b = read_bundle(dir / g.representative);
    const CaseSpec& s = b.spec;
    EXPECT_GT(g.shrink_steps, 0) << g.id;
    EXPECT_GE(g.shrink_tries, g.shrink_steps);
    // Which contexts still fail depends on the drawn values (a shifted table row of whole blocks only
    // permutes a decode query's keys); what every repro keeps is small.
    EXPECT_LE(s.seq_lens.size(), 2u) << g.shape;
    const auto bytes = std::filesystem::file_size(dir / g.representative / "tensors.bin");
    // Since the Triton twin follows its upstream kernel (issue #8), one fp16 NaN signature keeps a second
    // context of 129 keys at a fixpoint: its K and V alone are 2 x 130 x 32 x 2 B = 16.6 KB, so the bound is
    // that plus the rest of a small case.
    EXPECT_LT(bytes, 24u * 1024) << g.shape;
    std::cout << "[shrink] " << g.id << ": " << g.shape << ", " << bytes << " bytes, " << g.shrink_steps
              << " shrinks of " << g.shrink_tries << " tries\n";
    EXPECT_EQ(g.shape, shape_line(s));
    EXPECT_TRUE(g.shrink_minimal) << g.shrink_tries << " tries";
    // A minimum: no single candidate step of the representative still fails the same way (among the steps
    // that do not bring back a feature the group's ablation removed).
    for (const CaseSpec& c : shrink_candidates(s)) {
      if (has_any(case_features(c), g.not_needed)) continue;
      Case pristine = materialize(c);
      if (!m.supports(pristine).ok) continue;
      EXPECT_NE(verdict_name(evaluate(m, prepare(std::move(pristine))).verdict), g.verdict)
          << "shrinks further to " << shape_line(c);
    }
  }
  std::filesystem::remove_all(dir);
}

// A twin's finding is a failure its known upstream defects do not explain, and its group must keep that
// cause: shrinking the twin as it is would accept any smaller case that fails by a known defect. Case 46 of
// seed 20261130 on the MI355X AITER unified twin fails by the empty-tile step (its known finding's replay);
// with that finding left out of the campaign's list it is a finding, and its case also holds a page tail the
// twin loads unmasked (another known finding). The shrinker used to descend to one key in one page, a NaN the
// page tail alone explains; the representative must still fail by the empty-tile step and by nothing the list
// explains.
TEST(Shrink, ATwinsFindingKeepsItsCauseAndDoesNotShrinkIntoAKnownDefect) {
  const auto dir = testing::fresh_scratch_dir("shrink_test", "known");
  KnownFindings without_tile = builtin_known_findings();
  std::erase_if(without_tile.findings,
                [](const KnownFinding& f) { return f.id == "aiter-unified-empty-tile-step"; });
  ASSERT_EQ(without_tile.findings.size() + 1, builtin_known_findings().findings.size());
  CampaignOptions o;
  o.ops = {OpKind::kAttention};
  o.backend_globs = "cpu.attn.aiter_unified_mi355x";
  o.seed = 20261130;
  o.cases = 47;
  o.shard = {46, 47};  // case 46 alone
  o.jobs = 1;
  o.out_dir = dir;
  o.known_findings = &without_tile;
  o.shrink_seconds = 120;
  o.shrink_seconds_per_finding = 120;
  const CampaignResult r = run_campaign(o);
  ASSERT_EQ(r.report.groups.size(), 1u);
  const auto& g = r.report.groups.front();
  const Backend& twin = *registry().find("cpu.attn.aiter_unified_mi355x");
  const PreparedCase p = prepare(read_bundle(dir / g.representative).pristine);
  EXPECT_TRUE(is_failure(evaluate(twin, p).verdict)) << g.shape;
  EXPECT_EQ(explained_ids(without_tile, twin, p), "")
      << g.shape << " is explained by the campaign's own list";
  EXPECT_EQ(explained_ids(builtin_known_findings(), twin, p), "aiter-unified-empty-tile-step") << g.shape;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace driftcheck::fuzz
