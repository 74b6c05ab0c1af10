// The campaign runner's core: worker threads drawing the case stream, judging every selected backend of each
// case, and folding results into statistics in index order; discovery, then the grouping phase (shrinking
// findings by cause), then the report. Its parts: statistics (campaign_stats), findings registry
// (campaign_findings), shrinking (campaign_shrink), grouping (campaign_groups), heatmaps (campaign_heatmaps),
// journal header and resume (campaign_journal), report (campaign_report), selection (campaign_select).
#include "driftcheck/fuzz/campaign.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <set>
#include <shared_mutex>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "campaign_dir.hpp"
#include "campaign_groups.hpp"
#include "campaign_heatmaps.hpp"
#include "campaign_shrink.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/budget.hpp"
#include "driftcheck/fuzz/campaign_findings.hpp"
#include "driftcheck/fuzz/campaign_journal.hpp"
#include "driftcheck/fuzz/campaign_report.hpp"
#include "driftcheck/fuzz/campaign_stats.hpp"
#include "driftcheck/fuzz/features.hpp"
#include "driftcheck/fuzz/journal.hpp"
#include "driftcheck/fuzz/profiles.hpp"
#include "driftcheck/reports/numbers.hpp"
#include "thread_group.hpp"

namespace driftcheck::fuzz {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The primary output (y, out, o) carries the bias statistic; the share beyond tolerance is the largest of any
// output's.
void add_drift(reports::DriftStats& d, std::uint64_t index, const Evaluation& e) {
  double bias = 0, share = 0;
  for (const auto& m : e.metrics) share = std::max(share, m.share_beyond);
  const auto primary = std::find_if(e.metrics.begin(), e.metrics.end(), [](const auto& m) {
    return m.output == "y" || m.output == "out" || m.output == "o";
  });
  if (primary != e.metrics.end()) bias = primary->mean_signed_ulps;
  const std::string verdict = is_failure(e.verdict) ? std::string(verdict_name(e.verdict)) : std::string();
  d.add(index, verdict, reports::case_ratio(verdict, e.worst_ratio), bias, share);
}

// Shared by the threads that run its cases: one stuck in a case after an interrupt's grace is abandoned and
// keeps the campaign alive (CampaignResult::abandoned).
class Campaign : public std::enable_shared_from_this<Campaign> {
 public:
  Campaign(CampaignOptions opts, Selection sel, std::shared_ptr<const CampaignDir> dir)
      : opts_(std::move(opts)),
        sel_(std::move(sel)),
        dir_(std::move(dir)),
        findings_(dir_->path(), stream_args(opts_.gen), opts_.backends) {
    // A backend named exactly but unavailable here stays selected (it must fail as zero-case) but never runs.
    std::string why;
    for (const Backend* b : sel_.backends)
      if (b->available(&why)) by_op_[b->op()].push_back(b);
    // Restarts from before this campaign (another campaign in this process) are not its own.
    for (const Backend* b : sel_.backends) health_[std::string(b->name())].attributed = b->worker_restarts();
  }

  CampaignResult run();

 private:
  void open_journal();
  void repair_bundles();
  void discover();
  void start_workers(ThreadGroup& threads);
  void in_own_thread(const std::function<void(Campaign&)>& work);
  void abandon(int threads);
  void worker();
  std::uint64_t next_local();
  enum class CaseEnd { kRecorded, kDeferred, kDiscoveryOver };
  CaseEnd run_case(std::uint64_t local);
  // A backend's failing evaluation of the case being run, recorded as a finding once the case is complete.
  struct Failure {
    const Backend* backend;
    Evaluation evaluation;
  };
  void judge(const Backend& b, const PreparedCase& p, const CaseSpec& spec, Stats& stats,
             std::vector<std::pair<const Backend*, Outputs>>& outputs, std::vector<Failure>& failures);
  void close_discovery(bool defer_unfinished);
  BudgetPlan::Clock::time_point discovery_deadline() const;
  PhaseLimit limit(BudgetPlan::Clock::time_point deadline) const { return {deadline, &costs_}; }
  void timed_phase(const char* name, const std::function<void()>& phase);
  bool quarantined(const Backend& b);
  std::set<std::string> quarantined();  // their names
  void note_verdict(const Backend& b, const Evaluation& e, std::uint64_t index, BackendStats& s);
  void attribute_restarts(const Backend& b, BackendStats& s);
  void attribute_remaining_restarts();
  std::string on_failure(const Backend& b, const CaseSpec& spec, const PreparedCase& p, const Evaluation& e);
  void statistical_class_findings();
  // Records local case `local` as done (`s`, its statistics) or deferred (nullopt: not run in time).
  void commit(std::uint64_t local, std::optional<Stats> s);
  void fold();  // mu_ held
  void checkpoint();
  void monitor(ThreadGroup& workers);
  void fail_io(const std::system_error& e);
  bool failed() const;
  void absorb(PhaseResult r);
  bool finish(reports::Report& report);  // false when the report could not be written
  double elapsed() const { return elapsed_offset_ + seconds_since(start_); }
  const KnownFindings& known_findings() const {
    return opts_.known_findings ? *opts_.known_findings : builtin_known_findings();
  }
  int jobs() const;
  reports::Report build() const;
  bool out_of_budget(std::uint64_t k) const;
  bool interrupted() const;

  CampaignOptions opts_;
  Selection sel_;
  std::shared_ptr<const CampaignDir> dir_;
  bool resumed_ = false;
  std::map<OpKind, std::vector<const Backend*>> by_op_;
  std::optional<Journal> journal_;
  Findings findings_;
  Clock::time_point start_ = Clock::now();
  double elapsed_offset_ = 0;               // seconds spent before a resume
  BudgetPlan plan_;                         // the phases' deadlines (none without --seconds)
  CostModel costs_;                         // what a case costs, learned in discovery
  std::vector<reports::PhaseTime> phases_;  // main thread only
  std::vector<reports::Heatmap> heatmaps_;  // main thread only
  std::int64_t heatmaps_left_out_ = 0;

  std::atomic<std::uint64_t> next_index_{0};  // this shard's cases: local index j is case shard.case_index(j)
  // A resumed campaign's deferred cases, which its workers run before the stream goes on from the watermark.
  std::vector<std::uint64_t> retry_;
  std::atomic<std::size_t> retry_next_{0};
  // Held shared while a case records its findings and commits, exclusively to close discovery: a case
  // still running at the discovery deadline records nothing.
  std::shared_mutex recording_;
  bool closed_ = false;  // guarded by recording_
  // This run's deferred cases (docs/CAMPAIGN.md "Time budget"): started and not finished by the discovery
  // deadline, and not started because they would have ended past it.
  std::atomic<std::int64_t> cases_abandoned_{0}, cases_not_started_{0};
  std::atomic<std::int64_t> in_case_{0};  // cases started and not yet recorded
  std::atomic<bool> stop_{false};
  std::atomic<std::int64_t> live_cases_{0}, live_checks_{0};
  int abandoned_ = 0;     // threads left in a case by an interrupt (main thread only)
  int threads_left_ = 0;  // threads left in a case at the discovery deadline (main thread only)

  mutable std::mutex mu_;        // guards everything below
  std::uint64_t watermark_ = 0;  // every local index below it is done and folded into committed_, or deferred
  std::set<std::uint64_t> deferred_;                       // below the watermark, not run: --resume runs them
  std::map<std::uint64_t, std::optional<Stats>> pending_;  // done (or deferred) above the watermark
  Stats committed_;
  std::vector<std::string> internal_errors_;  // internal errors and the failed write that stopped the run
  bool io_failed_ = false;
  bool sealed_ = false;  // abandoned threads' cases are no longer committed

  // One backend's worker faults in discovery (docs/CAMPAIGN.md "Worker faults"): its judged cases, the
  // crashes and timeouts among them (in a row: the latest run of them), whether it is quarantined, and the
  // restart counters already attributed to cases.
  struct Health {
    std::int64_t judged = 0, faults = 0, in_a_row = 0;
    std::map<std::string, std::int64_t> faults_by_verdict;
    bool quarantined = false;
    WorkerRestarts attributed;
  };
  std::mutex health_mu_;                  // guards health_ (taken before a pool's lock, never the other way)
  std::map<std::string, Health> health_;  // by backend name
};

void Campaign::open_journal() {
  const auto path = dir_->journal();
  JournalContents contents;
  bool exists = std::filesystem::exists(path);
  if (exists) contents = read_journal(path);
  if (exists && contents.records.empty()) {
    // Not one complete line: a run killed while creating its journal (before the header was written whole)
    // recorded nothing, so the directory holds no campaign.
    if (opts_.log)
      *opts_.log << fmt::format("driftcheck: {} holds no complete record; starting anew\n", path.string());
    std::filesystem::remove(path);
    exists = false;
  }
  if (exists && !opts_.resume)
    throw UsageError(
        fmt::format("{} holds a campaign already: pass --resume to continue it, or another --out",
                    opts_.out_dir.string()));
  if (exists) {
    Checkpoint c = load_journal(contents, path.string(), findings_);
    watermark_ = c.completed, elapsed_offset_ = c.elapsed_s, committed_ = std::move(c.stats);
    deferred_.insert(c.deferred.begin(), c.deferred.end());
    retry_ = c.deferred;
    // A quarantine stays: the resumed run does not start the backend's faults over.
    for (const auto& [name, bs] : committed_.backends)
      if (!bs.quarantined.empty()) {
        health_[name].quarantined = true;
        if (opts_.log)
          *opts_.log << fmt::format("driftcheck: {} stays quarantined ({})\n", name, bs.quarantined);
      }
    journal_ = Journal::reopen(path);
    resumed_ = true;
    if (opts_.log)
      *opts_.log << fmt::format(
          "driftcheck: resuming {} at case {}{} ({} findings so far{})\n", path.string(), watermark_,
          retry_.empty()
              ? ""
              : fmt::format(", {} deferred case{} first", retry_.size(), retry_.size() == 1 ? "" : "s"),
          findings_.size(), contents.torn_tail ? ", torn last line dropped" : "");
  } else {
    journal_ = Journal::create(path, journal_header(opts_, sel_));
  }
  findings_.attach(&*journal_);
  next_index_ = watermark_;
}

// Resume: every journaled finding gets its bundle back before discovery goes on, whatever the kill (or a
// deleted findings/) left: a missing or outdated bundle is noticed and written again from the stream.
void Campaign::repair_bundles() {
  if (opts_.log)
    for (const auto& line : dir_->repairs()) *opts_.log << "driftcheck: " << line << "\n";
  const std::vector<std::string> redo = findings_.verify_bundles();
  if (!redo.empty() && opts_.log)
    *opts_.log << fmt::format(
        "driftcheck: warning: {} journaled bundle{} missing or out of date (first: findings/{}); "
        "writing {} again\n",
        redo.size(), redo.size() == 1 ? " is" : "s are", redo.front(), redo.size() == 1 ? "it" : "them");
  // Each bundle redraws and evaluates its case again: a huge one can take minutes.
  in_own_thread([](Campaign& c) { c.absorb(bundle_unbundled(c.findings_, c.opts_)); });
}

// Runs `work` on a thread of its own, which an interrupt's grace can abandon; here when no thread can be
// created.
void Campaign::in_own_thread(const std::function<void(Campaign&)>& work) {
  ThreadGroup thread([] {});
  std::string why;
  if (!thread.start([self = shared_from_this(), work] { work(*self); }, &why)) {
    work(*this);
    return;
  }
  int left = 0;
  if (!thread.wait(opts_.interrupt, opts_.grace_seconds, {}, &left)) abandon(left);
}

// An interrupt's grace ran out with `threads` still inside a case: what they would still record is sealed off
// (a bundle or record being written completes first), so the journal and the report are finalised from what
// was recorded. Their cases stay uncommitted: the last checkpoint stops below them and --resume redraws them.
void Campaign::abandon(int threads) {
  abandoned_ += threads;
  close_discovery(false);
  findings_.seal();
  std::lock_guard lock(mu_);
  sealed_ = true;
  stop_ = true;
}

int Campaign::jobs() const {
  return opts_.jobs > 0 ? opts_.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

bool Campaign::interrupted() const {
  return opts_.interrupt != nullptr && opts_.interrupt->load();
}

bool Campaign::out_of_budget(std::uint64_t k) const {
  if (stop_ || interrupted()) return true;
  if (opts_.cases && k >= *opts_.cases) return true;
  return plan_.bounded() && Clock::now() >= discovery_deadline();
}

// Discovery ends before the grouping phase's share of the budget once there are findings to group.
BudgetPlan::Clock::time_point Campaign::discovery_deadline() const {
  return plan_.discovery(findings_.size() > 0);
}

// Discovery ended (its deadline, or an interrupt's grace) with threads still inside a case: those cases
// record nothing (their threads run on, detached), and the report counts them as abandoned. At the deadline
// the cases below the last one recorded that did not end (running still, or fetched and not started) are
// deferred, so that every case that ended in time is counted. After an interrupt they are not: the journal
// stops below them, and --resume runs the rest of the stream in order, as an uninterrupted --cases campaign
// does (its statistics then fold in the same order, bit for bit). Idempotent.
void Campaign::close_discovery(bool defer_unfinished) {
  std::unique_lock lock(recording_);
  if (closed_) return;
  closed_ = true;
  cases_abandoned_ += in_case_.load();
  std::lock_guard guard(mu_);
  if (!defer_unfinished || sealed_ || pending_.empty()) return;
  for (std::uint64_t local = watermark_; local < pending_.rbegin()->first; ++local)
    pending_.emplace(local, std::nullopt);  // keeps the cases that ended
  fold();
}

// A resumed campaign's deferred cases first, then the stream. Once they are handed out, a fetch is one atomic
// add, as without them.
std::uint64_t Campaign::next_local() {
  if (retry_next_.load(std::memory_order_relaxed) < retry_.size())
    if (const std::size_t r = retry_next_.fetch_add(1); r < retry_.size()) return retry_[r];
  return next_index_.fetch_add(1);
}

// A worker whose case does not fit before the discovery deadline defers it and goes on: a smaller case may
// still fit. Two in a row mean the deadline is near for the cases it meets: the worker ends.
void Campaign::worker() {
  bool deferred_last = false;
  for (;;) {
    const std::uint64_t local = next_local();
    const std::uint64_t k = opts_.shard.case_index(local);
    if (out_of_budget(k)) return;
    try {
      const CaseEnd end = run_case(local);
      if (end == CaseEnd::kDiscoveryOver || (end == CaseEnd::kDeferred && deferred_last)) return;
      deferred_last = end == CaseEnd::kDeferred;
    } catch (const std::system_error& e) {
      fail_io(e);
      return;
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      internal_errors_.push_back(fmt::format("internal error at seed {} case {} ({}): {}", opts_.seed, k,
                                             op_name(stream_op(sel_.ops, k)), e.what()));
      stop_ = true;
      return;
    }
  }
}

// A failed write (disk full) stops the campaign: what is journaled stays valid, nothing more is recorded, and
// --resume continues once there is room. The first failure is the one reported.
void Campaign::fail_io(const std::system_error& e) {
  std::lock_guard lock(mu_);
  stop_ = true;
  if (io_failed_) return;
  io_failed_ = true;
  internal_errors_.push_back(
      fmt::format("I/O error: {} (the campaign stopped; --resume continues it)", e.what()));
}

bool Campaign::failed() const {
  std::lock_guard lock(mu_);
  return io_failed_;
}

void Campaign::absorb(PhaseResult r) {
  if (r.abandoned > 0) abandon(r.abandoned);
  if (r.io_error) {
    try {
      std::rethrow_exception(r.io_error);
    } catch (const std::system_error& e) {
      fail_io(e);
    }
  }
  std::lock_guard lock(mu_);
  internal_errors_.insert(internal_errors_.end(), r.internal_errors.begin(), r.internal_errors.end());
}

// A case that does not fit before the discovery deadline is deferred and not started; one that ends past the
// deadline is deferred too: --resume runs them first. One still running when discovery closes records
// nothing.
Campaign::CaseEnd Campaign::run_case(std::uint64_t local) {
  const auto started = Clock::now();
  const std::uint64_t k = opts_.shard.case_index(local);
  const OpKind op = stream_op(sel_.ops, k);
  const DrawnCase drawn = draw_locked(op, opts_.seed, k, opts_.gen);
  if (!formats_selected(drawn.spec, opts_.formats)) {
    commit(local, Stats{});
    return CaseEnd::kRecorded;
  }
  const auto deadline = discovery_deadline();
  if (plan_.bounded() && !limit(deadline).fits(drawn.spec)) {
    ++cases_not_started_;
    commit(local, std::nullopt);
    return CaseEnd::kDeferred;
  }
  ++in_case_;
  // A backend whose worker is being restarted after a fault is not waited for: the case's other backends,
  // and the next cases, go on (the case is counted as skipped for it). No request outlives the deadline.
  const CallPolicyScope no_waiting(
      CallPolicy{.wait_for_restart = false,
                 .deadline = plan_.bounded() ? std::optional<Clock::time_point>(deadline) : std::nullopt});
  Case c = materialize(drawn.spec);
  c.seed = opts_.seed, c.index = k;
  Stats stats;
  const auto t0 = Clock::now();
  const PreparedCase prepared = prepare(std::move(c));
  stats.ops[std::string(op_name(op))] = {1, seconds_since(t0)};
  std::vector<std::pair<const Backend*, Outputs>> outputs;
  std::vector<Failure> failures;
  if (const auto it = by_op_.find(op); it != by_op_.end())
    for (const Backend* b : it->second) judge(*b, prepared, drawn.spec, stats, outputs, failures);
  // Divergence between every pair of backends that both produced outputs for this case, in ulps and relative
  // to the pair's tolerance (per-element tolerances only where there is a pair).
  std::vector<Tolerances> tol;
  if (outputs.size() > 1)
    for (const auto& [b, out] : outputs) tol.push_back(tolerances(prepared, b->numerics_for(prepared.input)));
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = i + 1; j < outputs.size(); ++j) {
      auto& pair =
          stats.pairs[{std::string(outputs[i].first->name()), std::string(outputs[j].first->name())}];
      pair.max_ulps = divergence_ulps(outputs[i].second, outputs[j].second, prepared.input);
      const PairDivergence d = pair_divergence(outputs[i].second, tol[i], outputs[j].second, tol[j]);
      pair.max_ratio = d.max_ratio, pair.nonfinite = d.nonfinite, pair.beyond = d.max_ratio > 1;
      pair.shared = 1;
    }
  }
  costs_.observe(op, case_work(drawn.spec), seconds_since(started));
  // A case that ends past the deadline is not counted: resume runs it again.
  std::shared_lock recording(recording_);
  --in_case_;
  if (closed_) return CaseEnd::kDiscoveryOver;  // counted when discovery closed
  if (plan_.bounded() && Clock::now() >= deadline) {
    ++cases_abandoned_;
    commit(local, std::nullopt);
    return CaseEnd::kDiscoveryOver;
  }
  for (const Failure& f : failures) {
    const Evaluation& e = f.evaluation;
    stats.add_failing(on_failure(*f.backend, drawn.spec, prepared, e), verdict_name(e.verdict), e.worst_ratio,
                      prepared.input.index);
  }
  live_cases_.fetch_add(1);
  commit(local, std::move(stats));
  return CaseEnd::kRecorded;
}

void Campaign::judge(const Backend& b, const PreparedCase& p, const CaseSpec& spec, Stats& stats,
                     std::vector<std::pair<const Backend*, Outputs>>& outputs,
                     std::vector<Failure>& failures) {
  BackendStats& s = stats.backends[std::string(b.name())];
  if (quarantined(b)) {
    ++s.skipped_quarantined;
    return;
  }
  const auto t0 = Clock::now();
  const Support support = b.supports(p.input);
  if (!support.ok) {
    ++s.unsupported, ++s.reasons[support.reason];
    return;
  }
  // A mutant is judged with its twin's known upstream defects repaired (docs/FINDINGS.md): its findings, and
  // the corpus entries made from them, then come from its own bug.
  const auto repaired = b.kind() == BackendKind::kMutant ? repaired_backend(known_findings(), b) : nullptr;
  Evaluation e = evaluate(repaired ? *repaired : b, p);
  s.seconds += seconds_since(t0);
  attribute_restarts(b, s);
  if (e.not_run) {  // its worker was being restarted: not judged, not declined
    ++s.skipped_restarting;
    return;
  }
  if (e.verdict == Verdict::kUnsupported) {
    ++s.unsupported, ++s.reasons[e.detail];
    return;
  }
  ++stats.checks;
  live_checks_.fetch_add(1);
  note_verdict(b, e, p.input.index, s);
  if (!e.outputs.empty()) outputs.emplace_back(&b, e.outputs);
  if (e.verdict != Verdict::kPass) {
    if (const auto known = explain_failure(known_findings(), b, p, e); !known.empty()) {
      ++s.run;
      for (const KnownFinding* f : known) ++s.known[f->id];  // an upstream defect the twin reproduces
      return;
    }
  }
  // A known finding's failures stay out of the drift statistics too: they are the upstream defect, not drift.
  s.record(e, p.input.index, shape_class(spec));
  add_drift(s.drift[drift_format(spec)], p.input.index, e);
  s.record_shape(spec, e);
  if (is_failure(e.verdict)) failures.push_back({&b, std::move(e)});
}

bool Campaign::quarantined(const Backend& b) {
  std::lock_guard lock(health_mu_);
  const auto it = health_.find(std::string(b.name()));
  return it != health_.end() && it->second.quarantined;
}

std::set<std::string> Campaign::quarantined() {
  std::lock_guard lock(health_mu_);
  std::set<std::string> out;
  for (const auto& [name, h] : health_)
    if (h.quarantined) out.insert(name);
  return out;
}

// Quarantine (docs/CAMPAIGN.md "Worker faults"): once at least opts_.quarantine_faults judged cases ended in
// a worker crash or timeout and those are at least kQuarantineShare of its judged cases, or that many in a
// row did, the backend is not run any more; the case that decided it records why.
void Campaign::note_verdict(const Backend& b, const Evaluation& e, std::uint64_t index, BackendStats& s) {
  const bool fault = e.verdict == Verdict::kCrash || e.verdict == Verdict::kTimeout;
  {
    std::lock_guard lock(health_mu_);
    Health& h = health_[std::string(b.name())];
    ++h.judged;
    if (!fault) {
      h.in_a_row = 0;
      return;
    }
    ++h.faults, ++h.in_a_row, ++h.faults_by_verdict[std::string(verdict_name(e.verdict))];
    const std::int64_t k = opts_.quarantine_faults;
    if (h.quarantined || k <= 0 || h.faults < k) return;
    const bool in_a_row = h.in_a_row >= k;
    if (!in_a_row && static_cast<double>(h.faults) < kQuarantineShare * static_cast<double>(h.judged)) return;
    h.quarantined = true;
    std::string kinds;
    for (const auto& [v, n] : h.faults_by_verdict)
      kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", n, v);
    s.quarantined = fmt::format("quarantined after {} worker faults ({}) in {} judged cases{} (at case {})",
                                h.faults, kinds, h.judged,
                                in_a_row ? fmt::format(", the last {} in a row", h.in_a_row) : "", index);
    s.quarantined_case = index;
  }
  if (opts_.log && opts_.progress.mode != ProgressMode::kJson)
    *opts_.log << fmt::format(
        "driftcheck: {} {}: its findings are kept, its later cases are not run (docs/CAMPAIGN.md \"Worker "
        "faults\")\n",
        b.name(), s.quarantined);
}

// The backend's worker restarts since the last case that noticed some (restarts finish in the background,
// so a case gets those that ended while it ran); read under the lock, so no two cases count one restart.
void Campaign::attribute_restarts(const Backend& b, BackendStats& s) {
  std::lock_guard lock(health_mu_);
  const WorkerRestarts now = b.worker_restarts();
  WorkerRestarts& seen = health_[std::string(b.name())].attributed;
  s.worker_restarts += now.restarts - seen.restarts;
  s.restart_seconds += now.seconds - seen.seconds;
  seen = now;
}

// What no case noticed (restarts that ended after the last case, or in a phase after discovery) goes to the
// committed statistics directly.
void Campaign::attribute_remaining_restarts() {
  for (const Backend* b : sel_.backends) {
    BackendStats delta;
    attribute_restarts(*b, delta);
    if (delta.worker_restarts == 0 && delta.restart_seconds == 0) continue;
    std::lock_guard lock(mu_);
    if (!sealed_) committed_.backends[std::string(b->name())].merge(delta);
  }
}

// Over the cases of one shape class (docs/ORACLE.md section 9): a class whose count of cases at or below the
// case level, or whose share of elements off the correctly rounded reference, is improbable for a correct
// kernel (judge_class) is a finding, bundled with the case that shows it most. Decided once discovery has
// ended, on the committed statistics.
void Campaign::statistical_class_findings() {
  Stats committed;
  {
    std::lock_guard lock(mu_);
    committed = committed_;
  }
  for (const Backend* b : sel_.backends) {
    const auto it = committed.backends.find(std::string(b->name()));
    if (it == committed.backends.end() || quarantined(*b)) continue;  // a quarantined one is not run again
    for (const auto& [shape, c] : it->second.stat_classes) {
      if (interrupted()) return;  // each class found beyond its bound evaluates a case again
      const std::optional<ClassJudgement> beyond = judge_class(c, shape);
      const std::string sig = signature_of(b->op(), b->name(), Verdict::kBeyondStatisticalBound, shape);
      if (!beyond || findings_.find(sig)) continue;
      const std::uint64_t index = beyond->case_index;
      const DrawnCase drawn = draw_locked(b->op(), opts_.seed, index, opts_.gen);
      Case pristine = materialize(drawn.spec);
      pristine.seed = opts_.seed, pristine.index = index;
      // Its case runs again whatever the time left: a finding is never dropped for the budget
      // (docs/CAMPAIGN.md "Time budget"; a correct kernel has no such class).
      const PreparedCase p = prepare(std::move(pristine));
      Evaluation e = evaluate(*b, p);
      e.detail = fmt::format("{}{}{}", beyond->why, e.detail.empty() ? "" : ": ", e.detail);
      reports::FindingReport report;
      report.id = finding_id(b->name(), Verdict::kBeyondStatisticalBound, sig);
      report.op = std::string(op_name(b->op())), report.backend = std::string(b->name());
      report.verdict = std::string(verdict_name(Verdict::kBeyondStatisticalBound)),
      report.shape_class = shape;
      report.detail = e.detail, report.worst_ratio = e.worst_ratio, report.seed = opts_.seed;
      report.case_index = index, report.found_after_s = elapsed();
      report.replay = stream_replay_command(b->op(), opts_.seed, index, *b, stream_args(opts_.gen));
      report.features = case_features(drawn.spec);
      if (findings_.add(sig, report) && findings_.claim_drawn_bundle(report.backend, report.verdict))
        findings_.save_bundle(sig, *b, drawn.spec, p.input, e);
    }
  }
}

// The first case of a new signature becomes a finding, journaled at once; the first few of each (backend,
// verdict) are also bundled at once (the drawn case), the others stay replayable from the stream (seed and
// index) until the grouping phase keeps a shrunk representative per cause. Returns the finding's id.
std::string Campaign::on_failure(const Backend& b, const CaseSpec& spec, const PreparedCase& p,
                                 const Evaluation& e) {
  const std::string shape = shape_class(spec);
  const std::string sig = signature_of(spec.op, b.name(), e.verdict, shape);
  // A signature is represented by its lowest case (Findings::add): a later case of it only counts.
  if (const auto known = findings_.find(sig); known && known->report.case_index <= p.input.index)
    return known->report.id;
  reports::FindingReport report;
  report.id = finding_id(b.name(), e.verdict, sig), report.op = std::string(op_name(spec.op));
  report.backend = std::string(b.name()), report.verdict = std::string(verdict_name(e.verdict));
  report.shape_class = shape, report.detail = e.detail, report.worst_ratio = e.worst_ratio;
  report.seed = opts_.seed, report.case_index = p.input.index, report.found_after_s = elapsed();
  report.replay = stream_replay_command(spec.op, opts_.seed, p.input.index, b, stream_args(opts_.gen));
  report.features = case_features(spec);
  if (findings_.add(sig, report) && findings_.claim_drawn_bundle(report.backend, report.verdict))
    findings_.save_bundle(sig, b, spec, p.input, e);
  return report.id;
}

// Cases finish out of order across workers; they fold into `committed_` strictly in index order so a
// checkpoint's `completed` means "every case of this shard below it, but the deferred ones", which is what
// resume skips.
void Campaign::commit(std::uint64_t local, std::optional<Stats> s) {
  std::lock_guard lock(mu_);
  if (sealed_) return;
  if (local < watermark_) {  // a deferred case run again
    if (s) committed_.merge(*s), deferred_.erase(local);
    return;
  }
  pending_.emplace(local, std::move(s));
  fold();
}

void Campaign::fold() {
  while (!pending_.empty() && pending_.begin()->first == watermark_) {
    if (const auto& s = pending_.begin()->second)
      committed_.merge(*s);
    else
      deferred_.insert(watermark_);
    pending_.erase(pending_.begin());
    ++watermark_;
  }
}

void Campaign::checkpoint() {
  std::lock_guard lock(mu_);
  journal_->append(progress_record(
      {watermark_, std::vector<std::uint64_t>(deferred_.begin(), deferred_.end()), elapsed(), committed_}));
}

void Campaign::monitor(ThreadGroup& workers) {
  // A --seconds budget drives the fraction and ETA by the clock; a --cases budget by the case count.
  ProgressGoal goal;
  if (opts_.cases) {
    std::lock_guard lock(mu_);
    goal.units = static_cast<double>(opts_.shard.cases_below(*opts_.cases)) -
                 static_cast<double>(watermark_ - deferred_.size());
  }
  if (opts_.seconds) goal.seconds = std::max(0.0, *opts_.seconds - elapsed_offset_);
  Progress progress(opts_.log, opts_.progress, "fuzz", "cases", goal);
  const auto start = Clock::now();
  double last_checkpoint = 0;
  const auto note = [&] {
    return fmt::format("{} checks, {} findings", live_checks_.load(), findings_.size());
  };
  const auto tick = [&] {
    const double t = seconds_since(start);
    if (t - last_checkpoint >= opts_.checkpoint_seconds) checkpoint(), last_checkpoint = t;
    progress.update(static_cast<double>(live_cases_.load()), note(), findings_.size() > 0);
  };
  // At the discovery deadline no case starts any more; the threads still inside one are abandoned.
  const auto deadline_passed = [&] {
    if (!plan_.bounded() || Clock::now() < discovery_deadline()) return false;
    stop_ = true;
    return true;
  };
  if (int left = 0; !workers.wait(opts_.interrupt, opts_.grace_seconds, tick, &left, deadline_passed)) {
    if (interrupted()) {
      abandon(left);
    } else {
      threads_left_ += left;
      close_discovery(true);
    }
  }
  progress.finish(static_cast<double>(live_cases_.load()), note(), findings_.size() > 0);
}

reports::Report Campaign::build() const {
  std::lock_guard lock(mu_);
  const auto findings = findings_.snapshot();
  const auto groups = findings_.groups();
  reports::Report r = build_report({opts_, sel_, committed_, watermark_ - deferred_.size(), elapsed(),
                                    findings, internal_errors_, known_findings(), groups, heatmaps_});
  if (plan_.bounded()) r.budget_seconds = opts_.seconds;
  r.phases = phases_;
  // Cases that ended after one that never ended (an interrupt's or an internal error's stop) wait above the
  // watermark: not counted either.
  r.cases_abandoned = cases_abandoned_.load() + static_cast<std::int64_t>(pending_.size());
  r.cases_not_started = cases_not_started_.load();
  r.cases_deferred = static_cast<std::int64_t>(deferred_.size());
  r.heatmaps_left_out = heatmaps_left_out_;
  return r;
}

void Campaign::timed_phase(const char* name, const std::function<void()>& phase) {
  const auto t0 = Clock::now();
  phase();
  phases_.push_back({name, seconds_since(t0)});
}

// Workers run until the budget, an interrupt or a failure; the ThreadGroup stops and joins them however this
// scope is left, so no exception can meet a joinable thread.
void Campaign::discover() {
  ThreadGroup threads([this] { stop_ = true; });
  start_workers(threads);
  try {
    monitor(threads);
  } catch (const std::system_error& e) {
    fail_io(e);
  }
  threads.join();
}

void Campaign::start_workers(ThreadGroup& threads) {
  const int wanted = sel_.ops.empty() ? 0 : jobs();
  std::string why;
  for (int i = 0; i < wanted; ++i) {
    if (threads.start([self = shared_from_this()] { self->worker(); }, &why)) continue;
    if (i == 0) {
      std::lock_guard lock(mu_);
      internal_errors_.push_back(fmt::format("cannot start a worker thread: {}", why));
    } else if (opts_.log) {
      *opts_.log << fmt::format(
          "driftcheck: warning: started {} of {} worker threads ({}); going on with {}\n", i, wanted, why, i);
    }
    return;
  }
}

// The end record and the reports; a write that fails here (disk full) is reported like any other.
bool Campaign::finish(reports::Report& report) {
  const auto note = [&](const std::system_error& e) {
    report.errors.push_back(fmt::format("I/O error: {}", e.what()));
    report.exit_code = 3;
  };
  try {
    journal_->append({{"type", "end"}, {"completed", report.cases}, {"exit_code", report.exit_code}});
  } catch (const std::system_error& e) {
    if (!failed()) note(e);
  }
  try {
    reports::write_reports(report, dir_->path());
    return true;
  } catch (const std::system_error& e) {
    note(e);
    return false;
  }
}

CampaignResult Campaign::run() {
  open_journal();
  if (resumed_) repair_bundles();
  start_ = Clock::now();
  if (opts_.seconds) plan_ = BudgetPlan(start_, *opts_.seconds - elapsed_offset_, shrink_budget(opts_));
  if (!failed()) timed_phase("discovery", [this] { discover(); });
  attribute_remaining_restarts();
  try {
    if (!failed()) checkpoint();
  } catch (const std::system_error& e) {
    fail_io(e);
  }
  const PhaseLimit grouping = limit(plan_.grouping());
  if (!failed() && !interrupted()) {
    // Each class beyond its bound evaluates a case again.
    timed_phase("statistical tier", [this] {
      in_own_thread([](Campaign& c) {
        try {
          c.statistical_class_findings();
        } catch (const std::system_error& e) {
          c.fail_io(e);
        } catch (const std::exception& e) {
          std::lock_guard lock(c.mu_);
          c.internal_errors_.push_back(
              fmt::format("internal error in the statistical class check: {}", e.what()));
        }
      });
    });
  }
  if (!failed() && !interrupted()) {
    // The drawn bundles of the lowest cases of each class, whichever worker met which first.
    timed_phase("bundles", [this, grouping] {
      in_own_thread([grouping](Campaign& c) {
        try {
          c.findings_.keep_lowest_drawn_bundles();
        } catch (const std::system_error& e) {
          c.fail_io(e);
          return;
        }
        c.absorb(bundle_unbundled(c.findings_, c.opts_, grouping));
      });
    });
  }
  if (!failed() && !interrupted())
    timed_phase("grouping", [this, grouping] {
      absorb(group_phase(findings_, opts_, jobs(), shared_from_this(), quarantined(), grouping));
    });
  // The grouping phase's restarts count in this run's report, and in its journal: a last checkpoint after the
  // phase, so that a resumed campaign reports them as this run does.
  attribute_remaining_restarts();
  try {
    if (!failed() && !interrupted() && abandoned_ == 0) checkpoint();
  } catch (const std::system_error& e) {
    fail_io(e);
  }
  if (abandoned_ > 0 && opts_.log)
    *opts_.log << fmt::format(
        "driftcheck: interrupted: {} thread{} still inside a case {} s after the signal; abandoned, not "
        "recorded (--resume runs those cases again)\n",
        abandoned_, abandoned_ == 1 ? " was" : "s were", opts_.grace_seconds);
  timed_phase("heatmaps", [this] {
    Stats committed;
    {
      std::lock_guard lock(mu_);
      committed = committed_;
    }
    Heatmaps h = worst_case_heatmaps(opts_, sel_, committed, jobs(), limit(plan_.end()));
    heatmaps_ = std::move(h.heatmaps), heatmaps_left_out_ = h.left_out;
  });
  const auto t0 = Clock::now();
  reports::Report report = build();
  const bool written = finish(report);
  print_summary(opts_, report, written, seconds_since(t0));
  return {report, report.exit_code, abandoned_ + threads_left_};
}

}  // namespace

namespace {

// Flag values that make no campaign, refused before anything is written.
void check_options(const CampaignOptions& o) {
  if (o.seconds && !(std::isfinite(*o.seconds) && *o.seconds > 0))
    throw UsageError("--seconds must be a finite number of seconds > 0");
  if (o.shrink_seconds && !(std::isfinite(*o.shrink_seconds) && *o.shrink_seconds >= 0))
    throw UsageError("--shrink-seconds must be a finite number of seconds >= 0");
  if (o.seconds && o.shrink_seconds && *o.shrink_seconds >= *o.seconds)
    throw UsageError(
        "--shrink-seconds must be less than --seconds: the grouping phase is part of the budget");
  if (o.jobs < 0) throw UsageError("--jobs must be >= 0");
  if (!(std::isfinite(o.grace_seconds) && o.grace_seconds >= 0))
    throw UsageError("--grace-seconds must be a finite number of seconds >= 0");
  if (o.quarantine_faults < 0) throw UsageError("--quarantine-after must be >= 0");
  if (o.out_dir.empty()) throw UsageError("--out must name a directory (it is empty)");
  if (!o.gen.model.empty() && find_model_profile(o.gen.model) == nullptr)
    throw UsageError(fmt::format("unknown model '{}' (models: {})", o.gen.model, model_profile_names()));
  if (o.compile_set && (*o.compile_set < 0 || *o.compile_set > kMaxCompileSet))
    throw UsageError(fmt::format("--compile-set must be 0 (off) to {}", kMaxCompileSet));
}

// A new campaign's compile set: --compile-set, else the smallest the selected backends declare (one of them
// compiles per specialisation, and every backend judges the same cases).
void choose_compile_set(CampaignOptions& o, const Selection& sel) {
  if (o.compile_set) {
    o.gen.compile_set = *o.compile_set;
    return;
  }
  const Backend* by = nullptr;
  for (const Backend* b : sel.backends)
    if (b->compile_set() > 0 && (by == nullptr || b->compile_set() < by->compile_set())) by = b;
  if (by == nullptr) return;
  o.gen.compile_set = by->compile_set();
  if (o.log && o.progress.mode != ProgressMode::kJson)
    *o.log << fmt::format(
        "driftcheck: cases drawn from a compile set of {} ({} declares compile_set = {}; --compile-set 0 "
        "turns it off; docs/CAMPAIGN.md \"Compile sets\")\n",
        o.gen.compile_set, by->name(), o.gen.compile_set);
}

}  // namespace

CampaignResult run_campaign(const CampaignOptions& options) {
  CampaignOptions opts = options;
  check_options(opts);
  // A resumed campaign's stream comes from its journal, read under the directory's lock; a new one's
  // selection is checked before its directory is created.
  std::shared_ptr<const CampaignDir> dir;
  if (opts.resume) {
    dir = std::make_shared<const CampaignDir>(opts.out_dir);
    const Shard asked = opts.shard;
    apply_journal_header(opts);
    check_options(opts);
    if (opts.shard != asked)
      throw UsageError(fmt::format("{} holds shard {} of a campaign, not {}", opts.out_dir.string(),
                                   opts.shard.name(), asked.name()));
  }
  if (!opts.seconds && !opts.cases) opts.seconds = kDefaultSeconds;
  if (opts.backends == nullptr) opts.backends = &registry();
  Selection sel = select_backends(*opts.backends, opts.ops, opts.backend_globs, opts.include_mutants);
  if (!opts.resume) choose_compile_set(opts, sel);
  if (!dir) dir = std::make_shared<const CampaignDir>(opts.out_dir);
  return std::make_shared<Campaign>(std::move(opts), std::move(sel), std::move(dir))->run();
}

CheckResult check_case(const Backend& backend, Case pristine) {
  CheckResult r;
  std::string why;
  if (!backend.available(&why)) {
    r.support = Support::no(fmt::format("{} is unavailable: {}", backend.name(), why));
    return r;
  }
  r.support = backend.supports(pristine);
  if (!r.support.ok) return r;
  const PreparedCase prepared = prepare(std::move(pristine));
  // A mutant is judged as a campaign judges it: with its twin's known upstream defects repaired, so a replay
  // reproduces the verdict the campaign recorded (docs/FINDINGS.md).
  const auto repaired =
      backend.kind() == BackendKind::kMutant ? repaired_backend(builtin_known_findings(), backend) : nullptr;
  r.evaluation = evaluate(repaired ? *repaired : backend, prepared);
  if (r.evaluation.verdict == Verdict::kUnsupported) r.support = Support::no(r.evaluation.detail);
  if (is_failure(r.evaluation.verdict))
    for (const KnownFinding* f : explain_failure(builtin_known_findings(), backend, prepared, r.evaluation))
      r.known_findings.push_back(f->id);
  return r;
}

namespace {

// A word as a POSIX shell reads it back: as it is when it holds only safe characters, else single-quoted.
std::string shell_word(const std::string& w) {
  const bool safe = !w.empty() && std::all_of(w.begin(), w.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("/._-+:,=@%").find(c) != std::string_view::npos;
  });
  if (safe) return w;
  std::string out = "'";
  for (char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string definition_args(const BackendDefinition& d) {
  switch (d.kind) {
    case BackendDefinition::Kind::kBackendsFile:
      return " --backends " + shell_word(d.path.string());
    case BackendDefinition::Kind::kPlugin:
      return " --plugin " + shell_word(d.path.string());
    case BackendDefinition::Kind::kBuiltIn:
      break;
  }
  return {};
}

std::string definition_args(std::string_view backend, const Registry& reg) {
  const Backend* b = reg.find(backend);
  return b ? definition_args(b->definition()) : std::string();
}

std::string stream_replay_command(OpKind op, std::uint64_t seed, std::uint64_t index, const Backend& backend,
                                  std::string_view stream) {
  return stream_replay_command(op, seed, index, backend.name(), stream,
                               definition_args(backend.definition()));
}

std::string stream_replay_command(OpKind op, std::uint64_t seed, std::uint64_t index,
                                  std::string_view backend, std::string_view stream,
                                  std::string_view definition) {
  return fmt::format("driftcheck replay --seed {} --case {} --op {} --backend {}{}{}", seed, index,
                     op_name(op), backend, stream, definition);
}

}  // namespace driftcheck::fuzz
