#include "driftcheck/fuzz/gate.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <ostream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "driftcheck/device/registry.hpp"
#include "driftcheck/external/backends_file.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/corpus.hpp"
#include "driftcheck/fuzz/gate_baseline.hpp"
#include "driftcheck/fuzz/golden.hpp"
#include "driftcheck/fuzz/input_error.hpp"
#include "driftcheck/fuzz/known_findings.hpp"
#include "gate_checks.hpp"

namespace driftcheck::fuzz {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using reports::CheckStatus;
using reports::GateReport;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void say(std::ostream* log, const std::string& line) {
  if (log != nullptr) *log << "gate: " << line << "\n" << std::flush;
}

// What the gate runs: the config's backends (available here), plus with --mutants each one's mutants.
struct Plan {
  GateConfig config;
  std::vector<GateBackend> backends;
  std::vector<std::string> unavailable;  // matched by a glob but cannot run here: not judged, not compared
  std::vector<std::string> errors;       // asked-for ops nothing can run
};

Plan make_plan(GateConfig config, const Registry& reg, bool mutants) {
  Plan p{std::move(config), {}, {}, {}};
  Selection sel;
  try {
    sel = select_backends(reg, p.config.ops, fmt::format("{}", fmt::join(p.config.backends, ",")), false);
  } catch (const UsageError& e) {
    throw InputError("config", fmt::format("{}: gate.backends: {}", p.config.path.string(), e.what()));
  }
  p.unavailable = sel.unavailable, p.errors = sel.errors;
  for (const Backend* b : sel.backends) p.backends.push_back({b, std::string(b->name()), {}});
  // A budget for nothing is a typo (or a backend that was renamed): say so rather than hold nothing to it.
  for (const auto& budget : p.config.budgets) {
    const bool used = std::any_of(reg.all().begin(), reg.all().end(),
                                  [&](const auto& b) { return glob_match(budget.pattern, b->name()); });
    if (!used)
      throw InputError("config",
                       fmt::format("{}: budgets.\"{}\" matches no backend (driftcheck list shows them)",
                                   p.config.path.string(), budget.pattern));
  }
  if (mutants) {
    const std::size_t correct = p.backends.size();
    for (const auto& m : reg.all()) {
      if (m->kind() != BackendKind::kMutant) continue;
      for (std::size_t i = 0; i < correct; ++i)
        if (m->mutates() == p.backends[i].backend->name())
          p.backends.push_back({m.get(), p.backends[i].held_to, {}});
    }
  }
  for (auto& b : p.backends) b.budget = p.config.budget_for(b.held_to);  // two globs tying: exit 2
  return p;
}

// The gate owns OUT/campaign: a previous gate run's campaign there is replaced, anything else is refused.
void prepare_out_dir(const fs::path& out) {
  const fs::path campaign = out / "campaign";
  if (fs::exists(campaign)) {
    if (!fs::exists(campaign / "journal.jsonl"))
      throw UsageError(fmt::format("{} exists and does not hold a gate's campaign: pass another --out",
                                   campaign.string()));
    fs::remove_all(campaign);
  }
  fs::create_directories(out);
}

CampaignResult run_campaign_phase(const Plan& p, const GateOptions& o) {
  CampaignOptions c;
  c.ops = p.config.ops;
  std::vector<std::string_view> names;
  for (const auto& b : p.backends) names.push_back(b.backend->name());
  c.backend_globs = fmt::format("{}", fmt::join(names, ","));
  c.include_mutants = o.mutants;
  c.cases = p.config.cases, c.seed = p.config.seed, c.jobs = o.jobs;
  // Shrinking is time-budgeted, so its result depends on the machine: a gate replays drawn cases instead.
  c.shrink_seconds = 0;
  c.out_dir = o.out_dir / "campaign";
  c.command_line = o.command_line;
  c.log = o.log, c.progress = o.progress, c.summary = false;
  c.gen.large_shapes = p.config.large_shapes;
  // The config's stream whole: a compile set a backend declares would narrow what the gate covers, and the
  // baseline is measured on the stream the config names.
  c.compile_set = 0;
  c.formats = p.config.formats;
  c.interrupt = o.interrupt, c.grace_seconds = o.grace_seconds;
  return run_campaign(c);
}

const reports::BackendReport* campaign_row(const reports::Report& r, std::string_view name) {
  const auto it =
      std::find_if(r.backends.begin(), r.backends.end(), [&](const auto& b) { return b.name == name; });
  return it == r.backends.end() ? nullptr : &*it;
}

// Baseline entries of backends this run does not judge: unavailable here (a GPU baseline on a CPU runner)
// they are not compared; otherwise the config stopped selecting them, which drops their statistics (a
// loosening).
void stale_entries(const Baseline& base, const Plan& p, GateReport& r) {
  std::set<std::string> judged, reported;
  for (const auto& b : p.backends) judged.insert(b.held_to);
  for (const auto& e : base.entries) {
    if (judged.count(e.backend) || !reported.insert(e.backend).second) continue;
    const bool unavailable = std::any_of(p.unavailable.begin(), p.unavailable.end(),
                                         [&](const auto& u) { return u.starts_with(e.backend + ":"); });
    if (unavailable)
      r.notes.push_back(fmt::format("baseline entries of {} not compared: unavailable here", e.backend));
    else
      r.errors.push_back(
          fmt::format("the baseline holds {}, which this config no longer selects: dropping it needs "
                      "driftcheck baseline update --allow-loosen --reason TEXT",
                      e.backend));
  }
}

// Without a usable baseline (none yet, or another stream's) the baseline check of each backend is skipped:
// the gate errors say why.
reports::GateCheck skipped_baseline_check(const reports::BackendReport& row) {
  reports::GateCheck c;
  c.backend = row.name, c.op = row.op, c.check = "baseline";
  c.status = CheckStatus::kSkipped, c.message = "no usable baseline";
  return c;
}

// Budget and baseline checks of every backend, the summary rows and the changes table.
void judge_campaign(const Plan& p, const reports::Report& campaign, const Baseline* base, GateReport& r) {
  for (const auto& b : p.backends) {
    const reports::BackendReport* row = campaign_row(campaign, b.backend->name());
    if (row == nullptr) continue;
    r.checks.push_back(budget_check(b, *row, b.budget, p.config.seed));
    for (const auto& [format, d] : row->drift) r.stats.push_back({row->name, row->op, format, d});
    if (base == nullptr) {
      r.checks.push_back(skipped_baseline_check(*row));
      continue;
    }
    Baseline own{base->stream, {}, {}};
    for (const auto& e : base->entries)
      if (e.backend == b.held_to) own.entries.push_back(e);
    auto changes = compare_with_baseline(own, entries_of(*row, b.held_to), p.config.margin);
    for (auto& ch : changes) ch.backend = row->name;
    r.checks.push_back(baseline_check(b, changes, *row, !own.entries.empty(), p.config.seed));
    if (own.entries.empty()) r.notes.push_back(fmt::format("{}: new, no baseline entry yet", row->name));
    r.changes.insert(r.changes.end(), changes.begin(), changes.end());
  }
  std::stable_sort(r.changes.begin(), r.changes.end(),
                   [](const auto& a, const auto& b) { return a.severity > b.severity; });
  // Campaign errors that are not one backend's zero-case error (those fail its budget check).
  for (const auto& e : campaign.errors) {
    const bool backend_error = std::any_of(campaign.backends.begin(), campaign.backends.end(),
                                           [&](const auto& b) { return b.error == e; });
    if (!backend_error) r.errors.push_back(e);
  }
}

reports::GateKnownFinding& known_entry(GateReport& r, const std::string& id) {
  for (auto& k : r.known)
    if (k.id == id) return k;
  reports::GateKnownFinding k{id, {}, {}, {}, 0, 0, 0};
  for (const KnownFinding& f : builtin_known_findings().findings)
    if (f.id == id) k.summary = f.summary, k.replay = f.replay;
  return r.known.emplace_back(std::move(k));
}

void add_backend(reports::GateKnownFinding& k, const std::string& backend) {
  if (std::find(k.backends.begin(), k.backends.end(), backend) == k.backends.end())
    k.backends.push_back(backend);
}

// Known findings met in any phase, listed apart and never a failed check: the golden and corpus checks name
// them in their known.<id> properties, the campaign in its report (which also says when one stopped
// reproducing: an upstream fix, or a twin that no longer models the defect).
void collect_known(const reports::Report& campaign, GateReport& r) {
  for (const auto& c : r.checks)
    for (const auto& [name, value] : c.properties) {
      if (!name.starts_with(kKnownPropertyPrefix)) continue;
      auto& k = known_entry(r, name.substr(kKnownPropertyPrefix.size()));
      (c.check == "golden" ? k.golden_cases : k.corpus_cases) += std::stoll(value);
      add_backend(k, c.backend);
    }
  for (const auto& f : campaign.known_findings) {
    if (f.cases == 0) {
      if (f.backend_cases > 0)
        r.notes.push_back(fmt::format("known finding {} not reproduced in the campaign's {} cases of {}",
                                      f.id, f.backend_cases, fmt::join(f.backends, ", ")));
      continue;
    }
    auto& k = known_entry(r, f.id);
    k.campaign_cases += f.cases;
    for (const auto& b : f.backends) add_backend(k, b);
  }
  std::sort(r.known.begin(), r.known.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
}

void fill_rows(const Plan& p, const reports::Report& campaign, GateReport& r) {
  for (const auto& b : p.backends) {
    const reports::BackendReport* row = campaign_row(campaign, b.backend->name());
    reports::GateRow g{std::string(b.backend->name()),
                       std::string(op_name(b.backend->op())),
                       std::string(backend_kind_name(b.backend->kind())),
                       {},
                       false};
    if (row != nullptr)
      for (const auto& [f, d] : row->drift) g.total.merge(d);
    for (const auto& c : r.checks)
      g.failed = g.failed || (c.backend == g.backend && c.status == CheckStatus::kFailed);
    r.rows.push_back(std::move(g));
  }
}

void fill_detection(const Plan& p, GateReport& r) {
  for (const auto& b : p.backends) {
    if (b.backend->kind() != BackendKind::kMutant) continue;
    reports::MutantDetection d{std::string(b.backend->name()), b.held_to, {}};
    for (const auto& c : r.checks)
      if (c.backend == d.mutant && c.status == CheckStatus::kFailed) d.caught_by.push_back(c.check);
    r.detection.push_back(std::move(d));
  }
}

int exit_code_of(const GateReport& r, bool internal_error) {
  if (internal_error) return 3;
  if (!r.errors.empty()) return 1;
  if (!r.mutants)
    return std::any_of(r.checks.begin(), r.checks.end(),
                       [](const auto& c) { return c.status == CheckStatus::kFailed; });
  // --mutants: correct backends must pass and every mutant must be caught.
  const bool correct_failed = std::any_of(r.rows.begin(), r.rows.end(), [](const auto& row) {
    return row.kind != backend_kind_name(BackendKind::kMutant) && row.failed;
  });
  const bool missed =
      std::any_of(r.detection.begin(), r.detection.end(), [](const auto& d) { return d.caught_by.empty(); });
  return correct_failed || missed ? 1 : 0;
}

void write_outputs(const GateReport& r, const GateOptions& o) {
  const std::string md = reports::to_markdown(r), junit = reports::to_junit(r);
  files::write_file_atomic(o.out_dir / "gate.json", reports::to_json(r).dump(2) + "\n");
  files::write_file_atomic(o.out_dir / "summary.md", md);
  files::write_file_atomic(o.out_dir / "junit.xml", junit);
  if (o.junit) files::write_file_atomic(*o.junit, junit);
  if (o.summary) files::write_file_atomic(*o.summary, md);
  // GitHub Actions shows what a step appends to this file as the job summary.
  if (const char* step_summary = std::getenv("GITHUB_STEP_SUMMARY");
      step_summary != nullptr && *step_summary) {
    std::ofstream out(step_summary, std::ios::app);
    out << md;
    if (!out)
      throw std::runtime_error(fmt::format("cannot append to $GITHUB_STEP_SUMMARY ({})", step_summary));
  }
}

std::optional<Baseline> load_baseline(const GateConfig& c, GateReport& r) {
  if (!fs::exists(c.baseline)) {
    r.errors.push_back(
        fmt::format("no baseline at {}: after a gate run, driftcheck baseline update --config {} "
                    "creates it",
                    c.baseline.string(), c.path.string()));
    return std::nullopt;
  }
  Baseline b = read_baseline(c.baseline);
  if (b.stream != c.stream()) {
    r.errors.push_back(
        fmt::format("the baseline was measured on '{}', this config runs '{}': a new stream needs "
                    "driftcheck baseline update --allow-loosen --reason TEXT",
                    b.stream, c.stream()));
    return std::nullopt;
  }
  return b;
}

}  // namespace

GateResult run_gate(const GateOptions& o) {
  const auto start = Clock::now();
  GateConfig config = load_gate_config(o.config);
  // External backends the config names join the registry as `driftcheck fuzz --backends FILE` would add them.
  if (config.backends_file)
    external::register_backends_files(extend_registry(), {config.backends_file->string()});
  Plan plan = make_plan(std::move(config), registry(), o.mutants);
  GateReport r;
  r.tool_version = std::string(kToolVersion), r.command = o.command_line, r.mutants = o.mutants;
  r.config_path = plan.config.path.string(), r.config_sha256 = plan.config.sha256;
  r.baseline_path = plan.config.baseline.string(), r.stream = plan.config.stream();
  r.seed = plan.config.seed, r.cases = static_cast<std::int64_t>(plan.config.cases);
  for (const auto& u : plan.unavailable) r.notes.push_back("not judged here: " + u);
  r.errors = plan.errors;
  const std::optional<Baseline> base = load_baseline(plan.config, r);
  std::vector<GoldenCase> golden;
  if (plan.config.golden) golden = load_golden(*plan.config.golden);
  std::vector<CorpusEntry> corpus;
  if (plan.config.corpus) corpus = load_corpus(*plan.config.corpus);
  prepare_out_dir(o.out_dir);
  say(o.log, fmt::format("{}: {} backends, {}", r.config_path, plan.backends.size(), r.stream));

  auto t = Clock::now();
  if (plan.config.golden) {
    for (auto& c : golden_checks(golden, plan.backends, *plan.config.golden, o.interrupt))
      r.checks.push_back(std::move(c));
    r.golden_cases = static_cast<std::int64_t>(golden.size());
    r.golden_seconds = seconds_since(t);
    say(o.log, fmt::format("golden: {} cases in {:.1f} s", golden.size(), r.golden_seconds));
  }
  const auto interrupted = [&] { return o.interrupt != nullptr && o.interrupt->load() > 0; };
  t = Clock::now();
  if (plan.config.corpus && !interrupted()) {
    Progress progress(o.log, o.progress, "gate corpus", "cases",
                      {static_cast<double>(corpus.size()), std::nullopt});
    const int jobs =
        o.jobs > 0 ? o.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const auto tick = [&](std::size_t done) { progress.update(static_cast<double>(done)); };
    for (auto& c : corpus_checks(corpus, plan.backends, jobs, tick, o.interrupt))
      r.checks.push_back(std::move(c));
    progress.finish(static_cast<double>(corpus.size()));
    r.corpus_cases = static_cast<std::int64_t>(corpus.size());
    r.corpus_seconds = seconds_since(t);
    say(o.log, fmt::format("corpus: {} cases in {:.1f} s", corpus.size(), r.corpus_seconds));
  }
  t = Clock::now();
  CampaignResult campaign;
  if (!interrupted()) {
    campaign = run_campaign_phase(plan, o);
    r.campaign_seconds = seconds_since(t);
    say(o.log, fmt::format("campaign: {} cases, {} checks in {:.1f} s", campaign.report.cases,
                           campaign.report.checks, r.campaign_seconds));
  }
  if (interrupted()) {
    // Checks cut short judge nothing: no verdict, and no statistics a baseline could take.
    r.errors.push_back(fmt::format("{} (a signal): the gate stopped early and has no verdict; run it again",
                                   kGateInterrupted));
    r.seconds = seconds_since(start);
    r.exit_code = 1;
    write_outputs(r, o);
    return {r, r.exit_code, campaign.abandoned};
  }
  judge_campaign(plan, campaign.report, base ? &*base : nullptr, r);
  if (base) stale_entries(*base, plan, r);
  fill_rows(plan, campaign.report, r);
  fill_detection(plan, r);
  collect_known(campaign.report, r);
  r.seconds = seconds_since(start);
  r.exit_code = exit_code_of(r, campaign.exit_code == 3);
  write_outputs(r, o);
  return {r, r.exit_code};
}

int update_baseline(const BaselineUpdateOptions& o) {
  if (o.allow_loosen && o.reason.empty())
    throw UsageError("--allow-loosen needs --reason TEXT (kept in the baseline)");
  if (!o.allow_loosen && !o.reason.empty()) throw UsageError("--reason is only for --allow-loosen");
  const GateConfig config = load_gate_config(o.config);
  const fs::path run_path = o.out_dir / "gate.json";
  std::ifstream in(run_path);
  if (!in)
    throw UsageError(
        fmt::format("no gate run in {} ({} missing): run driftcheck gate --config {} --out {} first",
                    o.out_dir.string(), run_path.string(), o.config.string(), o.out_dir.string()));
  GateReport run;
  try {
    std::stringstream ss;
    ss << in.rdbuf();
    run = reports::gate_report_from_json(nlohmann::json::parse(ss.str()));
  } catch (const std::exception& e) {
    throw InputError("gate run", fmt::format("{}: {}", run_path.string(), e.what()));
  }
  if (run.config_sha256 != config.sha256)
    throw UsageError(
        fmt::format("{} was run with another version of {} (its SHA-256 differs): run the gate again",
                    run_path.string(), o.config.string()));
  if (run.mutants)
    throw UsageError(
        fmt::format("{} is a --mutants run: its statistics are not a baseline", run_path.string()));
  if (std::any_of(run.errors.begin(), run.errors.end(),
                  [](const auto& e) { return e.starts_with(kGateInterrupted); }))
    throw UsageError(fmt::format("{} is an interrupted run: run the gate again", run_path.string()));
  std::vector<BaselineEntry> now;
  for (const auto& e : run.stats) now.push_back(baseline_entry(e));
  std::optional<Baseline> base;
  if (fs::exists(config.baseline)) base = read_baseline(config.baseline);
  const RatchetResult res =
      ratchet(base ? &*base : nullptr, run.stream, now, config.margin, o.allow_loosen, o.reason);
  const bool changed = !res.tightened.empty() || !res.loosened.empty();
  if (changed) write_baseline(config.baseline, res.baseline);
  if (o.log != nullptr) {
    std::ostream& log = *o.log;
    log << fmt::format("baseline {}: {} tightened, {} loosened, {} refused{}\n", config.baseline.string(),
                       res.tightened.size(), res.loosened.size(), res.refused.size(),
                       changed ? "" : " (unchanged)");
    for (const auto& l : res.loosened) log << "  loosened: " << l << "\n";
    for (const auto& l : res.refused) log << "  refused (worse beyond the margin): " << l << "\n";
    if (!res.refused.empty())
      log << "  to accept these, pass --allow-loosen --reason TEXT (kept in the file with the date)\n";
  }
  return res.refused.empty() ? 0 : 1;
}

}  // namespace driftcheck::fuzz
