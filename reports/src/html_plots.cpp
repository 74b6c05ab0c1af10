#include "html_plots.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "driftcheck/reports/numbers.hpp"
#include "report_views.hpp"

namespace driftcheck::reports {
namespace {

using nlohmann::json;

constexpr const char* kSchema = "https://vega.github.io/schema/vega/v5.json";
// Within tolerance, beyond it, NaN/Inf: the report's three colours everywhere.
constexpr const char* kPass = "#3a7d44";
constexpr const char* kFail = "#c0392b";
constexpr const char* kNonFinite = "#111111";
constexpr const char* kNoOutput = "#6d2e8c";

double clamp_ratio(double r) {
  if (!std::isfinite(r)) return kPlotRatioMax;
  return std::clamp(r, kPlotRatioMin, kPlotRatioMax);
}

json title(const std::string& text, const std::string& subtitle = {}) {
  json t = {{"text", text}, {"anchor", "start"}, {"fontSize", 12}, {"fontWeight", "bold"}};
  if (!subtitle.empty()) t["subtitle"] = subtitle, t["subtitleFontSize"] = 10, t["subtitleColor"] = "#555";
  return t;
}

// A dashed rule at error / tolerance = 1 on a log axis: everything to its right (or above) fails.
json tolerance_rule(const char* scale, bool vertical) {
  json enter = {
      {"stroke", {{"value", "#444"}}}, {"strokeDash", {{"value", {4, 3}}}}, {"strokeWidth", {{"value", 1}}}};
  if (vertical) {
    enter["x"] = {{"scale", scale}, {"value", 1}};
    enter["y"] = {{"value", 0}};
    enter["y2"] = {{"signal", "height"}};
  } else {
    enter["y"] = {{"scale", scale}, {"value", 1}};
    enter["x"] = {{"value", 0}};
    enter["x2"] = {{"signal", "width"}};
  }
  return {{"type", "rule"}, {"encode", {{"enter", enter}}}};
}

json ratio_axis(const char* orient, const char* scale, const std::string& title_text) {
  return {{"orient", orient},    {"scale", scale},
          {"title", title_text}, {"tickCount", 6},
          {"format", "~e"},      {"labelFontSize", 9},
          {"titleFontSize", 10}, {"grid", std::string(orient) == "left"}};
}

}  // namespace

RatioBins ratio_bins(const std::map<std::string, DriftStats>& drift) {
  std::map<int, std::int64_t> coarse;  // c: [2^(c/2), 2^((c+1)/2))
  RatioBins out;
  const int lo_c = static_cast<int>(std::floor(2 * std::log2(kPlotRatioMin)));
  const int hi_c = static_cast<int>(std::floor(2 * std::log2(kPlotRatioMax))) - 1;
  for (const auto& [format, d] : drift) {
    out.zeros += d.ratios.zeros, out.nonfinite += d.ratios.nonfinite, out.no_output += d.ratios.no_output;
    for (const auto& [key, n] : d.ratios.bins) {
      // The fine bin's middle decides its coarse bin; 32 fine bins per octave, so at most one straddles.
      const double hi = RatioHistogram::upper_edge(key), lo = RatioHistogram::upper_edge(key - 1);
      const int c = std::clamp(static_cast<int>(std::floor(2 * std::log2(0.5 * (lo + hi)))), lo_c, hi_c);
      coarse[c] += n;
    }
  }
  for (const auto& [c, n] : coarse) out.bins.push_back({std::exp2(c / 2.0), std::exp2((c + 1) / 2.0), n});
  out.total = out.zeros + out.nonfinite + out.no_output;
  for (const auto& b : out.bins) out.total += b.cases;
  return out;
}

nlohmann::json histogram_spec(const std::string& name, const RatioBins& rb) {
  constexpr int kLogWidth = 250, kGap = 14, kBarWidth = 34;
  json values = json::array();
  for (const auto& b : rb.bins) values.push_back({{"lo", b.lo}, {"hi", b.hi}, {"n", b.cases}});
  // Cases no ratio places on the axis, as bars of their own to its right: a campaign whose every failure is
  // a NaN or a crash must not look empty.
  json special = json::array();
  const auto add = [&special](const char* label, std::int64_t n, const char* colour) {
    if (n > 0) special.push_back({{"label", label}, {"n", n}, {"colour", colour}});
  };
  add("exact", rb.zeros, kPass);
  add("NaN/Inf", rb.nonfinite, kNonFinite);
  add("no output", rb.no_output, kNoOutput);
  const int special_width = static_cast<int>(special.size()) * kBarWidth;
  const int width = kLogWidth + (special.empty() ? 0 : kGap + special_width);
  json scales = {
      {{"name", "x"}, {"type", "log"}, {"domain", {kPlotRatioMin, kPlotRatioMax}}, {"range", {0, kLogWidth}}},
      {{"name", "y"},
       {"type", "sqrt"},
       {"domain", {{"fields", {{{"data", "bins"}, {"field", "n"}}, {{"data", "special"}, {"field", "n"}}}}}},
       {"range", "height"},
       {"zero", true},
       {"nice", true}},
      {{"name", "xs"},
       {"type", "band"},
       {"domain", {{"data", "special"}, {"field", "label"}}},
       {"range", {kLogWidth + kGap, width}},
       {"padding", 0.15}}};
  json axes = {ratio_axis("bottom", "x", "worst error / tolerance per case"),
               {{"orient", "left"},
                {"scale", "y"},
                {"tickCount", 3},
                {"labelFontSize", 9},
                {"title", "cases"},
                {"titleFontSize", 10}}};
  if (!special.empty())
    axes.push_back({{"orient", "bottom"}, {"scale", "xs"}, {"labelFontSize", 9}, {"labelAngle", 0}});
  json marks = {{{"type", "rect"},
                 {"from", {{"data", "bins"}}},
                 {"encode",
                  {{"enter",
                    {{"x", {{"scale", "x"}, {"field", "lo"}}},
                     {"x2", {{"scale", "x"}, {"field", "hi"}}},
                     {"y", {{"scale", "y"}, {"field", "n"}}},
                     {"y2", {{"scale", "y"}, {"value", 0}}},
                     {"fill", {{"signal", std::string("datum.lo >= 1 ? '") + kFail + "' : '" + kPass + "'"}}},
                     {"tooltip",
                      {{"signal",
                        "format(datum.lo, '.2~e') + ' to ' + format(datum.hi, '.2~e') + ': ' + datum.n + ' "
                        "cases'"}}}}}}}},
                {{"type", "rect"},
                 {"from", {{"data", "special"}}},
                 {"encode",
                  {{"enter",
                    {{"x", {{"scale", "xs"}, {"field", "label"}}},
                     {"width", {{"scale", "xs"}, {"band", 1}}},
                     {"y", {{"scale", "y"}, {"field", "n"}}},
                     {"y2", {{"scale", "y"}, {"value", 0}}},
                     {"fill", {{"field", "colour"}}},
                     {"tooltip", {{"signal", "datum.label + ': ' + datum.n + ' cases'"}}}}}}}},
                tolerance_rule("x", true)};
  return {{"$schema", kSchema},
          {"width", width},
          {"height", 80},
          {"padding", 4},
          {"title", title(name, std::to_string(rb.total) + " cases")},
          {"data", {{{"name", "bins"}, {"values", values}}, {{"name", "special"}, {"values", special}}}},
          {"scales", scales},
          {"axes", axes},
          {"marks", marks}};
}

nlohmann::json shape_spec(const std::string& name, std::vector<ShapePoint> points) {
  // A line joins its points in data order: along the axis.
  std::stable_sort(points.begin(), points.end(), [](const ShapePoint& a, const ShapePoint& b) {
    return std::tie(a.backend, a.bucket.order) < std::tie(b.backend, b.bucket.order);
  });
  json values = json::array();
  for (const auto& p : points) {
    values.push_back({{"backend", p.backend},
                      {"bucket", p.bucket.bucket},
                      {"order", p.bucket.order},
                      {"max", clamp_ratio(p.bucket.max_ratio)},
                      {"label", ratio_text(p.bucket.max_ratio)},
                      {"cases", p.bucket.cases},
                      {"failed", p.bucket.failed},
                      {"mutant", p.mutant}});
  }
  json tested = json::array();  // backends that are not mutants, in report order
  for (const auto& p : points)
    if (!p.mutant && std::find(tested.begin(), tested.end(), p.backend) == tested.end())
      tested.push_back(p.backend);
  const json point = {{"x", {{"scale", "x"}, {"field", "bucket"}, {"band", 0.5}}},
                      {"y", {{"scale", "y"}, {"field", "max"}}}};
  json line = point, symbol = point;
  // Mutants are thin grey dashes behind the backends under test, which get the colours and the legend.
  line["stroke"] = {{{"test", "datum.mutant"}, {"value", "#b0b0b0"}},
                    {{"scale", "color"}, {"field", "backend"}}};
  line["strokeWidth"] = {{"signal", "datum.mutant ? 1 : 2"}};
  line["strokeDash"] = {{"signal", "datum.mutant ? [3, 2] : [1, 0]"}};
  symbol["fill"] = {{{"test", "datum.mutant"}, {"value", "#b0b0b0"}},
                    {{"scale", "color"}, {"field", "backend"}}};
  symbol["size"] = {{"signal", "datum.mutant ? 12 : 30"}};
  symbol["tooltip"] = {
      {"signal",
       "datum.backend + ' | ' + datum.bucket + ': worst ' + datum.label + ', ' + datum.cases + "
       "' cases, ' + datum.failed + ' failed'"}};
  return {
      {"$schema", kSchema},
      {"width", 300},
      {"height", 150},
      {"padding", 4},
      {"title", title(name)},
      {"data", {{{"name", "points"}, {"values", values}}}},
      {"scales",
       {{{"name", "x"},
         {"type", "band"},
         {"domain", {{"data", "points"}, {"field", "bucket"}, {"sort", {{"field", "order"}, {"op", "min"}}}}},
         {"range", "width"},
         {"padding", 0.1}},
        {{"name", "y"}, {"type", "log"}, {"domain", {kPlotRatioMin, kPlotRatioMax}}, {"range", "height"}},
        {{"name", "color"}, {"type", "ordinal"}, {"domain", tested}, {"range", "category"}}}},
      {"axes",
       {{{"orient", "bottom"},
         {"scale", "x"},
         {"labelAngle", -30},
         {"labelAlign", "right"},
         {"labelFontSize", 9}},
        ratio_axis("left", "y", "worst error / tolerance")}},
      {"legends",
       {{{"fill", "color"},
         {"orient", "right"},
         {"labelFontSize", 9},
         {"symbolSize", 40},
         {"title", points.size() > tested.size() ? "(grey: mutants)" : ""},
         {"titleFontSize", 9},
         {"titleFontWeight", "normal"}}}},
      {"marks",
       {tolerance_rule("y", false),
        {{"type", "group"},
         {"from", {{"facet", {{"name", "series"}, {"data", "points"}, {"groupby", "backend"}}}}},
         {"marks",
          {{{"type", "line"}, {"from", {{"data", "series"}}}, {"encode", {{"enter", line}}}},
           {{"type", "symbol"}, {"from", {{"data", "series"}}}, {"encode", {{"enter", symbol}}}}}}}}}};
}

nlohmann::json heatmap_spec(const Heatmap& h) {
  json values = json::array();
  for (std::int64_t r = 0; r < h.rows; ++r) {
    for (std::int64_t c = 0; c < h.cols; ++c) {
      const double v = h.cells[static_cast<std::size_t>(r * h.cols + c)];
      json cell = {{"r", r}, {"c", c}, {"label", ratio_text(v)}};
      if (!std::isfinite(v))
        cell["kind"] = "nonfinite";
      else if (v == 0)
        cell["kind"] = "exact";
      else
        cell["kind"] = "error", cell["v"] = std::log10(v);
      values.push_back(cell);
    }
  }
  const double px = std::clamp(560.0 / static_cast<double>(std::max<std::int64_t>(h.cols, 1)), 3.0, 24.0);
  // At least 60 pixels high: a single-row output (one token) is a strip, not a line.
  const double py =
      std::max(std::clamp(260.0 / static_cast<double>(std::max<std::int64_t>(h.rows, 1)), 3.0, 24.0),
               60.0 / static_cast<double>(std::max<std::int64_t>(h.rows, 1)));
  const std::string sub =
      std::to_string(h.full_rows) + " " + h.row_label + "s x " + std::to_string(h.full_cols) + " " +
      h.col_label + "s" +
      (h.rows < h.full_rows || h.cols < h.full_cols ? ", each cell the worst of the elements it covers"
                                                    : "") +
      "; case " + std::to_string(h.case_index) + " " + h.shape_class;
  return {{"$schema", kSchema},
          {"width", px * static_cast<double>(h.cols)},
          {"height", py * static_cast<double>(h.rows)},
          {"padding", 4},
          {"title", title(h.backend + ": " + h.output, sub)},
          {"data", {{{"name", "cells"}, {"values", values}}}},
          {"scales",
           {{{"name", "x"},
             {"type", "band"},
             {"domain", {{"data", "cells"}, {"field", "c"}}},
             {"range", "width"}},
            {{"name", "y"},
             {"type", "band"},
             {"domain", {{"data", "cells"}, {"field", "r"}}},
             {"range", "height"}},
            // Blue below the tolerance, white at it, red beyond: log10 of error / tolerance from -3 to +3.
            {{"name", "color"},
             {"type", "linear"},
             {"domain", {-3, 0, 3}},
             {"range", {"#2c7bb6", "#f7f7f7", "#d7191c"}},
             {"clamp", true}}}},
          {"axes",
           {{{"orient", "bottom"},
             {"scale", "x"},
             {"title", h.col_label + " (cells)"},
             {"labels", false},
             {"ticks", false},
             {"titleFontSize", 10}},
            {{"orient", "left"},
             {"scale", "y"},
             {"title", h.row_label + " (cells)"},
             {"labels", false},
             {"ticks", false},
             {"titleFontSize", 10}}}},
          {"legends",
           {{{"fill", "color"},
             {"title", "log10 error/tol"},
             {"orient", "right"},
             {"gradientLength", 120},
             {"labelFontSize", 9},
             {"titleFontSize", 9}}}},
          {"marks",
           {{{"type", "rect"},
             {"from", {{"data", "cells"}}},
             {"encode",
              {{"enter",
                {{"x", {{"scale", "x"}, {"field", "c"}}},
                 {"width", {{"scale", "x"}, {"band", 1}}},
                 {"y", {{"scale", "y"}, {"field", "r"}}},
                 {"height", {{"scale", "y"}, {"band", 1}}},
                 {"fill",
                  {{{"test", "datum.kind === 'nonfinite'"}, {"value", kNonFinite}},
                   {{"test", "datum.kind === 'exact'"}, {"value", "#e8e8e8"}},
                   {{"scale", "color"}, {"field", "v"}}}},
                 {"tooltip",
                  {{"signal",
                    "'row cell ' + datum.r + ', column cell ' + datum.c + ': ' + datum.label"}}}}}}}}}}};
}

nlohmann::json divergence_spec(const Report& r, const std::string& op) {
  const auto names = divergence_names(r, op);
  json values = json::array();
  for (const auto& a : names) {
    for (const auto& b : names) {
      if (a == b) continue;
      const DivergenceCell* d = find_divergence(r, op, a, b);
      if (d == nullptr) continue;
      json cell = {{"a", a}, {"b", b}, {"shared", d->shared_cases}};
      if (d->nonfinite_cases > 0) {
        cell["kind"] = "nonfinite", cell["label"] = "NaN";
      } else if (std::isnan(d->max_ratio)) {
        cell["kind"] = "unmeasured", cell["label"] = "-";
      } else if (std::isinf(d->max_ratio)) {
        cell["kind"] = "inexact", cell["label"] = "≠";
      } else {
        cell["kind"] = "ratio", cell["v"] = std::log10(std::max(d->max_ratio, 1e-6));
        cell["label"] = d->max_ratio > kAstronomicalRatio ? ">1e4" : short_number(d->max_ratio);
      }
      cell["text"] = divergence_text(d->max_ratio, d->nonfinite_cases);
      values.push_back(cell);
    }
  }
  const double side = std::clamp(34.0 * static_cast<double>(names.size()), 120.0, 560.0);
  return {
      {"$schema", kSchema},
      {"width", side},
      {"height", side},
      {"padding", 4},
      {"title", title(op,
                      "max |a - b| / (tol_a + tol_b) over shared cases: <= 1 (blue) as close as two correct "
                      "kernels may be; red: at least one is wrong; black: NaN/Inf on one side")},
      {"data", {{{"name", "cells"}, {"values", values}}}},
      {"scales",
       {{{"name", "x"}, {"type", "band"}, {"domain", names}, {"range", "width"}},
        {{"name", "y"}, {"type", "band"}, {"domain", names}, {"range", "height"}},
        {{"name", "color"},
         {"type", "linear"},
         {"domain", {-2, 0, 2}},
         {"range", {"#2c7bb6", "#f7f7f7", "#d7191c"}},
         {"clamp", true}}}},
      {"axes",
       {{{"orient", "top"},
         {"scale", "x"},
         {"labelAngle", -40},
         {"labelAlign", "left"},
         {"labelFontSize", 9}},
        {{"orient", "left"}, {"scale", "y"}, {"labelFontSize", 9}}}},
      {"marks",
       {{{"type", "rect"},
         {"from", {{"data", "cells"}}},
         {"encode",
          {{"enter",
            {{"x", {{"scale", "x"}, {"field", "a"}}},
             {"width", {{"scale", "x"}, {"band", 1}}},
             {"y", {{"scale", "y"}, {"field", "b"}}},
             {"height", {{"scale", "y"}, {"band", 1}}},
             {"stroke", {{"value", "#fff"}}},
             {"fill",
              {{{"test", "datum.kind === 'nonfinite'"}, {"value", kNonFinite}},
               {{"test", "datum.kind === 'inexact'"}, {"value", "#7b241c"}},
               {{"test", "datum.kind === 'unmeasured'"}, {"value", "#e8e8e8"}},
               {{"scale", "color"}, {"field", "v"}}}},
             {"tooltip",
              {{"signal",
                "datum.a + ' vs ' + datum.b + ': ' + datum.text + ' (' + datum.shared + ' cases)'"}}}}}}}},
        {{"type", "text"},
         {"from", {{"data", "cells"}}},
         {"encode",
          {{"enter",
            {{"x", {{"scale", "x"}, {"field", "a"}, {"band", 0.5}}},
             {"y", {{"scale", "y"}, {"field", "b"}, {"band", 0.5}}},
             {"align", {{"value", "center"}}},
             {"baseline", {{"value", "middle"}}},
             {"fontSize", {{"value", 8}}},
             {"text", {{"field", "label"}}},
             {"fill", {{"signal", "datum.kind === 'ratio' && abs(datum.v) < 1.2 ? '#222' : '#fff'"}}}}}}}}}}};
}

nlohmann::json accept_spec(const AcceptReport& a) {
  json values = json::array();
  for (const auto& row : a.rows) {
    if (!row.error.empty()) continue;
    values.push_back({{"backend", row.backend},
                      {"greedy", 100 * row.greedy_k3},
                      {"top1", 100 * row.top1_agreement},
                      {"bad", row.beyond_budget}});
  }
  const double h = std::max(60.0, 16.0 * static_cast<double>(values.size()));
  return {{"$schema", kSchema},
          {"width", 480},
          {"height", h},
          {"padding", 4},
          {"title", title("estimated acceptance, greedy, 3 speculative tokens",
                          "relative to the fp64 drafter; the dashed line is the budget (" +
                              short_number(a.max_drop) + " points)")},
          {"data", {{{"name", "rows"}, {"values", values}}}},
          {"scales",
           {{{"name", "y"},
             {"type", "band"},
             {"domain", {{"data", "rows"}, {"field", "backend"}}},
             {"range", "height"},
             {"padding", 0.15}},
            {{"name", "x"}, {"type", "linear"}, {"domain", {0, 100}}, {"range", "width"}}}},
          {"axes",
           {{{"orient", "bottom"}, {"scale", "x"}, {"title", "acceptance rate (%)"}, {"titleFontSize", 10}},
            {{"orient", "left"}, {"scale", "y"}, {"labelFontSize", 9}, {"labelLimit", 260}}}},
          {"marks",
           {{{"type", "rect"},
             {"from", {{"data", "rows"}}},
             {"encode",
              {{"enter",
                {{"y", {{"scale", "y"}, {"field", "backend"}}},
                 {"height", {{"scale", "y"}, {"band", 1}}},
                 {"x", {{"scale", "x"}, {"value", 0}}},
                 {"x2", {{"scale", "x"}, {"field", "greedy"}}},
                 {"fill", {{"signal", std::string("datum.bad ? '") + kFail + "' : '" + kPass + "'"}}},
                 {"tooltip",
                  {{"signal",
                    "datum.backend + ': ' + format(datum.greedy, '.1f') + '% (top-1 agreement ' + "
                    "format(datum.top1, '.1f') + '%)'"}}}}}}}},
            {{"type", "rule"},
             {"encode",
              {{"enter",
                {{"x", {{"scale", "x"}, {"value", 100 - a.max_drop}}},
                 {"y", {{"value", 0}}},
                 {"y2", {{"signal", "height"}}},
                 {"stroke", {{"value", "#444"}}},
                 {"strokeDash", {{"value", {4, 3}}}}}}}}}}}};
}

}  // namespace driftcheck::reports
