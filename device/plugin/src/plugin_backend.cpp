#include "driftcheck/device/plugin_backend.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <mutex>
#include <tuple>
#include <type_traits>

#include <fmt/format.h>

#include "driftcheck/device/gpu.hpp"
#include "driftcheck/device/numerics_terms.hpp"
#include "driftcheck/device/query_shapes.hpp"

namespace driftcheck {
namespace {

// The ABI's enum values are DType's and OpKind's, so a conversion is a cast; these keep them from drifting.
static_assert(static_cast<int>(DType::kF64) == DC_F64 && static_cast<int>(DType::kF32) == DC_F32 &&
              static_cast<int>(DType::kF16) == DC_F16 && static_cast<int>(DType::kBF16) == DC_BF16 &&
              static_cast<int>(DType::kF8E4M3FN) == DC_F8_E4M3FN &&
              static_cast<int>(DType::kF8E4M3FNUZ) == DC_F8_E4M3FNUZ &&
              static_cast<int>(DType::kF8E5M2) == DC_F8_E5M2 && static_cast<int>(DType::kI32) == DC_I32);
static_assert(static_cast<int>(OpKind::kRmsNorm) == DC_RMSNORM &&
              static_cast<int>(OpKind::kConcat) == DC_CONCAT &&
              static_cast<int>(OpKind::kDualRmsNormCat) == DC_DUAL_RMSNORM_CAT &&
              static_cast<int>(OpKind::kAttention) == DC_ATTENTION);
static_assert(std::is_standard_layout_v<dc_case> && std::is_trivially_copyable_v<dc_tensor>);

dc_params to_params(const OpParams& params) {
  dc_params out{};
  std::visit(
      [&](const auto& p) {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, RmsNormParams> || std::is_same_v<P, DualRmsNormCatParams>) {
          out.eps = p.eps;
          out.weight_mode = p.weight_mode == WeightMode::kOnePlus ? 1 : 0;
        }
        if constexpr (std::is_same_v<P, RmsNormParams>) out.residual = p.residual ? 1 : 0;
        if constexpr (std::is_same_v<P, AttentionParams>) {
          out.num_q_heads = p.num_q_heads, out.num_kv_heads = p.num_kv_heads, out.head_dim = p.head_dim;
          out.block_size = p.block_size, out.window = p.window, out.scale = p.scale, out.softcap = p.softcap;
          out.k_scale = p.k_scale, out.v_scale = p.v_scale;
          out.causal = p.causal ? 1 : 0, out.has_sinks = p.has_sinks ? 1 : 0;
        }
      },
      params);
  return out;
}

// What a plugin wrote into a message buffer: up to its NUL (never past the buffer, whose last byte driftcheck
// keeps 0) and its first line.
std::string message_of(const char* buf, std::string_view fallback) {
  std::string_view s(buf, strnlen(buf, DC_MESSAGE_SIZE - 1));
  s = s.substr(0, s.find('\n'));
  return s.empty() ? std::string(fallback) : std::string(s);
}

struct Message {
  char buf[DC_MESSAGE_SIZE] = {};
};

// The end of each version's dc_plugin: version 1's ends at run, version 2's at query_supports.
constexpr std::size_t kVersion1Size = offsetof(dc_plugin, numerics2);
constexpr std::size_t kVersion2Size = offsetof(dc_plugin, numerics3);
std::size_t struct_size_of_version(std::uint32_t v) {
  return v == 1 ? kVersion1Size : v == 2 ? kVersion2Size : sizeof(dc_plugin);
}

// The plugin's declaration as this driftcheck reads it: each version's fields from a plugin of that version
// or later, zero (the earlier version's meaning) from an earlier one, whose struct ends before them.
struct Declaration {
  dc_numerics2 numerics2{};
  dc_query_supports query{};
  dc_numerics3 numerics3{};
};

Declaration declaration_of(const dc_plugin& p) {
  Declaration d;
  if (p.abi_version >= 2) d.numerics2 = p.numerics2, d.query = p.query_supports;
  if (p.abi_version >= 3) d.numerics3 = p.numerics3;
  return d;
}

bool declares_reduction(const dc_numerics3& n3) {
  return n3.reduction_threads != 0 || n3.reduction_vec != 0 || n3.reduction_warp != 0;
}

Numerics numerics_of(const dc_plugin& p) {
  const dc_numerics& n = p.numerics;
  const Declaration d = declaration_of(p);
  const dc_numerics2& n2 = d.numerics2;
  Numerics out;
  for (const NumericsTerm& t : numerics_terms()) {
    const std::int32_t v = t.abi1 != nullptr ? n.*t.abi1 : t.abi2 != nullptr ? n2.*t.abi2 : 0;
    switch (t.type) {
      case TermType::kFlag:
        out.*t.flag = v != 0;
        break;
      case TermType::kCount:
        out.output_roundings = v;
        break;
      case TermType::kNewKv:
        out.new_kv = v == DC_NEW_KV_INPUTS ? NewKv::kInputs : NewKv::kCache;
        break;
      case TermType::kReduction:
        if (declares_reduction(d.numerics3))
          out.reduction = {d.numerics3.reduction_threads, d.numerics3.reduction_vec,
                           d.numerics3.reduction_warp};
        break;
    }
  }
  return out;
}

QueryShapes query_shapes_of(const dc_plugin& p) {
  const dc_query_supports q = declaration_of(p).query;
  QueryShapes out;
  out.decode_only = q.decode_only != 0;
  if (q.max_query_len > 0) out.max_query_len = q.max_query_len;
  for (const std::int64_t d : q.head_dims)
    if (d > 0) out.head_dims.push_back(d);
  if (q.max_head_dim > 0) out.max_head_dim = q.max_head_dim;
  return out;
}

// Every numerics term the plugin's ABI version can declare (numerics_terms.hpp), in Numerics' order:
// the first whose values differ, as "FIELD (the file says A, the plugin B)", or empty when they agree.
std::string numerics_disagreement(const Numerics& file, const Numerics& plugin, std::uint32_t abi_version) {
  for (const NumericsTerm& t : numerics_terms()) {
    if (static_cast<std::uint32_t>(t.abi_version) > abi_version) continue;  // the plugin cannot declare it
    const std::string a = term_text(t, file), b = term_text(t, plugin);
    if (a != b) return fmt::format("{} (the file says {}, the plugin {})", t.key, a, b);
  }
  return {};
}

// The dlopen handle; closed after the instance is destroyed.
struct Library {
  void* handle = nullptr;
  explicit Library(void* h) : handle(h) {}
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library() {
    if (handle != nullptr) dlclose(handle);
  }
};

class PluginBackend final : public Backend {
 public:
  PluginBackend(std::unique_ptr<Library> lib, const dc_plugin* p, void* instance, PluginOptions o,
                std::filesystem::path path)
      : lib_(std::move(lib)), p_(p), instance_(instance), opts_(std::move(o)), path_(std::move(path)) {
    name_ = opts_.name.empty() ? fmt::format("plugin.{}", p_->name) : opts_.name;
    query_ = query_shapes_of(*p_);
    description_ = opts_.description.empty() && p_->description ? p_->description : opts_.description;
  }
  ~PluginBackend() override {
    if (p_->destroy != nullptr) p_->destroy(instance_);
  }
  PluginBackend(const PluginBackend&) = delete;
  PluginBackend& operator=(const PluginBackend&) = delete;

  std::string_view name() const override { return name_; }
  std::string_view description() const override { return description_; }
  BackendKind kind() const override { return BackendKind::kExternal; }
  std::string origin() const override {
    return fmt::format("{}plugin {}", opts_.origin.empty() ? "" : opts_.origin + "; ", path_.string());
  }
  BackendDefinition definition() const override {
    if (!opts_.backends_file.empty())
      return {BackendDefinition::Kind::kBackendsFile, std::filesystem::absolute(opts_.backends_file)};
    return {BackendDefinition::Kind::kPlugin, std::filesystem::absolute(path_)};
  }
  OpKind op() const override { return static_cast<OpKind>(p_->op); }
  Numerics numerics() const override { return numerics_of(*p_); }
  std::string_view twin() const override { return opts_.twin; }
  int compile_set() const override { return opts_.compile_set; }
  std::string supports_summary() const override {
    std::string s = opts_.static_supports_summary;
    for (const auto& part : query_.summary()) s += fmt::format("{}{}", s.empty() ? "" : "; ", part);
    return s;
  }

  bool available(std::string* why) const override {
#if !DRIFTCHECK_HAVE_GPU
    if (device_memory()) {
      if (why) *why = "the plugin wants device memory and this driftcheck was built without GPU support";
      return false;
    }
#endif
    if (p_->available == nullptr) return true;
    Message m;
    const auto lock = serialise();
    if (p_->available(instance_, m.buf, sizeof m.buf - 1) != 0) return true;
    if (why) *why = message_of(m.buf, "the plugin says it cannot run here");
    return false;
  }

  Support supports(const Case& c) const override {
    if (opts_.static_supports)
      if (Support s = opts_.static_supports(c); !s.ok) return s;
    if (const std::string shape = query_.outside(c); !shape.empty())
      return Support::no(fmt::format("{}: {} declares otherwise (query_supports)", shape, name_));
    const PluginCase abi(c, /*with_data=*/false);
    Message m;
    const auto lock = serialise();
    if (p_->supports(instance_, abi.get(), m.buf, sizeof m.buf - 1) != 0) return Support::yes();
    return Support::no(message_of(m.buf, "declined by the plugin (no reason given)"));
  }

  void run(Case& c) const override {
    PluginCase abi(c, /*with_data=*/true);
    Message m;
    int rc = 0;
    const auto call = [&] {
      const auto lock = serialise();
      rc = p_->run(instance_, abi.get(), m.buf, sizeof m.buf - 1);
    };
    if (device_memory())
      run_on_device(abi, call);
    else
      call();
    if (rc != 0) throw BackendError(message_of(m.buf, fmt::format("the plugin returned {}", rc)));
  }

 private:
  bool device_memory() const {
    return (p_->flags & DC_PLUGIN_DEVICE_MEMORY) != 0;
  }
  std::unique_lock<std::mutex> serialise() const {
    return (p_->flags & DC_PLUGIN_THREAD_SAFE) != 0 ? std::unique_lock<std::mutex>()
                                                    : std::unique_lock<std::mutex>(mu_);
  }
  static void run_on_device(PluginCase& abi, const std::function<void()>& call) {
#if DRIFTCHECK_HAVE_GPU
    gpu_run_on_storages(abi.storages(), [&](const std::vector<void*>& device, void* stream) {
      for (std::size_t i = 0; i < device.size(); ++i) abi.set_data(i, device[i]);
      abi.set_stream(stream);
      call();
    });
#else
    (void)abi, (void)call;
    throw BackendError("the plugin wants device memory and this driftcheck was built without GPU support");
#endif
  }

  std::unique_ptr<Library> lib_;
  const dc_plugin* p_;
  void* instance_;
  PluginOptions opts_;
  std::filesystem::path path_;
  std::string name_, description_;
  QueryShapes query_;
  mutable std::mutex mu_;
};

bool valid_name(const char* s) {
  if (s == nullptr || *s == '\0') return false;
  for (; *s != '\0'; ++s)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' || *s == '.' || *s == '-'))
      return false;
  return true;
}

// Everything driftcheck reads of the struct, checked before the first call into the plugin.
void check_plugin(const dc_plugin& p, const std::function<void(std::string)>& fail) {
  if (p.abi_version < DC_PLUGIN_ABI_OLDEST || p.abi_version > DC_PLUGIN_ABI_VERSION)
    fail(fmt::format("built for plugin ABI version {}, this driftcheck loads versions {} to {}",
                     p.abi_version, DC_PLUGIN_ABI_OLDEST, DC_PLUGIN_ABI_VERSION));
  const std::size_t size = struct_size_of_version(p.abi_version);
  if (p.struct_size < size)
    fail(fmt::format("struct_size {} is smaller than ABI version {}'s dc_plugin ({} bytes)", p.struct_size,
                     p.abi_version, size));
  if (!valid_name(p.name)) fail("name must be non-empty and use only [a-z0-9_.-]");
  if (p.op < DC_RMSNORM || p.op > DC_ATTENTION) fail(fmt::format("unknown op {}", p.op));
  if ((p.flags & ~(DC_PLUGIN_DEVICE_MEMORY | DC_PLUGIN_THREAD_SAFE)) != 0)
    fail(fmt::format("unknown flags 0x{:x}", p.flags));
  if (p.supports == nullptr || p.run == nullptr) fail("supports and run must not be NULL");
  const dc_numerics& n = p.numerics;
  const Declaration d = declaration_of(p);
  const dc_numerics2& n2 = d.numerics2;
  for (const NumericsTerm& t : numerics_terms()) {
    const std::string field(t.abi_field);
    const std::int32_t v = t.abi1 != nullptr ? n.*t.abi1 : t.abi2 != nullptr ? n2.*t.abi2 : 0;
    switch (t.type) {
      case TermType::kFlag:
        if (v != 0 && v != 1) fail(fmt::format("{} {}: a flag is 0 or 1", field, v));
        break;
      case TermType::kCount:
        if (v < kMinOutputRoundings) fail(fmt::format("{} must be at least {}", field, kMinOutputRoundings));
        break;
      case TermType::kNewKv:
        if (v != DC_NEW_KV_CACHE && v != DC_NEW_KV_INPUTS)
          fail(fmt::format("{} {}: DC_NEW_KV_CACHE (0) or DC_NEW_KV_INPUTS (1)", field, v));
        break;
      case TermType::kReduction: {
        const dc_numerics3& n3 = d.numerics3;
        if (n3.reserved != 0) fail("numerics3.reserved must be zero");
        if (declares_reduction(n3) &&
            (n3.reduction_threads < 1 || n3.reduction_vec < 1 || n3.reduction_warp < 1))
          fail(
              fmt::format("numerics3: reduction_threads {}, reduction_vec {}, reduction_warp {}: all zero "
                          "(nothing declared) or each at least 1",
                          n3.reduction_threads, n3.reduction_vec, n3.reduction_warp));
        break;
      }
    }
  }
  const dc_query_supports& q = d.query;
  const bool any =
      q.decode_only != 0 || q.reserved != 0 || q.max_query_len != 0 || q.max_head_dim != 0 ||
      std::any_of(std::begin(q.head_dims), std::end(q.head_dims), [](std::int64_t x) { return x != 0; });
  if (any && p.op != DC_ATTENTION) fail("query_supports applies to attention plugins only: leave it zero");
  if (q.decode_only != 0 && q.decode_only != 1) fail("query_supports.decode_only must be 0 or 1");
  if (q.reserved != 0) fail("query_supports.reserved must be 0");
  if (q.max_query_len < 0) fail("query_supports.max_query_len must be >= 0 (0: any)");
  if (q.max_head_dim < 0) fail("query_supports.max_head_dim must be >= 0 (0: any)");
  for (int i = 0; i < DC_MAX_HEAD_DIMS; ++i) {
    const std::int64_t dim = q.head_dims[i];
    if (dim < 0) fail(fmt::format("query_supports.head_dims[{}] is {}: head sizes are > 0", i, dim));
    if (i > 0 && dim != 0 && q.head_dims[i - 1] == 0)
      fail(fmt::format("query_supports.head_dims[{}] follows a 0: list head sizes first, zeros after", i));
    if (q.max_head_dim > 0 && dim > q.max_head_dim)
      fail(fmt::format("query_supports.head_dims[{}] is {}, above max_head_dim {}: never run", i, dim,
                       q.max_head_dim));
  }
}

}  // namespace

PluginCase::PluginCase(const Case& c, bool with_data) {
  const OpSignature sig = op_signature(c);
  const auto has = [](const std::vector<std::string>& v, const std::string& n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  tensors_.reserve(c.tensors.size());
  for (const auto& [name, t] : c.tensors) {
    if (!t.defined()) continue;
    if (t.dim() > DC_MAX_DIMS)
      throw BackendError(
          fmt::format("tensor {} has {} dimensions, the plugin ABI at most {}", name, t.dim(), DC_MAX_DIMS));
    const auto it = std::find(storages_.begin(), storages_.end(), t.storage().get());
    const auto index = static_cast<int32_t>(it - storages_.begin());
    if (it == storages_.end()) {
      Storage* s = t.storage().get();
      storages_.push_back(s);
      abi_storages_.push_back({static_cast<int32_t>(s->dtype), s->numel(), s->bytes.size(),
                               with_data ? static_cast<void*>(s->bytes.data()) : nullptr});
    }
    dc_tensor v{};
    v.name = name.c_str(), v.storage = index, v.dtype = static_cast<int32_t>(t.dtype());
    v.ndim = static_cast<int32_t>(t.dim()), v.offset = t.offset();
    v.role = (has(sig.inputs, name) ? DC_ROLE_INPUT : 0u) | (has(sig.outputs, name) ? DC_ROLE_OUTPUT : 0u);
    std::copy(t.shape().begin(), t.shape().end(), v.shape);
    std::copy(t.strides().begin(), t.strides().end(), v.strides);
    tensors_.push_back(v);
  }
  case_.op = static_cast<int32_t>(c.op);
  case_.num_storages = static_cast<int32_t>(abi_storages_.size());
  case_.num_tensors = static_cast<int32_t>(tensors_.size());
  case_.seed = c.seed, case_.index = c.index;
  case_.params = to_params(c.params);
  case_.storages = abi_storages_.data();
  case_.tensors = tensors_.data();
}

std::unique_ptr<Backend> load_plugin(const std::filesystem::path& path, const PluginOptions& options) {
  const auto fail = [&](std::string why) -> void {
    throw PluginError(fmt::format("plugin {}: {}", path.string(), why));
  };
  // RTLD_LOCAL: two plugins may define the same symbols; RTLD_NOW: an unresolved symbol fails here, not
  // mid-run.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    fail(fmt::format("cannot be loaded: {}", err ? err : "unknown dlopen error"));
  }
  auto lib = std::make_unique<Library>(handle);
  const auto entry = reinterpret_cast<dc_plugin_entry>(dlsym(handle, DC_PLUGIN_ENTRY));
  if (entry == nullptr)
    fail("exports no function " DC_PLUGIN_ENTRY " (built with driftcheck/plugin.h, extern \"C\", visible?)");
  const dc_plugin* p = entry();
  if (p == nullptr) fail(DC_PLUGIN_ENTRY "() returned NULL");
  check_plugin(*p, fail);
  if (options.numerics)
    if (const std::string field = numerics_disagreement(*options.numerics, numerics_of(*p), p->abi_version);
        !field.empty())
      fail("the numerics in the backends file disagree with the ones the plugin declares: " + field);
  void* instance = nullptr;
  if (p->create != nullptr) {
    Message m;
    instance = p->create(options.config.c_str(), m.buf, sizeof m.buf - 1);
    if (instance == nullptr) fail(fmt::format("create failed: {}", message_of(m.buf, "no reason given")));
  }
  return std::make_unique<PluginBackend>(std::move(lib), p, instance, options, path);
}

}  // namespace driftcheck
