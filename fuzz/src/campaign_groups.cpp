#include "campaign_groups.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <memory>
#include <mutex>
#include <ostream>
#include <set>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "campaign_shrink.hpp"
#include "driftcheck/fuzz/features.hpp"
#include "driftcheck/fuzz/group_hints.hpp"
#include "driftcheck/reports/numbers.hpp"
#include "thread_group.hpp"

namespace driftcheck::fuzz {
namespace {

std::string class_of(const reports::FindingReport& r) {
  return r.backend + "|" + r.verdict;
}

std::string group_id(const std::string& backend, const std::string& verdict,
                     const std::vector<std::string>& f) {
  std::string key = backend + "|" + verdict;
  for (const auto& s : f) key += "|" + s;
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a: the same cause gets the same id in every run
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{}-{}-g{:08x}", backend, verdict, static_cast<std::uint32_t>(h ^ (h >> 32)));
}

// The groups of a finding's class that explain it, most specific (most features) first. A worker fault is
// explained by the group of its fault (fault_label), whatever its case's features.
const GroupDef* best_group(const std::string& signature, const reports::FindingReport& r,
                           const std::vector<GroupDef>& groups) {
  const GroupDef* best = nullptr;
  const bool fault = is_worker_fault(r.verdict);
  for (const auto& g : groups) {
    if (g.backend != r.backend || g.verdict != r.verdict) continue;
    if (g.representative == signature) return &g;
    if (fault) {
      if (g.fault == fault_label(r.detail)) return &g;
      continue;
    }
    if (has_all(r.features, g.features) && (best == nullptr || g.features.size() > best->features.size()))
      best = &g;
  }
  return best;
}

// A finding's case reduced to its cause: shrunk to a minimum, its unneeded features removed.
struct Reduced {
  CaseSpec spec;
  Attempt attempt;
  ShrinkCounts counts;
  std::vector<std::string> not_needed;
  bool confirmed = true;
};

struct Budget {
  int max_tries;
  Clock::time_point shrink_until;  // the per-finding cap
  Clock::time_point deadline;      // the phase's
  const std::atomic<int>* interrupt;
  bool stopped() const { return Clock::now() >= deadline || (interrupt != nullptr && interrupt->load()); }
};

// Removes each feature of the case in turn; a removal after which the case still fails the same way is kept
// (that feature is not part of the cause) and the walk restarts, since an edit can change which features the
// case has. `tested` carries the features already tried over calls. True when a feature was removed.
bool ablate(const Backend& b, Verdict v, std::uint64_t seed, std::uint64_t index, const Budget& budget,
            std::set<std::string>& tested, Reduced& r) {
  bool removed = false;
  for (bool changed = true; changed && !budget.stopped();) {
    changed = false;
    for (const auto& f : case_features(r.spec)) {
      if (!tested.insert(f).second) continue;
      const auto without = without_feature(r.spec, f);
      if (!without) continue;
      auto a = attempt(b, *without, seed, index, checks_for(v));
      if (a && a->evaluation.verdict == v) {
        r.not_needed.push_back(f);
        r.spec = *without, r.attempt = std::move(*a);
        changed = removed = true;
        break;
      }
    }
  }
  return removed;
}

// Shrink, then ablate; a removed feature can open new shrinks (a wider format no longer needs its long
// context), so the two alternate until an ablation removes nothing, the later shrinks never bringing back a
// removed feature (a row one element shorter is smaller, but "H % 8 != 0" is not the cause). The
// representative is then a minimum of the shrink among cases without the removed features (when
// `counts.minimal`), and every feature left was tested necessary (when `confirmed`).
Reduced reduce(const Backend& b, Verdict v, const CaseSpec& drawn, Attempt first, std::uint64_t seed,
               std::uint64_t index, const Budget& budget) {
  Shrunk s = shrink(b, v, drawn, std::move(first), seed, index, budget.max_tries, budget.shrink_until,
                    budget.interrupt);
  Reduced r{std::move(s.spec), std::move(s.attempt), s.counts, {}, true};
  std::set<std::string> tested;
  while (ablate(b, v, seed, index, budget, tested, r) && !budget.stopped()) {
    const int left = budget.max_tries - static_cast<int>(r.counts.tried);
    Shrunk again = shrink(b, v, r.spec, std::move(r.attempt), seed, index, left, budget.shrink_until,
                          budget.interrupt, r.not_needed);
    r.spec = std::move(again.spec), r.attempt = std::move(again.attempt);
    r.counts.accepted += again.counts.accepted, r.counts.tried += again.counts.tried;
    r.counts.minimal = again.counts.minimal;
  }
  for (const auto& f : case_features(r.spec))
    if (!tested.count(f) || !without_feature(r.spec, f)) r.confirmed = false;
  return r;
}

class GroupPhase : public std::enable_shared_from_this<GroupPhase> {
 public:
  GroupPhase(Findings& findings, const CampaignOptions& opts, const std::set<std::string>& quarantined)
      : findings_(findings), opts_(opts) {
    // Stream order (case index): discovery order with one job, and the same order when a resumed run found
    // some of them again (found_after_s restarts with the run's clock).
    std::vector<std::pair<std::uint64_t, std::string>> order;
    // A quarantined backend is not run again: its findings stay as discovery left them.
    for (const auto& [sig, f] : findings.snapshot())
      if (!quarantined.count(f.report.backend)) order.emplace_back(f.report.case_index, sig);
    std::sort(order.begin(), order.end());
    for (const auto& [index, sig] : order) {
      const auto f = findings.find(sig);
      const std::string c = class_of(f->report);
      if (!by_class_.count(c)) turns_.push_back(c);
      by_class_[c].push_back(sig);
    }
  }

  PhaseResult run(int jobs, double budget, const std::shared_ptr<const void>& owner) {
    deadline_ = after(budget);
    if (opts_.log && !turns_.empty() && opts_.progress.mode != ProgressMode::kJson)
      *opts_.log << fmt::format(
          "grouping {} findings of {} backend/verdict classes by cause (budget {:.0f} s)\n", findings_.size(),
          turns_.size(), budget);
    // Every shrink runs on a worker thread, which an interrupt's grace can abandon in a long candidate; this
    // one does the work only when no thread can be created.
    ThreadGroup threads([this] { stop_ = true; });
    std::string why;
    for (int i = 0; i < std::max(jobs, 1); ++i)
      if (!threads.start([self = shared_from_this(), owner] { self->work(); }, &why)) break;
    int abandoned = 0;
    if (threads.size() == 0)
      work();
    else
      threads.wait(opts_.interrupt, opts_.grace_seconds, {}, &abandoned);
    std::lock_guard lock(mu_);
    PhaseResult r = out_;  // a copy: an abandoned thread may still add to out_
    r.abandoned = abandoned;
    return r;
  }

 private:
  enum class Next { kSignature, kWait, kDone };

  // Round robin over classes; a class being shrunk is not handed out again until its group exists, since the
  // group may explain its other findings.
  Next next(std::string* sig) {
    std::lock_guard lock(mu_);
    const auto groups = findings_.groups();
    for (std::size_t n = turns_.size(); n > 0; --n) {
      const std::string c = turns_.front();
      turns_.pop_front();
      if (busy_.count(c)) {
        turns_.push_back(c);
        continue;
      }
      for (const auto& s : by_class_.at(c)) {
        const auto f = findings_.find(s);
        if (tried_.count(s) || best_group(s, f->report, groups) != nullptr) continue;
        tried_.insert(s), busy_.insert(c), turns_.push_back(c);
        *sig = s;
        return Next::kSignature;
      }
    }
    return turns_.empty() || busy_.empty() ? Next::kDone : Next::kWait;
  }

  bool stopped() const {
    return stop_ || Clock::now() >= deadline_ || (opts_.interrupt != nullptr && opts_.interrupt->load());
  }

  void work() {
    std::string sig;
    while (!stopped()) {
      const Next n = next(&sig);
      if (n == Next::kDone) return;
      if (n == Next::kWait) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      try {
        group_one(sig);
      } catch (const std::system_error&) {  // a failed write (disk full) stops the phase
        std::lock_guard lock(mu_);
        if (!out_.io_error) out_.io_error = std::current_exception();
        stop_ = true;
      } catch (const std::exception& e) {
        std::lock_guard lock(mu_);
        out_.internal_errors.push_back(fmt::format("internal error while grouping {}: {}", sig, e.what()));
      }
      std::lock_guard lock(mu_);
      busy_.erase(class_of(findings_.find(sig)->report));
    }
  }

  void group_one(const std::string& sig) {
    const reports::FindingReport r = findings_.find(sig)->report;
    // No candidate, and no wait for a worker, outlives this finding's share of the phase: a request is cut
    // there (its case then counts as not run, never as a timeout), so a hanging worker costs at most that.
    const CallPolicyScope bounded(CallPolicy{
        .wait_for_restart = true, .deadline = std::min(deadline_, after(opts_.shrink_seconds_per_finding))});
    if (is_worker_fault(r.verdict)) return group_fault(sig, r);
    std::string why;
    // Redrawn as the campaign judged it (a mutant with its twin's known defects repaired). A failure that
    // does not come back (a nondeterministic backend) stays unexplained, replayable from the stream.
    auto again = redraw(r, opts_, &why);
    if (!again) return;
    const Budget budget{opts_.shrink_steps, std::min(deadline_, after(opts_.shrink_seconds_per_finding)),
                        deadline_, opts_.interrupt};
    // A twin's finding is one its known upstream defects do not explain: the twin with them repaired still
    // fails the case. Shrinking the twin itself would accept any smaller case that fails by a known defect
    // (a page-tail NaN shrinks to one key in one page) and lose the cause; the repaired twin keeps it.
    const auto repaired = twin_without_known_defects(*again->backend);
    std::optional<Attempt> target;
    if (repaired)
      target = attempt(*repaired, again->drawn.spec, r.seed, r.case_index, checks_for(again->verdict()));
    const bool use_repaired = target && is_failure(target->evaluation.verdict);
    const Backend& b = use_repaired ? *repaired : *again->backend;
    const Verdict v = use_repaired ? target->evaluation.verdict : again->verdict();
    Reduced a = reduce(b, v, again->drawn.spec, use_repaired ? std::move(*target) : std::move(again->first),
                       r.seed, r.case_index, budget);
    GroupDef g;
    g.shrink = a.counts;
    g.op = r.op, g.backend = r.backend, g.verdict = r.verdict;
    g.features = case_features(a.spec), g.not_needed = std::move(a.not_needed), g.confirmed = a.confirmed;
    g.id = group_id(g.backend, g.verdict, g.features);
    g.representative = sig, g.evaluation = std::move(a.attempt.evaluation);
    for (const auto& other : findings_.groups())
      if (other.id == g.id) return;  // two findings of one class reduced to the same cause
    findings_.add_group(std::move(g), a.spec, a.attempt.prepared.input);
  }

  // A crash or a timeout is the worker's process failing, not its outputs: its case features say nothing of
  // its cause (ablating a fault that comes and goes makes every feature look needed), and each candidate
  // would cost a restart or a whole timeout. So the group is the fault itself, its representative the drawn
  // case, run once more alone to tell whether the fault comes back (within the finding's deadline: when that
  // run is cut short or finds no worker in time, no group is made and the finding stays "not run again").
  void group_fault(const std::string& sig, const reports::FindingReport& r) {
    std::string why;
    auto again = redraw(r, opts_, &why, /*any_verdict=*/true);
    if (!again || again->first.evaluation.not_run) return;
    GroupDef g;
    g.op = r.op, g.backend = r.backend, g.verdict = r.verdict;
    g.fault = fault_label(r.detail);
    g.fault_reproduced =
        verdict_name(again->verdict()) == r.verdict && fault_label(again->first.evaluation.detail) == g.fault;
    g.id = group_id(g.backend, g.verdict, {g.fault});
    g.representative = sig;
    if (g.fault_reproduced) {
      g.evaluation = std::move(again->first.evaluation);
    } else {  // the bundle keeps the fault the campaign met, and says what the run alone gave
      parse_verdict(r.verdict, &g.evaluation.verdict);
      g.evaluation.detail =
          fmt::format("{}; its case run again alone: {}{}{}", r.detail, verdict_name(again->verdict()),
                      again->first.evaluation.detail.empty() ? "" : ": ", again->first.evaluation.detail);
    }
    for (const auto& other : findings_.groups())
      if (other.id == g.id) return;
    findings_.add_group(std::move(g), again->drawn.spec, again->first.prepared.input);
  }

  // nullptr for a mutant (redraw() already repaired its twin's defects) and for a backend no known finding
  // applies to.
  std::unique_ptr<Backend> twin_without_known_defects(const Backend& b) const {
    if (b.kind() == BackendKind::kMutant) return nullptr;
    return repaired_backend(opts_.known_findings ? *opts_.known_findings : builtin_known_findings(), b);
  }

  Findings& findings_;
  const CampaignOptions& opts_;
  Clock::time_point deadline_;
  std::mutex mu_;
  std::map<std::string, std::vector<std::string>> by_class_;
  std::deque<std::string> turns_;
  std::set<std::string> tried_, busy_;
  std::atomic<bool> stop_{false};
  PhaseResult out_;
};

void add_member(reports::FindingGroup& g, const FindingState& f, const FailingOf& n) {
  const auto& r = f.report;
  g.members.push_back(
      {r.id, r.shape_class, r.seed, r.case_index, n.cases, r.bundle, r.replay, n.worst_ratio, n.worst_case});
  // The group's worst is over every member's failing cases, not its shrunk representative's alone.
  if (g.members.size() == 1 ||
      reports::worse_case("", n.worst_ratio, n.worst_case, "", g.worst_ratio, g.worst_case))
    g.worst_ratio = n.worst_ratio, g.worst_case = n.worst_case;
  g.cases += n.cases;
  if (std::find(g.shape_classes.begin(), g.shape_classes.end(), f.report.shape_class) ==
      g.shape_classes.end())
    g.shape_classes.push_back(f.report.shape_class);
}

reports::FindingGroup from_def(const GroupDef& d) {
  reports::FindingGroup g;
  g.id = d.id, g.op = d.op, g.backend = d.backend, g.verdict = d.verdict;
  g.features = d.features, g.shrunk = true, g.confirmed = d.confirmed, g.not_needed = d.not_needed;
  g.representative = d.bundle, g.replay = d.replay, g.detail = d.evaluation.detail, g.shape = d.shape;
  g.shrink_steps = d.shrink.accepted, g.shrink_tries = d.shrink.tried, g.shrink_minimal = d.shrink.minimal;
  if (!d.fault.empty()) g.fault = d.fault, g.fault_reproduced = d.fault_reproduced, g.shrunk = false;
  if (const OutputMetrics* m = worst_metrics(d.evaluation)) {
    g.worst_output = m->output, g.representative_ratio = reports::case_ratio(d.verdict, m->worst_ratio);
    g.worst_value = m->worst_value, g.worst_reference = m->worst_reference;
    g.worst_tolerance = m->worst_tolerance;
  }
  return g;
}

}  // namespace

FailingOf failing_of(const reports::FindingReport& r, const FailingCases& failing) {
  // The finding's own case failed at least once, whether or not a checkpoint counted it yet.
  FailingOf out{1, reports::case_ratio(r.verdict, r.worst_ratio), r.case_index};
  if (const auto it = failing.counts.find(r.id); it != failing.counts.end())
    out.cases = std::max<std::int64_t>(1, it->second);
  if (const auto it = failing.worst.find(r.id);
      it != failing.worst.end() &&
      reports::worse_case("", it->second.first, it->second.second, "", out.worst_ratio, out.worst_case))
    out.worst_ratio = it->second.first, out.worst_case = it->second.second;
  return out;
}

PhaseResult group_phase(Findings& findings, const CampaignOptions& opts, int jobs,
                        std::shared_ptr<const void> owner, const std::set<std::string>& quarantined) {
  const double budget = shrink_budget(opts);
  if (budget <= 0) return {};  // --shrink-seconds 0: findings stay ungrouped, each replayable
  return std::make_shared<GroupPhase>(findings, opts, quarantined)->run(jobs, budget, owner);
}

std::vector<reports::FindingGroup> report_groups(const std::map<std::string, FindingState>& findings,
                                                 const std::vector<GroupDef>& defs,
                                                 const FailingCases& failing) {
  std::vector<reports::FindingGroup> groups;
  std::map<std::string, std::size_t> index;  // group id -> position
  for (const auto& d : defs) index.emplace(d.id, groups.size()), groups.push_back(from_def(d));
  std::map<std::string, std::size_t> unexplained;  // class -> position
  for (const auto& [sig, f] : findings) {
    const FailingOf cases = failing_of(f.report, failing);
    if (const GroupDef* d = best_group(sig, f.report, defs)) {
      add_member(groups[index.at(d->id)], f, cases);
      continue;
    }
    // Worker faults no group explains: one group per fault, labelled by it and never by case features.
    const bool fault = is_worker_fault(f.report.verdict);
    const std::string label = fault ? fault_label(f.report.detail) : std::string();
    const std::string c = fault ? class_of(f.report) + "|" + label : class_of(f.report);
    if (!unexplained.count(c)) {
      reports::FindingGroup g;
      g.id = fault ? group_id(f.report.backend, f.report.verdict, {label}) + "-unshrunk"
                   : fmt::format("{}-{}-unshrunk", f.report.backend, f.report.verdict);
      g.op = f.report.op, g.backend = f.report.backend, g.verdict = f.report.verdict;
      g.features = fault ? std::vector<std::string>{} : f.report.features, g.detail = f.report.detail;
      g.fault = label, g.replay = f.report.replay;
      unexplained.emplace(c, groups.size());
      groups.push_back(std::move(g));
    }
    auto& g = groups[unexplained.at(c)];
    // Features every unexplained finding of the class shares; the first bundled one represents them. (A named
    // reference: clang before 16, which builds the libFuzzer targets, cannot capture a structured binding.)
    const auto& features = f.report.features;
    std::erase_if(g.features, [&features](const auto& x) { return !has_all(features, {x}); });
    if (g.representative.empty() && !f.report.bundle.empty())
      g.representative = f.report.bundle, g.replay = f.report.replay;
    add_member(g, f, cases);
  }
  std::erase_if(groups, [](const auto& g) { return g.members.empty(); });
  for (auto& g : groups) g.detail = with_group_hint(g.verdict, g.features, g.detail);  // group_hints.hpp
  std::stable_sort(groups.begin(), groups.end(), reports::worse_group);
  return groups;
}

}  // namespace driftcheck::fuzz
