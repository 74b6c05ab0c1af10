// The HTML divergence report: one self-contained file (no network, no external file) with the plotting
// library inlined at report time from its installed package. The library is Vega 5 from Debian's libjs-vega
// (/usr/share/javascript/vega), whose per-module UMD files are wrapped in a small CommonJS loader so that
// they find each other inside one page. Without the library the report is still written, with tables and a
// note saying how to get the plots (docs/REPORT.md).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "driftcheck/reports/report_set.hpp"

namespace driftcheck::reports {

struct PlotLibrary {
  std::string script;  // <script> elements, ready to paste into <head>
  std::string source;  // "vega 5.22.1 from /usr/share/javascript/vega"
};

// DRIFTCHECK_VEGA_DIR when set, else /usr/share/javascript/vega.
std::filesystem::path default_vega_dir();

// Reads Vega's modules from `dir`. nullopt with `why` ("/usr/share/javascript/vega/vega-view.js is missing:
// apt-get install libjs-vega") when any is missing.
std::optional<PlotLibrary> load_plot_library(const std::filesystem::path& dir, std::string* why);

// The page. `plots` nullptr: tables only, with a note that says why there are no plots (`why_no_plots`).
std::string to_html(const ReportSet& s, const PlotLibrary* plots, const std::string& why_no_plots = {});

}  // namespace driftcheck::reports
