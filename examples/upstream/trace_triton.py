"""Trace why vLLM's real Triton unified attention and its twin cpu.attn.triton_unified differ by more than 1 ulp
(issue #8 item 5; docs/UPSTREAM.md, Results). One command on a GPU machine with torch and triton:

    python3 examples/upstream/trace_triton.py --driftcheck .device-bin/driftcheck --out $OUT

It runs `driftcheck compare <variant> cpu.attn.triton_unified --seed 8 --outputs o` on the cases that differed by
more than 1 ulp in the recorded H200 comparison (docs/results/gpu/h200-e8bf048-upstream-attn.md; --cases to choose
others), for five variants of the real kernel, each a worker that runs examples/upstream/vllm_upstream.py
unchanged on its own copy of the upstream files (made at run time in a temporary folder, never committed):

    real                the upstream files as they are
    exp_div             every tl.exp correctly rounded (exp2 of the same fp32 x * log2(e), in fp64, rounded once:
                        the twin's exp2f) and every fp32 division IEEE (in fp64, rounded once: an innocuous
                        double rounding)
    exp_div_sum         and every tl.sum sequential in index order (the twin's loops)
    exp_div_sum_nofuse  and fp fusion off (TRITON_DEFAULT_FP_FUSION=0) with the L update written as tl.fma: no
                        mul + add contracted but the one the twin models
    twin_order          and both tl.dot sequential in index order (the twin's dot products)

If exp_div brings the cases to <= 1 ulp, ex2.approx / div.full.f32 are the cause; if only a later variant does,
the tree sums, FMA contractions or the tensor-core accumulation order are; a case that stays apart under
twin_order is a structural difference of the twin (tiles, masks, merge) to fix. A probe measures on the device, before the comparisons,
how far tl.exp and `/` are from correctly rounded (ulps of fp32, and how often the bf16 / fp16 rounding of P
changes) and checks each replacement against numpy. Writes trace.md, trace.json and logs.tgz under --out.
"""

import argparse
import json
import os
import pathlib
import re
import runpy
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
RUNNER = HERE / "vllm_upstream.py"
RECORDED = REPO / "docs" / "results" / "gpu" / "h200-e8bf048-upstream-attn.md"
KERNEL = "vllm/v1/attention/ops/triton_unified_attention.py"
HELPERS = "vllm/v1/attention/ops/triton_quant_kv/_helpers.py"
TRACE_MODULE = "vllm/v1/attention/ops/_driftcheck_trace.py"
TWIN = "cpu.attn.triton_unified"
LOG2E = 1.4426950408889634

# The replacements, by group: (file, pattern, replacement, occurrences the pinned files hold). A count that does
# not match stops the run before any kernel compiles: the upstream file is not the one this trace was written for.
PATCHES = {
    "exp": [
        (HELPERS, r"\btl\.exp\(", "dc_exp(", 4),  # softcap (2), P, alpha
        (KERNEL, r"\btl\.exp\(", "dc_exp(", 2),  # reduce_segments' two rescales
    ],
    "div": [
        (HELPERS, r"= (\w+) / (\w+)$", r"= dc_div(\1, \2)", 1),  # softcap: S / c
        (HELPERS, r"return (.+) / (\(.+\))$", r"return dc_div(\1, \2)", 1),  # softcap: c (p1 - p2) / (p1 + p2)
        (KERNEL, r"(\w+) = \1 / (\w+\[:, None\])$", r"\1 = dc_div(\1, \2)", 1),  # 2D epilogue acc / L
        (KERNEL, r"(\w+) / (\w+)\)$", r"dc_div(\1, \2))", 1),  # reduce_segments: acc_sum / expsum
    ],
    "sum": [
        (HELPERS, r"\btl\.sum\((\w+), axis=1\)", r"dc_rowsum(\1)", 1),  # l_j
        (KERNEL, r"\btl\.sum\((\w+)\)", r"dc_vecsum(\1)", 1),  # reduce_segments: expsum
        (KERNEL, r"\btl\.sum\((\w+), axis=0\)", r"dc_colsum(\1)", 1),  # reduce_segments: acc
    ],
    "dot": [
        (KERNEL, r"(\w+) \+= tl\.dot\((.+), (\w+)\)$", r"\1 = dc_pv(\1, \2, \3)", 2),  # acc += P.V
        (KERNEL, r"\btl\.dot\(", "dc_dot(", 2),  # S = scale * Q.K
    ],
    # With fp fusion off (TRITON_DEFAULT_FP_FUSION=0), the one FMA the twin models written out: L * alpha + l_j.
    "fma": [(HELPERS, r"= (\w+) \* (\w+) \+ (\w+)$", r"= tl.fma(\1, \2, \3)", 1)],
}
# What must be gone from the patched files once a group is applied (checked on the result).
GONE = {"exp": r"\btl\.exp\(", "sum": r"\btl\.sum\(", "dot": r"\btl\.dot\("}
IMPORT_AFTER = r"^from vllm\.triton_utils import .*$"
# name: (groups, fp fusion). Without fusion, LLVM contracts no mul + add the source does not write as tl.fma, as
# the twin (compiled without contraction, its one std::fma where the kernel's L update is) computes.
VARIANTS = {
    "real": ((), True),
    "exp_div": (("exp", "div"), True),
    "exp_div_sum": (("exp", "div", "sum"), True),
    "exp_div_sum_nofuse": (("exp", "div", "sum", "fma"), False),
    "twin_order": (("exp", "div", "sum", "fma", "dot"), False),
}

# Correctly rounded exp2 of the fp32 product, two ways to reach fp64 exp2 in Triton: the probe takes the first that
# compiles and matches numpy.
EXP_IMPLS = {
    "libdevice.exp2(fp64)": "libdevice.exp2(t.to(tl.float64)).to(tl.float32)",
    "tl.exp2(fp64)": "tl.exp2(t.to(tl.float64)).to(tl.float32)",
}

# The functions the patched files call. Sequential sums extract one column at a time with a masked tl.sum (one
# value and zeros: exact), so the order is the twin's: index 0 first, each addition rounded.
TRACE_SOURCE = '''"""driftcheck trace_triton.py: correctly rounded exp, IEEE division and sequential sums (generated)."""
import triton
import triton.language as tl

try:
    from triton.language.extra import libdevice
except ImportError:  # older layouts
    from triton.language.extra.cuda import libdevice

LOG2E = tl.constexpr({log2e!r})  # a global a jit function reads must be a constexpr


@triton.jit
def dc_exp(x):
    t = x * LOG2E  # fp32, as tl.exp's lowering forms it before ex2.approx
    return {exp_expr}


@triton.jit
def dc_div(a, b):
    return (a.to(tl.float64) / b.to(tl.float64)).to(tl.float32)


@triton.jit
def dc_rowsum(x):
    cols = tl.arange(0, x.shape[1])
    s = tl.sum(tl.where(cols[None, :] == 0, x, 0.0), axis=1)
    for i in tl.range(1, x.shape[1]):
        s = s + tl.sum(tl.where(cols[None, :] == i, x, 0.0), axis=1)
    return s


@triton.jit
def dc_colsum(x):
    rows = tl.arange(0, x.shape[0])
    s = tl.sum(tl.where(rows[:, None] == 0, x, 0.0), axis=0)
    for i in tl.range(1, x.shape[0]):
        s = s + tl.sum(tl.where(rows[:, None] == i, x, 0.0), axis=0)
    return s


@triton.jit
def dc_vecsum(x):
    idx = tl.arange(0, x.shape[0])
    s = tl.sum(tl.where(idx == 0, x, 0.0))
    for i in tl.range(1, x.shape[0]):
        s = s + tl.sum(tl.where(idx == i, x, 0.0))
    return s


@triton.jit
def dc_dot(a, b):
    ka = tl.arange(0, a.shape[1])
    kb = tl.arange(0, b.shape[0])
    out = tl.zeros([a.shape[0], b.shape[1]], dtype=tl.float32)
    for k in tl.range(0, a.shape[1]):
        ak = tl.sum(tl.where(ka[None, :] == k, a.to(tl.float32), 0.0), axis=1)
        bk = tl.sum(tl.where(kb[:, None] == k, b.to(tl.float32), 0.0), axis=0)
        out = out + ak[:, None] * bk[None, :]
    return out


@triton.jit
def dc_pv(acc, p, v):
    kp = tl.arange(0, p.shape[1])
    kv = tl.arange(0, v.shape[0])
    for t in tl.range(0, p.shape[1]):
        pt = tl.sum(tl.where(kp[None, :] == t, p.to(tl.float32), 0.0), axis=1)
        vt = tl.sum(tl.where(kv[:, None] == t, v.to(tl.float32), 0.0), axis=0)
        acc = acc + pt[:, None] * vt[None, :]
    return acc


@triton.jit
def dc_probe_elementwise(x_ptr, y_ptr, e_ptr, ep_ptr, d_ptr, dp_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    y = tl.load(y_ptr + offs, mask=m, other=1.0)
    tl.store(e_ptr + offs, tl.exp(x), mask=m)
    tl.store(ep_ptr + offs, dc_exp(x), mask=m)
    tl.store(d_ptr + offs, x / y, mask=m)
    tl.store(dp_ptr + offs, dc_div(x, y), mask=m)


@triton.jit
def dc_probe_sums(a_ptr, b_ptr, acc_ptr, dot_ptr, pv_ptr, row_ptr, col_ptr, vec_ptr,
                  M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    rm, rk, rn = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    acc = tl.load(acc_ptr + rm[:, None] * N + rn[None, :])
    tl.store(dot_ptr + rm[:, None] * N + rn[None, :], dc_dot(a, b))
    tl.store(pv_ptr + rm[:, None] * N + rn[None, :], dc_pv(acc, a, b))
    af = a.to(tl.float32)
    rows = dc_rowsum(af)
    tl.store(row_ptr + rm, rows)
    tl.store(col_ptr + rk, dc_colsum(af))
    tl.store(vec_ptr, dc_vecsum(rows))
'''


class PatchError(Exception):
    pass


# ---- cases, patching (CPU)


def traced_cases(report):
    """The case indices a recorded `driftcheck compare` report lists as more than 1 ulp apart."""
    text = pathlib.Path(report).read_text()
    return sorted({int(m) for m in re.findall(r"^- case (\d+) \([^)]*\) (?:2_4_ulps|over_4_ulps):", text, re.M)})


def trace_import(names):
    return "from vllm.v1.attention.ops._driftcheck_trace import " + ", ".join(sorted(names))


def patch_file(text, rel, groups):
    """`text` (the file `rel`) with the groups' replacements; raises PatchError where a count differs."""
    used = set()
    for group in groups:
        for file, pattern, repl, count in PATCHES[group]:
            if file != rel:
                continue
            text, n = re.subn(pattern, repl, text, flags=re.M)
            if n != count:
                raise PatchError(f"{rel}: {group}: /{pattern}/ matched {n} times, expected {count}")
            used.update(re.findall(r"\b(dc_\w+)\(", repl))
    for group in groups:
        files = {p[0] for p in PATCHES[group]}
        if group in GONE and rel in files and re.search(GONE[group], text):
            left = [ln.strip() for ln in text.splitlines() if re.search(GONE[group], ln)]
            raise PatchError(f"{rel}: {group}: still calls {left}")
    if used:
        text, n = re.subn(IMPORT_AFTER, lambda m: m.group(0) + "\n" + trace_import(used), text, count=1, flags=re.M)
        if n != 1:
            raise PatchError(f"{rel}: no `from vllm.triton_utils import` line to put the trace import after")
    return text


def make_variant(upstream, dest, groups, exp_expr):
    """A copy of upstream's vllm/ tree under dest with the groups applied; returns dest (a DRIFTCHECK_UPSTREAM)."""
    shutil.copytree(pathlib.Path(upstream) / "vllm", pathlib.Path(dest) / "vllm")
    for rel in (KERNEL, HELPERS):
        path = pathlib.Path(dest) / rel
        path.write_text(patch_file(path.read_text(), rel, groups))
    (pathlib.Path(dest) / TRACE_MODULE).write_text(trace_source(exp_expr))
    return pathlib.Path(dest)


def trace_source(exp_expr):
    return TRACE_SOURCE.format(log2e=LOG2E, exp_expr=exp_expr)


# ---- ulps and roundings (numpy)


def ordered_f32(x):
    """fp32 bits mapped to integers that count ulps across zero (+0 and -0 both 0)."""
    i = np.asarray(x, dtype=np.float32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def ulps_f32(a, b):
    """|a - b| in fp32 ulps (steps between representable values); NaN where either is NaN."""
    d = np.abs(ordered_f32(a) - ordered_f32(b)).astype(np.float64)
    return np.where(np.isnan(a) | np.isnan(b), np.nan, d)


def round_to(x, fmt):
    """fp32 values rounded to nearest even in bf16 or fp16, as fp32."""
    x = np.asarray(x, dtype=np.float32)
    if fmt == "fp16":
        return x.astype(np.float16).astype(np.float32)
    i = np.atleast_1d(x).view(np.uint32).astype(np.uint64)
    half, s16 = np.uint64(0x7FFF), np.uint64(16)
    r = (((i + half + ((i >> s16) & np.uint64(1))) >> s16) << s16).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, r.reshape(x.shape))


def exp_reference(x):
    """The twin's exp: exp2 of the fp32 product x * log2(e), correctly rounded to fp32 (via fp64)."""
    t = np.asarray(x, dtype=np.float32) * np.float32(LOG2E)
    with np.errstate(over="ignore"):
        return np.exp2(t.astype(np.float64)).astype(np.float32)


def div_reference(a, b):
    """IEEE fp32 a / b: the fp64 quotient of fp32 values rounds to the fp32 one (2 * 24 + 2 <= 53)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.asarray(a, np.float64) / np.asarray(b, np.float64)).astype(np.float32)


def differing(got, ref):
    """Summary of got vs ref (fp32): share of elements whose bits differ, max ulps, and how often rounding both
    to bf16 / fp16 (P before P.V) gives different values."""
    u = ulps_f32(got, ref)
    out = {"n": int(got.size), "differ": int(np.sum(u > 0)), "max_ulps": float(np.nanmax(u)) if u.size else 0.0}
    for fmt in ("bf16", "fp16"):
        out[f"{fmt}_flips"] = int(np.sum(round_to(got, fmt) != round_to(ref, fmt)))
    return out


def sequential_refs(a, b, acc):
    """numpy in the twin's order: dot (k ascending from 0), acc + P.V (keys ascending), row / column / vector
    sums (index ascending), each operation rounded to fp32."""
    a, b, acc = (np.asarray(t, np.float32) for t in (a, b, acc))
    dot = np.zeros((a.shape[0], b.shape[1]), np.float32)
    pv = acc.copy()
    for k in range(a.shape[1]):
        dot = dot + a[:, k, None] * b[None, k, :]
        pv = pv + a[:, k, None] * b[None, k, :]
    row = np.zeros(a.shape[0], np.float32)
    for k in range(a.shape[1]):
        row = row + a[:, k]
    col = np.zeros(a.shape[1], np.float32)
    for m in range(a.shape[0]):
        col = col + a[m, :]
    vec = np.zeros(1, np.float32)
    for v in row:
        vec = vec + v
    return {"dot": dot, "pv": pv, "row": row, "col": col, "vec": vec}


# ---- the device (torch, triton)


def load_trace_module(path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_driftcheck_{pathlib.Path(path).stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def probe(workdir):
    """On the device: tl.exp and `/` against correctly rounded results, and the replacements against numpy.
    Returns (the exp expression to use, a dict of measurements)."""
    os.environ.setdefault("TRITON_CACHE_DIR", str(pathlib.Path(workdir) / "cache-probe"))
    import torch

    rng = np.random.default_rng(8)
    # P's exponents: s - m in [-30, 0] (and some beyond), and softcap quotients.
    x = np.concatenate([rng.uniform(-30, 0, 1 << 20), rng.uniform(-100, 90, 1 << 16),
                        [0.0, -0.0, -87.3, -103.0, 88.7, 89.0, -np.inf, np.inf]]).astype(np.float32)
    y = rng.uniform(0.5, 3000, x.size).astype(np.float32)
    result = {"exp_impls": {}}
    chosen = None
    for name, expr in EXP_IMPLS.items():
        path = pathlib.Path(workdir) / f"probe_{len(result['exp_impls'])}.py"
        path.write_text(trace_source(expr))
        try:
            mod = load_trace_module(path)
            xt, yt = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
            outs = [torch.empty_like(xt) for _ in range(4)]
            block = 1024
            mod.dc_probe_elementwise[(triton_cdiv(x.size, block),)](xt, yt, *outs, x.size, BLOCK=block)
            e, ep, d, dp = (o.cpu().numpy() for o in outs)
        except Exception as err:  # a compile error of this spelling: try the next
            result["exp_impls"][name] = {"error": f"{type(err).__name__}: {err}"[:400]}
            continue
        er, dr = exp_reference(x), div_reference(x, y)
        result["exp_impls"][name] = {"precise_vs_cr": differing(ep, er)}
        result["tl_exp_vs_cr"] = differing(e, er)
        result["div_vs_ieee"] = differing(d, dr)
        result["dc_div_vs_ieee"] = differing(dp, dr)
        if chosen is None and result["exp_impls"][name]["precise_vs_cr"]["differ"] == 0:
            chosen = (name, expr, mod)
    if chosen is None:
        return None, result
    result["exp_impl"] = chosen[0]
    result["sums"] = probe_sums(chosen[2])
    return chosen[1], result


def probe_sums(mod):
    """dc_dot, dc_pv, dc_rowsum, dc_colsum, dc_vecsum on bf16 operands against numpy's sequential loops."""
    import torch

    rng = np.random.default_rng(9)
    m, k, n = 16, 64, 32
    a = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32)).to(torch.bfloat16)
    b = torch.from_numpy(rng.standard_normal((k, n)).astype(np.float32)).to(torch.bfloat16)
    acc = torch.from_numpy(rng.standard_normal((m, n)).astype(np.float32))
    a_dev, b_dev, acc_dev = a.cuda(), b.cuda(), acc.cuda()
    outs = {"dot": (m, n), "pv": (m, n), "row": (m,), "col": (k,), "vec": (1,)}
    dev = {key: torch.empty(shape, dtype=torch.float32, device="cuda") for key, shape in outs.items()}
    try:
        mod.dc_probe_sums[(1,)](a_dev, b_dev, acc_dev, *dev.values(), M=m, K=k, N=n)
    except Exception as err:
        return {"error": f"{type(err).__name__}: {err}"[:400]}
    refs = sequential_refs(a.float().numpy(), b.float().numpy(), acc.numpy())
    got = {key: t.cpu().numpy() for key, t in dev.items()}
    # Elements whose bits differ from numpy's sequential loops (0 everywhere: the replacement sums in order).
    return {key: int(np.sum(ulps_f32(got[key], refs[key]) > 0)) for key in refs}


def triton_cdiv(a, b):
    return (a + b - 1) // b


def ptx_counts(cache):
    """Instructions of interest in the PTX Triton cached for each kernel of a variant."""
    kinds = ["ex2.approx.f32", "ex2.approx.ftz.f32", "div.full.f32", "div.rn.f32", "div.rn.f64", "fma.rn.f32",
             "mma.sync", "wgmma"]
    out = {}
    for path in sorted(pathlib.Path(cache).rglob("*.ptx")):
        name = path.stem
        text = path.read_text(errors="replace")
        row = out.setdefault(name, {k: 0 for k in kinds} | {"variants": 0})
        row["variants"] += 1
        for k in kinds:
            row[k] += text.count(k)
    return out


# ---- the comparisons


CASES_ENV = "DRIFTCHECK_TRACE_CASES"  # the cases a variant's worker runs (it declines the others)


def backends_file(path, variants):
    """A backends file with one external backend per variant: vllm_upstream.py over that variant's folder."""
    lines = ['format = "driftcheck.backends"', "version = 1", ""]
    for name, folder in variants.items():
        env = {"PYTHONPATH": str(REPO / "python"), "DRIFTCHECK_UPSTREAM": str(folder),
               "TRITON_CACHE_DIR": str(pathlib.Path(path).parent / f"cache-{name}"),
               "TRITON_DEFAULT_FP_FUSION": "1" if VARIANTS[name][1] else "0"}
        command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--serve"]
        lines += [
            "[[backend]]",
            f'name = "trace.{name}"',
            'op = "attention"',
            f'description = "vLLM Triton unified attention, trace variant {name}"',
            f"command = {json.dumps(command)}",
            "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }",
            "timeout_s = 150",
            f'numerics = "like:{TWIN}"',
            'supports = { non_causal = false, kv_dtypes = ["bf16", "fp16", "fp8_e4m3fn", "fp8_e5m2"] }',
            "",
        ]
    pathlib.Path(path).write_text("\n".join(lines))


def chunks(cases, n):
    """cases dealt round-robin into at most n non-empty lists (consecutive cases, often alike, spread)."""
    return [c for c in (cases[i::n] for i in range(n)) if c]


def run_compares(driftcheck, toml, names, seed, cases, parts, workdir, limit):
    """`driftcheck compare ext.trace.<name> TWIN` for every variant and every part of the cases at once (a part
    that runs out of time loses only its own cases). Returns {name: [{rc, seconds, cases, jsonl}, ...]}."""
    env = dict(os.environ)
    lib = pathlib.Path(driftcheck).resolve().parent / "lib"
    if lib.is_dir():
        env["LD_LIBRARY_PATH"] = f"{lib}:{env.get('LD_LIBRARY_PATH', '')}"
    procs = []
    for name in names:
        for i, part in enumerate(chunks(cases, parts)):
            stem = pathlib.Path(workdir) / f"compare-{name}-{i}"
            cmd = [str(driftcheck), "compare", f"ext.trace.{name}", TWIN, "--backends", str(toml), "--cases",
                   str(max(part) + 1), "--seed", str(seed), "--outputs", "o", "--json", f"{stem}.jsonl"]
            with open(f"{stem}.md", "w") as md, open(f"{stem}.stderr", "w") as err:
                # A session of its own: at the deadline the compare and its worker stop together.
                p = subprocess.Popen(cmd, stdout=md, stderr=err, env=env | {CASES_ENV: ",".join(map(str, part))},
                                     start_new_session=True)
            procs.append((name, part, p, f"{stem}.jsonl", time.time()))
    out = {name: [] for name in names}
    deadline = time.time() + limit
    for name, part, p, jsonl, t0 in procs:
        try:
            rc = p.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = "timeout"
        out[name].append({"rc": rc, "seconds": round(time.time() - t0, 1), "cases": part, "jsonl": jsonl})
    return out


def read_parts(parts):
    """The compare lines of each part's own cases (a part declines the others; one killed at its limit wrote
    nothing, and its stderr's last line says why)."""
    rows, notes = {}, []
    for part in parts:
        path = pathlib.Path(part["jsonl"])
        if path.exists():
            for line in path.read_text().splitlines():
                r = json.loads(line)
                if r["case"] in part["cases"]:
                    rows[r["case"]] = r
        if part["rc"] != 0:
            err = pathlib.Path(str(path)[: -len(".jsonl")] + ".stderr")
            tail = err.read_text(errors="replace").strip().splitlines()[-1:] if err.exists() else []
            notes.append(f"cases {part['cases']}: exit {part['rc']} {' '.join(tail)[:300]}")
    return rows, notes


# ---- the summary


def verdict(per_variant, cases):
    """Which variant first brings every traced case to <= 1 ulp of the twin (or none). Cases the real kernel
    declines (non-causal, unsupported formats: --cases over a whole stream) are no comparison and left out."""
    real = per_variant.get("real", {})
    if not all(c in real and real[c]["agreement"] != "error" for c in cases):
        return None, "incomplete: the real kernel was not compared on every traced case (see the table)"
    run = [c for c in cases if real[c]["agreement"] != "unsupported"]

    def within(name):
        rows = per_variant.get(name, {})
        return all(c in rows and rows[c]["agreement"] in WITHIN for c in run)

    for name, text in [("real", "the real kernel is already within 1 ulp of the twin on every traced case"),
                       ("exp_div", "ex2.approx (tl.exp) and div.full.f32 (`/`): correctly rounded, every traced "
                                   "case is within 1 ulp of the twin"),
                       ("exp_div_sum", "ex2.approx/div.full.f32 and Triton's tree sums (tl.sum): with both made "
                                       "the twin's, every traced case is within 1 ulp"),
                       ("exp_div_sum_nofuse", "ex2.approx/div.full.f32, the tree sums and LLVM's mul + add "
                                              "contractions beyond the L update: without them every traced case is "
                                              "within 1 ulp"),
                       ("twin_order", "only with the dots in the twin's order as well (tensor-core accumulation "
                                      "order of tl.dot) is every traced case within 1 ulp")]:
        if within(name):
            return name, text
    return None, ("no variant brings every traced case within 1 ulp: the cases still apart under twin_order differ "
                  "in structure (tile ranges, masks, the 3D merge) or in an FMA contraction the twin does not model")


def cell(row):
    if row is None:
        return "missing"
    if row["agreement"] in ("error", "unsupported"):
        return f"{row['agreement']}: {row['worst'][:120]}".replace("|", "/")
    u = row["max_ulps"]
    u = "inf" if u == "inf" else f"{u:.3g}"
    return f"{row['agreement']} ({u}; {row['identical']}/{row['elements']})"


WITHIN = ("identical", "1_ulp")
APART = ("2_4_ulps", "over_4_ulps", "non_finite")


def summary(cases, per_variant, probe_result, ptx, header, notes):
    names = list(per_variant)
    lines = [f"# trace_triton: vLLM Triton unified attention vs {TWIN}, by variant", "", header, "",
             "Cell: agreement (max ulps of the output dtype; identical elements / elements) of "
             f"`driftcheck compare ext.trace.<variant> {TWIN} --outputs o`.", "",
             "| case | class | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for c in cases:
        first = next((per_variant[n][c] for n in names if c in per_variant[n]), None)
        cls = first["shape_class"] if first else "?"
        lines.append(f"| {c} | {cls} | " + " | ".join(cell(per_variant[n].get(c)) for n in names) + " |")
    lines += ["", "| variant | within 1 ulp | beyond 1 ulp | not compared (error, unsupported, missing) | "
              "identical cases | identical elements |", "|---|---:|---:|---:|---:|---:|"]
    for n in names:
        rows = per_variant[n]
        ident = sum(r["identical"] for r in rows.values())
        elems = sum(r["elements"] for r in rows.values())
        within = sum(r["agreement"] in WITHIN for r in rows.values())
        apart = sum(r["agreement"] in APART for r in rows.values())
        share = f"{ident}/{elems}" + (f" ({100.0 * ident / elems:.2f}%)" if elems else "")
        idc = sum(r["agreement"] == "identical" for r in rows.values())
        lines.append(f"| {n} | {within} | {apart} | {len(cases) - within - apart} | {idc} | {share} |")
    name, text = verdict(per_variant, cases)
    lines += ["", f"**Verdict:** {text}.", "", "Worst element of each case beyond 1 ulp (variant vs twin):", ""]
    for n in names:
        for c, r in sorted(per_variant[n].items()):
            if r["agreement"] in APART:
                lines.append(f"- {n} case {c}: {r['worst']}")
    lines.append("")
    if notes:
        lines += ["Compare runs that did not exit 0:", ""] + [f"- {n}" for n in notes] + [""]
    lines += ["## Probe (fp32, on the device)", "", "```", json.dumps(probe_result, indent=1), "```", "",
              "## PTX instruction counts per variant", "", "```", json.dumps(ptx, indent=1), "```", ""]
    return "\n".join(lines), name


# ---- modes


def serve():
    """The worker of one variant: vllm_upstream.py as it is, declining the cases not traced (so a compare of N
    cases runs only these; the twin is not run on a declined case)."""
    import driftcheck

    wanted = {int(c) for c in os.environ.get(CASES_ENV, "").split(",") if c}
    register = driftcheck.attention

    def attention(fn, supports=None, **kw):
        def traced(case):
            if case.index not in wanted:
                return f"case {case.index} is not traced"
            return supports(case) if supports else None

        return register(fn, supports=traced, **kw)

    driftcheck.attention = attention
    sys.argv = [str(RUNNER), "--op", "attention"]
    runpy.run_path(str(RUNNER), run_name="__main__")


def trace(args):
    cases = args.cases or traced_cases(args.recorded)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="trace_triton_"))
    t0 = time.time()
    # Patch first (CPU): a count that differs stops here, before anything compiles.
    for name, (groups, _) in VARIANTS.items():
        patch_file((pathlib.Path(args.upstream) / KERNEL).read_text(), KERNEL, groups)
        patch_file((pathlib.Path(args.upstream) / HELPERS).read_text(), HELPERS, groups)
    try:
        exp_expr, probe_result = probe(work)
    except Exception as err:  # no device, or torch/triton unusable: the comparisons still say why, case by case
        exp_expr, probe_result = None, {"error": f"{type(err).__name__}: {err}"[:400]}
    if exp_expr is None:
        exp_expr = next(iter(EXP_IMPLS.values()))
        probe_result["warning"] = "no spelling of a correctly rounded exp matched numpy; the first one is used"
    names = [n for n in VARIANTS if n in args.variants]
    folders = {}
    for name in names:
        folders[name] = (pathlib.Path(args.upstream).resolve() if name == "real" else
                         make_variant(args.upstream, work / name, VARIANTS[name][0], exp_expr))
    toml = work / "trace.toml"
    backends_file(toml, folders)
    compares = run_compares(args.driftcheck, toml, names, args.seed, cases, args.parts, work,
                            max(30.0, args.seconds - (time.time() - t0)))
    read = {n: read_parts(compares[n]) for n in names}
    per_variant = {n: read[n][0] for n in names}
    notes = [f"{n}: {note}" for n in names for note in read[n][1]]
    ptx = {n: ptx_counts(work / f"cache-{n}") for n in names}
    header = (f"Seed {args.seed}, cases {cases}; upstream {args.upstream}; exp via {probe_result.get('exp_impl')}; "
              f"driftcheck {args.driftcheck}; {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}; "
              f"{round(time.time() - t0)} s.")
    md, name = summary(cases, per_variant, probe_result, ptx, header, notes)
    (out / "trace.md").write_text(md)
    (out / "trace.json").write_text(json.dumps({
        "seed": args.seed, "cases": cases, "verdict": name, "probe": probe_result, "ptx": ptx,
        "compares": {n: [{k: v for k, v in part.items() if k != "jsonl"} for part in parts]
                     for n, parts in compares.items()},
        "per_case": {n: {str(c): r for c, r in rows.items()} for n, rows in per_variant.items()}}, indent=1))
    with tarfile.open(out / "logs.tgz", "w:gz") as tar:
        for path in sorted(work.glob("compare-*")) + [toml]:
            tar.add(path, arcname=path.name)
        for name in names:
            if name != "real":
                for rel in (KERNEL, HELPERS, TRACE_MODULE):
                    tar.add(work / name / rel, arcname=f"{name}/{pathlib.Path(rel).name}")
    print(md)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--driftcheck", default=str(REPO / ".device-bin" / "driftcheck"))
    ap.add_argument("--out", default="trace-out")
    ap.add_argument("--upstream", default=os.environ.get("DRIFTCHECK_UPSTREAM", str(REPO / "upstream" / "vllm")))
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--cases", type=lambda s: sorted({int(x) for x in s.split(",") if x}),
                    help="case indices (default: the >1-ulp cases of --recorded)")
    ap.add_argument("--recorded", default=str(RECORDED), help="a compare report whose >1-ulp cases to trace")
    ap.add_argument("--variants", type=lambda s: s.split(","), default=list(VARIANTS))
    ap.add_argument("--seconds", type=float, default=200, help="wall-clock budget from the start to the end of "
                    "the comparisons (parts still running then are stopped, their cases reported missing)")
    ap.add_argument("--parts", type=int, default=3, help="compare processes per variant, run at once")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        return serve()
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variants {sorted(unknown)}; known: {list(VARIANTS)}")
    return trace(args)


if __name__ == "__main__":
    sys.exit(main())
