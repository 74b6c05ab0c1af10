"""The worker side of driftcheck's external-backend protocol, `driftcheck.worker` version 1 (docs/PROTOCOL.md).

driftcheck starts the worker script with the request and reply channels and the shared-memory arena as inherited
file descriptors (named by DRIFTCHECK_REQUEST_FD, DRIFTCHECK_REPLY_FD, DRIFTCHECK_ARENA_FD). `serve()` answers
hello, supports and run requests, strictly in order, until shutdown or end of file on the request channel.
"""

from __future__ import annotations

import io
import json
import mmap
import os
import platform
import struct
import sys
import time

import numpy as np

from . import api, layout, runner
from .api import Unsupported
from .layout import StorageSpec, ViewSpec

PROTOCOL = "driftcheck.worker"
VERSION = 1
MAGIC = b"DCWP"
HEADER = struct.Struct("<4sHHII")  # magic, version, type, sequence number, payload length
MAX_PAYLOAD = 16 * 1024 * 1024
HELLO, SUPPORTS, RUN, SHUTDOWN = 0x01, 0x02, 0x03, 0x04
REPLY, ERROR = 0x80, 0xFF


class ProtocolError(Exception):
    """A frame this worker cannot accept: it writes nothing more and exits non-zero (PROTOCOL.md section 2)."""


def read_frame(stream):
    """(type, sequence, payload dict), or None at end of file before a frame starts."""
    header = stream.read(HEADER.size)
    if not header:
        return None
    if len(header) != HEADER.size:
        raise ProtocolError(f"truncated frame header ({len(header)} of {HEADER.size} bytes)")
    magic, version, kind, seq, length = HEADER.unpack(header)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {magic!r}")
    if version != VERSION:
        raise ProtocolError(f"driftcheck speaks protocol version {version}, this worker {VERSION}")
    if not 2 <= length <= MAX_PAYLOAD:
        raise ProtocolError(f"payload length {length} out of bounds")
    payload = stream.read(length)
    if len(payload) != length:
        raise ProtocolError(f"truncated payload ({len(payload)} of {length} bytes)")
    try:
        obj = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"payload is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("payload is not a JSON object")
    return kind, seq, obj


def encode_frame(kind: int, seq: int, payload: dict) -> bytes:
    body = json.dumps(payload, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return HEADER.pack(MAGIC, VERSION, kind, seq, len(body)) + body


def parse_case(obj: dict, with_arena: bool):
    """CASE (PROTOCOL.md section 4) -> (metadata Case, storage specs, arena offsets or None). Raises ValueError
    naming the problem."""
    try:
        op = obj["op"]
        storages = [StorageSpec(s["dtype"], int(s["numel"])) for s in obj["storages"]]
        for i, (s, raw) in enumerate(zip(storages, obj["storages"])):
            if int(raw["nbytes"]) != s.nbytes:
                raise ValueError(f"storage {i}: nbytes {raw['nbytes']} != numel x element size {s.nbytes}")
        views = [
            ViewSpec(name, int(t["storage"]), tuple(t["shape"]), tuple(t["strides"]), int(t["offset"]))
            for name, t in obj["tensors"].items()
        ]
        for v in views:
            declared = obj["tensors"][v.name].get("dtype")
            if 0 <= v.storage < len(storages) and declared not in (None, storages[v.storage].dtype):
                raise ValueError(f"tensor '{v.name}' is {declared}, its storage {storages[v.storage].dtype}")
        params = runner.make_params(op, obj["params"])
        offsets = [int(s["arena_offset"]) for s in obj["storages"]] if with_arena else None
    except KeyError as e:
        raise ValueError(f"case lacks key {e}") from None
    except (TypeError, AttributeError) as e:
        raise ValueError(f"malformed case: {e}") from None
    case = runner.metadata_case(op, params, storages, views, obj.get("seed", 0), obj.get("index", 0))
    return case, storages, offsets


def _is_fatal(exc: BaseException) -> bool:
    """Device errors that leave the CUDA/HIP context unusable (sticky): the worker must be replaced."""
    text = f"{type(exc).__name__}: {exc}"
    return any(
        s in text
        for s in ("AcceleratorError", "CUDA error", "HIP error", "illegal memory access", "device-side assert",
                  "unspecified launch failure", "CUDA driver error", "misaligned address",
                  # a library call that fails after an asynchronous kernel fault reports the sticky error as its own
                  "CUBLAS_STATUS_INTERNAL_ERROR", "CUBLAS_STATUS_EXECUTION_FAILED", "CUDNN_STATUS_INTERNAL_ERROR",
                  "CUDNN_STATUS_EXECUTION_FAILED")
    )


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class Worker:
    def __init__(self, requests, replies, arena_fd: int):
        self.requests = requests
        self.replies = replies
        self.arena_fd = arena_fd
        self.arena = None
        self.arena_size = 0
        # per request type: count and seconds from the request read to the reply written; kernel time of runs
        self.stats = {"hello": [0, 0.0], "supports": [0, 0.0], "run": [0, 0.0], "kernel_ms": 0.0}

    def reply(self, kind: int, seq: int, payload: dict) -> None:
        self.replies.write(encode_frame(kind, seq, payload))
        self.replies.flush()

    def serve(self) -> int:
        while True:
            frame = read_frame(self.requests)
            if frame is None:
                return 0
            kind, seq, obj = frame
            if kind == SHUTDOWN:
                return 0
            handler = {HELLO: self.hello, SUPPORTS: self.supports, RUN: self.run}.get(kind)
            if handler is None:
                raise ProtocolError(f"unexpected message type 0x{kind:04x}")
            start = time.perf_counter()
            try:
                self.reply(kind | REPLY, seq, handler(obj))
            except Unsupported as e:
                self.reply(ERROR, seq, {"message": str(e) or "unsupported", "unsupported": True})
            except ProtocolError:
                raise
            except Exception as e:  # the kernel's or the case's problem: a verdict, the worker goes on
                fatal = _is_fatal(e)
                self.reply(ERROR, seq, {"message": _one_line(e), "fatal": fatal})
                if fatal:
                    return 1
            finally:
                entry = self.stats[handler.__name__]
                entry[0] += 1
                entry[1] += time.perf_counter() - start

    def hello(self, obj: dict) -> dict:
        if obj.get("protocol") != PROTOCOL or obj.get("version") != VERSION:
            raise ProtocolError(f"hello for {obj.get('protocol')} version {obj.get('version')}")
        ambiguous = api.ambiguous()
        if ambiguous is not None:  # an error reply: driftcheck refuses the backend with this message (exit 2)
            raise ValueError(ambiguous)
        kernels = api.kernels()
        reply = {"protocol": PROTOCOL, "version": VERSION, "ops": sorted(kernels), "info": _info(),
                 # without a supports function every case is taken: save driftcheck the round trip
                 "supports_round_trip": any(k.supports_fn is not None for k in kernels.values())}
        reason = availability()
        reply["available"] = reason is None
        if reason is not None:
            reply["reason"] = reason
        return reply

    def kernel(self, op: str) -> api.Kernel:
        k = api.kernels().get(op)
        if k is None:
            raise ValueError(f"this worker has no kernel for {op} (it has: {', '.join(api.kernels()) or 'none'})")
        return k

    def supports(self, obj: dict) -> dict:
        case, _, _ = parse_case(obj["case"], with_arena=False)
        reason = runner.supports(self.kernel(case.op), case)
        return {"ok": True} if reason is None else {"ok": False, "reason": reason}

    def map_arena(self, size: int) -> None:
        if size > self.arena_size:
            # Arrays of the previous case are gone; the old mapping is dropped with its last reference.
            self.arena = mmap.mmap(self.arena_fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self.arena_size = size

    def run(self, obj: dict) -> dict:
        case, specs, offsets = parse_case(obj["case"], with_arena=True)
        kernel = self.kernel(case.op)
        size = int(obj["arena_size"])
        for i, (spec, off) in enumerate(zip(specs, offsets)):
            if off < 0 or off % 64 or off + spec.nbytes > size:
                raise ValueError(f"storage {i} at arena offset {off} (+{spec.nbytes} bytes) outside the arena of {size}")
        self.map_arena(size)
        hosts = [layout.numpy_storage(self.arena, s, off) for s, off in zip(specs, offsets)]
        arena = np.frombuffer(self.arena, dtype=np.uint8, count=size)
        kernel_ms = runner.run(kernel, case, hosts, arena, offsets)
        self.stats["kernel_ms"] += kernel_ms
        return {"storages": [s.nbytes for s in specs], "kernel_ms": kernel_ms}


def availability():
    """None when the registered kernels can run here, else why not."""
    reason = api.unavailable_reason()
    if reason is not None:
        return reason
    if not api.kernels():
        return "the worker script registered no kernel"
    for k in api.kernels().values():
        if k.tensors != "torch":
            continue
        try:
            import torch
        except ImportError as e:
            return f"torch is not importable ({e})"
        dev = torch.device(k.device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            return f"{k.op} kernel wants device {k.device}: torch.cuda.is_available() is False"
    return None


def _info() -> str:
    parts = [f"python {platform.python_version()}", f"numpy {np.__version__}"]
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        parts.append(f"torch {torch.__version__}")
        devices = {k.device for k in api.kernels().values() if k.tensors == "torch"}
        for d in sorted(devices):
            if d.startswith("cuda") and torch.cuda.is_available():
                parts.append(f"{d} {torch.cuda.get_device_name(torch.device(d))}")
    for mod in ("triton", "vllm"):
        if mod in sys.modules:
            parts.append(f"{mod} {getattr(sys.modules[mod], '__version__', '?')}")
    return ", ".join(parts)


def write_stats(stats: dict) -> None:
    """With DRIFTCHECK_RUNNER_STATS=FILE, appends one JSON line of this worker's request counts and times (how
    gpu-campaigns.sh measures the protocol's overhead per request)."""
    path = os.environ.get("DRIFTCHECK_RUNNER_STATS")
    if not path:
        return
    line = {"backend": os.environ.get("DRIFTCHECK_BACKEND"), "pid": os.getpid(), "kernel_ms": stats["kernel_ms"]}
    for name in ("hello", "supports", "run"):
        line[name] = {"count": stats[name][0], "seconds": stats[name][1]}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def serve() -> None:
    """Serves driftcheck's requests until shutdown; exits the process (0 on shutdown or end of file)."""
    env = os.environ
    if env.get("DRIFTCHECK_PROTOCOL") is None:
        sys.stderr.write(
            f"{sys.argv[0]}: this is a driftcheck worker; run it through driftcheck (a [[backend]] entry in a "
            "backends file, `driftcheck fuzz --backends FILE`), see docs/PROTOCOL.md\n"
        )
        sys.exit(2)
    if env["DRIFTCHECK_PROTOCOL"] != f"{PROTOCOL}/{VERSION}":
        sys.stderr.write(f"driftcheck worker: driftcheck speaks {env['DRIFTCHECK_PROTOCOL']}, "
                         f"this runner {PROTOCOL}/{VERSION}\n")
        sys.exit(2)
    request_fd = int(env["DRIFTCHECK_REQUEST_FD"])
    reply_fd = int(env["DRIFTCHECK_REPLY_FD"])
    if reply_fd == 1 or request_fd == 0:
        # channel = "stdio": keep the channels on fresh descriptors and point stdin at /dev/null and stdout at
        # stderr, so a kernel or library that prints or reads cannot corrupt the frames.
        request_fd, reply_fd = os.dup(request_fd), os.dup(reply_fd)
        sys.stdout.flush()
        os.dup2(2, 1)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    requests = io.open(request_fd, "rb", buffering=1 << 16)
    replies = io.open(reply_fd, "wb", buffering=1 << 16)
    worker = Worker(requests, replies, int(env["DRIFTCHECK_ARENA_FD"]))
    try:
        status = worker.serve()
    except ProtocolError as e:
        sys.stderr.write(f"driftcheck worker: protocol error: {e}\n")
        status = 3
    write_stats(worker.stats)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # skip interpreter teardown (CUDA contexts, Triton caches): nothing is left to flush
