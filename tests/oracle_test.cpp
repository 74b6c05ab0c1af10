// The oracle: each verdict is produced by a hand-made fault, the tolerance derivation holds on worked
// examples, and the tolerance is tight enough to catch one extra rounding yet loose enough for a correct fp32
// kernel.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>

#include <fmt/format.h>

#include "case_builders.hpp"
#include "driftcheck/device/registry.hpp"
#include "driftcheck/fuzz/oracle.hpp"
#include "driftcheck/fuzz/output_hints.hpp"
#include "driftcheck/fuzz/spec.hpp"

namespace driftcheck::fuzz {
namespace {

// A backend made of a function, for faults built by hand.
class FnBackend : public Backend {
 public:
  FnBackend(OpKind op, std::function<void(Case&)> fn, Numerics n = {})
      : op_(op), fn_(std::move(fn)), numerics_(n) {}
  std::string_view name() const override { return "test.fn"; }
  std::string_view description() const override { return "hand-made test backend"; }
  BackendKind kind() const override { return BackendKind::kCpu; }
  OpKind op() const override { return op_; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(Case& c) const override { fn_(c); }
  Numerics numerics() const override { return numerics_; }

 private:
  OpKind op_;
  std::function<void(Case&)> fn_;
  Numerics numerics_;
};

// The ideal kernel: the fp64 reference rounded once into each output.
void write_reference(Case& c) {
  const Outputs ref = reference(c);
  for (const auto& [name, t] : ref) c.tensor(name).copy_from(t.to_f64());
}

CaseSpec rms_spec() {
  CaseSpec s;
  s.op = OpKind::kRmsNorm;
  s.params = RmsNormParams{1e-6, WeightMode::kPlain, false};
  s.rows = 4;
  s.hidden = 96;
  s.row_pad = 3;
  s.base_offset = 2;
  s.value_seed = 5;
  return s;
}

CaseSpec attn_spec() {
  CaseSpec s;
  s.op = OpKind::kAttention;
  AttentionParams p;
  p.num_q_heads = 4;
  p.num_kv_heads = 1;
  p.head_dim = 32;
  p.block_size = 16;
  p.scale = 1.0 / std::sqrt(32.0);
  s.params = p;
  s.query_lens = {1, 3};
  s.seq_lens = {20, 33};
  s.spare_blocks = 1;
  s.value_seed = 3;
  return s;
}

Evaluation judge(const CaseSpec& s, const std::function<void(Case&)>& fn, Numerics n = {}) {
  const PreparedCase pc = prepare(materialize(s));
  return evaluate(FnBackend(s.op, fn, n), pc);
}

void bump(Tensor& t, std::initializer_list<std::int64_t> idx, int ulps) {
  double v = t.at(idx);
  for (int k = 0; k < ulps; ++k) v = next_up(t.dtype(), v);
  t.set(idx, v);
}

TEST(Oracle, IdealKernelPasses) {
  for (const CaseSpec& s : {rms_spec(), attn_spec()}) {
    const Evaluation ev = judge(s, write_reference);
    EXPECT_EQ(ev.verdict, Verdict::kPass) << ev.detail;
    EXPECT_LE(ev.worst_ratio, 1.0);
    EXPECT_FALSE(ev.outputs.empty());
  }
}

// fp8 cache, a decode sequence and a 3-token extend sequence: the new tokens' inputs differ from the
// dequantised cache, so a backend that reads them (NewKv::kInputs) is judged against the reference that reads
// them, which differs from the cache one in the extend sequence's rows only.
CaseSpec fp8_extend_spec() {
  CaseSpec s = attn_spec();
  s.kv_dtype = DType::kF8E4M3FN;
  auto& p = std::get<AttentionParams>(s.params);
  p.k_scale = 0.5;
  p.v_scale = 0.0625;
  return s;
}

void write_reference_from_inputs(Case& c) {
  const Outputs ref = reference_attention(c, NewKv::kInputs);
  for (const auto& [name, t] : ref) c.tensor(name).copy_from(t.to_f64());
}

TEST(Oracle, NewKvFromInputsIsJudgedAgainstTheInputsReference) {
  const PreparedCase pc = prepare(materialize(fp8_extend_spec()));
  ASSERT_NE(pc.from_inputs, nullptr);
  const auto cache = pc.reference.at("o").to_f64(), inputs = pc.from_inputs->reference.at("o").to_f64();
  const std::size_t decode_row = 4 * 32;  // token 0 (the decode sequence): 4 heads of 32
  std::size_t extend_changed = 0;
  for (std::size_t i = 0; i < cache.size(); ++i) {
    if (i < decode_row)
      EXPECT_EQ(cache[i], inputs[i]) << i;
    else
      extend_changed += cache[i] != inputs[i];
  }
  EXPECT_GT(extend_changed, cache.size() / 2);
  Numerics from_inputs;
  from_inputs.new_kv = NewKv::kInputs;
  // Each ideal kernel passes against its own source's reference and fails against the other one: the
  // inputs and the cache differ by up to half an fp8 ulp, far beyond the tolerance of one rounding.
  EXPECT_EQ(evaluate(FnBackend(OpKind::kAttention, write_reference_from_inputs, from_inputs), pc).verdict,
            Verdict::kPass);
  EXPECT_EQ(evaluate(FnBackend(OpKind::kAttention, write_reference), pc).verdict, Verdict::kPass);
  EXPECT_EQ(evaluate(FnBackend(OpKind::kAttention, write_reference, from_inputs), pc).verdict,
            Verdict::kBeyondTolerance);
  EXPECT_EQ(evaluate(FnBackend(OpKind::kAttention, write_reference_from_inputs), pc).verdict,
            Verdict::kBeyondTolerance);
}

// kv_dequant_rounded_prefill (ROCM_ATTN: only its prefill kernel rounds the dequantised fp8 context to act)
// adds the dequantisation term to the elements of the extend sequence's rows and to no decode row: the decode
// row's tolerance is that without the term, the extend rows' that with kv_dequant_rounded.
TEST(Oracle, KvDequantRoundedPrefillScopesTheTermToPrefillRows) {
  const PreparedCase pc = prepare(materialize(fp8_extend_spec()));
  const std::size_t decode_row = 4 * 32;  // token 0 (the decode sequence): 4 heads of 32
  Numerics none, all, prefill;
  all.kv_dequant_rounded = true;
  prefill.kv_dequant_rounded_prefill = true;
  const ErrorModel& m = pc.model.at("o");
  const auto ref = pc.reference.at("o").to_f64();
  std::size_t extend_wider = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double t_none = tolerance(m, none, i, ref[i]), t_all = tolerance(m, all, i, ref[i]);
    EXPECT_EQ(tolerance(m, prefill, i, ref[i]), i < decode_row ? t_none : t_all) << i;
    extend_wider += i >= decode_row && t_all > t_none;
  }
  EXPECT_GT(extend_wider, (ref.size() - decode_row) / 2);
  const ErrorModel& l = pc.model.at("lse");
  for (std::size_t row = 0; row < 4; ++row)
    EXPECT_EQ(tolerance(l, prefill, row, 0.0), tolerance(l, none, row, 0.0)) << row;
  EXPECT_EQ(tolerance(l, prefill, 4, 0.0), tolerance(l, all, 4, 0.0));
  EXPECT_GT(tolerance(l, all, 4, 0.0), tolerance(l, none, 4, 0.0));
}

// fp8_mfma_decode (aiter paged_attention_v1's fp8 MFMAs: q and P rounded to the cache's fp8 first) widens the
// decode rows' tolerances and no extend row's. A kernel that attends exactly with the decode row's q rounded
// to the cache's e4m3 passes with the declaration and fails without it: q's rounding (up to 2^-4 relative)
// moves the logits far beyond what fp32 arithmetic may.
TEST(Oracle, Fp8MfmaDecodeCoversQRoundedToTheCacheFormatInDecodeRowsOnly) {
  const Case c = materialize(fp8_extend_spec());
  const PreparedCase pc = prepare(c);
  const std::size_t decode_row = 4 * 32;  // token 0 (the decode sequence): 4 heads of 32
  Numerics none, fp8;
  fp8.fp8_mfma_decode = true;
  const ErrorModel& m = pc.model.at("o");
  const auto ref = pc.reference.at("o").to_f64();
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (i < decode_row)
      EXPECT_GT(tolerance(m, fp8, i, ref[i]), tolerance(m, none, i, ref[i])) << i;
    else
      EXPECT_EQ(tolerance(m, fp8, i, ref[i]), tolerance(m, none, i, ref[i])) << i;
  }
  EXPECT_GT(tolerance(pc.model.at("lse"), fp8, 0, 0.0), tolerance(pc.model.at("lse"), none, 0, 0.0));
  EXPECT_EQ(tolerance(pc.model.at("lse"), fp8, 4, 0.0), tolerance(pc.model.at("lse"), none, 4, 0.0));
  const DType kv = c.tensor("k_cache").dtype();
  const auto q_rounded = [kv](Case& x) {
    Case rounded = x.clone();
    Tensor& q = rounded.tensor("q");
    const Tensor& qsl = x.tensor("query_start_loc");
    for (std::int64_t s = 0; s + 1 < qsl.numel(); ++s) {
      const auto t = static_cast<std::int64_t>(qsl.at({s}));
      if (qsl.at({s + 1}) - qsl.at({s}) != 1) continue;  // the decode sequences' rows only
      for (std::int64_t h = 0; h < q.size(1); ++h)
        for (std::int64_t d = 0; d < q.size(2); ++d) q.set({t, h, d}, round_to(kv, q.at({t, h, d})));
    }
    const Outputs exact = reference(rounded);
    for (const auto& [name, t] : exact) x.tensor(name).copy_from(t.to_f64());
  };
  std::size_t moved = 0;
  for (std::int64_t d = 0; d < 32; ++d)
    moved += round_to(kv, c.tensor("q").at({0, 0, d})) != c.tensor("q").at({0, 0, d});
  ASSERT_GT(moved, 16U);
  const Evaluation with = evaluate(FnBackend(OpKind::kAttention, q_rounded, fp8), pc);
  EXPECT_EQ(with.verdict, Verdict::kPass) << with.detail;
  EXPECT_EQ(evaluate(FnBackend(OpKind::kAttention, q_rounded), pc).verdict, Verdict::kBeyondTolerance);
}

// Where the inputs equal the cache (bf16 cache, or no prefill/extend sequence) the two semantics are one:
// no second reference is computed.
TEST(Oracle, NewKvFromInputsNeedsNoSecondReferenceWhereTheyEqualTheCache) {
  const Case bf16 = materialize(attn_spec());
  for (const char* name : {"o", "lse"})
    EXPECT_EQ(reference_attention(bf16, NewKv::kInputs).at(name).to_f64(),
              reference_attention(bf16, NewKv::kCache).at(name).to_f64());
  EXPECT_EQ(prepare(bf16.clone()).from_inputs, nullptr);
  CaseSpec decode = fp8_extend_spec();
  decode.query_lens = {1, 1};
  EXPECT_EQ(prepare(materialize(decode)).from_inputs, nullptr);
  Case no_inputs = materialize(fp8_extend_spec());
  no_inputs.tensors.erase("k_new");
  no_inputs.tensors.erase("v_new");
  EXPECT_EQ(prepare(std::move(no_inputs)).from_inputs, nullptr);
}

TEST(Oracle, ThrowingBackendIsAnError) {
  const Evaluation ev = judge(rms_spec(), [](Case&) { throw BackendError("launch failed"); });
  EXPECT_EQ(ev.verdict, Verdict::kError);
  EXPECT_EQ(ev.detail, "launch failed");
}

TEST(Oracle, WriteOutsideTheOutputIsAGuardViolation) {
  const Evaluation ev = judge(rms_spec(), [](Case& c) {
    write_reference(c);
    Tensor& y = c.tensor("y");
    y.storage()->store(y.index({0, 95}) + 1, 0.5);  // the row padding after row 0
  });
  EXPECT_EQ(ev.verdict, Verdict::kGuardViolation) << ev.detail;
  EXPECT_NE(ev.detail.find("'y'"), std::string::npos) << ev.detail;
}

TEST(Oracle, ModifiedInputIsReported) {
  const Evaluation ev = judge(rms_spec(), [](Case& c) {
    write_reference(c);
    c.tensor("x").set({1, 1}, 0.0);
  });
  EXPECT_EQ(ev.verdict, Verdict::kInputModified) << ev.detail;
}

TEST(Oracle, InPlaceOutputMayOverwriteItsInput) {
  CaseSpec s = rms_spec();
  s.inplace_output = true;
  auto p = std::get<RmsNormParams>(s.params);
  p.residual = true;
  s.params = p;
  EXPECT_EQ(judge(s, write_reference).verdict, Verdict::kPass);
}

TEST(Oracle, NanWhereTheReferenceIsFinite) {
  const Evaluation ev = judge(attn_spec(), [](Case& c) {
    write_reference(c);
    c.tensor("o").set({2, 1, 7}, std::nan(""));
  });
  EXPECT_EQ(ev.verdict, Verdict::kNanMismatch);
  EXPECT_NE(ev.detail.find("o[2, 1, 7]"), std::string::npos) << ev.detail;
}

TEST(Oracle, InfinityWhereTheReferenceIsFinite) {
  const Evaluation ev = judge(rms_spec(), [](Case& c) {
    write_reference(c);
    c.tensor("y").set({3, 0}, INFINITY);
  });
  EXPECT_EQ(ev.verdict, Verdict::kInfMismatch) << ev.detail;
}

// One bf16 decode row over 20 keys: key 0's logit is `top`, every other key's 0, and key 5's value is +inf in
// column 0, so the exact o[0, 0, 0] is +inf with weight about e^-top.
Case infinite_value_case(double top) {
  Case c = builders::attention_case(builders::one_head(DType::kBF16, 1, 20), 4);
  c.tensor("q").copy_from(std::vector<double>(32, 1.0));
  const auto slot = [&](std::int64_t t) -> std::pair<std::int64_t, std::int64_t> {
    return {static_cast<std::int64_t>(c.tensor("block_table").at({0, t / 16})), t % 16};
  };
  for (std::int64_t t = 0; t < 20; ++t)
    for (std::int64_t d = 0; d < 32; ++d)
      c.tensor("k_cache").set({slot(t).first, slot(t).second, 0, d}, t == 0 ? top / 32 : 0.0);
  c.tensor("v_cache").set({slot(5).first, slot(5).second, 0, 0}, INFINITY);
  return c;
}

// fp64 0 * inf is NaN but the exact o is the infinity; a kernel's fp32 P underflows far earlier (below
// 2^-126 with FTZ), where its 0 * inf = NaN is conforming (docs/ORACLE.md section 2 step 4). Where the weight
// is representable, NaN stays a nan_mismatch.
TEST(Oracle, NanForAnInfinityIsConformingOnlyWhereItsWeightUnderflows) {
  const auto nan_for_inf = [](Case& c) {
    write_reference(c);
    c.tensor("o").set({0, 0, 0}, std::nan(""));
  };
  const PreparedCase under = prepare(infinite_value_case(200));  // weight e^-200 < 2^-126 = e^-87.3
  ASSERT_TRUE(std::isinf(under.reference.at("o").at({0, 0, 0})));
  const Evaluation accepted = evaluate(FnBackend(OpKind::kAttention, nan_for_inf), under);
  EXPECT_EQ(accepted.verdict, Verdict::kPass) << accepted.detail;
  // The faithful fp32 twin gives exactly that NaN.
  const Evaluation twin = evaluate(*registry().find("cpu.attn.triton_unified"), under, EvalOptions{false});
  EXPECT_TRUE(std::isnan(twin.outputs.at("o").at({0, 0, 0})));
  EXPECT_EQ(twin.verdict, Verdict::kPass) << twin.detail;

  const PreparedCase representable = prepare(infinite_value_case(60));  // e^-60 > 2^-126
  const Evaluation rejected = evaluate(FnBackend(OpKind::kAttention, nan_for_inf), representable);
  EXPECT_EQ(rejected.verdict, Verdict::kNanMismatch) << rejected.detail;
  EXPECT_NE(rejected.detail.find("o[0, 0, 0]: nan where the reference is inf"), std::string::npos)
      << rejected.detail;
}

// FlashAttention-2 writes lse = +inf for a row whose softmax sum is NaN (docs/ORACLE.md step 4): a NaN
// element of q makes every logit of its row NaN, so the reference's o and lse there are NaN. A kernel that
// writes the reference but +inf for that lse passes only when it declares lse_undefined_inf; +inf anywhere
// else, or another value there, still fails.
TEST(Oracle, LseUndefinedInfIsAcceptedOnlyWhereDeclared) {
  Case c = builders::attention_case(builders::one_head(DType::kBF16, 1, 20), 4);
  c.tensor("q").set({0, 0, 3}, std::nan(""));
  const PreparedCase p = prepare(std::move(c));
  ASSERT_TRUE(std::isnan(p.reference.at("lse").at({0, 0})));
  ASSERT_TRUE(std::isnan(p.reference.at("o").at({0, 0, 0})));
  const auto lse_to = [](double v) {
    return [v](Case& x) {
      write_reference(x);
      x.tensor("lse").set({0, 0}, v);
    };
  };
  Numerics flash;
  flash.lse_undefined_inf = true;
  EXPECT_EQ(evaluate(FnBackend(OpKind::kAttention, lse_to(INFINITY), flash), p).verdict, Verdict::kPass);
  const Evaluation undeclared = evaluate(FnBackend(OpKind::kAttention, lse_to(INFINITY)), p);
  EXPECT_EQ(undeclared.verdict, Verdict::kNanMismatch) << undeclared.detail;
  // Only +inf is the convention: -inf or a number where the reference is NaN still fails.
  EXPECT_EQ(evaluate(FnBackend(OpKind::kAttention, lse_to(-INFINITY), flash), p).verdict,
            Verdict::kNanMismatch);
  EXPECT_EQ(evaluate(FnBackend(OpKind::kAttention, lse_to(2.5), flash), p).verdict, Verdict::kNanMismatch);
  // +inf where the reference lse is finite is no convention at all.
  const PreparedCase finite = prepare(builders::attention_case(builders::one_head(DType::kBF16, 1, 20), 4));
  ASSERT_TRUE(std::isfinite(finite.reference.at("lse").at({0, 0})));
  EXPECT_EQ(evaluate(FnBackend(OpKind::kAttention, lse_to(INFINITY), flash), finite).verdict,
            Verdict::kInfMismatch);
}

TEST(Oracle, UnwrittenOutputKeepsPoisonAndFails) {
  const Evaluation ev = judge(rms_spec(), [](Case&) {});
  EXPECT_TRUE(ev.verdict == Verdict::kNanMismatch || ev.verdict == Verdict::kInfMismatch ||
              ev.verdict == Verdict::kBeyondTolerance)
      << verdict_name(ev.verdict);
}

// The hints for common mistakes in writing outputs (output_hints.hpp) lead the detail; the verdict is
// unchanged.
TEST(OutputHints, UnwrittenOutputsAreNamed) {
  const Evaluation ev = judge(rms_spec(), [](Case&) {});
  EXPECT_TRUE(ev.detail.starts_with(
      "output y was never written (the kernel returned its result instead of writing into y?); "))
      << ev.detail;
  // An in-place output left as its input: the fused residual not written back (PR #14464's class).
  CaseSpec residual = rms_spec();
  std::get<RmsNormParams>(residual.params).residual = true;
  const Evaluation kept = judge(residual, [](Case& c) {
    const std::vector<double> r = c.tensor("residual").to_f64();  // the handed-over input, exact
    write_reference(c);
    c.tensor("residual").copy_from(r);
  });
  EXPECT_TRUE(is_failure(kept.verdict)) << verdict_name(kept.verdict);
  EXPECT_TRUE(kept.detail.starts_with("output residual was never written")) << kept.detail;
  // An attention kernel that writes o but not lse.
  const Evaluation no_lse = judge(attn_spec(), [](Case& c) {
    const std::vector<double> lse = c.tensor("lse").to_f64();  // poison, as handed over
    write_reference(c);
    c.tensor("lse").copy_from(lse);
  });
  EXPECT_TRUE(no_lse.detail.starts_with("output lse was never written")) << no_lse.detail;
  EXPECT_EQ(no_lse.detail.find("output o"), std::string::npos) << no_lse.detail;
  // Wrong values are not "never written".
  const Evaluation wrong = judge(rms_spec(), [](Case& c) {
    write_reference(c);
    c.tensor("y").set({0, 0}, 7.0);
  });
  EXPECT_EQ(wrong.verdict, Verdict::kBeyondTolerance);
  EXPECT_EQ(wrong.detail.find("never written"), std::string::npos) << wrong.detail;
}

// A NaN-only view (one lse element, whose poison was NaN and whose kernel wrote NaN) is not "never written":
// a failing kernel writes NaN itself.
TEST(OutputHints, NanOnlyViewsAreNotCalledUnwritten) {
  CaseSpec s = attn_spec();
  s.query_lens = {1};
  s.seq_lens = {20};
  std::get<AttentionParams>(s.params).num_q_heads = 1;
  const PreparedCase pc = prepare(materialize(s));
  const Case& handed = pc.input;
  Case run = handed.clone();
  write_reference(run);
  const double poison = handed.tensor("lse").at({0, 0});
  run.tensor("lse").set({0, 0}, poison);
  const std::string hint = output_hints(handed, run, pc.reference);
  EXPECT_EQ(hint.empty(), !std::isfinite(poison)) << hint << " (poison " << poison << ")";
}

// Float values written where a bf16 output's bits go: as float32 at the element's address in float units (a
// bf16 buffer taken for float*), or cast to integer codes (NumPy's uint16 holding of bf16).
TEST(OutputHints, FloatsInABf16ViewAreNamed) {
  CaseSpec s = rms_spec();
  s.row_pad = 0;
  s.rows = 2;
  s.hidden = 64;
  s.distribution = Distribution::kOutlierChannels;  // values >= 1 too, so integer codes are not all zero
  const auto as_float32 = [](Case& c) {
    const Outputs ref = reference(c);
    Tensor& y = c.tensor("y");
    const std::vector<double> v = ref.at("y").to_f64();
    auto& bytes = y.storage()->bytes;
    for (std::int64_t i = 0; i < y.numel(); ++i) {
      const auto at = static_cast<std::size_t>(y.index_of_linear(i)) * 4;
      const float f = static_cast<float>(v[static_cast<std::size_t>(i)]);
      if (at + 4 <= bytes.size()) std::memcpy(bytes.data() + at, &f, 4);
    }
  };
  const Evaluation f32 = judge(s, as_float32);
  EXPECT_TRUE(is_failure(f32.verdict));
  EXPECT_TRUE(f32.detail.starts_with("y looks like float32 values written into a bf16 view")) << f32.detail;
  const auto as_integers = [](Case& c) {
    const Outputs ref = reference(c);
    Tensor& y = c.tensor("y");
    const std::vector<double> v = ref.at("y").to_f64();
    for (std::int64_t i = 0; i < y.numel(); ++i) {
      const auto code = static_cast<std::int64_t>(std::trunc(v[static_cast<std::size_t>(i)]));
      y.storage()->store_bits(y.index_of_linear(i),
                              static_cast<std::uint64_t>(((code % 65536) + 65536) % 65536));
    }
  };
  const Evaluation ints = judge(s, as_integers);
  EXPECT_TRUE(is_failure(ints.verdict));
  EXPECT_TRUE(ints.detail.starts_with("y looks like float values cast to integers in the raw bf16 view"))
      << ints.detail;
  // Zeros everywhere match truncated values below 1 too: no hint from zeros alone.
  const Evaluation zeros = judge(rms_spec(), [](Case& c) {
    c.tensor("y").copy_from(std::vector<double>(static_cast<std::size_t>(c.tensor("y").numel()), 0.0));
  });
  EXPECT_EQ(zeros.detail.find("looks like"), std::string::npos) << zeros.detail;
}

TEST(Oracle, BeyondToleranceNamesOutputIndexValueReferenceTolerance) {
  const Evaluation ev = judge(rms_spec(), [](Case& c) {
    write_reference(c);
    bump(c.tensor("y"), {2, 40}, 3);
  });
  ASSERT_EQ(ev.verdict, Verdict::kBeyondTolerance);
  EXPECT_NE(ev.detail.find("y[2, 40]: "), std::string::npos) << ev.detail;
  EXPECT_NE(ev.detail.find("vs reference"), std::string::npos) << ev.detail;
  EXPECT_NE(ev.detail.find("x tolerance"), std::string::npos) << ev.detail;
  const OutputMetrics& m = ev.metrics.front();
  EXPECT_EQ(m.worst_index, (std::vector<std::int64_t>{2, 40}));
  EXPECT_GT(m.worst_ratio, 1.0);
  EXPECT_GE(m.max_ulps, 2.5);
  EXPECT_LT(std::fabs(m.mean_signed_ulps), 0.5);  // one element off: no bias over the output
  EXPECT_GT(m.share_beyond, 0.0);
  EXPECT_LT(m.share_beyond, 0.01);
}

TEST(Oracle, ConcatMustBeBitExact) {
  CaseSpec s;
  s.op = OpKind::kConcat;
  s.params = ConcatParams{};
  s.rows = 3;
  s.hidden = 5;
  s.hidden_b = 7;
  s.row_pad = 2;
  EXPECT_EQ(judge(s, write_reference).verdict, Verdict::kPass);
  const Evaluation ev = judge(s, [](Case& c) {
    write_reference(c);
    bump(c.tensor("out"), {1, 6}, 1);
  });
  EXPECT_EQ(ev.verdict, Verdict::kNotExact) << ev.detail;
  EXPECT_NE(ev.detail.find("out[1, 6]"), std::string::npos) << ev.detail;
}

TEST(Oracle, SecondRunDiffersIsNondeterministic) {
  auto runs = std::make_shared<std::atomic<int>>(0);
  const Evaluation ev = judge(rms_spec(), [runs](Case& c) {
    write_reference(c);
    if ((*runs)++ == 1) c.tensor("y").set({0, 0}, next_up(c.tensor("y").dtype(), c.tensor("y").at({0, 0})));
  });
  EXPECT_EQ(ev.verdict, Verdict::kNondeterministic) << ev.detail;
  Numerics n;
  n.deterministic = false;  // a backend that declares it is not deterministic is not held to it
  n.batch_invariant = false;
  *runs = 0;
  EXPECT_EQ(judge(
                rms_spec(),
                [runs](Case& c) {
                  write_reference(c);
                  if ((*runs)++ == 1) bump(c.tensor("y"), {0, 0}, 1);
                },
                n)
                .verdict,
            Verdict::kPass);
}

TEST(Oracle, RowDependingOnBatchSizeIsBatchVariant) {
  const Evaluation ev = judge(rms_spec(), [](Case& c) {
    write_reference(c);
    if (c.tensor("y").size(0) == 1) bump(c.tensor("y"), {0, 3}, 1);
  });
  EXPECT_EQ(ev.verdict, Verdict::kBatchVariant) << ev.detail;
}

TEST(Oracle, ResultDependingOnBlockPlacementIsBlockPermutationVariant) {
  // lse carries fp32 error budget of many ulps, so a 1-ulp dependence on the physical block passes the
  // tolerance and only the permutation contract sees it.
  const Evaluation ev = judge(attn_spec(), [](Case& c) {
    write_reference(c);
    if (c.tensor("block_table").at({0, 0}) != 0) bump(c.tensor("lse"), {0, 0}, 1);
  });
  EXPECT_EQ(ev.verdict, Verdict::kBlockPermutationVariant) << ev.detail;
}

TEST(Oracle, UnsupportedIsNotAFailure) {
  EXPECT_FALSE(is_failure(Verdict::kUnsupported));
  EXPECT_FALSE(is_failure(Verdict::kPass));
  EXPECT_TRUE(is_failure(Verdict::kBeyondTolerance));
  EXPECT_EQ(verdict_name(Verdict::kBlockPermutationVariant), "block_permutation_variant");
}

// Out-of-range indices (issue #12): every CPU attention backend answers with an `error` verdict that names
// the tensor and the index, never with an out-of-bounds read (the ASan build would abort on one). The case is
// prepared valid, then its index tensors are corrupted where every kernel must read them (sequence 1's
// context is its first 30 keys, pages 0 and 1: a kernel that reads the 3 new tokens from k_new/v_new, as
// ROCM_ATTN's prefix prefill does, never reads its page 2).
TEST(Oracle, OutOfRangeIndicesAreAnErrorNamingTheIndex) {
  struct Corruption {
    const char* tensor;
    std::int64_t index[2];
    double value;
    const char* named;
  };
  const Corruption corruptions[] = {
      {"block_table", {1, 0}, -1, "block_table[1, 0] = -1"},
      {"block_table", {1, 1}, 1 << 30, "block_table[1, 1] = 1073741824"},
      {"block_table", {0, 1}, 6, "block_table[0, 1] = 6"},  // one past the 6 physical blocks
      {"seq_lens", {1, -1}, 1e6, "seq_lens[1] = 1000000"},
      {"seq_lens", {0, -1}, -5, "seq_lens[0] = -5"},
      {"query_start_loc", {1, -1}, 1000, "query_start_loc[1] = 1000"},
      {"query_start_loc", {2, -1}, -2, "query_start_loc[2] = -2"},
  };
  PreparedCase pc = prepare(materialize(attn_spec()));
  ASSERT_EQ(pc.input.tensor("k_cache").size(0), 6);
  int judged = 0;
  for (const auto& b : registry().all()) {
    if (b->op() != OpKind::kAttention || !b->available(nullptr)) continue;
    for (const Corruption& k : corruptions) {
      PreparedCase bad = pc;
      bad.input = pc.input.clone();
      Tensor& t = bad.input.tensor(k.tensor);
      if (k.index[1] < 0)
        t.set({k.index[0]}, k.value);
      else
        t.set({k.index[0], k.index[1]}, k.value);
      const Evaluation ev = evaluate(*b, bad, EvalOptions{false});
      if (ev.verdict == Verdict::kUnsupported) continue;
      ++judged;
      EXPECT_EQ(ev.verdict, Verdict::kError) << b->name() << " " << k.named << ": " << ev.detail;
      EXPECT_NE(ev.detail.find(k.named), std::string::npos) << b->name() << ": " << ev.detail;
    }
  }
  EXPECT_GT(judged, 40);
}

// ---------------------------------------------------------------------------------------------------------------
// The tolerance formula on worked examples (docs/ORACLE.md).

TEST(Tolerance, WorkedExamples) {
  ErrorModel m;
  m.dtype = DType::kBF16;
  m.base = {0.0};
  m.intermediate = {0x1p-8};
  Numerics one;
  // One rounding at 1.0: half an ulp of bf16 (ulp(1) = 2^-7).
  EXPECT_EQ(tolerance(m, one, 0, 1.0), 0x1p-8);
  // Two roundings: the intermediate term (|w| * 0.5 ulp(|z s|) = 2^-8 here) plus half an ulp at 1 + 2^-8.
  Numerics two;
  two.output_roundings = 2;
  EXPECT_EQ(tolerance(m, two, 0, 1.0), 0x1p-8 + 0x1p-8);
  // FlashAttention's rule: twice the baseline error when that is larger.
  m.baseline = {0.1};
  EXPECT_EQ(tolerance(m, one, 0, 1.0), 0.2);
  m.exact = true;
  EXPECT_EQ(tolerance(m, one, 0, 1.0), 0.0);
}

TEST(Tolerance, RmsNormModelOnOneElement) {
  // x = 3, w = 1.5, eps = 0: y = 3 / sqrt(9) * 1.5 = 1.5. H = 1: gamma_1 = u32 / (1 - u32).
  Case c;
  c.op = OpKind::kRmsNorm;
  c.params = RmsNormParams{0.0, WeightMode::kPlain, false};
  c.tensors["x"] = Tensor::padded(DType::kBF16, {1, 1}, 1, 0, 2);
  c.tensors["w"] = Tensor::padded(DType::kBF16, {1}, 1, 0, 2);
  c.tensors["y"] = Tensor::padded(DType::kBF16, {1, 1}, 1, 0, 2);
  c.tensor("x").set({0, 0}, 3.0);
  c.tensor("w").set({0}, 1.5);
  const PreparedCase pc = prepare(c);
  const ErrorModel& m = pc.model.at("y");
  const double u32 = 0x1p-24, rel = 0.5 * u32 / (1 - u32) + 10 * u32;
  EXPECT_DOUBLE_EQ(m.base[0], rel * 1.5 + 2.5 * 0x1p-150);
  EXPECT_DOUBLE_EQ(m.intermediate[0], 1.5 * 0.5 * 0x1p-7);  // z s = 1: ulp 2^-7
  EXPECT_DOUBLE_EQ(tolerance(m, Numerics{}, 0, 1.5), m.base[0] + 0x1p-8);
}

// A correct fp32 kernel with one final rounding, and the same kernel rounding x * s first (the
// weight-rounding point bug of vLLM #42325 / #49616): the tolerance accepts the first on every case, and
// catches the second unless it declares its two roundings.
void fp32_rmsnorm(Case& c, bool round_twice, const std::function<float(float)>& one_plus = {}) {
  const auto& p = c.get<RmsNormParams>();
  const Tensor& x = c.tensor("x");
  Tensor& y = c.tensor("y");
  const DType t = y.dtype();
  const std::int64_t h = x.size(1);
  for (std::int64_t r = 0; r < x.size(0); ++r) {
    std::vector<float> z(static_cast<std::size_t>(h));
    float ss = 0;
    for (std::int64_t i = 0; i < h; ++i) {
      z[static_cast<std::size_t>(i)] = static_cast<float>(x.at({r, i}));
      ss += z[static_cast<std::size_t>(i)] * z[static_cast<std::size_t>(i)];
    }
    const float s = 1.0f / std::sqrt(ss / static_cast<float>(h) + static_cast<float>(p.eps));
    for (std::int64_t i = 0; i < h; ++i) {
      float w = static_cast<float>(c.tensor("w").at({i}));
      if (p.weight_mode == WeightMode::kOnePlus) w = one_plus ? one_plus(w) : w + 1.0f;
      const float zs = z[static_cast<std::size_t>(i)] * s;
      const double pre = round_twice ? round_to(t, zs) : zs;
      y.set({r, i}, static_cast<float>(pre) * w);
    }
  }
}

TEST(Tolerance, TightEnoughForOneExtraRoundingLooseEnoughForFp32) {
  Numerics declared_two;
  declared_two.output_roundings = 2;
  int caught = 0, cases = 0;
  for (std::uint64_t i = 0; i < 160; ++i) {
    CaseSpec s = draw_case(OpKind::kRmsNorm, 17, i).value();
    auto p = std::get<RmsNormParams>(s.params);
    if (p.residual || s.inplace_output || s.act_dtype == DType::kF32) continue;
    ++cases;
    const PreparedCase pc = prepare(materialize(s));
    const EvalOptions fast{false};
    const auto single = evaluate(FnBackend(s.op, [](Case& c) { fp32_rmsnorm(c, false); }), pc, fast);
    EXPECT_EQ(single.verdict, Verdict::kPass) << single.detail;
    const auto twice = evaluate(FnBackend(s.op, [](Case& c) { fp32_rmsnorm(c, true); }), pc, fast);
    caught += twice.verdict == Verdict::kBeyondTolerance ? 1 : 0;
    const auto honest = evaluate(FnBackend(
                                     s.op, [](Case& c) { fp32_rmsnorm(c, true); }, declared_two),
                                 pc, fast);
    EXPECT_EQ(honest.verdict, Verdict::kPass) << honest.detail;
  }
  EXPECT_GT(cases, 40);
  EXPECT_GT(caught, cases / 3) << caught << " of " << cases;
}

// Every declared-numerics combination a backend can have: the tolerance terms each flag switches on.
std::vector<Numerics> all_numerics() {
  std::vector<Numerics> out;
  for (int roundings = 1; roundings <= 3; ++roundings)
    for (int flags = 0; flags < 16; ++flags) {
      Numerics n;
      n.output_roundings = roundings;
      n.p_rounded = (flags & 1) != 0;
      n.kv_dequant_rounded = (flags & 2) != 0;
      n.partials_rounded = (flags & 4) != 0;
      n.fp8_mfma_decode = (flags & 8) != 0;
      out.push_back(n);
    }
  return out;
}

// The first element of a prepared case whose tolerance is not a finite positive number although its
// reference is finite, as "o[3]: inf", or empty.
std::string first_unbounded(const PreparedCase& pc) {
  for (const auto& [name, ref_t] : pc.reference) {
    const ErrorModel& m = pc.model.at(name);
    const auto ref = ref_t.to_f64();
    for (const Numerics& n : all_numerics())
      for (std::size_t i = 0; i < ref.size(); ++i) {
        if (!std::isfinite(ref[i])) continue;
        const double t = tolerance(m, n, i, ref[i]);
        if (!std::isfinite(t) || (!m.exact && !(t > 0)))
          return name + "[" + std::to_string(i) + "]: " + std::to_string(t);
      }
  }
  return {};
}

// Seed 7 attention case 453 as drawn at ed3f907 (issue #12): fp8 e4m3fnuz KV with k_scale 1/16, q x1024,
// head_dim 256, scale 1. K rounded to bf16 moves its logits by hundreds, so expm1(2 (ds + dk)) overflowed:
// 2045 of its 2048 o tolerances were infinite and 3 NaN (softmax-weighted |V| = 0), and everything passed.
CaseSpec large_logit_fp8_spec() {
  CaseSpec s;
  s.op = OpKind::kAttention;
  AttentionParams p;
  p.num_q_heads = 2;
  p.num_kv_heads = 2;
  p.head_dim = 256;
  p.block_size = 16;
  p.scale = 1.0;
  p.causal = false;
  p.window = 128;
  p.k_scale = 0.0625;
  p.has_sinks = true;
  s.params = p;
  s.act_dtype = DType::kBF16;
  s.kv_dtype = DType::kF8E4M3FNUZ;
  s.query_lens = {4};
  s.seq_lens = {56};
  s.spare_blocks = 1;
  s.block_table_seed = 1024365234;
  s.base_offset = 1;
  s.distribution = Distribution::kLargeLogits;
  s.value_seed = 18282625852612860258ull;
  return s;
}

// docs/ORACLE.md section 5: no element is judged against an infinite or NaN tolerance unless its reference is
// non-finite, for any declared numerics, on the case that found the hole and on every op's generated cases.
TEST(Tolerance, FiniteWhereverTheReferenceIsFinite) {
  const PreparedCase hole = prepare(materialize(large_logit_fp8_spec()));
  EXPECT_EQ(first_unbounded(hole), "");
  // The same as a decode row (one query), where fp8 MFMAs' q rounding adds to logits in the hundreds.
  CaseSpec decode = large_logit_fp8_spec();
  decode.query_lens = {1};
  const PreparedCase hole_decode = prepare(materialize(decode));
  ASSERT_FALSE(hole_decode.model.at("o").fp8_mfma_rounding.empty());
  EXPECT_GT(*std::max_element(hole_decode.model.at("o").fp8_logit_error.begin(),
                              hole_decode.model.at("o").fp8_logit_error.end()),
            1.0);
  EXPECT_EQ(first_unbounded(hole_decode), "");
  // The bound still judges: an output outside the hull of the visible V rows fails.
  const Evaluation far = evaluate(FnBackend(OpKind::kAttention,
                                            [](Case& c) {
                                              write_reference(c);
                                              c.tensor("o").set({1, 0, 3}, 1e4);
                                            }),
                                  hole, EvalOptions{false});
  EXPECT_EQ(far.verdict, Verdict::kBeyondTolerance) << far.detail;
  for (const OpKind op : kAllOps) {
    const std::uint64_t n = op == OpKind::kAttention ? 80 : 100;
    for (std::uint64_t i = 0; i < n; ++i) {
      const PreparedCase pc = prepare(materialize(draw_case(op, 7, i).value()));
      EXPECT_EQ(first_unbounded(pc), "") << op_name(op) << " seed 7 case " << i;
    }
  }
}

// The detail line names the output furthest beyond its tolerance, with the evaluation's worst_ratio: the
// journal, report.json and the text report print one number.
TEST(Oracle, DetailRatioIsTheWorstRatio) {
  const Evaluation ev = judge(attn_spec(), [](Case& c) {
    write_reference(c);
    bump(c.tensor("lse"), {0, 0}, 4000);  // lse is fp32: thousands of ulps, a few tolerances
    bump(c.tensor("o"), {2, 1, 7}, 40);
  });
  ASSERT_EQ(ev.verdict, Verdict::kBeyondTolerance);
  double largest = 0;
  for (const auto& m : ev.metrics) largest = std::max(largest, m.worst_ratio);
  EXPECT_EQ(ev.worst_ratio, largest);
  EXPECT_NE(ev.detail.find(fmt::format("{:.3g}x tolerance", ev.worst_ratio)), std::string::npos) << ev.detail;
}

// ---------------------------------------------------------------------------------------------------------------
// The statistical tier (docs/ORACLE.md section 9).

TEST(Statistical, ReductionDepthOfDeclaredShapes) {
  const ReductionShape sequential, csrc{1024, 8, 32}, triton{128, 1, 32};
  EXPECT_EQ(reduction_depth(4096, sequential), 4096);  // a sequential sum: the worst case
  // Square, one chunk of 8 per thread, 5 shuffle levels, 32 warp totals.
  EXPECT_EQ(reduction_depth(4096, csrc), 1 + 8 + 5 + 32);
  EXPECT_EQ(reduction_depth(8192, csrc), 1 + 8 + 5 + 32);
  EXPECT_EQ(reduction_depth(64, csrc), 1 + 8 + 5 + 2);  // 64 threads launched: 2 warps
  EXPECT_EQ(reduction_depth(7, csrc), 7);               // never longer than the sequential chain
  EXPECT_EQ(reduction_depth(4096, triton), 1 + 32 + 5 + 4);
  EXPECT_EQ(reduction_depth(1, csrc), 1);
}

// One attention element by hand: systematic bound S, variance V, reference 1 in bf16 (ulp 2^-7 above it).
TEST(Statistical, ElementPValueIsHoeffdingBeyondTheSystematicBound) {
  PreparedCase pc;
  pc.reference["o"] = Tensor::zeros(DType::kF64, {1});
  pc.reference["o"].set({0}, 1.0);
  ErrorModel& m = pc.model["o"];
  m.dtype = DType::kBF16;
  const double s = 0x1p-9, v = 0x1p-20;  // S = 2^-9, sigma = 2^-10
  m.base = {s};
  m.typical_p = {0.0};
  m.variance_p = {v};
  Numerics n;
  n.p_rounded = true;
  Outputs out;
  out["o"] = Tensor::zeros(DType::kF64, {1});
  const auto judge_at = [&](double value) {
    out["o"].set({0}, value);
    return judge_statistical(pc, n, out);
  };
  EXPECT_EQ(judge_at(1.0).p_value, 1.0);  // the correctly rounded reference
  // One ulp up: its rounding interval starts D = 2^-8 away, D - S = 2^-9, two sigmas: 2 exp(-2).
  EXPECT_DOUBLE_EQ(judge_at(1.0 + 0x1p-7).p_value, 2 * std::exp(-2.0));
  // Two ulps up: the interval starts at 1 + 3 * 2^-8, D - S = 5 * 2^-9, ten sigmas: 2 exp(-50).
  const double d = 5 * 0x1p-9;
  EXPECT_DOUBLE_EQ(judge_at(1.0 + 2 * 0x1p-7).p_value, 2 * std::exp(-d * d / (2 * v)));
  n.p_rounded = false;  // without the random part, beyond S is impossible
  EXPECT_EQ(judge_at(1.0 + 2 * 0x1p-7).p_value, 0.0);
}

// Over a campaign's cases of one class: Chernoff's bound on the binomial tail never undercuts the exact tail,
// is 1 at or below the expected rate, and is below 1e-9 for a rate a sub-bound bug gives.
TEST(Statistical, BinomialTailBoundIsChernoff) {
  const double level = kStatisticalCaseLevel;
  const auto exact = [&](int n, int x) {  // P(Bin(n, level) >= x), summed directly
    double tail = 0;
    for (int k = x; k <= n; ++k)
      tail += std::exp(std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0) +
                       k * std::log(level) + (n - k) * std::log1p(-level));
    return tail;
  };
  for (const auto& [n, x] : {std::pair{100, 1}, std::pair{100, 5}, std::pair{1000, 3}, std::pair{5000, 20}})
    EXPECT_GE(binomial_tail_bound(n, x, level), exact(n, x)) << n << " " << x;
  EXPECT_EQ(binomial_tail_bound(1000, 1, level), 1.0);
  EXPECT_EQ(binomial_tail_bound(0, 0, level), 1.0);
  EXPECT_LT(binomial_tail_bound(200, 10, level), kStatisticalAlpha);  // 1 case in 20 instead of 1 in 1000
  EXPECT_GT(binomial_tail_bound(200, 3, level), kStatisticalAlpha);
}

// The class verdict over cases: 10 of 200 cases at or below the case level is a finding naming the most
// improbable case; merging two halves gives the same counts as one pass; 1 in 1000 is not.
TEST(Statistical, ClassVerdictFromTheCountOfImprobableCases) {
  StatisticalClass first, second, fair;
  for (std::uint64_t i = 0; i < 200; ++i) {
    const double p = i % 20 == 7 ? 1e-4 / static_cast<double>(i) : 0.5;
    (i < 100 ? first : second).add(p, i);
    fair.add(i == 3 ? 1e-5 : 0.5, i);
  }
  first.merge(second);
  EXPECT_EQ(first.cases, 200);
  EXPECT_EQ(first.low, 10);
  const auto beyond = judge_class(first, "rmsnorm/bf16/h8k");
  ASSERT_TRUE(beyond);
  EXPECT_EQ(beyond->case_index, 187u);  // the smallest p: 1e-4 / 187
  EXPECT_DOUBLE_EQ(beyond->tail, binomial_tail_bound(200, 10, kStatisticalCaseLevel));
  EXPECT_NE(beyond->why.find("10 of 200 cases of rmsnorm/bf16/h8k"), std::string::npos) << beyond->why;
  EXPECT_FALSE(judge_class(fair, "rmsnorm/bf16/h8k"));
}

TEST(Statistical, DeclaredRoundingPointsPassAnExtraOneDoesNot) {
  Numerics two;
  two.output_roundings = 2;
  int one_plus = 0, flagged = 0;
  for (std::uint64_t i = 0; i < 120; ++i) {
    const CaseSpec s = draw_case(OpKind::kRmsNorm, 23, i).value();
    const auto& p = std::get<RmsNormParams>(s.params);
    if (p.residual || s.inplace_output || s.act_dtype == DType::kF32) continue;
    const PreparedCase pc = prepare(materialize(s));
    const EvalOptions fast{false, true};
    const auto honest = evaluate(FnBackend(
                                     s.op, [](Case& c) { fp32_rmsnorm(c, true); }, two),
                                 pc, fast);
    EXPECT_EQ(honest.verdict, Verdict::kPass) << "case " << i << ": " << honest.detail;
    if (p.weight_mode != WeightMode::kOnePlus) continue;
    ++one_plus;
    const auto rounded = evaluate(
        FnBackend(
            s.op,
            [](Case& c) {
              const DType t = c.tensor("w").dtype();
              fp32_rmsnorm(c, true, [t](float w) { return static_cast<float>(round_to(t, 1.0 + w)); });
            },
            two),
        pc, fast);
    flagged += is_failure(rounded.verdict) ? 1 : 0;
  }
  EXPECT_GT(one_plus, 10);
  EXPECT_GT(flagged, one_plus / 2) << flagged << " of " << one_plus;
}

TEST(FusedUnfused, RoundingOrderIsNotDriftButAnUlpMoreIs) {
  CaseSpec s;
  s.op = OpKind::kDualRmsNormCat;
  s.params = DualRmsNormCatParams{};
  s.rows = 3;
  s.hidden = 64;
  s.value_seed = 11;
  const PreparedCase pc = prepare(materialize(s));
  // Fused: the reference rounded once. Unfused: each half normalised as rmsnorm with two roundings.
  Outputs fused, unfused;
  {
    Case c = pc.input.clone();
    write_reference(c);
    fused["out"] = Tensor::zeros(DType::kF64, {3, 128});
    fused["out"].copy_from(c.tensor("out").to_f64());
  }
  const Tensor& ref = pc.reference.at("out");
  std::vector<double> two_step = ref.to_f64(), drifted = ref.to_f64();
  const auto w = [&](std::int64_t col) {
    return col < 64 ? pc.input.tensor("w_e").at({col}) : pc.input.tensor("w_h").at({col - 64});
  };
  for (std::size_t i = 0; i < two_step.size(); ++i) {
    const double wi = w(static_cast<std::int64_t>(i % 128));
    two_step[i] = round_to(DType::kBF16, round_to(DType::kBF16, two_step[i] / wi) * wi);
    double v = round_to(DType::kBF16, drifted[i]);
    for (int k = 0; k < 4; ++k) v = next_up(DType::kBF16, v);
    drifted[i] = v;
  }
  unfused["out"] = Tensor::zeros(DType::kF64, {3, 128});
  unfused["out"].copy_from(two_step);
  Numerics fused_n, unfused_n;
  unfused_n.output_roundings = 2;
  const Evaluation ok = compare_fused_unfused(pc, fused, fused_n, unfused, unfused_n);
  EXPECT_EQ(ok.verdict, Verdict::kPass) << ok.detail;
  EXPECT_GT(divergence_ulps(fused, unfused, DType::kBF16), 0.0);
  EXPECT_LE(divergence_ulps(fused, unfused, DType::kBF16), 1.0);
  unfused["out"].copy_from(drifted);
  const Evaluation bad = compare_fused_unfused(pc, fused, fused_n, unfused, unfused_n);
  EXPECT_EQ(bad.verdict, Verdict::kFusedUnfusedDrift);
  EXPECT_NE(bad.detail.find("out["), std::string::npos) << bad.detail;
}

TEST(Divergence, InUlpsOfEachOutputsFormat) {
  Outputs a, b;
  a["o"] = Tensor::zeros(DType::kF64, {2});
  b["o"] = Tensor::zeros(DType::kF64, {2});
  a["o"].copy_from(std::vector<double>{1.0, 2.0});
  b["o"].copy_from(std::vector<double>{1.0 + 2 * 0x1p-7, 2.0});
  EXPECT_EQ(divergence_ulps(a, b, DType::kBF16), 2.0);
  EXPECT_EQ(divergence_ulps(a, b, DType::kF16), 2.0 * 0x1p-7 / 0x1p-10);
  b["o"].copy_from(std::vector<double>{std::nan(""), 2.0});
  EXPECT_TRUE(std::isinf(divergence_ulps(a, b, DType::kBF16)));
}

}  // namespace
}  // namespace driftcheck::fuzz
