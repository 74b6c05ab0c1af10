// The case object of docs/PROTOCOL.md section 4: parameters, storages with their arena offsets, and every
// view (shape, strides, offset in elements), so a worker rebuilds the exact layout, aliasing and guard bands
// included.
#include <cstring>
#include <iterator>
#include <limits>

#include <fmt/format.h>

#include "driftcheck/external/protocol.hpp"
#include "json_fields.hpp"

namespace driftcheck::external {
namespace {

using nlohmann::json;

WeightMode parse_weight_mode(const Fields& f) {
  const std::string m = f.string("weight_mode");
  if (m == "plain") return WeightMode::kPlain;
  if (m == "one_plus") return WeightMode::kOnePlus;
  f.fail("weight_mode", fmt::format("is \"{}\", not plain or one_plus", m));
}

// The case object is written as text directly: it goes out once or twice per run, and building a JSON tree
// for it cost more than everything else on driftcheck's side of a small case.
void put_quoted(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20)
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned char>(c));
    else
      out += c;
  }
  out += '"';
}

// Shortest text that reads back as the same double, always with a fraction or exponent so a reader sees a
// float ("1.0", not "1"). Parameters are finite (validate()).
void put_number(std::string& out, double v) {
  const std::size_t at = out.size();
  fmt::format_to(std::back_inserter(out), "{}", v);
  if (out.find_first_of(".eEn", at) == std::string::npos) out += ".0";
}

void put_list(std::string& out, const std::vector<std::int64_t>& v) {
  fmt::format_to(std::back_inserter(out), "[{}]", fmt::join(v, ","));
}
void put_names(std::string& out, const std::vector<std::string>& names) {
  out += '[';
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) out += ',';
    put_quoted(out, names[i]);
  }
  out += ']';
}

void put_params(std::string& out, const Case& c) {
  const auto mode = [](WeightMode m) { return m == WeightMode::kPlain ? "\"plain\"" : "\"one_plus\""; };
  const auto field = [&](std::string_view key, auto value) {
    fmt::format_to(std::back_inserter(out), "{}\"{}\":", out.back() == '{' ? "" : ",", key);
    if constexpr (std::is_same_v<decltype(value), double>)
      put_number(out, value);
    else
      fmt::format_to(std::back_inserter(out), "{}", value);
  };
  out += '{';
  if (c.op == OpKind::kRmsNorm || c.op == OpKind::kDualRmsNormCat) {
    const bool rms = c.op == OpKind::kRmsNorm;
    field("eps", rms ? c.get<RmsNormParams>().eps : c.get<DualRmsNormCatParams>().eps);
    field("weight_mode",
          mode(rms ? c.get<RmsNormParams>().weight_mode : c.get<DualRmsNormCatParams>().weight_mode));
    if (rms) field("residual", c.get<RmsNormParams>().residual);
  } else if (c.op == OpKind::kAttention) {
    const auto& p = c.get<AttentionParams>();
    field("num_q_heads", p.num_q_heads), field("num_kv_heads", p.num_kv_heads), field("head_dim", p.head_dim);
    field("block_size", p.block_size), field("scale", p.scale), field("causal", p.causal);
    field("window", p.window), field("softcap", p.softcap), field("k_scale", p.k_scale);
    field("v_scale", p.v_scale), field("has_sinks", p.has_sinks);
  }
  out += '}';
}

OpParams parse_params(OpKind op, const json& j) {
  const Fields f(j, "case params");
  switch (op) {
    case OpKind::kRmsNorm:
      return RmsNormParams{f.number("eps"), parse_weight_mode(f), f.boolean("residual")};
    case OpKind::kConcat:
      return ConcatParams{};
    case OpKind::kDualRmsNormCat:
      return DualRmsNormCatParams{f.number("eps"), parse_weight_mode(f)};
    case OpKind::kAttention:
      return AttentionParams{f.integer("num_q_heads"), f.integer("num_kv_heads"), f.integer("head_dim"),
                             f.integer("block_size"),  f.number("scale"),         f.boolean("causal"),
                             f.integer("window"),      f.number("softcap"),       f.number("k_scale"),
                             f.number("v_scale"),      f.boolean("has_sinks")};
  }
  return RmsNormParams{};
}

DType parse_dtype_field(const Fields& f) {
  const std::string name = f.string("dtype");
  DType t;
  if (!parse_dtype(name, &t)) f.fail("dtype", fmt::format("\"{}\" is not a dtype", name));
  return t;
}

// Sizes, strides and offsets beyond 2^40 elements are no real case; bounding them keeps the extent arithmetic
// below far from overflow.
constexpr std::int64_t kMaxExtent = std::int64_t{1} << 40;

// One view of the case object; throws ProtocolError unless every element lies inside the storage.
Tensor decode_view(const std::string& name, const json& j,
                   const std::vector<std::shared_ptr<Storage>>& storages) {
  const Fields f(j, fmt::format("tensor \"{}\"", name));
  const auto index = f.unsigned_integer("storage");
  if (index >= storages.size()) f.fail("storage", fmt::format("{} is not a storage index", index));
  const auto& storage = storages[index];
  if (parse_dtype_field(f) != storage->dtype) f.fail("dtype", "differs from its storage's");
  const Shape shape = f.integers("shape"), strides = f.integers("strides");
  const std::int64_t offset = f.integer("offset");
  if (shape.size() != strides.size() || shape.size() > 8)
    f.fail("strides", "do not match the shape's rank (<= 8)");
  if (offset < 0 || offset >= std::max<std::int64_t>(storage->numel(), 1))
    f.fail("offset", fmt::format("{} is outside its storage of {} elements", offset, storage->numel()));
  // The last element, added up without overflow: every term is checked against the room left in the storage.
  std::int64_t last = offset;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0 || strides[d] < 0 || shape[d] > kMaxExtent)
      f.fail("shape", "holds a negative or huge size or a negative stride");
    const std::int64_t steps = std::max<std::int64_t>(shape[d] - 1, 0);
    if (steps > 0 && strides[d] > (storage->numel() - 1 - last) / steps)
      f.fail("strides", fmt::format("put the view outside its storage of {} elements", storage->numel()));
    last += steps * strides[d];
  }
  return Tensor::view(storage, shape, strides, offset);
}

}  // namespace

ArenaLayout arena_layout(Case& c) {
  ArenaLayout l;
  for (auto& [name, t] : c.tensors) {
    Storage* s = t.storage().get();
    if (std::find(l.storages.begin(), l.storages.end(), s) != l.storages.end()) continue;
    l.storages.push_back(s);
    l.offsets.push_back(l.size);
    l.nbytes.push_back(s->bytes.size());
    l.size += (s->bytes.size() + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  }
  return l;
}

std::string case_text(const Case& c, const ArenaLayout* layout) {
  std::string out, tensors;
  out.reserve(1024), tensors.reserve(1024);
  fmt::format_to(std::back_inserter(out),
                 "{{\"op\":\"{}\",\"seed\":{},\"index\":{},\"params\":", op_name(c.op), c.seed, c.index);
  put_params(out, c);
  out += ",\"storages\":[";
  std::vector<const Storage*> order;
  for (const auto& [name, t] : c.tensors) {
    const Storage* s = t.storage().get();
    auto it = std::find(order.begin(), order.end(), s);
    if (it == order.end()) {
      fmt::format_to(std::back_inserter(out), "{}{{\"dtype\":\"{}\",\"numel\":{},\"nbytes\":{}",
                     order.empty() ? "" : ",", dtype_name(s->dtype), s->numel(), s->bytes.size());
      if (layout)
        fmt::format_to(std::back_inserter(out), ",\"arena_offset\":{}", layout->offsets[order.size()]);
      out += '}';
      it = order.insert(order.end(), s);
    }
    tensors += tensors.empty() ? "{" : ",";
    put_quoted(tensors, name);
    fmt::format_to(std::back_inserter(tensors),
                   ":{{\"storage\":{},\"dtype\":\"{}\",\"shape\":", it - order.begin(),
                   dtype_name(t.dtype()));
    put_list(tensors, t.shape());
    tensors += ",\"strides\":";
    put_list(tensors, t.strides());
    fmt::format_to(std::back_inserter(tensors), ",\"offset\":{}}}", t.offset());
  }
  out += "],\"tensors\":";
  out += tensors.empty() ? "{}" : tensors + "}";
  const OpSignature sig = op_signature(c);
  out += ",\"inputs\":";
  put_names(out, sig.inputs);
  out += ",\"outputs\":";
  put_names(out, sig.outputs);
  out += '}';
  return out;
}

json case_json(const Case& c, const ArenaLayout* layout) {
  return json::parse(case_text(c, layout));
}

void copy_to_arena(const ArenaLayout& l, std::span<std::byte> arena) {
  for (std::size_t i = 0; i < l.storages.size(); ++i)
    std::memcpy(arena.data() + l.offsets[i], l.storages[i]->bytes.data(), l.nbytes[i]);
}

void copy_from_arena(const ArenaLayout& l, std::span<const std::byte> arena) {
  for (std::size_t i = 0; i < l.storages.size(); ++i)
    std::memcpy(l.storages[i]->bytes.data(), arena.data() + l.offsets[i], l.nbytes[i]);
}

DecodedCase decode_case(const json& j, std::span<const std::byte> arena, std::uint64_t max_storage_bytes) {
  const Fields f(j, "case");
  DecodedCase d;
  const std::string op = f.string("op");
  if (!parse_op(op, &d.c.op)) f.fail("op", fmt::format("\"{}\" is not an op", op));
  d.c.params = parse_params(d.c.op, f.object("params"));
  d.c.seed = f.unsigned_integer("seed"), d.c.index = f.unsigned_integer("index");
  std::uint64_t total = 0;
  for (const auto& sj : f.array("storages")) {
    const Fields s(sj, "storage");
    const DType t = parse_dtype_field(s);
    const std::uint64_t numel = s.unsigned_integer("numel"), nbytes = s.unsigned_integer("nbytes");
    if (numel > static_cast<std::uint64_t>(kMaxExtent) || nbytes != numel * dtype_size(t))
      s.fail("nbytes", "is not numel times the dtype's size");
    const bool in_arena = s.has("arena_offset");
    if (!d.storages.empty() && in_arena != d.in_arena)
      s.fail("arena_offset", "is given for some storages only");
    d.in_arena = in_arena;
    const std::uint64_t offset = in_arena ? s.unsigned_integer("arena_offset") : 0;
    if (in_arena && (offset > arena.size() || nbytes > arena.size() - offset))
      s.fail("arena_offset", fmt::format("puts {} bytes outside the arena of {}", nbytes, arena.size()));
    if (!in_arena && (total += nbytes) > max_storage_bytes)
      s.fail("nbytes", fmt::format("makes the case's storages exceed {} bytes", max_storage_bytes));
    auto storage = std::make_shared<Storage>(t, static_cast<std::int64_t>(numel));
    if (in_arena) std::memcpy(storage->bytes.data(), arena.data() + offset, nbytes);
    d.storages.push_back(std::move(storage));
    d.offsets.push_back(offset);
  }
  for (const auto& [name, tj] : f.object("tensors").items())
    d.c.tensors[name] = decode_view(name, tj, d.storages);
  return d;
}

std::vector<std::uint64_t> write_back(const DecodedCase& d, std::span<std::byte> arena) {
  std::vector<std::uint64_t> nbytes;
  for (std::size_t i = 0; i < d.storages.size(); ++i) {
    const auto& bytes = d.storages[i]->bytes;
    if (d.offsets[i] > arena.size() || bytes.size() > arena.size() - d.offsets[i])
      throw ProtocolError(fmt::format("storage {} does not fit the arena", i));
    std::memcpy(arena.data() + d.offsets[i], bytes.data(), bytes.size());
    nbytes.push_back(bytes.size());
  }
  return nbytes;
}

}  // namespace driftcheck::external
