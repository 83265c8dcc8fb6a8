"""What a matmul computes in (device/soc.py compute_dtype): weight-only quantized matmuls
in FP16 on a phone NPU, at their weight's rate on the host; W8A8 at the INT8 rate everywhere.
Every reader of the compute dtype (cost, energy, breakdown, phase calibration) follows it."""

import dataclasses
import re
from importlib import resources

import pytest

from harmony_ref.calibrate.fit import phase_terms
from harmony_ref.config import RunConfig
from harmony_ref.device.cost import phase_cost, scenario_timing
from harmony_ref.device.cost_breakdown import scenario_breakdown
from harmony_ref.device.runtime import load_profile
from harmony_ref.device.soc import WEIGHT_ONLY_COMPUTES, compute_dtype, shipped_profiles
from harmony_ref.device.threads import thread_sweep
from harmony_ref.model.graph import build_graph
from harmony_ref.model.spec import get_spec
from harmony_ref.quant.policy import policy_from_dict

PHONES_WITH_NPU = ("harmony-flagship", "harmony-midrange")
W8A8 = {"activations": {"granularity": "per-channel", "samples": 1, "sample_tokens": 8}}


def _policy(default, w8a8=False, **extra):
    name = default + (" w8a8" if w8a8 else "")
    return policy_from_dict(
        {"name": name, "default": default, **(W8A8 if w8a8 else {}), **extra}, f"<{name}>"
    )


def _config(policy, model="qwen2.5-0.5b", prompt=512, new=64):
    return RunConfig(
        spec=get_spec(model),
        policy=policy,
        scenario=RunConfig.from_names(
            prompt_tokens=prompt, new_tokens=new, context_tokens=1024
        ).scenario,
    )


def _profile_text(name):
    return (resources.files("harmony_ref") / "device" / "profiles" / f"{name}.toml").read_text()


def _as_host(profile):
    """`profile` with host semantics (host.toml's weight_only_compute)."""
    return dataclasses.replace(
        profile, compute=dataclasses.replace(profile.compute, weight_only_compute="weight")
    )


def test_the_rule_table():
    for mode in WEIGHT_ONLY_COMPUTES:
        assert compute_dtype("fp16", "fp16", mode) == "fp16"
        assert compute_dtype("int8", "int8", mode) == "int8"  # W8A8: the INT8 rate
        assert compute_dtype("int4", "int8", mode) == "int8"  # W4A8: INT4 needs int4 activations
    assert compute_dtype("int8", "fp16", "fp16") == "fp16"  # weight-only, dequantized
    assert compute_dtype("int4", "fp16", "fp16") == "fp16"
    assert compute_dtype("int8", "fp16", "weight") == "int8"  # host: dynamic int8 activations
    assert compute_dtype("int4", "fp16", "weight") == "int4"
    with pytest.raises(ValueError, match="'int8-ish'"):
        compute_dtype("int8", "fp16", "int8-ish")
    with pytest.raises(ValueError, match="'fp32'"):
        compute_dtype("fp32", "fp16", "fp16")


def test_graph_marks_w8a8_matmuls_only_on_int8_weights():
    spec = get_spec("qwen2.5-0.5b")
    mixed = _policy(
        "int8", w8a8=True, keep_fp16_layers=["lm_head"], layers={"down_proj": "int4-g32"}
    )
    graph = build_graph(spec, mixed, "prefill", tokens=16)
    ops = {o.name: o for o in graph.ops if o.kind == "matmul"}
    q, down, head = (
        ops["model.layers.0.self_attn.q_proj"],
        ops["model.layers.0.mlp.down_proj"],
        ops["lm_head"],
    )
    assert (q.dtype, q.act_dtype) == ("int8", "int8")
    assert (down.dtype, down.act_dtype) == ("int4", "fp16")  # [activations] covers int8 Linears
    assert (head.dtype, head.act_dtype) == ("fp16", "fp16")
    plain = build_graph(spec, _policy("int8"), "prefill", tokens=16)
    assert all(o.act_dtype == "fp16" for o in plain.ops)


@pytest.mark.parametrize("name", PHONES_WITH_NPU)
def test_w8a8_prefill_is_faster_than_weight_only_int8_on_a_phone(name):
    p = load_profile(name)
    assert p.compute.weight_only_compute == "fp16"
    wo, w8a8 = _config(_policy("int8")), _config(_policy("int8", w8a8=True))
    t_wo, t_a8 = scenario_timing(p, wo), scenario_timing(p, w8a8)
    # Prefill of 512 tokens is compute-bound: FP16 (weight-only) vs INT8 (W8A8) Cube rates, 1:2.
    assert t_a8.prefill.time_s < 0.75 * t_wo.prefill.time_s
    assert t_a8.prefill.int8_ops > 0 and t_wo.prefill.int8_ops == 0
    assert t_a8.prefill.fp16_ops < t_wo.prefill.fp16_ops
    # Decode is memory-bound: the same weight bytes, barely any change.
    assert t_a8.decode.dram_bytes == t_wo.decode.dram_bytes
    assert t_a8.decode_tokens_per_s == pytest.approx(t_wo.decode_tokens_per_s, rel=0.03)
    assert t_a8.decode_tokens_per_s >= t_wo.decode_tokens_per_s
    # Energy: W8A8's matrix ops weigh 1, weight-only int8's FP16 ops 2.
    assert t_a8.prefill.int8_equiv_ops < 0.75 * t_wo.prefill.int8_equiv_ops
    # Weight-only int8 computes as FP16 weights do; only the bytes differ.
    t_fp16 = scenario_timing(p, _config(_policy("fp16")))
    assert t_wo.prefill.fp16_ops == pytest.approx(t_fp16.prefill.fp16_ops)
    assert t_wo.prefill.dram_bytes < t_fp16.prefill.dram_bytes


@pytest.mark.parametrize("name", PHONES_WITH_NPU)
def test_on_host_semantics_w8a8_equals_weight_only(name):
    p = _as_host(load_profile(name))
    for weights in ("int8",):
        wo = scenario_timing(p, _config(_policy(weights)))
        a8 = scenario_timing(p, _config(_policy(weights, w8a8=True)))
        assert a8.prefill.time_s == pytest.approx(wo.prefill.time_s, rel=1e-12)
        assert a8.e2e_s == pytest.approx(wo.e2e_s, rel=1e-12)
    # and int4 weight-only keeps its INT4 rate there (our matmul_w4's class)
    t4 = phase_cost(p, _config(_policy("int4-g32")), "prefill")
    assert t4.int4_ops > 0 and t4.fp16_ops < t4.int4_ops


def test_written_host_profile_says_weight():
    import tomllib

    from harmony_ref.calibrate.fit import RATE_CLASSES, HostFit
    from harmony_ref.calibrate.write import host_profile_toml
    from harmony_ref.device.soc import profile_from_dict

    rates = {c: 1e10 for c in RATE_CLASSES}
    fit = HostFit(2e-6, rates, 1e10, tuple(RATE_CLASSES) + ("bandwidth", "launch"), 1)
    nominal = {c: 1e11 for c in RATE_CLASSES}
    text = host_profile_toml(fit, 10.0, nominal, 2 * 1024 * 1024, 8e9, "test host")
    p = profile_from_dict(tomllib.loads(text), "<host.toml>")
    assert p.compute.weight_only_compute == "weight"
    wo = scenario_timing(p, _config(_policy("int8"), prompt=64, new=4))
    a8 = scenario_timing(p, _config(_policy("int8", w8a8=True), prompt=64, new=4))
    assert a8.e2e_s == pytest.approx(wo.e2e_s, rel=1e-12)


def test_every_shipped_profile_states_the_field():
    """In the profile, or (a SoC profile naming its default runtime) in that runtime's file."""
    from harmony_ref.device.soc import load_soc

    for name in shipped_profiles():
        text = _profile_text(name)
        runtime = load_soc(name).default_runtime
        if runtime:
            text = (
                resources.files("harmony_ref") / "device" / "runtimes" / f"{runtime}.toml"
            ).read_text()
        line = re.search(r"^weight_only_compute = \"(\w+)\"", text, flags=re.M)
        assert line and line.group(1) in WEIGHT_ONLY_COMPUTES, name
        assert load_profile(name).compute.weight_only_compute == line.group(1)


def test_field_errors_name_file_field_and_value(tmp_path):
    text = _profile_text("harmony-flagship")
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('weight_only_compute = "fp16"', 'weight_only_compute = "int8"'))
    with pytest.raises(ValueError) as e:
        load_profile(bad)
    msg = str(e.value)
    assert str(bad) in msg and "'compute.weight_only_compute'" in msg and "'int8'" in msg
    assert "['fp16', 'weight']" in msg
    bad.write_text(re.sub(r"^weight_only_compute = .*\n", "", text, flags=re.M))
    with pytest.raises(ValueError, match="missing field 'compute.weight_only_compute'"):
        load_profile(bad)


def test_breakdown_says_what_the_matmuls_compute_in():
    p = load_profile("harmony-flagship")
    for policy, want in ((_policy("int8"), "fp16"), (_policy("int8", w8a8=True), "int8")):
        tables = scenario_breakdown(p, _config(policy, new=8))
        prefill = next(iter(tables.values()))
        matmul = next(r for r in prefill if r["kind"] == "matmul")
        assert want in matmul["computes_in"].split("+")
        assert next(r for r in prefill if r["kind"] == "norm")["computes_in"] == "vector"
    # lm_head stays FP16 under W8A8 when the policy keeps it so: both dtypes listed
    kept = _policy("int8", w8a8=True, keep_fp16_layers=["lm_head"])
    prefill = next(iter(scenario_breakdown(p, _config(kept, new=8)).values()))
    assert next(r for r in prefill if r["kind"] == "matmul")["computes_in"] == "fp16+int8"


def test_phase_calibration_terms_follow_the_compute_dtype():
    p = load_profile("harmony-flagship")
    _, c_wo, m_wo, _ = phase_terms(p, _config(_policy("int8")), "prefill")
    _, c_a8, m_a8, _ = phase_terms(p, _config(_policy("int8", w8a8=True)), "prefill")
    assert c_a8.sum() < 0.75 * c_wo.sum()
    assert m_a8.sum() == pytest.approx(m_wo.sum())
    _, c_h, _, _ = phase_terms(_as_host(p), _config(_policy("int8")), "prefill")
    assert c_h.sum() == pytest.approx(c_a8.sum())


def test_cpu_path_runs_weight_only_at_the_weight_rate():
    """The thread model's SDOT kernels take int8 activations: the profile's NPU field does not
    change it, and W8A8 equals weight-only int8 there."""
    p = load_profile("harmony-flagship")
    wo = _config(_policy("int8"), prompt=64, new=8)
    a8 = _config(_policy("int8", w8a8=True), prompt=64, new=8)
    pts_wo, _ = thread_sweep(p, wo)
    pts_host, _ = thread_sweep(_as_host(p), wo)
    pts_a8, _ = thread_sweep(p, a8)
    for x, y, z in zip(pts_wo, pts_host, pts_a8):
        assert x.prefill_tokens_per_s == pytest.approx(y.prefill_tokens_per_s, rel=1e-12)
        assert x.prefill_tokens_per_s == pytest.approx(z.prefill_tokens_per_s, rel=1e-12)


def test_a_compute_dtype_without_a_cube_path_falls_back_to_the_cpu_rate():
    """A profile whose Cube has no INT8 path: W8A8 matmuls run at the CPU's INT8 rate, while
    weight-only int8 (FP16 compute) stays on the Cube."""
    p = load_profile("harmony-flagship")
    no_int8 = dataclasses.replace(p, compute=dataclasses.replace(p.compute, cube_int8_tops=0.0))
    cfg_a8 = _config(_policy("int8", w8a8=True))
    cfg_wo = _config(_policy("int8"))
    a8, a8_cube = (phase_cost(x, cfg_a8, "prefill") for x in (no_int8, p))
    assert a8.int8_ops == a8_cube.int8_ops > 0
    rate_ratio = p.compute.cube_int8_tops * 1e3 / p.compute.cpu_int8_gops  # 47.6x
    assert a8.compute_s > 0.5 * rate_ratio * a8_cube.compute_s
    assert phase_cost(no_int8, cfg_wo, "prefill").time_s == pytest.approx(
        phase_cost(p, cfg_wo, "prefill").time_s, rel=1e-12
    )
