"""The worker protocol from the Python side, against a stand-in driftcheck (tests/harness.py): handshake,
supports, run through the arena, errors as replies, protocol errors as a silent non-zero exit."""

import json
import os
import struct
import sys
import tempfile
import textwrap
import unittest

import numpy as np

import harness
from driftcheck import dtypes, worker

U_BF16 = 2.0**-8
U_F32 = 2.0**-24


def script(body):
    """A worker script in a temporary file."""
    f = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
    f.write("import driftcheck as dc\n" + textwrap.dedent(body) + "\nif __name__ == '__main__':\n    dc.serve()\n")
    f.close()
    return [sys.executable, f.name]


class Handshake(unittest.TestCase):
    def test_hello_names_ops_and_says_available(self):
        w = harness.FakeDriftcheck(harness.example("rmsnorm_numpy.py"))
        kind, reply = w.hello("rmsnorm")
        self.assertEqual(kind, worker.HELLO | worker.REPLY)
        self.assertEqual(reply["protocol"], "driftcheck.worker")
        self.assertEqual(reply["version"], 1)
        self.assertEqual(reply["ops"], ["rmsnorm"])
        self.assertTrue(reply["available"])
        self.assertFalse(reply["supports_round_trip"])  # no supports function: every case is taken
        self.assertIn("numpy", reply["info"])
        self.assertEqual(w.close()[0], 0)

    def test_unavailable_with_reason(self):
        w = harness.FakeDriftcheck(script("""
            dc.unavailable("vllm is not importable (No module named 'vllm')")
            @dc.rmsnorm(tensors="numpy")
            def k(case):
                pass
        """))
        _, reply = w.hello("rmsnorm")
        self.assertFalse(reply["available"])
        self.assertEqual(reply["reason"], "vllm is not importable (No module named 'vllm')")
        self.assertEqual(w.close()[0], 0)

    def test_two_kernels_for_one_op_are_refused_at_hello(self):
        # a module may define a kernel and its variant (a test suite does); a worker script must serve one
        w = harness.FakeDriftcheck(script("""
            @dc.rmsnorm(tensors="numpy")
            def correct(case):
                pass
            @dc.rmsnorm(tensors="numpy")
            def variant(case):
                pass
        """))
        kind, reply = w.hello("rmsnorm")
        self.assertEqual(kind, worker.ERROR)
        self.assertIn("2 kernels registered for rmsnorm (correct, variant)", reply["message"])
        self.assertEqual(w.close()[0], 0)

    def test_run_by_hand_says_what_it_is(self):
        import subprocess

        env = dict(os.environ, PYTHONPATH=harness.PACKAGE_ROOT)
        env.pop("DRIFTCHECK_PROTOCOL", None)
        p = subprocess.run(harness.example("rmsnorm_numpy.py"), env=env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("this is a driftcheck worker", p.stderr)

    def test_stdio_channel_survives_a_printing_kernel(self):
        w = harness.FakeDriftcheck(script("""
            @dc.rmsnorm(tensors="numpy")
            def k(case):
                print("chatty kernel on stdout")
                case.store("y", case.load("x"))
        """), stdio=True)
        self.assertTrue(w.hello("rmsnorm")[1]["available"])
        case = harness.rmsnorm_case(np.random.default_rng(1), rows=2, hidden=8)
        kind, _ = w.run(case)
        self.assertEqual(kind, worker.RUN | worker.REPLY)
        np.testing.assert_array_equal(case.get("y"), case.get("x"))
        status, _, err = w.close()
        self.assertEqual(status, 0)
        self.assertIn("chatty kernel on stdout", err)  # the print went to stderr, not into the frames

    def test_another_protocol_version_in_the_environment(self):
        w = harness.FakeDriftcheck(harness.example("rmsnorm_numpy.py"), env={"DRIFTCHECK_PROTOCOL": "driftcheck.worker/2"})
        status, _, err = w.close()
        self.assertEqual(status, 2)
        self.assertIn("driftcheck speaks driftcheck.worker/2, this runner driftcheck.worker/1", err)

    def test_end_of_file_exits_cleanly(self):
        w = harness.FakeDriftcheck(harness.example("rmsnorm_numpy.py"))
        w.hello("rmsnorm")
        os.close(w.req_w)
        w.req_w = os.open(os.devnull, os.O_WRONLY)
        self.assertEqual(w.proc.wait(timeout=20), 0)
        w.close()


class ProtocolErrors(unittest.TestCase):
    def expect_silent_exit(self, data, then_close=False):
        w = harness.FakeDriftcheck(harness.example("rmsnorm_numpy.py"))
        w.send_raw(data)
        if then_close:  # a truncated frame shows only at end of file
            os.close(w.req_w)
            w.req_w = os.open(os.devnull, os.O_WRONLY)
        status = w.proc.wait(timeout=20)
        self.assertNotEqual(status, 0)
        self.assertEqual(w.replies.read(), b"")  # nothing written
        _, _, err = w.close()
        return err

    def test_other_version(self):
        frame = worker.encode_frame(worker.HELLO, 1, {"protocol": "driftcheck.worker", "version": 2})
        err = self.expect_silent_exit(frame[:4] + struct.pack("<H", 2) + frame[6:])
        self.assertIn("protocol version 2", err)

    def test_bad_magic_truncation_and_garbage(self):
        good = worker.encode_frame(worker.HELLO, 1, {"protocol": "driftcheck.worker", "version": 1})
        self.assertIn("bad magic", self.expect_silent_exit(b"XXXX" + good[4:]))
        self.assertIn("truncated payload", self.expect_silent_exit(good[:-3], then_close=True))
        body = b"[1, 2]"
        self.assertIn("not a JSON object", self.expect_silent_exit(good[:12] + struct.pack("<I", len(body)) + body))
        self.assertIn("out of bounds", self.expect_silent_exit(good[:12] + struct.pack("<I", 1 << 30)))
        self.assertIn("unexpected message type", self.expect_silent_exit(
            worker.encode_frame(0x0081, 1, {"x": 1})))


class Runs(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(11)

    def check_rmsnorm(self, w, case, ulps):
        before = case.snapshot()
        x, r = case.get("x"), (case.get("residual") if case.params["residual"] else None)
        w_ = case.get("w")
        kind, reply = w.run(case)
        self.assertEqual(kind, worker.RUN | worker.REPLY, reply)
        self.assertEqual(reply["storages"], [int(a.nbytes) for a in case.storages])
        z = x + r if r is not None else x
        ref = harness.rmsnorm_ref(z, w_, case.params["eps"], case.params["weight_mode"])
        y = case.get("y")
        # one rounding to bf16 plus fp32 work: a bound of `ulps` bf16 ulps of the reference
        bound = ulps * U_BF16 * 2 * np.maximum(np.abs(ref), 2.0**-126) + 64 * U_F32 * np.abs(ref)
        self.assertTrue(np.all(np.abs(y - ref) <= bound), np.max(np.abs(y - ref) / bound))
        outputs = ["y"] + (["residual"] if r is not None else [])
        self.assertEqual(harness.changed_outside(case, before, outputs), [])
        if r is not None:
            np.testing.assert_array_equal(case.get("residual"), dtypes.round_to(dtypes.round_to(z, "fp32"), "bf16"))

    def test_numpy_rmsnorm_over_layouts(self):
        w = harness.FakeDriftcheck(harness.example("rmsnorm_numpy.py"))
        w.hello("rmsnorm")
        layouts = [dict(rows=1, hidden=7), dict(rows=5, hidden=96, row_pad=3, offset=5),
                   dict(rows=3, hidden=64, residual=True, row_pad=8, offset=1),
                   dict(rows=4, hidden=33, inplace=True, weight_mode="one_plus"),
                   dict(rows=2, hidden=4096, residual=True, inplace=True)]
        for kw in layouts:
            with self.subTest(**kw):
                self.check_rmsnorm(w, harness.rmsnorm_case(self.rng, **kw), ulps=0.5)
        self.assertEqual(w.close()[0], 0)

    def test_planted_stride_bug_reads_the_padding(self):
        w = harness.FakeDriftcheck(harness.example("rmsnorm_numpy.py", "--planted-bug", "stride_ignored"))
        w.hello("rmsnorm")
        case = harness.rmsnorm_case(self.rng, rows=3, hidden=16, row_pad=4)
        w.run(case)
        self.assertTrue(np.isnan(case.get("y")[1:]).any())  # poison from the padding reached rows 1 and 2
        contiguous = harness.rmsnorm_case(self.rng, rows=3, hidden=16)
        self.check_rmsnorm(w, contiguous, ulps=0.5)  # no padding: the bug cannot show
        w.close()

    def test_kernel_errors_are_replies_and_the_worker_goes_on(self):
        w = harness.FakeDriftcheck(script("""
            @dc.rmsnorm(tensors="numpy")
            def k(case):
                if case.params.eps == 0.5:
                    raise RuntimeError("boom\\nsecond line")
                if case.params.eps == 0.25:
                    raise dc.Unsupported("H = 7: the kernel wants multiples of 8")
                case.store("y", case.load("x"))
        """))
        w.hello("rmsnorm")
        bad = harness.rmsnorm_case(self.rng, rows=2, hidden=7, eps=0.5)
        kind, reply = w.run(bad)
        self.assertEqual((kind, reply), (worker.ERROR, {"message": "RuntimeError: boom", "fatal": False}))
        kind, reply = w.run(harness.rmsnorm_case(self.rng, rows=2, hidden=7, eps=0.25))
        self.assertEqual(kind, worker.ERROR)
        self.assertEqual(reply, {"message": "H = 7: the kernel wants multiples of 8", "unsupported": True})
        good = harness.rmsnorm_case(self.rng, rows=2, hidden=7)
        kind, _ = w.run(good)
        self.assertEqual(kind, worker.RUN | worker.REPLY)
        np.testing.assert_array_equal(good.get("y"), good.get("x"))
        self.assertEqual(w.close()[0], 0)

    def test_sticky_device_errors_are_fatal(self):
        # A kernel fault is asynchronous: the next library call in the process may report it as its own status.
        for text in ("CUDA error: misaligned address", "CUDA error: CUBLAS_STATUS_INTERNAL_ERROR when calling "
                     "`cublasCreate(handle)`", "cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"):
            self.assertTrue(worker._is_fatal(RuntimeError(text)), text)
        self.assertFalse(worker._is_fatal(RuntimeError("p.query_ptr is not correctly aligned")))
        self.assertFalse(worker._is_fatal(ValueError("H = 7: the kernel wants multiples of 8")))

    def test_supports_round_trip(self):
        w = harness.FakeDriftcheck(script("""
            @dc.rmsnorm(tensors="numpy")
            def k(case):
                pass
            @k.supports
            def _(case):
                if case.shape("x")[1] % 8:
                    return f"H = {case.shape('x')[1]}: multiples of 8 only"
        """))
        _, hello = w.hello("rmsnorm")
        self.assertTrue(hello["supports_round_trip"])
        self.assertEqual(w.supports(harness.rmsnorm_case(self.rng, 2, 16))[1], {"ok": True})
        self.assertEqual(w.supports(harness.rmsnorm_case(self.rng, 2, 12))[1],
                         {"ok": False, "reason": "H = 12: multiples of 8 only"})
        w.close()

    def test_stats_file_counts_requests(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "stats.jsonl")
            w = harness.FakeDriftcheck(harness.example("rmsnorm_numpy.py"), env={"DRIFTCHECK_RUNNER_STATS": path})
            w.hello("rmsnorm")
            for _ in range(3):
                w.run(harness.rmsnorm_case(self.rng, 2, 8))
            self.assertEqual(w.close()[0], 0)
            with open(path) as f:
                line = json.loads(f.read())
            self.assertEqual((line["hello"]["count"], line["supports"]["count"], line["run"]["count"]), (1, 0, 3))
            self.assertGreater(line["run"]["seconds"], 0)
            self.assertLessEqual(line["kernel_ms"] / 1e3, line["run"]["seconds"])

    def test_malformed_cases_are_error_replies(self):
        w = harness.FakeDriftcheck(harness.example("rmsnorm_numpy.py"))
        w.hello("rmsnorm")
        case = harness.rmsnorm_case(self.rng, 2, 8)
        meta = case.metadata()
        meta["tensors"]["x"]["offset"] = 10**6
        kind, reply = w.request(worker.SUPPORTS, {"case": meta})
        self.assertEqual(kind, worker.ERROR)
        self.assertRegex(reply["message"], r"view 'x' reaches element \d+ of storage 0")
        meta = case.metadata()
        del meta["params"]["eps"]
        kind, reply = w.request(worker.SUPPORTS, {"case": meta})
        self.assertEqual(reply["message"], "ValueError: rmsnorm: missing parameter(s) eps")
        meta = case.metadata()
        for s in meta["storages"]:
            s["arena_offset"] = 1 << 20
        kind, reply = w.request(worker.RUN, {"case": meta, "arena_size": 4096})
        self.assertEqual(kind, worker.ERROR)
        self.assertIn("outside the arena", reply["message"])
        self.assertEqual(w.close()[0], 0)


if __name__ == "__main__":
    unittest.main()
