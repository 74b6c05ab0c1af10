// The readers of driftcheck's own report files, as `driftcheck report` and `driftcheck baseline update` meet
// them: report.json (a fuzz or check campaign), gate.json, accept.json. The first byte picks the reader (its
// value mod 3: report, gate, accept), the rest is the file. Any input must be read or rejected with one
// std::runtime_error line (the command turns it into exit 2 naming the file), never another exception or a
// crash. An accepted model must render (Markdown, the HTML page without its plot library, the report set's
// JSON, the gate's JUnit) and survive a round trip: written, read back and written again, the JSON is the
// same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "driftcheck/reports/accept_report.hpp"
#include "driftcheck/reports/gate_report.hpp"
#include "driftcheck/reports/html.hpp"
#include "driftcheck/reports/report.hpp"
#include "driftcheck/reports/report_set.hpp"

namespace {

using namespace driftcheck::reports;

// A model read from `j` written again, read back and written once more: the two writes must agree.
template <class Model, class Read>
Model round_trip(const nlohmann::json& j, Read read) {
  Model m = read(j);
  const nlohmann::json once = to_json(m);
  if (to_json(read(once)) != once) std::abort();  // a reader or writer loses or changes a field
  return m;
}

void render(RunReport run) {
  run.dir = "fuzz/run", run.label = "run";
  ReportSet set;
  set.tool_version = "fuzz", set.command = "driftcheck report fuzz/run";
  set.runs.push_back(std::move(run));
  (void)to_markdown(set);
  (void)to_html(set, nullptr, "no plot library in the fuzz target");
  (void)to_json(set).dump();
  (void)exit_code_of(set.runs.front());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int which = data[0] % 3;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;  // not JSON: read_json's own one-line error, no model reader reached
  try {
    RunReport run;
    if (which == 0) {
      run.kind = "campaign";
      run.campaign = round_trip<Report>(j, report_from_json);
      (void)to_markdown(*run.campaign);
    } else if (which == 1) {
      run.kind = "gate";
      run.gate = round_trip<GateReport>(j, gate_report_from_json);
      (void)to_markdown(*run.gate);
      (void)to_junit(*run.gate);
    } else {
      run.kind = "accept";
      run.accept = round_trip<AcceptReport>(j, accept_report_from_json);
      (void)to_markdown(*run.accept);
    }
    render(std::move(run));
  } catch (const std::runtime_error& e) {
    if (std::string_view(e.what()).find('\n') != std::string_view::npos) std::abort();  // one line
  }
  return 0;
}
