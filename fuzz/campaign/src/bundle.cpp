#include "driftcheck/fuzz/bundle.hpp"

#include <fcntl.h>
#include <stdio.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "driftcheck/files/file_io.hpp"
#include "driftcheck/files/json_text.hpp"
#include "driftcheck/fuzz/json_fields.hpp"
#include "driftcheck/fuzz/sha256.hpp"

namespace driftcheck::fuzz {
namespace {

using files::number_json;

static_assert(std::endian::native == std::endian::little,
              "tensor files are written in host order: little-endian");

constexpr char kTensorMagic[8] = {'D', 'C', 'T', 'E', 'N', 'S', 'O', 'R'};
constexpr std::uint32_t kMaxDims = 8;

class Writer {
 public:
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const char*>(&v);
    buf_.append(p, sizeof(T));
  }
  void put_bytes(const void* p, std::size_t n) { buf_.append(static_cast<const char*>(p), n); }
  const std::string& str() const { return buf_; }

 private:
  std::string buf_;
};

// Bounds-checked reads: every malformed or truncated file becomes a BundleError naming the file.
class Reader {
 public:
  Reader(std::string data, std::string name) : data_(std::move(data)), name_(std::move(name)) {}
  template <class T>
  T get(std::string_view what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  const char* take(std::size_t n, std::string_view what) {
    if (n > data_.size() - pos_) fail(fmt::format("truncated while reading {}", what));
    const char* p = data_.data() + pos_;
    pos_ += n;
    return p;
  }
  [[noreturn]] void fail(std::string_view why) const { throw BundleError(fmt::format("{}: {}", name_, why)); }
  bool done() const { return pos_ == data_.size(); }
  std::size_t remaining() const { return data_.size() - pos_; }

 private:
  std::string data_;
  std::string name_;
  std::size_t pos_ = 0;
};

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BundleError(fmt::format("cannot read {}: {}", path.string(), std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A JSON object of a bundle file with its format name and version checked.
nlohmann::json parse_format(std::string_view text, const std::string& name, std::string_view format) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw BundleError(fmt::format("{}: not a JSON object", name));
  if (const std::string problem = format_problem(j, format, kBundleFormatVersion); !problem.empty())
    throw BundleError(fmt::format("{}: {}", name, problem));
  return j;
}

void write_storage(Writer& w, const Storage& s) {
  w.put<std::uint8_t>(static_cast<std::uint8_t>(s.dtype));
  w.put<std::int64_t>(s.numel());
  w.put_bytes(s.bytes.data(), s.bytes.size());
}

std::shared_ptr<Storage> read_storage(Reader& r) {
  const auto code = r.get<std::uint8_t>("storage dtype");
  if (code > static_cast<std::uint8_t>(DType::kI32)) r.fail(fmt::format("unknown dtype code {}", code));
  const auto dtype = static_cast<DType>(code);
  const auto numel = r.get<std::int64_t>("storage size");
  if (numel < 0 ||
      static_cast<std::uint64_t>(numel) > r.remaining() / static_cast<std::uint64_t>(dtype_size(dtype)))
    r.fail(fmt::format("storage of {} elements does not fit the file", numel));
  auto s = std::make_shared<Storage>(dtype, numel);
  const std::size_t n = s->bytes.size();
  const auto* bytes = r.take(n, "storage bytes");
  if (n > 0) std::memcpy(s->bytes.data(), bytes, n);  // an empty storage's data() may be null
  return s;
}

Shape read_dims(Reader& r, std::uint32_t ndim, std::string_view what) {
  Shape v(ndim);
  for (auto& d : v) d = r.get<std::int64_t>(what);
  return v;
}

nlohmann::json tensor_layout_json(const Case& c) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, t] : c.tensors)
    if (t.defined()) out[name] = t.describe();
  return out;
}

nlohmann::json metrics_json(const OutputMetrics& m) {
  return {{"output", m.output},
          {"max_abs", number_json(m.max_abs)},
          {"max_rel", number_json(m.max_rel)},
          {"max_ulps", number_json(m.max_ulps)},
          {"normwise", number_json(m.normwise)},
          {"mean_signed_ulps", number_json(m.mean_signed_ulps)},
          {"share_beyond", number_json(m.share_beyond)},
          {"worst_ratio", number_json(m.worst_ratio)},
          {"worst_index", m.worst_index},
          {"worst_value", number_json(m.worst_value)},
          {"worst_reference", number_json(m.worst_reference)},
          {"tolerance", number_json(m.worst_tolerance)}};
}

}  // namespace

void write_tensors(const std::filesystem::path& path, const Case& c) {
  std::vector<const Storage*> storages;
  std::vector<std::pair<const std::string*, const Tensor*>> views;
  for (const auto& [name, t] : c.tensors) {
    if (!t.defined()) continue;
    views.emplace_back(&name, &t);
    if (std::find(storages.begin(), storages.end(), t.storage().get()) == storages.end())
      storages.push_back(t.storage().get());
  }
  Writer w;
  w.put_bytes(kTensorMagic, sizeof kTensorMagic);
  w.put<std::uint32_t>(kTensorFileVersion);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(storages.size()));
  w.put<std::uint32_t>(static_cast<std::uint32_t>(views.size()));
  for (const Storage* s : storages) write_storage(w, *s);
  for (const auto& [name, t] : views) {
    w.put<std::uint32_t>(static_cast<std::uint32_t>(name->size()));
    w.put_bytes(name->data(), name->size());
    const auto sidx = std::find(storages.begin(), storages.end(), t->storage().get()) - storages.begin();
    w.put<std::uint32_t>(static_cast<std::uint32_t>(sidx));
    w.put<std::uint32_t>(static_cast<std::uint32_t>(t->dim()));
    for (auto d : t->shape()) w.put<std::int64_t>(d);
    for (auto s : t->strides()) w.put<std::int64_t>(s);
    w.put<std::int64_t>(t->offset());
  }
  files::write_file_atomic(path, w.str());
}

namespace {

// A view that stays inside its storage without overflowing int64 on the way and holds no more elements than
// its storage: driftcheck stores no self-overlapping views, and the limit keeps every later allocation
// (reference, outputs) within the file's size, whatever the file claims.
void check_view(Reader& r, const std::string& name, const Shape& shape, const Shape& strides,
                std::int64_t offset, std::int64_t storage_numel) {
  std::int64_t numel = 1, last = offset;
  bool overflow = offset < 0;
  for (std::size_t d = 0; d < shape.size() && !overflow; ++d) {
    if (shape[d] < 0 || strides[d] < 0)
      r.fail(fmt::format("tensor {} has a negative extent or stride", name));
    std::int64_t span = 0;
    overflow = __builtin_mul_overflow(numel, shape[d], &numel) ||
               (shape[d] > 0 && (__builtin_mul_overflow(shape[d] - 1, strides[d], &span) ||
                                 __builtin_add_overflow(last, span, &last)));
  }
  if (overflow || numel > storage_numel)
    r.fail(fmt::format("tensor {} does not fit its storage of {} elements", name, storage_numel));
}

}  // namespace

std::map<std::string, Tensor, std::less<>> parse_tensors(std::string data, const std::string& name) {
  Reader r(std::move(data), name);
  if (std::memcmp(r.take(sizeof kTensorMagic, "magic"), kTensorMagic, sizeof kTensorMagic) != 0)
    r.fail("not a driftcheck tensor file (bad magic)");
  const auto version = r.get<std::uint32_t>("version");
  if (version != kTensorFileVersion)
    r.fail(fmt::format("tensor file version {} (this driftcheck reads {})", version, kTensorFileVersion));
  const auto n_storages = r.get<std::uint32_t>("storage count");
  const auto n_views = r.get<std::uint32_t>("tensor count");
  std::vector<std::shared_ptr<Storage>> storages;
  for (std::uint32_t i = 0; i < n_storages; ++i) storages.push_back(read_storage(r));
  std::map<std::string, Tensor, std::less<>> tensors;
  for (std::uint32_t i = 0; i < n_views; ++i) {
    const auto len = r.get<std::uint32_t>("name length");
    std::string view_name(r.take(len, "tensor name"), len);
    const auto sidx = r.get<std::uint32_t>("storage index");
    if (sidx >= storages.size())
      r.fail(fmt::format("tensor {} refers to storage {} of {}", view_name, sidx, n_storages));
    const auto ndim = r.get<std::uint32_t>("rank");
    if (ndim > kMaxDims) r.fail(fmt::format("tensor {} has rank {}", view_name, ndim));
    Shape shape = read_dims(r, ndim, "shape");
    Shape strides = read_dims(r, ndim, "strides");
    const auto offset = r.get<std::int64_t>("offset");
    check_view(r, view_name, shape, strides, offset, storages[sidx]->numel());
    if (tensors.count(view_name)) r.fail(fmt::format("tensor {} appears twice", view_name));
    try {
      tensors[view_name] = Tensor::view(storages[sidx], std::move(shape), std::move(strides), offset);
    } catch (const InvalidArgument& e) {
      r.fail(fmt::format("tensor {}: {}", view_name, e.what()));
    }
  }
  if (!r.done()) r.fail("trailing bytes after the last tensor");
  return tensors;
}

std::map<std::string, Tensor, std::less<>> read_tensors(const std::filesystem::path& path) {
  return parse_tensors(slurp(path), path.string());
}

namespace {

std::string_view definition_kind_name(BackendDefinition::Kind k) {
  switch (k) {
    case BackendDefinition::Kind::kBackendsFile:
      return "backends_file";
    case BackendDefinition::Kind::kPlugin:
      return "plugin";
    case BackendDefinition::Kind::kBuiltIn:
      break;
  }
  return "built_in";
}

}  // namespace

DefinitionRecord record_definition(const Backend& b) {
  DefinitionRecord r{b.definition(), {}};
  if (r.definition.kind == BackendDefinition::Kind::kBuiltIn) return r;
  std::ifstream in(r.definition.path, std::ios::binary);
  if (in) {
    std::ostringstream bytes;
    bytes << in.rdbuf();
    r.sha256 = sha256_hex(bytes.str());
  }
  return r;
}

DefinitionRecord definition_of(const nlohmann::json& finding, const std::string& name) {
  DefinitionRecord r;
  if (!finding.contains("definition")) return r;
  try {
    const nlohmann::json& d = object_field(finding, "definition");
    const std::string kind = string_field(d, "kind");
    if (kind == "backends_file")
      r.definition.kind = BackendDefinition::Kind::kBackendsFile;
    else if (kind == "plugin")
      r.definition.kind = BackendDefinition::Kind::kPlugin;
    else
      throw FieldError("definition.kind", fmt::format("'{}' is not backends_file or plugin", kind));
    r.definition.path = string_field(d, "path"), r.sha256 = string_field(d, "sha256");
    if (!r.definition.path.is_absolute())
      throw FieldError("definition.path",
                       fmt::format("'{}' is not an absolute path", r.definition.path.string()));
  } catch (const FieldError& e) {
    throw BundleError(fmt::format("{}: {}", name, e.what()));
  }
  return r;
}

nlohmann::json finding_json(const FindingRecord& f, OpKind op) {
  const Evaluation& e = f.evaluation;
  nlohmann::json metrics = nlohmann::json::array();
  for (const auto& m : e.metrics) metrics.push_back(metrics_json(m));
  const OutputMetrics* worst = worst_metrics(e);
  nlohmann::json definition;
  if (f.definition.definition.kind != BackendDefinition::Kind::kBuiltIn)
    definition = {{"kind", definition_kind_name(f.definition.definition.kind)},
                  {"path", f.definition.definition.path.string()},
                  {"sha256", f.definition.sha256}};
  nlohmann::json j = {{"format", "driftcheck.finding"},
                      {"format_version", kBundleFormatVersion},
                      {"id", f.id},
                      {"op", op_name(op)},
                      {"backend", f.backend},
                      {"verdict", verdict_name(e.verdict)},
                      {"detail", e.detail},
                      {"worst_ratio", number_json(e.worst_ratio)},
                      {"worst_output", worst ? worst->output : ""},
                      {"worst_index", worst ? worst->worst_index : std::vector<std::int64_t>{}},
                      {"tolerance", number_json(worst ? worst->worst_tolerance : 0.0)},
                      {"metrics", metrics},
                      {"seed", f.seed},
                      {"case_index", f.case_index},
                      {"shape_class", f.shape_class},
                      {"shrink_steps", f.shrink_steps},
                      {"shrink_tries", f.shrink_tries},
                      {"shape", f.shape},
                      {"replay", f.replay},
                      {"replay_stream", f.replay_stream}};
  if (!definition.is_null()) j["definition"] = definition;
  return j;
}

namespace {

void make_fresh_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!ec) std::filesystem::create_directories(dir, ec);
  if (ec) files::throw_io_error(ec.value(), "cannot create directory", dir);
}

void rename_or_throw(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    files::throw_io_error(errno, "cannot rename " + from.string() + " to", to);
}

// Puts the complete bundle `tmp` in place of `dir`. Where the filesystem can, one renameat2(RENAME_EXCHANGE)
// swaps them, so `dir` is always one whole bundle, old or new, and `tmp` is left holding the old one.
// Elsewhere the old bundle moves aside to dir.old first: a kill between the two renames leaves dir.old, which
// the next run puts back (campaign_dir.cpp).
void replace_dir(const std::filesystem::path& tmp, const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir)) return rename_or_throw(tmp, dir);
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    std::filesystem::remove_all(tmp, ec);
    return;
  }
  if (errno != EINVAL && errno != ENOSYS) files::throw_io_error(errno, "cannot replace", dir);
  const std::filesystem::path old = dir.string() + ".old";
  std::filesystem::remove_all(old, ec);
  rename_or_throw(dir, old);
  rename_or_throw(tmp, dir);
  std::filesystem::remove_all(old, ec);
}

std::string dims(const Shape& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// The stored tensors are the case; the spec in case.json must describe them (op, activation dtype, main
// shape), or the bundle contradicts itself (a hand-edited spec claiming a huge shape, say).
void check_spec_describes(const CaseSpec& spec, const Case& c, const std::string& name) {
  const auto expect = [&](std::string_view tensor, const Shape& shape, std::string_view fields) {
    const Tensor& t = c.tensor(tensor);
    if (t.shape() != shape || t.dtype() != spec.act_dtype)
      throw BundleError(fmt::format(
          "{}: spec fields {} and act_dtype say {} {}, but tensors.bin holds {} {} {}", name, fields,
          dtype_name(spec.act_dtype), dims(shape), tensor, dtype_name(t.dtype()), dims(t.shape())));
  };
  switch (spec.op) {
    case OpKind::kRmsNorm:
      return expect("x", {spec.rows, spec.hidden}, "rows, hidden");
    case OpKind::kConcat:
      expect("a", {spec.rows, spec.hidden}, "rows, hidden");
      return expect("b", {spec.rows, spec.hidden_b}, "rows, hidden_b");
    case OpKind::kDualRmsNormCat:
      return expect("e", {spec.rows, spec.hidden}, "rows, hidden");
    case OpKind::kAttention: {
      const auto& p = std::get<AttentionParams>(spec.params);
      std::int64_t tokens = 0;
      for (const auto q : spec.query_lens)
        if (__builtin_add_overflow(tokens, q, &tokens)) tokens = -1;
      expect("q", {tokens, p.num_q_heads, p.head_dim}, "query_lens, params.num_q_heads, params.head_dim");
      if (c.tensor("seq_lens").shape() != Shape{static_cast<std::int64_t>(spec.seq_lens.size())})
        throw BundleError(fmt::format("{}: spec field seq_lens has {} entries, tensor seq_lens {}", name,
                                      spec.seq_lens.size(), dims(c.tensor("seq_lens").shape())));
      return;
    }
  }
}

}  // namespace

void write_bundle(const std::filesystem::path& dir, const CaseSpec& spec, const Case& pristine,
                  const FindingRecord& finding) {
  const std::filesystem::path tmp = dir.string() + ".tmp";
  const nlohmann::json case_json = {{"format", "driftcheck.case"},
                                    {"format_version", kBundleFormatVersion},
                                    {"op", op_name(spec.op)},
                                    {"seed", pristine.seed},
                                    {"case_index", pristine.index},
                                    {"spec", spec},
                                    {"tensors", tensor_layout_json(pristine)}};
  try {
    make_fresh_dir(tmp);
    files::write_file_atomic(tmp / "case.json", files::json_text(case_json, 2) + "\n");
    write_tensors(tmp / "tensors.bin", pristine);
    files::write_file_atomic(tmp / "finding.json",
                             files::json_text(finding_json(finding, spec.op), 2) + "\n");
    replace_dir(tmp, dir);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);  // a full disk must not also keep half a bundle
    throw;
  }
}

CaseFile parse_case_json(std::string_view text, const std::string& name) {
  const nlohmann::json j = parse_format(text, name, "driftcheck.case");
  CaseFile c;
  try {
    c.spec = json_field(j, "spec").get<CaseSpec>();
    c.seed = u64_field(j, "seed");
    c.case_index = u64_field(j, "case_index");
  } catch (const FieldError& e) {
    throw BundleError(fmt::format("{}: {}", name, e.what()));
  } catch (const InvalidArgument& e) {  // CaseSpec's from_json names the spec field
    throw BundleError(fmt::format("{}: {}", name, e.what()));
  }
  return c;
}

nlohmann::json parse_finding_json(std::string_view text, const std::string& name) {
  nlohmann::json j = parse_format(text, name, "driftcheck.finding");
  try {
    for (const char* key : {"id", "op", "backend", "verdict", "detail", "shape_class", "replay"})
      (void)string_field(j, key);
    (void)number_field(j, "worst_ratio");
    (void)u64_field(j, "seed"), (void)u64_field(j, "case_index");
    (void)int_field(j, "shrink_steps", 0);
  } catch (const FieldError& e) {
    throw BundleError(fmt::format("{}: {}", name, e.what()));
  }
  (void)definition_of(j, name);
  return j;
}

namespace {

Bundle assemble(const CaseFile& c, std::string tensors_bin, std::string_view finding_json,
                const std::filesystem::path& dir) {
  Bundle b;
  b.spec = c.spec;
  // The case is rebuilt from the stored tensors, never materialised from the spec: a spec claiming a huge
  // shape cannot make driftcheck allocate it, and the bundle replays the same bytes if the generator changes.
  b.pristine.op = c.spec.op, b.pristine.params = c.spec.params;
  b.pristine.seed = c.seed, b.pristine.index = c.case_index;
  b.pristine.tensors = parse_tensors(std::move(tensors_bin), (dir / "tensors.bin").string());
  try {
    validate(b.pristine);
  } catch (const InvalidArgument& e) {
    throw BundleError(fmt::format("{}: tensors do not form a valid {} case: {}", dir.string(),
                                  op_name(b.spec.op), e.what()));
  }
  // Attention bundles written before the cases carried the new tokens' K/V inputs get the ones materialize()
  // derives from the same caches (docs/CAMPAIGN.md, bundle format).
  if (b.spec.op == OpKind::kAttention && !b.pristine.has("k_new") && !b.pristine.has("v_new"))
    add_new_kv(b.pristine, c.spec.value_seed);
  check_spec_describes(b.spec, b.pristine, (dir / "case.json").string());
  b.finding = parse_finding_json(finding_json, (dir / "finding.json").string());
  return b;
}

}  // namespace

Bundle parse_bundle(std::string_view case_json, std::string tensors_bin, std::string_view finding_json,
                    const std::filesystem::path& dir) {
  return assemble(parse_case_json(case_json, (dir / "case.json").string()), std::move(tensors_bin),
                  finding_json, dir);
}

Bundle read_bundle(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir))
    throw BundleError(fmt::format("{}: not a bundle directory", dir.string()));
  // case.json first, so that its errors come first.
  const CaseFile c = parse_case_json(slurp(dir / "case.json"), (dir / "case.json").string());
  std::string tensors_bin = slurp(dir / "tensors.bin");
  return assemble(c, std::move(tensors_bin), slurp(dir / "finding.json"), dir);
}

}  // namespace driftcheck::fuzz
