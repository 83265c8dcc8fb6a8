"""Per-call profile of the real decoder (runtime/llama.py's `Llama`), and the op samples it gives
the host runtime's fit: the runtime's own calls, at the shapes and in the order real prefill and
decode steps make them, not isolated microbenchmarks.

    times = profile_forward(model, tokens)      # one forward, each kernel call timed
    samples = call_samples(config, "decode", 1, 513, times)   # OpSamples for calibrate/fit.py

`profile_forward` wraps, for the duration of one forward, every kernel `Llama.forward` calls
(the module-level functions it imports, each block's fused Linears and KV-cache store, the
output head) with a timer, runs the forward, and returns the seconds spent per call kind
(CALL_KINDS) summed over the layers, with how many calls each kind made. No copy of the forward:
the calls timed are the ones generation makes.

`call_samples` counts each kind's work as the op graph counts it (model/graph.py, unfused: the
ops whose names CALL_OPS lists; a decode step's one attention call also covers rope and the KV
store, which it runs), so a fitted rate means what the cost model divides by: matrix
flops in the matmul's compute dtype on the host (device/soc.py `compute_dtype`, "weight"),
a decode step's in the one-row classes ("gemv_<dtype>", "attention_decode"), a prompt's
attention in "attention", everything else "vector" (device/soc.py `op_class`); bytes as the
graph moves them.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from contextlib import contextmanager

from harmony_ref.calibrate.fit import OpSample

# The kernel call kinds of one Llama forward, and the unfused graph ops each covers
# (patterns on the op names of model/graph.py).
CALL_OPS = {
    "embed": (r"^model\.embed_tokens$", r"^model\.layers\.0\.input_layernorm$"),
    "qkv": (r"\.(q|k|v)_proj(\.bias)?$",),
    "rope": (r"\.self_attn\.rope$",),
    "kv_store": (r"\.self_attn\.kv_write$",),
    "attention": (r"\.self_attn\.(attn_qk|softmax|attn_pv)$",),
    "o": (r"\.o_proj(\.bias)?$",),
    "add_norm": (
        r"\.residual_(attn|mlp)$",
        r"\.post_attention_layernorm$",
        r"^model\.layers\.([1-9]\d*)\.input_layernorm$",
        r"^model\.norm$",
    ),
    "gate_up": (r"\.(gate|up)_proj$",),
    "silu_gate": (r"\.mlp\.(act_fn|gate_mul)$",),
    "down": (r"\.down_proj$",),
    "lm_head": (r"^lm_head$",),
}
CALL_KINDS = tuple(CALL_OPS)
_MODULE_FUNCS = {  # runtime/llama.py's names; `_par`: the same op on prefill rows
    "rms_norm_rows": "embed",
    "rms_norm_rows_par": "embed",
    "rope_rows": "rope",
    "rope_rows_par": "rope",
    "decode_attention_unchecked": "attention",
    "decode_step_attention": "attention",  # a decode step's rope, KV store and attention
    "prefill_attention_unchecked": "attention",
    "add_rms_norm_rows": "add_norm",
    "add_rms_norm_rows_par": "add_norm",
    "silu_gate_rows": "silu_gate",
    "silu_gate_rows_par": "silu_gate",
}
_BLOCK_LINEARS = {"qkv": "qkv", "o": "o", "gate_up": "gate_up", "down": "down"}


@contextmanager
def _timed_calls(model, acc: dict, calls: dict):
    """Every kernel call of `model.forward` timed into acc[kind] (seconds) and calls[kind]."""
    import harmony_ref.runtime.llama as llama

    def wrap(fn, kind):
        def timed(*args, **kw):
            t0 = time.perf_counter()
            out = fn(*args, **kw)
            acc[kind] += time.perf_counter() - t0
            calls[kind] += 1
            return out

        return timed

    saved_funcs = {name: getattr(llama, name) for name in _MODULE_FUNCS}
    saved_attrs = []
    try:
        for name, kind in _MODULE_FUNCS.items():
            setattr(llama, name, wrap(saved_funcs[name], kind))
        for b in model.blocks:
            for attr, kind in _BLOCK_LINEARS.items():
                saved_attrs.append((b, attr, getattr(b, attr)))
                setattr(b, attr, wrap(getattr(b, attr), kind))
            saved_attrs.append((b.cache, "store", b.cache.store))
            b.cache.store = wrap(b.cache.store, "kv_store")
        saved_attrs.append((model, "lm_head", model.lm_head))
        model.lm_head = wrap(model.lm_head, "lm_head")
        yield
    finally:
        for name, fn in saved_funcs.items():
            setattr(llama, name, fn)
        for obj, attr, value in reversed(saved_attrs):
            if attr == "store":
                del obj.store  # back to the class's bound method
            else:
                setattr(obj, attr, value)


def profile_forward(model, tokens) -> dict:
    """{"s": {kind: seconds}, "calls": {kind: n}, "forward_s": the whole forward} of one
    `model.forward(tokens)` (prefill when len(tokens) > 1, else a decode step)."""
    import numpy as np

    acc: dict = defaultdict(float)
    calls: dict = defaultdict(int)
    tokens = np.asarray(tokens, dtype=np.int64)
    with _timed_calls(model, acc, calls):
        t0 = time.perf_counter()
        model.forward(tokens)
        whole = time.perf_counter() - t0
    return {"s": dict(acc), "calls": dict(calls), "forward_s": whole}


def _kind_of(name: str) -> str | None:
    for kind, patterns in CALL_OPS.items():
        if any(re.search(p, name) for p in patterns):
            return kind
    return None


def call_samples(
    config,
    phase: str,
    tokens: int,
    context: int,
    seconds: dict,
    calls: dict,
    tag: str = "",
    holdout: bool = False,
) -> list[OpSample]:
    """One OpSample per call kind of one forward: its measured seconds (summed over layers)
    against the work of the unfused graph ops it covers (see the module docstring)."""
    from harmony_ref.device.cost import dram_bytes
    from harmony_ref.device.soc import HOST_WEIGHT_ONLY_COMPUTE, compute_dtype
    from harmony_ref.model.graph import build_graph

    g = build_graph(
        config.spec,
        config.policy,
        phase,
        tokens=tokens,
        context=context,
        fused=False,
        kv_dtype=config.kv_dtype,
    )
    work: dict = defaultdict(lambda: {"flops": 0.0, "vflops": 0.0, "bytes": 0.0, "dtype": None})
    for op in g.ops:
        kind = _kind_of(op.name)
        if kind is None:
            raise ValueError(f"decoder profile: graph op {op.name!r} is covered by no call kind")
        w = work[kind]
        w["flops"] += op.flops
        w["vflops"] += op.vector_flops
        w["bytes"] += float(dram_bytes(op.streamed_bytes, op.other_bytes, 0.0, 1.0))
        if op.flops and op.projection:
            w["dtype"] = compute_dtype(op.dtype, op.act_dtype, HOST_WEIGHT_ONLY_COMPUTE)
    if tokens == 1 and "attention" in seconds:
        # A decode step over an fp16 cache rotates, stores and attends in one call
        # (kernels/attention.py decode_step_attention): its sample carries their work.
        for part in ("rope", "kv_store"):
            if part not in seconds and part in work:
                w, a = work.pop(part), work["attention"]
                for key in ("flops", "vflops", "bytes"):
                    a[key] += w[key]
    out = []
    for call, s in seconds.items():
        if call not in work or s <= 0:
            continue
        w = work[call]
        one_row = tokens == 1  # a decode step: its GEMVs and one-row attention (soc.py op_class)
        if call == "attention":
            cls, ops, vec = "attention_decode" if one_row else "attention", w["flops"], w["vflops"]
        elif w["dtype"] is not None:
            cls = f"gemv_{w['dtype']}" if one_row else w["dtype"]
            ops, vec = w["flops"], w["vflops"]
        else:
            cls, ops, vec = "vector", w["vflops"], 0.0
        out.append(
            OpSample(
                f"{tag}{phase}@{context}:{call}",
                cls,
                ops,
                w["bytes"],
                int(calls.get(call, 1)),
                float(s),
                holdout=holdout,
                vector_ops=vec,
            )
        )
    return out
