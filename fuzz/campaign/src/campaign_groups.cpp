#include "campaign_groups.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <deque>
#include <memory>
#include <mutex>
#include <ostream>
#include <set>
#include <system_error>
#include <thread>
#include <tuple>

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
  std::vector<std::string> unproven;  // features the failure is too rare to test (ablate)
  // Features the case still fails without, where that case would bring back one found not needed ("eps >=
  // 1e-5" once "eps < 1e-5" is gone: it fails on both sides of 1e-5, so neither is part of the cause).
  std::vector<std::string> spanned;
  // The cause: the case's features but those implied by a more specific one and those ablation ruled out.
  std::vector<std::string> cause() const {
    auto out = without_implied(case_features(spec));
    std::erase_if(out, [this](const auto& f) { return has_all(unproven, {f}) || has_all(spanned, {f}); });
    return out;
  }
  bool confirmed = true;
};

struct Budget {
  int max_tries;
  Clock::time_point shrink_until;  // the per-finding cap
  Clock::time_point deadline;      // the phase's
  const std::atomic<int>* interrupt;
  bool stopped() const { return Clock::now() >= deadline || (interrupt != nullptr && interrupt->load()); }
};

// Rounding-level failures come and go with the values (a mean square rounded once fails on the rows whose
// rounding lands far enough), so one passing draw says little about a feature: judged on its own values
// alone, "batch of rows" or "eps >= 1e-5" read as causes of a bug that has nothing to do with them (issue
// #22). A feature is part of the cause when the case without it passes on the very same inputs (an edit of a
// parameter alone, such as eps: a paired test), or on its own values and on kAblationRedraws other draws of
// them while the case with it fails on at least kReproducingDraws of as many draws: were the feature
// irrelevant, the failure rate without it would be the same (about 1/2 or more, as observed), and 7 passes in
// a row would have a chance of about (1/2)^7 < 1%. With fewer failing draws the failure is too rare on these
// values to tell, and the feature is not called a cause.
constexpr int kAblationRedraws = 6;
constexpr int kReproducingDraws = 3;

// The k-th other draw of a spec's values (SplitMix64 of its value_seed and k): the same in every run.
std::uint64_t redrawn_seed(std::uint64_t value_seed, int k) {
  std::uint64_t z = value_seed + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(k + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Whether two cases hold the same tensors, element for element (bit for bit), whatever their parameters: an
// edit that changes only a parameter (eps) keeps them, one that changes a shape does not.
bool same_inputs(const Case& a, const Case& b) {
  if (a.tensors.size() != b.tensors.size()) return false;
  for (const auto& [name, t] : a.tensors) {
    const auto other = b.tensors.find(name);
    if (other == b.tensors.end() || other->second.dtype() != t.dtype() || other->second.shape() != t.shape())
      return false;
    const auto x = t.to_f64(), y = other->second.to_f64();
    if (!std::equal(x.begin(), x.end(), y.begin(), [](double p, double q) {
          return std::bit_cast<std::uint64_t>(p) == std::bit_cast<std::uint64_t>(q) ||
                 (std::isnan(p) && std::isnan(q));
        }))
      return false;
  }
  return true;
}

// `spec` on the other draws of its values k = 0, 1, ...: the first draw that fails with `v`, with the spec
// that gave it, else nullopt.
std::optional<std::pair<CaseSpec, Attempt>> fails_on_a_draw(const Backend& b, Verdict v, CaseSpec spec,
                                                            std::uint64_t seed, std::uint64_t index,
                                                            const Budget& budget) {
  const std::uint64_t values = spec.value_seed;
  for (int k = 0; k < kAblationRedraws && !budget.stopped(); ++k) {
    spec.value_seed = redrawn_seed(values, k);
    auto a = attempt(b, spec, seed, index, checks_for(v));
    if (a && a->evaluation.verdict == v) return std::pair{std::move(spec), std::move(*a)};
  }
  return std::nullopt;
}

// Whether `spec` fails with `v` on at least kReproducingDraws of kAblationRedraws other draws of its values.
bool reproduces(const Backend& b, Verdict v, CaseSpec spec, std::uint64_t seed, std::uint64_t index,
                const Budget& budget) {
  const std::uint64_t values = spec.value_seed;
  int failed = 0;
  for (int k = 0; k < kAblationRedraws && failed < kReproducingDraws && !budget.stopped(); ++k) {
    spec.value_seed = redrawn_seed(values, k);
    const auto a = attempt(b, spec, seed, index, checks_for(v));
    failed += a && a->evaluation.verdict == v;
  }
  return failed >= kReproducingDraws;
}

// Removes each feature of the case in turn; a removal after which the case still fails the same way, on its
// own values or on another draw of them, is kept (that feature is not part of the cause; the draw that failed
// becomes the case) and the walk restarts, since an edit can change which features the case has. A feature
// whose removal passes on the same inputs, or on every draw when the case with it reproduces(), is part of
// the cause; otherwise the failure is too rare on these values to tell, and the feature is `unproven`: left
// in the case, out of the cause. A removal that fails but would bring back a feature removed before is not
// taken, and the feature is `spanned` (out of the cause too). `tested` carries the features already tried in
// this round. True when a feature was removed.
bool ablate(const Backend& b, Verdict v, std::uint64_t seed, std::uint64_t index, const Budget& budget,
            std::set<std::string>& tested, Reduced& r) {
  bool removed = false;
  int reproducible = -1;  // reproduces() of the case as it stands: 1, 0, or -1 (not yet known)
  for (bool changed = true; changed && !budget.stopped();) {
    changed = false;
    for (const auto& f : case_features(r.spec)) {
      if (!tested.insert(f).second) continue;
      const auto without = without_feature(r.spec, f);
      if (!without) continue;
      auto own = attempt(b, *without, seed, index, checks_for(v));
      if (!own) continue;  // the backend does not run the case without it
      if (own->evaluation.verdict != v && same_inputs(own->prepared.input, r.attempt.prepared.input))
        continue;  // the same inputs fail with it and pass without it: part of the cause
      auto failing = own->evaluation.verdict == v ? std::optional(std::pair{*without, std::move(*own)})
                                                  : fails_on_a_draw(b, v, *without, seed, index, budget);
      if (failing) {
        // Not needed either, but the case without it would undo an earlier removal: kept as it is.
        if (has_any(case_features(failing->first), r.not_needed)) {
          if (!has_all(r.spanned, {f})) r.spanned.push_back(f);
          continue;
        }
        r.not_needed.push_back(f);
        std::erase(r.unproven, f);
        r.spec = std::move(failing->first), r.attempt = std::move(failing->second);
        changed = removed = true, reproducible = -1;
        break;
      }
      if (reproducible < 0) reproducible = reproduces(b, v, r.spec, seed, index, budget);
      if (reproducible == 0 && !has_all(r.unproven, {f})) r.unproven.push_back(f);
    }
  }
  return removed;
}

// Shrink, then ablate; a removed feature can open new shrinks (a wider format no longer needs its long
// context), so the two alternate until an ablation removes nothing, the later shrinks never bringing back a
// removed feature (a row one element shorter is smaller, but "H % 8 != 0" is not the cause). Each ablation
// round tests every feature of the case as the shrink left it. The representative is then a minimum of the
// shrink among cases without the removed features (when `counts.minimal`), and every feature left was tested
// necessary (when `confirmed`).
Reduced reduce(const Backend& b, Verdict v, const CaseSpec& drawn, Attempt first, std::uint64_t seed,
               std::uint64_t index, const Budget& budget) {
  Shrunk s = shrink(b, v, drawn, std::move(first), seed, index, budget.max_tries, budget.shrink_until,
                    budget.interrupt);
  Reduced r{std::move(s.spec), std::move(s.attempt), s.counts, {}, {}, {}, true};
  std::set<std::string> tested;
  while (ablate(b, v, seed, index, budget, tested, r) && !budget.stopped()) {
    const int left = budget.max_tries - static_cast<int>(r.counts.tried);
    Shrunk again = shrink(b, v, r.spec, std::move(r.attempt), seed, index, left, budget.shrink_until,
                          budget.interrupt, r.not_needed);
    r.spec = std::move(again.spec), r.attempt = std::move(again.attempt);
    r.counts.accepted += again.counts.accepted, r.counts.tried += again.counts.tried;
    r.counts.minimal = again.counts.minimal;
    tested.clear(), r.unproven.clear();
  }
  for (const auto& f : case_features(r.spec))
    if (!tested.count(f) || !without_feature(r.spec, f) || has_all(r.unproven, {f})) r.confirmed = false;
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

  PhaseResult run(int jobs, double budget, const std::shared_ptr<const void>& owner,
                  const PhaseLimit& limit) {
    deadline_ = std::min(after(budget), limit.deadline);
    limit_ = PhaseLimit{deadline_, limit.costs};
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
    auto again = redraw(r, opts_, &why, false, limit_);
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
    g.features = a.cause(), g.not_needed = std::move(a.not_needed);
    g.not_needed.insert(g.not_needed.end(), a.spanned.begin(), a.spanned.end());
    g.confirmed = a.confirmed;
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
    auto again = redraw(r, opts_, &why, /*any_verdict=*/true, limit_);
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
  PhaseLimit
      limit_;  // deadline_, and the campaign's cost model: a finding's case that does not fit is not run
  std::mutex mu_;
  std::map<std::string, std::vector<std::string>> by_class_;
  std::deque<std::string> turns_;
  std::set<std::string> tried_, busy_;
  std::atomic<bool> stop_{false};
  PhaseResult out_;
};

void add_member(reports::FindingGroup& g, const FindingState& f, const FailingOf& n) {
  const auto& r = f.report;
  g.members.push_back({r.id, r.shape_class, r.seed, r.case_index, n.cases, r.bundle, r.replay, n.worst_ratio,
                       n.worst_case, r.verdict});
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

// The formats a cause shows in, not the cause itself: two groups of one backend and verdict whose features
// are the same once these are set aside are one cause met in several shape classes (the shape class is
// the activation dtype and the row alignment, generators.cpp shape_class).
bool is_format_feature(const std::string& f) {
  return f == "fp16 activations" || f == "fp32 activations" || f == "H % 8 != 0";
}

// Groups that are one cause (docs/CAMPAIGN.md "One cause, one group"): of one backend and verdict with the
// same features but for formats; or rounding-level statistical verdicts of one backend (a rounding off the
// declared points shows in every class whose cases are wide enough to tell). Worker faults are grouped by
// their fault already. Empty: the group merges with nothing.
std::string cause_key(const reports::FindingGroup& g) {
  if (!g.fault.empty()) return {};
  if (g.verdict == verdict_name(Verdict::kBeyondStatisticalBound))
    return fmt::format("{}|{}|{}", g.backend, g.op, g.verdict);
  std::string key = fmt::format("{}|{}", g.backend, g.verdict);
  for (const auto& f : g.features)
    if (!is_format_feature(f)) key += "|" + f;
  return key;
}

// The group that stands for a cause: one whose every feature was tested necessary before one with features
// left untested (a failure too rare on its values to tell), then the most general (fewest features), a
// shrunk one before an unshrunk one, then by id: a choice that depends on the groups alone, never on the
// order they were found in.
bool stands_before(const reports::FindingGroup& a, const reports::FindingGroup& b) {
  return std::tuple(!a.confirmed, a.features.size(), !a.shrunk, a.id) <
         std::tuple(!b.confirmed, b.features.size(), !b.shrunk, b.id);
}

// The merged cause is the features every tested group shares: a group with untested features says nothing
// about which features matter, so it narrows the cause only when no group was tested.
void absorb(reports::FindingGroup& into, const reports::FindingGroup& g) {
  if (g.confirmed || !into.confirmed)
    std::erase_if(into.features, [&g](const auto& f) { return !has_all(g.features, {f}); });
  into.cases += g.cases;
  if (reports::worse_case("", g.worst_ratio, g.worst_case, "", into.worst_ratio, into.worst_case))
    into.worst_ratio = g.worst_ratio, into.worst_case = g.worst_case;
  for (const auto& c : g.shape_classes)
    if (std::find(into.shape_classes.begin(), into.shape_classes.end(), c) == into.shape_classes.end())
      into.shape_classes.push_back(c);
  into.members.insert(into.members.end(), g.members.begin(), g.members.end());
}

// One group per cause_key: the others' members, cases and shape classes join the one that stands for them,
// whose features become those every merged group shares; its detail says over how much it was seen.
std::vector<reports::FindingGroup> merge_causes(std::vector<reports::FindingGroup> groups) {
  std::map<std::string, std::vector<std::size_t>> by_cause;
  for (std::size_t i = 0; i < groups.size(); ++i)
    if (const auto key = cause_key(groups[i]); !key.empty()) by_cause[key].push_back(i);
  std::vector<bool> gone(groups.size(), false);
  for (auto& [key, at] : by_cause) {
    if (at.size() < 2) continue;
    std::sort(at.begin(), at.end(),
              [&groups](std::size_t a, std::size_t b) { return stands_before(groups[a], groups[b]); });
    auto& into = groups[at.front()];
    for (std::size_t k = 1; k < at.size(); ++k) absorb(into, groups[at[k]]), gone[at[k]] = true;
    std::sort(into.members.begin(), into.members.end(), [](const auto& a, const auto& b) {
      return std::tie(a.case_index, a.id) < std::tie(b.case_index, b.id);
    });
    const bool statistical = into.verdict == verdict_name(Verdict::kBeyondStatisticalBound);
    // After the representative's detail, whose first words are the oracle's hint where it has one.
    into.detail += fmt::format("; {}one cause over {} shape classes ({} failing cases, {} findings)",
                               statistical ? "rounding-level drift, " : "", into.shape_classes.size(),
                               into.cases, into.members.size());
  }
  std::vector<reports::FindingGroup> out;
  for (std::size_t i = 0; i < groups.size(); ++i)
    if (!gone[i]) out.push_back(std::move(groups[i]));
  return out;
}

std::vector<std::string> without_formats(std::vector<std::string> features) {
  std::erase_if(features, is_format_feature);
  return features;
}

// A backend's rounding-level drift and its beyond-tolerance failures are one cause seen at two sizes when the
// tolerance group's cause is met in every statistical case (its features, formats aside, are among the
// statistical group's): a mean square rounded once lands beyond the tolerance on some rows and off the
// declared rounding points on the rest. The statistical group joins it: its members keep their verdict, its
// words (the rounding points, the share off them, the p-value) stay in the detail.
std::vector<reports::FindingGroup> join_rounding_drift(std::vector<reports::FindingGroup> groups) {
  const std::string statistical(verdict_name(Verdict::kBeyondStatisticalBound));
  const std::string tolerance(verdict_name(Verdict::kBeyondTolerance));
  std::vector<bool> gone(groups.size(), false);
  for (std::size_t s = 0; s < groups.size(); ++s) {
    const auto& drift = groups[s];
    if (drift.verdict != statistical) continue;
    reports::FindingGroup* into = nullptr;
    for (auto& t : groups)
      if (t.verdict == tolerance && t.backend == drift.backend && t.op == drift.op &&
          has_all(drift.features, without_formats(t.features)) &&
          (into == nullptr || stands_before(t, *into)))
        into = &t;
    if (into == nullptr) continue;
    for (const auto& c : drift.shape_classes)
      if (std::find(into->shape_classes.begin(), into->shape_classes.end(), c) == into->shape_classes.end())
        into->shape_classes.push_back(c);
    into->cases += drift.cases;
    into->members.insert(into->members.end(), drift.members.begin(), drift.members.end());
    std::sort(into->members.begin(), into->members.end(), [](const auto& a, const auto& b) {
      return std::tie(a.case_index, a.id) < std::tie(b.case_index, b.id);
    });
    into->detail +=
        fmt::format("; the same cause at rounding level in {} more findings ({} failing cases): {}",
                    drift.members.size(), drift.cases, drift.detail);
    gone[s] = true;
  }
  std::vector<reports::FindingGroup> out;
  for (std::size_t i = 0; i < groups.size(); ++i)
    if (!gone[i]) out.push_back(std::move(groups[i]));
  return out;
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
                        std::shared_ptr<const void> owner, const std::set<std::string>& quarantined,
                        const PhaseLimit& limit) {
  const double budget = shrink_budget(opts);
  if (budget <= 0) return {};  // --shrink-seconds 0: findings stay ungrouped, each replayable
  return std::make_shared<GroupPhase>(findings, opts, quarantined)->run(jobs, budget, owner, limit);
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
  groups = join_rounding_drift(merge_causes(std::move(groups)));
  for (auto& g : groups) g.detail = with_group_hint(g.verdict, g.features, g.detail);  // group_hints.hpp
  std::stable_sort(groups.begin(), groups.end(), reports::worse_group);
  return groups;
}

}  // namespace driftcheck::fuzz
