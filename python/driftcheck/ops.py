"""The ops driftcheck judges: tensor names, which are written, and parameters (reference/.../case.hpp)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class OpSpec:
    name: str
    inputs: tuple  # tensor names read (optional ones included)
    outputs: tuple  # tensor names written; in-place tensors appear in both
    optional: tuple  # tensors present only in some cases
    params: dict  # parameter name -> Python type, with case.hpp's defaults documented there


OPS = {
    "rmsnorm": OpSpec(
        "rmsnorm",
        inputs=("x", "w", "residual"),
        outputs=("y", "residual"),
        optional=("residual",),
        params={"eps": float, "weight_mode": str, "residual": bool},
    ),
    "concat": OpSpec("concat", inputs=("a", "b"), outputs=("out",), optional=(), params={}),
    "dual_rmsnorm_cat": OpSpec(
        "dual_rmsnorm_cat",
        inputs=("e", "h", "w_e", "w_h"),
        outputs=("out",),
        optional=(),
        params={"eps": float, "weight_mode": str},
    ),
    "attention": OpSpec(
        "attention",
        inputs=(
            "q", "k_cache", "v_cache", "block_table", "seq_lens", "query_start_loc", "sinks", "k_new", "v_new",
        ),
        outputs=("o", "lse"),
        # k_new / v_new reach only workers whose numerics declare new_kv = "inputs" (docs/PROTOCOL.md).
        optional=("sinks", "k_new", "v_new"),
        params={
            "num_q_heads": int,
            "num_kv_heads": int,
            "head_dim": int,
            "block_size": int,
            "scale": float,
            "causal": bool,
            "window": int,
            "softcap": float,
            "k_scale": float,
            "v_scale": float,
            "has_sinks": bool,
        },
    ),
}

WEIGHT_MODES = ("plain", "one_plus")


def op_spec(name: str) -> OpSpec:
    try:
        return OPS[name]
    except KeyError:
        raise ValueError(f"unknown op '{name}' (known: {', '.join(OPS)})") from None
