#include "driftcheck/fuzz/known_findings.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "driftcheck/device/one_line.hpp"
#include "driftcheck/device/registry.hpp"

namespace driftcheck::fuzz {

extern const std::string_view kBuiltinKnownFindingsToml;  // known_findings_builtin.cpp (generated)

namespace {

// One line whatever the file holds: toml++ quotes the bytes it stopped at, and ids may hold escaped breaks.
[[noreturn]] void bad(std::string_view source, std::string_view what) {
  throw InvalidArgument(one_line(fmt::format("known findings {}: {}", source, what)));
}

std::string required(const toml::table& t, std::string_view key, std::string_view source, std::size_t index) {
  const auto v = t[key].value<std::string>();
  if (!v || v->empty()) bad(source, fmt::format("finding {} has no '{}' string", index + 1, key));
  return *v;
}

// backend is a comma-separated list of globs, like --backends.
bool names_backend(std::string_view globs, std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t start = 0; start <= globs.size();) {
    const std::size_t comma = std::min(globs.find(',', start), globs.size());
    std::string_view g = globs.substr(start, comma - start);
    while (!g.empty() && g.front() == ' ') g.remove_prefix(1);
    while (!g.empty() && g.back() == ' ') g.remove_suffix(1);
    if (!g.empty() && glob_match(g, name)) return true;
    start = comma + 1;
  }
  return false;
}

}  // namespace

KnownFindings parse_known_findings(std::string_view text, std::string_view source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    bad(source, fmt::format("not TOML: {} (line {})", e.description(), e.source().begin.line));
  }
  if (root["format"].value<std::string>() != "driftcheck-known-findings")
    bad(source, "format must be \"driftcheck-known-findings\"");
  // value_exact: a float version is refused, not converted (a huge one would overflow the integer).
  if (root["version"].value_exact<std::int64_t>() != kKnownFindingsVersion)
    bad(source, fmt::format("version must be {}", kKnownFindingsVersion));
  KnownFindings out;
  const toml::array* list = root["finding"].as_array();
  if (list == nullptr) return out;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const toml::table* t = (*list)[i].as_table();
    if (t == nullptr) bad(source, fmt::format("finding {} is not a table", i + 1));
    KnownFinding f{required(*t, "id", source, i),       required(*t, "backend", source, i),
                   required(*t, "defect", source, i),   required(*t, "summary", source, i),
                   required(*t, "upstream", source, i), required(*t, "issue", source, i),
                   required(*t, "replay", source, i)};
    for (const KnownFinding& g : out.findings)
      if (g.id == f.id) bad(source, fmt::format("duplicate id '{}'", f.id));
    out.findings.push_back(std::move(f));
  }
  return out;
}

KnownFindings read_known_findings(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(path.string(), "cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_known_findings(text.str(), path.string());
}

const KnownFindings& builtin_known_findings() {
  static const KnownFindings k =
      parse_known_findings(kBuiltinKnownFindingsToml, "golden/known-findings.toml");
  return k;
}

const Backend* twin_of(const Backend& backend) {
  if (backend.twin().empty() || !backend.modelled_defects().empty()) return nullptr;
  return registry().find(backend.twin());
}

std::optional<Outputs> outputs_on_abs_values(const Backend& backend, const Case& c) {
  Case abs = c.clone();
  for (const char* name : {"v_cache", "v_new"}) {
    if (!abs.has(name)) continue;
    std::vector<double> v = abs.tensor(name).to_f64();
    for (double& x : v) x = std::fabs(x);  // exact in every format; NaN stays NaN
    abs.tensor(name).copy_from(v);
  }
  try {
    backend.run(abs);
  } catch (const std::exception&) {
    return std::nullopt;  // no bound from a run that failed: the strict agreement stands
  }
  Outputs out;
  for (const std::string& name : op_signature(abs).outputs)
    out.emplace(name, abs.tensor(name).clone_contiguous());
  return out;
}

bool agrees_with_twin(const PreparedCase& prepared, const Outputs& kernel, const Numerics& kernel_numerics,
                      const Outputs& twin, const Numerics& twin_numerics, const Outputs* twin_on_abs_v) {
  const Tolerances tol_k = tolerances(prepared, kernel_numerics), tol_t = tolerances(prepared, twin_numerics);
  // Two executions of one defective attention computation whose P is rounded to act: where their fp32
  // weights differ by a few fp32 ulps (ex2.approx, the order of a dot product), a weight can round to the
  // neighbouring act value, |d act(p_i)| <= 2u act(p_i) (1 + u), which moves o = sum act(p_i) v_i / L by at
  // most 2u(1 + u) sum act(p_i) |v_i| / L: the twin's o on |V|, itself rounded (a factor 1 + 2u covers it).
  // Inside the twin's tolerance the strict bound holds; outside it the reference-derived tolerances bound
  // nothing of the defect's arithmetic, so this bound is added there.
  const bool p_rounded = kernel_numerics.p_rounded || twin_numerics.p_rounded;
  const PreparedCase& judged = prepared.judged_as(twin_numerics);
  std::vector<double> abs_o;
  if (twin_on_abs_v != nullptr && p_rounded && prepared.input.op == OpKind::kAttention)
    if (const auto it = twin_on_abs_v->find("o"); it != twin_on_abs_v->end()) abs_o = it->second.to_f64();
  const double u = prepared.input.has("o") ? unit_roundoff(prepared.input.tensor("o").dtype()) : 0.0;
  const double flip_factor = 2.0 * u * (1.0 + u) * (1.0 + 2.0 * u);
  for (const auto& [name, tk] : kernel) {
    const auto it = twin.find(name);
    const auto ik = tol_k.find(name), itt = tol_t.find(name);
    if (it == twin.end() || ik == tol_k.end() || itt == tol_t.end() || !prepared.input.has(name))
      return false;
    const DType format = prepared.input.tensor(name).dtype();
    const auto a = tk.to_f64(), b = it->second.to_f64();
    if (a.size() != b.size() || a.size() != ik->second.size() || a.size() != itt->second.size()) return false;
    const auto ref_it = judged.reference.find(name);
    const bool weighs = name == "o" && abs_o.size() == a.size() && ref_it != judged.reference.end();
    const std::vector<double> ref = weighs ? ref_it->second.to_f64() : std::vector<double>{};
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) continue;
      if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return false;
      const bool defect_region = weighs && !(std::fabs(b[i] - ref[i]) <= itt->second[i]);
      const double flip = defect_region && std::isfinite(abs_o[i]) ? flip_factor * std::fabs(abs_o[i]) : 0.0;
      const double slack =
          ik->second[i] + itt->second[i] + ulp(format, std::max(std::fabs(a[i]), std::fabs(b[i]))) + flip;
      if (std::fabs(a[i] - b[i]) > slack) return false;
    }
  }
  return !kernel.empty();
}

std::vector<const KnownFinding*> applicable_findings(const KnownFindings& known, const Backend& backend) {
  if (const Backend* twin = twin_of(backend)) return applicable_findings(known, *twin);
  const std::vector<std::string> defects = backend.modelled_defects();
  std::vector<const KnownFinding*> out;
  for (const KnownFinding& f : known.findings) {
    const bool named =
        names_backend(f.backend, backend.name()) || names_backend(f.backend, backend.mutates());
    if (named && std::find(defects.begin(), defects.end(), f.defect) != defects.end()) out.push_back(&f);
  }
  return out;
}

std::unique_ptr<Backend> repaired_backend(const KnownFindings& known, const Backend& backend) {
  std::vector<std::string> defects;
  for (const KnownFinding* f : applicable_findings(known, backend)) defects.push_back(f->defect);
  return defects.empty() ? nullptr : backend.without_defects(defects);
}

namespace {

// A kernel from outside that names its twin: the twin must fail the same case, explained by known findings,
// with outputs that agree with the kernel's.
std::vector<const KnownFinding*> explain_through_twin(const KnownFindings& known, const Backend& backend,
                                                      const Backend& twin, const PreparedCase& prepared,
                                                      const Evaluation& failed, const EvalOptions& opts) {
  if (applicable_findings(known, twin).empty()) return {};
  const Evaluation t = evaluate(twin, prepared, opts);
  if (!is_failure(t.verdict)) return {};
  const Numerics kn = backend.numerics_for(prepared.input), tn = twin.numerics_for(prepared.input);
  if (!agrees_with_twin(prepared, failed.outputs, kn, t.outputs, tn)) {
    // Where the strict bound fails, the weights' rounding bound needs the twin's o on |V|: one more run.
    if (prepared.input.op != OpKind::kAttention || !(kn.p_rounded || tn.p_rounded)) return {};
    const auto abs_v = outputs_on_abs_values(twin, prepared.input);
    if (!abs_v || !agrees_with_twin(prepared, failed.outputs, kn, t.outputs, tn, &*abs_v)) return {};
  }
  return explain_failure(known, twin, prepared, opts);
}

}  // namespace

std::vector<const KnownFinding*> explain_failure(const KnownFindings& known, const Backend& backend,
                                                 const PreparedCase& prepared, const Evaluation& failed,
                                                 const EvalOptions& opts) {
  if (const Backend* twin = twin_of(backend))
    return explain_through_twin(known, backend, *twin, prepared, failed, opts);
  return explain_failure(known, backend, prepared, opts);
}

std::vector<const KnownFinding*> explain_failure(const KnownFindings& known, const Backend& backend,
                                                 const PreparedCase& prepared, const EvalOptions& opts) {
  if (const Backend* twin = twin_of(backend)) {
    const Evaluation e = evaluate(backend, prepared, opts);
    return is_failure(e.verdict) ? explain_through_twin(known, backend, *twin, prepared, e, opts)
                                 : std::vector<const KnownFinding*>{};
  }
  const std::vector<const KnownFinding*> candidates = applicable_findings(known, backend);
  if (candidates.empty()) return {};
  std::vector<std::string> all;
  for (const KnownFinding* f : candidates) all.push_back(f->defect);
  const auto repaired = backend.without_defects(all);
  if (!repaired || is_failure(evaluate(*repaired, prepared, opts).verdict)) return {};
  if (candidates.size() == 1) return candidates;
  std::vector<const KnownFinding*> out;
  for (const KnownFinding* f : candidates) {
    std::vector<std::string> others;
    for (const std::string& d : all)
      if (d != f->defect) others.push_back(d);
    const auto partly = backend.without_defects(others);
    if (partly && is_failure(evaluate(*partly, prepared, opts).verdict)) out.push_back(f);
  }
  if (!out.empty()) return out;
  // No defect fails it alone (aiter's unmasked page tail needs its masked P.V to turn poison into NaN): name
  // those whose repair alone, the others left in, makes it pass.
  for (const KnownFinding* f : candidates) {
    const auto one = backend.without_defects({f->defect});
    if (one && !is_failure(evaluate(*one, prepared, opts).verdict)) out.push_back(f);
  }
  return out.empty() ? candidates : out;
}

std::string explained_ids(const KnownFindings& known, const Backend& backend, const PreparedCase& prepared) {
  std::string ids;
  for (const KnownFinding* f : explain_failure(known, backend, prepared))
    ids += (ids.empty() ? "" : ", ") + f->id;
  return ids;
}

}  // namespace driftcheck::fuzz
