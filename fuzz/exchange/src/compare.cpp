#include "driftcheck/fuzz/compare.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/campaign.hpp"

namespace driftcheck::fuzz {
namespace {

const Backend& named(const Registry& reg, const std::string& name) {
  const Backend* b = reg.find(name);
  if (b == nullptr) throw UsageError(fmt::format("unknown backend '{}' (driftcheck list shows them)", name));
  return *b;
}

// What selects a kernel's path, coarser than a shape class so that groups collect many cases.
std::string features_of(const CaseSpec& s) {
  if (s.op != OpKind::kAttention) return shape_class(s);
  const auto& p = std::get<AttentionParams>(s.params);
  const bool decode = std::all_of(s.query_lens.begin(), s.query_lens.end(), [](auto q) { return q <= 1; });
  return fmt::format("{}{}/{}{}{}{}", decode ? "decode" : "mixed",
                     decode ? fmt::format("/seqs{}", s.seq_lens.size() <= 8 ? "<=8" : ">8") : "",
                     dtype_name(s.kv_dtype), p.window > 0 ? "/window" : "", p.softcap > 0 ? "/softcap" : "",
                     p.has_sinks ? "/sinks" : "");
}

// Runs b on a copy of c; an empty optional and the reason when it declines or throws.
std::optional<Case> run_one(const Backend& b, const Case& c, Agreement* why, std::string* detail) {
  const Support s = b.supports(c);
  if (!s.ok) {
    *why = Agreement::kUnsupported, *detail = fmt::format("{}: {}", b.name(), s.reason);
    return std::nullopt;
  }
  Case out = c.clone();
  try {
    b.run(out);
  } catch (const BackendDeclined& e) {  // it found only at run time that it does not take the case
    *why = Agreement::kUnsupported, *detail = fmt::format("{}: {}", b.name(), e.what());
    return std::nullopt;
  } catch (const std::exception& e) {
    *why = Agreement::kError, *detail = fmt::format("{}: {}", b.name(), e.what());
    return std::nullopt;
  }
  return out;
}

Agreement classify(const CaseComparison& c) {
  if (c.nonfinite_a_only + c.nonfinite_b_only > 0) return Agreement::kNonFinite;
  if (c.identical == c.elements) return Agreement::kIdentical;
  if (c.max_ulps <= 1) return Agreement::kOneUlp;
  return c.max_ulps <= 4 ? Agreement::kFewUlps : Agreement::kLarger;
}

// Element by element over one output: bits (NaN = NaN, the sign of zero counts), ulps of its format.
void compare_output(const std::string& name, const Tensor& ta, const Tensor& tb, CaseComparison& cc) {
  const auto va = ta.to_f64(), vb = tb.to_f64();
  for (std::size_t i = 0; i < va.size(); ++i) {
    const double x = va[i], y = vb[i];
    ++cc.elements;
    if ((std::isnan(x) && std::isnan(y)) || (x == y && std::signbit(x) == std::signbit(y))) {
      ++cc.identical;
      continue;
    }
    if (!std::isfinite(x) || !std::isfinite(y)) {
      cc.nonfinite_a_only += !std::isfinite(x);
      cc.nonfinite_b_only += !std::isfinite(y);
      if (cc.worst.empty() || cc.max_ulps < INFINITY)
        cc.worst = fmt::format("{}[{}]: {} vs {}", name, i, x, y);
      cc.max_ulps = INFINITY;
      continue;
    }
    const double u = std::fabs(x - y) / ulp(ta.dtype(), std::max(std::fabs(x), std::fabs(y)));
    if (u > cc.max_ulps)
      cc.max_ulps = u, cc.worst = fmt::format("{}[{}]: {} vs {} ({:.3g} ulps)", name, i, x, y, u);
  }
}

}  // namespace

std::string_view agreement_name(Agreement a) {
  switch (a) {
    case Agreement::kIdentical:
      return "identical";
    case Agreement::kOneUlp:
      return "1_ulp";
    case Agreement::kFewUlps:
      return "2_4_ulps";
    case Agreement::kLarger:
      return "over_4_ulps";
    case Agreement::kNonFinite:
      return "non_finite";
    case Agreement::kUnsupported:
      return "unsupported";
    case Agreement::kError:
      return "error";
  }
  return "?";
}

CompareResult compare_backends(const CompareOptions& opts) {
  const Registry& reg = opts.backends ? *opts.backends : registry();
  const Backend& a = named(reg, opts.a);
  const Backend& b = named(reg, opts.b);
  if (a.op() != b.op())
    throw UsageError(fmt::format("{} runs {} and {} runs {}: nothing to compare", a.name(), op_name(a.op()),
                                 b.name(), op_name(b.op())));
  CompareResult r;
  for (std::uint64_t k = opts.first; k - opts.first < opts.cases; ++k) {
    const CaseSpec spec = draw_case(a.op(), opts.seed, k).value();
    Case c = materialize(spec);
    c.seed = opts.seed, c.index = k;
    CaseComparison cc;
    cc.index = k, cc.shape_class = shape_class(spec), cc.features = features_of(spec);
    const auto ra = run_one(a, c, &cc.agreement, &cc.worst);
    const auto rb = ra ? run_one(b, c, &cc.agreement, &cc.worst) : std::nullopt;
    if (ra && rb) {
      for (const std::string& name : op_signature(c).outputs) {
        if (!opts.outputs.empty() &&
            std::find(opts.outputs.begin(), opts.outputs.end(), name) == opts.outputs.end())
          continue;
        compare_output(name, ra->tensor(name), rb->tensor(name), cc);
      }
      cc.agreement = classify(cc);
    }
    ++r.by_features[cc.features][std::string(agreement_name(cc.agreement))];
    r.cases.push_back(std::move(cc));
  }
  return r;
}

std::string compare_markdown(const CompareOptions& opts, const CompareResult& r) {
  std::map<Agreement, std::int64_t> totals;
  std::int64_t elements = 0, identical = 0;
  for (const auto& c : r.cases) {
    ++totals[c.agreement];
    elements += c.elements, identical += c.identical;
  }
  std::string md = opts.first == 0 ? fmt::format("# {} vs {} (seed {}, {} cases)\n\n", opts.a, opts.b,
                                                 opts.seed, r.cases.size())
                                   : fmt::format("# {} vs {} (seed {}, {} cases from case {})\n\n", opts.a,
                                                 opts.b, opts.seed, r.cases.size(), opts.first);
  md += fmt::format(
      "Compared elements: {}, bit-identical: {} ({:.2f}%).\n\n| agreement | cases |\n|---|---:|\n", elements,
      identical, elements > 0 ? 100.0 * identical / elements : 0.0);
  for (const auto& [a, n] : totals) md += fmt::format("| {} | {} |\n", agreement_name(a), n);
  md += "\n| features | ";
  const Agreement all[] = {Agreement::kIdentical, Agreement::kOneUlp,    Agreement::kFewUlps,
                           Agreement::kLarger,    Agreement::kNonFinite, Agreement::kUnsupported,
                           Agreement::kError};
  for (Agreement a : all) md += fmt::format("{} | ", agreement_name(a));
  md += "\n|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& [f, counts] : r.by_features) {
    md += fmt::format("| {} |", f);
    for (Agreement a : all) {
      const auto it = counts.find(std::string(agreement_name(a)));
      md += fmt::format(" {} |", it == counts.end() ? 0 : it->second);
    }
    md += "\n";
  }
  md += "\nCases that are neither identical nor within 1 ulp:\n\n";
  for (const auto& c : r.cases)
    if (c.agreement != Agreement::kIdentical && c.agreement != Agreement::kOneUlp)
      md += fmt::format("- case {} ({}) {}: {}\n", c.index, c.shape_class, agreement_name(c.agreement),
                        c.worst);
  return md;
}

}  // namespace driftcheck::fuzz
