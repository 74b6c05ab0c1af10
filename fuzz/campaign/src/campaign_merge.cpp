#include <algorithm>
#include <cstdint>
#include <map>
#include <ostream>
#include <set>

#include <fmt/format.h>

#include "campaign_heatmaps.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/campaign_findings.hpp"
#include "driftcheck/fuzz/campaign_journal.hpp"
#include "driftcheck/fuzz/campaign_report.hpp"
#include "driftcheck/fuzz/campaign_stats.hpp"
#include "driftcheck/fuzz/journal.hpp"
#include "driftcheck/fuzz/json_fields.hpp"
#include "driftcheck/fuzz/merge.hpp"

namespace driftcheck::fuzz {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ShardRun {
  fs::path dir;
  json header;
  CampaignOptions opts;  // the stream, the budget and the shard, from the header
  Checkpoint checkpoint;
  std::map<std::string, FindingState> findings;
  std::vector<GroupDef> groups;
  int exit_code = 0;
};

// The shard directories named by `dirs`: each one holding a journal, or the shard-I-of-N directories inside
// it.
std::vector<fs::path> shard_dirs(const std::vector<fs::path>& dirs) {
  std::vector<fs::path> out;
  for (const fs::path& d : dirs) {
    if (fs::exists(d / "journal.jsonl")) {
      out.push_back(d);
      continue;
    }
    std::vector<fs::path> inside;
    if (fs::is_directory(d))
      for (const auto& e : fs::directory_iterator(d))
        if (e.path().filename().string().starts_with("shard-") && fs::exists(e.path() / "journal.jsonl"))
          inside.push_back(e.path());
    if (inside.empty())
      throw UsageError(fmt::format("{} holds no campaign journal and no shard-I-of-N directory", d.string()));
    std::sort(inside.begin(), inside.end());
    out.insert(out.end(), inside.begin(), inside.end());
  }
  return out;
}

ShardRun read_shard(const fs::path& dir) {
  ShardRun r;
  r.dir = dir;
  const fs::path path = dir / "journal.jsonl";
  const JournalContents contents = read_journal(path);
  if (contents.records.empty()) throw UsageError(fmt::format("{} holds no complete record", path.string()));
  r.header = contents.records.front();
  r.opts.out_dir = dir;
  apply_header(r.header, r.opts, path.string());
  Findings findings(dir);
  r.checkpoint = load_journal(contents, path.string(), findings);
  r.findings = findings.snapshot();
  r.groups = findings.groups();
  const auto end = std::find_if(contents.records.rbegin(), contents.records.rend(),
                                [](const json& rec) { return rec.value("type", "") == "end"; });
  if (end == contents.records.rend())
    throw UsageError(
        fmt::format("shard {} in {} has not finished (its journal has no end record): let it "
                    "finish, or resume it with driftcheck fuzz --resume --shard {}",
                    r.opts.shard.name(), dir.string(), r.opts.shard.name()));
  r.exit_code = exit_code_field(*end, "exit_code");
  return r;
}

// Every shard must come from one campaign (same stream, budget and selection) and every shard of it must be
// there once.
void check_shards(const std::vector<ShardRun>& shards) {
  const ShardRun& first = shards.front();
  const auto same_part = [](const json& header) {
    json j = header;
    j["args"].erase("shard");
    return json{{"args", j["args"]}, {"backends", j.value("backends", json())}};
  };
  const json reference = same_part(first.header);
  std::set<std::uint64_t> seen;
  for (const ShardRun& s : shards) {
    if (same_part(s.header) != reference)
      throw UsageError(
          fmt::format("{} and {} are not shards of one campaign (their journal headers differ "
                      "in the stream, budget or backends)",
                      first.dir.string(), s.dir.string()));
    if (s.opts.shard.count != first.opts.shard.count)
      throw UsageError(fmt::format("{} is shard {} but {} is shard {}", first.dir.string(),
                                   first.opts.shard.name(), s.dir.string(), s.opts.shard.name()));
    if (!seen.insert(s.opts.shard.index).second)
      throw UsageError(fmt::format("shard {} is named twice ({})", s.opts.shard.name(), s.dir.string()));
  }
  std::string missing;
  for (std::uint64_t i = 0; i < first.opts.shard.count; ++i)
    if (!seen.count(i)) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", i);
  if (!missing.empty())
    throw UsageError(fmt::format("shards {} of {} are missing", missing, first.opts.shard.count));
}

// The selection the shards ran, as their journals recorded it: the backends by name (they must be known here,
// available or not), what was unavailable where they ran, and the selection's errors.
Selection recorded_selection(const ShardRun& s, const Registry& reg) {
  Selection sel;
  sel.ops = s.opts.ops;
  // apply_header checked that these are lists of strings where present.
  const auto names = [&](const char* key) {
    return s.header.contains(key) ? strings_field(s.header, key) : std::vector<std::string>{};
  };
  for (const std::string& name : names("backends")) {
    const Backend* b = reg.find(name);
    if (b == nullptr)
      throw UsageError(
          fmt::format("backend {} of the shards is not known here: pass merge the --backends "
                      "files and --plugin libraries the shards were given",
                      name));
    sel.backends.push_back(b);
  }
  sel.unavailable = names("unavailable");
  sel.errors = names("selection_errors");
  return sel;
}

// The report keeps a backend's most frequent unsupported reasons only (kMaxReasons); which ones survive
// depends on the order cases were counted, so beyond that many the counts cannot match an unsharded run.
void warn_about_reasons(const std::vector<ShardRun>& shards, std::ostream* log) {
  std::map<std::string, std::set<std::string>> reasons;
  for (const ShardRun& s : shards)
    for (const auto& [name, b] : s.checkpoint.stats.backends)
      for (const auto& [reason, n] : b.reasons) reasons[name].insert(reason);
  for (const auto& [name, set] : reasons)
    if (set.size() > kMaxReasons && log)
      *log << fmt::format(
          "driftcheck: warning: {} declined cases for more than {} distinct reasons: its unsupported-reason "
          "counts are the most frequent ones as each shard kept them, and may differ from an unsharded run\n",
          name, kMaxReasons);
}

// Whether the finding's bundle was there to copy (a shard killed before writing it has none; its replay
// command then stays the stream one).
bool copy_bundle(const ShardRun& from, const std::string& bundle, const fs::path& out) {
  if (bundle.empty() || !fs::exists(from.dir / bundle)) return false;
  fs::create_directories((out / bundle).parent_path());
  fs::copy(from.dir / bundle, out / bundle, fs::copy_options::recursive);
  return true;
}

// An unsharded campaign bundles the drawn cases of the first kDrawnBundlesPerClass findings of each (backend,
// verdict), in stream order with one job; each shard bundled its own first ones, which include those. The
// others lose their bundle and replay from the stream, as in the unsharded run.
void keep_first_drawn_bundles(std::map<std::string, FindingState>& findings, const std::string& stream,
                              const Registry& reg) {
  std::map<std::string, std::vector<std::pair<std::uint64_t, FindingState*>>> by_class;
  for (auto& [sig, f] : findings)
    by_class[f.report.backend + "|" + f.report.verdict].emplace_back(f.report.case_index, &f);
  for (auto& [c, list] : by_class) {
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t i = kDrawnBundlesPerClass; i < list.size(); ++i) {
      reports::FindingReport& r = list[i].second->report;
      OpKind op;
      if (r.bundle.empty() || !parse_op(r.op, &op)) continue;
      list[i].second->bundled = false, r.bundle.clear(), r.shape.clear();
      r.replay =
          stream_replay_command(op, r.seed, r.case_index, r.backend, stream, definition_args(r.backend, reg));
    }
  }
}

// Each shard grouped its own findings: every group is kept once (by id, the one made from the lowest case),
// with its representative's bundle.
std::vector<GroupDef> merged_groups(const std::vector<ShardRun>& shards,
                                    const std::map<std::string, FindingState>& findings,
                                    const fs::path& out) {
  std::map<std::string, std::pair<std::uint64_t, GroupDef>> by_id;
  std::map<std::string, const ShardRun*> from;
  for (const ShardRun& s : shards)
    for (const GroupDef& g : s.groups) {
      const auto rep = s.findings.find(g.representative);
      const std::uint64_t index = rep == s.findings.end() ? UINT64_MAX : rep->second.report.case_index;
      const auto it = by_id.find(g.id);
      if (it != by_id.end() && it->second.first <= index) continue;
      by_id[g.id] = {index, g}, from[g.id] = &s;
    }
  std::vector<GroupDef> out_groups;
  for (auto& [id, entry] : by_id) {
    GroupDef& g = entry.second;
    // A representative whose finding is another shard's signature in the merge still names its signature.
    if (!findings.count(g.representative) || !copy_bundle(*from[id], g.bundle, out)) continue;
    g.replay = bundle_replay_command(out / g.bundle);
    out_groups.push_back(std::move(g));
  }
  return out_groups;
}

}  // namespace

CampaignResult merge_campaigns(const MergeOptions& options) {
  if (options.dirs.empty()) throw UsageError("merge needs at least one campaign directory");
  const Registry& reg = options.backends ? *options.backends : registry();
  std::vector<ShardRun> shards;
  for (const fs::path& d : shard_dirs(options.dirs)) shards.push_back(read_shard(d));
  check_shards(shards);
  if (fs::exists(options.out_dir) && !fs::is_empty(options.out_dir))
    throw UsageError(fmt::format("{} is not empty: merge writes a new directory", options.out_dir.string()));

  CampaignOptions opts = shards.front().opts;
  opts.out_dir = options.out_dir, opts.command_line = options.command_line, opts.backends = &reg;
  opts.log = options.log;
  opts.shard = {};
  const Selection sel = recorded_selection(shards.front(), reg);
  Stats stats;
  std::uint64_t cases = 0, deferred = 0;
  double seconds = 0;
  std::map<std::string, FindingState> findings;  // by signature, at its lowest case index
  std::map<std::string, const ShardRun*> found_in;
  std::vector<std::string> internal_errors;
  for (const ShardRun& s : shards) {
    stats.merge(s.checkpoint.stats);
    cases += s.checkpoint.cases(), deferred += s.checkpoint.deferred.size();
    seconds = std::max(seconds, s.checkpoint.elapsed_s);  // the shards ran side by side
    for (const auto& [sig, f] : s.findings) {
      const auto it = findings.find(sig);
      if (it != findings.end() && it->second.report.case_index <= f.report.case_index) continue;
      findings[sig] = f, found_in[sig] = &s;
    }
    if (s.exit_code == 3)
      internal_errors.push_back(
          fmt::format("shard {} ({}) ended with an internal or I/O error: its report.md "
                      "says which",
                      s.opts.shard.name(), s.dir.string()));
    if (opts.cases && s.checkpoint.cases() < s.opts.shard.cases_below(*opts.cases) && options.log)
      *options.log << fmt::format("driftcheck: warning: shard {} ran {} of its {} cases (interrupted?)\n",
                                  s.opts.shard.name(), s.checkpoint.cases(),
                                  s.opts.shard.cases_below(*opts.cases));
  }
  warn_about_reasons(shards, options.log);

  fs::create_directories(options.out_dir / "findings");
  keep_first_drawn_bundles(findings, stream_args(opts.gen), reg);
  for (auto& [sig, f] : findings)
    if (f.bundled && copy_bundle(*found_in[sig], f.report.bundle, options.out_dir))
      f.report.replay = bundle_replay_command(options.out_dir / f.report.bundle);
  const std::vector<GroupDef> groups = merged_groups(shards, findings, options.out_dir);
  const KnownFindings& known = options.known_findings ? *options.known_findings : builtin_known_findings();
  reports::Report report = build_report({opts, sel, stats, cases, seconds, findings, internal_errors, known,
                                         groups, worst_case_heatmaps(opts, sel, stats).heatmaps});
  report.cases_deferred = static_cast<std::int64_t>(deferred);  // --resume of their shard runs them
  reports::write_reports(report, options.out_dir);
  if (options.log)
    *options.log << fmt::format("driftcheck: merged {} shard{} of seed {} ({} cases)\n", shards.size(),
                                shards.size() == 1 ? "" : "s", opts.seed, cases);
  print_summary(opts, report, true);
  return {report, report.exit_code};
}

}  // namespace driftcheck::fuzz
