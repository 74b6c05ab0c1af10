"""The example workers (examples/python) on hand-built cases through the stand-in driftcheck: they write every
output element, nothing outside their outputs, values near the fp64 reference; their planted bugs show. The
judging with derived tolerances is driftcheck's (tests/python_e2e.py runs them through the real binary)."""

import unittest

import numpy as np

import harness
from driftcheck import dtypes, worker

try:
    import torch
except ImportError:
    torch = None


def ulps_off(got, ref, dtype):
    """|got - ref| in units of the format's spacing at ref (bf16/fp16)."""
    man = {"bf16": 7, "fp16": 10, "fp32": 23}[dtype]
    spacing = np.ldexp(1.0, np.frexp(np.maximum(np.abs(ref), 2.0**-14))[1] - 1 - man)
    return np.abs(got - ref) / spacing


class Example(unittest.TestCase):
    argv = None

    def setUp(self):
        self.rng = np.random.default_rng(5)
        self.workers = []

    def tearDown(self):
        for w in self.workers:
            self.assertEqual(w.close()[0], 0)

    def start(self, *args):
        w = harness.FakeDriftcheck(harness.example(*self.argv, *args))
        self.workers.append(w)
        kind, hello = w.hello(self.op)
        self.assertEqual(kind, worker.HELLO | worker.REPLY)
        return w, hello

    def run_ok(self, w, case):
        before = case.snapshot()
        inputs = {n: case.get(n) for n in case.tensors}
        kind, reply = w.run(case)
        self.assertEqual(kind, worker.RUN | worker.REPLY, reply)
        outputs = [n for n in ("y", "residual", "out", "o", "lse") if n in case.tensors and (
            n != "residual" or case.params.get("residual"))]
        self.assertEqual(harness.changed_outside(case, before, outputs), [])
        return inputs


@unittest.skipIf(torch is None, "torch is not importable")
class TorchNorms(Example):
    argv = ("torch_norms.py",)
    op = "rmsnorm"

    def test_native_rmsnorm_over_layouts_and_dtypes(self):
        w, hello = self.start()
        self.assertTrue(hello["available"], hello)
        for kw in [dict(rows=1, hidden=7), dict(rows=5, hidden=96, row_pad=3, offset=5, dtype="fp16"),
                   dict(rows=3, hidden=64, residual=True, row_pad=8, offset=1),
                   dict(rows=4, hidden=33, inplace=True, weight_mode="one_plus", dtype="fp32"),
                   dict(rows=2, hidden=1000, residual=True, inplace=True)]:
            with self.subTest(**kw):
                case = harness.rmsnorm_case(self.rng, **kw)
                inp = self.run_ok(w, case)
                z = inp["x"] + inp["residual"] if kw.get("residual") else inp["x"]
                ref = harness.rmsnorm_ref(z, inp["w"], 1e-6, kw.get("weight_mode", "plain"))
                dt = kw.get("dtype", "bf16")
                self.assertLessEqual(np.max(ulps_off(case.get("y"), ref, dt)), 2.0)  # two roundings
                if kw.get("residual"):
                    np.testing.assert_array_equal(case.get("residual"), dtypes.round_to(
                        dtypes.round_to(z, "fp32"), dt))

    def test_planted_residual_not_written(self):
        w, _ = self.start("--planted-bug", "residual_not_written")
        case = harness.rmsnorm_case(self.rng, rows=2, hidden=16, residual=True)
        before = case.get("residual")
        self.run_ok(w, case)
        np.testing.assert_array_equal(case.get("residual"), before)  # the update never arrived

    def test_functional_is_unavailable_on_old_torch_with_the_reason(self):
        w, hello = self.start("--norm", "functional")
        if hasattr(torch, "_fused_rms_norm"):
            self.assertTrue(hello["available"])
        else:
            self.assertFalse(hello["available"])
            self.assertRegex(hello["reason"], r"torch .*(no torch.nn.functional.rms_norm|rounds x \* s)")


@unittest.skipIf(torch is None, "torch is not importable")
class TorchChain(Example):
    argv = ("torch_norms.py",)
    op = "dual_rmsnorm_cat"

    def check(self, w, swapped=False, **kw):
        case = harness.dual_case(self.rng, **kw)
        inp = self.run_ok(w, case)
        mode = kw.get("weight_mode", "plain")
        halves = [harness.rmsnorm_ref(inp["e"], inp["w_e"], 1e-6, mode),
                  harness.rmsnorm_ref(inp["h"], inp["w_h"], 1e-6, mode)]
        ref = np.concatenate(halves[::-1] if swapped else halves, axis=1)
        self.assertLessEqual(np.max(ulps_off(case.get("out"), ref, kw.get("dtype", "bf16"))), 2.0)

    def test_chain(self):
        w, _ = self.start()
        self.check(w, rows=3, hidden=40, row_pad=5, offset=2)
        self.check(w, rows=1, hidden=256, dtype="fp16", weight_mode="one_plus")

    def test_planted_halves_swapped(self):
        w, _ = self.start("--planted-bug", "halves_swapped")
        self.check(w, swapped=True, rows=2, hidden=24)


class NumpyRmsnormSupportsEverything(Example):
    argv = ("rmsnorm_numpy.py",)
    op = "rmsnorm"

    def test_fp16_and_fp32(self):
        w, _ = self.start()
        # fp16: one rounding after fp32 work (<= 0.5 ulp + a few fp32 ulps); fp32: the fp32 add, sum of 50 squares
        # (gamma_50 / 2 = 25 u32 on the scale), rsqrt and products: a few tens of u32, 16 fp32 ulps
        for dt, bound in (("fp16", 1.0), ("fp32", 16.0)):
            case = harness.rmsnorm_case(self.rng, rows=3, hidden=50, dtype=dt, row_pad=2, residual=True)
            inp = self.run_ok(w, case)
            ref = harness.rmsnorm_ref(inp["x"] + inp["residual"], inp["w"], 1e-6, "plain")
            self.assertLessEqual(np.max(ulps_off(case.get("y"), ref, dt)), bound)


ATTENTION_CASES = [
    dict(seqs=[(1, 17), (4, 4), (3, 40)]),  # decode, a whole prefill, a speculative step
    dict(seqs=[(5, 33), (1, 1)], hq=8, hkv=2, d=32, block_size=16, window=8, sinks=True),
    dict(seqs=[(2, 20)], hq=4, hkv=4, softcap=5.0, causal=False, dtype="fp16", kv_dtype="fp16"),
    dict(seqs=[(3, 19), (1, 30)], hq=4, hkv=1, kv_dtype="fp8_e4m3fn", k_scale=0.5, v_scale=2.0),
    dict(seqs=[(1, 9)], hq=2, hkv=2, kv_dtype="fp8_e4m3fnuz", k_scale=0.0625, block_size=3),
    dict(seqs=[(2, 12)], hq=4, hkv=2, kv_dtype="fp8_e5m2", block_size=7, shuffle=False, spare_blocks=0),
]


class NumpyAttention(Example):
    argv = ("attention_numpy.py",)
    op = "attention"

    def check(self, w, kw, tolerance_ulps):
        case = harness.attention_case(self.rng, **kw)
        o_ref, lse_ref = harness.attention_ref(case)
        self.run_ok(w, case)
        dt = kw.get("dtype", "bf16")
        # Row scale: fp32 work (errors ~1e-6 relative to the row's magnitude) then one rounding of o.
        scale = np.max(np.abs(o_ref), axis=2, keepdims=True)
        err = np.abs(case.get("o") - o_ref) / np.maximum(scale, 1e-30)
        return np.max(err) * 2 ** {"bf16": 7, "fp16": 10}[dt], np.max(np.abs(case.get("lse") - lse_ref))

    def test_matches_the_definition(self):
        w, _ = self.start()
        for kw in ATTENTION_CASES:
            with self.subTest(**kw):
                o_err, lse_err = self.check(w, kw, 1.0)
                self.assertLessEqual(o_err, 1.0)  # within an ulp at the row's magnitude
                self.assertLess(lse_err, 1e-4)

    def test_rows_before_the_first_key(self):
        w, _ = self.start()
        for sinks in (False, True):
            case = harness.attention_case(self.rng, seqs=[(5, 2)], sinks=sinks)
            self.run_ok(w, case)
            o, lse = case.get("o"), case.get("lse")
            self.assertTrue(np.all(o[:3] == 0))
            expect = np.broadcast_to(case.get("sinks"), (3, 4)) if sinks else np.full((3, 4), -np.inf)
            np.testing.assert_array_equal(lse[:3], expect)

    def test_planted_gqa_modulo(self):
        w, _ = self.start("--planted-bug", "gqa_modulo")
        o_err, _ = self.check(w, dict(seqs=[(2, 20)], hq=4, hkv=2), 1.0)
        self.assertGreater(o_err, 10.0)
        o_err, _ = self.check(w, dict(seqs=[(2, 20)], hq=4, hkv=4), 1.0)
        self.assertLessEqual(o_err, 1.0)  # MHA: h % Hkv == h / 1, the bug cannot show


@unittest.skipIf(torch is None, "torch is not importable")
class GlueLse(Example):
    """paged.lse_fp32 (the lse SDPA's MATH/EFFICIENT/CUDNN and vLLM's unified attention entries write) on torch
    CPU tensors gathered by paged.gather, against the definition: softcap, sinks, windows, GQA, fp8 caches."""

    op = "attention"
    argv = None

    def setUp(self):
        super().setUp()
        import test_worker

        self.argv = tuple(test_worker.script("""
            import torch
            from driftcheck import paged
            @dc.attention(tensors="torch", device="cpu")
            def k(case):
                p = case.params
                group = p.num_q_heads // p.num_kv_heads
                case.o.zero_()
                for seq in paged.sequences(case):
                    k = paged.gather(case.k_cache, seq, p.block_size)
                    k = dc.dtypes.to_float(k, case.dtype("k_cache"), p.k_scale)
                    case.lse[seq.q_start : seq.q_end].copy_(paged.lse_fp32(
                        case.q[seq.q_start : seq.q_end], k.repeat_interleave(group, dim=1), p.scale,
                        paged.visible(seq, p.causal, p.window), p.softcap, case.get("sinks")))
        """))

    def test_matches_the_definition(self):
        w = harness.FakeDriftcheck(list(self.argv))
        self.workers.append(w)
        w.hello("attention")
        for kw in ATTENTION_CASES:
            with self.subTest(**kw):
                case = harness.attention_case(self.rng, **kw)
                _, lse_ref = harness.attention_ref(case)
                self.run_ok(w, case)
                self.assertLess(np.max(np.abs(case.get("lse") - lse_ref)), 1e-4)


class ConcatCopy(Example):
    argv = ("concat_copy.py",)
    op = "concat"

    def make(self, dtype="bf16"):
        c = harness.TestCase("concat", {})
        c.padded("a", dtype, (3, 5), row_pad=2, offset=1)
        c.padded("b", dtype, (3, 9), row_pad=0, offset=3)
        c.padded("out", dtype, (3, 14), row_pad=4, offset=2)
        c.array("a")[...] = self.rng.integers(0, 256, (3, 5))  # raw codes: any bits must move exactly
        c.array("b")[...] = self.rng.integers(0, 256, (3, 9))
        return c

    def test_bit_exact_and_planted(self):
        for args, swapped in (((), False), (("--planted-bug", "halves_swapped"), True)):
            w, _ = self.start(*args)
            for dtype in ("bf16", "fp8_e4m3fnuz"):
                case = self.make(dtype)
                self.run_ok(w, case)
                parts = [case.array("b"), case.array("a")] if swapped else [case.array("a"), case.array("b")]
                if swapped:  # the widths differ: the swapped copy lands b's first 5 columns in a's place
                    np.testing.assert_array_equal(case.array("out")[:, :5], case.array("b")[:, :5])
                else:
                    np.testing.assert_array_equal(case.array("out"), np.concatenate(parts, axis=1))

    @unittest.skipUnless(torch is not None and torch.cuda.is_available(), "no CUDA device")
    def test_torch_on_the_device(self):
        w, _ = self.start("--tensors", "torch", "--device", "cuda")
        case = self.make()
        self.run_ok(w, case)
        np.testing.assert_array_equal(case.array("out"), np.concatenate([case.array("a"), case.array("b")], 1))


class GpuExamplesSayWhyNot(unittest.TestCase):
    """Where an example cannot run (no GPU, no Triton, no vLLM, an old torch) its worker says why at hello."""

    CASES = [
        (("sdpa_paged.py", "--sdpa-backend", "FLASH_ATTENTION"), "attention",
         r"torch\.nn\.attention|FlashAttention|torch\.cuda\.is_available\(\) is False"),
        (("triton_dual_rmsnorm_cat.py",), "dual_rmsnorm_cat", r"triton is not importable|is_available\(\) is False"),
        (("vllm_ops.py", "--op", "attention"), "attention", r"vllm is not importable|this vllm has no"),
        (("torch_norms.py", "--norm", "functional", "--device", "cuda"), "rmsnorm",
         r"rms_norm|is_available\(\) is False"),
    ]

    def test_reasons(self):
        for argv, op, reason in self.CASES:
            with self.subTest(argv[0]):
                w = harness.FakeDriftcheck(harness.example(*argv))
                kind, hello = w.hello(op)
                self.assertEqual(kind, worker.HELLO | worker.REPLY)
                if not hello["available"]:
                    self.assertRegex(hello["reason"], reason)
                self.assertEqual(w.close()[0], 0)


SDPA_CASES = [kw for kw in ATTENTION_CASES if not kw.get("softcap") and not kw.get("sinks")]


@unittest.skipUnless(torch is not None and torch.cuda.is_available(), "no CUDA device")
class SdpaOnDevice(NumpyAttention):
    """On a GPU: every SDPA backend on hand-built paged cases, against the definition (P rounded to bf16 costs
    about u_bf16 relative: 2 ulps of the row scale)."""

    op = "attention"

    def test_matches_the_definition(self):
        for backend in ("MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"):
            self.argv = ("sdpa_paged.py", "--sdpa-backend", backend)
            w, hello = self.start()
            if not hello["available"]:
                continue
            for kw in SDPA_CASES:
                if kw.get("window") and backend == "FLASH_ATTENTION":
                    continue
                with self.subTest(backend=backend, **kw):
                    case = harness.attention_case(self.rng, **kw)
                    o_ref, lse_ref = harness.attention_ref(case)
                    kind, reply = w.run(case)
                    if kind == worker.ERROR and reply.get("unsupported"):
                        continue
                    self.assertEqual(kind, worker.RUN | worker.REPLY, reply)
                    scale = np.max(np.abs(o_ref), axis=2, keepdims=True)
                    err = np.max(np.abs(case.get("o") - o_ref) / scale) * 2 ** 7
                    self.assertLessEqual(err, 4.0)
                    if backend == "FLASH_ATTENTION":
                        self.assertLess(np.max(np.abs(case.get("lse") - lse_ref)), 1e-2)

    def test_rows_before_the_first_key(self):
        pass  # SDPA declines them (no convention): covered by the unsupported path above

    def test_planted_gqa_modulo(self):
        self.argv = ("sdpa_paged.py", "--sdpa-backend", "MATH")
        super().test_planted_gqa_modulo()


@unittest.skipUnless(torch is not None and torch.cuda.is_available(), "no CUDA device")
class TritonDualOnDevice(TorchChain):
    argv = ("triton_dual_rmsnorm_cat.py",)

    def test_chain(self):
        w, hello = self.start()
        if not hello["available"]:
            self.skipTest(hello["reason"])
        self.check(w, rows=3, hidden=40, row_pad=5, offset=2)
        self.check(w, rows=2, hidden=4096, dtype="fp16", weight_mode="one_plus")

    def test_planted_halves_swapped(self):
        pass  # this example's planted bug is a rounding, judged by driftcheck's tolerance


if __name__ == "__main__":
    unittest.main()
