// The oracle: turns a backend's run of a case into a verdict with metrics. Order of checks (docs/ORACLE.md):
// error -> guard bands and unchanged inputs -> NaN/Inf policy -> metrics -> tolerance -> metamorphic
// contracts. Every tolerance is derived in docs/ORACLE.md from the backend's declared Numerics, the error
// model and the same-precision naive baseline with a floor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/reference/reference.hpp"

namespace driftcheck::fuzz {

enum class Verdict : std::uint8_t {
  kPass,
  kUnsupported,              // the backend declined the case; counted apart, never as a pass
  kError,                    // the backend threw, or its worker reported an error or broke the protocol
  kTimeout,                  // its worker did not answer within the backend's timeout (killed, restarted)
  kCrash,                    // its worker process died on the case (restarted)
  kGuardViolation,           // bytes outside every output view changed (out-of-bounds write)
  kInputModified,            // an input that is not in place changed
  kNanMismatch,              // NaN where the reference is finite (or finite where it is NaN)
  kInfMismatch,              // infinities that do not match the reference's (rounded to the output format)
  kBeyondTolerance,          // finite error beyond the derived tolerance
  kNotExact,                 // data movement (concat) not bit-exact
  kNondeterministic,         // two runs of the same case differ in some bit
  kBatchVariant,             // a row's bits change with the rest of the batch
  kBlockPermutationVariant,  // permuting physical KV blocks (table updated) changed some bit
  kFusedUnfusedDrift,        // fused and unfused chains differ by more than their roundings explain
  kBeyondStatisticalBound,   // within the worst-case tolerance, but improbable for a correct kernel
};
std::string_view verdict_name(Verdict v);
// The verdict in words, for people reading a replay ("a NaN where the reference is finite, or a number where
// it is NaN").
std::string_view verdict_description(Verdict v);
bool is_failure(Verdict v);                               // everything but kPass and kUnsupported
bool parse_verdict(std::string_view name, Verdict* out);  // false for a name verdict_name() never returns

struct OutputMetrics {
  std::string output;  // tensor name ("y", "o", "lse", "residual")
  double max_abs = 0;
  double max_rel = 0;           // |err| / max(|ref|, floor)
  double max_ulps = 0;          // |err| in ulps of the output format at the reference value
  double normwise = 0;          // ||out - ref||_2 / ||ref||_2 (0 when ref is all zero and out matches)
  double mean_signed_ulps = 0;  // bias: mean of signed errors in ulps
  double share_beyond = 0;      // share of elements beyond their tolerance
  double worst_ratio = 0;       // max over elements of |err| / tolerance (> 1 fails)
  std::vector<std::int64_t> worst_index;  // multi-index of the element with the largest worst_ratio
  double worst_value = 0;
  double worst_reference = 0;
  double worst_tolerance = 0;
};

struct Evaluation {
  Verdict verdict = Verdict::kPass;
  std::string detail;  // one line: what failed where ("o[3, 5, 17]: 0.0312 vs 0.0287, 4.1x tolerance")
  std::vector<OutputMetrics> metrics;
  double worst_ratio = 0;  // max over outputs
  // Statistical tier: a bound on the probability that a correct kernel with the declared numerics writes
  // outputs this improbable (1 when nothing is; kBeyondStatisticalBound at or below kStatisticalAlpha).
  double stat_p_value = 1;
  Outputs outputs;  // what the backend wrote (fp64, logical shapes); empty when it did not run
  // The backend did not run the case for a reason of its own (BackendNotRun: its worker was being restarted,
  // the caller's deadline passed): verdict kUnsupported, detail the reason, and counted apart from declined
  // cases by the campaign.
  bool not_run = false;
};

// The output whose worst element is furthest beyond its tolerance: the first of the largest worst_ratio, a
// NaN ratio above every number (nullptr without metrics). One rule for the headline of a finding everywhere
// it is shown (bundles, journal, groups, heatmaps).
const OutputMetrics* worst_metrics(const Evaluation& e);

// Per-element terms of the error model of one output (docs/ORACLE.md derives each). Vectors are row-major
// over the output's logical shape; an empty vector is a zero term. The tolerance of element i for a backend
// with Numerics n is
//   d = base + the term of every rounding n declares (the rows of fuzz/oracle/src/rounding_terms.hpp:
//       (output_roundings - 1) * intermediate, then p_rounding, kv_dequant_rounding, partials_rounding,
//       fp8_mfma_rounding where their flags apply)
//   tol = max(d + 0.5 * ulp(dtype, |ref| + d), 2 * baseline)
struct ErrorModel {
  DType dtype = DType::kF32;         // the output's storage format
  bool exact = false;                // data movement: bit-exact, no tolerance
  std::vector<double> base;          // what every conforming kernel may add before its final rounding
  std::vector<double> intermediate;  // one extra rounding to the output format on the way (rmsnorm family)
  std::vector<double> p_rounding;    // attention: P rounded to the activation dtype before P.V
  std::vector<double> kv_dequant_rounding;  // attention: dequantised fp8 K/V rounded to the activation dtype
  // attention: 1 where the element's row belongs to a sequence with query length > 1 (prefill/extend), else 0
  std::vector<std::uint8_t> prefill_row;
  std::vector<double>
      partials_rounding;  // attention: split-KV partial outputs stored in the activation dtype
  // attention, decode rows with an fp8 cache (0 elsewhere): q and P rounded to the cache's fp8 format before
  // fp8 MFMAs (Numerics::fp8_mfma_decode). fp8_logit_error is the bound q's rounding puts on every logit of
  // the element's row; fp8_p_underflow the weight below which the fp8 P may be 0 (0 without an fp8 cache).
  std::vector<double> fp8_mfma_rounding, fp8_logit_error;
  double fp8_p_underflow = 0;
  std::vector<double> baseline;  // attention: the naive baseline's error scale (FlashAttention's rule)
  // attention, where the reference element of o is +-inf: the natural log of the smallest weight a kernel may
  // give the strongest key carrying that infinity (its normalised weight moved by the logit error bound);
  // -inf elsewhere. Below the P format's underflow threshold the kernel's 0 * inf = NaN is conforming.
  std::vector<double> inf_log_weight;

  // The statistical tier's view of the same output (docs/ORACLE.md section 9); empty where it adds nothing to
  // the worst-case tier.
  // rmsnorm family: per element z_i s and w'_i (exact), and the same pair and the result computed from z
  // rounded to the activation dtype (residual cases: the fused-add path); the length of each element's row.
  std::vector<double> scaled, weight, scaled_rounded_z, ref_rounded_z;
  std::int64_t row_length = 0;
  // attention o: the systematic (worst-case) parts of the P and KV-dequantisation terms, and the variance
  // proxies (Hoeffding: the sum of squared bounds) of their random parts: P rounded to the activation dtype,
  // V rounded to it after dequantisation.
  std::vector<double> typical_p, typical_kv, variance_p, variance_kv;
};
using ErrorModels = std::map<std::string, ErrorModel, std::less<>>;

// The naive same-precision implementation of the case's op (FlashAttention's baseline): the straightforward
// algorithm with every intermediate rounded to the activation dtype and fp32 sums. Outputs like reference().
// `source`: where the new tokens' K/V come from (attention; case.hpp NewKv).
Outputs naive_baseline(const Case& c, NewKv source = NewKv::kCache);
// The error model of every output of a case, from its inputs, reference and baseline (computed once per
// case).
ErrorModels error_model(const Case& c, const Outputs& reference, const Outputs& baseline,
                        NewKv source = NewKv::kCache);
// Tolerance of element `i` (row-major) of an output whose reference value is `ref`, for a backend's numerics.
double tolerance(const ErrorModel& m, const Numerics& n, std::size_t i, double ref);
// Whether element i is judged with the KV-dequantisation term: every element under n.kv_dequant_rounded, the
// elements of prefill/extend rows under n.kv_dequant_rounded_prefill.
bool kv_dequant_applies(const ErrorModel& m, const Numerics& n, std::size_t i);

// Everything computed once per case and shared by all backends: the fp64 reference, the naive same-precision
// baseline and the error model.
struct PreparedCase {
  Case input;  // pristine inputs (never run on)
  Outputs reference;
  Outputs baseline;  // naive same-precision implementation's outputs (fp64 tensors of its values)
  ErrorModels model;
  // Attention: the same three with the new tokens' K/V of prefill/extend sequences read from k_new / v_new
  // (NewKv::kInputs), for backends that declare that source; null where they equal the ones above (no
  // k_new, no sequence with query length > 1, or inputs equal to the dequantised cache there).
  std::shared_ptr<const PreparedCase> from_inputs;

  // What a backend with numerics n is judged against.
  const PreparedCase& judged_as(const Numerics& n) const {
    return n.new_kv == NewKv::kInputs && from_inputs ? *from_inputs : *this;
  }
};
PreparedCase prepare(Case c);
// Whether the two new-token sources (case.hpp NewKv) can give attention case c different references: some
// key of a prefill/extend sequence (query length > 1) has an input (k_new, v_new) other than its dequantised
// cache value. prepare() computes PreparedCase::from_inputs exactly there, and `driftcheck export --new-kv`
// writes the second reference exactly there.
bool new_kv_differs(const Case& c);
// The NewKv::kInputs variant of a prepared case (its reference, baseline and model), or null where it equals
// the cache one (see PreparedCase::from_inputs).
std::shared_ptr<const PreparedCase> prepare_from_inputs(const PreparedCase& cache);

struct EvalOptions {
  bool metamorphic = true;  // also run determinism / block-permutation / batch-invariance checks
  bool statistical = true;  // also run the statistical tier (section 9) on outputs within tolerance
};

// ---------------------------------------------------------------------------------------------------------------
// The statistical tier (docs/ORACLE.md section 9).

// Its false-alarm rate per check: a correct kernel (under hypothesis H) is flagged with probability at most
// this on any one backend-case.
inline constexpr double kStatisticalAlpha = 1e-9;

struct StatisticalResult {
  double p_value = 1;        // Bonferroni over the elements: min(1, N min_i p_i)
  std::size_t elements = 0;  // N: elements judged (finite reference and output, outputs with a model)
  std::string output;        // the most improbable element, and why
  std::int64_t index = -1;   // row-major
  double value = 0, reference = 0;
  std::string why;
  // Elements no correct kernel with the declared numerics is likely to write (rmsnorm family: off every
  // declared rounding point, p = 0; attention: p <= kStatisticalCaseLevel), the share of the N elements a
  // correct kernel puts there (0, or at most that level), and the declared rounding points in words.
  std::size_t beyond = 0;
  double expected_share = 0;
  std::string rounding_points;
};

// Over a campaign's cases of one shape class (section 9): a correct kernel's case p-value is at most this
// with probability at most this, independently from case to case (cases are independent draws). A class
// whose count of such cases has a binomial tail at most kStatisticalAlpha is a finding.
inline constexpr double kStatisticalCaseLevel = 1e-3;
// Chernoff's bound on P(Binomial(n, level) >= x): exp(-n KL(x / n || level)) when x / n > level, else 1.
double binomial_tail_bound(std::int64_t n, std::int64_t x, double level);

// The statistical tier over a campaign's cases of one shape class (section 9): how many it judged, how many
// had a case p-value at or below kStatisticalCaseLevel, and the most improbable case. Mergeable in any
// grouping.
struct StatisticalClass {
  std::int64_t cases = 0, low = 0;
  double min_p = 1;
  std::uint64_t min_case = 0;

  void add(double p_value, std::uint64_t index);  // one case
  void merge(const StatisticalClass& o);
};

// A class beyond the statistical bound (binomial tail at or below kStatisticalAlpha): the tail, the case to
// bundle (the most improbable) and one line saying why.
struct ClassJudgement {
  double tail;
  std::uint64_t case_index;
  std::string why;
};
std::optional<ClassJudgement> judge_class(const StatisticalClass& c, std::string_view shape);

// Longest chain of roundings an element of a row of h values goes through in a sum of squares reduced as
// `r` declares (its square, its thread's chunks, the warp tree, the warp totals); h for a sequential sum.
std::int64_t reduction_depth(std::int64_t h, const ReductionShape& r);
// The statistical tier on the outputs of a backend with numerics n.
StatisticalResult judge_statistical(const PreparedCase& pc, const Numerics& n, const Outputs& outputs);

// Runs `backend` on a clone of the prepared case and judges it. Never throws for backend failures (they
// become verdicts); throws only on internal errors.
Evaluation evaluate(const Backend& backend, const PreparedCase& prepared, const EvalOptions& opts = {});

// Largest elementwise divergence between two backends' outputs, in ulps of the output format at the larger of
// the two magnitudes (a value near zero does not turn a tiny difference into a huge count). NaN against a
// number, or unequal infinities, count as infinitely many ulps.
double divergence_ulps(const Outputs& a, const Outputs& b, DType out_dtype);
// The same with each output measured in its own format as the case stores it (o in the activation dtype, lse
// in fp32).
double divergence_ulps(const Outputs& a, const Outputs& b, const Case& c);

// Every output's per-element tolerance for a backend with numerics `n`, exactly as evaluate() judges it (0
// for bit-exact outputs).
using Tolerances = std::map<std::string, std::vector<double>, std::less<>>;
Tolerances tolerances(const PreparedCase& prepared, const Numerics& n);

// How far two backends' outputs are apart relative to their pair's tolerance: the largest elementwise
// |a - b| / (tol_a + tol_b). Both are judged against the same reference, so two backends that both pass are
// within tol_a + tol_b of each other (triangle inequality): <= 1 reads "as close as two correct kernels may
// be", > 1 says at least one of them is wrong there. Where both tolerances are 0 (bit-exact outputs) any
// difference is an infinite ratio. `nonfinite`: NaN on one side only, or unequal infinities.
struct PairDivergence {
  double max_ratio = 0;
  bool nonfinite = false;
};
PairDivergence pair_divergence(const Outputs& a, const Tolerances& tol_a, const Outputs& b,
                               const Tolerances& tol_b);

// Fused vs unfused chains (dual_rmsnorm_cat against rmsnorm + concat: the drafter's layer-0 input): two
// correct chains differ by rounding order only, so each element may differ by at most the sum of the two
// backends' tolerances against the reference (triangle inequality through the reference). kFusedUnfusedDrift
// beyond that; kPass otherwise (a NaN/inf disagreement also drifts). Metrics describe |fused - unfused|
// against that sum.
Evaluation compare_fused_unfused(const PreparedCase& prepared, const Outputs& fused,
                                 const Numerics& fused_numerics, const Outputs& unfused,
                                 const Numerics& unfused_numerics);

}  // namespace driftcheck::fuzz
