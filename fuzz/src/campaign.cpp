#include "driftcheck/fuzz/campaign.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <ostream>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/bundle.hpp"
#include "driftcheck/fuzz/journal.hpp"

namespace driftcheck::fuzz {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// RapidCheck keeps implicit parameters (the handler gen::exec uses) in process-wide stacks, and a Shrinkable
// may regenerate its value lazily through them, so every draw, value() and shrinks() walk holds this lock.
std::mutex rc_mutex;

// Non-finite numbers (a NaN output has an infinite error ratio) survive the journal as strings.
json number_json(double v) {
  return std::isfinite(v) ? json(v) : json(fmt::format("{}", v));
}
double number_from(const json& j) {
  return j.is_string() ? std::stod(j.get<std::string>()) : j.get<double>();
}
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Unsupported reasons may embed case parameters ("block_size 544: ..."); keeping only the most frequent ones
// keeps checkpoints and memory flat over long campaigns.
constexpr std::size_t kMaxReasons = 16;

struct BackendStats {
  std::int64_t run = 0, unsupported = 0, passed = 0;
  std::map<std::string, std::int64_t> reasons, failures;
  double worst_ratio = 0;
  std::uint64_t worst_case = 0;
  double seconds = 0;

  void merge(const BackendStats& o) {
    run += o.run, unsupported += o.unsupported, passed += o.passed, seconds += o.seconds;
    for (const auto& [r, n] : o.reasons) reasons[r] += n;
    for (const auto& [v, n] : o.failures) failures[v] += n;
    if (o.worst_ratio > worst_ratio || std::isnan(o.worst_ratio))
      worst_ratio = o.worst_ratio, worst_case = o.worst_case;
    while (reasons.size() > kMaxReasons)
      reasons.erase(std::min_element(reasons.begin(), reasons.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; }));
  }
  json to_json() const {
    return {{"run", run},
            {"unsupported", unsupported},
            {"passed", passed},
            {"reasons", reasons},
            {"failures", failures},
            {"worst_ratio", number_json(worst_ratio)},
            {"worst_case", worst_case},
            {"seconds", seconds}};
  }
  static BackendStats from_json(const json& j) {
    BackendStats s;
    s.run = j.at("run"), s.unsupported = j.at("unsupported"), s.passed = j.at("passed");
    s.reasons = j.at("reasons").get<std::map<std::string, std::int64_t>>();
    s.failures = j.at("failures").get<std::map<std::string, std::int64_t>>();
    s.worst_ratio = number_from(j.at("worst_ratio")), s.worst_case = j.at("worst_case");
    s.seconds = j.at("seconds");
    return s;
  }
};

struct PairStats {
  double max_ulps = 0;
  std::int64_t shared = 0;
};

struct OpStats {
  std::int64_t cases = 0;
  double reference_seconds = 0;
};

// Statistics of a set of completed cases; cases fold into the committed total in index order (see commit()).
struct Stats {
  std::map<std::string, BackendStats> backends;
  std::map<std::pair<std::string, std::string>, PairStats> pairs;
  std::map<std::string, OpStats> ops;
  std::int64_t checks = 0;

  void merge(const Stats& o) {
    for (const auto& [n, b] : o.backends) backends[n].merge(b);
    for (const auto& [k, p] : o.pairs) {
      auto& mine = pairs[k];
      if (p.max_ulps > mine.max_ulps || std::isnan(p.max_ulps)) mine.max_ulps = p.max_ulps;
      mine.shared += p.shared;
    }
    for (const auto& [n, op] : o.ops)
      ops[n].cases += op.cases, ops[n].reference_seconds += op.reference_seconds;
    checks += o.checks;
  }
  json to_json() const {
    json b = json::object(), p = json::array(), o = json::object();
    for (const auto& [n, s] : backends) b[n] = s.to_json();
    for (const auto& [k, s] : pairs) p.push_back({k.first, k.second, number_json(s.max_ulps), s.shared});
    for (const auto& [n, s] : ops) o[n] = {s.cases, s.reference_seconds};
    return {{"backends", b}, {"pairs", p}, {"ops", o}, {"checks", checks}};
  }
  static Stats from_json(const json& j) {
    Stats s;
    for (const auto& [n, b] : j.at("backends").items()) s.backends[n] = BackendStats::from_json(b);
    for (const auto& p : j.at("pairs")) s.pairs[{p.at(0), p.at(1)}] = {number_from(p.at(2)), p.at(3)};
    for (const auto& [n, o] : j.at("ops").items()) s.ops[n] = {o.at(0), o.at(1)};
    s.checks = j.at("checks");
    return s;
  }
};

std::string signature_of(OpKind op, std::string_view backend, Verdict v, const std::string& shape) {
  return fmt::format("{}|{}|{}|{}", op_name(op), backend, verdict_name(v), shape);
}

// A stable directory name for a signature: readable prefix plus FNV-1a of the whole signature.
std::string finding_id(std::string_view backend, Verdict v, const std::string& signature) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : signature) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{}-{}-{:08x}", backend, verdict_name(v), static_cast<std::uint32_t>(h ^ (h >> 32)));
}

bool has_wildcard(std::string_view s) {
  return s.find_first_of("*?,") != std::string_view::npos;
}

// The evaluation of one (possibly shrunk) spec on one backend; nullopt when the spec does not make a case
// this backend runs (a shrink can leave the backend's supported space).
struct Attempt {
  PreparedCase prepared;
  Evaluation evaluation;
};
std::optional<Attempt> attempt(const Backend& b, const CaseSpec& spec, std::uint64_t seed,
                               std::uint64_t index) {
  try {
    Case c = materialize(spec);
    c.seed = seed, c.index = index;
    if (!b.supports(c).ok) return std::nullopt;
    Attempt a{prepare(std::move(c)), {}};
    a.evaluation = evaluate(b, a.prepared);
    return a;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

struct Shrunk {
  CaseSpec spec;
  Attempt attempt;
  std::int64_t steps = 0;
};

// Greedy descent of RapidCheck's shrink tree: take the first shrink that still fails with the same verdict
// and start again from it, until no shrink fails or the step/time budget is spent.
Shrunk shrink(const Backend& b, Verdict verdict, rc::Shrinkable<CaseSpec> current, Attempt first,
              std::uint64_t seed, std::uint64_t index, int max_steps, Clock::time_point deadline) {
  std::unique_lock lock(rc_mutex);
  Shrunk out{current.value(), std::move(first), 0};
  bool improved = true;
  while (improved && out.steps < max_steps && Clock::now() < deadline) {
    improved = false;
    auto candidates = current.shrinks();
    while (out.steps < max_steps && Clock::now() < deadline) {
      auto next = candidates.next();
      if (!next) break;
      const CaseSpec spec = next->value();
      lock.unlock();
      ++out.steps;
      auto a = attempt(b, spec, seed, index);
      lock.lock();
      if (a && a->evaluation.verdict == verdict) {
        current = std::move(*next);
        out.spec = spec;
        out.attempt = std::move(*a);
        improved = true;
        break;
      }
    }
  }
  return out;
}

struct FindingState {
  reports::FindingReport report;
  bool bundled = false;  // a bundle (drawn or shrunk) is on disk
  bool shrunk = false;   // the shrink phase has handled it
};

// A shrink spends at most this long on one finding, so one huge attention case cannot eat the whole phase.
constexpr double kShrinkSecondsPerFinding = 10.0;

class Campaign {
 public:
  Campaign(CampaignOptions opts, Selection sel) : opts_(std::move(opts)), sel_(std::move(sel)) {
    // A backend named exactly but unavailable here stays selected (it must fail as zero-case) but never runs.
    std::string why;
    for (const Backend* b : sel_.backends)
      if (b->available(&why)) by_op_[b->op()].push_back(b);
  }

  CampaignResult run();

 private:
  json header_args() const;
  void load_journal(const JournalContents& contents);
  void open_journal();
  void shrink_phase();
  void shrink_one(const std::string& signature, Clock::time_point deadline);
  void worker();
  void run_case(std::uint64_t k);
  void judge(const Backend& b, const PreparedCase& p, const rc::Shrinkable<CaseSpec>& drawn, Stats& stats,
             std::vector<std::pair<const Backend*, Outputs>>& outputs);
  void on_failure(const Backend& b, const rc::Shrinkable<CaseSpec>& drawn, const PreparedCase& p,
                  Evaluation e);
  void save_bundle(const std::string& signature, const Backend& b, const CaseSpec& spec, const Attempt& a,
                   std::int64_t shrink_steps, bool shrunk);
  void commit(std::uint64_t k, Stats s);
  void checkpoint();
  void monitor();
  double elapsed() const { return elapsed_offset_ + seconds_since(start_); }
  int jobs() const;
  reports::Report build_report() const;
  void print_summary(const reports::Report& r) const;
  bool out_of_budget(std::uint64_t k) const;
  bool interrupted() const;

  CampaignOptions opts_;
  Selection sel_;
  std::map<OpKind, std::vector<const Backend*>> by_op_;
  std::optional<Journal> journal_;
  Clock::time_point start_ = Clock::now();
  double elapsed_offset_ = 0;  // seconds spent before a resume

  std::atomic<std::uint64_t> next_index_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> live_workers_{0};
  std::atomic<std::int64_t> live_cases_{0}, live_checks_{0};

  mutable std::mutex mu_;        // guards everything below and the journal
  std::uint64_t watermark_ = 0;  // every case below it is done and folded into committed_
  std::map<std::uint64_t, Stats> pending_;
  Stats committed_;
  std::map<std::string, FindingState> findings_;  // by signature
  std::map<std::string, double> first_finding_;   // backend -> campaign seconds
  std::vector<std::string> internal_errors_;
};

json Campaign::header_args() const {
  json ops = json::array(), backends = json::array();
  for (OpKind op : sel_.ops) ops.push_back(op_name(op));
  for (const Backend* b : sel_.backends) backends.push_back(b->name());
  return {{"args",
           {{"ops", ops},
            {"backend_globs", opts_.backend_globs},
            {"include_mutants", opts_.include_mutants},
            {"seed", opts_.seed},
            {"seconds", opts_.seconds ? json(*opts_.seconds) : json(nullptr)},
            {"cases", opts_.cases ? json(*opts_.cases) : json(nullptr)},
            {"large_shapes", opts_.gen.large_shapes}}},
          {"backends", backends},
          {"command", opts_.command_line},
          {"tool_version", kToolVersion}};
}

void Campaign::load_journal(const JournalContents& contents) {
  for (const auto& r : contents.records) {
    const std::string type = r.value("type", "");
    if (type == "progress") {
      watermark_ = r.at("completed");
      elapsed_offset_ = r.at("elapsed_s");
      committed_ = Stats::from_json(r.at("stats"));
    } else if (type == "finding") {
      auto& f = findings_[r.at("signature").get<std::string>()];
      f.report = {r.at("id"),
                  r.at("op"),
                  r.at("backend"),
                  r.at("verdict"),
                  r.at("shape_class"),
                  r.at("detail"),
                  number_from(r.at("worst_ratio")),
                  r.at("seed"),
                  r.at("case_index"),
                  r.at("found_after_s"),
                  0,
                  "",
                  r.at("replay")};
      auto [it, fresh] = first_finding_.emplace(f.report.backend, f.report.found_after_s);
      if (!fresh) it->second = std::min(it->second, f.report.found_after_s);
    } else if (type == "bundle") {
      for (auto& [sig, f] : findings_) {
        if (f.report.id != r.at("id")) continue;
        f.bundled = true;
        f.report.bundle = r.at("bundle"), f.report.replay = r.at("replay");
        f.report.detail = r.at("detail"), f.report.worst_ratio = number_from(r.at("worst_ratio"));
        f.report.shrink_steps = r.at("shrink_steps");
        f.shrunk = r.value("shrunk", false);
      }
    }
  }
}

void Campaign::open_journal() {
  const auto path = opts_.out_dir / "journal.jsonl";
  if (opts_.resume && std::filesystem::exists(path)) {
    JournalContents contents = read_journal(path);
    load_journal(contents);
    journal_ = Journal::reopen(path);
    if (opts_.log)
      *opts_.log << fmt::format("driftcheck: resuming {} at case {} ({} findings so far{})\n", path.string(),
                                watermark_, findings_.size(),
                                contents.torn_tail ? ", torn last line dropped" : "");
  } else {
    if (std::filesystem::exists(path))
      throw UsageError(
          fmt::format("{} holds a campaign already: pass --resume to continue it, or another --out",
                      opts_.out_dir.string()));
    journal_ = Journal::create(path, header_args());
  }
  next_index_ = watermark_;
}

// Shrinking runs after the discovery budget so that finding every bug class fast is never delayed by
// shrinking the first ones. The first finding of each (backend, verdict) goes first: a minimal repro of a new
// bug class is worth more than a smaller copy of one already minimised. Findings journaled by a killed run
// (resume) are handled here too: redrawn from (op, seed, index), bundled and shrunk.
void Campaign::shrink_phase() {
  std::vector<std::string> queue, later;
  std::set<std::string> classes;
  for (const auto& [sig, f] : findings_) {
    if (f.shrunk) continue;
    (classes.insert(f.report.backend + "|" + f.report.verdict).second ? queue : later).push_back(sig);
  }
  queue.insert(queue.end(), later.begin(), later.end());
  if (queue.empty()) return;
  const double budget = opts_.shrink_seconds.value_or(opts_.seconds ? std::max(5.0, 0.25 * *opts_.seconds)
                                                                    : 3 * kShrinkSecondsPerFinding);
  if (opts_.log) *opts_.log << fmt::format("shrinking {} findings (budget {:.0f} s)\n", queue.size(), budget);
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(budget));
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < queue.size() && Clock::now() < deadline; i = next++) {
      const auto cap = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(kShrinkSecondsPerFinding));
      try {
        shrink_one(queue[i], std::min(deadline, cap));
      } catch (const std::exception& e) {
        std::lock_guard lock(mu_);
        internal_errors_.push_back(fmt::format("internal error while shrinking {}: {}", queue[i], e.what()));
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < jobs(); ++i) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
}

void Campaign::shrink_one(const std::string& signature, Clock::time_point deadline) {
  reports::FindingReport r;
  bool bundled = false;
  {
    std::lock_guard lock(mu_);
    r = findings_.at(signature).report, bundled = findings_.at(signature).bundled;
  }
  const Backend* b = opts_.backends->find(r.backend);
  OpKind op;
  if (b == nullptr || !parse_op(r.op, &op)) return;
  std::optional<rc::Shrinkable<CaseSpec>> drawn;
  CaseSpec spec;
  {
    std::lock_guard lock(rc_mutex);
    drawn.emplace(draw_case(op, r.seed, r.case_index, opts_.gen));
    spec = drawn->value();
  }
  auto first = attempt(*b, spec, r.seed, r.case_index);
  // A failure that does not come back (a nondeterministic backend) keeps the bundle of the drawn case.
  if (!first || verdict_name(first->evaluation.verdict) != r.verdict) return;
  if (!bundled) save_bundle(signature, *b, spec, *first, 0, false);
  const Verdict verdict = first->evaluation.verdict;
  Shrunk s =
      shrink(*b, verdict, *drawn, std::move(*first), r.seed, r.case_index, opts_.shrink_steps, deadline);
  save_bundle(signature, *b, s.spec, s.attempt, s.steps, true);
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
  return opts_.seconds && elapsed() >= *opts_.seconds;
}

void Campaign::worker() {
  for (;;) {
    const std::uint64_t k = next_index_.fetch_add(1);
    if (out_of_budget(k)) return;
    try {
      run_case(k);
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      internal_errors_.push_back(fmt::format("internal error at seed {} case {} ({}): {}", opts_.seed, k,
                                             op_name(stream_op(sel_.ops, k)), e.what()));
      stop_ = true;
      return;
    }
  }
}

void Campaign::run_case(std::uint64_t k) {
  const OpKind op = stream_op(sel_.ops, k);
  std::optional<rc::Shrinkable<CaseSpec>> drawn;
  CaseSpec spec;
  {
    std::lock_guard lock(rc_mutex);
    drawn.emplace(draw_case(op, opts_.seed, k, opts_.gen));
    spec = drawn->value();
  }
  Case c = materialize(spec);
  c.seed = opts_.seed, c.index = k;
  Stats stats;
  const auto t0 = Clock::now();
  const PreparedCase prepared = prepare(std::move(c));
  stats.ops[std::string(op_name(op))] = {1, seconds_since(t0)};
  std::vector<std::pair<const Backend*, Outputs>> outputs;
  if (const auto it = by_op_.find(op); it != by_op_.end())
    for (const Backend* b : it->second) judge(*b, prepared, *drawn, stats, outputs);
  // Divergence between every pair of backends that both produced outputs for this case.
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = i + 1; j < outputs.size(); ++j) {
      auto& pair =
          stats.pairs[{std::string(outputs[i].first->name()), std::string(outputs[j].first->name())}];
      pair.max_ulps = divergence_ulps(outputs[i].second, outputs[j].second, prepared.input);
      pair.shared = 1;
    }
  }
  live_cases_.fetch_add(1);
  commit(k, std::move(stats));
}

void Campaign::judge(const Backend& b, const PreparedCase& p, const rc::Shrinkable<CaseSpec>& drawn,
                     Stats& stats, std::vector<std::pair<const Backend*, Outputs>>& outputs) {
  BackendStats& s = stats.backends[std::string(b.name())];
  const auto t0 = Clock::now();
  const Support support = b.supports(p.input);
  if (!support.ok) {
    ++s.unsupported, ++s.reasons[support.reason];
    return;
  }
  Evaluation e = evaluate(b, p);
  s.seconds += seconds_since(t0);
  if (e.verdict == Verdict::kUnsupported) {
    ++s.unsupported, ++s.reasons[e.detail];
    return;
  }
  ++s.run, ++stats.checks;
  live_checks_.fetch_add(1);
  if (e.verdict == Verdict::kPass)
    ++s.passed;
  else
    ++s.failures[std::string(verdict_name(e.verdict))];
  if (e.worst_ratio > s.worst_ratio || std::isnan(e.worst_ratio))
    s.worst_ratio = e.worst_ratio, s.worst_case = p.input.index;
  if (!e.outputs.empty()) outputs.emplace_back(&b, e.outputs);
  if (is_failure(e.verdict)) on_failure(b, drawn, p, std::move(e));
}

void Campaign::on_failure(const Backend& b, const rc::Shrinkable<CaseSpec>& drawn, const PreparedCase& p,
                          Evaluation e) {
  CaseSpec spec;
  {
    std::lock_guard lock(rc_mutex);
    spec = drawn.value();
  }
  const std::string shape = shape_class(spec);
  const std::string sig = signature_of(spec.op, b.name(), e.verdict, shape);
  {
    std::lock_guard lock(mu_);
    if (findings_.count(sig)) return;
    const double t = elapsed();
    auto& f = findings_[sig];
    f.report = {finding_id(b.name(), e.verdict, sig),
                std::string(op_name(spec.op)),
                std::string(b.name()),
                std::string(verdict_name(e.verdict)),
                shape,
                e.detail,
                e.worst_ratio,
                opts_.seed,
                p.input.index,
                t,
                0,
                "",
                stream_replay_command(spec.op, opts_.seed, p.input.index, b.name())};
    first_finding_.emplace(f.report.backend, t);
    // Journaled at once: a kill before its bundle is written still leaves the finding, which resume bundles.
    journal_->append({{"type", "finding"},
                      {"signature", sig},
                      {"id", f.report.id},
                      {"op", f.report.op},
                      {"backend", f.report.backend},
                      {"verdict", f.report.verdict},
                      {"shape_class", shape},
                      {"detail", e.detail},
                      {"worst_ratio", number_json(e.worst_ratio)},
                      {"seed", opts_.seed},
                      {"case_index", p.input.index},
                      {"found_after_s", t},
                      {"replay", f.report.replay}});
  }
  CaseSpec spec_drawn;
  {
    std::lock_guard lock(rc_mutex);
    spec_drawn = drawn.value();
  }
  save_bundle(sig, b, spec_drawn, Attempt{p, std::move(e)}, 0, false);
}

void Campaign::save_bundle(const std::string& signature, const Backend& b, const CaseSpec& spec,
                           const Attempt& a, std::int64_t shrink_steps, bool shrunk) {
  std::string id;
  std::uint64_t seed = 0, index = 0;
  {
    std::lock_guard lock(mu_);
    const auto& r = findings_.at(signature).report;
    id = r.id, seed = r.seed, index = r.case_index;
  }
  const std::string rel = "findings/" + id;
  const auto dir = opts_.out_dir / rel;
  FindingRecord rec{id,
                    std::string(b.name()),
                    shape_class(spec),
                    fmt::format("driftcheck replay {}", dir.string()),
                    stream_replay_command(spec.op, seed, index, b.name()),
                    seed,
                    index,
                    shrink_steps,
                    a.evaluation};
  write_bundle(dir, spec, a.prepared.input, rec);
  std::lock_guard lock(mu_);
  auto& f = findings_.at(signature);
  f.bundled = true, f.shrunk = shrunk;
  f.report.bundle = rel, f.report.replay = rec.replay, f.report.shrink_steps = shrink_steps;
  f.report.detail = a.evaluation.detail, f.report.worst_ratio = a.evaluation.worst_ratio;
  journal_->append({{"type", "bundle"},
                    {"id", id},
                    {"bundle", rel},
                    {"replay", rec.replay},
                    {"detail", f.report.detail},
                    {"worst_ratio", number_json(f.report.worst_ratio)},
                    {"shrunk", shrunk},
                    {"shrink_steps", shrink_steps},
                    {"bundle_shape_class", rec.shape_class}});
}

// Cases finish out of order across workers; they fold into `committed_` strictly in index order so a
// checkpoint's `completed` means "every case below it", which is what resume skips.
void Campaign::commit(std::uint64_t k, Stats s) {
  std::lock_guard lock(mu_);
  pending_.emplace(k, std::move(s));
  while (!pending_.empty() && pending_.begin()->first == watermark_) {
    committed_.merge(pending_.begin()->second);
    pending_.erase(pending_.begin());
    ++watermark_;
  }
}

void Campaign::checkpoint() {
  std::lock_guard lock(mu_);
  journal_->append({{"type", "progress"},
                    {"completed", watermark_},
                    {"elapsed_s", elapsed()},
                    {"stats", committed_.to_json()}});
}

void Campaign::monitor() {
  // A TTY gets a line refreshed in place; logs get a line every 10 s.
  const double print_every = opts_.log_is_tty ? 0.25 : 10.0;
  const auto start = Clock::now();
  double last_print = 0, last_checkpoint = 0;
  const auto base_cases = static_cast<std::int64_t>(watermark_);
  while (live_workers_ > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const double t = seconds_since(start);
    if (t - last_checkpoint >= opts_.checkpoint_seconds) checkpoint(), last_checkpoint = t;
    if (opts_.log == nullptr || t - last_print < print_every) continue;
    last_print = t;
    std::size_t n_findings;
    {
      std::lock_guard lock(mu_);
      n_findings = findings_.size();
    }
    const auto cases = live_cases_.load(), checks = live_checks_.load();
    *opts_.log << fmt::format("{}cases {} ({:.0f}/s)  checks {} ({:.0f}/s)  findings {}  [{:.0f} s]{}",
                              opts_.log_is_tty ? "\r\033[K" : "", base_cases + cases,
                              cases / std::max(t, 1e-9), checks, checks / std::max(t, 1e-9), n_findings,
                              elapsed(), opts_.log_is_tty ? "" : "\n")
               << std::flush;
  }
  if (opts_.log && opts_.log_is_tty) *opts_.log << "\n";
}

CampaignResult Campaign::run() {
  std::filesystem::create_directories(opts_.out_dir / "findings");
  open_journal();
  start_ = Clock::now();
  const int workers = sel_.ops.empty() ? 0 : jobs();
  live_workers_ = workers;
  std::vector<std::thread> threads;
  for (int i = 0; i < workers; ++i) {
    threads.emplace_back([this] {
      worker();
      --live_workers_;
    });
  }
  monitor();
  for (auto& t : threads) t.join();
  checkpoint();
  if (!interrupted()) shrink_phase();
  reports::Report report = build_report();
  journal_->append({{"type", "end"}, {"completed", report.cases}, {"exit_code", report.exit_code}});
  reports::write_reports(report, opts_.out_dir);
  print_summary(report);
  return {report, report.exit_code};
}

std::vector<reports::ReasonCount> top_reasons(const std::map<std::string, std::int64_t>& reasons) {
  std::vector<reports::ReasonCount> out;
  for (const auto& [r, n] : reasons) out.push_back({r, n});
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.count > b.count; });
  if (out.size() > 5) out.resize(5);
  return out;
}

// Why a backend that was asked for ran nothing, in one line.
std::string zero_case_reason(const Backend& b, const BackendStats& s) {
  std::string why;
  if (!b.available(&why)) return fmt::format("unavailable: {}", why);
  if (s.unsupported > 0) {
    const auto top = top_reasons(s.reasons);
    return fmt::format("all {} of its cases unsupported, mostly: {}", s.unsupported,
                       top.empty() ? "?" : top.front().reason);
  }
  return "no case of its op was drawn within the budget";
}

reports::Report Campaign::build_report() const {
  std::lock_guard lock(mu_);
  reports::Report r;
  r.tool_version = std::string(kToolVersion), r.command = opts_.command_line, r.seed = opts_.seed;
  r.cases = static_cast<std::int64_t>(watermark_), r.checks = committed_.checks, r.seconds = elapsed();
  r.unavailable = sel_.unavailable, r.errors = sel_.errors;
  for (OpKind op : sel_.ops) {
    const auto it = committed_.ops.find(std::string(op_name(op)));
    const OpStats s = it == committed_.ops.end() ? OpStats{} : it->second;
    r.ops.push_back({std::string(op_name(op)), s.cases, s.reference_seconds});
    if (s.cases == 0) r.errors.push_back(fmt::format("op {} ran zero cases", op_name(op)));
  }
  for (const Backend* b : sel_.backends) {
    const auto it = committed_.backends.find(std::string(b->name()));
    const BackendStats s = it == committed_.backends.end() ? BackendStats{} : it->second;
    reports::BackendReport br{std::string(b->name()),
                              std::string(op_name(b->op())),
                              std::string(backend_kind_name(b->kind())),
                              s.run,
                              s.unsupported,
                              top_reasons(s.reasons),
                              s.passed,
                              s.failures,
                              0,
                              s.worst_ratio,
                              s.worst_case,
                              s.seconds,
                              std::nullopt,
                              ""};
    for (const auto& [sig, f] : findings_) br.distinct_findings += f.report.backend == br.name;
    if (auto ff = first_finding_.find(br.name); ff != first_finding_.end()) br.first_finding_s = ff->second;
    if (s.run == 0) {
      br.error = fmt::format("backend {} ran zero cases: {}", br.name, zero_case_reason(*b, s));
      r.errors.push_back(br.error);
    }
    r.backends.push_back(std::move(br));
  }
  for (const auto& [sig, f] : findings_) r.findings.push_back(f.report);
  std::sort(r.findings.begin(), r.findings.end(),
            [](const auto& a, const auto& b) { return a.found_after_s < b.found_after_s; });
  for (const auto& [key, p] : committed_.pairs) {
    const Backend* a = opts_.backends->find(key.first);
    r.divergence.push_back(
        {a ? std::string(op_name(a->op())) : "?", key.first, key.second, p.max_ulps, p.shared});
  }
  r.errors.insert(r.errors.end(), internal_errors_.begin(), internal_errors_.end());
  r.exit_code = !internal_errors_.empty() ? 3 : (!r.errors.empty() || !r.findings.empty()) ? 1 : 0;
  return r;
}

void Campaign::print_summary(const reports::Report& r) const {
  if (opts_.log == nullptr) return;
  std::ostream& o = *opts_.log;
  o << fmt::format("\n{:<44} {:>8} {:>8} {:>8} {:>8} {:>10}\n", "backend", "run", "passed", "unsupp",
                   "failed", "worst");
  for (const auto& b : r.backends) {
    std::int64_t failed = 0;
    for (const auto& [v, n] : b.failures_by_verdict) failed += n;
    o << fmt::format("{:<44} {:>8} {:>8} {:>8} {:>8} {:>10.3g}\n", b.name, b.cases_run, b.passed,
                     b.unsupported, failed, b.worst_ratio);
  }
  o << fmt::format("\n{} cases, {} checks in {:.1f} s ({:.0f} checks/s); {} distinct findings\n", r.cases,
                   r.checks, r.seconds, r.seconds > 0 ? static_cast<double>(r.checks) / r.seconds : 0.0,
                   r.findings.size());
  for (const auto& f : r.findings)
    o << fmt::format("  {} {} {} -> {}\n", f.backend, f.verdict, f.shape_class,
                     f.bundle.empty() ? f.replay : (opts_.out_dir / f.bundle).string());
  if (opts_.include_mutants) {
    o << "time to first finding per mutant:\n";
    for (const auto& b : r.backends) {
      if (b.kind != backend_kind_name(BackendKind::kMutant)) continue;
      o << fmt::format("  {:<44} {}\n", b.name,
                       b.first_finding_s ? fmt::format("{:.2f} s", *b.first_finding_s) : "NEVER FOUND");
    }
  }
  for (const auto& e : r.errors) o << "error: " << e << "\n";
  o << fmt::format("report: {}\n", (opts_.out_dir / "report.md").string());
}

std::vector<std::string> split_list(std::string_view list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const auto end = std::min(list.find(',', start), list.size());
    if (end > start) out.emplace_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Resume takes the stream-defining arguments from the journal header; budgets given now win over the old
// ones.
void apply_journal_header(CampaignOptions& opts) {
  const auto path = opts.out_dir / "journal.jsonl";
  if (!std::filesystem::exists(path)) return;
  const json header = read_journal(path).records.front();
  try {
    const json& a = header.at("args");
    opts.ops.clear();
    for (const auto& name : a.at("ops")) {
      OpKind op;
      if (!parse_op(name.get<std::string>(), &op))
        throw UsageError(fmt::format("unknown op {}", name.dump()));
      opts.ops.push_back(op);
    }
    opts.backend_globs = a.at("backend_globs"), opts.include_mutants = a.at("include_mutants");
    opts.seed = a.at("seed"), opts.gen.large_shapes = a.at("large_shapes");
    if (!opts.seconds && !opts.cases) {
      if (!a.at("seconds").is_null()) opts.seconds = a.at("seconds").get<double>();
      if (!a.at("cases").is_null()) opts.cases = a.at("cases").get<std::uint64_t>();
    }
  } catch (const json::exception& e) {
    throw JournalError(fmt::format("{}: bad header: {}", path.string(), e.what()));
  }
}

}  // namespace

std::vector<OpKind> parse_op_list(std::string_view list) {
  std::vector<OpKind> ops;
  for (const std::string& name : split_list(list)) {
    OpKind op;
    if (!parse_op(name, &op))
      throw UsageError(
          fmt::format("unknown op '{}' (ops: rmsnorm, concat, dual_rmsnorm_cat, attention)", name));
    ops.push_back(op);
  }
  return ops;
}

Selection select_backends(const Registry& reg, const std::vector<OpKind>& ops, const std::string& globs,
                          bool include_mutants) {
  Selection sel;
  std::vector<const Backend*> matched;
  std::set<const Backend*> named_exactly;
  if (globs.empty()) {
    for (const auto& b : reg.all())
      if (b->kind() != BackendKind::kMutant || include_mutants) matched.push_back(b.get());
  }
  for (const std::string& g : split_list(globs)) {
    const auto m = reg.match(g, include_mutants || g.starts_with("mutant"));
    if (m.empty()) throw UsageError(fmt::format("unknown backend '{}' (driftcheck list shows them)", g));
    for (const Backend* b : m) {
      if (std::find(matched.begin(), matched.end(), b) == matched.end()) matched.push_back(b);
      if (!has_wildcard(g)) named_exactly.insert(b);
    }
  }
  for (const Backend* b : matched) {
    if (!ops.empty() && std::find(ops.begin(), ops.end(), b->op()) == ops.end()) continue;
    std::string why;
    // A glob skips backends that cannot run here; a backend asked for by name stays, and fails as zero-case.
    if (!b->available(&why) && !named_exactly.count(b)) {
      sel.unavailable.push_back(fmt::format("{}: {}", b->name(), why));
      continue;
    }
    sel.backends.push_back(b);
  }
  for (OpKind op : kAllOps) {
    const bool asked = ops.empty() ? globs.empty() : std::find(ops.begin(), ops.end(), op) != ops.end();
    const bool has_backend = std::any_of(sel.backends.begin(), sel.backends.end(),
                                         [op](const Backend* b) { return b->op() == op; });
    if (has_backend)
      sel.ops.push_back(op);
    else if (asked)
      sel.errors.push_back(fmt::format("op {}: no selected backend can run it", op_name(op)));
  }
  return sel;
}

CampaignResult run_campaign(const CampaignOptions& options) {
  CampaignOptions opts = options;
  if (opts.resume) apply_journal_header(opts);
  if (!opts.seconds && !opts.cases) opts.seconds = kDefaultSeconds;
  if (opts.seconds && !(*opts.seconds > 0)) throw UsageError("--seconds must be positive");
  if (opts.jobs < 0) throw UsageError("--jobs must be >= 0");
  if (opts.backends == nullptr) opts.backends = &registry();
  Selection sel = select_backends(*opts.backends, opts.ops, opts.backend_globs, opts.include_mutants);
  Campaign campaign(std::move(opts), std::move(sel));
  return campaign.run();
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
  r.evaluation = evaluate(backend, prepared);
  if (r.evaluation.verdict == Verdict::kUnsupported) r.support = Support::no(r.evaluation.detail);
  return r;
}

std::string stream_replay_command(OpKind op, std::uint64_t seed, std::uint64_t index,
                                  std::string_view backend) {
  return fmt::format("driftcheck replay --seed {} --case {} --op {} --backend {}", seed, index, op_name(op),
                     backend);
}

}  // namespace driftcheck::fuzz
