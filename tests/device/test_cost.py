"""Cost model: hand-worked roofline points, physics bounds over every shipped profile x model x
policy, and the exact decode integration."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harmony_ref.config import RunConfig
from harmony_ref.device.cost import decode_step_times, graph_cost, phase_cost, scenario_timing
from harmony_ref.device.runtime import load_profile
from harmony_ref.device.soc import shipped_profiles
from harmony_ref.model.graph import Graph, Segment, build_graph
from harmony_ref.model.spec import get_spec, list_specs
from harmony_ref.quant.policy import load_policy, shipped_policies

DECODERS = [m for m in list_specs() if get_spec(m).is_decoder]
US = 1e-6


def _single_op_graph(phase, **kw):
    """The q_proj of Llama-3.2-3B layer 0 at int4-g128, alone in a graph."""
    g = build_graph(get_spec("llama-3.2-3b"), load_policy("int4-g128"), phase, **kw)
    (op,) = [o for o in g.ops if o.name == "model.layers.0.self_attn.q_proj"]
    return op, dataclasses.replace(g, segments=(Segment((op,)),))


def _weight_rate(profile):
    """`profile` with weight-only matmuls at their weight dtype's rate (as host.toml)."""
    return dataclasses.replace(
        profile, compute=dataclasses.replace(profile.compute, weight_only_compute="weight")
    )


def test_hand_worked_decode_point():
    op, g = _single_op_graph("decode", context=100)
    # Weights: 3072 x 3072 nibbles = 4,718,592 B; 3072 rows x 24 groups x (2 B scale + 1 B zp)
    # = 221,184 B; total 4,939,776 B. Activations in and out: 3072 fp16 each = 6,144 B apiece.
    assert op.weight_bytes == 4_939_776
    assert op.dram_bytes == 4_939_776 + 2 * 6_144  # 4,952,064 B
    # Flagship: bandwidth 68.3 GB/s x 0.7 = 47.81 GB/s -> memory = 4,952,064 / 47.81e9 = 103.578 us.
    # Compute: weight-only int4 computes in FP16 on the phone (weight_only_compute = "fp16"):
    # 2 x 3072 x 3072 = 18,874,368 ops / (16.384 TOPS fp16 x 0.5) = 2.304 us.
    # Memory-bound: time = 103.578 us + 20 us launch = 123.578 us.
    c = graph_cost(load_profile("harmony-flagship"), g)
    assert c.memory_s == pytest.approx(4_952_064 / 47.81e9, rel=1e-12)
    assert c.compute_s == pytest.approx(18_874_368 / 8.192e12, rel=1e-12)
    assert c.time_s == pytest.approx(123.578 * US, abs=0.001 * US)
    assert c.kernel_launches == 1 and c.fp16_ops == 18_874_368 and c.int4_ops == 0
    # At the weight's own rate (host semantics): / (65.536 TOPS int4 x 0.5) = 0.576 us, same time.
    c = graph_cost(_weight_rate(load_profile("harmony-flagship")), g)
    assert c.compute_s == pytest.approx(18_874_368 / 32.768e12, rel=1e-12)
    assert c.time_s == pytest.approx(123.578 * US, abs=0.001 * US)
    assert c.int4_ops == 18_874_368 and c.fp16_ops == 0


def test_hand_worked_prefill_points():
    op, g = _single_op_graph("prefill", tokens=512)
    flagship = _weight_rate(load_profile("harmony-flagship"))
    # At the INT4 rate: activation block 512 x 3072 x 2 B = 3,145,728 B > 2 MiB buffer
    # (2,097,152 B): 2 pieces, so the weights stream twice: 2 x 4,939,776 = 9,879,552 B;
    # + 3,145,728 in + 3,145,728 out = 16,171,008 B / 47.81e9 = 338.23 us. Compute:
    # 2 x 512 x 3072 x 3072 = 9,663,676,416 ops / 32.768e12 = 294.91 us. Memory-bound:
    # 338.23 + 20 = 358.23 us.
    c = graph_cost(flagship, g)
    assert c.dram_bytes == 16_171_008
    assert c.compute_s == pytest.approx(294.912 * US, abs=0.001 * US)
    assert c.time_s == pytest.approx(358.23 * US, abs=0.01 * US)
    # With a 4 MiB buffer the block fits, weights stream once: 4,939,776 + 6,291,456 = 11,231,232 B
    # -> 234.91 us < 294.91 us: compute-bound, time = 294.91 + 20 = 314.91 us.
    big = dataclasses.replace(
        flagship, memory=dataclasses.replace(flagship.memory, onchip_buffer_kib=4096.0)
    )
    c = graph_cost(big, g)
    assert c.dram_bytes == 11_231_232
    assert c.time_s == pytest.approx(314.91 * US, abs=0.01 * US)
    # The shipped flagship computes weight-only int4 in FP16: 9,663,676,416 / 8.192e12 =
    # 1179.648 us > 338.23 us memory: compute-bound, 1199.648 us. Same bytes.
    c = graph_cost(load_profile("harmony-flagship"), g)
    assert c.dram_bytes == 16_171_008
    assert c.time_s == pytest.approx(1199.648 * US, abs=0.001 * US)


def _all_configs():
    # every shipped policy on every decoder, MiniLM's recipe too: the physics holds whatever the
    # policy's patterns match (allow_unmatched: the cross-family pairs are deliberate here)
    for model in DECODERS:
        for policy in shipped_policies():
            yield RunConfig.from_names(
                model=model,
                policy=policy,
                prompt_tokens=128,
                new_tokens=32,
                context_tokens=1024,
                allow_unmatched=True,
            )


@pytest.mark.parametrize("profile", shipped_profiles())
def test_decode_never_beats_dram_bandwidth(profile):
    p = load_profile(profile)
    bw = p.memory.dram_bandwidth_gbps * 1e9
    for config in _all_configs():
        t = scenario_timing(p, config)
        bytes_per_token = t.decode.dram_bytes / t.decode.tokens
        assert t.decode_tokens_per_s <= bw / bytes_per_token, config.label
        # And never beats streaming the weights alone once per step.
        weights = build_graph(config.spec, config.policy, "decode", context=129).weight_bytes
        assert t.decode_tokens_per_s <= bw / weights, config.label


@pytest.mark.parametrize("profile", shipped_profiles())
def test_int4_never_decodes_slower_than_int8(profile):
    p = load_profile(profile)
    for model in DECODERS:
        int8 = scenario_timing(
            p, RunConfig.from_names(model=model, policy="int8")
        ).decode_tokens_per_s
        for int4 in ("int4-g32", "int4-g128"):
            got = scenario_timing(
                p, RunConfig.from_names(model=model, policy=int4)
            ).decode_tokens_per_s
            assert got >= int8, (profile, model, int4, got, int8)


@pytest.mark.parametrize("profile", shipped_profiles())
def test_fusion_never_slows_a_scenario(profile):
    p = load_profile(profile)
    for model in list_specs():
        kw = dict(model=model, prompt_tokens=128, new_tokens=16, context_tokens=512)
        fused = scenario_timing(p, RunConfig.from_names(**kw))
        raw = scenario_timing(p, RunConfig.from_names(fused=False, **kw))
        assert (
            fused.e2e_s <= raw.e2e_s and fused.prefill.kernel_launches < raw.prefill.kernel_launches
        )


def test_phase_time_lies_between_roofline_bounds():
    p = load_profile("harmony-midrange")
    for config in list(_all_configs())[::5]:
        for phase in ("prefill", "decode"):
            c = phase_cost(p, config, phase)
            assert max(c.compute_s, c.memory_s) + c.launch_s <= c.time_s * (1 + 1e-12)
            assert c.time_s <= (c.compute_s + c.memory_s + c.launch_s) * (1 + 1e-12)


def test_decode_is_integrated_over_every_generated_token():
    p = load_profile("harmony-flagship")
    config = RunConfig.from_names(
        model="qwen2.5-1.5b", prompt_tokens=300, new_tokens=6, context_tokens=400
    )
    steps = [phase_cost(p, config, "decode", context=300 + 1 + j).time_s for j in range(6)]
    assert np.allclose(decode_step_times(p, config)["time_s"], steps, rtol=1e-12)
    assert phase_cost(p, config, "decode").time_s == pytest.approx(np.mean(steps), rel=1e-12)
    assert steps == sorted(steps) and steps[0] < steps[-1]  # longer context, slower step
    t = scenario_timing(p, config)
    assert t.ttft_s == pytest.approx(phase_cost(p, config, "prefill").time_s + steps[0], rel=1e-12)
    assert t.e2e_s == pytest.approx(t.prefill.time_s + sum(steps), rel=1e-12)


def test_frequency_scales_and_energy_ops():
    p = load_profile("harmony-flagship")
    config = RunConfig.from_names()
    full = phase_cost(p, config, "decode")
    slow_mem = phase_cost(p, config, "decode", memory_freq_scale=0.5)
    slow_cpu = phase_cost(p, config, "prefill", compute_freq_scale=0.5)
    assert slow_mem.time_s > 1.8 * full.bound_s  # decode is memory-bound
    assert slow_cpu.compute_s == pytest.approx(2 * phase_cost(p, config, "prefill").compute_s)
    assert full.int8_equiv_ops == pytest.approx(
        0.5 * full.int4_ops + full.int8_ops + 2 * full.fp16_ops + 2 * full.vector_ops
    )
    assert full.flops == pytest.approx(
        full.int4_ops + full.int8_ops + full.fp16_ops + full.vector_ops
    )
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(ValueError, match="compute_freq_scale"):
            phase_cost(p, config, "decode", compute_freq_scale=bad)
    with pytest.raises(ValueError, match="phase 'train'"):
        phase_cost(p, config, "train")


def test_encoder_has_prefill_only():
    p = load_profile("harmony-lowend")
    config = RunConfig.from_names(
        model="all-minilm-l6", prompt_tokens=128, new_tokens=0, context_tokens=128
    )
    t = scenario_timing(p, config)
    assert t.decode is None and t.e2e_s == t.ttft_s == t.prefill.time_s > 0
    with pytest.raises(ValueError, match="encoder"):
        phase_cost(p, config, "decode")


def test_graph_is_a_graph():
    # guard for the hand-worked tests: the replaced graph really holds one op
    _, g = _single_op_graph("decode", context=5)
    assert isinstance(g, Graph) and g.kernel_launches == 1


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(DECODERS),
    policy=st.sampled_from(shipped_policies()),
    profile=st.sampled_from(shipped_profiles()),
    prompt=st.integers(1, 3000),
    new=st.integers(1, 300),
    batch=st.integers(1, 4),
    kv_dtype=st.sampled_from(["fp16", "int8"]),
)
def test_physics_holds_for_random_scenarios(model, policy, profile, prompt, new, batch, kv_dtype):
    p = load_profile(profile)
    config = RunConfig.from_names(
        model=model,
        policy=policy,
        prompt_tokens=prompt,
        new_tokens=new,
        context_tokens=prompt + new + 1,
        batch=batch,
        kv_dtype=kv_dtype,
        allow_unmatched=True,
    )  # any policy on any model, deliberately
    t = scenario_timing(p, config)
    bw = p.memory.dram_bandwidth_gbps * 1e9
    assert t.decode_tokens_per_s <= bw * t.decode.tokens / t.decode.dram_bytes
    assert t.e2e_s >= t.prefill.time_s > 0 and t.ttft_s > t.prefill.time_s
    raw = scenario_timing(p, dataclasses.replace(config, fused=False))
    assert raw.e2e_s >= t.e2e_s and raw.ttft_s >= t.ttft_s
    slower = scenario_timing(p, config, compute_freq_scale=0.5, memory_freq_scale=0.5)
    assert slower.e2e_s >= t.e2e_s


def test_memory_bound_time_is_the_time_of_memory_bound_ops():
    # decode of a 3B at INT4 on the flagship streams weights: nearly every op is memory-bound,
    # and memory-bound time can never exceed the step time.
    from harmony_ref.config import RunConfig
    from harmony_ref.device.cost import phase_cost
    from harmony_ref.device.runtime import load_profile

    cfg = RunConfig.from_names(model="llama-3.2-3b", policy="int4-g128")
    for name in ("harmony-flagship", "harmony-lowend"):
        d = phase_cost(load_profile(name), cfg, "decode")
        assert 0.0 <= d.memory_bound_s <= d.time_s
    d = phase_cost(load_profile("harmony-flagship"), cfg, "decode")
    assert d.memory_bound_s > 0.8 * d.time_s
