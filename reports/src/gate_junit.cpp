// JUnit XML of a gate run, in the dialect CI systems read (Jenkins, GitLab, GitHub test reporters): one
// <testsuite>, one <testcase> per backend x op x check with its metrics as <properties>, a <failure> whose
// text carries the replay commands, <skipped> for checks that had nothing to run and for known findings.
#include <fmt/format.h>

#include "driftcheck/reports/gate_report.hpp"
#include "markup.hpp"

namespace driftcheck::reports {
namespace {

void properties(const std::vector<std::pair<std::string, std::string>>& props, std::string_view indent,
                std::string& xml) {
  if (props.empty()) return;
  xml += fmt::format("{}<properties>\n", indent);
  for (const auto& [k, v] : props)
    xml += fmt::format("{}  <property name=\"{}\" value=\"{}\"/>\n", indent, xml_escape(k), xml_escape(v));
  xml += fmt::format("{}</properties>\n", indent);
}

void testcase(const GateCheck& c, std::string& xml) {
  xml += fmt::format("    <testcase classname=\"{}\" name=\"{} {}\" time=\"{:.3f}\">\n",
                     xml_escape(c.backend), xml_escape(c.op), xml_escape(c.check), c.seconds);
  properties(c.properties, "      ", xml);
  if (c.status == CheckStatus::kFailed)
    xml += fmt::format("      <failure type=\"{}\" message=\"{}\">{}</failure>\n", xml_escape(c.check),
                       xml_escape(c.message), xml_escape(c.details));
  else if (c.status == CheckStatus::kSkipped)
    xml += fmt::format("      <skipped message=\"{}\"/>\n", xml_escape(c.message));
  xml += "    </testcase>\n";
}

// A known finding is an upstream defect the twins reproduce on purpose: a testcase of its own, skipped (CI
// views list it apart from passes and failures), with what explains it and how to reproduce it.
void known_testcase(const GateKnownFinding& k, std::string& xml) {
  std::string backends;
  for (const auto& b : k.backends) backends += (backends.empty() ? "" : ",") + b;
  const std::int64_t cases = k.campaign_cases + k.corpus_cases + k.golden_cases;
  xml += fmt::format("    <testcase classname=\"known finding\" name=\"{}\" time=\"0\">\n", xml_escape(k.id));
  properties({{"backends", backends},
              {"cases", std::to_string(cases)},
              {"campaign_cases", std::to_string(k.campaign_cases)},
              {"corpus_cases", std::to_string(k.corpus_cases)},
              {"golden_cases", std::to_string(k.golden_cases)},
              {"replay", k.replay}},
             "      ", xml);
  xml += fmt::format(
      "      <skipped message=\"known upstream defect, not a gate failure: {} ({} cases on {})\"/>\n",
      xml_escape(k.summary), cases, xml_escape(backends));
  xml += "    </testcase>\n";
}

}  // namespace

std::string to_junit(const GateReport& r) {
  std::size_t failures = 0, skipped = 0;
  for (const auto& c : r.checks) {
    failures += c.status == CheckStatus::kFailed;
    skipped += c.status == CheckStatus::kSkipped;
  }
  // Gate-level errors (an op that ran no case, an internal error) are testcases with <error> of their own, so
  // a CI view that only lists testcases still shows them.
  const std::size_t tests = r.checks.size() + r.known.size() + r.errors.size();
  skipped += r.known.size();
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  xml += fmt::format(
      "<testsuites name=\"driftcheck gate\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
      "time=\"{:.3f}\">\n",
      tests, failures, r.errors.size(), skipped, r.seconds);
  xml += fmt::format(
      "  <testsuite name=\"driftcheck gate {}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
      "time=\"{:.3f}\">\n",
      xml_escape(r.config_path), tests, failures, r.errors.size(), skipped, r.seconds);
  properties({{"config", r.config_path},
              {"config_sha256", r.config_sha256},
              {"baseline", r.baseline_path},
              {"stream", r.stream},
              {"command", r.command},
              {"tool_version", r.tool_version}},
             "    ", xml);
  for (const auto& c : r.checks) testcase(c, xml);
  for (const auto& k : r.known) known_testcase(k, xml);
  for (std::size_t i = 0; i < r.errors.size(); ++i) {
    xml += fmt::format(
        "    <testcase classname=\"driftcheck\" name=\"gate error {}\" time=\"0\">\n"
        "      <error type=\"gate\" message=\"{}\">{}</error>\n    </testcase>\n",
        i + 1, xml_escape(r.errors[i]), xml_escape(r.errors[i]));
  }
  xml += "  </testsuite>\n</testsuites>\n";
  return xml;
}

}  // namespace driftcheck::reports
