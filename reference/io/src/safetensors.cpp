#include "driftcheck/io/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "driftcheck/files/file_io.hpp"

namespace driftcheck::io {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is copied in host order");

using nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::string_view kFnuzName = "fp8_e4m3fnuz";

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::kF64, "F64"},   {DType::kF32, "F32"},          {DType::kF16, "F16"},
    {DType::kBF16, "BF16"}, {DType::kF8E4M3FN, "F8_E4M3"}, {DType::kF8E5M2, "F8_E5M2"},
    {DType::kI32, "I32"},   {DType::kF8E4M3FNUZ, "U8"},
};

// A name as it appears in a message: JSON-quoted, so a name holding a newline or a quote stays on one line.
std::string shown(std::string_view name) {
  return json(std::string(name)).dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
}

class Parser {
 public:
  Parser(std::string_view bytes, std::string_view file) : bytes_(bytes), file_(file) {}
  Safetensors parse();

 private:
  [[noreturn]] void fail(std::string_view why) const {
    throw SafetensorsError(fmt::format("{}: {}", file_, why));
  }
  std::string_view header();
  json parse_json(std::string_view text) const;
  void read_metadata(const json& j, Safetensors& out) const;
  struct Entry {
    std::string name;
    std::string dtype;
    Shape shape;
    std::uint64_t begin = 0, end = 0;
    DType dt = DType::kF64;
  };
  Entry read_entry(const std::string& name, const json& j) const;
  std::uint64_t checked_bytes(const Entry& e, int elem_size) const;
  void check_tiling(std::vector<Entry>& entries) const;
  DType resolve_dtype(const Entry& e, Safetensors& out) const;

  std::string_view bytes_;
  std::string_view file_;
  std::string_view data_;  // the data buffer: everything after the header
};

std::string_view Parser::header() {
  if (bytes_.size() < 8)
    fail(fmt::format("{} bytes, shorter than the 8-byte header length (truncated or not safetensors)",
                     bytes_.size()));
  std::uint64_t n = 0;
  std::memcpy(&n, bytes_.data(), sizeof n);
  if (n > kMaxSafetensorsHeader)
    fail(fmt::format("header length {} exceeds the specification's limit of {} bytes (corrupted)", n,
                     kMaxSafetensorsHeader));
  if (n > bytes_.size() - 8)
    fail(fmt::format("header length {} exceeds the {} bytes that follow it (truncated or corrupted)", n,
                     bytes_.size() - 8));
  std::string_view h = bytes_.substr(8, n);
  data_ = bytes_.substr(8 + n);
  if (h.empty() || h.front() != '{') fail("header does not start with '{' (not safetensors)");
  // The specification allows trailing spaces (0x20) as padding, and nothing else after the JSON object.
  while (!h.empty() && h.back() == ' ') h.remove_suffix(1);
  if (h.back() != '}') fail("header does not end with '}' followed only by spaces (corrupted)");
  return h;
}

// Parses the header, rejecting duplicate keys at any depth (nlohmann keeps the last silently; the
// specification forbids them, and two readers could otherwise disagree on which tensor a name means).
json Parser::parse_json(std::string_view text) const {
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  auto cb = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) keys.emplace_back();
    if (ev == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (ev == json::parse_event_t::key && !keys.empty() &&
        !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  json j;
  try {
    j = json::parse(text, cb);
  } catch (const json::parse_error& e) {
    fail(fmt::format("header is not valid JSON (byte {} of the header)", e.byte));
  } catch (const json::out_of_range&) {
    // nlohmann reports a number beyond a double's range (4e666) as out_of_range, not as a parse error.
    fail("header is not valid JSON (a number beyond the range of a double)");
  }
  if (!duplicate.empty()) fail(fmt::format("header has the key {} twice", shown(duplicate)));
  if (!j.is_object()) fail("header is not a JSON object");
  return j;
}

void Parser::read_metadata(const json& j, Safetensors& out) const {
  if (!j.is_object()) fail("__metadata__ is not an object of strings");
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string()) fail(fmt::format("__metadata__ value of {} is not a string", shown(k)));
    out.metadata[k] = v.get<std::string>();
  }
}

Parser::Entry Parser::read_entry(const std::string& name, const json& j) const {
  const std::uint64_t data_size = data_.size();
  const std::string what = "tensor " + shown(name);
  if (!j.is_object()) fail(what + " is not an object");
  for (const auto& [k, v] : j.items()) {
    (void)v;
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      fail(fmt::format("{} has an unknown field {}", what, shown(k)));
  }
  Entry e;
  e.name = name;
  const auto dt = j.find("dtype");
  if (dt == j.end() || !dt->is_string()) fail(what + " has no string dtype");
  e.dtype = dt->get<std::string>();
  const auto shape = j.find("shape");
  if (shape == j.end() || !shape->is_array()) fail(what + " has no shape array");
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned() || d.get<std::uint64_t>() > std::numeric_limits<std::int64_t>::max())
      fail(what + " has a shape entry that is not a non-negative integer");
    e.shape.push_back(d.get<std::int64_t>());
  }
  const auto off = j.find("data_offsets");
  if (off == j.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    fail(what + " has no data_offsets pair of non-negative integers");
  e.begin = (*off)[0].get<std::uint64_t>();
  e.end = (*off)[1].get<std::uint64_t>();
  if (e.begin > e.end || e.end > data_size)
    fail(fmt::format("{} has data_offsets [{}, {}] outside the {}-byte data buffer", what, e.begin, e.end,
                     data_size));
  return e;
}

// Bytes of a tensor of shape e.shape, or a failure when the product does not fit (a corrupted shape).
std::uint64_t Parser::checked_bytes(const Entry& e, int elem_size) const {
  std::uint64_t n = static_cast<std::uint64_t>(elem_size);
  bool overflow = false;
  for (std::int64_t d : e.shape) {
    const auto u = static_cast<std::uint64_t>(d);
    if (u != 0 && n > std::numeric_limits<std::uint64_t>::max() / u) overflow = true;
    n = overflow ? n : n * u;
  }
  if (overflow && std::find(e.shape.begin(), e.shape.end(), 0) == e.shape.end())
    fail(fmt::format("tensor {} has a shape whose size overflows", shown(e.name)));
  return overflow ? 0 : n;
}

void Parser::check_tiling(std::vector<Entry>& entries) const {
  const std::uint64_t data_size = data_.size();
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  std::uint64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < at)
      fail(fmt::format("tensors {} and {} overlap (bytes {} to {} of the data buffer)", shown(prev->name),
                       shown(e.name), e.begin, at));
    if (e.begin > at)
      fail(fmt::format("bytes {} to {} of the data buffer belong to no tensor (before {})", at, e.begin,
                       shown(e.name)));
    at = e.end;
    prev = &e;
  }
  if (at != data_size)
    fail(fmt::format("the data buffer has {} bytes after the last tensor (truncated header or appended data)",
                     data_size - at));
}

DType Parser::resolve_dtype(const Entry& e, Safetensors& out) const {
  const std::string key = std::string(kDTypeMetadataPrefix) + e.name;
  const auto tag = out.metadata.find(key);
  if (e.dtype == "U8") {
    if (tag == out.metadata.end() || tag->second != kFnuzName)
      fail(
          fmt::format("tensor {} is U8 without __metadata__ {} = \"{}\" (driftcheck stores only "
                      "fp8_e4m3fnuz as U8)",
                      shown(e.name), shown(key), kFnuzName));
    out.metadata.erase(tag);
    return DType::kF8E4M3FNUZ;
  }
  if (tag != out.metadata.end())
    fail(fmt::format("__metadata__ {} marks a tensor that is {}, not U8", shown(key), e.dtype));
  for (const auto& [dt, name] : kDTypeNames)
    if (name == e.dtype) return dt;
  fail(
      fmt::format("tensor {} has dtype {}, which driftcheck does not read (F64, F32, F16, BF16, F8_E4M3, "
                  "F8_E5M2, I32, or U8 marked fp8_e4m3fnuz)",
                  shown(e.name), shown(e.dtype)));
}

Safetensors Parser::parse() {
  const json j = parse_json(header());
  Safetensors out;
  if (const auto m = j.find(kMetadataKey); m != j.end()) read_metadata(*m, out);
  std::vector<Entry> entries;
  for (const auto& [name, v] : j.items())
    if (name != kMetadataKey) entries.push_back(read_entry(name, v));
  for (Entry& e : entries) {
    e.dt = resolve_dtype(e, out);
    const std::uint64_t need = checked_bytes(e, dtype_size(e.dt));
    if (need != e.end - e.begin)
      fail(fmt::format("tensor {}: shape [{}] of {} needs {} bytes, its data_offsets [{}, {}] hold {}",
                       shown(e.name), fmt::join(e.shape, ", "), e.dtype, need, e.begin, e.end,
                       e.end - e.begin));
  }
  for (const auto& [key, value] : out.metadata)
    if (key.starts_with(kDTypeMetadataPrefix))
      fail(fmt::format("__metadata__ {} marks no U8 tensor of this file", shown(key)));
  check_tiling(entries);
  for (const Entry& e : entries) {
    auto s = std::make_shared<Storage>(e.dt, static_cast<std::int64_t>((e.end - e.begin) / dtype_size(e.dt)));
    if (!s->bytes.empty()) std::memcpy(s->bytes.data(), data_.data() + e.begin, s->bytes.size());
    out.tensors[e.name] = {e.shape, std::move(s)};
  }
  return out;
}

// The tensors in file order, rejecting what cannot be written.
std::vector<std::pair<const std::string*, const StTensor*>> write_order(const Safetensors& f) {
  std::vector<std::pair<const std::string*, const StTensor*>> order;
  for (const auto& [name, t] : f.tensors) {
    if (name == kMetadataKey) throw InvalidArgument("safetensors: a tensor cannot be named __metadata__");
    if (!t.data) throw InvalidArgument(fmt::format("safetensors: tensor {} has no storage", shown(name)));
    std::int64_t numel = 1;
    for (std::int64_t d : t.shape) {
      if (d < 0)
        throw InvalidArgument(fmt::format("safetensors: tensor {} has a negative extent", shown(name)));
      numel = d == 0 ? 0 : numel * d;
    }
    if (numel != t.data->numel())
      throw InvalidArgument(fmt::format("safetensors: tensor {} has shape [{}] but {} elements", shown(name),
                                        fmt::join(t.shape, ", "), t.data->numel()));
    order.emplace_back(&name, &t);
  }
  // Largest elements first: with the data buffer 8-byte aligned, every tensor then starts at a multiple of
  // its element size (all sizes are powers of two and every tensor is a whole number of elements).
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return dtype_size(a.second->data->dtype) > dtype_size(b.second->data->dtype);
  });
  return order;
}

}  // namespace

Tensor StTensor::view() const {
  return Tensor::view(data, shape, contiguous_strides(shape), 0);
}

std::string_view safetensors_dtype(DType t) {
  for (const auto& [dt, name] : kDTypeNames)
    if (dt == t) return name;
  return "unknown";
}

std::string encode_safetensors(const Safetensors& f) {
  json meta = json::object();
  for (const auto& [k, v] : f.metadata) {
    if (k.starts_with(kDTypeMetadataPrefix))
      throw InvalidArgument(fmt::format("safetensors: metadata key {} is reserved", shown(k)));
    meta[k] = v;
  }
  json header = json::object();
  std::uint64_t at = 0;
  const auto order = write_order(f);
  for (const auto& [name, t] : order) {
    const std::uint64_t n = t->data->bytes.size();
    header[*name] = {
        {"dtype", safetensors_dtype(t->data->dtype)}, {"shape", t->shape}, {"data_offsets", {at, at + n}}};
    if (t->data->dtype == DType::kF8E4M3FNUZ) meta[std::string(kDTypeMetadataPrefix) + *name] = kFnuzName;
    at += n;
  }
  if (!meta.empty()) header[std::string(kMetadataKey)] = meta;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception&) {
    throw InvalidArgument("safetensors: a tensor name or metadata string is not valid UTF-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // 8 + header: the data buffer starts 8-byte aligned
  std::string out;
  out.reserve(8 + text.size() + at);
  const std::uint64_t n = text.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out += text;
  for (const auto& [name, t] : order)
    out.append(reinterpret_cast<const char*>(t->data->bytes.data()), t->data->bytes.size());
  return out;
}

void write_safetensors(const std::filesystem::path& path, const Safetensors& f) {
  files::write_file_atomic(path, encode_safetensors(f));
}

Safetensors parse_safetensors(std::string_view bytes, std::string_view file) {
  return Parser(bytes, file).parse();
}

Safetensors read_safetensors(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SafetensorsError(fmt::format("{}: cannot be read", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) throw SafetensorsError(fmt::format("{}: read error", path.string()));
  const std::string bytes = std::move(ss).str();
  return parse_safetensors(bytes, path.string());
}

}  // namespace driftcheck::io
