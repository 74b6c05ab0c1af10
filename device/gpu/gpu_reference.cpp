// The fp64 attention reference on the GPU: the case's input storages uploaded whole in one packed copy, the
// partial-state and merge kernels of reference_kernels.hip, and o / lse downloaded straight into the output
// tensors. docs/REFERENCE.md derives the bound within which it agrees with the CPU reference.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "device_slots.hpp"
#include "driftcheck/device/gpu.hpp"
#include "driftcheck/reference/reference.hpp"
#include "reference_kernels.hpp"

namespace driftcheck {
namespace {

// Keys per partial state: long enough that a chunk's two passes amortise the merge, short enough that a
// 128k-token decode row spreads over 128 blocks (a decode batch of MiniMax-M3 shapes fills the GPU).
constexpr std::int64_t kChunk = 1024;

gpu::DeviceView view_of(const Tensor& t, std::byte* base) {
  gpu::DeviceView v;
  v.base = base;
  v.dtype = t.dtype();
  v.offset = t.offset();
  v.storage_numel = t.storage()->numel();
  for (std::int64_t d = 0; d < t.dim() && d < gpu::kMaxDims; ++d) v.stride[d] = t.strides()[d];
  return v;
}

std::int64_t longest_sequence(const Case& c) {
  std::int64_t longest = 0;
  const Tensor& lens = c.tensor("seq_lens");
  for (std::int64_t s = 0; s < lens.size(0); ++s)
    longest = std::max(longest, static_cast<std::int64_t>(lens.at({s})));
  return longest;
}

}  // namespace

std::optional<Outputs> gpu_reference_attention(const Case& c) {
  validate(c);
  const auto& p = c.get<AttentionParams>();
  if (p.head_dim > gpu::kRefMaxHeadDim) return std::nullopt;
  const std::int64_t tokens = c.tensor("q").size(0);
  Outputs out;
  Tensor& o = out["o"] = Tensor::zeros(DType::kF64, {tokens, p.num_q_heads, p.head_dim});
  Tensor& lse = out["lse"] = Tensor::zeros(DType::kF64, {tokens, p.num_q_heads});
  const std::int64_t splits = std::max<std::int64_t>(1, (longest_sequence(c) + kChunk - 1) / kChunk);
  const auto partial_bytes =
      static_cast<std::size_t>(tokens * p.num_q_heads * splits * (p.head_dim + 2)) * sizeof(double);

  std::vector<const char*> inputs = {"q", "k_cache", "v_cache", "block_table", "seq_lens", "query_start_loc"};
  if (p.has_sinks) inputs.push_back("sinks");
  std::vector<Storage*> storages;
  std::vector<gpu::HostBuffer> buffers;
  for (const char* name : inputs) {
    Storage* s = c.tensor(name).storage().get();
    if (std::find(storages.begin(), storages.end(), s) != storages.end()) continue;
    storages.push_back(s);
    buffers.push_back({s->bytes.data(), s->bytes.size(), true, false});
  }
  // Inputs, then the flag (both ways), then the outputs, then the partial states (device only): each copy
  // spans only what it moves.
  int nonfinite = 0;
  const std::size_t flag = buffers.size();
  buffers.push_back({reinterpret_cast<std::byte*>(&nonfinite), sizeof nonfinite, true, true});
  buffers.push_back({o.storage()->bytes.data(), o.storage()->bytes.size(), false, true});
  buffers.push_back({lse.storage()->bytes.data(), lse.storage()->bytes.size(), false, true});
  buffers.push_back({nullptr, partial_bytes, false, false});

  const gpu::SlotLease slot;
  gpu::PackedRun run(*slot, std::move(buffers));
  const auto device_view = [&](const char* name) {
    const Tensor& t = c.tensor(name);
    const auto at = std::find(storages.begin(), storages.end(), t.storage().get()) - storages.begin();
    return view_of(t, run.device(static_cast<std::size_t>(at)));
  };
  gpu::ReferenceArgs a;
  a.q = device_view("q");
  a.k_cache = device_view("k_cache");
  a.v_cache = device_view("v_cache");
  a.block_table = device_view("block_table");
  a.seq_lens = device_view("seq_lens");
  a.query_start_loc = device_view("query_start_loc");
  if (p.has_sinks) a.sinks = device_view("sinks");
  a.num_tokens = tokens;
  a.num_seqs = c.tensor("seq_lens").size(0);
  a.num_q_heads = p.num_q_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.head_dim = p.head_dim;
  a.block_size = p.block_size;
  a.logit_scale = p.scale * p.k_scale;  // as reference_attention: s = (q . k) * (scale * k_scale)
  a.softcap = p.softcap;
  a.v_scale = p.v_scale;
  a.window = p.window;
  a.causal = p.causal;
  a.has_sinks = p.has_sinks;
  a.chunk = kChunk;
  a.splits = splits;
  a.nonfinite = reinterpret_cast<int*>(run.device(flag));
  a.o = reinterpret_cast<double*>(run.device(flag + 1));
  a.lse = reinterpret_cast<double*>(run.device(flag + 2));
  a.partials = reinterpret_cast<double*>(run.device(flag + 3));
  run.upload();
  gpu::check(gpu::launch_reference_attention(a, slot->stream()), "reference launch");
  run.download();
  if (nonfinite) return std::nullopt;
  return out;
}

namespace {

// Multiply-adds of q . k over every visible (query, key) pair, per q head: the reference's work.
std::int64_t attention_work(const Case& c) {
  const auto& p = c.get<AttentionParams>();
  const Tensor& lens = c.tensor("seq_lens");
  const Tensor& qsl = c.tensor("query_start_loc");
  std::int64_t work = 0;
  for (std::int64_t s = 0; s < lens.size(0); ++s) {
    const auto len = static_cast<std::int64_t>(lens.at({s}));
    const auto q = static_cast<std::int64_t>(qsl.at({s + 1}) - qsl.at({s}));
    const std::int64_t keys = p.window > 0 ? std::min(len, p.window) : len;
    work += q * keys;
  }
  return work * p.num_q_heads * p.head_dim;
}

}  // namespace

std::optional<Outputs> gpu_reference_if_worth_it(const Case& c, std::int64_t min_work) {
  if (c.op != OpKind::kAttention || !gpu::device_present() || attention_work(c) < min_work) return {};
  return gpu_reference_attention(c);
}

}  // namespace driftcheck
