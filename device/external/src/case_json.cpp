// The case object of docs/PROTOCOL.md section 4: parameters, storages with their arena offsets, and every
// view (shape, strides, offset in elements), so a worker rebuilds the exact layout, aliasing and guard bands
// included.
#include <cstring>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "driftcheck/external/protocol.hpp"
#include "json_fields.hpp"

namespace driftcheck::external {
namespace {

using nlohmann::json;

std::string_view weight_mode_name(WeightMode m) {
  return m == WeightMode::kPlain ? "plain" : "one_plus";
}
WeightMode parse_weight_mode(const Fields& f) {
  const std::string m = f.string("weight_mode");
  if (m == "plain") return WeightMode::kPlain;
  if (m == "one_plus") return WeightMode::kOnePlus;
  f.fail("weight_mode", fmt::format("is \"{}\", not plain or one_plus", m));
}

json params_json(const Case& c) {
  switch (c.op) {
    case OpKind::kRmsNorm: {
      const auto& p = c.get<RmsNormParams>();
      return {{"eps", p.eps}, {"weight_mode", weight_mode_name(p.weight_mode)}, {"residual", p.residual}};
    }
    case OpKind::kConcat:
      return json::object();
    case OpKind::kDualRmsNormCat: {
      const auto& p = c.get<DualRmsNormCatParams>();
      return {{"eps", p.eps}, {"weight_mode", weight_mode_name(p.weight_mode)}};
    }
    case OpKind::kAttention: {
      const auto& p = c.get<AttentionParams>();
      return {{"num_q_heads", p.num_q_heads},
              {"num_kv_heads", p.num_kv_heads},
              {"head_dim", p.head_dim},
              {"block_size", p.block_size},
              {"scale", p.scale},
              {"causal", p.causal},
              {"window", p.window},
              {"softcap", p.softcap},
              {"k_scale", p.k_scale},
              {"v_scale", p.v_scale},
              {"has_sinks", p.has_sinks}};
    }
  }
  return json::object();
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

json case_json(const Case& c, const ArenaLayout* layout) {
  std::vector<const Storage*> order;
  json storages = json::array(), tensors = json::object();
  for (const auto& [name, t] : c.tensors) {
    const Storage* s = t.storage().get();
    auto it = std::find(order.begin(), order.end(), s);
    if (it == order.end()) {
      json sj = {{"dtype", dtype_name(s->dtype)}, {"numel", s->numel()}, {"nbytes", s->bytes.size()}};
      if (layout) sj["arena_offset"] = layout->offsets[order.size()];
      storages.push_back(std::move(sj));
      it = order.insert(order.end(), s);
    }
    tensors[name] = {{"storage", it - order.begin()},
                     {"dtype", dtype_name(t.dtype())},
                     {"shape", t.shape()},
                     {"strides", t.strides()},
                     {"offset", t.offset()}};
  }
  const OpSignature sig = op_signature(c);
  return {{"op", op_name(c.op)},  {"seed", c.seed},     {"index", c.index},     {"params", params_json(c)},
          {"storages", storages}, {"tensors", tensors}, {"inputs", sig.inputs}, {"outputs", sig.outputs}};
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
