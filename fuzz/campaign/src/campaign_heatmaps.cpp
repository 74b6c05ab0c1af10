// Where the error sits: each backend's worst case of the campaign, replayed from the stream, as a grid of
// error / tolerance over its worst output (report.hpp Heatmap; the HTML report draws it).
#include "campaign_heatmaps.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "campaign_shrink.hpp"
#include "driftcheck/fuzz/known_findings.hpp"
#include "driftcheck/reports/numbers.hpp"
#include "thread_group.hpp"

namespace driftcheck::fuzz {
namespace {

constexpr std::int64_t kMaxRows = 24;
constexpr std::int64_t kMaxCols = 64;

// |out - ref| / tolerance of one element; NaN/Inf on one side only (and any change of a bit-exact output,
// whose tolerance is 0) is infinite.
double element_ratio(double out, double ref, double tol) {
  if (out == ref || (std::isnan(out) && std::isnan(ref))) return 0;
  if (!std::isfinite(out) || !std::isfinite(ref)) return INFINITY;
  return tol > 0 ? std::fabs(out - ref) / tol : INFINITY;
}

// Three significant digits are all a colour scale shows, and they keep report.json small.
double rounded(double v) {
  return std::isfinite(v) && v > 0 ? std::stod(fmt::format("{:.3g}", v)) : v;
}

// The card of a worst case that produced no output: what happened and how to replay it, no cells.
reports::Heatmap no_output(const Backend& b, const CampaignOptions& opts, std::uint64_t index,
                           std::string verdict, std::string detail) {
  reports::Heatmap h;
  h.backend = std::string(b.name()), h.op = std::string(op_name(b.op()));
  h.seed = opts.seed, h.case_index = index;
  h.shape_class = shape_class(draw_locked(b.op(), opts.seed, index, opts.gen).spec);
  h.replay = stream_replay_command(b.op(), opts.seed, index, b, stream_args(opts.gen));
  h.verdict = std::move(verdict), h.detail = std::move(detail);
  return h;
}

// nullopt when the backend does not support its worst case any more, or (`*left_out` set) when the case does
// not fit before the limit's deadline.
std::optional<reports::Heatmap> heatmap(const Backend& named, const CampaignOptions& opts,
                                        std::uint64_t index, const PhaseLimit& limit, bool* left_out) {
  // A mutant is replayed as the campaign judged it: with its twin's known upstream defects repaired.
  const auto repaired =
      named.kind() == BackendKind::kMutant
          ? repaired_backend(opts.known_findings ? *opts.known_findings : builtin_known_findings(), named)
          : nullptr;
  const Backend& b = repaired ? *repaired : named;
  const DrawnCase drawn = draw_locked(b.op(), opts.seed, index, opts.gen);
  if (!limit.fits(drawn.spec)) {
    *left_out = true;
    return std::nullopt;
  }
  Case c = materialize(drawn.spec);
  c.seed = opts.seed, c.index = index;
  if (!b.supports(c).ok) return std::nullopt;
  const PreparedCase p = prepare(std::move(c));
  // The heatmap needs the outputs against the reference only: no metamorphic re-runs, no statistical tier.
  const Evaluation e = evaluate(b, p, EvalOptions{false, false});
  if (e.outputs.empty()) return no_output(named, opts, index, std::string(verdict_name(e.verdict)), e.detail);
  // The output that holds the worst element.
  std::string name = e.outputs.begin()->first;
  double worst = -1;
  for (const auto& m : e.metrics)
    if (e.outputs.count(m.output) && (m.worst_ratio > worst || std::isnan(m.worst_ratio)))
      worst = std::isnan(m.worst_ratio) ? INFINITY : m.worst_ratio, name = m.output;
  const Tensor& out_t = e.outputs.at(name);
  const auto out = out_t.to_f64(), ref = p.reference.at(name).to_f64();
  const auto tol = tolerances(p, b.numerics_for(p.input)).at(name);
  const Shape& shape = out_t.shape();
  reports::Heatmap h;
  h.verdict = is_failure(e.verdict) ? std::string(verdict_name(e.verdict)) : std::string();
  h.backend = std::string(named.name()), h.op = std::string(op_name(b.op())), h.output = name;
  h.seed = opts.seed, h.case_index = index, h.shape_class = shape_class(drawn.spec);
  h.replay = stream_replay_command(b.op(), opts.seed, index, named, stream_args(opts.gen));
  h.full_rows = shape.empty() ? 1 : shape[0];
  h.full_cols = h.full_rows > 0 ? static_cast<std::int64_t>(out.size()) / h.full_rows : 0;
  h.row_label = "token";
  h.col_label = shape.size() == 3 ? "head x dim" : (name == "lse" ? "head" : "channel");
  h.col_group = shape.size() == 3 ? shape[2] : 0;
  const std::int64_t row_block = (h.full_rows + kMaxRows - 1) / kMaxRows;
  const std::int64_t col_block = (h.full_cols + kMaxCols - 1) / kMaxCols;
  h.rows = (h.full_rows + row_block - 1) / row_block, h.cols = (h.full_cols + col_block - 1) / col_block;
  h.cells.assign(static_cast<std::size_t>(h.rows * h.cols), 0.0);
  for (std::int64_t r = 0; r < h.full_rows; ++r) {
    for (std::int64_t col = 0; col < h.full_cols; ++col) {
      const auto i = static_cast<std::size_t>(r * h.full_cols + col);
      double& cell = h.cells[static_cast<std::size_t>((r / row_block) * h.cols + col / col_block)];
      cell = std::max(cell, element_ratio(out[i], ref[i], tol[i]));
    }
  }
  for (auto& v : h.cells) v = rounded(v);
  return h;
}

}  // namespace

Heatmaps worst_case_heatmaps(const CampaignOptions& opts, const Selection& sel, const Stats& stats, int jobs,
                             const PhaseLimit& limit) {
  // One slot per backend, in the selection's order, whichever thread fills it.
  struct Slot {
    const Backend* backend;
    std::uint64_t index;
    std::optional<reports::Heatmap> heatmap;
    bool left_out = false;
  };
  std::vector<Slot> slots;
  std::vector<std::size_t> to_run;
  for (const Backend* b : sel.backends) {
    std::string why;
    const auto it = stats.backends.find(std::string(b->name()));
    if (!b->available(&why) || it == stats.backends.end() || it->second.run == 0) continue;
    // A worst case without output (an error, a crash, a timeout) is not run again: a hang would cost another
    // timeout, and there is nothing to draw.
    if (reports::verdict_rank(it->second.worst_verdict) == 5) {
      slots.push_back({b, it->second.worst_case,
                       no_output(*b, opts, it->second.worst_case, it->second.worst_verdict, {}), false});
      continue;
    }
    // A quarantined backend is not run again (docs/CAMPAIGN.md "Worker faults").
    if (!it->second.quarantined.empty()) continue;
    to_run.push_back(slots.size());
    slots.push_back({b, it->second.worst_case, std::nullopt, false});
  }
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    // A worker that hangs on the worst case costs --grace-seconds at most, not its whole timeout (an ordinary
    // case takes milliseconds), and no request outlives the phase's deadline.
    const auto deadline = std::min(after(opts.grace_seconds), limit.deadline);
    const CallPolicyScope bounded(CallPolicy{.wait_for_restart = true, .deadline = deadline});
    for (std::size_t i = next.fetch_add(1); i < to_run.size(); i = next.fetch_add(1)) {
      Slot& s = slots[to_run[i]];
      try {
        s.heatmap = heatmap(*s.backend, opts, s.index, limit, &s.left_out);
      } catch (const std::exception&) {
        // The worst case was judged once already; a heatmap that cannot be redrawn is left out, not an error.
      }
    }
  };
  {
    ThreadGroup threads([] {});
    std::string why;
    const auto wanted = std::min<std::size_t>(static_cast<std::size_t>(std::max(jobs, 1)), to_run.size());
    for (std::size_t i = 1; i < wanted; ++i)
      if (!threads.start(work, &why)) break;
    work();  // this thread too (alone when no thread can be created)
    threads.join();
  }
  Heatmaps out;
  for (auto& s : slots) {
    if (s.heatmap) out.heatmaps.push_back(std::move(*s.heatmap));
    out.left_out += s.left_out ? 1 : 0;
  }
  return out;
}

}  // namespace driftcheck::fuzz
