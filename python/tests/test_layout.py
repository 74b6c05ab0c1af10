"""Rebuilding driftcheck's layouts: whole storages, as_strided views, aliasing, guards, copy back."""

import unittest

import numpy as np

from driftcheck import dtypes, layout
from driftcheck.layout import StorageSpec, ViewSpec

try:
    import torch
except ImportError:
    torch = None


def index_of(view, idx):
    return view.offset + sum(i * s for i, s in zip(idx, view.strides))


def host_storage(spec, seed):
    """A storage whose every element has a distinct, recognisable encoding."""
    rng = np.random.default_rng(seed)
    nbytes = spec.nbytes
    buf = bytearray(rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes())
    return layout.numpy_storage(buf, spec)


# Two storages: a padded, misaligned bf16 x aliased by y (in place) and a residual in the same storage at another
# offset; an fp8 cache with a 4-D view; every element of the storages outside the views is a guard.
STORAGES = [StorageSpec("bf16", 200), StorageSpec("fp8_e4m3fnuz", 2 * 3 * 2 * 4 + 9)]
VIEWS = [
    ViewSpec("x", 0, (4, 7), (11, 1), 3),
    ViewSpec("y", 0, (4, 7), (11, 1), 3),
    ViewSpec("residual", 0, (4, 7), (9, 1), 60),
    ViewSpec("k_cache", 1, (2, 3, 2, 4), (24, 8, 4, 1), 5),
    ViewSpec("w", 0, (7,), (0,), 199),  # a broadcast (stride 0) view of the last element
]


class NumpyViews(unittest.TestCase):
    def setUp(self):
        self.hosts = [host_storage(s, i) for i, s in enumerate(STORAGES)]
        self.views = layout.numpy_views(self.hosts, VIEWS)

    def test_every_element_is_where_the_strides_say(self):
        for v in VIEWS:
            arr = self.views[v.name]
            self.assertEqual(arr.shape, v.shape)
            self.assertEqual(arr.dtype, dtypes.numpy_dtype(STORAGES[v.storage].dtype))
            for idx in np.ndindex(*v.shape):
                self.assertEqual(arr[idx], self.hosts[v.storage][index_of(v, idx)], (v.name, idx))

    def test_aliases_share_memory_and_writes_land_in_the_storage_only(self):
        before = self.hosts[0].copy()
        self.views["y"][2, 5] = 0x3F80
        self.assertEqual(self.views["x"][2, 5], 0x3F80)
        changed = np.flatnonzero(self.hosts[0] != before)
        self.assertEqual(list(changed), [3 + 2 * 11 + 5])

    def test_empty_views(self):
        arr = layout.numpy_view(self.hosts[0], ViewSpec("x", 0, (0, 7), (7, 1), 200))
        self.assertEqual(arr.shape, (0, 7))

    def test_raw_views_refuse_floats_and_take_codes(self):
        """A kernel's bf16 / fp8 views (raw codes in NumPy) raise, naming the mistake, when assigned floats."""
        dtype_of = {v.name: STORAGES[v.storage].dtype for v in VIEWS}.get
        guarded = layout.guard_raw_views(self.views, dtype_of)
        before = self.hosts[0].copy()
        for value in (np.ones((4, 7), np.float32), 0.5, np.float64(2.0)):
            with self.assertRaisesRegex(TypeError, r'y is a raw bf16 view \(NumPy holds bf16 as uint16 bit patterns\)'
                                                   r'.*case.store\("y", values\)'):
                guarded["y"][...] = value
        with self.assertRaisesRegex(TypeError, "k_cache is a raw fp8_e4m3fnuz view .* as uint8"):
            guarded["k_cache"][0, 0] = np.zeros((2, 4))
        np.testing.assert_array_equal(self.hosts[0], before)  # nothing was written
        codes = dtypes.encode(np.full(7, 1.5), "bf16")
        guarded["y"][1] = codes  # integer codes: written as they are, into the storage
        guarded["y"][2][3] = 0x3F80  # a row of the view is guarded too, and takes an int
        self.assertEqual(self.hosts[0][3 + 11 + 4], 0x3FC0)
        self.assertEqual(self.views["x"][2, 3], 0x3F80)
        np.testing.assert_array_equal(dtypes.decode(guarded["y"][1], "bf16"), np.full(7, 1.5))


class Contiguity(unittest.TestCase):
    CASES = [((4, 8), (8, 1)), ((4, 8), (9, 1)), ((4, 8), (1, 4)), ((1, 8), (99, 1)), ((4, 1), (1, 7)),
             ((0, 8), (3, 5)), ((2, 3, 4), (12, 4, 1)), ((2, 3, 4), (12, 1, 3)), ((8,), (2,)), ((8,), (1,))]

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_agrees_with_torch_is_contiguous(self):
        base = torch.empty(512)
        for shape, strides in self.CASES:
            expected = base.as_strided(shape, strides).is_contiguous()
            self.assertEqual(ViewSpec("t", 0, shape, strides, 0).contiguous(), expected, (shape, strides))

    def test_row_major_without_gaps(self):
        self.assertTrue(ViewSpec("t", 0, (4, 8), (8, 1), 3).contiguous())  # the offset does not matter
        self.assertFalse(ViewSpec("t", 0, (4, 8), (9, 1), 0).contiguous())  # padded rows


class Checks(unittest.TestCase):
    def test_views_outside_their_storage_are_rejected_by_name(self):
        bad = [
            (ViewSpec("x", 0, (4, 7), (11, 1), 168), "view 'x' reaches element 207 of storage 0, which has 200"),
            (ViewSpec("q", 2, (1,), (1,), 0), "view 'q' names storage 2 of 2"),
            (ViewSpec("o", 0, (2, 2), (-1, 1), 5), "view 'o' has a negative size, stride or offset"),
            (ViewSpec("o", 0, (2, 2), (1,), 5), "view 'o' has 2 dims and 1 strides"),
        ]
        for view, message in bad:
            with self.subTest(message), self.assertRaisesRegex(ValueError, message):
                layout.check(STORAGES, [view])
        layout.check(STORAGES, VIEWS)  # the good layout passes


@unittest.skipIf(torch is None, "torch is not importable")
class TorchViews(unittest.TestCase):
    def devices(self):
        return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

    def test_views_match_numpy_and_storages_round_trip(self):
        for device in self.devices():
            with self.subTest(device):
                hosts = [host_storage(s, i) for i, s in enumerate(STORAGES)]
                pristine = [h.copy() for h in hosts]
                dev = [layout.torch_storage(h, s, device) for h, s in zip(hosts, STORAGES)]
                views = layout.torch_views(dev, VIEWS)
                for v in VIEWS:
                    t = views[v.name]
                    self.assertEqual(tuple(t.stride()), v.strides)
                    raw = t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.uint8)
                    expect = layout.numpy_views(pristine, [v])[v.name].astype(np.int64)
                    got = raw.cpu().numpy().astype(np.int64)
                    if t.dtype == torch.bfloat16:
                        got &= 0xFFFF
                    np.testing.assert_array_equal(got, expect)
                views["y"][1, 2] = 1.0  # an in-place write through the alias
                views["k_cache"].view(torch.uint8)[1, 2, 1, 3] = 0x42
                layout.torch_copy_back(dev, hosts)
                diff0 = np.flatnonzero(hosts[0] != pristine[0])
                self.assertEqual(list(diff0), [3 + 11 + 2])
                self.assertEqual(hosts[0][3 + 11 + 2], 0x3F80)  # bf16 1.0
                diff1 = np.flatnonzero(hosts[1] != pristine[1])
                self.assertEqual(list(diff1), [5 + 24 + 16 + 4 + 3])
                self.assertEqual(hosts[1][5 + 24 + 16 + 4 + 3], 0x42)

    def test_packed_copies_move_every_storage_whole(self):
        # The device path copies the arena span once each way; run it with a CPU copy to check the offsets.
        offsets = [0, 448]
        arena = np.zeros(1024, np.uint8)
        hosts = [layout.numpy_storage(arena, s, off) for s, off in zip(STORAGES, offsets)]
        for h, s in zip(hosts, (host_storage(x, i) for i, x in enumerate(STORAGES))):
            h[...] = s
        pristine = arena.copy()
        raw, lo, dev = layout.torch_storages_packed(arena, STORAGES, offsets, "cpu")
        self.assertNotEqual(raw.data_ptr(), arena.ctypes.data)  # a copy, as on a device
        views = layout.torch_views(dev, VIEWS)
        for v in VIEWS:
            expect = layout.numpy_views(hosts, [v])[v.name]
            got = views[v.name].view(torch.int16 if views[v.name].dtype == torch.bfloat16 else torch.uint8)
            np.testing.assert_array_equal(got.numpy().astype(np.int64) & 0xFFFF, expect.astype(np.int64))
        views["y"][0, 0] = 2.0
        layout.torch_copy_back_packed(raw, arena, lo)
        self.assertLessEqual(set(np.flatnonzero(arena != pristine)), {6, 7})  # element 3 of storage 0 only
        self.assertEqual(hosts[0][3], 0x4000)

    def test_cpu_storages_are_the_host_memory(self):
        host = host_storage(STORAGES[0], 7)
        t = layout.torch_storage(host, STORAGES[0], "cpu")
        t[5] = 2.0
        self.assertEqual(host[5], 0x4000)


if __name__ == "__main__":
    unittest.main()
