#include "driftcheck/fuzz/replay.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "driftcheck/device/plugin_backend.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/external/backends_file.hpp"
#include "driftcheck/fuzz/bundle.hpp"
#include "driftcheck/fuzz/sha256.hpp"
#include "driftcheck/reports/numbers.hpp"

namespace driftcheck::fuzz {

void load_bundle_backend(const nlohmann::json& finding, const std::string& backend,
                         const std::filesystem::path& bundle_dir) {
  if (registry().find(backend) != nullptr) return;
  const DefinitionRecord d = definition_of(finding, (bundle_dir / "finding.json").string());
  if (d.definition.kind == BackendDefinition::Kind::kBuiltIn) throw UsageError(unknown_backend(backend));
  const std::string path = d.definition.path.string();
  const char* option = d.definition.kind == BackendDefinition::Kind::kPlugin ? "--plugin" : "--backends";
  std::ifstream in(d.definition.path, std::ios::binary);
  if (!in)
    throw UsageError(
        fmt::format("the bundle's backend {} was defined by {}, which cannot be read now: pass {} "
                    "FILE naming where it is",
                    backend, path, option));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (const std::string now = sha256_hex(bytes.str()); now != d.sha256)
    throw UsageError(
        fmt::format("{} has changed since the bundle was written (sha256 {}, now {}): the "
                    "kernel it declares may not be the one that failed; pass {} {} to replay "
                    "with it as it is now",
                    path, d.sha256.substr(0, 12), now.substr(0, 12), option, path));
  if (d.definition.kind == BackendDefinition::Kind::kPlugin)
    extend_registry().add(load_plugin(d.definition.path));
  else
    external::register_backends_files(extend_registry(), {path});
  if (registry().find(backend) == nullptr)
    throw UsageError(fmt::format("{} no longer declares the bundle's backend {}", path, backend));
}

namespace {

std::string element(const OutputMetrics& m) {
  return fmt::format("{}[{}]", m.output, fmt::join(m.worst_index, ", "));
}

// One output's worst element and how much of the output is beyond tolerance.
std::string output_line(const OutputMetrics& m) {
  if (m.worst_index.empty()) return fmt::format("  {}: no finite element to compare", m.output);
  const std::string at = fmt::format("{}: {:.9g} vs reference {:.9g} (|error| {:.3g}, tolerance {:.3g})",
                                     element(m), m.worst_value, m.worst_reference,
                                     std::abs(m.worst_value - m.worst_reference), m.worst_tolerance);
  if (m.worst_ratio <= 1)
    return fmt::format("  {}: within tolerance; worst element {}: {}x tolerance", m.output, at,
                       reports::ratio_text(m.worst_ratio));
  // A bit-exact output (tolerance 0) has no ratio to print: any difference is the failure.
  const std::string how = m.worst_tolerance == 0         ? "differs where it must be bit-exact"
                          : std::isfinite(m.worst_ratio) ? reports::ratio_text(m.worst_ratio) + "x tolerance"
                                                         : reports::ratio_text(m.worst_ratio);
  return fmt::format("  {}: worst element {}: {}; {:.3g}% of its elements beyond tolerance", m.output, at,
                     how, 100 * m.share_beyond);
}

}  // namespace

std::string replay_report(const Backend& b, const CheckResult& r) {
  if (!r.support.ok)
    return fmt::format("UNSUPPORTED {}: {} (nothing ran: counts as a failure)\n", b.name(), r.support.reason);
  const Evaluation& e = r.evaluation;
  std::string out = fmt::format("{} {} {}: {}\n", is_failure(e.verdict) ? "FAIL" : "PASS", b.name(),
                                verdict_name(e.verdict), verdict_description(e.verdict));
  if (!e.detail.empty()) out += fmt::format("  {}\n", e.detail);
  for (const auto& m : e.metrics) out += output_line(m) + "\n";
  // Still a failure of the real kernel (exit 1), but a known one: say which.
  for (const auto& id : r.known_findings)
    out += fmt::format("KNOWN FINDING {}: an upstream defect the twin reproduces (docs/FINDINGS.md#{})\n", id,
                       id);
  return out;
}

}  // namespace driftcheck::fuzz
