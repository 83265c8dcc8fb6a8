"""Sliding-window layers (Gemma 3's local attention) in the device model: the spec's fields and
their checks, the op graph's keys per layer, the KV cache the memory model counts (the runtime's
own ring, byte for byte), and decode costs integrated past the point where the window fills."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harmony_ref.config import RunConfig
from harmony_ref.device.cost import decode_step_times, graph_cost
from harmony_ref.device.memory import kv_cache_bytes
from harmony_ref.device.runtime import load_profile
from harmony_ref.device.threads import cpu_path
from harmony_ref.model.graph import build_graph, kv_bytes_per_token_per_layer
from harmony_ref.model.spec import get_spec, spec_from_dict
from harmony_ref.quant.policy import load_policy

WINDOW = 512


def _windowed(name: str = "qwen2.5-0.5b", window: int = WINDOW):
    """A shipped spec with Gemma 3's layout of local layers: all but every sixth."""
    spec = get_spec(name)
    local = tuple(i for i in range(spec.n_layers) if (i + 1) % 6)
    return dataclasses.replace(spec, sliding_window=window, local_layers=local)


def test_decode_reads_the_window_on_local_layers_and_everything_on_global_ones():
    spec = _windowed()
    ctx = 2000
    g = build_graph(spec, load_policy("fp16"), "decode", context=ctx, fused=False)
    per_pos = kv_bytes_per_token_per_layer(spec, "fp16") // 2
    for op, _ in g.unique_ops():
        if op.kind != "attn_qk":
            continue
        i = int(op.layer.split(".")[2])
        want = WINDOW if spec.is_local(i) else ctx
        assert op.n == want and op.kv_read_bytes == want * per_pos, op.layer
    n_local = len(spec.local_layers)
    kv = sum(op.kv_read_bytes * c for op, c in g.unique_ops())
    assert kv == 2 * per_pos * (n_local * WINDOW + (spec.n_layers - n_local) * ctx)
    # below the window a local layer reads what a global one does
    short = build_graph(spec, load_policy("fp16"), "decode", context=300)
    full = build_graph(get_spec("qwen2.5-0.5b"), load_policy("fp16"), "decode", context=300)
    assert short.dram_bytes == full.dram_bytes and short.flops == full.flops


def test_prefill_keys_are_the_span_the_rows_windows_cover():
    spec = _windowed()
    rows, ctx = 100, 1500  # 100 new rows after a 1,400-token cached prefix
    g = build_graph(spec, load_policy("fp16"), "prefill", tokens=rows, context=ctx, fused=False)
    seen = {int(op.layer.split(".")[2]): op.n for op, _ in g.unique_ops() if op.kind == "attn_qk"}
    assert {spec.is_local(i): n for i, n in seen.items()} == {True: WINDOW + rows - 1, False: ctx}
    assert spec.keys_seen(0, 8, 5) == 5  # never more keys than positions


def test_decode_cost_past_the_window_equals_each_step_costed_alone():
    """decode_step_times evaluates two graphs with the window's clamp; every step's own graph
    must give the same time, before, across and after the step where the window fills."""
    spec = _windowed("qwen2.5-0.5b", window=64)
    profile = load_profile("harmony-flagship")
    config = RunConfig.from_names(
        model=spec, policy="int4-g32", prompt_tokens=40, new_tokens=60, context_tokens=256
    )
    per = decode_step_times(profile, config)
    contexts = 40 + 1 + np.arange(60)
    alone = [
        graph_cost(profile, build_graph(spec, config.policy, "decode", context=int(c))).time_s
        for c in contexts
    ]
    np.testing.assert_allclose(per["time_s"], alone, rtol=1e-12)
    # once the window is full only the global layers' attention still grows
    t, full = per["time_s"], 64 - 41
    before, after = (t[full] - t[0]) / full, (t[-1] - t[full]) / (len(t) - 1 - full)
    assert 0 < after < before / 3
    # the CPU-threads path integrates the same way
    cpu = load_profile("snapdragon-8-gen-3")
    point = cpu_path(cpu, config, threads=4)
    unwindowed = cpu_path(cpu, dataclasses.replace(config, spec=get_spec("qwen2.5-0.5b")), 4)
    assert point.decode_step_ms < unwindowed.decode_step_ms


def test_kv_cache_bytes_are_the_runtime_rings_byte_for_byte():
    from harmony_ref.runtime.llama import Llama
    from tests.fixtures.decoder.tiny import tiny_config, tiny_weights

    c = tiny_config("gemma3")
    spec = c.to_spec()
    assert spec.sliding_window == 4 and spec.local_layers == (0, 1)
    for kv_dtype in ("fp16", "int8"):
        for ctx in (3, 64):
            m = Llama(tiny_weights(c, seed=3), "fp32", kv_dtype=kv_dtype, max_context=ctx)
            assert kv_cache_bytes(spec, ctx, kv_dtype) == m.kv_cache_bytes(), (kv_dtype, ctx)
    # a checkpoint whose window no layer uses (every layer global) models as all-global
    all_global = tiny_config("gemma3", local_layers=()).to_spec()
    assert (all_global.sliding_window, all_global.local_layers) == (0, ())
    plain = dataclasses.replace(spec, sliding_window=0, local_layers=())
    assert kv_cache_bytes(spec, 64) == kv_cache_bytes(plain, 64) * (2 * 4 + 64) // (3 * 64)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"sliding_window": 512}, "needs the layers"),
        ({"local_layers": [0, 1]}, "needs the layers"),
        ({"sliding_window": 512, "local_layers": [0, 24]}, "lists 24"),
        ({"sliding_window": 512, "local_layers": [1, 1]}, "twice"),
        ({"sliding_window": -1, "local_layers": [1]}, "sliding_window"),
    ],
)
def test_bad_window_fields_name_the_file_and_field(change, message):
    base = dataclasses.asdict(get_spec("qwen2.5-0.5b"))
    base = {k: v for k, v in base.items() if k not in ("file", "rope_scaling")}
    with pytest.raises(ValueError, match=message) as e:
        spec_from_dict({**base, **change}, "my-model.toml")
    assert "my-model.toml" in str(e.value)


@pytest.mark.network
def test_shipped_gemma_spec_is_the_real_checkpoints():
    """`predict --model gemma-3-270m` models the file `--model gemma3-270m` runs."""
    from harmony_ref.checkpoint.assets import AssetUnavailable
    from harmony_ref.runtime.loader import checkpoint_spec

    try:
        real = checkpoint_spec("gemma3-270m")
    except AssetUnavailable as e:
        pytest.skip(f"Gemma 3 weights unavailable (package registry unreachable): {e}")
    shipped = get_spec("gemma-3-270m")
    skip = {"name", "source", "file", "norm_eps"}
    for f in dataclasses.fields(shipped):
        if f.name not in skip:
            assert getattr(shipped, f.name) == getattr(real, f.name), f.name
    assert shipped.norm_eps == pytest.approx(real.norm_eps, rel=1e-6)  # stored as float32
    assert real.published_params == shipped.published_params  # every tensor of the file counted


def test_the_documented_gemma_kv_cache():
    """docs/explanations/cost-model.md: 20.45 MB at 4,096 tokens, 75.5 MB without the window."""
    from harmony_ref.units import MB

    spec = get_spec("gemma-3-270m")
    plain = dataclasses.replace(spec, sliding_window=0, local_layers=())
    assert round(kv_cache_bytes(spec, 4096) / MB, 2) == 20.45
    assert round(kv_cache_bytes(plain, 4096) / MB, 1) == 75.5
