// Vega specifications of the HTML report's plots, built from the report model. Internal to dc_reports.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "driftcheck/reports/accept_report.hpp"
#include "driftcheck/reports/drift.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::reports {

// The error / tolerance axis of every plot: 10^-4 to 10^7, anything beyond folded into the last bin.
inline constexpr double kPlotRatioMin = 1e-4;
inline constexpr double kPlotRatioMax = 1e7;

// A backend's per-case worst error / tolerance over every format it ran, two bins per octave; exact cases,
// NaN/Inf outputs and cases without output (error, crash, timeout) counted apart, each drawn as a bar of its
// own.
struct RatioBins {
  struct Bin {
    double lo = 0, hi = 0;
    std::int64_t cases = 0;
  };
  std::vector<Bin> bins;
  std::int64_t zeros = 0, nonfinite = 0, no_output = 0, total = 0;
};
RatioBins ratio_bins(const std::map<std::string, DriftStats>& drift);

nlohmann::json histogram_spec(const std::string& title, const RatioBins& bins);
// Error against one shape parameter for every backend of one op (points: ShapeBucket with its backend).
struct ShapePoint {
  std::string backend;
  ShapeBucket bucket;
  bool mutant = false;
};
nlohmann::json shape_spec(const std::string& title, std::vector<ShapePoint> points);
nlohmann::json heatmap_spec(const Heatmap& h);
nlohmann::json divergence_spec(const Report& r, const std::string& op);
nlohmann::json accept_spec(const AcceptReport& a);

}  // namespace driftcheck::reports
