#include "driftcheck/fuzz/bundle.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "driftcheck/reports/report.hpp"

namespace driftcheck::fuzz {
namespace {

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
  if (!in) throw BundleError(fmt::format("cannot read {}", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json read_json(const std::filesystem::path& path, std::string_view format) {
  auto j = nlohmann::json::parse(slurp(path), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    throw BundleError(fmt::format("{}: not a JSON object", path.string()));
  if (j.value("format", "") != format)
    throw BundleError(fmt::format("{}: format is not {}", path.string(), format));
  if (j.value("format_version", 0) != kBundleFormatVersion)
    throw BundleError(fmt::format("{}: format version {} (this driftcheck reads {})", path.string(),
                                  j.value("format_version", 0), kBundleFormatVersion));
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
  std::memcpy(s->bytes.data(), r.take(s->bytes.size(), "storage bytes"), s->bytes.size());
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
          {"max_abs", m.max_abs},
          {"max_rel", m.max_rel},
          {"max_ulps", m.max_ulps},
          {"normwise", m.normwise},
          {"mean_signed_ulps", m.mean_signed_ulps},
          {"share_beyond", m.share_beyond},
          {"worst_ratio", m.worst_ratio},
          {"worst_index", m.worst_index},
          {"worst_value", m.worst_value},
          {"worst_reference", m.worst_reference},
          {"tolerance", m.worst_tolerance}};
}

// The output whose worst element is furthest beyond its tolerance: the headline of a finding.
const OutputMetrics* worst_output(const Evaluation& e) {
  const OutputMetrics* worst = nullptr;
  for (const auto& m : e.metrics)
    if (worst == nullptr || m.worst_ratio > worst->worst_ratio) worst = &m;
  return worst;
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
  reports::write_file_atomic(path, w.str());
}

std::map<std::string, Tensor, std::less<>> read_tensors(const std::filesystem::path& path) {
  Reader r(slurp(path), path.string());
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
    std::string name(r.take(len, "tensor name"), len);
    const auto sidx = r.get<std::uint32_t>("storage index");
    if (sidx >= storages.size())
      r.fail(fmt::format("tensor {} refers to storage {} of {}", name, sidx, n_storages));
    const auto ndim = r.get<std::uint32_t>("rank");
    if (ndim > kMaxDims) r.fail(fmt::format("tensor {} has rank {}", name, ndim));
    Shape shape = read_dims(r, ndim, "shape");
    Shape strides = read_dims(r, ndim, "strides");
    const auto offset = r.get<std::int64_t>("offset");
    for (auto d : shape)
      if (d < 0) r.fail(fmt::format("tensor {} has a negative extent", name));
    try {
      tensors[name] = Tensor::view(storages[sidx], std::move(shape), std::move(strides), offset);
    } catch (const InvalidArgument& e) {
      r.fail(fmt::format("tensor {}: {}", name, e.what()));
    }
  }
  if (!r.done()) r.fail("trailing bytes after the last tensor");
  return tensors;
}

nlohmann::json finding_json(const FindingRecord& f, OpKind op) {
  const Evaluation& e = f.evaluation;
  nlohmann::json metrics = nlohmann::json::array();
  for (const auto& m : e.metrics) metrics.push_back(metrics_json(m));
  const OutputMetrics* worst = worst_output(e);
  return {{"format", "driftcheck.finding"},
          {"format_version", kBundleFormatVersion},
          {"id", f.id},
          {"op", op_name(op)},
          {"backend", f.backend},
          {"verdict", verdict_name(e.verdict)},
          {"detail", e.detail},
          {"worst_ratio", e.worst_ratio},
          {"worst_output", worst ? worst->output : ""},
          {"worst_index", worst ? worst->worst_index : std::vector<std::int64_t>{}},
          {"tolerance", worst ? worst->worst_tolerance : 0.0},
          {"metrics", metrics},
          {"seed", f.seed},
          {"case_index", f.case_index},
          {"shape_class", f.shape_class},
          {"shrink_steps", f.shrink_steps},
          {"shrink_tries", f.shrink_tries},
          {"shape", f.shape},
          {"replay", f.replay},
          {"replay_stream", f.replay_stream}};
}

void write_bundle(const std::filesystem::path& dir, const CaseSpec& spec, const Case& pristine,
                  const FindingRecord& finding) {
  const std::filesystem::path tmp = dir.string() + ".tmp";
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  nlohmann::json case_json = {{"format", "driftcheck.case"},
                              {"format_version", kBundleFormatVersion},
                              {"op", op_name(spec.op)},
                              {"seed", pristine.seed},
                              {"case_index", pristine.index},
                              {"spec", spec},
                              {"tensors", tensor_layout_json(pristine)}};
  reports::write_file_atomic(tmp / "case.json", case_json.dump(2) + "\n");
  write_tensors(tmp / "tensors.bin", pristine);
  reports::write_file_atomic(tmp / "finding.json", finding_json(finding, spec.op).dump(2) + "\n");
  // Replacing a bundle (drawn case -> shrunk case): the old one moves aside first, so DIR is always a whole
  // bundle or absent for an instant, never a mix of two.
  const std::filesystem::path old = dir.string() + ".old";
  std::filesystem::remove_all(old);
  if (std::filesystem::exists(dir)) std::filesystem::rename(dir, old);
  std::filesystem::rename(tmp, dir);
  std::filesystem::remove_all(old);
}

Bundle read_bundle(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir))
    throw BundleError(fmt::format("{}: not a bundle directory", dir.string()));
  const nlohmann::json case_json = read_json(dir / "case.json", "driftcheck.case");
  Bundle b;
  try {
    b.spec = case_json.at("spec").get<CaseSpec>();
    b.pristine = materialize(b.spec);  // op and params; the tensors come from the file below
    b.pristine.seed = case_json.at("seed").get<std::uint64_t>();
    b.pristine.index = case_json.at("case_index").get<std::uint64_t>();
  } catch (const std::exception& e) {
    throw BundleError(fmt::format("{}: {}", (dir / "case.json").string(), e.what()));
  }
  b.pristine.tensors = read_tensors(dir / "tensors.bin");
  try {
    validate(b.pristine);
  } catch (const InvalidArgument& e) {
    throw BundleError(fmt::format("{}: tensors do not form a valid {} case: {}", dir.string(),
                                  op_name(b.spec.op), e.what()));
  }
  b.finding = read_json(dir / "finding.json", "driftcheck.finding");
  return b;
}

}  // namespace driftcheck::fuzz
