"""examples/upstream/trace_triton.py without a GPU: the traced cases, the patching of the upstream copy, the ulp
and rounding arithmetic its probe uses, the backends file it writes and its verdict. The upstream files are
ignored (never committed): the patching is checked on them where they are present and on a stand-in text."""

import importlib.util
import os
import pathlib
import tempfile
import tomllib
import unittest

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("trace_triton", REPO / "examples" / "upstream" / "trace_triton.py")
tt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tt)

try:
    import torch
except ImportError:
    torch = None

# A stand-in with the expressions the patterns target, in the counts the pinned files hold (not upstream code).
STAND_IN = {
    tt.HELPERS: """from vllm.triton_utils import tl, triton
def capped(S, c):
    q = S / c
    e1 = tl.exp(q)
    e2 = tl.exp(-q)
    return c * (e1 - e2) / (e1 + e2)
def step(S, M, L):
    m = tl.maximum(M, tl.max(S, axis=1))
    P = tl.exp(S - m[:, None])
    s = tl.sum(P, axis=1)
    a = tl.exp(M - m)
    L2 = L * a + s
    return m, L2, P, a
""",
    tt.KERNEL: """from vllm.triton_utils import tl, triton
def body(Q, K, V, P, Pv, acc, L, w, scale):
    S = scale * tl.dot(Q, K)
    S2 = tl.dot(Q, K) * (scale * w[None, :])
    acc += tl.dot(Pv, V)
    acc += tl.dot(P.to(V.dtype), V)
    acc = acc / L[:, None]
    x = 1 // 2
def reduce(e, mx, o):
    e = e * tl.exp(mx - 1)
    t = tl.sum(e)
    o *= tl.exp(mx - 1)[:, None]
    a = tl.sum(o, axis=0)
    r = tl.where(t == 0.0, 0.0, a / t)
""",
}


class Cases(unittest.TestCase):
    def test_the_recorded_report_gives_the_cases_beyond_one_ulp(self):
        cases = tt.traced_cases(tt.RECORDED)
        text = tt.RECORDED.read_text()
        self.assertEqual(len(cases), 25)  # docs/UPSTREAM.md: 7 within 2-4 ulps, 18 beyond 4
        for c in cases:
            self.assertRegex(text, rf"- case {c} \([^)]*\) (2_4_ulps|over_4_ulps):")
        self.assertIn(74, cases)
        self.assertNotIn(4, cases)  # unsupported there

    def test_cases_are_dealt_round_robin(self):
        self.assertEqual(tt.chunks([1, 2, 3, 4, 5], 3), [[1, 4], [2, 5], [3]])
        self.assertEqual(tt.chunks([7], 3), [[7]])


class Patching(unittest.TestCase):
    def patched(self, groups):
        return {rel: tt.patch_file(text, rel, groups) for rel, text in STAND_IN.items()}

    def test_each_group_replaces_its_calls_and_imports_its_functions(self):
        out = self.patched(("exp", "div", "sum", "fma", "dot"))
        h, k = out[tt.HELPERS], out[tt.KERNEL]
        for text in (h, k):
            self.assertNotRegex(text, r"tl\.exp\(|tl\.sum\(|tl\.dot\(")
            compile(text, "patched", "exec")
        self.assertIn("q = dc_div(S, c)", h)
        self.assertIn("return dc_div(c * (e1 - e2), (e1 + e2))", h)
        self.assertIn("L2 = tl.fma(L, a, s)", h)
        self.assertIn("s = dc_rowsum(P)", h)
        self.assertIn("acc = dc_pv(acc, P.to(V.dtype), V)", k)
        self.assertIn("acc = dc_pv(acc, Pv, V)", k)
        self.assertIn("S = scale * dc_dot(Q, K)", k)
        self.assertIn("acc = dc_div(acc, L[:, None])", k)
        self.assertIn("dc_div(a, t))", k)
        self.assertIn("x = 1 // 2", k)  # integer division untouched
        self.assertIn("t = dc_vecsum(e)", k)
        self.assertIn("a = dc_colsum(o)", k)
        self.assertRegex(k, r"from vllm\.triton_utils import tl, triton\nfrom vllm\.v1\.attention\.ops\."
                            r"_driftcheck_trace import dc_colsum, dc_div, dc_dot, dc_exp, dc_pv, dc_vecsum\n")

    def test_the_real_variant_is_the_text_unchanged(self):
        self.assertEqual(self.patched(()), STAND_IN)

    def test_a_count_that_differs_stops_the_run(self):
        text = STAND_IN[tt.HELPERS].replace("    a = tl.exp(M - m)\n", "    a = M - m\n")
        with self.assertRaisesRegex(tt.PatchError, r"exp: .* matched 3 times, expected 4"):
            tt.patch_file(text, tt.HELPERS, ("exp",))

    def test_the_generated_module_is_python_with_a_constexpr_log2e(self):
        for expr in tt.EXP_IMPLS.values():
            src = tt.trace_source(expr)
            compile(src, "trace", "exec")
            self.assertIn("LOG2E = tl.constexpr(1.4426950408889634)", src)
            self.assertIn(f"return {expr}", src)

    @unittest.skipUnless((pathlib.Path(os.environ.get("DRIFTCHECK_UPSTREAM", REPO / "upstream" / "vllm")) /
                          tt.KERNEL).exists(), "upstream files absent (ignored folder, docs/UPSTREAM.md)")
    def test_the_upstream_files_take_every_variant(self):
        upstream = pathlib.Path(os.environ.get("DRIFTCHECK_UPSTREAM", REPO / "upstream" / "vllm"))
        with tempfile.TemporaryDirectory() as d:
            for name, (groups, _) in tt.VARIANTS.items():
                dest = tt.make_variant(upstream, pathlib.Path(d) / name, groups, "t")
                for rel in (tt.KERNEL, tt.HELPERS, tt.TRACE_MODULE):
                    compile((dest / rel).read_text(), rel, "exec")
                if "exp" in groups:
                    for rel in (tt.KERNEL, tt.HELPERS):
                        self.assertNotRegex((dest / rel).read_text(), r"\btl\.exp\(")


class Arithmetic(unittest.TestCase):
    def test_ulps_count_representable_steps_across_zero(self):
        one = np.float32(1)
        self.assertEqual(tt.ulps_f32(one, np.nextafter(one, np.float32(2))), 1)
        tiny = np.float32(2.0**-149)
        self.assertEqual(tt.ulps_f32(-tiny, tiny), 2)
        self.assertEqual(tt.ulps_f32(np.float32(0), np.float32(-0.0)), 0)
        self.assertEqual(tt.ulps_f32(np.float32(2), np.float32(1)), 2**23)
        self.assertTrue(np.isnan(tt.ulps_f32(np.float32("nan"), one)))

    def test_bf16_rounding_is_to_nearest_even(self):
        self.assertEqual(tt.round_to(np.float32(1 + 2.0**-8), "bf16"), 1.0)  # tie, down to even
        self.assertEqual(tt.round_to(np.float32(1 + 3 * 2.0**-8), "bf16"), 1 + 2.0**-6)  # tie, up to even
        self.assertEqual(tt.round_to(np.float32(1 + 2.0**-8 + 2.0**-20), "bf16"), 1 + 2.0**-7)
        self.assertTrue(np.isnan(tt.round_to(np.float32("nan"), "bf16")))
        self.assertEqual(tt.round_to(np.float32(np.inf), "bf16"), np.inf)

    @unittest.skipIf(torch is None, "torch absent")
    def test_bf16_rounding_matches_torch(self):
        x = np.random.default_rng(1).standard_normal(100000).astype(np.float32) * 100
        ref = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
        np.testing.assert_array_equal(tt.round_to(x, "bf16"), ref)

    def test_the_fp64_quotient_rounds_to_the_ieee_fp32_one(self):
        rng = np.random.default_rng(2)
        a = (rng.standard_normal(200000) * 10).astype(np.float32)
        b = rng.uniform(0.5, 3000, a.size).astype(np.float32)
        np.testing.assert_array_equal(tt.div_reference(a, b), a / b)

    def test_the_exp_reference_is_exp2_of_the_fp32_product(self):
        x = np.random.default_rng(3).uniform(-30, 0, 100000).astype(np.float32)
        t = x * np.float32(tt.LOG2E)
        self.assertEqual(t.dtype, np.float32)
        self.assertLessEqual(np.max(tt.ulps_f32(tt.exp_reference(x), np.exp2(t))), 1)
        self.assertEqual(tt.exp_reference(np.float32(-np.inf)), 0)

    def test_differing_counts_roundings_that_change_in_bf16(self):
        ref = np.array([1 + 2.0**-8 - 2.0**-23, 3.0], np.float32)  # just below a bf16 tie
        got = np.array([1 + 2.0**-8 + 2.0**-23, 3.0], np.float32)  # 2 ulps up: across it
        d = tt.differing(got, ref)
        self.assertEqual((d["differ"], d["max_ulps"], d["bf16_flips"], d["fp16_flips"]), (1, 2.0, 1, 0))

    def test_the_sequential_references_sum_in_index_order(self):
        rng = np.random.default_rng(4)
        a, b, acc = (rng.standard_normal(s).astype(np.float32) for s in ((3, 5), (5, 4), (3, 4)))
        refs = tt.sequential_refs(a, b, acc)
        i, j = 2, 1
        dot, pv, row = np.float32(0), acc[i, j], np.float32(0)
        for k in range(5):
            dot = np.float32(dot + np.float32(a[i, k] * b[k, j]))
            pv = np.float32(pv + np.float32(a[i, k] * b[k, j]))
            row = np.float32(row + a[i, k])
        self.assertEqual((refs["dot"][i, j], refs["pv"][i, j], refs["row"][i]), (dot, pv, row))
        col = np.float32(0)
        for m in range(3):
            col = np.float32(col + a[m, 4])
        self.assertEqual(refs["col"][4], col)


class Runs(unittest.TestCase):
    def test_the_backends_file_has_one_worker_per_variant(self):
        with tempfile.TemporaryDirectory() as d:
            path = pathlib.Path(d) / "trace.toml"
            tt.backends_file(path, {name: pathlib.Path(d) / name for name in tt.VARIANTS})
            doc = tomllib.loads(path.read_text())
        self.assertEqual(doc["format"], "driftcheck.backends")
        by_name = {b["name"]: b for b in doc["backend"]}
        self.assertEqual(set(by_name), {f"trace.{n}" for n in tt.VARIANTS})
        for name, (_, fusion) in tt.VARIANTS.items():
            b = by_name[f"trace.{name}"]
            self.assertEqual(b["env"]["TRITON_DEFAULT_FP_FUSION"], "1" if fusion else "0")
            self.assertEqual(b["command"][-1], "--serve")
            self.assertEqual(b["numerics"], f"like:{tt.TWIN}")

    def test_the_verdict_names_the_first_variant_within_one_ulp(self):
        def rows(agreement):
            return {c: {"agreement": agreement} for c in (1, 2)}

        per = {"real": rows("over_4_ulps"), "exp_div": rows("2_4_ulps"), "exp_div_sum": rows("1_ulp"),
               "exp_div_sum_nofuse": rows("identical"), "twin_order": rows("identical")}
        self.assertEqual(tt.verdict(per, [1, 2])[0], "exp_div_sum")
        per["exp_div_sum"] = {1: {"agreement": "1_ulp"}}  # case 2 missing: not within
        self.assertEqual(tt.verdict(per, [1, 2])[0], "exp_div_sum_nofuse")
        per["real"] = {1: {"agreement": "over_4_ulps"}, 2: {"agreement": "unsupported"}}  # declined: left out
        per["exp_div"] = {1: {"agreement": "1_ulp"}, 2: {"agreement": "unsupported"}}
        self.assertEqual(tt.verdict(per, [1, 2])[0], "exp_div")
        per["real"] = {1: {"agreement": "over_4_ulps"}, 2: {"agreement": "error"}}
        self.assertIsNone(tt.verdict(per, [1, 2])[0])
        del per["real"][2]
        self.assertIsNone(tt.verdict(per, [1, 2])[0])

    def test_unknown_variants_are_a_usage_error(self):
        with self.assertRaises(SystemExit) as e:
            tt.main(["--variants", "real,fast"])
        self.assertEqual(e.exception.code, 2)


if __name__ == "__main__":
    unittest.main()
