// Two backends on the same generated cases, output bit for bit: how often they agree exactly, by how many
// ulps of the output format they differ where not, and where one gives NaN or an infinity and the other does
// not. It measures a twin against the real kernel it models (docs/UPSTREAM.md): bit-identity is the goal
// where the GPU's arithmetic can be reproduced on a CPU, 1 ulp where it cannot (ex2.approx, approximate
// division), and the same non-finite elements always. A measurement, not a verdict: no tolerance is involved.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck::fuzz {

// Per case, the worst disagreement over the compared outputs.
enum class Agreement : std::uint8_t {
  kIdentical,    // every element has the same bits (NaN payloads aside)
  kOneUlp,       // every finite difference within 1 ulp, no non-finite disagreement
  kFewUlps,      // within 4 ulps
  kLarger,       // a finite difference beyond 4 ulps
  kNonFinite,    // NaN or infinity on one side only, or infinities of opposite sign
  kUnsupported,  // one backend declined the case (not compared)
  kError,        // one backend threw (not compared)
};
std::string_view agreement_name(Agreement a);

struct CaseComparison {
  std::uint64_t index = 0;
  std::string shape_class;
  std::string features;  // what selects a kernel path: batch mode, kv format, window, softcap, sinks
  Agreement agreement = Agreement::kIdentical;
  std::int64_t elements = 0, identical = 0;
  std::int64_t nonfinite_a_only = 0, nonfinite_b_only = 0;
  double max_ulps = 0;
  std::string worst;  // where the largest difference is, or why the case was not compared
};

struct CompareOptions {
  std::string a, b;                  // backend names
  std::vector<std::string> outputs;  // outputs to compare; empty: every output both write
  std::uint64_t seed = 1;
  std::uint64_t cases = 200;
  std::uint64_t first = 0;  // the stream's first case index compared (a campaign's case, replayed on both)
  const Registry* backends = nullptr;  // nullptr: registry()
};

struct CompareResult {
  std::vector<CaseComparison> cases;
  std::map<std::string, std::map<std::string, std::int64_t>> by_features;  // features -> agreement -> cases
};

// Throws UsageError for an unknown backend or two backends of different ops.
CompareResult compare_backends(const CompareOptions& opts);

// A Markdown summary: totals, element share identical, agreement per feature group, the worst cases.
std::string compare_markdown(const CompareOptions& opts, const CompareResult& r);

}  // namespace driftcheck::fuzz
