"""dtype conversions: every encoding of every small format, ties, overflow and NaN rules (docs/REFERENCE.md 1)."""

import math
import unittest

import numpy as np

from driftcheck import dtypes

SMALL = ("fp16", "bf16", "fp8_e4m3fn", "fp8_e4m3fnuz", "fp8_e5m2")

try:
    import torch
except ImportError:  # the package runs without torch; the torch tests then skip
    torch = None


def all_codes(name):
    return np.arange(1 << dtypes.FORMATS[name].bits, dtype=np.int64)


def codes_of(raw, name):
    """Integer codes of an encode() result."""
    return raw.view(np.uint16).astype(np.int64) if name == "fp16" else raw.astype(np.int64)


def finite_values(name):
    """Every finite value of a format, sorted, without -0, with the even-ness of each value's code."""
    t = dtypes.decode_table(name)
    codes = all_codes(name)
    keep = np.isfinite(t) & ~((t == 0) & np.signbit(t))
    order = np.argsort(t[keep], kind="stable")
    return t[keep][order], codes[keep][order]


class Tables(unittest.TestCase):
    # Facts from the formats' specifications (docs/REFERENCE.md table), not from the code under test.
    SPEC = {  # max finite, min subnormal, NaN codes, infinities
        "fp16": (65504.0, 2.0**-24, 2046, 2),
        "bf16": (float.fromhex("0x1.fep127"), 2.0**-133, 254, 2),
        "fp8_e4m3fn": (448.0, 2.0**-9, 2, 0),
        "fp8_e4m3fnuz": (240.0, 2.0**-10, 1, 0),
        "fp8_e5m2": (57344.0, 2.0**-16, 6, 2),
    }

    def test_format_facts(self):
        for name, (mx, tiny, nans, infs) in self.SPEC.items():
            t = dtypes.decode_table(name)
            with self.subTest(name):
                self.assertEqual(np.nanmax(t[np.isfinite(t)]), mx)
                self.assertEqual(np.min(np.abs(t[np.isfinite(t) & (t != 0)])), tiny)
                self.assertEqual(int(np.isnan(t).sum()), nans)
                self.assertEqual(int(np.isinf(t).sum()), infs)
                f = dtypes.FORMATS[name]
                self.assertTrue(math.isnan(t[f.canonical_nan]))
                self.assertEqual(t[f.max_finite_code], mx)

    def test_fnuz_has_no_negative_zero(self):
        t = dtypes.decode_table("fp8_e4m3fnuz")
        self.assertTrue(math.isnan(t[0x80]))
        self.assertEqual(int((t == 0).sum()), 1)

    def test_canonical_nans(self):
        expect = {"fp16": 0x7E00, "bf16": 0x7FC0, "fp8_e4m3fn": 0x7F, "fp8_e4m3fnuz": 0x80, "fp8_e5m2": 0x7E}
        for name, code in expect.items():
            with self.subTest(name):
                self.assertEqual(dtypes.FORMATS[name].canonical_nan, code)
                self.assertEqual(int(codes_of(dtypes.encode([np.nan, -np.nan], name), name)[1]), code)

    def test_bf16_and_fp16_decode_agree_with_hardware_views(self):
        codes = np.arange(1 << 16, dtype=np.uint32)
        f32 = (codes << 16).view(np.float32).astype(np.float64)
        np.testing.assert_array_equal(dtypes.decode_table("bf16"), f32)
        np.testing.assert_array_equal(dtypes.decode_table("fp16"), codes.astype(np.uint16).view(np.float16))


class RoundTrip(unittest.TestCase):
    def test_every_code_round_trips_bit_exact(self):
        for name in SMALL:
            with self.subTest(name):
                f = dtypes.FORMATS[name]
                codes = all_codes(name)
                values = dtypes.decode_table(name)
                back = codes_of(dtypes.encode(values, name), name)
                expect = np.where(np.isnan(values), f.canonical_nan, codes)
                np.testing.assert_array_equal(back, expect)
                back_sat = codes_of(dtypes.encode(values, name, saturate=True), name)
                np.testing.assert_array_equal(back_sat[np.isfinite(values)], codes[np.isfinite(values)])

    def test_storage_holdings_round_trip(self):
        rng = np.random.default_rng(3)
        for name in SMALL:
            with self.subTest(name):
                raw = rng.integers(0, 1 << dtypes.FORMATS[name].bits, 1000).astype(np.int64)
                held = raw.astype(np.uint16).view(np.float16) if name == "fp16" else raw.astype(
                    dtypes.numpy_dtype(name))
                v = dtypes.decode(held, name)
                np.testing.assert_array_equal(v, dtypes.decode_table(name)[raw])


class Rounding(unittest.TestCase):
    def test_midpoints_go_to_the_even_code_and_neighbours_to_the_nearest(self):
        for name in SMALL:
            with self.subTest(name):
                vals, codes = finite_values(name)
                lo, hi = vals[:-1], vals[1:]
                mid = (lo + hi) / 2  # exact in float64
                even = np.where(codes[:-1] % 2 == 0, codes[:-1], codes[1:])
                got = codes_of(dtypes.encode(mid, name), name)
                # Halfway between +-min subnormal and 0 the even code is zero's, with x's sign where -0 exists.
                off_zero = (lo != 0) & (hi != 0)
                np.testing.assert_array_equal(got[off_zero], even[off_zero])
                f = dtypes.FORMATS[name]
                tiny = np.min(vals[vals > 0])
                halves = codes_of(dtypes.encode([tiny / 2, -tiny / 2], name), name)
                self.assertEqual(list(halves), [0, 0 if f.fnuz else f.sign_mask])
                below = np.nextafter(mid, -np.inf)
                above = np.nextafter(mid, np.inf)
                np.testing.assert_array_equal(dtypes.round_to(below, name)[lo != 0], lo[lo != 0])
                np.testing.assert_array_equal(dtypes.round_to(above, name)[hi != 0], hi[hi != 0])

    def test_one_rounding_from_double(self):
        # 1 + 2^-8 is the bf16 tie between 1 and 1 + 2^-7; a double just above it must round up. Through fp32
        # first it would become the tie and go to the even 1.
        x = 1 + 2.0**-8 + 2.0**-30
        self.assertEqual(dtypes.round_to([x], "bf16")[0], 1 + 2.0**-7)
        self.assertEqual(dtypes.round_to([np.float32(x)], "bf16")[0], 1.0)

    def test_overflow_thresholds(self):
        cases = [  # value, format, expected under IEEE overflow, expected saturating
            (464.0, "fp8_e4m3fn", 448.0, 448.0),  # the tie goes to the even max
            (-464.0, "fp8_e4m3fn", -448.0, -448.0),
            (465.0, "fp8_e4m3fn", math.nan, 448.0),
            (65520.0, "fp16", math.inf, 65504.0),  # its even neighbour is beyond the max
            (61440.0, "fp8_e5m2", math.inf, 57344.0),
            (-61440.0, "fp8_e5m2", -math.inf, -57344.0),
            (248.0, "fp8_e4m3fnuz", math.nan, 240.0),
            (math.inf, "fp8_e4m3fn", math.nan, 448.0),
            (-math.inf, "bf16", -math.inf, -float.fromhex("0x1.fep127")),
        ]
        for x, name, ieee, sat in cases:
            with self.subTest(x=x, name=name):
                got = dtypes.round_to([x], name)[0]
                self.assertTrue(math.isnan(got) if math.isnan(ieee) else got == ieee, got)
                self.assertEqual(dtypes.round_to([x], name, saturate=True)[0], sat)

    def test_e4m3fn_overflow_keeps_the_sign_fnuz_has_one_nan(self):
        self.assertEqual(int(dtypes.encode([-500.0], "fp8_e4m3fn")[0]), 0xFF)
        self.assertEqual(int(dtypes.encode([-500.0], "fp8_e4m3fnuz")[0]), 0x80)

    def test_signed_zero_and_underflow(self):
        self.assertEqual(int(dtypes.encode([-0.0], "fp8_e5m2")[0]), 0x80)
        self.assertEqual(int(dtypes.encode([-0.0], "fp8_e4m3fnuz")[0]), 0x00)
        self.assertEqual(int(dtypes.encode([-(2.0**-12)], "fp8_e4m3fn")[0]), 0x80)  # below half the min subnormal
        self.assertEqual(int(dtypes.encode([-(2.0**-12)], "fp8_e4m3fnuz")[0]), 0x00)

    def test_fp32_and_i32(self):
        x = np.array([1 / 3, -2.5e38, 1e39])
        np.testing.assert_array_equal(dtypes.encode(x, "fp32"), x.astype(np.float32))
        self.assertEqual(dtypes.encode([1e39], "fp32", saturate=True)[0], np.finfo(np.float32).max)
        np.testing.assert_array_equal(dtypes.encode([3, -7], "i32"), np.array([3, -7], np.int32))
        with self.assertRaises(ValueError):
            dtypes.encode([0.5], "i32")

    def test_unknown_dtype_is_a_clear_error(self):
        with self.assertRaisesRegex(ValueError, "unknown dtype 'fp4'"):
            dtypes.numpy_dtype("fp4")


@unittest.skipIf(torch is None, "torch is not importable")
class Torch(unittest.TestCase):
    def test_bf16_and_fp16_conversions_match(self):
        for name in ("bf16", "fp16"):
            with self.subTest(name):
                vals, _ = finite_values(name)
                probes = np.concatenate([vals, (vals[:-1] + vals[1:]) / 2]).astype(np.float32)
                ours = dtypes.round_to(probes.astype(np.float64), name)
                theirs = torch.from_numpy(probes).to(dtypes.torch_dtype(name)).double().numpy()
                np.testing.assert_array_equal(ours, theirs)

    def test_to_float_of_every_code(self):
        for name in ("fp8_e4m3fn", "fp8_e4m3fnuz", "fp8_e5m2", "bf16"):
            with self.subTest(name):
                codes = all_codes(name)
                if name == "bf16":
                    t = torch.from_numpy(codes.astype(np.int32)).to(torch.int16).view(torch.bfloat16)
                elif dtypes.is_raw_in_torch(name):
                    t = torch.from_numpy(codes.astype(np.uint8))
                else:
                    t = torch.from_numpy(codes.astype(np.uint8)).view(dtypes.torch_dtype(name))
                got = dtypes.to_float(t, name, dtype=torch.float64).numpy()
                np.testing.assert_array_equal(got, dtypes.decode_table(name))

    @unittest.skipIf(torch is None or not hasattr(torch, "float8_e4m3fn"), "this torch has no fp8 dtypes")
    def test_fp8_encodings_match_torch(self):
        for name in ("fp8_e4m3fn", "fp8_e4m3fnuz", "fp8_e5m2"):
            if dtypes.is_raw_in_torch(name):
                continue
            with self.subTest(name):
                vals, _ = finite_values(name)
                probes = np.concatenate([vals, (vals[:-1] + vals[1:]) / 2, np.nextafter(vals, np.inf)])
                probes = probes.astype(np.float32).astype(np.float64)  # torch converts from float32
                ours = codes_of(dtypes.encode(probes, name), name)
                theirs = torch.from_numpy(probes.astype(np.float32)).to(dtypes.torch_dtype(name)).view(torch.uint8)
                np.testing.assert_array_equal(ours, theirs.numpy().astype(np.int64))


if __name__ == "__main__":
    unittest.main()
