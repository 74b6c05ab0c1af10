// The HTML divergence report: tables and Vega plots (html_plots.cpp) in one self-contained page.
#include "driftcheck/reports/html.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "driftcheck/reports/numbers.hpp"
#include "html_plots.hpp"
#include "markup.hpp"
#include "report_views.hpp"

namespace driftcheck::reports {
namespace {

// Text from runs (commands, details, backend names) in the page: escaped as XML is, which HTML reads the
// same.
std::string esc(std::string_view s) {
  return xml_escape(s);
}

// Built by appending: GCC 12 warns (-Wrestrict, a false positive) on std::string::replace in a loop at -O3.
std::string replace_all(const std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  std::size_t at = 0;
  for (std::size_t hit = s.find(from); hit != std::string::npos;
       at = hit + from.size(), hit = s.find(from, at))
    out.append(s, at, hit - at).append(to);
  return out.append(s, at);
}

constexpr const char* kStyle = R"(<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#222;margin:0;background:#fafafa}
main{max-width:1280px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:20px 0 6px}p.meta{color:#555;margin:2px 0}
table{border-collapse:collapse;font-size:12.5px;background:#fff}th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.n{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#3a7d44;font-weight:600}.fail{color:#c0392b;font-weight:600}.nf{color:#111;font-weight:700}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:11.5px;color:#fff}
.b-fail{background:#c0392b}.b-pass{background:#3a7d44}.b-idle{background:#888}.b-known{background:#7a6a2f}
table.causes td{font-size:12.5px}code.small{font-size:11px}
nav{font-size:13px;margin:6px 0 0}nav a{margin-right:12px}
code{background:#f1f1f1;padding:1px 4px;border-radius:3px;font-size:12px;word-break:break-all}
.grid{display:flex;flex-wrap:wrap;gap:10px 18px}.plot{background:#fff;border:1px solid #e4e4e4;padding:4px}
.note{background:#fff8e1;border:1px solid #f0d58a;padding:6px 10px;margin:8px 0}
.err{background:#fdecea;border:1px solid #f5b7b1;padding:6px 10px;margin:8px 0}
dl.legend{font-size:12.5px;color:#444;margin:6px 0 0}dl.legend dt{font-weight:600;display:inline}dl.legend dd{display:inline;margin:0 10px 0 4px}
details{margin:6px 0}summary{cursor:pointer}
</style>
)";

// Each plot is a div and its Vega spec as JSON in a script element; the page's last script renders them.
class Plots {
 public:
  explicit Plots(bool enabled) : enabled_(enabled) {}
  std::string add(const nlohmann::json& spec) {
    if (!enabled_) return {};
    const int id = n_++;
    // "</" would end the script element early.
    const std::string json = replace_all(spec.dump(), "</", "<\\/");
    return fmt::format(
        "<div class=\"plot\" data-spec=\"spec{0}\"></div><script type=\"application/json\" "
        "id=\"spec{0}\">{1}</script>\n",
        id, json);
  }
  bool enabled() const { return enabled_; }

 private:
  bool enabled_;
  int n_ = 0;
};

// Vega renders each spec to SVG; a failure shows in its place and on the console (the report test reads it).
constexpr const char* kRenderScript = R"(<script>
(function(){var divs=document.querySelectorAll('div.plot');var pending=divs.length;
function done(){if(--pending===0)document.body.setAttribute('data-plots-rendered',String(divs.length));}
if(pending===0)document.body.setAttribute('data-plots-rendered','0');
divs.forEach(function(div){try{var spec=JSON.parse(document.getElementById(div.getAttribute('data-spec')).textContent);
new vega.View(vega.parse(spec),{renderer:'svg',container:div,hover:true}).runAsync().then(done).catch(function(e){
div.textContent='plot failed: '+e;console.error('driftcheck plot failed: '+e);done();});}catch(e){
div.textContent='plot failed: '+e;console.error('driftcheck plot failed: '+e);done();}});})();
</script>
)";

// A backend's worst cell: its style and text (numbers.hpp worst_cell), "-" when it ran nothing.
std::string worst_td(const BackendReport& b) {
  if (b.cases_run == 0) return "<td class=n>-</td>";
  return fmt::format("<td class=\"n {}\">{}</td>", worst_style(b.worst_verdict, b.worst_ratio),
                     esc(worst_cell(b.worst_verdict, b.worst_ratio)));
}

// The 99th percentile of a backend's case ratios: a ratio, "NaN/Inf" or "no output" where it falls among
// such cases, "-" when it ran none.
std::string p99_td(const BackendReport& b) {
  DriftStats all;
  for (const auto& [f, d] : b.drift) all.merge(d);
  if (all.cases == 0) return "<td class=n>-</td>";
  const double p99 = all.p99_ratio();
  return fmt::format("<td class=\"n {}\">{}</td>",
                     !std::isfinite(p99) ? "nf"
                     : p99 > 1           ? "fail"
                                         : "",
                     esc(ratio_text(p99)));
}

std::map<std::string, DriftStats> merged_drift(const BackendReport& b) {
  return b.drift;
}

double bias_of(const BackendReport& b) {
  DriftStats all;
  for (const auto& [f, d] : b.drift) all.merge(d);
  return all.signed_ulps_cases > 0 ? all.mean_signed_ulps() : std::numeric_limits<double>::quiet_NaN();
}

// The most frequent reason, shortened; the full list in its tooltip.
std::string unsupported_cell(const BackendReport& b) {
  std::string all;
  for (const auto& r : b.top_unsupported)
    all += fmt::format("{}{} ({}x)", all.empty() ? "" : "\n", r.reason, r.count);
  const std::string& top = b.top_unsupported.front().reason;
  const std::string shown = top.size() > 48 ? top.substr(0, 45) + "..." : top;
  return fmt::format("<span title=\"{}\">{} ({}x){}</span>", esc(all), esc(shown),
                     b.top_unsupported.front().count,
                     b.top_unsupported.size() > 1 ? fmt::format(" +{}", b.top_unsupported.size() - 1) : "");
}

std::string verdicts(const BackendReport& b) {
  std::string out;
  for (const auto& [v, n] : b.failures_by_verdict)
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", v, n);
  return out.empty() ? "-" : out;
}

// Worst first (worse_group): the gravest verdict, then the larger ratio, then more failing cases.
std::vector<const FindingGroup*> worst_first(const Report& r) {
  std::vector<const FindingGroup*> out;
  for (const auto& g : r.groups) out.push_back(&g);
  std::stable_sort(out.begin(), out.end(),
                   [](const FindingGroup* a, const FindingGroup* b) { return worse_group(*a, *b); });
  return out;
}

void backend_table(const Report& r, std::string& h) {
  h +=
      "<table><tr><th>backend</th><th>kind</th><th>op</th><th title=\"cases supported and judged\">cases</th>"
      "<th>passed</th><th title=\"declined, never counted as passed\">unsupported</th><th>failures</th>"
      "<th title=\"largest error of any element in units of its tolerance\">worst error / tol</th>"
      "<th title=\"99th percentile over cases of each case's worst error / tolerance\">p99</th>"
      "<th title=\"mean signed error in ulps of the output format: a bias\">bias (ulps)</th>"
      "<th>first finding</th><th>top unsupported reason</th></tr>\n";
  for (const auto& b : r.backends) {
    const double bias = bias_of(b);
    h += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td "
        "class=n>{}</td><td>{}</td>{}{}<td class=n>{}</td><td "
        "class=n>{}</td><td>{}</td></tr>\n",
        esc(b.name), esc(b.kind), esc(b.op), b.cases_run, b.passed, b.unsupported, esc(verdicts(b)),
        worst_td(b), p99_td(b), std::isnan(bias) ? "-" : esc(bias_text(bias)),
        b.first_finding_s ? fmt::format("{:.2f} s", *b.first_finding_s) : "-",
        b.top_unsupported.empty() ? (b.error.empty() ? "-" : esc(b.error)) : unsupported_cell(b));
  }
  h += "</table>\n<dl class=legend><dt>cases</dt><dd>cases the backend supported and was judged on</dd>"
       "<dt>unsupported</dt><dd>cases it declined, with its reason (never counted as passed)</dd>"
       "<dt>failures</dt><dd>failing cases by verdict (docs/ORACLE.md)</dd>"
       "<dt>worst error / tol</dt><dd>its worst case, the gravest verdict first: a ratio is the largest "
       "|output - fp64 reference| of any element, in units of that element's derived tolerance (&le; 1 "
       "passes; above 10<sup>4</sup> the digits only measure the garbage, so they are not printed); "
       "<b>NaN/Inf</b>: a NaN or infinite output where the reference is finite; <b>no output</b>: the "
       "backend raised an error, its worker crashed or timed out; other failures say what happened</dd>"
       "<dt>p99</dt><dd>99th percentile over cases of each case's worst error / tolerance</dd>"
       "<dt>bias</dt><dd>mean signed error in ulps of the output format (truncation shows here while the "
       "worst stays "
       "small)</dd></dl>\n";
  std::string upstream;
  for (const auto& b : r.backends)
    if (!b.upstream.empty()) upstream += fmt::format("<li><b>{}</b>: {}</li>", esc(b.name), esc(b.upstream));
  if (!upstream.empty())
    h += "<p>Upstream code each backend models (docs/BACKENDS.md):</p><ul class=upstream>" + upstream +
         "</ul>\n";
}

// Only when a backend's workers faulted: what that cost (docs/CAMPAIGN.md "Worker faults").
void worker_faults(const Report& r, std::string& h) {
  std::string rows;
  for (const auto& b : r.backends)
    if (has_worker_faults(b))
      rows += fmt::format(
          "<tr><td>{}</td><td class=n>{}</td><td class=n>{:.1f}</td><td class=n>{}</td><td>{}</td></tr>\n",
          esc(b.name), b.worker_restarts, b.restart_seconds, b.skipped_restarting,
          b.quarantined.empty() ? "-" : esc(quarantine_text(b)));
  if (rows.empty()) return;
  h +=
      "<p>Worker faults: workers started in place of one that crashed, timed out or broke the protocol (in "
      "the "
      "background: the other backends do not wait), the cases a backend skipped while none of its workers "
      "was "
      "ready, and its quarantine if it faulted too often (its findings are kept).</p>\n<table><tr><th>backend"
      "</th><th>worker restarts</th><th>seconds starting them</th><th>cases skipped while restarting</th>"
      "<th>quarantined</th></tr>\n" +
      rows + "</table>\n";
}

void histograms(const Report& r, Plots& plots, std::string& h) {
  std::string grid;
  for (const auto& b : r.backends) {
    if (b.drift.empty()) continue;
    grid += plots.add(histogram_spec(b.name, ratio_bins(merged_drift(b))));
  }
  if (grid.empty()) {
    h += "<p class=note>This run recorded no per-case error distribution (report.json version 1, or no case "
         "ran).</p>\n";
    return;
  }
  h += "<p>Each backend's per-case worst error / tolerance (log scale; the dashed line is the tolerance, "
       "green bars "
       "pass, red fail). A correct kernel's mass sits left of 1; a rounding bug shifts it to a few "
       "tolerances; a "
       "structural bug piles up far right or in NaN/Inf.</p>\n<div class=grid>" +
       grid + "</div>\n";
}

void shape_plots(const Report& r, Plots& plots, std::string& h) {
  // op -> param -> points
  std::map<std::string, std::map<std::string, std::vector<ShapePoint>>> by;
  for (const auto& b : r.backends)
    for (const auto& s : b.by_shape) by[b.op][s.param].push_back({b.name, s, b.kind == "mutant"});
  if (by.empty()) {
    h += "<p class=note>This run recorded no error-by-shape statistics.</p>\n";
    return;
  }
  h += "<p>Worst error / tolerance against the shape parameters that drive it (dashed lines: mutants). A "
       "backend "
       "whose error grows with a parameter (sequence length, hidden size) has an accumulation problem; one "
       "that "
       "jumps at a value (a block size, a page boundary) has a path or indexing problem.</p>\n";
  for (const auto& [op, params] : by) {
    h += fmt::format("<h4>{}</h4><div class=grid>", esc(op));
    for (const auto& [param, points] : params) h += plots.add(shape_spec(op + ": " + param, points));
    h += "</div>\n";
  }
}

constexpr std::size_t kOpenHeatmaps = 6;

void heatmaps(const Report& r, Plots& plots, std::string& h) {
  if (r.heatmaps.empty()) {
    h += "<p class=note>No heatmap recorded (no case of a backend ran, or report.json version 1).</p>\n";
    return;
  }
  h += "<p>Where the error sits in each backend's worst case: error / tolerance over the output (blue below "
       "the "
       "tolerance, red beyond, black NaN/Inf or a changed bit of a bit-exact op, grey exact). A stripe is a "
       "row or "
       "channel bug; a block at the end of a sequence is a page or mask bug; faint noise everywhere is "
       "rounding. Worst backends first.</p>\n<div class=grid>";
  // The worst heatmaps open, the rest one click away: a mutant campaign has one per backend.
  std::vector<const Heatmap*> order;
  for (const auto& m : r.heatmaps) order.push_back(&m);
  // A case without output first (NaN above every ratio), then the largest cell.
  const auto worst = [](const Heatmap* m) {
    if (m->cells.empty()) return std::numeric_limits<double>::quiet_NaN();
    double w = 0;
    for (double v : m->cells) w = std::isnan(v) ? INFINITY : std::max(w, v);
    return w;
  };
  std::stable_sort(order.begin(), order.end(), [&](const Heatmap* a, const Heatmap* b) {
    return worse_case("", worst(a), 0, "", worst(b), 0);
  });
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (i == kOpenHeatmaps)
      h += fmt::format("</div><details><summary>{} more heatmaps</summary><div class=grid>",
                       order.size() - kOpenHeatmaps);
    const Heatmap& m = *order[i];
    // Nothing to draw where the worst case produced no output: say what happened instead of a blank grid.
    const std::string body =
        m.cells.empty()
            ? fmt::format("<div class=\"err\"><b>{}</b>: worst case {} ({}) produced no output: {}{}</div>",
                          esc(m.backend), m.case_index, esc(m.shape_class), esc(worst_cell(m.verdict, NAN)),
                          m.detail.empty() ? "" : " &mdash; " + esc(m.detail))
            : plots.add(heatmap_spec(m));
    h += "<div>" + body + fmt::format("<code>{}</code></div>", esc(m.replay));
  }
  h += order.size() > kOpenHeatmaps ? "</div></details>\n" : "</div>\n";
}

void divergence(const Report& r, Plots& plots, std::string& h) {
  std::set<std::string> ops;
  for (const auto& d : r.divergence) ops.insert(d.op);
  if (ops.empty()) {
    h += "<p>No pair of backends ran a common case.</p>\n";
    return;
  }
  h += "<p>Each cell: the largest |a - b| / (tol<sub>a</sub> + tol<sub>b</sub>) over the cases both backends "
       "ran, "
       "each with its own tolerance against the fp64 reference. Two correct backends are within "
       "tol<sub>a</sub> + "
       "tol<sub>b</sub> of each other (triangle inequality through the reference), so &le; 1 reads \"as "
       "close as two "
       "correct kernels may be\" and &gt; 1 says at least one of the pair is wrong there.</p>\n<div "
       "class=grid>";
  for (const auto& op : ops) {
    if (plots.enabled()) {
      h += plots.add(divergence_spec(r, op));
      continue;
    }
    const auto names = divergence_names(r, op);
    h += fmt::format("<table><caption>{}</caption><tr><th></th>", esc(op));
    for (const auto& n : names) h += "<th>" + esc(n) + "</th>";
    h += "</tr>";
    for (const auto& a : names) {
      h += "<tr><th>" + esc(a) + "</th>";
      for (const auto& b : names) {
        const DivergenceCell* d = a == b ? nullptr : find_divergence(r, op, a, b);
        h += "<td class=n>" +
             (d ? esc(divergence_text(d->max_ratio, d->nonfinite_cases)) : std::string("-")) + "</td>";
      }
      h += "</tr>";
    }
    h += "</table>";
  }
  h += "</div>\n";
}

void group_details(const Report& r, const std::string& dir, std::string& h) {
  if (r.groups.empty() && r.findings.empty()) {
    h += "<p class=pass>No findings.</p>\n";
    return;
  }
  if (r.groups.empty()) {
    h += "<p class=note>This run did not group its findings; its failing "
         "signatures:</p><table><tr><th>backend</th>"
         "<th>verdict</th><th>shape class</th><th>worst</th><th>replay</th></tr>";
    for (const auto& f : r.findings)
      h +=
          fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td class=n>{}</td><td><code>{}</code></td></tr>",
                      esc(f.backend), esc(f.verdict), esc(f.shape_class),
                      esc(worst_cell(f.verdict, f.worst_ratio)), esc(f.replay));
    h += "</table>\n";
    return;
  }
  for (const FindingGroup* g : worst_first(r)) {
    h += fmt::format(
        "<details{}><summary><b>{}</b> {} &mdash; {} &mdash; {} failing cases, {} shape classes"
        "</summary>\n<ul>",
        g == worst_first(r).front() ? " open" : "", esc(g->backend), esc(g->verdict), esc(group_cause(*g)),
        g->cases, g->shape_classes.size());
    h += fmt::format("<li>worst: {}</li>", esc(group_worst(*g)));
    h += fmt::format("<li>cause: {}{}</li>", esc(group_cause(*g)),
                     g->confirmed ? " (each feature confirmed necessary by ablation)" : "");
    if (!g->not_needed.empty()) {
      std::string s;
      for (const auto& n : g->not_needed) s += (s.empty() ? "" : ", ") + n;
      h += "<li>present but not needed: " + esc(s) + "</li>";
    }
    std::string classes;
    for (std::size_t i = 0; i < g->shape_classes.size() && i < 6; ++i)
      classes += (classes.empty() ? "" : ", ") + g->shape_classes[i];
    if (g->shape_classes.size() > 6) classes += fmt::format(" and {} more", g->shape_classes.size() - 6);
    h += fmt::format("<li>{} shape classes: {}</li>", g->shape_classes.size(), esc(classes));
    h += fmt::format("<li>replay the representative: <code>{}</code></li>", esc(g->replay));
    if (!g->shape.empty())
      h += fmt::format("<li>repro: {} <span class=meta>({} shrinks accepted of {} tried{})</span></li>",
                       esc(g->shape), g->shrink_steps, g->shrink_tries, g->shrink_minimal ? ", minimal" : "");
    if (!g->representative.empty())
      h += fmt::format(
          "<li>keep it in a regression corpus (created if new; a gate's corpus re-runs it on every change): "
          "<code>driftcheck corpus add {}/{} --corpus driftcheck-corpus</code></li>",
          esc(dir), esc(g->representative));
    h += "</ul>";
    if (g->members.size() > 1) {
      h += fmt::format(
          "<details><summary>{} failing signatures</summary><table><tr><th>shape class</th><th>cases</th>"
          "<th>bundle</th><th>replay</th></tr>",
          g->members.size());
      for (const auto& m : g->members)
        h += fmt::format("<tr><td>{}{}</td><td class=n>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                         esc(m.shape_class), m.verdict == g->verdict ? "" : " (" + esc(m.verdict) + ")",
                         m.cases, m.bundle.empty() ? "stream" : esc(m.bundle), esc(m.replay));
      h += "</table></details>";
    }
    h += "</details>\n";
  }
}

// Upstream defects a faithful twin reproduces (docs/FINDINGS.md): listed apart, never a failure of the
// verdict.
void known_findings(const Report& r, std::string& h) {
  h +=
      "<p class=note>Upstream defects that faithful twins reproduce (docs/FINDINGS.md). They are not "
      "findings, not in any group, and never change this run's verdict or exit code; a case counts here only "
      "when the backend with the defect repaired passes it.</p>\n<table class=known><tr><th>known finding"
      "</th><th>what</th><th>backends</th><th>failing cases</th><th>of cases run</th><th>upstream</th>"
      "<th>replay</th></tr>\n";
  for (const auto& k : r.known_findings) {
    auto c = known_cells(k);
    for (auto& text : c) text = esc(text);
    h += fmt::format(
        "<tr><td><span class=\"badge b-known\">known</span> {}</td><td>{}</td><td>{}</td><td class=n>{}</td>"
        "<td class=n>{}</td><td>{}</td><td><code>{}</code></td></tr>\n",
        c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
  }
  h += "</table>\n";
}

void accept_section(const AcceptReport& a, Plots& plots, std::string& h) {
  h += fmt::format(
      "<p>Synthetic EAGLE3-style drafter layer 0 (seed {}): H {}, {}/{} heads of {}, MLP {}, vocabulary {}, "
      "{} "
      "positions in {} sequences, {} activations, {} KV, block size {}, attention as {}. The fp64 drafter's "
      "mean "
      "top-1 probability is {:.2f}. Each row substitutes one backend wherever the chain calls its op; "
      "acceptance is "
      "relative to the fp64 drafter (docs/ACCEPT.md derives the estimate).</p>\n",
      a.seed, a.hidden, a.num_q_heads, a.num_kv_heads, a.head_dim, a.intermediate, a.vocab, a.positions,
      a.sequences, esc(a.act_dtype), esc(a.kv_dtype), a.block_size, esc(a.attention_form),
      a.reference_top1_prob_mean);
  h += plots.add(accept_spec(a));
  h += fmt::format(
      "<table><tr><th>backend</th><th>top-1</th><th>top-{}</th><th>KL (nats)</th><th>greedy k=2</th>"
      "<th>greedy k=3</th><th>sampling k=2</th><th>sampling k=3</th><th>length k=3</th>"
      "<th>substituted at</th><th></th></tr>\n",
      a.top_k);
  const auto pct = [](double v) { return fmt::format("{:.1f}%", 100 * v); };
  for (const auto& row : a.rows) {
    if (!row.error.empty()) {
      h += fmt::format(
          "<tr><td>{}</td><td colspan=9>{}</td><td><span class=\"badge b-fail\">✗</span></td></tr>\n",
          esc(row.backend), esc(row.error));
      continue;
    }
    std::string where;
    for (const auto& s : row.substituted) where += (where.empty() ? "" : ", ") + s;
    h += fmt::format(
        "<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td "
        "class=n>{}"
        "</td><td class=n>{}</td><td class=n>{}</td><td class=n>{:.2f}</td><td>{}</td><td><span "
        "class=\"badge "
        "{}\">{}</span></td></tr>\n",
        esc(row.backend), pct(row.top1_agreement), pct(row.topk_overlap),
        row.nonfinite_positions > 0 ? fmt::format("∞ (NaN/Inf at {} positions)", row.nonfinite_positions)
                                    : fmt::format("{:.2g}", row.kl_mean),
        pct(row.greedy_k2), pct(row.greedy_k3), pct(row.sampling_k2), pct(row.sampling_k3),
        row.accepted_length_k3, esc(where), row.beyond_budget ? "b-fail" : "b-pass",
        row.beyond_budget ? "✗" : "✓");
  }
  h += "</table>\n";
}

// The gate's verdict, its failed checks with what replays them, the statistics that moved against the
// baseline and, with --mutants, which mutants it caught (docs/GATE.md).
void gate_section(const GateReport& g, std::string& h) {
  std::size_t failed = 0;
  for (const auto& c : g.checks) failed += c.status == CheckStatus::kFailed;
  h += fmt::format(
      "<p><span class=\"badge {}\">{}</span> {} checks, {} failed; {}. Baseline <code>{}</code>.</p>\n",
      g.exit_code == 0 ? "b-pass" : "b-fail", g.exit_code == 0 ? "gate passed" : "gate failed",
      g.checks.size(), failed, esc(g.stream), esc(g.baseline_path));
  for (const auto& e : g.errors) h += "<p class=err>" + esc(e) + "</p>\n";
  if (failed > 0) {
    h += "<table><tr><th>backend</th><th>op</th><th>check</th><th>what failed</th></tr>\n";
    for (const auto& c : g.checks) {
      if (c.status != CheckStatus::kFailed) continue;
      h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}{}</td></tr>\n", esc(c.backend), esc(c.op),
                       esc(c.check), esc(c.message),
                       c.details.empty() ? ""
                                         : "<details><summary>details</summary><pre>" + esc(c.details) +
                                               "</pre></details>");
    }
    h += "</table>\n";
  }
  if (!g.changes.empty()) {
    h += "<table><tr><th>backend</th><th>op</th><th>format</th><th>metric</th><th>baseline</th><th>now</th>"
         "<th title=\"change in units of the configured margin: &gt; 1 fails the gate, &lt; 0 is better\">"
         "change / margin</th></tr>\n";
    for (const auto& c : g.changes)
      h += fmt::format(
          "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td>"
          "<td class=\"n {}\">{:+.2f}</td></tr>\n",
          esc(c.backend), esc(c.op), esc(c.format), esc(c.metric), short_number(c.baseline),
          short_number(c.now), c.severity > 1 ? "fail" : "pass", c.severity);
    h += "</table>\n";
  }
  if (!g.known.empty()) {
    h += "<p class=note>Known findings: upstream defects a faithful twin reproduces (docs/FINDINGS.md), "
         "listed apart; never a failure of the gate.</p>\n<table class=known><tr><th>known finding</th>"
         "<th>what</th><th>backends</th><th>cases (campaign / corpus / golden)</th><th>replay</th></tr>\n";
    for (const auto& k : g.known) {
      std::string backends;
      for (const auto& b : k.backends) backends += (backends.empty() ? "" : ", ") + b;
      h += fmt::format(
          "<tr><td><span class=\"badge b-known\">known</span> {}</td><td>{}</td><td>{}</td>"
          "<td class=n>{} / {} / {}</td><td><code>{}</code></td></tr>\n",
          esc(k.id), esc(k.summary), esc(backends), k.campaign_cases, k.corpus_cases, k.golden_cases,
          esc(k.replay));
    }
    h += "</table>\n";
  }
  if (!g.detection.empty()) {
    std::string missed;
    for (const auto& d : g.detection)
      if (d.caught_by.empty()) missed += (missed.empty() ? "" : ", ") + d.mutant;
    h += fmt::format("<p>Mutants caught: {} of {}{}.</p>\n",
                     g.detection.size() - std::count_if(g.detection.begin(), g.detection.end(),
                                                        [](const auto& d) { return d.caught_by.empty(); }),
                     g.detection.size(), missed.empty() ? "" : "; missed: " + esc(missed));
  }
}

// One row per backend: does it drift, how badly, from what cause, and what it would cost in acceptance.
void glance(const RunReport& run, std::string& h) {
  const Report& r = *run.campaign;
  h += "<table><tr><th>backend</th><th>op</th><th>status</th><th>worst error / "
       "tol</th><th>p99</th><th>failing "
       "cases</th><th>causes</th>";
  if (run.accept) h += "<th>top-1 agreement</th><th>acceptance k=3</th>";
  h += "</tr>\n";
  for (const auto& b : r.backends) {
    std::int64_t failed = 0;
    for (const auto& [v, n] : b.failures_by_verdict) failed += n;
    std::string status = b.cases_run == 0 ? "<span class=\"badge b-idle\">did not run</span>"
                         : failed > 0     ? "<span class=\"badge b-fail\">drifts</span>"
                                          : "<span class=\"badge b-pass\">within tolerance</span>";
    std::string why;
    int shown = 0, more = 0;
    for (const FindingGroup* g : worst_first(r)) {
      if (g->backend != b.name) continue;
      if (shown++ < 3)
        why +=
            fmt::format("{}{} <i>({})</i>", why.empty() ? "" : "; ", esc(group_cause(*g)), esc(g->verdict));
      else
        ++more;
    }
    if (more > 0) why += fmt::format("; +{} more", more);
    // Known findings are named beside the causes but never make the status "drifts".
    for (const auto& k : r.known_findings)
      if (k.cases > 0 && std::find(k.backends.begin(), k.backends.end(), b.name) != k.backends.end())
        why += fmt::format("{}<span class=\"badge b-known\">known</span> {}", why.empty() ? "" : "; ",
                           esc(k.id));
    h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td>{}{}<td class=n>{}</td><td>{}</td>", esc(b.name),
                     esc(b.op), status, worst_td(b), p99_td(b), failed, why.empty() ? "-" : why);
    if (run.accept) {
      const AcceptRow* row = nullptr;
      for (const auto& x : run.accept->rows)
        if (x.backend == b.name) row = &x;
      if (row == nullptr || !row->error.empty())
        h += fmt::format("<td colspan=2>{}</td>", row ? esc(row->error) : "not in the acceptance run");
      else
        h += fmt::format("<td class=\"n {}\">{:.1f}%</td><td class=\"n {}\">{:.1f}%</td>",
                         row->beyond_budget ? "fail" : "pass", 100 * row->top1_agreement,
                         row->beyond_budget ? "fail" : "pass", 100 * row->greedy_k3);
    }
    h += "</tr>\n";
  }
  h += "</table>\n<dl class=legend><dt>status</dt><dd>drifts: at least one failing case</dd>"
       "<dt>worst error / tol</dt><dd>its worst case, the gravest verdict first: the largest error of any "
       "element in units of its tolerance (&le; 1 passes), NaN/Inf, no output (error, crash, timeout), or "
       "what else happened</dd><dt>p99</dt><dd>99th percentile over cases of each case's worst error / "
       "tolerance</dd>"
       "<dt>causes</dt><dd>its finding groups, worst first; <i>known</i>: an upstream defect its twin "
       "reproduces (docs/FINDINGS.md), listed apart and never a failure</dd>";
  if (run.accept)
    h += "<dt>top-1 agreement</dt><dd>share of the drafter's positions whose top token is the fp64 drafter's"
         "</dd><dt>acceptance k=3</dt><dd>estimated greedy acceptance rate with 3 speculative tokens, "
         "relative to the fp64 drafter (docs/ACCEPT.md)</dd>";
  h += "</dl>\n";
}

void run_section(const RunReport& run, std::size_t i, Plots& plots, std::string& h) {
  const std::string id = fmt::format("run{}", i);
  h += fmt::format("<section id=\"{}\"><h2>{} <small>({})</small></h2>\n", id, esc(run.label), esc(run.kind));
  std::string nav;
  const auto link = [&](const char* part, const char* text) {
    nav += fmt::format("<a href=\"#{}-{}\">{}</a>", id, part, text);
  };
  if (run.campaign) {
    link("glance", "at a glance"), link("groups", "finding groups");
    if (!run.campaign->known_findings.empty()) link("known", "known findings");
    link("backends", "backends");
    link("dist", "error distribution"), link("shape", "error vs shape"), link("heat", "where the error sits");
    link("div", "divergence");
  }
  if (run.accept) link("accept", "acceptance");
  h += "<nav>" + nav + "</nav>\n";
  for (const auto& n : run.notes) h += "<p class=note>" + esc(n) + "</p>\n";
  if (run.gate) {
    h += "<h3>Gate</h3>";
    gate_section(*run.gate, h);
  }
  const auto heading = [&](const char* part, const char* text) {
    h += fmt::format("<h3 id=\"{}-{}\">{}</h3>\n", id, part, text);
  };
  if (run.campaign) {
    const Report& r = *run.campaign;
    h += fmt::format(
        "<p class=meta><code>{}</code>: seed {}{}, {} cases, {} backend checks in {:.1f} s; exit code "
        "{}.</p>\n",
        esc(r.command), r.seed, r.stream.empty() ? "" : " (<code>" + esc(r.stream) + "</code>)", r.cases,
        r.checks, r.seconds, r.exit_code);
    if (const std::string t = time_line(r); !t.empty()) h += "<p class=meta>" + esc(t) + ".</p>\n";
    for (const auto& e : r.errors) h += "<p class=err>" + esc(e) + "</p>\n";
    heading("glance", "At a glance");
    glance(run, h);
    heading("groups", "Finding groups");
    group_details(r, run.dir, h);
    if (!r.known_findings.empty()) {
      heading("known", "Known findings (upstream defects, not failures)");
      known_findings(r, h);
    }
    heading("backends", "Backends in detail");
    backend_table(r, h);
    worker_faults(r, h);
    heading("dist", "Error distribution");
    histograms(r, plots, h);
    heading("shape", "Error against shape");
    shape_plots(r, plots, h);
    heading("heat", "Where the error sits");
    heatmaps(r, plots, h);
    heading("div", "Divergence between backends");
    divergence(r, plots, h);
    if (!r.unavailable.empty()) {
      h += "<h3>Unavailable here</h3><ul>";
      for (const auto& u : r.unavailable) h += "<li>" + esc(u) + "</li>";
      h += "</ul>\n";
    }
  }
  if (run.accept) {
    heading("accept", "Acceptance proxy: would the drift change a drafter's tokens?");
    accept_section(*run.accept, plots, h);
  }
  h += "</section>\n";
}

// One line per group over every run, worst first: what the reader sees first.
void causes(const ReportSet& s, std::string& h) {
  std::vector<std::pair<const RunReport*, const FindingGroup*>> all;
  for (const auto& run : s.runs)
    if (run.campaign)
      for (const FindingGroup* g : worst_first(*run.campaign)) all.emplace_back(&run, g);
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return worse_group(*a.second, *b.second); });
  h += fmt::format("<h2 id=causes>Findings by cause, worst first ({})</h2>\n", all.size());
  std::string known;
  for (const auto& run : s.runs)
    if (run.campaign)
      for (const auto& k : run.campaign->known_findings)
        if (k.cases > 0)
          known += fmt::format("{}{} ({} cases)", known.empty() ? "" : ", ", esc(k.id), k.cases);
  if (!known.empty())
    h += "<p class=note>Known findings met, listed apart in their run (upstream defects, never a failure): " +
         known + ".</p>\n";
  if (all.empty()) {
    h += "<p class=pass>No findings in any run.</p>\n";
    return;
  }
  h += fmt::format(
      "<table class=causes><tr><th>#</th>{}<th>backend</th><th>verdict</th><th>cause (features the "
      "failure needs) and the command that replays it</th><th>failing cases</th><th>shape classes</th>"
      "<th>worst</th></tr>\n",
      s.runs.size() > 1 ? "<th>run</th>" : "");
  int n = 0;
  for (const auto& [run, g] : all) {
    // Verdicts that are not about error size (an out-of-bounds write) are as bad as NaN/Inf, whatever ratio.
    h += fmt::format(
        "<tr><td class=n>{}</td>{}<td>{}</td><td>{}</td><td><b>{}</b><br><code class=small>{}</code></td>"
        "<td class=n>{}</td><td class=n>{}</td><td class=\"n {}\">{}</td></tr>\n",
        ++n, s.runs.size() > 1 ? fmt::format("<td>{}</td>", esc(run->label)) : std::string(), esc(g->backend),
        esc(g->verdict), esc(group_cause(*g)), esc(g->replay), g->cases, g->shape_classes.size(),
        worst_style(g->verdict, g->worst_ratio), esc(worst_cell(g->verdict, g->worst_ratio)));
  }
  h +=
      "</table>\n<p class=meta>A group is one backend, one verdict and the smallest set of case features "
      "that "
      "still fails after shrinking; its count is every failing case it explains and its worst the worst of "
      "those cases. Worst first: no output (error, crash, timeout), NaN/Inf, memory-safety and bit-exactness "
      "verdicts, then by error / tolerance.</p>\n";
}

// Several runs: each backend's worst error / tolerance and failures side by side.
void comparison(const ReportSet& s, std::string& h) {
  std::vector<std::string> names;
  for (const auto& run : s.runs)
    if (run.campaign)
      for (const auto& b : run.campaign->backends)
        if (std::find(names.begin(), names.end(), b.name) == names.end()) names.push_back(b.name);
  if (names.empty()) return;
  h += "<h2 id=compare>Runs side by side</h2><p>Worst error / tolerance (failing cases) of each backend in "
       "each run; "
       "blank: the backend did not run there.</p><table><tr><th>backend</th>";
  for (const auto& run : s.runs) h += "<th>" + esc(run.label) + "</th>";
  h += "</tr>\n";
  for (const auto& n : names) {
    h += "<tr><td>" + esc(n) + "</td>";
    for (const auto& run : s.runs) {
      const BackendReport* b = nullptr;
      if (run.campaign)
        for (const auto& x : run.campaign->backends)
          if (x.name == n) b = &x;
      std::int64_t failed = 0;
      if (b != nullptr)
        for (const auto& [v, c] : b->failures_by_verdict) failed += c;
      h += b == nullptr || b->cases_run == 0
               ? "<td></td>"
               : fmt::format("<td class=\"n {}\">{} ({})</td>", worst_style(b->worst_verdict, b->worst_ratio),
                             esc(worst_cell(b->worst_verdict, b->worst_ratio)), failed);
    }
    h += "</tr>\n";
  }
  h += "</table>\n";
}

constexpr const char* kHowToRead = R"(<h2 id=read>How to read this report</h2>
<p><b>error / tolerance</b>: every element of every output is compared with the fp64 reference, and its error is
measured in units of that element's tolerance, derived from the backend's declared numerics (its roundings, its
reduction length, the same-precision naive baseline; docs/ORACLE.md). Up to 1 is what a correct kernel of that
precision may do; a few tolerances is a rounding-level bug (an extra rounding, a low-precision accumulator);
thousands, NaN or Inf is a structural bug (strides, aliasing, garbage reads, wrong pages, wrong head mapping).</p>
<p><b>A finding group</b> is one backend, one verdict and the smallest set of case features that still fails after
shrinking (each feature removed in turn must make the failure go away). Its count is every failing case whose cause
it explains; its representative bundle is the shrunk case.</p>
<p><b>What to do next</b>: run the group's replay command (its members' stream commands replay the cases without
a bundle), and the same with <code>--backend</code> naming the correct backend, next to the broken one; keep the
representative as a regression case with the group's <code>corpus add</code> command (a gate re-runs its corpus on
every change: point <code>--corpus</code> at your gate's); when the backend is a twin of a real kernel, the finding
is about the upstream kernel: file it upstream with the replay command and the bundle, and list it as a known
finding.</p>
<p><b>The acceptance proxy</b> says whether the drift would change a drafter's tokens: correct backends keep nearly
every token, structural bugs collapse acceptance (the incident behind this tool: 58% against 2.8% with the same
weights).</p>
)";

}  // namespace

std::string to_html(const ReportSet& s, const PlotLibrary* lib, const std::string& why_no_plots) {
  Plots plots(lib != nullptr);
  std::string body;
  causes(s, body);
  if (s.runs.size() > 1) comparison(s, body);
  for (std::size_t i = 0; i < s.runs.size(); ++i) run_section(s.runs[i], i, plots, body);
  body += kHowToRead;
  std::string runs;
  for (const auto& run : s.runs)
    runs += (runs.empty() ? "" : ", ") + esc(run.label) + " (" + esc(run.kind) + ")";
  std::string page =
      "<!doctype html>\n<html lang=en><head><meta charset=\"utf-8\"><title>driftcheck report</title>\n";
  page += kStyle;
  if (lib != nullptr) page += lib->script;
  page += fmt::format(
      "</head><body><main>\n<h1>driftcheck divergence report</h1>\n<p class=meta>{} run{}: {}. "
      "driftcheck {}; <code>{}</code>.</p>\n",
      s.runs.size(), s.runs.size() == 1 ? "" : "s", runs, esc(s.tool_version), esc(s.command));
  if (lib == nullptr)
    page += "<p class=note>No plots: " + esc(why_no_plots) + ". Tables only.</p>\n";
  else
    page += "<p class=meta>Plots: " + esc(lib->source) + ", inlined; this file works offline.</p>\n";
  page += body;
  page += "</main>\n";
  if (lib != nullptr) page += kRenderScript;
  page += "</body></html>\n";
  return page;
}

}  // namespace driftcheck::reports
