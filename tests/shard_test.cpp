// Sharded campaigns (shard.hpp) and `driftcheck merge` (merge.hpp): the shard from the flag and from each
// launcher's environment, the GPU from the local rank, and merged shards giving the unsharded campaign's
// report (docs/CAMPAIGN.md, "Several GPUs and hosts").
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_harness.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/merge.hpp"
#include "driftcheck/fuzz/shard.hpp"
#include "driftcheck/reports/report.hpp"
#include "scratch_dir.hpp"

namespace driftcheck::fuzz {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Environment env_of(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

Shard shard(std::string_view spec, std::map<std::string, std::string> vars = {}) {
  return parse_shard(spec, env_of(std::move(vars)));
}

TEST(Shard, FromTheFlag) {
  EXPECT_EQ(shard("2/8"), (Shard{2, 8}));
  EXPECT_EQ(shard("0/1"), (Shard{0, 1}));
  for (const char* bad : {"8/8", "1/0", "x", "1/", "/2", "-1/2", "1/2/3", "auto/x", "2"})
    EXPECT_THROW(shard(bad), UsageError) << bad;
}

TEST(Shard, FromEachLauncher) {
  EXPECT_EQ(shard("auto", {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}}), (Shard{3, 4}));
  EXPECT_EQ(shard("auto", {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}), (Shard{1, 2}));
  EXPECT_EQ(shard("auto", {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}}), (Shard{5, 6}));
  // --array=0-7, and --array=1-7:2 (tasks 1, 3, 5, 7).
  EXPECT_EQ(
      shard("auto",
            {{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_ARRAY_TASK_MIN", "0"}, {"SLURM_ARRAY_TASK_COUNT", "8"}}),
      (Shard{5, 8}));
  EXPECT_EQ(shard("auto", {{"SLURM_ARRAY_TASK_ID", "5"},
                           {"SLURM_ARRAY_TASK_MIN", "1"},
                           {"SLURM_ARRAY_TASK_STEP", "2"},
                           {"SLURM_ARRAY_TASK_COUNT", "4"}}),
            (Shard{2, 4}));
  // Kubernetes does not export the number of completions: auto/N gives it.
  EXPECT_EQ(shard("auto/4", {{"JOB_COMPLETION_INDEX", "3"}}), (Shard{3, 4}));
  EXPECT_EQ(shard("auto/4", {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}}), (Shard{3, 4}));
}

TEST(Shard, RanksInsideArrayJobsNest) {
  // An mpirun of 2 ranks in each of 3 array jobs: job 2, rank 1 is shard 5 of 6.
  EXPECT_EQ(shard("auto", {{"SLURM_ARRAY_TASK_ID", "2"},
                           {"SLURM_ARRAY_TASK_COUNT", "3"},
                           {"OMPI_COMM_WORLD_RANK", "1"},
                           {"OMPI_COMM_WORLD_SIZE", "2"}}),
            (Shard{5, 6}));
  EXPECT_EQ(shard("auto/6", {{"JOB_COMPLETION_INDEX", "1"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}),
            (Shard{3, 6}));
}

TEST(Shard, UnusableEnvironmentsAreUsageErrors) {
  const std::pair<const char*, std::map<std::string, std::string>> cases[] = {
      {"auto", {}},                                                              // no launcher
      {"auto", {{"JOB_COMPLETION_INDEX", "1"}}},                                 // no count for Kubernetes
      {"auto", {{"OMPI_COMM_WORLD_RANK", "1"}}},                                 // rank without size
      {"auto", {{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "2"}}},  // not a number
      {"auto", {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}}},  // rank beyond size
      {"auto", {{"SLURM_ARRAY_TASK_ID", "3"}}},                                  // array without count
      {"auto",                                                                   // not on the range's step
       {{"SLURM_ARRAY_TASK_ID", "4"},
        {"SLURM_ARRAY_TASK_MIN", "1"},
        {"SLURM_ARRAY_TASK_STEP", "2"},
        {"SLURM_ARRAY_TASK_COUNT", "4"}}},
      {"auto/6",
       {{"JOB_COMPLETION_INDEX", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}}},  // 4 does not divide 6
      {"auto/3", {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}}},       // the flag disagrees
  };
  for (const auto& [spec, vars] : cases) EXPECT_THROW(shard(spec, vars), UsageError) << spec;
}

TEST(Shard, ShardsPartitionTheStreamAndItsBudget) {
  for (std::uint64_t n = 1; n <= 5; ++n) {
    for (const std::uint64_t total : {0u, 1u, 4u, 5u, 17u}) {
      std::multiset<std::uint64_t> seen;
      std::uint64_t counted = 0;
      for (std::uint64_t i = 0; i < n; ++i) {
        const Shard s{i, n};
        counted += s.cases_below(total);
        for (std::uint64_t local = 0; local < s.cases_below(total); ++local) seen.insert(s.case_index(local));
        EXPECT_GE(s.case_index(s.cases_below(total)), total) << "the next case is beyond the budget";
      }
      EXPECT_EQ(counted, total);
      std::multiset<std::uint64_t> all;
      for (std::uint64_t k = 0; k < total; ++k) all.insert(k);
      EXPECT_EQ(seen, all) << n << " shards, " << total << " cases";
    }
  }
  EXPECT_EQ(shard_dir("out", Shard{}), fs::path("out"));
  EXPECT_EQ(shard_dir("out", Shard{2, 8}), fs::path("out/shard-2-of-8"));
}

TEST(Device, AutoIsTheLocalRankAmongTheVisibleGpus) {
  std::string note;
  EXPECT_EQ(resolve_device("auto", env_of({}), 8, &note), 0);
  EXPECT_EQ(resolve_device("auto", env_of({{"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}), 2, &note), 1);
  EXPECT_EQ(resolve_device("auto", env_of({{"SLURM_LOCALID", "3"}}), 4, &note), 3);
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(resolve_device("auto", env_of({{"MPI_LOCALRANKID", "3"}}), 2, &note), 1);
  EXPECT_NE(note.find("shares GPU 1"), std::string::npos) << note;
  EXPECT_EQ(resolve_device("1", env_of({}), 2, &note), 1);
  EXPECT_THROW(resolve_device("2", env_of({}), 2, &note), UsageError);
  EXPECT_THROW(resolve_device("gpu0", env_of({}), 2, &note), UsageError);
  EXPECT_THROW(resolve_device("0", env_of({}), 0, &note), UsageError);
}

// ---------------------------------------------------------------------------------------------------------------
// Merge

fs::path fresh_dir(const std::string& name) {
  return testing::fresh_scratch_dir("shard_test", name);
}

// Every correct CPU backend and a few mutants: findings to merge, without a bundle write (fsync) per case.
CampaignOptions campaign(const fs::path& out, Shard s, std::uint64_t cases = 120) {
  CampaignOptions o;
  o.backend_globs = "cpu.*,mutant.rmsnorm.oob_write,mutant.attn.causal_off_by_one,mutant.concat.*";
  o.cases = cases, o.seed = 7, o.jobs = 1;  // one job: a finding's bundle is its lowest failing case
  o.shrink_seconds = 0;                     // shrinking is budgeted by time; see docs/CAMPAIGN.md
  o.out_dir = shard_dir(out, s), o.shard = s;
  o.progress.mode = ProgressMode::kNone;
  return o;
}

// report.json without what depends on the clock, the command line or the campaign directory `dir`, and
// without the floating-point sums that shards add in another order: the fields docs/CAMPAIGN.md lists as
// differing between a merged and an unsharded report.
json comparable(json j, const fs::path& dir) {
  j.erase("seconds"), j.erase("command"), j.erase("phases");
  for (auto& b : j["backends"]) {
    b.erase("check_seconds"), b.erase("first_finding_s");
    for (auto& [format, d] : b["drift"].items()) d.erase("signed_ulps_sum"), d.erase("mean_signed_ulps");
    for (auto& sh : b["by_shape"]) sh.erase("mean_log2_ratio");  // a sum of logs, like signed_ulps_sum
  }
  for (auto& op : j["ops"]) op.erase("reference_seconds");
  const auto without_dir = [&dir](json& replay) {
    std::string text = replay;
    if (const auto at = text.find(dir.string()); at != std::string::npos)
      text.replace(at, dir.string().size(), "DIR");
    replay = text;
  };
  json findings = json::object();
  for (auto& f : j["findings"]) {
    f.erase("found_after_s");
    without_dir(f["replay"]);
    findings[f["id"].get<std::string>()] = f;  // listed in order of discovery time
  }
  j["findings"] = findings;
  for (auto& g : j["groups"]) {
    without_dir(g["replay"]);
    for (auto& m : g["members"]) without_dir(m["replay"]);
  }
  return j;
}

json comparable(const reports::Report& r, const fs::path& dir) {
  return comparable(reports::to_json(r), dir);
}

TEST(Merge, ShardsMergeIntoTheUnshardedReport) {
  const fs::path root = fresh_dir("identity");
  const CampaignResult whole = run_campaign(campaign(root / "whole", {}));
  ASSERT_GT(whole.report.findings.size(), 10u) << "the mutants must give findings to compare";
  for (const std::uint64_t n : {2u, 3u}) {
    const fs::path shards = root / ("shards" + std::to_string(n));
    for (std::uint64_t i = 0; i < n; ++i) run_campaign(campaign(shards, {i, n}));
    const fs::path merged = root / ("merged" + std::to_string(n));
    const CampaignResult m = merge_campaigns({{shards}, merged, "driftcheck merge", nullptr, nullptr});
    EXPECT_EQ(comparable(m.report, merged), comparable(whole.report, root / "whole")) << n << " shards";
    EXPECT_EQ(m.exit_code, whole.exit_code);
    for (const auto& f : m.report.findings) {
      if (f.bundle.empty())
        continue;  // past the first two of its (backend, verdict): replayed from the stream
      EXPECT_TRUE(fs::exists(merged / f.bundle / "tensors.bin")) << f.id;
      std::ifstream a(merged / f.bundle / "case.json"), b(root / "whole" / f.bundle / "case.json");
      EXPECT_EQ(json::parse(a), json::parse(b)) << f.id << ": the same drawn case";
    }
  }
}

TEST(Merge, RefusesIncompleteMixedOrUnfinishedShards) {
  const fs::path root = fresh_dir("refusals");
  for (std::uint64_t i = 0; i < 3; ++i) run_campaign(campaign(root / "a", {i, 3}, 30));
  const auto merge = [&](std::vector<fs::path> dirs, const std::string& out) {
    return merge_campaigns({std::move(dirs), root / out, "driftcheck merge", nullptr, nullptr});
  };
  EXPECT_THROW(merge({root / "a/shard-0-of-3", root / "a/shard-2-of-3"}, "o1"), UsageError) << "missing";
  EXPECT_THROW(merge({root / "a", root / "a/shard-1-of-3"}, "o2"), UsageError) << "twice";
  CampaignOptions other = campaign(root / "b", {1, 3}, 30);
  other.seed = 8;
  run_campaign(other);
  EXPECT_THROW(merge({root / "a/shard-0-of-3", root / "b/shard-1-of-3", root / "a/shard-2-of-3"}, "o3"),
               UsageError)
      << "another seed";
  EXPECT_THROW(merge({root / "nowhere"}, "o4"), UsageError);
  fs::create_directories(root / "o5" / "x");
  EXPECT_THROW(merge({root / "a"}, "o5"), UsageError) << "an out directory in use";
  // A shard still running (or killed) has no end record.
  const fs::path journal = root / "a/shard-1-of-3/journal.jsonl";
  std::ifstream in(journal);
  std::string text, line;
  while (std::getline(in, line))
    if (line.find("\"type\":\"end\"") == std::string::npos) text += line + "\n";
  in.close();
  std::ofstream(journal, std::ios::trunc) << text;
  EXPECT_THROW(merge({root / "a"}, "o6"), UsageError) << "unfinished";
}

TEST(Merge, ResumeKeepsTheShard) {
  const fs::path root = fresh_dir("resume");
  run_campaign(campaign(root, {1, 2}, 10));
  CampaignOptions again = campaign(root, {0, 2}, 10);
  again.out_dir = shard_dir(root, {1, 2}), again.resume = true;
  EXPECT_THROW(run_campaign(again), UsageError) << "shard 1/2's directory resumed as shard 0/2";
}

// As a launcher starts them: three driftcheck processes at once, each told its rank by OpenMPI's variables
// only.
TEST(Merge, ShardsAsProcessesFromTheLaunchersEnvironment) {
  const harness::Scratch scratch("shard_test");
  const fs::path& d = scratch.dir;
  const std::string fuzz = std::string(DRIFTCHECK_BIN) +
                           " fuzz --cases 90 --seed 3 --jobs 1 --shrink-seconds 0 -q --device auto "
                           "--backend 'cpu.*,mutant.concat.*,mutant.rmsnorm.oob_write' --out ";
  const auto whole = harness::run_command(fuzz + (d / "whole").string(), d);
  ASSERT_EQ(whole.code, 1) << "the mutants' findings: " << whole.err;
  std::string launch = "(";
  for (int rank = 0; rank < 3; ++rank)
    launch += "OMPI_COMM_WORLD_RANK=" + std::to_string(rank) +
              " OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_LOCAL_RANK=" + std::to_string(rank) + " " + fuzz +
              (d / "ranks").string() + " --shard auto & ";
  const auto ranks = harness::run_command(launch + "wait)", d);
  for (int rank = 0; rank < 3; ++rank)
    ASSERT_TRUE(fs::exists(d / "ranks" / ("shard-" + std::to_string(rank) + "-of-3") / "report.json"))
        << ranks.err;
  const auto merged = harness::run_command(
      std::string(DRIFTCHECK_BIN) + " merge " + (d / "ranks").string() + " --out " + (d / "merged").string(),
      d);
  EXPECT_EQ(merged.code, whole.code) << merged.err;
  EXPECT_NE(merged.err.find("merged 3 shards"), std::string::npos) << merged.err;
  EXPECT_EQ(comparable(json::parse(harness::slurp(d / "merged" / "report.json")), d / "merged"),
            comparable(json::parse(harness::slurp(d / "whole" / "report.json")), d / "whole"));
  // Bad shards and launcher environments are usage errors with one line.
  for (const std::string bad : {"--shard 3/3", "--shard auto", "--shard auto/2", "--device 7"}) {
    const auto r = harness::run_command(fuzz + (d / "bad").string() + " " + bad, d);
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << bad << ": " << r.err;
  }
}

}  // namespace
}  // namespace driftcheck::fuzz
