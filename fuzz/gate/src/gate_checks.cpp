#include "gate_checks.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/golden.hpp"
#include "driftcheck/fuzz/known_findings.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/reports/numbers.hpp"

namespace driftcheck::fuzz {
namespace {

using reports::CheckStatus;
using reports::GateCheck;

GateCheck new_check(std::string backend, std::string op, std::string check) {
  GateCheck c;
  c.backend = std::move(backend), c.op = std::move(op), c.check = std::move(check);
  return c;
}

// A statistic of the baseline comparison: a number, "inf" (a NaN or infinite output) or "no output".
std::string stat_text(double r) {
  if (std::isnan(r)) return "no output (error, crash or timeout)";
  return std::isfinite(r) ? fmt::format("{:.3g}", r) : "inf (NaN or infinite output)";
}

// One judged case in a check's details: its verdict and what its worst element says (reports::worst_cell).
std::string case_text(const Evaluation& ev) {
  const std::string_view v = verdict_name(ev.verdict);
  return fmt::format("{}: {}", v, reports::worst_cell(v, reports::case_ratio(v, ev.worst_ratio)));
}

std::string replay(const reports::BackendReport& b, std::uint64_t seed, std::uint64_t index) {
  OpKind op;
  parse_op(b.op, &op);
  return stream_replay_command(op, seed, index, b.name, {}, definition_args(b.name, registry()));
}

reports::DriftStats total_of(const reports::BackendReport& b) {
  reports::DriftStats t;
  for (const auto& [f, d] : b.drift) t.merge(d);
  return t;
}

void drift_properties(const reports::BackendReport& b, GateCheck& c) {
  const reports::DriftStats t = total_of(b);
  const auto add = [&c](std::string k, std::string v) {
    c.properties.emplace_back(std::move(k), std::move(v));
  };
  add("cases", std::to_string(t.cases));
  add("passed", std::to_string(t.passed));
  add("unsupported", std::to_string(b.unsupported));
  add("worst_ratio", fmt::format("{:.6g}", t.worst_ratio));
  add("p99_ratio", fmt::format("{:.6g}", t.p99_ratio()));
  add("mean_signed_ulps", fmt::format("{:.6g}", t.mean_signed_ulps()));
  add("max_share_beyond", fmt::format("{:.6g}", t.max_share_beyond));
  for (const auto& [v, n] : t.failures) add("verdict." + v, std::to_string(n.cases));
  for (const auto& [f, d] : b.drift) {
    add(f + ".cases", std::to_string(d.cases));
    add(f + ".worst_ratio", fmt::format("{:.6g}", d.worst_ratio));
    add(f + ".p99_ratio", fmt::format("{:.6g}", d.p99_ratio()));
  }
}

// Problems of one format's statistics against a budget, one line each with the case to replay.
void budget_problems(const reports::BackendReport& b, const std::string& format, const reports::DriftStats& d,
                     const Budget& budget, std::uint64_t seed, std::vector<std::string>& out) {
  for (const auto& [verdict, n] : d.failures) {
    if (std::find(budget.allowed_verdicts.begin(), budget.allowed_verdicts.end(), verdict) !=
        budget.allowed_verdicts.end())
      continue;
    out.push_back(fmt::format("{}: verdict {} in {} of {} cases, first case {}\n    {}", format, verdict,
                              n.cases, d.cases, n.first_case, replay(b, seed, n.first_case)));
  }
  if (!(d.worst_ratio <= budget.max_ratio))
    out.push_back(fmt::format("{}: worst error / tolerance {} > max_ratio {} (case {})\n    {}", format,
                              reports::worst_cell(d.worst_verdict, d.worst_ratio), budget.max_ratio,
                              d.worst_case, replay(b, seed, d.worst_case)));
  if (d.max_share_beyond > budget.max_share_beyond)
    out.push_back(
        fmt::format("{}: {:.3g}% of one case's elements beyond tolerance > max_share_beyond {:.3g}%", format,
                    100 * d.max_share_beyond, 100 * budget.max_share_beyond));
}

struct Tally {
  std::int64_t run = 0, unsupported = 0, failed = 0, known = 0;  // known: cases a known finding explains
  std::map<std::string, std::int64_t> known_ids;                 // known finding id -> cases it explains
};

using Explained = std::vector<const KnownFinding*>;

// A failure that a known finding explains (docs/FINDINGS.md) is the upstream kernel's defect that a faithful
// twin reproduces: counted and named apart, never a failed check (a mutant's own bug is never explained).
void add_known(Tally& t, const Explained& known) {
  ++t.known;
  for (const KnownFinding* f : known) ++t.known_ids[f->id];
}

std::string known_line(const Tally& t) {
  std::string ids;
  for (const auto& [id, n] : t.known_ids) ids += (ids.empty() ? "" : ", ") + id;
  return t.known == 0 ? "" : fmt::format("; {} failing as known findings ({})", t.known, ids);
}

// The check's metrics, with one `known.<id>` property per known finding (the gate lists them apart from
// them).
void tally_properties(const Tally& t, GateCheck& c) {
  c.properties.emplace_back("run", std::to_string(t.run));
  c.properties.emplace_back("unsupported", std::to_string(t.unsupported));
  c.properties.emplace_back("failed", std::to_string(t.failed));
  for (const auto& [id, n] : t.known_ids)
    c.properties.emplace_back(std::string(kKnownPropertyPrefix) + id, std::to_string(n));
}

// One entry's run on every backend of its op; the reference is computed once.
void run_entry(const CorpusEntry& e, const std::vector<GateBackend>& backends, std::vector<GateCheck>& checks,
               std::vector<Tally>& tally, std::mutex& mu) {
  std::optional<PreparedCase> prepared;
  for (std::size_t i = 0; i < backends.size(); ++i) {
    const Backend& b = *backends[i].backend;
    std::string why;
    if (b.op() != e.bundle.spec.op || !b.available(&why)) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const bool supported = b.supports(e.bundle.pristine).ok;
    if (supported && !prepared) prepared = prepare(e.bundle.pristine.clone());
    const Evaluation ev = supported ? evaluate(b, *prepared) : Evaluation{};
    const bool ran = supported && ev.verdict != Verdict::kUnsupported;
    const Explained known = ran && !within_budget(ev, backends[i].budget)
                                ? explain_failure(builtin_known_findings(), b, *prepared, ev)
                                : Explained{};
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard lock(mu);
    checks[i].seconds += s;
    if (!ran) {
      ++tally[i].unsupported;
      continue;
    }
    ++tally[i].run;
    if (!known.empty()) {
      add_known(tally[i], known);
      continue;
    }
    if (within_budget(ev, backends[i].budget)) continue;
    ++tally[i].failed;
    checks[i].status = CheckStatus::kFailed;
    checks[i].details +=
        fmt::format("{} (found on {} as {}): {}: {}\n    driftcheck replay {} --backend {}{}\n", e.id,
                    e.origin_backend, e.origin_verdict, case_text(ev), ev.detail, e.dir.string(), b.name(),
                    definition_args(b.definition()));
  }
}

std::string op_of(const GoldenCase& g) {
  return std::string(op_name(g.spec.op));
}

bool interrupted(const std::atomic<int>* interrupt) {
  return interrupt != nullptr && interrupt->load() > 0;
}

GateCheck reference_check(const std::string& op, const std::vector<GoldenCase>& golden,
                          const std::filesystem::path& dir, const std::atomic<int>* interrupt) {
  GateCheck c = new_check("reference", op, "golden");
  std::int64_t cases = 0, moved = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& g : golden) {
    if (op_of(g) != op || interrupted(interrupt)) continue;
    ++cases;
    const auto changes = reference_changes(g);
    if (changes.empty()) continue;
    ++moved;
    c.details += fmt::format("{}:\n", g.name);
    for (const auto& line : changes) c.details += fmt::format("    {}\n", line);
    c.details += fmt::format("    driftcheck golden verify --dir {} --case {}\n", dir.string(), g.name);
  }
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.properties = {{"cases", std::to_string(cases)}, {"moved", std::to_string(moved)}};
  if (moved > 0) {
    c.status = CheckStatus::kFailed;
    c.message = fmt::format("the fp64 reference moved on {} of {} golden cases", moved, cases);
  } else {
    c.message = fmt::format("bit-identical on {} golden cases", cases);
  }
  return c;
}

GateCheck backend_golden_check(const GateBackend& gb, const std::vector<GoldenCase>& golden,
                               const std::filesystem::path& dir, const std::atomic<int>* interrupt) {
  const Backend& b = *gb.backend;
  GateCheck c = new_check(std::string(b.name()), std::string(op_name(b.op())), "golden");
  Tally t;
  // The worst golden case (reports::worse_case: the gravest verdict, then the largest ratio).
  std::string worst_verdict;
  double worst = 0;
  std::uint64_t worst_index = 0, index = 0;
  const auto fold = [&](const Evaluation& ev) {
    const std::string_view v = is_failure(ev.verdict) ? verdict_name(ev.verdict) : std::string_view();
    const double r = reports::case_ratio(v, ev.worst_ratio);
    if (reports::worse_case(v, r, index, worst_verdict, worst, worst_index))
      worst_verdict = v, worst = r, worst_index = index;
    ++index;
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& g : golden) {
    if (g.spec.op != b.op() || interrupted(interrupt)) continue;
    std::string why;
    if (!b.available(&why) || !b.supports(g.pristine).ok) {
      ++t.unsupported;
      continue;
    }
    const PreparedCase p = prepare_golden(g);
    const Evaluation ev = evaluate(b, p);
    if (ev.verdict == Verdict::kUnsupported) {
      ++t.unsupported;
      continue;
    }
    ++t.run;
    if (within_budget(ev, gb.budget)) {
      fold(ev);
      continue;
    }
    if (const Explained known = explain_failure(builtin_known_findings(), b, p, ev); !known.empty()) {
      add_known(t, known);
      continue;
    }
    fold(ev);
    ++t.failed;
    c.details += fmt::format("{}: {}: {}\n    driftcheck golden verify --dir {} --case {} --backend {}{}\n",
                             g.name, case_text(ev), ev.detail, dir.string(), g.name, b.name(),
                             definition_args(b.definition()));
  }
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  tally_properties(t, c);
  c.properties.emplace_back("worst_ratio", fmt::format("{:.6g}", worst));
  if (t.failed > 0) {
    c.status = CheckStatus::kFailed;
    c.message = fmt::format("{} of {} golden cases beyond budget{}", t.failed, t.run, known_line(t));
  } else if (t.run == 0) {
    c.status = CheckStatus::kSkipped;
    c.message = fmt::format("supports none of the {} golden cases of its op", t.unsupported);
  } else {
    c.message = fmt::format("{} golden cases within budget (worst {}){}", t.run - t.known,
                            reports::worst_cell(worst_verdict, worst), known_line(t));
  }
  return c;
}

}  // namespace

bool within_budget(const Evaluation& e, const Budget& budget) {
  const std::string_view v = verdict_name(e.verdict);
  const bool allowed = !is_failure(e.verdict) ||
                       std::find(budget.allowed_verdicts.begin(), budget.allowed_verdicts.end(), v) !=
                           budget.allowed_verdicts.end();
  return allowed && e.worst_ratio <= budget.max_ratio;
}

std::vector<GateCheck> golden_checks(const std::vector<GoldenCase>& golden,
                                     const std::vector<GateBackend>& backends,
                                     const std::filesystem::path& dir, const std::atomic<int>* interrupt) {
  std::vector<GateCheck> checks;
  std::vector<std::string> ops;
  for (const auto& g : golden)
    if (std::find(ops.begin(), ops.end(), op_of(g)) == ops.end()) ops.push_back(op_of(g));
  for (const auto& op : ops) checks.push_back(reference_check(op, golden, dir, interrupt));
  for (const auto& b : backends) checks.push_back(backend_golden_check(b, golden, dir, interrupt));
  return checks;
}

std::vector<GateCheck> corpus_checks(const std::vector<CorpusEntry>& corpus,
                                     const std::vector<GateBackend>& backends, int jobs,
                                     const std::function<void(std::size_t done)>& progress,
                                     const std::atomic<int>* interrupt) {
  std::vector<GateCheck> checks;
  for (const auto& b : backends)
    checks.push_back(
        new_check(std::string(b.backend->name()), std::string(op_name(b.backend->op())), "corpus"));
  std::vector<Tally> tally(backends.size());
  std::mutex mu;
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::atomic<std::size_t> done{0};
  std::string internal;
  const auto work = [&] {
    for (std::size_t i = next++; i < corpus.size() && !failed && !interrupted(interrupt); i = next++) {
      try {
        run_entry(corpus[i], backends, checks, tally, mu);
        progress(++done);
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        internal = fmt::format("corpus entry {}: {}", corpus[i].dir.string(), e.what());
        failed = true;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < std::max(jobs, 1); ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (failed) throw std::runtime_error(internal);
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const auto of_op = std::count_if(corpus.begin(), corpus.end(), [&](const auto& e) {
      return e.bundle.spec.op == backends[i].backend->op();
    });
    GateCheck& c = checks[i];
    const Tally& t = tally[i];
    c.properties = {{"entries", std::to_string(of_op)}};
    tally_properties(t, c);
    if (c.status == CheckStatus::kFailed)
      c.message = fmt::format("{} of {} corpus cases fail again{}", t.failed, t.run, known_line(t));
    else if (t.run == 0)
      c.status = CheckStatus::kSkipped,
      c.message = of_op == 0 ? fmt::format("the corpus has no {} case", c.op)
                             : fmt::format("supports none of the {} {} corpus cases", of_op, c.op);
    else
      c.message = fmt::format("{} corpus cases pass{}", t.run - t.known, known_line(t));
  }
  return checks;
}

GateCheck budget_check(const GateBackend& b, const reports::BackendReport& campaign, const Budget& budget,
                       std::uint64_t seed) {
  GateCheck c = new_check(campaign.name, campaign.op, "budget");
  c.seconds = campaign.check_seconds;
  drift_properties(campaign, c);
  c.properties.emplace_back("budget", budget.pattern);
  if (b.held_to != campaign.name) c.properties.emplace_back("held_to", b.held_to);
  std::vector<std::string> problems;
  if (!campaign.error.empty()) problems.push_back(campaign.error);
  for (const auto& [format, d] : campaign.drift) budget_problems(campaign, format, d, budget, seed, problems);
  if (problems.empty()) {
    c.message = fmt::format("within budget '{}' over {} cases", budget.pattern, campaign.cases_run);
    return c;
  }
  c.status = CheckStatus::kFailed;
  c.message = problems.size() == 1
                  ? problems.front().substr(0, problems.front().find('\n'))
                  : fmt::format("{} (and {} more)", problems.front().substr(0, problems.front().find('\n')),
                                problems.size() - 1);
  for (const auto& p : problems) c.details += p + "\n";
  return c;
}

GateCheck baseline_check(const GateBackend& b, const std::vector<reports::BaselineChange>& changes,
                         const reports::BackendReport& campaign, bool in_baseline, std::uint64_t seed) {
  GateCheck c = new_check(campaign.name, campaign.op, "baseline");
  if (b.held_to != campaign.name) c.properties.emplace_back("held_to", b.held_to);
  if (!in_baseline) {
    c.message = fmt::format("no baseline entry for {} yet: driftcheck baseline update adds it", b.held_to);
    c.properties.emplace_back("new", "true");
    return c;
  }
  std::size_t worse = 0, better = 0;
  double worst = 0;
  for (const auto& ch : changes) {
    worst = std::max(worst, ch.severity);
    if (ch.severity < 0) ++better;
    if (ch.severity <= 1) continue;
    ++worse;
    const auto it = campaign.drift.find(ch.format);
    std::uint64_t index = it == campaign.drift.end() ? 0 : it->second.worst_case;
    if (ch.metric.starts_with("verdict:") && it != campaign.drift.end()) {
      const auto v = it->second.failures.find(ch.metric.substr(8));
      if (v != it->second.failures.end()) index = v->second.first_case;
    }
    c.details += fmt::format("{} {}: {} -> {} ({} margins worse)\n", ch.format, ch.metric,
                             stat_text(ch.baseline), stat_text(ch.now), stat_text(ch.severity));
    if (it != campaign.drift.end()) c.details += fmt::format("    {}\n", replay(campaign, seed, index));
  }
  c.properties.emplace_back("changes", std::to_string(changes.size()));
  c.properties.emplace_back("worse", std::to_string(worse));
  c.properties.emplace_back("better", std::to_string(better));
  c.properties.emplace_back("max_severity", fmt::format("{:.6g}", worst));
  if (worse == 0) {
    c.message = changes.empty() ? "equal to the baseline"
                                : fmt::format("{} statistics moved, none beyond the margin ({} better)",
                                              changes.size(), better);
    return c;
  }
  c.status = CheckStatus::kFailed;
  c.message = fmt::format("{} statistics measurably worse than the baseline, worst: {}", worse,
                          c.details.substr(0, c.details.find('\n')));
  return c;
}

std::vector<BaselineEntry> entries_of(const reports::BackendReport& campaign, const std::string& held_to) {
  std::vector<BaselineEntry> out;
  for (const auto& [format, d] : campaign.drift) {
    BaselineEntry e = baseline_entry({held_to, campaign.op, format, d});
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace driftcheck::fuzz
