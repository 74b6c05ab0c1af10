#include "driftcheck/fuzz/gate_config.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/fuzz/input_error.hpp"
#include "driftcheck/fuzz/sha256.hpp"

namespace driftcheck::fuzz {
namespace {

// Typed access to one TOML table with errors that name the file, the line and the key, and a check that every
// key of the table was understood (a misspelt key must not silently fall back to a default).
class Table {
 public:
  Table(const toml::table& t, std::string name, const std::filesystem::path& file)
      : t_(t), name_(std::move(name)), file_(file) {}

  [[noreturn]] void fail(const toml::node* at, std::string_view what) const {
    const auto line = at != nullptr ? at->source().begin.line : t_.source().begin.line;
    throw InputError("config", fmt::format("{}:{}: {}", file_.string(), line, what));
  }
  std::string key_name(std::string_view key) const {
    return name_.empty() ? std::string(key) : fmt::format("{}.{}", name_, key);
  }
  const toml::node* find(std::string_view key) {
    seen_.insert(std::string(key));
    return t_.get(key);
  }
  template <class T>
  std::optional<T> get(std::string_view key, std::string_view type) {
    const toml::node* n = find(key);
    if (n == nullptr) return std::nullopt;
    if (auto v = n->value_exact<T>()) return *v;
    fail(n, fmt::format("{} must be {}", key_name(key), type));
  }
  double number(std::string_view key, double fallback) {
    const toml::node* n = find(key);
    if (n == nullptr) return fallback;
    if (auto v = n->value<double>()) return *v;  // integers are numbers too
    fail(n, fmt::format("{} must be a number", key_name(key)));
  }
  std::vector<std::string> strings(std::string_view key) {
    std::vector<std::string> out;
    const toml::node* n = find(key);
    if (n == nullptr) return out;
    const toml::array* a = n->as_array();
    if (a == nullptr) fail(n, fmt::format("{} must be an array of strings", key_name(key)));
    for (const auto& e : *a) {
      if (!e.is_string()) fail(&e, fmt::format("{} must be an array of strings", key_name(key)));
      out.push_back(*e.value<std::string>());
    }
    return out;
  }
  std::optional<Table> table(std::string_view key) {
    const toml::node* n = find(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_table()) fail(n, fmt::format("{} must be a table", key_name(key)));
    return Table(*n->as_table(), key_name(key), file_);
  }
  // After every get: a key nobody asked for is a typo or a key of another version.
  void no_unknown_keys() const {
    for (const auto& [k, v] : t_)
      if (!seen_.count(std::string(k.str()))) fail(&v, fmt::format("unknown key '{}'", key_name(k.str())));
  }
  const toml::table& raw() const { return t_; }
  const std::string& name() const { return name_; }
  const std::filesystem::path& file() const { return file_; }

 private:
  const toml::table& t_;
  std::string name_;
  const std::filesystem::path& file_;
  std::set<std::string> seen_;
};

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("config", fmt::format("{}: cannot read the file", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::filesystem::path resolve(const std::filesystem::path& file, const std::string& p) {
  const std::filesystem::path path(p);
  return path.is_absolute() ? path : (file.parent_path() / path).lexically_normal();
}

void check_budget(Table& t, const Budget& b) {
  const bool tolerance_allowed = std::find(b.allowed_verdicts.begin(), b.allowed_verdicts.end(),
                                           "beyond_tolerance") != b.allowed_verdicts.end();
  for (const auto& v : b.allowed_verdicts) {
    Verdict parsed;
    if (!parse_verdict(v, &parsed))
      t.fail(nullptr, fmt::format("{}: unknown verdict '{}'", t.key_name("allowed_verdicts"), v));
    if (parsed == Verdict::kUnsupported)
      t.fail(
          nullptr,
          fmt::format("{}: 'unsupported' is not a verdict a case can fail with (declined cases never count)",
                      t.key_name("allowed_verdicts")));
  }
  if (std::find(b.allowed_verdicts.begin(), b.allowed_verdicts.end(), "pass") == b.allowed_verdicts.end())
    t.fail(nullptr, fmt::format("{} must include 'pass'", t.key_name("allowed_verdicts")));
  if (std::isnan(b.max_ratio) || b.max_ratio <= 0)
    t.fail(nullptr, fmt::format("{} must be > 0, got {}", t.key_name("max_ratio"), b.max_ratio));
  if (std::isnan(b.max_share_beyond) || b.max_share_beyond < 0 || b.max_share_beyond > 1)
    t.fail(nullptr,
           fmt::format("{} must be in [0, 1], got {}", t.key_name("max_share_beyond"), b.max_share_beyond));
  // A case beyond its tolerance has the verdict beyond_tolerance: a budget that allows the one but not the
  // other contradicts itself.
  if ((b.max_ratio > 1 || b.max_share_beyond > 0) && !tolerance_allowed)
    t.fail(nullptr,
           fmt::format("{}: max_ratio > 1 or max_share_beyond > 0 allows errors beyond tolerance, so "
                       "allowed_verdicts must include 'beyond_tolerance'",
                       t.name()));
}

Budget read_budget(Table t, std::string pattern, const Budget& base) {
  Budget b = base;
  b.pattern = std::move(pattern);
  if (t.raw().contains("allowed_verdicts")) b.allowed_verdicts = t.strings("allowed_verdicts");
  b.max_ratio = t.number("max_ratio", b.max_ratio);
  b.max_share_beyond = t.number("max_share_beyond", b.max_share_beyond);
  t.no_unknown_keys();
  check_budget(t, b);
  return b;
}

void read_budgets(Table& root, GateConfig& c) {
  auto budgets = root.table("budgets");
  if (!budgets) return;
  if (auto d = budgets->table("default")) c.default_budget = read_budget(*d, "default", c.default_budget);
  for (const auto& [key, node] : budgets->raw()) {
    const std::string pattern(key.str());
    if (pattern == "default") continue;
    auto t = budgets->table(pattern);
    if (pattern.empty()) t->fail(&node, "budgets: a budget needs a backend name or glob");
    c.budgets.push_back(read_budget(*t, pattern, c.default_budget));
  }
}

void read_margin(Table& root, GateConfig& c) {
  auto m = root.table("margin");
  if (!m) return;
  c.margin.ratio = m->number("ratio", c.margin.ratio);
  c.margin.mean_signed_ulps = m->number("mean_signed_ulps", c.margin.mean_signed_ulps);
  m->no_unknown_keys();
  for (double v : {c.margin.ratio, c.margin.mean_signed_ulps})
    if (!std::isfinite(v) || v < 0)
      m->fail(nullptr, fmt::format("margin values must be finite and >= 0, got {}", v));
}

std::uint64_t positive_integer(Table& t, std::string_view key, bool required, std::uint64_t fallback) {
  const auto v = t.get<std::int64_t>(key, "an integer");
  if (!v) {
    if (required) t.fail(nullptr, fmt::format("{} is required", t.key_name(key)));
    return fallback;
  }
  if (*v < 0 || (key == "cases" && *v == 0))
    t.fail(t.raw().get(key),
           fmt::format("{} must be {}, got {}", t.key_name(key), key == "cases" ? "> 0" : ">= 0", *v));
  return static_cast<std::uint64_t>(*v);
}

void read_gate(Table& root, GateConfig& c) {
  auto g = root.table("gate");
  if (!g) root.fail(nullptr, "a [gate] table is required");
  for (const auto& name : g->strings("ops")) {
    OpKind op;
    if (!parse_op(name, &op))
      g->fail(
          nullptr,
          fmt::format("gate.ops: unknown op '{}' (ops: rmsnorm, concat, dual_rmsnorm_cat, attention)", name));
    c.ops.push_back(op);
  }
  c.backends = g->strings("backends");
  if (c.backends.empty()) g->fail(nullptr, "gate.backends is required: the backends (globs) the gate judges");
  for (const auto& name : g->strings("formats")) {
    DType t;
    if (!parse_dtype(name, &t) || t == DType::kI32 || t == DType::kF64)
      g->fail(nullptr,
              fmt::format("gate.formats: unknown format '{}' (bf16, fp16, fp32, fp8_e4m3fn, fp8_e4m3fnuz, "
                          "fp8_e5m2)",
                          name));
    c.formats.push_back(t);
  }
  c.seed = positive_integer(*g, "seed", false, 1);
  c.cases = positive_integer(*g, "cases", true, 0);
  // A gate is a CI step: a stream longer than this is a campaign, and a typo (an extra digit) is caught here.
  constexpr std::uint64_t kMaxCases = 100'000'000;
  if (c.cases > kMaxCases) g->fail(nullptr, fmt::format("gate.cases {} is more than {}", c.cases, kMaxCases));
  c.large_shapes = g->get<bool>("large_shapes", "true or false").value_or(true);
  const auto path_of = [&](std::string_view key) -> std::optional<std::filesystem::path> {
    const auto v = g->get<std::string>(key, "a path (string)");
    if (!v) return std::nullopt;
    if (v->empty()) g->fail(g->raw().get(key), fmt::format("gate.{} is an empty path", key));
    return resolve(root.file(), *v);
  };
  const auto baseline = path_of("baseline");
  if (!baseline)
    g->fail(nullptr, "gate.baseline is required: the file the gate compares its statistics with");
  c.baseline = *baseline;
  c.corpus = path_of("corpus"), c.golden = path_of("golden"), c.backends_file = path_of("backends_file");
  g->no_unknown_keys();
}

}  // namespace

const Budget& GateConfig::budget_for(std::string_view backend) const {
  const Budget* best = nullptr;
  std::size_t best_literal = 0;
  for (const auto& b : budgets) {
    if (!glob_match(b.pattern, backend)) continue;
    const std::size_t literal = b.pattern == backend
                                    ? std::string::npos
                                    : b.pattern.size() - std::count(b.pattern.begin(), b.pattern.end(), '*') -
                                          std::count(b.pattern.begin(), b.pattern.end(), '?');
    if (best != nullptr && literal == best_literal)
      throw InputError("config",
                       fmt::format("{}: backend {} matches budgets '{}' and '{}' equally: make one more "
                                   "specific",
                                   path.string(), backend, best->pattern, b.pattern));
    if (best == nullptr || literal > best_literal) best = &b, best_literal = literal;
  }
  return best != nullptr ? *best : default_budget;
}

std::string GateConfig::stream() const {
  std::vector<std::string_view> op_names, format_names;
  for (OpKind op : ops) op_names.push_back(op_name(op));
  for (DType t : formats) format_names.push_back(dtype_name(t));
  return fmt::format("seed {}, {} cases, ops {}, formats {}{}", seed, cases,
                     op_names.empty() ? "all" : fmt::format("{}", fmt::join(op_names, ",")),
                     format_names.empty() ? "all" : fmt::format("{}", fmt::join(format_names, ",")),
                     large_shapes ? "" : ", small shapes");
}

GateConfig parse_gate_config(std::string_view text, const std::filesystem::path& name) {
  toml::table doc;
  try {
    doc = toml::parse(text, name.string());
  } catch (const toml::parse_error& e) {
    throw InputError("config",
                     fmt::format("{}:{}: {}", name.string(), e.source().begin.line, e.description()));
  }
  GateConfig c;
  c.path = name;
  c.sha256 = sha256_hex(text);
  Table root(doc, "", c.path);
  const auto version = root.get<std::int64_t>("format_version", "an integer");
  if (!version)
    root.fail(nullptr,
              fmt::format("format_version is required (this driftcheck reads {})", kGateConfigVersion));
  if (*version != kGateConfigVersion)
    root.fail(doc.get("format_version"),
              fmt::format("format_version {} (this driftcheck reads {})", *version, kGateConfigVersion));
  read_gate(root, c);
  read_margin(root, c);
  read_budgets(root, c);
  root.no_unknown_keys();
  return c;
}

GateConfig load_gate_config(const std::filesystem::path& path) {
  return parse_gate_config(slurp(path), path);
}

}  // namespace driftcheck::fuzz
