// The exchange manifest (driftcheck.exchange v2, and v1 read) and the case files it names: writing an entry
// and a case file for export, reading and cross-checking them for check (docs/EXCHANGE.md).
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "driftcheck/external/protocol.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/exchange.hpp"
#include "driftcheck/fuzz/exchange_files.hpp"
#include "driftcheck/fuzz/json_fields.hpp"
#include "driftcheck/io/safetensors.hpp"

namespace driftcheck::fuzz {
namespace {

using nlohmann::json;

// Case ids become file names: no separators, no "..", nothing a shell or another OS would read differently.
bool valid_id(std::string_view id) {
  return !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-';
  });
}

std::string text_of(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ExchangeError(fmt::format("{}: cannot be read", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Storage names and, for each storage, a tensor that views it (the first in name order).
void read_storages(const json& case_object, ManifestCase& mc) {
  const json& storages = array_field(case_object, "storages");
  const json& tensors = object_field(case_object, "tensors");
  std::set<std::string> seen;
  for (const json& s : storages) {
    const std::string name = within_field(fmt::format("storages[{}]", mc.storage_names.size()),
                                          [&] { return string_field(s, "name"); });
    if (name.empty() || is_reference_tensor(name) || !seen.insert(name).second)
      throw ExchangeError(
          fmt::format("storage {}: \"name\" is missing, reserved or repeated", mc.storage_names.size()));
    mc.storage_names.push_back(name);
  }
  mc.storage_views.assign(mc.storage_names.size(), "");
  for (const auto& [name, t] : tensors.items()) {
    const json& s = t.is_object() ? t.value("storage", json()) : json();
    if (s.is_number_unsigned() && s.get<std::uint64_t>() < mc.storage_views.size() &&
        mc.storage_views[s.get<std::size_t>()].empty())
      mc.storage_views[s.get<std::size_t>()] = name;
  }
  for (std::size_t i = 0; i < mc.storage_views.size(); ++i)
    if (mc.storage_views[i].empty())
      throw ExchangeError(fmt::format("storage \"{}\" is viewed by no tensor", mc.storage_names[i]));
}

// An attention entry's "references" (version 2): new-token source -> prefix of its reference tensors.
std::map<std::string, std::string> parse_references(const json& e, OpKind op) {
  const auto it = e.find("references");
  if (op != OpKind::kAttention) {
    if (it != e.end())
      throw ExchangeError(
          fmt::format("\"references\" on a {} case (only attention has a new-token source)", op_name(op)));
    return {};
  }
  if (it == e.end() || !it->is_object() || it->empty())
    throw ExchangeError("\"references\" is missing or not a non-empty object (version 2 attention cases)");
  std::map<std::string, std::string> refs;
  for (const auto& [source, prefix] : it->items()) {
    const std::string p = prefix.is_string() ? prefix.get<std::string>() : "";
    if ((source != "cache" && source != "inputs") || (p != kReferencePrefix && p != kFromInputsPrefix))
      throw ExchangeError(fmt::format(
          "\"references\": {}: {}: expected \"cache\" or \"inputs\", each mapped to \"{}\" or \"{}\"",
          json(source).dump(), prefix.dump(), kReferencePrefix, kFromInputsPrefix));
    refs[source] = p;
  }
  return refs;
}

ManifestCase parse_entry(const json& e, int version) {
  if (!e.is_object()) throw ExchangeError("not an object");
  ManifestCase mc;
  mc.id = string_field(e, "id");
  if (!valid_id(mc.id)) throw ExchangeError(fmt::format("id \"{}\" is not [A-Za-z0-9_-]{{1,64}}", mc.id));
  mc.seed = u64_field(e, "seed"), mc.index = u64_field(e, "index");
  try {
    mc.spec = json_field(e, "spec").get<CaseSpec>();
  } catch (const std::exception& ex) {
    throw ExchangeError(fmt::format("spec: {}", ex.what()));
  }
  mc.op = mc.spec.op;
  mc.shape_class = shape_class(mc.spec);
  mc.case_object = object_field(e, "case");
  within_field("case", [&] {
    if (const std::string op = string_field(mc.case_object, "op"); op != op_name(mc.op))
      throw ExchangeError(fmt::format("case op \"{}\" disagrees with the spec's {}", op, op_name(mc.op)));
    read_storages(mc.case_object, mc);
  });
  if (version >= 2)
    mc.references = parse_references(e, mc.op);
  else if (mc.op == OpKind::kAttention)
    mc.references = {{"cache", std::string(kReferencePrefix)}};  // version 1 wrote the cache semantics only
  return mc;
}

}  // namespace

std::string storage_name(const Case& c, const Storage* s) {
  for (const auto& [name, t] : c.tensors)
    if (t.storage().get() == s) return name;
  return {};
}

std::string_view export_new_kv_name(ExportNewKv n) {
  switch (n) {
    case ExportNewKv::kCache:
      return "cache";
    case ExportNewKv::kInputs:
      return "inputs";
    case ExportNewKv::kBoth:
      return "both";
  }
  return "?";
}

bool parse_export_new_kv(std::string_view text, ExportNewKv* out) {
  for (ExportNewKv n : {ExportNewKv::kCache, ExportNewKv::kInputs, ExportNewKv::kBoth})
    if (text == export_new_kv_name(n)) {
      *out = n;
      return true;
    }
  return false;
}

json manifest_entry(const std::string& id, const CaseSpec& spec, const Case& c, const json& references) {
  json case_object = external::case_json(c, nullptr);
  // The protocol lists storages in order of first use over the tensors in name order: each is named after
  // its first tensor, the key of its bytes in the case file and in the outputs file.
  std::vector<std::string> names;
  for (const auto& [name, t] : c.tensors)
    if (std::find(names.begin(), names.end(), storage_name(c, t.storage().get())) == names.end())
      names.push_back(storage_name(c, t.storage().get()));
  for (std::size_t i = 0; i < names.size(); ++i) case_object["storages"][i]["name"] = names[i];
  // Each tensor's role, for readers that do not want to search the inputs and outputs lists.
  const OpSignature sig = op_signature(c);
  const auto in = [](const std::vector<std::string>& v, const std::string& n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  for (auto& [name, t] : case_object["tensors"].items())
    t["role"] = in(sig.outputs, name) ? (in(sig.inputs, name) ? "in_place" : "output") : "input";
  json entry = {{"id", id},
                {"file", fmt::format("cases/{}.safetensors", id)},
                {"outputs_file", fmt::format("{}.safetensors", id)},
                {"seed", c.seed},
                {"index", c.index},
                {"op", op_name(c.op)},
                {"shape_class", shape_class(spec)},
                {"replay", stream_replay_command(c.op, c.seed, c.index, "<backend>")},
                {"spec", spec},
                {"case", case_object}};
  if (!references.is_null()) entry["references"] = references;
  return entry;
}

io::Safetensors case_file(const std::string& id, const Case& c, const Outputs& reference,
                          const Outputs* from_inputs) {
  io::Safetensors f;
  for (const auto& [name, t] : c.tensors) {
    const std::string key = storage_name(c, t.storage().get());
    if (!f.tensors.count(key)) f.tensors[key] = {{t.storage()->numel()}, t.storage()};
  }
  for (const auto& [name, t] : reference)
    f.tensors[std::string(kReferencePrefix) + name] = {t.shape(), t.storage()};
  if (from_inputs != nullptr)
    for (const auto& [name, t] : *from_inputs)
      f.tensors[std::string(kFromInputsPrefix) + name] = {t.shape(), t.storage()};
  f.metadata = {{"driftcheck.format", fmt::format("{}/{}", kExchangeFormat, kExchangeFormatVersion)},
                {"driftcheck.case", id}};
  return f;
}

Manifest parse_manifest(std::string_view text, const std::filesystem::path& file) {
  const auto fail = [&](const std::string& why) {
    throw ExchangeError(fmt::format("{}: {}", file.string(), why));
  };
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail("not a JSON object");
  // Version 2 is written; version 1 (no new-token source: every reference is NewKv::kCache) is still read.
  int version = kExchangeFormatVersion;
  if (const std::string problem = format_problem(j, kExchangeFormat, kExchangeFormatVersion);
      !problem.empty()) {
    if (!format_problem(j, kExchangeFormat, 1).empty()) {
      if (problem.starts_with("format is not")) fail(problem);
      const auto v = j.find("format_version");
      fail(fmt::format("format version {} (this driftcheck reads 1 and {})",
                       v == j.end() ? "missing" : v->dump(), kExchangeFormatVersion));
    }
    version = 1;
  }
  const auto cases = j.find("cases");
  if (cases == j.end() || !cases->is_array()) fail("\"cases\" is missing or not an array");
  Manifest m;
  m.dir = file.parent_path();
  m.format_version = version;
  m.seed = j.value("seed", json(0)).is_number_unsigned() ? j["seed"].get<std::uint64_t>() : 0;
  if (version >= 2) {
    const auto n = j.find("new_kv");
    if (n == j.end() || !n->is_string() || !parse_export_new_kv(n->get<std::string>(), &m.new_kv))
      fail(fmt::format("\"new_kv\" is {}, not \"cache\", \"inputs\" or \"both\"",
                       n == j.end() ? "missing" : n->dump()));
  }
  std::set<std::string> ids;
  for (std::size_t i = 0; i < cases->size(); ++i) {
    try {
      ManifestCase mc = parse_entry((*cases)[i], version);
      if (!ids.insert(mc.id).second) throw ExchangeError(fmt::format("id \"{}\" appears twice", mc.id));
      if (std::find(m.ops.begin(), m.ops.end(), mc.op) == m.ops.end()) m.ops.push_back(mc.op);
      m.cases.push_back(std::move(mc));
    } catch (const std::exception& e) {  // ExchangeError, FieldError, or the spec's InvalidArgument
      m.errors.push_back(one_line(fmt::format("{}: case {}: {}", file.string(), i, e.what())));
    }
  }
  return m;
}

Manifest read_manifest(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / kManifestName;
  if (!std::filesystem::exists(file))
    throw ExchangeError(fmt::format("{}: missing (is {} a driftcheck export?)", file.string(), dir.string()));
  return parse_manifest(text_of(file), file);
}

Case load_case(const Manifest& m, const ManifestCase& mc) {
  const std::filesystem::path path = m.dir / "cases" / (mc.id + ".safetensors");
  const auto fail = [&](const std::string& why) {
    throw ExchangeError(fmt::format("{}: {}", path.string(), why));
  };
  io::Safetensors file;
  try {
    file = io::read_safetensors(path);
  } catch (const io::SafetensorsError& e) {
    throw ExchangeError(e.what());
  }
  if (const auto it = file.metadata.find("driftcheck.case"); it != file.metadata.end() && it->second != mc.id)
    fail(fmt::format("holds case \"{}\", the manifest says \"{}\"", it->second, mc.id));
  // The storages come from the file: a manifest cannot make check allocate more than the file holds.
  std::uint64_t file_bytes = 0;
  for (const auto& [name, t] : file.tensors) file_bytes += t.data->bytes.size();
  external::DecodedCase d;
  try {
    d = external::decode_case(mc.case_object, {}, file_bytes);
  } catch (const std::exception& e) {
    throw ExchangeError(fmt::format("{}: case {}: {}", (m.dir / kManifestName).string(), mc.id, e.what()));
  }
  fill_storages(file, mc, d.storages, path, /*require_all=*/true);
  for (const auto& [name, t] : file.tensors)
    if (!is_reference_tensor(name) &&
        std::find(mc.storage_names.begin(), mc.storage_names.end(), name) == mc.storage_names.end())
      fail(fmt::format("holds tensor \"{}\", which the manifest does not list", name));
  Case c = std::move(d.c);
  c.seed = mc.seed, c.index = mc.index;
  try {
    validate(c);
  } catch (const InvalidArgument& e) {
    fail(fmt::format("with the manifest's layout, not a valid {} case: {}", op_name(c.op), e.what()));
  }
  return c;
}

void fill_storages(const io::Safetensors& file, const ManifestCase& mc,
                   const std::vector<std::shared_ptr<Storage>>& storages, const std::filesystem::path& path,
                   bool require_all) {
  for (std::size_t i = 0; i < storages.size(); ++i) {
    const std::string& name = mc.storage_names[i];
    const auto it = file.tensors.find(name);
    if (it == file.tensors.end()) {
      if (!require_all) continue;
      throw ExchangeError(fmt::format("{}: has no tensor \"{}\" (storage {} of case {} in the manifest)",
                                      path.string(), name, i, mc.id));
    }
    const Storage& got = *it->second.data;
    Storage& want = *storages[i];
    if (got.dtype != want.dtype || got.numel() != want.numel() || it->second.shape.size() != 1)
      throw ExchangeError(fmt::format(
          "{}: tensor \"{}\" is {}[{}], the manifest says {}[{}] (the whole storage)", path.string(), name,
          dtype_name(got.dtype), fmt::join(it->second.shape, ", "), dtype_name(want.dtype), want.numel()));
    want.bytes = got.bytes;
  }
}

}  // namespace driftcheck::fuzz
