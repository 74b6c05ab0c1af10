// The shared RMSNorm / dual-norm / concat twin implementations. Twins and mutants differ only in the
// NormKernel and NormBug they are built with (twin_norm.hpp).
#include <fmt/format.h>

#include <bit>
#include <numeric>

#include "driftcheck/device/twin_norm.hpp"

namespace driftcheck::twin {

namespace {

// vllm#48271: the csrc launchers pick the block size from the token count (1024 threads below 256 tokens, 256
// from there), so the csrc twins declare themselves not batch invariant. The mutant brings the same bug class
// to a batch-invariant twin and switches at 2 tokens, so that the oracle's batch-invariance check (a row
// alone vs in its batch) always straddles the switch in small campaign batches.
constexpr std::int64_t kLargeBatchTokens = 256;
constexpr std::int64_t kBatchVariantTokens = 2;
constexpr int kBatchVariantSmallBlock = 256;

// What one row normalisation needs, resolved once per case.
struct RowNorm {
  const NormKernel* kernel;
  NormBug bug;
  DType act;
  float eps;
  bool one_plus;
  ReduceOrder order;  // with the case's thread count and vector width
};

bool aligned16(const Tensor& t, std::int64_t elems) {
  return t.offset() % elems == 0 && (t.dim() < 2 || t.strides()[0] % elems == 0) && t.strides().back() == 1;
}

ReduceOrder resolve_order(const NormKernel& k, NormBug bug, std::int64_t rows, std::int64_t h,
                          std::initializer_list<const Tensor*> operands) {
  ReduceOrder o = k.order;
  const std::int64_t per16 = 16 / dtype_size((*operands.begin())->dtype());
  if (k.vec == VecWidth::kGcd16Bytes) o.vec = static_cast<int>(std::gcd(per16, h));
  if (k.vec == VecWidth::kIfAligned16Bytes) {
    bool ok = h % per16 == 0;
    for (const Tensor* t : operands) ok = ok && aligned16(*t, per16);
    o.vec = ok ? static_cast<int>(per16) : 1;
  }
  switch (k.threads) {
    case NormThreads::kCsrcByTokens: {
      const std::int64_t max_block = rows < kLargeBatchTokens ? 1024 : 256;
      o.threads = static_cast<int>(std::min(k.threads_per_vector ? h / o.vec : h, max_block));
      break;
    }
    case NormThreads::kTritonWarps: {
      const std::int64_t block = static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(h)));
      o.threads = (block >= 4096 ? 8 : block >= 1024 ? 4 : 2) * o.warp;
      break;
    }
    case NormThreads::kFixed:
      if (o.threads > 1) o.threads = static_cast<int>(std::min<std::int64_t>(o.threads, h));
      break;
  }
  // vllm#48271's bug class on a kernel that is otherwise batch invariant: a block of 256 threads (cub order)
  // from 2 tokens on, the kernel's own order for a row alone.
  if (bug == NormBug::kBatchVariantBlock && rows >= kBatchVariantTokens)
    o = {static_cast<int>(std::min<std::int64_t>(kBatchVariantSmallBlock, h)), 1, o.warp, true, false, false};
  return o;
}

// The bit-trick initial guess refined by two Newton steps (the "fast inverse square root"): relative error
// up to 4.7e-6, always from below.
float fast_rsqrt(float x) {
  const float half = 0.5f * x;
  float y = std::bit_cast<float>(0x5f3759dfu - (std::bit_cast<std::uint32_t>(x) >> 1));
  for (int step = 0; step < 2; ++step) y = y * (1.5f - half * y * y);
  return y;
}

float inverse_rms(const RowNorm& rn, const float* z, std::int64_t h) {
  const DType acc = rn.bug == NormBug::kActAccumulation ? rn.act : DType::kF32;
  const DType squares = rn.bug == NormBug::kSquaresInAct ? rn.act : DType::kF32;
  float mean_square = sum_squares(z, h, rn.order, acc, squares) / static_cast<float>(h);
  if (rn.bug == NormBug::kMeanSquareRounded) mean_square = round_act(rn.act, mean_square);
  const float eps = rn.bug == NormBug::kEpsFixed ? 1e-5f : rn.eps;
  if (rn.bug == NormBug::kEpsOutsideRsqrt) return 1.0f / std::sqrt(mean_square) + eps;
  if (rn.bug == NormBug::kFastRsqrt) return fast_rsqrt(mean_square + eps);
  return 1.0f / std::sqrt(mean_square + eps);
}

// y = z * s * weight, rounded where the kernel rounds. `w` holds the weights as stored.
void scale_row(const RowNorm& rn, const float* z, float s, const float* w, std::int64_t h, float* y) {
  const bool fp32_weight =
      rn.kernel->rounding == NormRounding::kFp32Weight || (rn.one_plus && rn.kernel->one_plus_rounds_once);
  const auto store = rn.bug == NormBug::kOutputTowardZero ? round_act_toward_zero : round_act;
  for (std::int64_t i = 0; i < h; ++i) {
    const float wi = !rn.one_plus                               ? w[i]
                     : rn.bug == NormBug::kOnePlusWeightRounded ? round_act(rn.act, 1.0f + w[i])
                                                                : 1.0f + w[i];
    y[i] = fp32_weight ? store(rn.act, z[i] * s * wi) : store(rn.act, round_act(rn.act, z[i] * s) * wi);
  }
}

void normalize_row(const RowNorm& rn, const float* z, const float* w, std::int64_t h, float* y) {
  scale_row(rn, z, inverse_rms(rn, z, h), w, h, y);
}

void store_row(Storage& s, RowView row, const float* v, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) store(s, row.start + i * row.step, v[i]);
}

// The out-of-bounds mutant writes the row's last value once more, one element past the row, where the storage
// has room (a real kernel would corrupt the neighbour or fault; here the guard bands see it).
void store_row_checked(Storage& s, RowView row, const float* v, std::int64_t n, NormBug bug) {
  store_row(s, row, v, n);
  const std::int64_t past = row.start + n * row.step;
  if (bug == NormBug::kOobWrite && n > 0 && past < s.numel()) store(s, past, v[n - 1]);
}

Support same_dtype(const Case& c, const Tensor& ref, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (!c.has(n)) continue;
    if (c.tensor(n).dtype() != ref.dtype())
      return Support::no(fmt::format("{} is {} but the output is {}: the kernel reads and writes one dtype",
                                     n, dtype_name(c.tensor(n).dtype()), dtype_name(ref.dtype())));
  }
  return Support::yes();
}

// The upstream defects the norm kernel parameters can reproduce (docs/FINDINGS.md names each).
constexpr std::array<DefectSwitch<NormKernel>, 1> kNormDefects{{
    defect<NormKernel, &NormKernel::misaligned_vector_faults>("misaligned_vector_faults"),
}};

bool rows_contiguous(const Tensor& t) {
  return t.strides().back() == 1 && (t.dim() < 2 || t.size(0) <= 1 || t.strides()[0] == t.size(1));
}

// vLLM's csrc rms_norm output loop reinterprets rows and the weight as vec-element vectors without checking
// their alignment: on CUDA a misaligned vector access faults ("misaligned address") and the launch fails.
void check_vector_alignment(const NormKernel& k, const ReduceOrder& o,
                            std::initializer_list<std::pair<std::string_view, const Tensor*>> operands) {
  if (!k.misaligned_vector_faults || o.vec <= 1) return;
  for (const auto& [what, t] : operands) {
    const std::int64_t rows = t->dim() < 2 ? 1 : t->size(0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t start = t->offset() + (t->dim() < 2 ? 0 : r * t->strides()[0]);
      if (start % o.vec != 0)
        throw BackendError(fmt::format(
            "CUDA error: misaligned address: {} reads {} row {} as {}-element vectors at element offset {} "
            "(no alignment check in its output loop)",
            k.name_for_reasons, what, r, o.vec, start));
    }
  }
}

// out_name: the output the kernel writes itself (empty for the dual chains, whose kernels write buffers of
// their own).
Support check_layouts(const NormKernel& k, const Case& c, bool one_plus, std::string_view out_name) {
  const std::string& who = k.name_for_reasons;
  if (one_plus && !k.one_plus_supported)
    return Support::no(fmt::format("(1 + w) weight: {} has no Gemma mode", who));
  if (k.output_contiguous && !out_name.empty() && !rows_contiguous(c.tensor(out_name)))
    return Support::no(
        fmt::format("{} rows are strided: {} checks TORCH_CHECK(out.is_contiguous())", out_name, who));
  if (k.residual_contiguous && c.has("residual") && !rows_contiguous(c.tensor("residual")))
    return Support::no(
        fmt::format("residual rows are strided: {} checks TORCH_CHECK(residual.is_contiguous())", who));
  if (k.inputs_contiguous)
    for (std::string_view in : {"e", "h"})
      if (c.has(in) && !rows_contiguous(c.tensor(in)))
        return Support::no(
            fmt::format("{} rows are strided: {} raises \"inputs must be contiguous\"", in, who));
  return Support::yes();
}

}  // namespace

Support norm_supports(const NormKernel& k, const Case& c) {
  if (c.op == OpKind::kDualRmsNormCat) {
    Support s = check_act_dtype(c.tensor("out"), "out");
    if (s.ok) s = same_dtype(c, c.tensor("out"), {"e", "h", "w_e", "w_h"});
    const bool one_plus = c.get<DualRmsNormCatParams>().weight_mode == WeightMode::kOnePlus;
    return s.ok ? check_layouts(k, c, one_plus, "") : s;
  }
  const auto& p = c.get<RmsNormParams>();
  if (p.residual && k.residual == ResidualPath::kNone)
    return Support::no(
        "fused residual add: this kernel has none (fused_add_rms_norm is cpu.rmsnorm.fused_add)");
  if (!p.residual && k.residual_required)
    return Support::no(
        "no residual: fused_add_rms_norm always adds one (plain rms_norm is cpu.rmsnorm.cuda)");
  Support s = check_act_dtype(c.tensor("y"), "y");
  if (s.ok) s = same_dtype(c, c.tensor("y"), {"x", "w", "residual"});
  return s.ok ? check_layouts(k, c, p.weight_mode == WeightMode::kOnePlus, "y") : s;
}

ReduceOrder norm_order(const NormKernel& k, NormBug bug, const Case& c) {
  if (c.op == OpKind::kDualRmsNormCat) {
    const Tensor& e = c.tensor("e");
    return resolve_order(k, bug, e.size(0), e.size(1), {&e, &c.tensor("h"), &c.tensor("out")});
  }
  const Tensor &x = c.tensor("x"), &w = c.tensor("w"), &y = c.tensor("y");
  const std::int64_t n = x.size(0), h = x.size(1);
  // fused_add_rms_norm writes its output into its input: its 16-byte path checks the input, residual and
  // weight pointers and the input stride only (layernorm_kernels.cu:333-349 at vllm 0b9c5412), never y.
  return c.get<RmsNormParams>().residual ? resolve_order(k, bug, n, h, {&x, &w, &c.tensor("residual")})
                                         : resolve_order(k, bug, n, h, {&x, &w, &y});
}

void check_norm_faults(const NormKernel& k, const ReduceOrder& o, const Case& c) {
  // The dual chains normalise each input into a fresh contiguous buffer before the copy: only the inputs and
  // weights can be misaligned.
  if (c.op == OpKind::kDualRmsNormCat)
    check_vector_alignment(
        k, o,
        {{"e", &c.tensor("e")}, {"h", &c.tensor("h")}, {"w_e", &c.tensor("w_e")}, {"w_h", &c.tensor("w_h")}});
  else
    check_vector_alignment(k, o, {{"x", &c.tensor("x")}, {"w", &c.tensor("w")}, {"y", &c.tensor("y")}});
}

Support concat_supports(const Case& c) {
  const DType t = c.tensor("out").dtype();
  if (c.tensor("a").dtype() != t || c.tensor("b").dtype() != t)
    return Support::no("a, b and out must share one dtype: the copy kernel moves bytes, it does not convert");
  return Support::yes();
}

std::vector<std::string> norm_defects(const NormKernel& k) {
  return defects_on(k, kNormDefects);
}

bool repair_norm_defects(NormKernel& k, const std::vector<std::string>& names) {
  return repair_defects(k, kNormDefects, names);
}

namespace {

class RmsNormTwin final : public TwinBackend {
 public:
  RmsNormTwin(TwinInfo info, NormKernel kernel, NormBug bug)
      : TwinBackend(std::move(info)), kernel_(kernel), bug_(bug) {}
  std::vector<std::string> modelled_defects() const override { return norm_defects(kernel_); }
  std::unique_ptr<Backend> without_defects(const std::vector<std::string>& names) const override {
    NormKernel k = kernel_;
    if (!repair_norm_defects(k, names)) return nullptr;
    return std::make_unique<RmsNormTwin>(info(), k, bug_);
  }

  Support supports(const Case& c) const override { return norm_supports(kernel_, c); }

  void run(Case& c) const override {
    const auto& p = c.get<RmsNormParams>();
    const Tensor& x = c.tensor("x");
    const Tensor& w = c.tensor("w");
    Tensor& y = c.tensor("y");
    Tensor* res = p.residual ? &c.tensor("residual") : nullptr;
    const std::int64_t n = x.size(0), h = x.size(1);
    const RowNorm rn{&kernel_,
                     bug_,
                     y.dtype(),
                     static_cast<float>(p.eps),
                     p.weight_mode == WeightMode::kOnePlus,
                     norm_order(kernel_, bug_, c)};
    check_norm_faults(kernel_, rn.order, c);
    ResidualPath path = rn.one_plus && kernel_.one_plus_residual != ResidualPath::kNone
                            ? kernel_.one_plus_residual
                            : kernel_.residual;
    if (rn.one_plus && kernel_.one_plus_f16_residual_fp32 && rn.act == DType::kF16)
      path = ResidualPath::kFp32;
    std::vector<float> wv(static_cast<std::size_t>(h)), z(wv.size()), r(wv.size()), out(wv.size());
    load_run(*w.storage(), w.offset(), w.strides()[0], h, wv.data());
    for (std::int64_t row = 0; row < n; ++row) {
      RowView xr = row_view(x, row);
      if (bug_ == NormBug::kRowStrideIgnored) xr.start = x.offset() + row * h * xr.step;
      load_run(*x.storage(), xr.start, xr.step, h, z.data());
      if (res) add_residual(*res, path, row, z.data(), r.data(), h, rn.act);
      const float s = inverse_rms(rn, z.data(), h);
      if (res && bug_ == NormBug::kResidualReread) reread_residual(*res, row, x, r.data(), rn.act);
      scale_row(rn, res && bug_ == NormBug::kResidualReread ? r.data() : z.data(), s, wv.data(), h,
                out.data());
      store_row_checked(*y.storage(), row_view(y, row), out.data(), h, bug_);
    }
  }

 private:
  // z <- x + r as the kernel forms it, and the residual updated in place.
  void add_residual(Tensor& res, ResidualPath path, std::int64_t row, float* z, float* r, std::int64_t h,
                    DType act) const {
    const RowView rr = row_view(res, row);
    load_run(*res.storage(), rr.start, rr.step, h, r);
    for (std::int64_t i = 0; i < h; ++i) {
      z[i] += r[i];
      if (path == ResidualPath::kRounded) z[i] = round_act(act, z[i]);
      r[i] = round_act(act, z[i]);
    }
    store_row(*res.storage(), rr, r, h);
  }

  // The in-place read-after-write hazard: the second pass forms act(x + residual) again, but the residual
  // already holds z, so it gets act(x + z), which is then scaled with the scale computed from z.
  void reread_residual(const Tensor& res, std::int64_t row, const Tensor& x, float* again, DType act) const {
    const std::int64_t h = x.size(1);
    std::vector<float> xr(static_cast<std::size_t>(h));
    const RowView xv = row_view(x, row), rv = row_view(res, row);
    load_run(*x.storage(), xv.start, xv.step, h, xr.data());
    load_run(*res.storage(), rv.start, rv.step, h, again);
    for (std::int64_t i = 0; i < h; ++i) again[i] = round_act(act, xr[i] + again[i]);
  }

  NormKernel kernel_;
  NormBug bug_;
};

class DualTwin final : public TwinBackend {
 public:
  DualTwin(TwinInfo info, NormKernel kernel, NormBug bug)
      : TwinBackend(std::move(info)), kernel_(kernel), bug_(bug) {}
  std::vector<std::string> modelled_defects() const override { return norm_defects(kernel_); }
  std::unique_ptr<Backend> without_defects(const std::vector<std::string>& names) const override {
    NormKernel k = kernel_;
    if (!repair_norm_defects(k, names)) return nullptr;
    return std::make_unique<DualTwin>(info(), k, bug_);
  }

  Support supports(const Case& c) const override { return norm_supports(kernel_, c); }

  // Both halves of a row are normalised independently (grid (rows, 2) in the fused kernel; two launches in
  // the unfused chain, whose concat copy is exact and so writes the same bits).
  void run(Case& c) const override {
    const auto& p = c.get<DualRmsNormCatParams>();
    Tensor& out = c.tensor("out");
    const std::int64_t n = out.size(0), h = c.tensor("e").size(1);
    const RowNorm rn{&kernel_,
                     bug_,
                     out.dtype(),
                     static_cast<float>(p.eps),
                     p.weight_mode == WeightMode::kOnePlus,
                     norm_order(kernel_, bug_, c)};
    check_norm_faults(kernel_, rn.order, c);
    std::vector<float> z(static_cast<std::size_t>(h)), w(z.size()), y(z.size());
    const bool swapped = bug_ == NormBug::kHalvesSwapped;
    for (int half = 0; half < 2; ++half) {
      const Tensor& in = c.tensor(half == 0 ? "e" : "h");
      const Tensor& wt = c.tensor(half == 0 ? "w_e" : "w_h");
      load_run(*wt.storage(), wt.offset(), wt.strides()[0], h, w.data());
      const std::int64_t column = (half == 0) != swapped ? 0 : h;
      for (std::int64_t row = 0; row < n; ++row) {
        const RowView xr = row_view(in, row);
        load_run(*in.storage(), xr.start, xr.step, h, z.data());
        normalize_row(rn, z.data(), w.data(), h, y.data());
        RowView orow = row_view(out, row);
        orow.start += column * orow.step;
        store_row(*out.storage(), orow, y.data(), h);
      }
    }
  }

 private:
  NormKernel kernel_;
  NormBug bug_;
};

void copy_elements(const Tensor& src, std::int64_t row, Tensor& dst, std::int64_t column) {
  const std::int64_t width = src.size(1), size = dtype_size(src.dtype());
  const RowView s = row_view(src, row);
  RowView d = row_view(dst, row);
  d.start += column * d.step;
  const std::byte* from = src.storage()->bytes.data();
  std::byte* to = dst.storage()->bytes.data();
  for (std::int64_t i = 0; i < width; ++i)
    std::memcpy(to + (d.start + i * d.step) * size, from + (s.start + i * s.step) * size,
                static_cast<std::size_t>(size));
}

class ConcatTwin final : public TwinBackend {
 public:
  ConcatTwin(TwinInfo info, NormBug bug) : TwinBackend(std::move(info)), bug_(bug) {}

  Support supports(const Case& c) const override { return concat_supports(c); }

  // A byte copy: bit-exact for every dtype, NaN payloads included.
  void run(Case& c) const override {
    const Tensor& a = c.tensor("a");
    const Tensor& b = c.tensor("b");
    Tensor& out = c.tensor("out");
    const bool swapped = bug_ == NormBug::kHalvesSwapped;
    for (std::int64_t row = 0; row < out.size(0); ++row) {
      copy_elements(swapped ? b : a, row, out, 0);
      copy_elements(swapped ? a : b, row, out, swapped ? b.size(1) : a.size(1));
    }
  }

 private:
  NormBug bug_;
};

}  // namespace

std::unique_ptr<Backend> make_rmsnorm_backend(TwinInfo info, NormKernel kernel, NormBug bug) {
  info.op = OpKind::kRmsNorm;
  return std::make_unique<RmsNormTwin>(std::move(info), kernel, bug);
}

std::unique_ptr<Backend> make_dual_backend(TwinInfo info, NormKernel kernel, NormBug bug) {
  info.op = OpKind::kDualRmsNormCat;
  return std::make_unique<DualTwin>(std::move(info), kernel, bug);
}

std::unique_ptr<Backend> make_concat_backend(TwinInfo info, NormBug bug) {
  info.op = OpKind::kConcat;
  return std::make_unique<ConcatTwin>(std::move(info), bug);
}

}  // namespace driftcheck::twin
