// Vega 5 from Debian's libjs-vega, inlined into the report. Debian ships Vega as one UMD file per module
// (vega-util.js, vega-view.js, ...) but no bundle; in a browser each file's global fallback replaces the
// shared `vega` object instead of extending it, so the modules cannot find each other. Each file is therefore
// wrapped in a function that gives it CommonJS `module`/`exports` and a `require` that returns the modules
// loaded before it, in dependency order; then the transforms are registered as the full bundle does, and the
// API is gathered into one `vega` object (parse, View) for the report's script.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "driftcheck/reports/html.hpp"

namespace driftcheck::reports {
namespace {

// (module name as required, file) in dependency order (each file's require() list, read from its UMD header).
// topojson-client comes in the same package, one directory up.
constexpr std::pair<const char*, const char*> kModules[] = {
    {"vega-util", "vega-util"},
    {"vega-canvas", "vega-canvas.browser"},
    {"topojson-client", "../topojson-client/topojson-client"},
    {"vega-time", "vega-time"},
    {"vega-format", "vega-format"},
    {"vega-loader", "vega-loader.browser"},
    {"vega-dataflow", "vega-dataflow"},
    {"vega-scale", "vega-scale"},
    {"vega-scenegraph", "vega-scenegraph"},
    {"vega-expression", "vega-expression"},
    {"vega-selections", "vega-selection"},
    {"vega-statistics", "vega-statistics"},
    {"vega-functions", "vega-functions"},
    {"vega-runtime", "vega-runtime"},
    {"vega-view", "vega-view"},
    {"vega-event-selector", "vega-event-selector"},
    {"vega-parser", "vega-parser"},
    {"vega-encode", "vega-encode"},
    {"vega-transforms", "vega-transforms"},
    {"vega-view-transforms", "vega-view-transforms"},
};

std::optional<std::string> slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A module's source may not contain "</script>" inside the HTML; Vega's files do not, and a file that does is
// refused rather than broken.
bool safe_in_script(const std::string& src) {
  return src.find("</script") == std::string::npos && src.find("</SCRIPT") == std::string::npos;
}

}  // namespace

std::filesystem::path default_vega_dir() {
  const char* env = std::getenv("DRIFTCHECK_VEGA_DIR");
  return env != nullptr && *env != '\0' ? std::filesystem::path(env) : "/usr/share/javascript/vega";
}

std::optional<PlotLibrary> load_plot_library(const std::filesystem::path& dir, std::string* why) {
  PlotLibrary lib;
  lib.script =
      "<script>var __dcModules={};function require(n){if(!(n in __dcModules))throw new Error('vega module "
      "'+n+' "
      "missing');return __dcModules[n];}</script>\n";
  std::string version;
  for (const auto& [name, file] : kModules) {
    // The minified file when there is one (half the size), else the readable one.
    const auto min = dir / (std::string(file) + ".min.js"), full = dir / (std::string(file) + ".js");
    auto src = slurp(min);
    if (!src) src = slurp(full);
    if (!src || !safe_in_script(*src)) {
      if (why != nullptr)
        *why = fmt::format(
            "{} is missing or unreadable: install Debian's libjs-vega (apt-get install libjs-vega) "
            "or set DRIFTCHECK_VEGA_DIR",
            full.string());
      return std::nullopt;
    }
    lib.script += fmt::format(
        "<script>(function(){{var module={{exports:{{}}}};var "
        "exports=module.exports;\n{}\n;__dcModules['{}']="
        "module.exports;}})();</script>\n",
        *src, name);
  }
  // As Vega's own bundle does: every transform in the dataflow registry, the API in one object.
  lib.script +=
      "<script>var vega={};['vega-util','vega-loader','vega-format','vega-time','vega-scale','vega-dataflow',"
      "'vega-scenegraph','vega-expression','vega-statistics','vega-functions','vega-runtime','vega-view',"
      "'vega-parser'].forEach(function(n){Object.assign(vega,__dcModules[n]);});Object.assign(__dcModules["
      "'vega-dataflow'].transforms,__dcModules['vega-transforms'],__dcModules['vega-view-transforms'],"
      "__dcModules['vega-encode']);</script>\n";
  lib.source = fmt::format("Vega 5 (Debian libjs-vega) from {}", dir.string());
  return lib;
}

}  // namespace driftcheck::reports
