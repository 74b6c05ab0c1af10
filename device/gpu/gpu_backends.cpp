// GPU backends: the HIP kernels of kernels.hip behind the Backend interface. A run leases a device slot
// (device_slots.hpp: its own stream and reused buffers; no lock is held while the device works), packs every
// storage of the case whole into one upload (aliasing between tensors is kept because views are translated,
// not copied), launches, and downloads every storage whole with one copy, so guard bands and inputs are
// checked by the oracle exactly as for CPU backends. Mutants (mutant.gpu.*) are the same backends with one
// GpuBug, the kernel parameter that switches a deliberate deviation on.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>

#include "device_slots.hpp"
#include "driftcheck/device/backend.hpp"
#include "driftcheck/device/gpu.hpp"
#include "kernels.hpp"
#include "norm_plan.hpp"

namespace driftcheck {
namespace {

using gpu::DeviceView;
using gpu::GpuBug;
using gpu::ReducePlan;

// A fault a kernel records instead of reading out of bounds (AttentionArgs::fault); all zero when none.
using FaultRecord = std::array<std::int64_t, 4>;

// The case's storages, each once, and the fault record, packed into one run on a slot and uploaded.
class DeviceCase {
 public:
  DeviceCase(Case& c, gpu::DeviceSlot& slot) : case_(c) {
    std::vector<gpu::HostBuffer> buffers;
    for (auto& [name, t] : c.tensors) {
      Storage* s = t.storage().get();
      if (std::find(storages_.begin(), storages_.end(), s) != storages_.end()) continue;
      storages_.push_back(s);
      buffers.push_back({s->bytes.data(), s->bytes.size()});
    }
    buffers.push_back({reinterpret_cast<std::byte*>(fault_.data()), sizeof fault_});
    run_.emplace(slot, std::move(buffers));
    run_->upload();
  }

  DeviceView view(std::string_view name) const {
    DeviceView v;
    if (!case_.has(name)) return v;
    const Tensor& t = case_.tensor(name);
    const auto at = std::find(storages_.begin(), storages_.end(), t.storage().get()) - storages_.begin();
    v.base = run_->device(static_cast<std::size_t>(at));
    v.dtype = t.dtype();
    v.offset = t.offset();
    v.storage_numel = t.storage()->numel();
    for (std::int64_t d = 0; d < t.dim() && d < gpu::kMaxDims; ++d) v.stride[d] = t.strides()[d];
    return v;
  }

  std::int64_t* fault_on_device() const {
    return reinterpret_cast<std::int64_t*>(run_->device(storages_.size()));
  }
  const FaultRecord& fault() const { return fault_; }
  void download() { run_->download(); }

 private:
  Case& case_;
  std::vector<Storage*> storages_;
  FaultRecord fault_{};
  std::optional<gpu::PackedRun> run_;
};

bool act_dtype_ok(DType t) {
  return t == DType::kBF16 || t == DType::kF16 || t == DType::kF32;
}

// Who a backend is: a GPU backend, or (with `mutates`) a mutant of one with its bug.
struct GpuIdentity {
  std::string name;
  std::string description;
  std::string mutates;  // mutants: the gpu.* backend this one breaks
  std::string bug_class;
  GpuBug bug = GpuBug::kNone;
};

class GpuBackend : public Backend {
 public:
  explicit GpuBackend(GpuIdentity id) : id_(std::move(id)) {}
  std::string_view name() const override { return id_.name; }
  std::string_view description() const override { return id_.description; }
  BackendKind kind() const override { return id_.mutates.empty() ? BackendKind::kGpu : BackendKind::kMutant; }
  std::string_view mutates() const override { return id_.mutates; }
  std::string_view bug_class() const override { return id_.bug_class; }
  bool available(std::string* why) const override { return gpu::device_present(why); }
  void run(Case& c) const override {
    check_case(c);
    const gpu::SlotLease slot;
    DeviceCase dev(c, *slot);
    gpu::check(launch(c, dev, *slot), "launch");
    dev.download();
    if (dev.fault()[0]) throw BackendError(fault_message(c, dev.fault()));
  }

 protected:
  const GpuIdentity& identity() const { return id_; }
  GpuBug bug() const { return id_.bug; }
  // Enqueues the kernel on the slot's stream (the slot also says the device's warp size).
  virtual hipError_t launch(const Case& c, const DeviceCase& dev, const gpu::DeviceSlot& slot) const = 0;
  // Checked on the host before anything is uploaded (throws BackendError): index tensors the kernel trusts,
  // before any address is formed from them, and faults of the modelled kernel the port reports instead of
  // taking them. Then the message for a fault the kernel recorded.
  virtual void check_case(const Case&) const {}
  virtual std::string fault_message(const Case&, const FaultRecord&) const { return "kernel fault"; }

 private:
  GpuIdentity id_;
};

// A norm kernel's port takes everything but its arithmetic from the CPU twin it ports (device/src/
// twin_norm.hpp): the cases it accepts and the reasons it declines, where vLLM's kernel faults (reported with
// the twin's message before launching: a real misaligned access would be a sticky error that ends the
// process's GPU context), the reduction order for the case on the device's warp (device/gpu/norm_plan.hpp),
// the numerics it declares, and the upstream defects it reproduces, switchable for known findings.
struct PortedTwin {
  OpKind op;
  twin::TwinInfo info;
  twin::NormKernel kernel;
};

// vLLM's rms_norm and fused_add_rms_norm (one kernel with a residual flag) and the fused dual RMSNorm +
// concat.
class GpuNorm final : public GpuBackend {
 public:
  GpuNorm(GpuIdentity id, PortedTwin twin) : GpuBackend(std::move(id)), twin_(std::move(twin)) {}
  OpKind op() const override { return twin_.op; }
  Numerics numerics() const override { return twin_.info.numerics; }
  std::string supports_summary() const override { return twin_.info.supports_summary; }
  Support supports(const Case& c) const override { return twin::norm_supports(twin_.kernel, c); }
  std::vector<std::string> modelled_defects() const override { return twin::norm_defects(twin_.kernel); }
  std::unique_ptr<Backend> without_defects(const std::vector<std::string>& names) const override {
    PortedTwin repaired = twin_;
    if (!twin::repair_norm_defects(repaired.kernel, names)) return nullptr;
    return std::make_unique<GpuNorm>(identity(), std::move(repaired));
  }

 protected:
  void check_case(const Case& c) const override {
    twin::check_norm_faults(twin_.kernel, order(c, twin_.kernel.order.warp), c);
  }

  hipError_t launch(const Case& c, const DeviceCase& dev, const gpu::DeviceSlot& slot) const override {
    const DType act = c.tensor(twin_.op == OpKind::kDualRmsNormCat ? "out" : "y").dtype();
    const ReducePlan plan =
        gpu::reduce_plan(order(c, slot.warp_size()), bug() == GpuBug::kActAccumulation ? act : DType::kF32);
    return twin_.op == OpKind::kDualRmsNormCat ? launch_dual(c, dev, plan, slot.stream())
                                               : launch_rmsnorm(c, dev, plan, slot.stream());
  }

 private:
  // The twin's order on warps of `warp` lanes; the batch-variant mutant changes it as the twin's NormBug does
  // (a 256-thread cub block from 2 tokens on).
  twin::ReduceOrder order(const Case& c, int warp) const {
    const twin::NormBug b =
        bug() == GpuBug::kBatchVariantBlock ? twin::NormBug::kBatchVariantBlock : twin::NormBug::kNone;
    return gpu::port_order(twin_.kernel, b, c, warp);
  }

  hipError_t launch_rmsnorm(const Case& c, const DeviceCase& dev, const ReducePlan& plan,
                            hipStream_t stream) const {
    gpu::RmsNormArgs a;
    a.x = dev.view("x");
    a.w = dev.view("w");
    a.residual = dev.view("residual");
    a.y = dev.view("y");
    a.rows = c.tensor("x").size(0);
    a.hidden = c.tensor("x").size(1);
    a.eps = static_cast<float>(c.get<RmsNormParams>().eps);
    a.has_residual = c.get<RmsNormParams>().residual;
    a.plan = plan;
    a.bug = bug();
    return gpu::launch_rmsnorm(a, stream);
  }

  hipError_t launch_dual(const Case& c, const DeviceCase& dev, const ReducePlan& plan,
                         hipStream_t stream) const {
    gpu::DualArgs a;
    a.e = dev.view("e");
    a.h = dev.view("h");
    a.w_e = dev.view("w_e");
    a.w_h = dev.view("w_h");
    a.out = dev.view("out");
    a.rows = c.tensor("e").size(0);
    a.hidden = c.tensor("e").size(1);
    a.eps = static_cast<float>(c.get<DualRmsNormCatParams>().eps);
    a.plan = plan;
    a.bug = bug();
    return gpu::launch_dual_rmsnorm_cat(a, stream);
  }

  PortedTwin twin_;
};

class GpuConcat final : public GpuBackend {
 public:
  using GpuBackend::GpuBackend;
  OpKind op() const override { return OpKind::kConcat; }
  std::string supports_summary() const override { return twin::concat_copy_info().supports_summary; }
  Support supports(const Case& c) const override { return twin::concat_supports(c); }

 protected:
  hipError_t launch(const Case& c, const DeviceCase& dev, const gpu::DeviceSlot& slot) const override {
    gpu::ConcatArgs a;
    a.a = dev.view("a");
    a.b = dev.view("b");
    a.out = dev.view("out");
    a.rows = c.tensor("a").size(0);
    a.width_a = c.tensor("a").size(1);
    a.width_b = c.tensor("b").size(1);
    a.bug = bug();
    return gpu::launch_concat(a, slot.stream());
  }
};

class GpuPagedAttention final : public GpuBackend {
 public:
  using GpuBackend::GpuBackend;
  OpKind op() const override { return OpKind::kAttention; }
  std::string supports_summary() const override {
    return "bf16/fp16/fp32 q; any KV dtype; any block size, GQA, causal or not, window, softcap, sinks; "
           "head_dim <= 512";
  }
  Support supports(const Case& c) const override {
    const auto& p = c.get<AttentionParams>();
    if (!act_dtype_ok(c.tensor("q").dtype())) return Support::no("q dtype must be bf16, fp16 or fp32");
    if (p.head_dim > 4 * gpu::kAttnThreads)
      return Support::no("head_dim " + std::to_string(p.head_dim) + " > " +
                         std::to_string(4 * gpu::kAttnThreads));
    return Support::yes();
  }

 protected:
  hipError_t launch(const Case& c, const DeviceCase& dev, const gpu::DeviceSlot& slot) const override {
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
    a.max_blocks = c.tensor("block_table").size(1);
    a.num_blocks = c.tensor("k_cache").size(0);
    a.fault = dev.fault_on_device();
    a.scale = static_cast<float>(p.scale);
    a.softcap = static_cast<float>(p.softcap);
    a.k_scale = static_cast<float>(p.k_scale);
    a.v_scale = static_cast<float>(p.v_scale);
    a.window = p.window;
    a.causal = p.causal;
    a.has_sinks = p.has_sinks;
    a.bug = bug();
    return gpu::launch_attention(a, slot.stream());
  }

  // As the CPU twins check them (device/src/attention_kernels.cpp, check_indices), with the same messages:
  // seq_lens within what a block-table row covers, query_start_loc non-decreasing within q. Block-table
  // entries are checked by the kernel as it reads them.
  void check_case(const Case& c) const override {
    const Tensor &table = c.tensor("block_table"), &lens = c.tensor("seq_lens"),
                 &qsl = c.tensor("query_start_loc");
    const std::int64_t seqs = lens.size(0), bs = c.get<AttentionParams>().block_size;
    const std::int64_t per_row = table.size(1) * bs;
    if (qsl.size(0) != seqs + 1 || table.size(0) < seqs)
      throw BackendError(
          fmt::format("query_start_loc has {} entries and block_table {} rows for {} sequences", qsl.size(0),
                      table.size(0), seqs));
    for (std::int64_t s = 0; s < seqs; ++s) {
      const auto len = static_cast<std::int64_t>(lens.at({s}));
      if (len < 0 || len > per_row)
        throw BackendError(
            fmt::format("seq_lens[{}] = {}: outside [0, {}] (block_table rows hold {} blocks of {})", s, len,
                        per_row, table.size(1), bs));
    }
    const std::int64_t tokens = std::min(c.tensor("q").size(0), c.tensor("o").size(0));
    for (std::int64_t s = 0; s <= seqs; ++s) {
      const auto at = static_cast<std::int64_t>(qsl.at({s}));
      const auto prev = s == 0 ? 0 : static_cast<std::int64_t>(qsl.at({s - 1}));
      if (at < prev || at > tokens)
        throw BackendError(fmt::format("query_start_loc[{}] = {}: outside [{}, {}] (q has {} tokens)", s, at,
                                       prev, tokens, tokens));
    }
  }

  std::string fault_message(const Case& c, const FaultRecord& f) const override {
    return fmt::format("block_table[{}, {}] = {}: outside the cache's {} blocks", f[1], f[2], f[3],
                       c.tensor("k_cache").size(0));
  }
};

std::unique_ptr<Backend> make_gpu_backend(std::string_view kernel, GpuIdentity id) {
  if (kernel == "gpu.rmsnorm.cuda")
    return std::make_unique<GpuNorm>(
        std::move(id), PortedTwin{OpKind::kRmsNorm, twin::rmsnorm_cuda_info(), twin::rmsnorm_cuda_kernel()});
  if (kernel == "gpu.rmsnorm.fused_add")
    return std::make_unique<GpuNorm>(
        std::move(id),
        PortedTwin{OpKind::kRmsNorm, twin::rmsnorm_fused_add_info(), twin::rmsnorm_fused_add_kernel()});
  if (kernel == "gpu.dual.fused")
    return std::make_unique<GpuNorm>(
        std::move(id),
        PortedTwin{OpKind::kDualRmsNormCat, twin::dual_fused_info(), twin::dual_fused_kernel()});
  if (kernel == "gpu.concat.copy") return std::make_unique<GpuConcat>(std::move(id));
  return std::make_unique<GpuPagedAttention>(std::move(id));
}

struct KernelEntry {
  const char* name;
  const char* description;
};

constexpr KernelEntry kKernels[] = {
    {"gpu.rmsnorm.cuda",
     "HIP port of vLLM rms_norm: fp32 block reduction in cpu.rmsnorm.cuda's order, act(act(x*s)*w), strided "
     "rows"},
    {"gpu.rmsnorm.fused_add",
     "HIP port of vLLM fused_add_rms_norm (in place): z = act(x + r), residual <- z, variance of the rounded "
     "z, act(act(z*s)*w)"},
    {"gpu.dual.fused",
     "HIP fused_dual_rmsnorm_cat (EAGLE3 layer 0): grid (rows, 2), fp32 math, weight in fp32, one rounding"},
    {"gpu.concat.copy", "HIP strided concat along the last dim (bit copies)"},
    {"gpu.attn.paged_online",
     "HIP paged attention, one block per (token, head): online softmax in fp32 over visible keys only, fp8 "
     "scales applied in fp32, one output rounding"},
};

// The CPU mutants' bug classes (docs/BACKENDS.md, "Mutants") in the HIP kernels: mutant.gpu.<op>.<bug>
// breaks the gpu.* kernel of its op as mutant.<op>.<bug> breaks its twin. The split-KV merge class has no
// place here: gpu.attn.paged_online has no split-KV path.
struct MutantEntry {
  const char* name;
  const char* mutates;
  GpuBug bug;
  const char* bug_class;
};

constexpr MutantEntry kMutants[] = {
    {"mutant.gpu.rmsnorm.stride_ignored", "gpu.rmsnorm.cuda", GpuBug::kRowStrideIgnored,
     "vllm#24247 rows read at r * H instead of r * row_stride (as mutant.rmsnorm.stride_ignored)"},
    {"mutant.gpu.rmsnorm.residual_reread", "gpu.rmsnorm.fused_add", GpuBug::kResidualReread,
     "in-place residual read-after-write hazard: act(x + z) normalised (as mutant.rmsnorm.residual_reread)"},
    {"mutant.gpu.rmsnorm.eps_outside_rsqrt", "gpu.rmsnorm.cuda", GpuBug::kEpsOutsideRsqrt,
     "eps outside the square root: 1 / sqrt(mean) + eps (as mutant.rmsnorm.eps_outside_rsqrt)"},
    {"mutant.gpu.rmsnorm.act_accumulation", "gpu.rmsnorm.cuda", GpuBug::kActAccumulation,
     "sum of squares accumulated in the activation dtype (as mutant.rmsnorm.act_accumulation)"},
    {"mutant.gpu.rmsnorm.oob_write", "gpu.rmsnorm.cuda", GpuBug::kOobWrite,
     "out-of-bounds write one element past each row (as mutant.rmsnorm.oob_write)"},
    {"mutant.gpu.dual.weight_rounded_early", "gpu.dual.fused", GpuBug::kWeightRoundedEarly,
     "vllm#42325 act(act(x*s)*w): two roundings where one is declared (as mutant.dual.weight_rounded_early)"},
    {"mutant.gpu.dual.halves_swapped", "gpu.dual.fused", GpuBug::kHalvesSwapped,
     "norm(h) written into the first half (as mutant.dual.halves_swapped)"},
    // The GPU rmsnorm ports switch their block at 256 tokens as vLLM's csrc kernels do and declare it, so the
    // class breaks the batch-invariant one (the CPU mutant breaks cpu.rmsnorm.native for the same reason).
    {"mutant.gpu.dual.batch_variant_block", "gpu.dual.fused", GpuBug::kBatchVariantBlock,
     "vllm#48271 reduction block of 256 threads (cub order) from 2 tokens on (as "
     "mutant.rmsnorm.batch_variant_block)"},
    {"mutant.gpu.concat.halves_swapped", "gpu.concat.copy", GpuBug::kHalvesSwapped,
     "b copied before a (as mutant.concat.halves_swapped)"},
    {"mutant.gpu.attn.masked_p_times_v", "gpu.attn.paged_online", GpuBug::kMaskedPTimesV,
     "vllm#30887 masked P (0) times poisoned V to the end of the page (as mutant.attn.masked_p_times_v)"},
    {"mutant.gpu.attn.page_conversion", "gpu.attn.paged_online", GpuBug::kPageConversion,
     "vllm#24486 page id used as a 16-token block id (as mutant.attn.page_conversion)"},
    {"mutant.gpu.attn.fp8_fn_fnuz_swapped", "gpu.attn.paged_online", GpuBug::kFp8FnFnuzSwapped,
     "vllm#45562 e4m3fn and e4m3fnuz bytes decoded as each other (as mutant.attn.fp8_fn_fnuz_swapped)"},
    {"mutant.gpu.attn.no_max_subtraction", "gpu.attn.paged_online", GpuBug::kNoMaxSubtraction,
     "exp(s) without the running max (as mutant.attn.no_max_subtraction)"},
    {"mutant.gpu.attn.gqa_modulo", "gpu.attn.paged_online", GpuBug::kGqaModulo,
     "kv head h % Hkv instead of h / (Hq / Hkv) (as mutant.attn.gqa_modulo)"},
    {"mutant.gpu.attn.causal_off_by_one", "gpu.attn.paged_online", GpuBug::kCausalOffByOne,
     "causal mask sees key p + 1 (as mutant.attn.causal_off_by_one)"},
    {"mutant.gpu.attn.window_off_by_one", "gpu.attn.paged_online", GpuBug::kWindowOffByOne,
     "sliding window one key wider (as mutant.attn.window_off_by_one)"},
    {"mutant.gpu.attn.softcap_missing", "gpu.attn.paged_online", GpuBug::kSoftcapMissing,
     "softcap silently dropped (as mutant.attn.softcap_missing)"},
    {"mutant.gpu.attn.sink_dropped", "gpu.attn.paged_online", GpuBug::kSinkDropped,
     "the sink never enters the denominator (as mutant.attn.sink_dropped)"},
    {"mutant.gpu.attn.table_stride_ignored", "gpu.attn.paged_online", GpuBug::kTableStrideIgnored,
     "block table row s read at s * max_blocks, not s * row stride (as mutant.attn.table_stride_ignored)"},
};

}  // namespace

int gpu_warp_size() {
  const gpu::SlotLease slot;
  return slot->warp_size();
}

void gpu_run_on_storages(const std::vector<Storage*>& storages,
                         const std::function<void(const std::vector<void*>& device, void* stream)>& launch) {
  const gpu::SlotLease slot;
  std::vector<gpu::HostBuffer> buffers;
  for (Storage* s : storages) buffers.push_back({s->bytes.data(), s->bytes.size()});
  gpu::PackedRun run(*slot, std::move(buffers));
  run.upload();
  std::vector<void*> device(storages.size());
  for (std::size_t i = 0; i < storages.size(); ++i) device[i] = run.device(i);
  launch(device, slot->stream());
  gpu::check(hipGetLastError(), "launch");
  run.download();
}

void register_gpu_backends(Registry& r) {
  for (const KernelEntry& k : kKernels) r.add(make_gpu_backend(k.name, {k.name, k.description, "", "", {}}));
}

void register_gpu_mutants(Registry& r) {
  for (const MutantEntry& m : kMutants) {
    const auto kernel = std::find_if(std::begin(kKernels), std::end(kKernels), [&](const KernelEntry& k) {
      return std::string_view(k.name) == m.mutates;
    });
    r.add(make_gpu_backend(m.mutates, {m.name, std::string(kernel->name) + " with one bug: " + m.bug_class,
                                       m.mutates, m.bug_class, m.bug}));
  }
}

}  // namespace driftcheck
