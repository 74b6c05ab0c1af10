// The oracle: turns a backend's run of a case into a verdict with metrics. Order of checks (DESIGN.md):
// error -> guard bands and unchanged inputs -> NaN/Inf policy -> metrics -> tolerance -> metamorphic contracts.
// Every tolerance is derived in docs/ORACLE.md from the backend's declared Numerics, the error model and the
// same-precision naive baseline with a floor.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/reference/reference.hpp"

namespace driftcheck::fuzz {

enum class Verdict : std::uint8_t {
  kPass,
  kUnsupported,          // the backend declined the case; counted apart, never as a pass
  kError,                // the backend threw or crashed
  kGuardViolation,       // bytes outside every output view changed (out-of-bounds write)
  kInputModified,        // an input that is not in place changed
  kNanMismatch,          // NaN where the reference is finite (or finite where it is NaN)
  kInfMismatch,          // infinities that do not match the reference's (rounded to the output format)
  kBeyondTolerance,      // finite error beyond the derived tolerance
  kNotExact,             // data movement (concat) not bit-exact
  kNondeterministic,     // two runs of the same case differ in some bit
  kBatchVariant,         // a row's bits change with the rest of the batch
  kBlockPermutationVariant,  // permuting physical KV blocks (table updated) changed some bit
  kFusedUnfusedDrift,    // fused and unfused chains differ by more than their roundings explain
};
std::string_view verdict_name(Verdict v);
bool is_failure(Verdict v);  // everything but kPass and kUnsupported

struct OutputMetrics {
  std::string output;            // tensor name ("y", "o", "lse", "residual")
  double max_abs = 0;
  double max_rel = 0;            // |err| / max(|ref|, floor)
  double max_ulps = 0;           // |err| in ulps of the output format at the reference value
  double normwise = 0;           // ||out - ref||_2 / ||ref||_2 (0 when ref is all zero and out matches)
  double mean_signed_ulps = 0;   // bias: mean of signed errors in ulps
  double share_beyond = 0;       // share of elements beyond their tolerance
  double worst_ratio = 0;        // max over elements of |err| / tolerance (> 1 fails)
  std::vector<std::int64_t> worst_index;  // multi-index of the element with the largest worst_ratio
  double worst_value = 0;
  double worst_reference = 0;
  double worst_tolerance = 0;
};

struct Evaluation {
  Verdict verdict = Verdict::kPass;
  std::string detail;            // one line: what failed where ("o[3, 5, 17]: 0.0312 vs 0.0287, 4.1x tolerance")
  std::vector<OutputMetrics> metrics;
  double worst_ratio = 0;        // max over outputs
  Outputs outputs;               // what the backend wrote (fp64, logical shapes); empty when it did not run
};

// Everything computed once per case and shared by all backends: the fp64 reference and the naive
// same-precision baseline's error per output.
struct PreparedCase {
  Case input;                    // pristine inputs (never run on)
  Outputs reference;
  Outputs baseline;              // naive same-precision implementation's outputs (fp64 tensors of its values)
};
PreparedCase prepare(Case c);

struct EvalOptions {
  bool metamorphic = true;       // also run determinism / block-permutation / batch-invariance checks
};

// Runs `backend` on a clone of the prepared case and judges it. Never throws for backend failures (they become
// verdicts); throws only on internal errors.
Evaluation evaluate(const Backend& backend, const PreparedCase& prepared, const EvalOptions& opts = {});

// Largest elementwise divergence between two backends' outputs, in ulps of the output format.
double divergence_ulps(const Outputs& a, const Outputs& b, DType out_dtype);

}  // namespace driftcheck::fuzz
