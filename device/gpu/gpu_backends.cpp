// GPU backends: the HIP kernels of kernels.hip behind the Backend interface. A run uploads every storage of
// the case once (aliasing between tensors is kept because views are translated, not copied), launches, and
// downloads every storage, so guard bands and inputs are checked by the oracle exactly as for CPU backends.
#include <map>
#include <mutex>
#include <string>

#include "driftcheck/device/backend.hpp"
#include "driftcheck/device/gpu.hpp"
#include "kernels.hpp"

namespace driftcheck {
namespace {

using gpu::DeviceView;

void check(hipError_t e, const char* what) {
  if (e != hipSuccess) throw BackendError(std::string(what) + ": " + hipGetErrorString(e));
}

bool device_present(std::string* why) {
  int count = 0;
  const hipError_t e = hipGetDeviceCount(&count);
  if (e != hipSuccess || count == 0) {
    if (why)
      *why = e != hipSuccess ? std::string("no GPU: ") + hipGetErrorString(e) : "no GPU: no device found";
    return false;
  }
  return true;
}

// The case's storages on the device, uploaded once and downloaded back on sync().
class DeviceCase {
 public:
  explicit DeviceCase(Case& c) : case_(c) {
    for (auto& [name, t] : c.tensors) {
      Storage* s = t.storage().get();
      if (buffers_.count(s)) continue;
      void* p = nullptr;
      check(hipMalloc(&p, s->bytes.size() ? s->bytes.size() : 1), "hipMalloc");
      buffers_[s] = p;
      check(hipMemcpy(p, s->bytes.data(), s->bytes.size(), hipMemcpyHostToDevice), "upload");
    }
  }
  ~DeviceCase() {
    for (auto& [s, p] : buffers_) (void)hipFree(p);
  }
  DeviceCase(const DeviceCase&) = delete;
  DeviceCase& operator=(const DeviceCase&) = delete;

  DeviceView view(std::string_view name) const {
    DeviceView v;
    if (!case_.has(name)) return v;
    const Tensor& t = case_.tensor(name);
    v.base = buffers_.at(t.storage().get());
    v.dtype = t.dtype();
    v.offset = t.offset();
    for (std::int64_t d = 0; d < t.dim() && d < gpu::kMaxDims; ++d) v.stride[d] = t.strides()[d];
    return v;
  }

  void sync_and_download() {
    check(hipDeviceSynchronize(), "kernel");
    for (auto& [s, p] : buffers_)
      check(hipMemcpy(s->bytes.data(), p, s->bytes.size(), hipMemcpyDeviceToHost), "download");
  }

 private:
  Case& case_;
  std::map<Storage*, void*> buffers_;
};

// One case at a time on the device keeps memory bounded and the timing of a run its own.
std::mutex& device_mutex() {
  static std::mutex mu;
  return mu;
}

bool act_dtype_ok(DType t) {
  return t == DType::kBF16 || t == DType::kF16 || t == DType::kF32;
}

class GpuBackend : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kGpu; }
  bool available(std::string* why) const override { return device_present(why); }
  void run(Case& c) const override {
    const std::lock_guard<std::mutex> lock(device_mutex());
    DeviceCase dev(c);
    check(launch(c, dev), "launch");
    dev.sync_and_download();
  }

 protected:
  virtual hipError_t launch(const Case& c, const DeviceCase& dev) const = 0;
};

// vLLM's rms_norm (no residual: two roundings) and fused_add_rms_norm (residual rounded, stored in place, and
// normalised: three roundings on the way to y) are one kernel with a flag, as two backends with their own
// numerics.
class GpuRmsNorm final : public GpuBackend {
 public:
  explicit GpuRmsNorm(bool fused_add) : fused_add_(fused_add) {}
  std::string_view name() const override { return fused_add_ ? "gpu.rmsnorm.fused_add" : "gpu.rmsnorm.cuda"; }
  std::string_view description() const override {
    return fused_add_
               ? "HIP port of vLLM fused_add_rms_norm (in place): z = act(x + r), residual <- z, variance "
                 "of the rounded z, act(act(z*s)*w)"
               : "HIP port of vLLM rms_norm: fp32 block reduction, act(act(x*s)*w), strided rows";
  }
  OpKind op() const override { return OpKind::kRmsNorm; }
  Numerics numerics() const override {
    Numerics n;
    n.output_roundings = fused_add_ ? 3 : 2;
    return n;
  }
  std::string supports_summary() const override {
    return fused_add_ ? "bf16/fp16/fp32; any H, strides and offsets; residual required"
                      : "bf16/fp16/fp32; any H, strides and offsets; no residual";
  }
  Support supports(const Case& c) const override {
    if (!act_dtype_ok(c.tensor("x").dtype()))
      return Support::no("activation dtype must be bf16, fp16 or fp32");
    if (c.get<RmsNormParams>().residual != fused_add_)
      return Support::no(fused_add_ ? "fused_add_rms_norm needs a residual" : "rms_norm takes no residual");
    return Support::yes();
  }

 protected:
  hipError_t launch(const Case& c, const DeviceCase& dev) const override {
    const auto& p = c.get<RmsNormParams>();
    gpu::RmsNormArgs a;
    a.x = dev.view("x");
    a.w = dev.view("w");
    a.residual = dev.view("residual");
    a.y = dev.view("y");
    a.rows = c.tensor("x").size(0);
    a.hidden = c.tensor("x").size(1);
    a.eps = static_cast<float>(p.eps);
    a.one_plus_weight = p.weight_mode == WeightMode::kOnePlus;
    a.has_residual = p.residual;
    return gpu::launch_rmsnorm(a);
  }

 private:
  bool fused_add_;
};

class GpuDualRmsNormCat final : public GpuBackend {
 public:
  std::string_view name() const override { return "gpu.dual.fused"; }
  std::string_view description() const override {
    return "HIP fused_dual_rmsnorm_cat (EAGLE3 layer 0): grid (rows, 2), fp32 math, weight in fp32, one "
           "rounding";
  }
  OpKind op() const override { return OpKind::kDualRmsNormCat; }
  std::string supports_summary() const override { return "bf16/fp16/fp32; any H, strides and offsets"; }
  Support supports(const Case& c) const override {
    if (!act_dtype_ok(c.tensor("e").dtype()))
      return Support::no("activation dtype must be bf16, fp16 or fp32");
    return Support::yes();
  }

 protected:
  hipError_t launch(const Case& c, const DeviceCase& dev) const override {
    const auto& p = c.get<DualRmsNormCatParams>();
    gpu::DualArgs a;
    a.e = dev.view("e");
    a.h = dev.view("h");
    a.w_e = dev.view("w_e");
    a.w_h = dev.view("w_h");
    a.out = dev.view("out");
    a.rows = c.tensor("e").size(0);
    a.hidden = c.tensor("e").size(1);
    a.eps = static_cast<float>(p.eps);
    a.one_plus_weight = p.weight_mode == WeightMode::kOnePlus;
    return gpu::launch_dual_rmsnorm_cat(a);
  }
};

class GpuConcat final : public GpuBackend {
 public:
  std::string_view name() const override { return "gpu.concat.copy"; }
  std::string_view description() const override {
    return "HIP strided concat along the last dim (bit copies)";
  }
  OpKind op() const override { return OpKind::kConcat; }
  std::string supports_summary() const override {
    return "any dtype (a and b alike); any widths and strides";
  }
  Support supports(const Case& c) const override {
    if (c.tensor("a").dtype() != c.tensor("b").dtype()) return Support::no("a and b must share a dtype");
    return Support::yes();
  }

 protected:
  hipError_t launch(const Case& c, const DeviceCase& dev) const override {
    gpu::ConcatArgs a;
    a.a = dev.view("a");
    a.b = dev.view("b");
    a.out = dev.view("out");
    a.rows = c.tensor("a").size(0);
    a.width_a = c.tensor("a").size(1);
    a.width_b = c.tensor("b").size(1);
    return gpu::launch_concat(a);
  }
};

class GpuPagedAttention final : public GpuBackend {
 public:
  std::string_view name() const override { return "gpu.attn.paged_online"; }
  std::string_view description() const override {
    return "HIP paged attention, one block per (token, head): online softmax in fp32 over valid keys only, "
           "fp8 "
           "scales applied in fp32, one output rounding";
  }
  OpKind op() const override { return OpKind::kAttention; }
  std::string supports_summary() const override {
    return "bf16/fp16/fp32 q; any KV dtype; any block size, GQA, causal or not, window, softcap, sinks; "
           "head_dim <= 512";
  }
  Support supports(const Case& c) const override {
    const auto& p = c.get<AttentionParams>();
    if (!act_dtype_ok(c.tensor("q").dtype())) return Support::no("q dtype must be bf16, fp16 or fp32");
    if (p.head_dim > 512) return Support::no("head_dim " + std::to_string(p.head_dim) + " > 512");
    return Support::yes();
  }

 protected:
  hipError_t launch(const Case& c, const DeviceCase& dev) const override {
    const auto& p = c.get<AttentionParams>();
    gpu::AttentionArgs a;
    a.q = dev.view("q");
    a.k_cache = dev.view("k_cache");
    a.v_cache = dev.view("v_cache");
    a.block_table = dev.view("block_table");
    a.seq_lens = dev.view("seq_lens");
    a.query_start_loc = dev.view("query_start_loc");
    a.sinks = dev.view("sinks");
    a.o = dev.view("o");
    a.lse = dev.view("lse");
    a.num_tokens = c.tensor("q").size(0);
    a.num_seqs = c.tensor("seq_lens").size(0);
    a.num_q_heads = p.num_q_heads;
    a.num_kv_heads = p.num_kv_heads;
    a.head_dim = p.head_dim;
    a.block_size = p.block_size;
    a.scale = static_cast<float>(p.scale);
    a.softcap = static_cast<float>(p.softcap);
    a.k_scale = static_cast<float>(p.k_scale);
    a.v_scale = static_cast<float>(p.v_scale);
    a.window = p.window;
    a.causal = p.causal;
    a.has_sinks = p.has_sinks;
    return gpu::launch_attention(a);
  }
};

}  // namespace

void gpu_run_on_storages(const std::vector<Storage*>& storages,
                         const std::function<void(const std::vector<void*>& device, void* stream)>& launch) {
  const std::lock_guard<std::mutex> lock(device_mutex());
  std::vector<void*> device(storages.size(), nullptr);
  struct Free {
    std::vector<void*>& p;
    ~Free() {
      for (void* q : p) (void)hipFree(q);
    }
  } free_all{device};
  for (std::size_t i = 0; i < storages.size(); ++i) {
    const std::vector<std::byte>& bytes = storages[i]->bytes;
    check(hipMalloc(&device[i], bytes.empty() ? 1 : bytes.size()), "hipMalloc");
    check(hipMemcpy(device[i], bytes.data(), bytes.size(), hipMemcpyHostToDevice), "upload");
  }
  launch(device, nullptr);
  check(hipGetLastError(), "launch");
  check(hipDeviceSynchronize(), "kernel");
  for (std::size_t i = 0; i < storages.size(); ++i)
    check(hipMemcpy(storages[i]->bytes.data(), device[i], storages[i]->bytes.size(), hipMemcpyDeviceToHost),
          "download");
}

void register_gpu_backends(Registry& r) {
  r.add(std::make_unique<GpuRmsNorm>(false));
  r.add(std::make_unique<GpuRmsNorm>(true));
  r.add(std::make_unique<GpuDualRmsNormCat>());
  r.add(std::make_unique<GpuConcat>());
  r.add(std::make_unique<GpuPagedAttention>());
}

}  // namespace driftcheck
