#include "driftcheck/fuzz/golden.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/input_error.hpp"
#include "driftcheck/fuzz/json_fields.hpp"
#include "driftcheck/fuzz/sha256.hpp"
#include "driftcheck/io/safetensors.hpp"
#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::string_view kRefPrefix = "ref.";

[[noreturn]] void fail(const fs::path& file, std::string_view why) {
  throw InputError("golden", fmt::format("{}: {}", file.string(), why));
}

// The logical elements of a view as raw encodings (NaN payloads and fp8 codes kept), row-major.
io::StTensor gather(const Tensor& t) {
  io::StTensor out{t.shape(), std::make_shared<Storage>(t.dtype(), t.numel())};
  for (std::int64_t i = 0; i < t.numel(); ++i)
    out.data->store_bits(i, t.storage()->load_bits(t.index_of_linear(i)));
  return out;
}

void scatter(const io::StTensor& src, Tensor& view) {
  for (std::int64_t i = 0; i < view.numel(); ++i)
    view.storage()->store_bits(view.index_of_linear(i), src.data->load_bits(i));
}

std::string sha256_of(const io::StTensor& t) {
  return sha256_hex(
      std::string_view(reinterpret_cast<const char*>(t.data->bytes.data()), t.data->bytes.size()));
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot read the file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Case build(const GoldenDefinition& d) {
  Case c = materialize(d.spec);
  if (d.apply) {
    d.apply(c);
    if (c.op == OpKind::kAttention) add_new_kv(c, d.spec.value_seed);  // from the edited caches
  }
  validate(c);
  return c;
}

// The file contents of a definition: tensors (inputs, then ref.<output>) and the metadata.
struct Written {
  io::Safetensors tensors;
  json metadata;
};

Written render(const GoldenDefinition& d) {
  const Case c = build(d);
  Written w;
  json entries = json::object();
  const auto add = [&](const std::string& name, const Tensor& t, const char* role) {
    io::StTensor st = gather(t);
    entries[name] = {
        {"role", role}, {"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}, {"sha256", sha256_of(st)}};
    w.tensors.tensors[name] = std::move(st);
  };
  for (const auto& name : op_signature(c).inputs) add(name, c.tensor(name), "input");
  for (const auto& [name, t] : reference(c)) add(std::string(kRefPrefix) + name, t, "reference");
  w.metadata = {{"format", kGoldenFormatName},
                {"format_version", kGoldenFormatVersion},
                {"name", d.name},
                {"description", d.description},
                {"op", op_name(d.spec.op)},
                {"spec", d.spec},
                {"edit", d.edit},
                {"tensors_file", d.name + ".safetensors"},
                {"tensors", entries}};
  return w;
}

GoldenMetadata::TensorEntry tensor_entry(const json& e) {
  GoldenMetadata::TensorEntry t;
  const std::string dtype = string_field(e, "dtype");
  if (!parse_dtype(dtype, &t.dtype)) throw FieldError("dtype", fmt::format("unknown dtype '{}'", dtype));
  for (const auto& extent : array_field(e, "shape")) t.shape.push_back(int_value(extent, "shape", 0));
  t.sha256 = string_field(e, "sha256");
  if (t.sha256.size() != 64 || t.sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw FieldError("sha256", "expected 64 lower-case hex digits");
  return t;
}

// Every tensor of the file as the metadata describes it, and nothing else.
void check_tensors(const fs::path& meta, const fs::path& file, const GoldenMetadata& m,
                   const io::Safetensors& st) {
  const std::string listed_in = meta.filename().string();
  for (const auto& [name, e] : m.tensors) {
    const auto it = st.tensors.find(name);
    if (it == st.tensors.end()) fail(file, fmt::format("tensor {} listed in {} is missing", name, listed_in));
    const io::StTensor& t = it->second;
    if (e.dtype != t.data->dtype || e.shape != t.shape)
      fail(file, fmt::format("tensor {} is {}{} but {} says {}{}", name, dtype_name(t.data->dtype),
                             json(t.shape).dump(), listed_in, dtype_name(e.dtype), json(e.shape).dump()));
    const std::string sha = sha256_of(t);
    if (sha != e.sha256)
      fail(file, fmt::format("tensor {}: SHA-256 {} does not match {}'s {}", name, sha, listed_in, e.sha256));
  }
  for (const auto& [name, t] : st.tensors)
    if (!m.tensors.count(name)) fail(file, fmt::format("tensor {} is not listed in {}", name, listed_in));
}

GoldenCase load_one(const fs::path& meta) {
  const GoldenMetadata m = parse_golden_metadata(slurp(meta), meta);
  GoldenCase g;
  g.metadata = meta, g.name = m.name, g.description = m.description, g.spec = m.spec;
  const fs::path file = meta.parent_path() / m.tensors_file;
  io::Safetensors st;
  try {
    st = io::read_safetensors(file);
  } catch (const io::SafetensorsError& e) {
    throw InputError("golden", e.what());
  }
  check_tensors(meta, file, m, st);
  try {
    g.pristine = materialize(g.spec);
    // Files written before the cases carried the new tokens' K/V inputs: derived from the stored caches.
    const bool derive_new_kv = g.spec.op == OpKind::kAttention && !st.tensors.count("k_new");
    for (const auto& name : op_signature(g.pristine).inputs) {
      if (derive_new_kv && (name == "k_new" || name == "v_new")) continue;
      const auto it = st.tensors.find(name);
      if (it == st.tensors.end()) fail(file, fmt::format("input {} is missing", name));
      Tensor& view = g.pristine.tensor(name);
      if (view.shape() != it->second.shape || view.dtype() != it->second.data->dtype)
        fail(file,
             fmt::format("input {} is {}{}, the spec makes {}{}", name, dtype_name(it->second.data->dtype),
                         json(it->second.shape).dump(), dtype_name(view.dtype()), json(view.shape()).dump()));
      scatter(it->second, view);
    }
    for (const auto& [name, t] : st.tensors)
      if (name.starts_with(kRefPrefix)) g.reference[name.substr(kRefPrefix.size())] = t.view();
    if (derive_new_kv) add_new_kv(g.pristine, g.spec.value_seed);
    validate(g.pristine);
  } catch (const InvalidArgument& e) {
    fail(meta, e.what());
  }
  return g;
}

// Distance in ulps of fp64 between two finite doubles of one sign (their encodings are ordered).
double ulps_apart(double a, double b) {
  if (std::isnan(a) || std::isnan(b) || std::signbit(a) != std::signbit(b)) return INFINITY;
  const auto ia = std::bit_cast<std::int64_t>(a), ib = std::bit_cast<std::int64_t>(b);
  return static_cast<double>(ia > ib ? ia - ib : ib - ia);
}

std::string index_text(const Tensor& t, std::int64_t linear) {
  std::vector<std::int64_t> idx(t.shape().size());
  for (std::size_t d = idx.size(); d-- > 0;) {
    idx[d] = linear % t.shape()[d];
    linear /= t.shape()[d];
  }
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

// One line saying how `now` differs from `stored` bit for bit, or "" when it does not.
std::string output_change(const std::string& name, const Tensor& stored, const Tensor& now) {
  if (stored.shape() != now.shape())
    return fmt::format("{}: shape {} now, {} stored", name, json(now.shape()).dump(),
                       json(stored.shape()).dump());
  std::int64_t differ = 0, first = -1, worst = -1;
  double worst_ulps = -1;
  for (std::int64_t i = 0; i < stored.numel(); ++i) {
    const std::uint64_t a = stored.storage()->load_bits(stored.index_of_linear(i));
    const std::uint64_t b = now.storage()->load_bits(now.index_of_linear(i));
    if (a == b) continue;
    ++differ;
    if (first < 0) first = i;
    const double u = ulps_apart(std::bit_cast<double>(a), std::bit_cast<double>(b));
    if (u > worst_ulps) worst_ulps = u, worst = i;
  }
  if (differ == 0) return "";
  const auto value = [](const Tensor& t, std::int64_t i) { return t.storage()->load(t.index_of_linear(i)); };
  return fmt::format(
      "{}: {} of {} elements differ; first at {}: stored {:.17g}, now {:.17g}; largest at {}: stored "
      "{:.17g}, now {:.17g} ({} ulps of fp64)",
      name, differ, stored.numel(), index_text(stored, first), value(stored, first), value(now, first),
      index_text(stored, worst), value(stored, worst), value(now, worst), worst_ulps);
}

}  // namespace

GoldenMetadata parse_golden_metadata(std::string_view text, const fs::path& file) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail(file, "not a JSON object");
  GoldenMetadata m;
  try {
    if (const std::string problem = format_problem(j, kGoldenFormatName, kGoldenFormatVersion);
        !problem.empty())
      fail(file, problem);
    m.name = string_field(j, "name"), m.description = string_field(j, "description");
    m.spec = json_field(j, "spec").get<CaseSpec>();
    m.tensors_file = string_field(j, "tensors_file");
    // A file beside NAME.json: a path elsewhere (../x) would make the golden directory read outside itself.
    if (m.tensors_file.empty() || m.tensors_file.find('/') != std::string::npos || m.tensors_file == "." ||
        m.tensors_file == "..")
      throw FieldError("tensors_file", "expected a file name in the same directory");
    for (const auto& [name, e] : object_field(j, "tensors").items()) {
      const std::string field = "tensors." + name;
      // A named reference: clang before 16, which builds the libFuzzer targets, cannot capture a binding.
      const json& entry = e;
      if (!entry.is_object())
        throw FieldError(field, fmt::format("expected an object, got {}", entry.type_name()));
      m.tensors[name] = within_field(field, [&entry] { return tensor_entry(entry); });
    }
  } catch (const FieldError& e) {
    fail(file, e.what());
  } catch (const InvalidArgument& e) {  // CaseSpec's from_json names the spec field
    fail(file, e.what());
  }
  return m;
}

std::vector<GoldenCase> load_golden(const fs::path& dir, const std::vector<std::string>& names) {
  if (!fs::is_directory(dir)) fail(dir, "not a directory");
  std::vector<fs::path> metas;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") metas.push_back(e.path());
  std::sort(metas.begin(), metas.end());
  for (const auto& n : names)
    if (std::find(metas.begin(), metas.end(), dir / (n + ".json")) == metas.end())
      fail(dir, fmt::format("no golden case '{}'", n));
  std::vector<GoldenCase> out;
  for (const auto& m : metas) {
    if (!names.empty() && std::find(names.begin(), names.end(), m.stem().string()) == names.end()) continue;
    out.push_back(load_one(m));
  }
  if (out.empty()) fail(dir, "holds no golden case (NAME.json + NAME.safetensors)");
  return out;
}

std::vector<std::string> reference_changes(const GoldenCase& g) {
  const Outputs now = reference(g.pristine);
  std::vector<std::string> out;
  for (const auto& [name, stored] : g.reference) {
    const auto it = now.find(name);
    if (it == now.end()) {
      out.push_back(fmt::format("{}: the reference no longer computes it", name));
      continue;
    }
    if (auto line = output_change(name, stored, it->second); !line.empty()) out.push_back(std::move(line));
  }
  for (const auto& [name, t] : now)
    if (!g.reference.count(name)) out.push_back(fmt::format("{}: computed now, not stored", name));
  return out;
}

PreparedCase prepare_golden(const GoldenCase& g) {
  PreparedCase p;
  p.input = g.pristine.clone();
  p.reference = g.reference;
  p.baseline = naive_baseline(p.input);
  p.model = error_model(p.input, p.reference, p.baseline);
  p.from_inputs = prepare_from_inputs(p);  // not stored: golden files hold the cache semantics' reference
  return p;
}

Evaluation judge_golden(const Backend& b, const GoldenCase& g) {
  return evaluate(b, prepare_golden(g));
}

std::vector<std::string> update_golden(const fs::path& dir, const std::vector<std::string>& names) {
  fs::create_directories(dir);
  std::vector<std::string> lines;
  for (const auto& n : names)
    if (std::none_of(golden_definitions().begin(), golden_definitions().end(),
                     [&](const auto& d) { return d.name == n; }))
      throw InputError("golden", fmt::format("{}: no golden case '{}' is defined", dir.string(), n));
  for (const auto& d : golden_definitions()) {
    if (!names.empty() && std::find(names.begin(), names.end(), d.name) == names.end()) continue;
    const Written w = render(d);
    const fs::path meta = dir / (d.name + ".json"), file = dir / (d.name + ".safetensors");
    const std::string text = w.metadata.dump(2) + "\n";
    std::string state = "new";
    if (fs::exists(meta)) {
      const json old = json::parse(slurp(meta), nullptr, false);
      std::vector<std::string> moved;
      for (const auto& [name, e] : w.metadata["tensors"].items())
        if (old.is_discarded() || !old.contains("tensors") || !old["tensors"].contains(name) ||
            old["tensors"][name] != e)
          moved.push_back(name);
      state = moved.empty() && old == w.metadata ? "unchanged"
              : moved.empty()                    ? "rewritten (metadata)"
                              : fmt::format("rewritten ({} changed)", fmt::join(moved, ", "));
    }
    io::write_safetensors(file, w.tensors);
    files::write_file_atomic(meta, text);
    lines.push_back(fmt::format("{}: {}", d.name, state));
  }
  return lines;
}

}  // namespace driftcheck::fuzz
