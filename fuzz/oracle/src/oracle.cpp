// The oracle (docs/ORACLE.md): one backend run of a prepared case -> a verdict with metrics.
// Order: error -> storage (guard bands, inputs) -> NaN/Inf -> metrics and tolerance (or bit-exactness) ->
// metamorphic contracts (determinism, KV block permutation, batch invariance).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "driftcheck/fuzz/oracle.hpp"

#include "driftcheck/device/device_reference.hpp"
#include "driftcheck/fuzz/output_hints.hpp"
#include "rounding_terms.hpp"

namespace driftcheck::fuzz {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<std::int64_t> unravel(std::int64_t linear, const Shape& shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] == 0 ? 0 : linear % shape[d];
    linear = shape[d] == 0 ? 0 : linear / shape[d];
  }
  return idx;
}

std::string where(std::string_view name, std::int64_t linear, const Shape& shape) {
  return fmt::format("{}[{}]", name, fmt::join(unravel(linear, shape), ", "));
}

Tensor logical_f64(const Tensor& t) {
  Tensor out = Tensor::zeros(DType::kF64, t.shape());
  out.copy_from(t.to_f64());
  return out;
}

// Why a run failed: kError for anything the backend threw, kTimeout/kCrash when an out-of-process backend's
// worker says so through BackendFault (docs/PROTOCOL.md, section 5), kUnsupported when it declined the case
// at run time (BackendDeclined).
struct RunFailure {
  Verdict verdict = Verdict::kError;
  std::string detail;
  bool worker_fault = false;  // a BackendFault: the verdict is the worker's, whatever check was running
  bool not_run = false;       // BackendNotRun: neither judged nor declined (Evaluation::not_run)
};

Verdict fault_verdict(FaultKind k) {
  switch (k) {
    case FaultKind::kTimeout:
      return Verdict::kTimeout;
    case FaultKind::kCrash:
      return Verdict::kCrash;
    case FaultKind::kError:
      break;
  }
  return Verdict::kError;
}

std::optional<RunFailure> run_backend(const Backend& b, Case& c) {
  try {
    b.run(c);
  } catch (const BackendFault& e) {
    return RunFailure{fault_verdict(e.kind()), e.what(), true};
  } catch (const BackendNotRun& e) {
    return RunFailure{Verdict::kUnsupported, e.what(), false, true};
  } catch (const BackendDeclined& e) {
    return RunFailure{Verdict::kUnsupported, e.what()};
  } catch (const std::exception& e) {
    return RunFailure{Verdict::kError, e.what()};
  } catch (...) {
    return RunFailure{Verdict::kError, "unknown exception"};
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------------------------
// Storage: every element not inside an output view must keep its pristine bits.

// Storage index of every element of t, in row-major order of its logical index: index_of_linear(i) for every
// i, stepping through the strides instead of dividing by the extents per element (outputs and KV caches are
// walked element by element on every run).
std::vector<std::int64_t> storage_indices(const Tensor& t) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(t.numel()));
  if (out.empty()) return out;
  const std::size_t rank = t.shape().size();
  if (rank == 0) {
    out[0] = t.offset();
    return out;
  }
  const std::int64_t len = t.shape()[rank - 1], step = t.strides()[rank - 1];
  std::vector<std::int64_t> idx(rank - 1, 0);
  std::int64_t base = t.offset();
  for (std::size_t at = 0; at < out.size(); at += static_cast<std::size_t>(len)) {
    for (std::int64_t j = 0; j < len; ++j) out[at + static_cast<std::size_t>(j)] = base + j * step;
    for (std::size_t d = rank - 1; d-- > 0;) {  // the next row: an odometer over the outer dimensions
      base += t.strides()[d];
      if (++idx[d] < t.shape()[d]) break;
      base -= idx[d] * t.strides()[d];
      idx[d] = 0;
    }
  }
  return out;
}

// Whether element i of a and element j of b hold the same bits (both of one dtype; the indices come from
// views, which are checked against their storages when made).
bool same_bits(const Storage& a, std::int64_t i, const Storage& b, std::int64_t j) {
  const auto size = static_cast<std::size_t>(dtype_size(a.dtype));
  const std::byte* x = a.bytes.data() + static_cast<std::size_t>(i) * size;
  const std::byte* y = b.bytes.data() + static_cast<std::size_t>(j) * size;
  switch (size) {
    case 1:
      return *x == *y;
    case 2:
      return std::memcmp(x, y, 2) == 0;
    case 4:
      return std::memcmp(x, y, 4) == 0;
    case 8:
      return std::memcmp(x, y, 8) == 0;
    default:
      return std::memcmp(x, y, size) == 0;
  }
}

struct StorageMap {
  const Storage* pristine = nullptr;
  Storage* run = nullptr;
  std::string name;  // first tensor that views it, for messages
  std::vector<const Tensor*> inputs, outputs;
};

enum Role : char { kGuard = 0, kInputView = 1, kOutputView = 2 };

void mark(std::vector<char>& role, const std::vector<const Tensor*>& views, Role r) {
  for (const Tensor* t : views) {
    for (const std::int64_t i : storage_indices(*t)) {
      char& x = role[static_cast<std::size_t>(i)];
      x = std::max<char>(x, r);
    }
  }
}

// The first changed element outside the output views of one storage, as (role, message); role kOutputView
// when none. Input-only storages (the KV caches) are compared as whole byte buffers first; roles are computed
// only for storages that hold outputs or that changed.
std::pair<Role, std::string> first_change(const StorageMap& m) {
  if (m.outputs.empty() && m.run->bytes == m.pristine->bytes) return {kOutputView, {}};
  std::vector<char> role(static_cast<std::size_t>(m.run->numel()), kGuard);
  mark(role, m.outputs, kOutputView);
  mark(role, m.inputs, kInputView);
  std::pair<Role, std::string> found{kOutputView, {}};
  for (std::int64_t i = 0; i < m.run->numel(); ++i) {
    const auto r = static_cast<Role>(role[static_cast<std::size_t>(i)]);
    if (r == kOutputView || r >= found.first || same_bits(*m.run, i, *m.pristine, i)) continue;
    found = {r, fmt::format("storage of '{}' element {} changed: {:.9g} -> {:.9g}", m.name, i,
                            m.pristine->load(i), m.run->load(i))};
    if (r == kGuard) break;
  }
  return found;
}

// Returns kPass, kGuardViolation or kInputModified (guard first: an out-of-bounds write is the worse
// finding).
Verdict check_storage(const Case& pristine, Case& run, std::string* detail) {
  std::map<const Storage*, StorageMap> maps;
  const OpSignature sig = op_signature(run);
  for (auto& [name, t] : run.tensors) {
    StorageMap& m = maps[t.storage().get()];
    if (m.run == nullptr) {
      m.pristine = pristine.tensor(name).storage().get();
      m.run = t.storage().get();
      m.name = name;
    }
    const bool out = std::find(sig.outputs.begin(), sig.outputs.end(), name) != sig.outputs.end();
    (out ? m.outputs : m.inputs).push_back(&t);
  }
  std::string input_detail;
  for (const auto& [ptr, m] : maps) {
    auto [role, msg] = first_change(m);
    if (role == kGuard) {
      *detail = "write outside every output view (guard band): " + msg;
      return Verdict::kGuardViolation;
    }
    if (role == kInputView && input_detail.empty())
      input_detail = "input that is not in place was modified: " + msg;
  }
  if (input_detail.empty()) return Verdict::kPass;
  *detail = input_detail;
  return Verdict::kInputModified;
}

// ---------------------------------------------------------------------------------------------------------------
// NaN / Inf policy

// Below this weight a kernel's P may be 0 (docs/ORACLE.md section 2 step 4): P in fp32 is flushed below the
// smallest normal (GPU exp approximations run with FTZ); P rounded to the activation dtype before P.V is 0
// below half its smallest subnormal too.
double p_underflow(const Numerics& n, DType act) {
  const double fp32 = std::numeric_limits<float>::min();
  return n.p_rounded ? std::max(fp32, 0.5 * ulp(act, 0.0)) : fp32;
}

// NaN where the reference is an infinity whose weight a conforming kernel may underflow: 0 * inf. With fp8
// MFMAs (decode rows of an fp8 cache) P is rounded to the fp8 format, 0 below half its smallest subnormal,
// and q's rounding moves the logits by fp8_logit_error more (the weight by up to exp(2 e) more).
bool underflowed_infinity(const ErrorModel& m, const Numerics& n, std::size_t i, double r, double v) {
  if (!std::isinf(r) || !std::isnan(v) || i >= m.inf_log_weight.size()) return false;
  double floor = p_underflow(n, m.dtype), slack = 0;
  if (n.fp8_mfma_decode && m.fp8_p_underflow > 0 && i < m.fp8_logit_error.size() &&
      i < m.prefill_row.size() && m.prefill_row[i] == 0) {
    floor = std::max(floor, m.fp8_p_underflow);
    slack = 2 * m.fp8_logit_error[i];
  }
  return m.inf_log_weight[i] - slack < std::log(floor);
}

Verdict check_specials(const PreparedCase& pc, const Numerics& n, const Outputs& outs, std::string* detail) {
  std::string inf_detail;
  for (const auto& [name, ref_t] : pc.reference) {
    const auto ref = ref_t.to_f64(), got = outs.at(name).to_f64();
    const ErrorModel& model = pc.model.at(name);
    const DType dt = model.dtype;
    // Only a reference at least half the format's max can round to an infinity: round the rest never.
    const double half_max = 0.5 * (dt == DType::kF32   ? std::numeric_limits<float>::max()
                                   : dt == DType::kF64 ? std::numeric_limits<double>::max()
                                                       : max_finite(*float_format(dt)));
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const double r = ref[i], v = got[i];
      if (underflowed_infinity(model, n, i, r, v)) continue;
      // FlashAttention-2's lse of a row whose softmax sum is NaN or 0, as the backend declares it.
      if (n.lse_undefined_inf && name == "lse" && v == INFINITY && (std::isnan(r) || r == -INFINITY))
        continue;
      if (std::isnan(r) != std::isnan(v)) {
        *detail = fmt::format("{}: {} where the reference is {}",
                              where(name, static_cast<std::int64_t>(i), ref_t.shape()), v, r);
        return Verdict::kNanMismatch;
      }
      if (std::isnan(r) || (!std::isinf(v) && std::fabs(r) < half_max)) continue;
      const double expected = round_to(dt, r);
      if ((std::isinf(v) || std::isinf(expected)) && v != expected && inf_detail.empty())
        inf_detail = fmt::format("{}: {} where the reference rounds to {}",
                                 where(name, static_cast<std::int64_t>(i), ref_t.shape()), v, expected);
    }
  }
  if (inf_detail.empty()) return Verdict::kPass;
  *detail = inf_detail;
  return Verdict::kInfMismatch;
}

// ---------------------------------------------------------------------------------------------------------------
// Metrics

struct Compared {
  OutputMetrics m;
  std::int64_t worst = -1;
  bool exact_violation = false;
};

// Relative errors divide by max(|ref|, floor) with floor = 2^-10 RMS(ref): elements near zero in an otherwise
// large output would otherwise make the relative error meaningless.
Compared compare(std::string_view name, const std::vector<double>& ref, const std::vector<double>& got,
                 const ErrorModel& model, const std::function<double(std::size_t, double)>& tol) {
  Compared c;
  c.m.output = std::string(name);
  double sum_r2 = 0, sum_e2 = 0, sum_ulps = 0;
  std::size_t finite = 0, beyond = 0;
  std::int64_t exact_at = -1;
  for (const double r : ref) sum_r2 += std::isfinite(r) ? r * r : 0.0;
  const double floor =
      0x1p-10 * std::sqrt(sum_r2 / static_cast<double>(std::max<std::size_t>(ref.size(), 1)));
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double r = ref[i], v = got[i];
    if (!std::isfinite(r) || !std::isfinite(v)) continue;  // judged by the NaN/Inf policy
    const double err = v - r, t = tol(i, r), u = ulp(model.dtype, r);
    if (model.exact && (v != r || std::signbit(v) != std::signbit(r)) && exact_at < 0)
      exact_at = static_cast<std::int64_t>(i);
    ++finite;
    sum_e2 += err * err;
    sum_ulps += err / u;
    c.m.max_abs = std::max(c.m.max_abs, std::fabs(err));
    c.m.max_rel = std::max(c.m.max_rel, std::fabs(err) / std::max({std::fabs(r), floor, 1e-300}));
    c.m.max_ulps = std::max(c.m.max_ulps, std::fabs(err) / u);
    const double ratio = err == 0 ? 0.0 : t > 0 ? std::fabs(err) / t : kInf;
    beyond += ratio > 1 ? 1 : 0;
    if (ratio > c.m.worst_ratio || c.worst < 0) {
      c.worst = static_cast<std::int64_t>(i);
      c.m.worst_ratio = ratio;
    }
  }
  if (exact_at >= 0) {  // for data movement the first inexact element is the finding
    c.exact_violation = true;
    c.worst = exact_at;
  }
  c.m.normwise = sum_r2 > 0 ? std::sqrt(sum_e2 / sum_r2) : (sum_e2 > 0 ? kInf : 0.0);
  c.m.mean_signed_ulps = finite > 0 ? sum_ulps / static_cast<double>(finite) : 0.0;
  c.m.share_beyond = finite > 0 ? static_cast<double>(beyond) / static_cast<double>(finite) : 0.0;
  return c;
}

void fill_worst(Compared& c, const Shape& shape, const std::vector<double>& ref,
                const std::vector<double>& got, const std::function<double(std::size_t, double)>& tol) {
  if (c.worst < 0) return;
  const auto i = static_cast<std::size_t>(c.worst);
  c.m.worst_index = unravel(c.worst, shape);
  c.m.worst_value = got[i];
  c.m.worst_reference = ref[i];
  c.m.worst_tolerance = tol(i, ref[i]);
}

std::string worst_line(const OutputMetrics& m) {
  return fmt::format("{}[{}]: {:.9g} vs reference {:.9g}, tolerance {:.3g}, {:.3g}x tolerance", m.output,
                     fmt::join(m.worst_index, ", "), m.worst_value, m.worst_reference, m.worst_tolerance,
                     m.worst_ratio);
}

// The verdict names the output whose worst element is furthest beyond its tolerance, so the ratio in the
// detail line is the evaluation's worst_ratio (journal, report.json and the text report agree).
void measure(const PreparedCase& pc, const Numerics& n, Evaluation& ev) {
  const OutputMetrics* worst = nullptr;
  std::string inexact;
  for (const auto& [name, ref_t] : pc.reference) {
    const ErrorModel& model = pc.model.at(name);
    const auto ref = ref_t.to_f64(), got = ev.outputs.at(name).to_f64();
    const auto tol = [&](std::size_t i, double r) { return tolerance(model, n, i, r); };
    Compared c = compare(name, ref, got, model, tol);
    fill_worst(c, ref_t.shape(), ref, got, tol);
    if (c.exact_violation && inexact.empty())
      inexact = fmt::format("{}: {:.9g} vs input {:.9g}: data movement must be bit-exact",
                            where(name, c.worst, ref_t.shape()), c.m.worst_value, c.m.worst_reference);
    ev.metrics.push_back(std::move(c.m));
  }
  for (const OutputMetrics& m : ev.metrics)
    if (worst == nullptr || m.worst_ratio > worst->worst_ratio) worst = &m;
  if (worst != nullptr) ev.worst_ratio = worst->worst_ratio;
  if (ev.verdict != Verdict::kPass) return;
  if (!inexact.empty()) {
    ev.verdict = Verdict::kNotExact;
    ev.detail = inexact;
  } else if (worst != nullptr && worst->worst_ratio > 1) {
    ev.verdict = Verdict::kBeyondTolerance;
    ev.detail = worst_line(*worst);
  }
}

// The statistical tier (section 9): outputs within the worst-case tolerance that no correct kernel with the
// declared numerics writes but with probability <= kStatisticalAlpha.
void check_statistical(const PreparedCase& pc, const Numerics& n, Evaluation& ev) {
  const StatisticalResult s = judge_statistical(pc, n, ev.outputs);
  ev.stat_p_value = s.p_value;
  if (s.p_value > kStatisticalAlpha) return;
  ev.verdict = Verdict::kBeyondStatisticalBound;
  const double share =
      static_cast<double>(s.beyond) / static_cast<double>(std::max<std::size_t>(s.elements, 1));
  ev.detail = fmt::format(
      "{}: {:.9g} vs reference {:.9g} {}; {} of {} elements ({:.2g}%) lie beyond the declared rounding "
      "points "
      "({}), where a correct kernel puts {}; case p-value {:.3g}",
      where(s.output, s.index, pc.reference.at(s.output).shape()), s.value, s.reference, s.why, s.beyond,
      s.elements, 100 * share, s.rounding_points,
      s.expected_share == 0 ? std::string("none") : fmt::format("at most {:g}%", 100 * s.expected_share),
      s.p_value);
}

// ---------------------------------------------------------------------------------------------------------------
// Metamorphic contracts: bit-for-bit comparisons of output views.

std::optional<std::string> differs(const Case& a, const Case& b) {
  for (const auto& name : op_signature(a).outputs) {
    const Tensor &ta = a.tensor(name), &tb = b.tensor(name);
    const auto ia = storage_indices(ta), ib = storage_indices(tb);
    for (std::size_t i = 0; i < ia.size(); ++i) {
      if (!same_bits(*ta.storage(), ia[i], *tb.storage(), ib[i]))
        return fmt::format("{}: {:.9g} vs {:.9g}", where(name, static_cast<std::int64_t>(i), ta.shape()),
                           ta.storage()->load(ia[i]), tb.storage()->load(ib[i]));
    }
  }
  return std::nullopt;
}

Tensor sub_view(const Tensor& t, std::int64_t first, std::int64_t count) {
  Shape shape = t.shape();
  shape[0] = count;
  return Tensor::view(t.storage(), shape, t.strides(), t.offset() + first * t.strides()[0]);
}

// Row `which` (row ops) or sequence `which` (attention) alone, as views into c's storages.
Case sub_batch(const Case& c, std::int64_t which) {
  Case s = c;
  if (c.op != OpKind::kAttention) {
    for (auto& [name, t] : s.tensors)
      if (t.dim() == 2) t = sub_view(t, which, 1);
    return s;
  }
  const Tensor& qsl = c.tensor("query_start_loc");
  const auto first = static_cast<std::int64_t>(qsl.at({which})),
             count = static_cast<std::int64_t>(qsl.at({which + 1})) - first;
  for (const char* name : {"q", "o", "lse", "k_new", "v_new"})
    if (c.has(name)) s.tensor(name) = sub_view(c.tensor(name), first, count);
  s.tensor("block_table") = sub_view(c.tensor("block_table"), which, 1);
  s.tensor("seq_lens") = sub_view(c.tensor("seq_lens"), which, 1);
  Tensor starts = Tensor::zeros(DType::kI32, {2});
  starts.set({1}, static_cast<double>(count));
  s.tensor("query_start_loc") = starts;
  return s;
}

std::int64_t batch_size(const Case& c) {
  if (c.op == OpKind::kAttention) return c.tensor("seq_lens").size(0);
  return c.tensor(op_signature(c).outputs.front()).size(0);
}

// Whether each block t[b] of a cache view is one run of elements (its inner dimensions contiguous, whatever
// the stride between blocks), as in every KV layout the generator makes (separate, stacked, interleaved).
bool blocks_are_runs(const Tensor& t) {
  std::int64_t expected = 1;
  for (std::size_t d = t.shape().size(); d-- > 1;) {
    if (t.shape()[d] != 1 && t.strides()[d] != expected) return false;
    expected *= t.shape()[d];
  }
  return true;
}

// Moves every physical KV block to a new place (a permutation derived from the case's seed and index) and
// rewrites the block table to match: attention is a function of the logical sequence, so no bit may change.
Case permute_blocks(const Case& pristine) {
  Case c = pristine.clone();
  const Tensor& k = pristine.tensor("k_cache");
  const std::int64_t blocks = k.size(0);
  // One cycle through a shuffled order of the blocks: every block moves (a derangement), so a kernel that
  // depends on where any block lives is caught.
  std::vector<std::int64_t> order(static_cast<std::size_t>(blocks)), perm(order.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(pristine.seed * 0x9e3779b97f4a7c15ull + pristine.index + 1);
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  for (std::size_t i = 0; i < order.size(); ++i)
    perm[static_cast<std::size_t>(order[i])] = order[(i + 1) % order.size()];
  for (const char* name : {"k_cache", "v_cache"}) {
    const Tensor &src = pristine.tensor(name), &dst = c.tensor(name);
    const std::int64_t per_block = src.numel() / blocks;
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t to = perm[static_cast<std::size_t>(b)];
      if (blocks_are_runs(src) && blocks_are_runs(dst)) {  // one block is one run of bytes
        const auto size = static_cast<std::size_t>(dtype_size(src.dtype()));
        std::memcpy(dst.storage()->bytes.data() +
                        static_cast<std::size_t>(dst.offset() + to * dst.strides()[0]) * size,
                    src.storage()->bytes.data() +
                        static_cast<std::size_t>(src.offset() + b * src.strides()[0]) * size,
                    static_cast<std::size_t>(per_block) * size);
        continue;
      }
      for (std::int64_t i = 0; i < per_block; ++i)
        dst.storage()->store_bits(dst.index_of_linear(to * per_block + i),
                                  src.storage()->load_bits(src.index_of_linear(b * per_block + i)));
    }
  }
  // Entries no kernel may read (past a sequence's last block) can hold any value, block ids outside the
  // cache included: they are left as they are.
  Tensor& table = c.tensor("block_table");
  for (std::int64_t i = 0; i < table.numel(); ++i) {
    const std::int64_t at = table.index_of_linear(i);
    const double id = table.storage()->load(at);
    if (id >= 0 && id < static_cast<double>(blocks))
      table.storage()->store(at, static_cast<double>(perm[static_cast<std::size_t>(id)]));
  }
  return c;
}

// Runs `variant` and compares its outputs with `expected` (views of the same logical elements) bit for bit.
bool variant_differs(const Backend& b, Case variant, const Case& expected, Verdict v, std::string_view what,
                     Evaluation& ev) {
  std::optional<std::string> diff;
  if (const auto err = run_backend(b, variant)) {
    // A variant the backend declines (a sub-batch its kernel choice rejects) is no evidence either way.
    if (err->verdict == Verdict::kUnsupported) return false;
    // A worker that faults on the re-run gets its fault's verdict, not the metamorphic one.
    if (err->worker_fault) {
      ev.verdict = err->verdict;
      ev.detail = fmt::format("{} (in the re-run: {})", err->detail, what);
      return true;
    }
    diff = "the run threw: " + err->detail;
  }
  if (!diff) diff = differs(expected, variant);
  if (!diff) return false;
  ev.verdict = v;
  ev.detail = fmt::format("{}: {}", what, *diff);
  return true;
}

void check_metamorphic(const Backend& b, const PreparedCase& pc, const Case& first, Evaluation& ev) {
  const Numerics n = b.numerics_for(pc.input);
  if (n.deterministic && variant_differs(b, pc.input.clone(), first, Verdict::kNondeterministic,
                                         "a second run of the same case differs", ev))
    return;
  if (n.block_permutation_invariant && pc.input.op == OpKind::kAttention &&
      pc.input.tensor("k_cache").size(0) > 1 &&
      variant_differs(b, permute_blocks(pc.input), first, Verdict::kBlockPermutationVariant,
                      "physical KV blocks permuted (block table updated) changes", ev))
    return;
  // Every row (sequence) alone: a batch-dependent reduction order shows only where its last-bit difference
  // crosses a rounding boundary of the output, so each row is a separate chance; together they cost about one
  // more run of the whole batch.
  const std::int64_t batch = batch_size(pc.input);
  if (!n.batch_invariant || batch < 2) return;
  const Case alone = pc.input.clone();  // sub-runs write disjoint rows: one copy serves them all
  for (std::int64_t which = 0; which < batch; ++which) {
    const Case sub = sub_batch(alone, which);
    if (!b.supports(sub).ok) continue;
    if (variant_differs(b, sub, sub_batch(first, which), Verdict::kBatchVariant,
                        fmt::format("row/sequence {} of {} run alone differs", which, batch), ev))
      return;
  }
}

}  // namespace

// Whether some key of a prefill/extend sequence (query length > 1) has an input value (k_new, v_new) other
// than what the reference reads from the cache for it (the stored value times the scale, and the input
// divided by it, both compared): only then do the two NewKv semantics differ.
bool new_kv_differs(const Case& c) {
  if (!c.has("k_new")) return false;
  const auto& p = c.get<AttentionParams>();
  const Tensor& table = c.tensor("block_table");
  const Tensor& lens = c.tensor("seq_lens");
  const Tensor& qsl = c.tensor("query_start_loc");
  const auto same = [](double input, double stored, double scale) {
    return (std::isnan(input) && std::isnan(stored)) || (input == stored * scale && input / scale == stored);
  };
  for (std::int64_t s = 0; s < lens.size(0); ++s) {
    const auto len = static_cast<std::int64_t>(lens.at({s})), start = static_cast<std::int64_t>(qsl.at({s}));
    const std::int64_t ql = static_cast<std::int64_t>(qsl.at({s + 1})) - start;
    if (ql <= 1) continue;
    for (std::int64_t t = std::max<std::int64_t>(0, len - ql); t < len; ++t) {
      const auto block = static_cast<std::int64_t>(table.at({s, t / p.block_size}));
      const std::int64_t token = start + t - (len - ql);
      for (std::int64_t g = 0; g < p.num_kv_heads; ++g)
        for (std::int64_t d = 0; d < p.head_dim; ++d) {
          const std::int64_t slot = t % p.block_size;
          if (!same(c.tensor("k_new").at({token, g, d}), c.tensor("k_cache").at({block, slot, g, d}),
                    p.k_scale) ||
              !same(c.tensor("v_new").at({token, g, d}), c.tensor("v_cache").at({block, slot, g, d}),
                    p.v_scale))
            return true;
        }
    }
  }
  return false;
}

// ---------------------------------------------------------------------------------------------------------------

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kUnsupported:
      return "unsupported";
    case Verdict::kError:
      return "error";
    case Verdict::kTimeout:
      return "timeout";
    case Verdict::kCrash:
      return "crash";
    case Verdict::kGuardViolation:
      return "guard_violation";
    case Verdict::kInputModified:
      return "input_modified";
    case Verdict::kNanMismatch:
      return "nan_mismatch";
    case Verdict::kInfMismatch:
      return "inf_mismatch";
    case Verdict::kBeyondTolerance:
      return "beyond_tolerance";
    case Verdict::kNotExact:
      return "not_exact";
    case Verdict::kNondeterministic:
      return "nondeterministic";
    case Verdict::kBatchVariant:
      return "batch_variant";
    case Verdict::kBlockPermutationVariant:
      return "block_permutation_variant";
    case Verdict::kFusedUnfusedDrift:
      return "fused_unfused_drift";
    case Verdict::kBeyondStatisticalBound:
      return "beyond_statistical_bound";
  }
  return "unknown";
}

const OutputMetrics* worst_metrics(const Evaluation& e) {
  const OutputMetrics* worst = nullptr;
  for (const auto& m : e.metrics)
    if (worst == nullptr || (!std::isnan(worst->worst_ratio) &&
                             (m.worst_ratio > worst->worst_ratio || std::isnan(m.worst_ratio))))
      worst = &m;
  return worst;
}

std::string_view verdict_description(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "every element within its derived tolerance";
    case Verdict::kUnsupported:
      return "the backend declined the case";
    case Verdict::kError:
      return "no output: the backend raised an error";
    case Verdict::kTimeout:
      return "no output: the worker did not answer within its timeout";
    case Verdict::kCrash:
      return "no output: the worker process died on the case";
    case Verdict::kGuardViolation:
      return "bytes outside every output view changed (an out-of-bounds write)";
    case Verdict::kInputModified:
      return "an input that is not in place changed";
    case Verdict::kNanMismatch:
      return "a NaN where the reference is finite, or a number where it is NaN";
    case Verdict::kInfMismatch:
      return "infinities that do not match the reference's";
    case Verdict::kBeyondTolerance:
      return "an element's error is beyond its derived tolerance";
    case Verdict::kNotExact:
      return "a data movement that is not bit-exact";
    case Verdict::kNondeterministic:
      return "two runs of the same case differ in some bit";
    case Verdict::kBatchVariant:
      return "a row's bits change with the rest of the batch";
    case Verdict::kBlockPermutationVariant:
      return "permuting the physical KV blocks (table updated) changed some bit";
    case Verdict::kFusedUnfusedDrift:
      return "fused and unfused chains differ by more than their roundings explain";
    case Verdict::kBeyondStatisticalBound:
      return "within the worst-case tolerance, but improbable for a correct kernel of its declared numerics";
  }
  return "unknown verdict";
}

bool parse_verdict(std::string_view name, Verdict* out) {
  // Every value verdict_name() knows, so a verdict added there is parsed here without another list.
  for (int i = 0; i <= std::numeric_limits<std::uint8_t>::max(); ++i) {
    const auto v = static_cast<Verdict>(i);
    if (verdict_name(v) != "unknown" && verdict_name(v) == name) {
      *out = v;
      return true;
    }
  }
  return false;
}

bool is_failure(Verdict v) {
  return v != Verdict::kPass && v != Verdict::kUnsupported;
}

bool kv_dequant_applies(const ErrorModel& m, const Numerics& n, std::size_t i) {
  return n.kv_dequant_rounded ||
         (n.kv_dequant_rounded_prefill && i < m.prefill_row.size() && m.prefill_row[i] != 0);
}

double tolerance(const ErrorModel& m, const Numerics& n, std::size_t i, double ref) {
  if (m.exact) return 0.0;
  const auto term = [i](const std::vector<double>& v) { return v.empty() ? 0.0 : v[i]; };
  double d = term(m.base);
  for (const RoundingTerm& t : kRoundingTerms) {
    const int c = t.count(m, n, i);
    if (t.per_rounding)
      d += c * term(m.*t.worst);
    else if (c != 0)
      d += term(m.*t.worst);
  }
  return std::max(d + 0.5 * ulp(m.dtype, std::fabs(ref) + d), 2 * term(m.baseline));
}

PreparedCase prepare(Case c) {
  PreparedCase pc;
  pc.reference = device_reference(c);  // validates the case; large attention cases on a GPU when present
  pc.baseline = naive_baseline(c);
  pc.model = error_model(c, pc.reference, pc.baseline);
  pc.input = std::move(c);
  pc.from_inputs = prepare_from_inputs(pc);
  return pc;
}

std::shared_ptr<const PreparedCase> prepare_from_inputs(const PreparedCase& cache) {
  const Case& c = cache.input;
  if (c.op != OpKind::kAttention || !new_kv_differs(c)) return nullptr;
  auto pc = std::make_shared<PreparedCase>();
  // The fp64 CPU reference: the GPU one computes the cache semantics only.
  pc->reference = reference_attention(c, NewKv::kInputs);
  pc->baseline = naive_baseline(c, NewKv::kInputs);
  pc->model = error_model(c, pc->reference, pc->baseline, NewKv::kInputs);
  pc->input = c.clone();
  return pc;
}

Evaluation evaluate(const Backend& backend, const PreparedCase& prepared, const EvalOptions& opts) {
  const Numerics numerics = backend.numerics_for(prepared.input);
  const PreparedCase& pc = prepared.judged_as(numerics);
  Evaluation ev;
  if (const Support s = backend.supports(pc.input); !s.ok) {
    ev.verdict = Verdict::kUnsupported;
    ev.detail = s.reason;
    return ev;
  }
  Case run = pc.input.clone();
  if (const auto err = run_backend(backend, run)) {
    ev.verdict = err->verdict;
    ev.detail = err->detail;
    ev.not_run = err->not_run;
    return ev;
  }
  for (const auto& name : op_signature(run).outputs) ev.outputs[name] = logical_f64(run.tensor(name));
  ev.verdict = check_storage(pc.input, run, &ev.detail);
  if (ev.verdict == Verdict::kPass) ev.verdict = check_specials(pc, numerics, ev.outputs, &ev.detail);
  measure(pc, numerics, ev);
  if (ev.verdict == Verdict::kPass && opts.statistical) check_statistical(pc, numerics, ev);
  // A common mistake in how the outputs were written (never written, another type) leads the detail.
  if (is_failure(ev.verdict))
    if (const std::string hint = output_hints(pc.input, run, pc.reference); !hint.empty())
      ev.detail = ev.detail.empty() ? hint : hint + "; " + ev.detail;
  if (ev.verdict == Verdict::kPass && opts.metamorphic) check_metamorphic(backend, pc, run, ev);
  return ev;
}

double divergence_ulps(const Outputs& a, const Outputs& b, DType out_dtype) {
  double worst = 0;
  for (const auto& [name, ta] : a) {
    const auto it = b.find(name);
    if (it == b.end()) continue;
    const auto va = ta.to_f64(), vb = it->second.to_f64();
    for (std::size_t i = 0; i < std::min(va.size(), vb.size()); ++i) {
      if (std::isnan(va[i]) && std::isnan(vb[i])) continue;
      if (va[i] == vb[i]) continue;
      if (!std::isfinite(va[i]) || !std::isfinite(vb[i])) return kInf;
      worst = std::max(
          worst, std::fabs(va[i] - vb[i]) / ulp(out_dtype, std::max(std::fabs(va[i]), std::fabs(vb[i]))));
    }
  }
  return worst;
}

double divergence_ulps(const Outputs& a, const Outputs& b, const Case& c) {
  double worst = 0;
  for (const auto& [name, ta] : a) {
    const auto it = b.find(name);
    if (it == b.end() || !c.has(name)) continue;
    Outputs one_a, one_b;
    one_a.emplace(name, ta);
    one_b.emplace(name, it->second);
    worst = std::max(worst, divergence_ulps(one_a, one_b, c.tensor(name).dtype()));
  }
  return worst;
}

Tolerances tolerances(const PreparedCase& prepared, const Numerics& n) {
  const PreparedCase& pc = prepared.judged_as(n);
  Tolerances out;
  for (const auto& [name, ref_t] : pc.reference) {
    const ErrorModel& model = pc.model.at(name);
    const auto ref = ref_t.to_f64();
    auto& tol = out[name];
    tol.resize(ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) tol[i] = tolerance(model, n, i, ref[i]);
  }
  return out;
}

PairDivergence pair_divergence(const Outputs& a, const Tolerances& tol_a, const Outputs& b,
                               const Tolerances& tol_b) {
  PairDivergence d;
  for (const auto& [name, ta] : a) {
    const auto it = b.find(name);
    const auto ita = tol_a.find(name), itb = tol_b.find(name);
    if (it == b.end() || ita == tol_a.end() || itb == tol_b.end()) continue;
    const auto va = ta.to_f64(), vb = it->second.to_f64();
    const std::size_t n = std::min({va.size(), vb.size(), ita->second.size(), itb->second.size()});
    for (std::size_t i = 0; i < n; ++i) {
      if (va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i]))) continue;
      if (!std::isfinite(va[i]) || !std::isfinite(vb[i])) {
        d.nonfinite = true;
        continue;
      }
      const double pair_tol = ita->second[i] + itb->second[i];
      d.max_ratio = std::max(d.max_ratio, pair_tol > 0 ? std::fabs(va[i] - vb[i]) / pair_tol : kInf);
    }
  }
  return d;
}

Evaluation compare_fused_unfused(const PreparedCase& pc, const Outputs& fused, const Numerics& fused_numerics,
                                 const Outputs& unfused, const Numerics& unfused_numerics) {
  Evaluation ev;
  for (const auto& [name, ref_t] : pc.reference) {
    const ErrorModel& model = pc.model.at(name);
    const auto ref = ref_t.to_f64(), a = fused.at(name).to_f64(), b = unfused.at(name).to_f64();
    const auto tol = [&](std::size_t i, double r) {
      return tolerance(model, fused_numerics, i, r) + tolerance(model, unfused_numerics, i, r);
    };
    for (std::size_t i = 0; i < a.size() && ev.verdict == Verdict::kPass; ++i) {
      if (std::isnan(a[i]) != std::isnan(b[i]) || ((std::isinf(a[i]) || std::isinf(b[i])) && a[i] != b[i])) {
        ev.verdict = Verdict::kFusedUnfusedDrift;
        ev.detail = fmt::format("{}: fused {} vs unfused {}",
                                where(name, static_cast<std::int64_t>(i), ref_t.shape()), a[i], b[i]);
      }
    }
    // The unfused output plays the reference: the ratio is |fused - unfused| / (tol_fused + tol_unfused).
    Compared c = compare(name, b, a, model, [&](std::size_t i, double) { return tol(i, ref[i]); });
    fill_worst(c, ref_t.shape(), b, a, [&](std::size_t i, double) { return tol(i, ref[i]); });
    if (ev.verdict == Verdict::kPass && c.m.worst_ratio > 1) {
      ev.verdict = Verdict::kFusedUnfusedDrift;
      ev.detail = "fused vs unfused: " + worst_line(c.m);
    }
    ev.worst_ratio = std::max(ev.worst_ratio, c.m.worst_ratio);
    ev.metrics.push_back(std::move(c.m));
  }
  ev.outputs = fused;
  return ev;
}

}  // namespace driftcheck::fuzz
