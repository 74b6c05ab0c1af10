"""Test helpers: a stand-in for driftcheck's side of the worker protocol (docs/PROTOCOL.md), and cases built the
way driftcheck lays them out (padded rows, misaligned offsets, guard elements full of poison, aliasing, paged KV
with poisoned unused slots), with fp64 references of the ops (docs/REFERENCE.md section 3)."""

import json
import os
import subprocess
import sys

import numpy as np

from driftcheck import dtypes, worker

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
REPO = os.path.dirname(PACKAGE_ROOT)
EXAMPLES = os.path.join(REPO, "examples", "python")


# ---- the driftcheck side of the protocol ---------------------------------------------------------------------


class FakeDriftcheck:
    """Starts a worker with requests on fd 3, replies on fd 4 and a memfd arena on fd 5, as driftcheck does."""

    def __init__(self, argv, env=None, stdio=False):
        """stdio: the `channel = "stdio"` variant, requests on the worker's stdin and replies on its stdout."""
        self.argv = argv
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        self.arena_fd = os.memfd_create("driftcheck-test-arena")
        self.arena_size = 0
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = PACKAGE_ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
        full_env.update(
            DRIFTCHECK_PROTOCOL="driftcheck.worker/1",
            DRIFTCHECK_REQUEST_FD="0" if stdio else "3",
            DRIFTCHECK_REPLY_FD="1" if stdio else "4",
            DRIFTCHECK_ARENA_FD="5",
            DRIFTCHECK_BACKEND="ext.test",
        )
        full_env.update(env or {})
        fds = (self.arena_fd,) if stdio else (req_r, rep_w, self.arena_fd)
        targets = (5,) if stdio else (3, 4, 5)

        def place_fds():  # runs in the child before exec: the channel fds land on 3, 4, 5
            moved = [os.dup(fd) for fd in fds]
            for target, fd in zip(targets, moved):
                os.dup2(fd, target)

        self.proc = subprocess.Popen(
            argv, env=full_env, stdin=req_r if stdio else subprocess.DEVNULL, stdout=rep_w if stdio else
            subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=targets + fds, preexec_fn=place_fds,
        )
        os.close(req_r)
        os.close(rep_w)
        self.replies = os.fdopen(self.rep_r, "rb")
        self.seq = 0

    def send_raw(self, data: bytes) -> None:
        os.write(self.req_w, data)

    def request(self, kind, payload):
        self.seq += 1
        self.send_raw(worker.encode_frame(kind, self.seq, payload))
        if kind == worker.SHUTDOWN:
            return None
        frame = worker.read_frame(self.replies)
        if frame is None:
            raise EOFError("worker closed its reply channel")
        rkind, rseq, obj = frame
        assert rseq == self.seq, (rseq, self.seq)
        return rkind, obj

    def hello(self, op):
        return self.request(worker.HELLO, {"protocol": "driftcheck.worker", "version": 1, "backend": "ext.test",
                                           "op": op, "driftcheck": "test", "arena": {"fd": 5, "path": ""}})

    def supports(self, case):
        return self.request(worker.SUPPORTS, {"case": case.metadata()})

    def run(self, case):
        """Sends the case's storages through the arena; on success the case's storages hold what came back."""
        meta = case.metadata()
        offset = 0
        for s, host in zip(meta["storages"], case.storages):
            s["arena_offset"] = offset
            offset += -(-host.nbytes // 64) * 64
        size = max(offset, 64)
        if size > self.arena_size:
            os.ftruncate(self.arena_fd, size)
            self.arena_size = size
        for s, host in zip(meta["storages"], case.storages):
            os.pwrite(self.arena_fd, host.tobytes(), s["arena_offset"])
        reply = self.request(worker.RUN, {"case": meta, "arena_size": size})
        if reply[0] == worker.RUN | worker.REPLY:
            for s, host in zip(meta["storages"], case.storages):
                raw = os.pread(self.arena_fd, host.nbytes, s["arena_offset"])
                host[...] = np.frombuffer(raw, dtype=host.dtype)
        return reply

    def close(self, timeout=20):
        if self.proc.poll() is None:
            try:
                self.request(worker.SHUTDOWN, {})
            except OSError:
                pass
        os.close(self.req_w)
        out, err = self.proc.communicate(timeout=timeout)
        out, err = out or b"", err or b""
        self.replies.close()
        os.close(self.arena_fd)
        return self.proc.returncode, out.decode(), err.decode()


def example(script, *args):
    return [sys.executable, os.path.join(EXAMPLES, script), *args]


# ---- cases -----------------------------------------------------------------------------------------------------


POISON = (np.nan, np.inf, -np.inf)


class TestCase:
    """Storages (NumPy arrays held as dtypes.numpy_dtype) and named views, as PROTOCOL.md's CASE object."""

    def __init__(self, op, params):
        self.op = op
        self.params = params
        self.storages = []
        self.dtypes = []  # driftcheck dtype name of each storage
        self.tensors = {}

    def storage(self, dtype, numel, poison=True):
        if poison:
            vals = np.resize(np.array(POISON), numel)
            arr = dtypes.encode(vals, dtype) if dtype != "i32" else np.full(numel, -7, np.int32)
        else:
            arr = np.zeros(numel, dtypes.numpy_dtype(dtype))
        self.storages.append(np.array(arr, dtype=dtypes.numpy_dtype(dtype)))
        self.dtypes.append(dtype)
        return len(self.storages) - 1

    def view(self, name, storage, shape, strides, offset):
        self.tensors[name] = dict(storage=storage, shape=list(shape), strides=list(strides), offset=offset)

    def padded(self, name, dtype, shape, row_pad=0, offset=0, guard=8):
        """Rows row_pad apart, first element guard + offset in, guard elements after (Tensor::padded)."""
        shape = tuple(shape)
        row = shape[-1] + row_pad
        strides = [1]
        for i in range(len(shape) - 1, 0, -1):
            strides.insert(0, strides[0] * (row if i == len(shape) - 1 else shape[i]))
        numel = guard + offset + sum((n - 1) * s for n, s in zip(shape, strides)) + 1 + guard
        sid = self.storage(dtype, numel)
        self.view(name, sid, shape, strides, guard + offset)
        return sid

    def array(self, name):
        """The view as an array over its storage (writes land in the storage)."""
        from driftcheck import layout

        t = self.tensors[name]
        spec = layout.ViewSpec(name, t["storage"], tuple(t["shape"]), tuple(t["strides"]), t["offset"])
        return layout.numpy_view(self.storages[t["storage"]], spec)

    def dtype(self, name):
        return self.dtypes[self.tensors[name]["storage"]]

    def set(self, name, values):
        self.array(name)[...] = dtypes.encode(values, self.dtype(name))

    def get(self, name):
        return dtypes.decode(self.array(name), self.dtype(name))

    def metadata(self):
        storages = [{"dtype": d, "numel": int(a.size), "nbytes": int(a.nbytes)}
                    for d, a in zip(self.dtypes, self.storages)]
        tensors = {n: dict(t, dtype=self.dtypes[t["storage"]]) for n, t in self.tensors.items()}
        return json.loads(json.dumps({"op": self.op, "seed": 0, "index": 0, "params": self.params,
                                      "storages": storages, "tensors": tensors}))

    def snapshot(self):
        return [a.copy() for a in self.storages]


def rmsnorm_case(rng, rows, hidden, dtype="bf16", row_pad=0, offset=0, residual=False, inplace=False,
                 weight_mode="plain", eps=1e-6):
    c = TestCase("rmsnorm", {"eps": eps, "weight_mode": weight_mode, "residual": residual})
    c.padded("x", dtype, (rows, hidden), row_pad, offset)
    c.set("x", rng.standard_normal((rows, hidden)))
    c.padded("w", dtype, (hidden,), 0, offset)
    c.set("w", rng.standard_normal(hidden) * (0.1 if weight_mode == "one_plus" else 1.0))
    if residual:
        c.padded("residual", dtype, (rows, hidden), row_pad, offset)
        c.set("residual", rng.standard_normal((rows, hidden)))
    if inplace:
        c.tensors["y"] = dict(c.tensors["x"])
    else:
        c.padded("y", dtype, (rows, hidden), row_pad, offset)
    return c


def dual_case(rng, rows, hidden, dtype="bf16", row_pad=0, offset=0, weight_mode="plain", eps=1e-6):
    c = TestCase("dual_rmsnorm_cat", {"eps": eps, "weight_mode": weight_mode})
    for name in ("e", "h"):
        c.padded(name, dtype, (rows, hidden), row_pad, offset)
        c.set(name, rng.standard_normal((rows, hidden)))
    for name in ("w_e", "w_h"):
        c.padded(name, dtype, (hidden,), 0, offset)
        c.set(name, rng.standard_normal(hidden))
    c.padded("out", dtype, (rows, 2 * hidden), row_pad, offset)
    return c


def rmsnorm_ref(z, w, eps, weight_mode):
    w = 1 + w if weight_mode == "one_plus" else w
    return z / np.sqrt(np.sum(z * z, axis=1, keepdims=True) / z.shape[1] + eps) * w


def attention_case(rng, seqs, hq=4, hkv=2, d=16, block_size=16, dtype="bf16", kv_dtype="bf16", causal=True,
                   window=0, softcap=0.0, sinks=False, spare_blocks=2, k_scale=1.0, v_scale=1.0, shuffle=True):
    """seqs: list of (query_len, seq_len). Unused KV slots, spare blocks and table entries past a sequence's last
    block hold poison."""
    params = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, block_size=block_size, scale=d**-0.5,
                  causal=causal, window=window, softcap=softcap, k_scale=k_scale, v_scale=v_scale, has_sinks=sinks)
    c = TestCase("attention", params)
    tokens = sum(q for q, _ in seqs)
    used = [-(-l // block_size) for _, l in seqs]
    num_blocks = sum(used) + spare_blocks
    max_blocks = max(used) + 1
    c.padded("q", dtype, (tokens, hq, d))
    c.set("q", rng.standard_normal((tokens, hq, d)))
    for name in ("k_cache", "v_cache"):
        c.padded(name, kv_dtype, (num_blocks, block_size, hkv, d))
    order = rng.permutation(num_blocks) if shuffle else np.arange(num_blocks)
    table = np.full((len(seqs), max_blocks), order[-1] if spare_blocks else 0, np.int64)
    nxt = 0
    for s, (_, l) in enumerate(seqs):
        for j in range(used[s]):
            table[s, j] = order[nxt]
            nxt += 1
        for name, scale in (("k_cache", k_scale), ("v_cache", v_scale)):
            cache = c.array(name)
            for t in range(l):
                vals = rng.standard_normal((hkv, d)) / scale
                cache[table[s, t // block_size], t % block_size] = dtypes.encode(vals, kv_dtype, saturate=True)
    for name, values in (("block_table", table), ("seq_lens", [l for _, l in seqs]),
                         ("query_start_loc", np.concatenate([[0], np.cumsum([q for q, _ in seqs])]))):
        values = np.asarray(values)
        c.padded(name, "i32", values.shape)
        c.array(name)[...] = values
    if sinks:
        c.padded("sinks", "fp32", (hq,))
        c.set("sinks", rng.standard_normal(hq))
    c.padded("o", dtype, (tokens, hq, d))
    c.padded("lse", "fp32", (tokens, hq))
    return c


def attention_ref(c):
    """fp64 o [T, Hq, D] and lse [T, Hq] by the definition (docs/REFERENCE.md section 3)."""
    p = c.params
    q = c.get("q")
    kc, vc = c.get("k_cache") * p["k_scale"], c.get("v_cache") * p["v_scale"]
    table, seq_lens, qsl = c.array("block_table"), c.array("seq_lens"), c.array("query_start_loc")
    bs, group = p["block_size"], p["num_q_heads"] // p["num_kv_heads"]
    o = np.zeros(q.shape)
    lse = np.full(q.shape[:2], -np.inf)
    sinks = c.get("sinks") if p["has_sinks"] else None
    for s, seq_len in enumerate(seq_lens):
        keys = [(table[s, t // bs], t % bs) for t in range(seq_len)]
        k = np.array([kc[b, i] for b, i in keys]).reshape(seq_len, p["num_kv_heads"], -1)
        v = np.array([vc[b, i] for b, i in keys]).reshape(seq_len, p["num_kv_heads"], -1)
        for j, row in enumerate(range(qsl[s], qsl[s + 1])):
            pos = seq_len - (qsl[s + 1] - qsl[s]) + j
            t = np.arange(seq_len)
            vis = (~np.bool_(p["causal"]) | (t <= pos)) & ((p["window"] == 0) | (pos - t < p["window"]))
            for h in range(p["num_q_heads"]):
                kh = h // group
                logits = p["scale"] * (k[vis, kh] @ q[row, h])
                if p["softcap"] > 0:
                    logits = p["softcap"] * np.tanh(logits / p["softcap"])
                terms = list(logits) + ([sinks[h]] if sinks is not None else [])
                if not terms:
                    continue
                m = max(terms)
                total = np.sum(np.exp(np.array(terms) - m))
                lse[row, h] = m + np.log(total)
                o[row, h] = np.exp(logits - lse[row, h]) @ v[vis, kh] if vis.any() else 0
    return o, lse


def changed_outside(case, before, names):
    """Storage elements that changed and lie in none of the named views: guard bands, padding, other tensors."""
    allowed = [np.zeros(a.size, bool) for a in case.storages]
    for name in names:
        t = case.tensors[name]
        idx = np.zeros(t["shape"], np.int64) + t["offset"]
        for dim, (n, st) in enumerate(zip(t["shape"], t["strides"])):
            shape = [1] * len(t["shape"])
            shape[dim] = n
            idx = idx + (np.arange(n) * st).reshape(shape)
        allowed[t["storage"]][idx.ravel()] = True
    out = []
    for i, (a, b) in enumerate(zip(case.storages, before)):
        diff = a.view(np.uint8).reshape(a.size, -1) != b.view(np.uint8).reshape(b.size, -1)
        bad = np.flatnonzero(diff.any(axis=1) & ~allowed[i])
        out.extend((i, int(j)) for j in bad)
    return out
