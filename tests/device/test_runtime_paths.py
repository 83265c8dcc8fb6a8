"""What a runtime computes a 16-bit matmul in ([float16], a policy's `float16`), a compiled-graph
runtime's per-forward cost (`[overhead] graph`, `graph_us`) and a static KV cache (`kv_cache`,
`kv_context`): each field checked at load (file, field, value; exit 2), and each mechanism's
effect on the cost model on a synthetic case worked by hand."""

import dataclasses

import pytest

from harmony_ref.cli import main
from harmony_ref.config import RunConfig
from harmony_ref.device.cost import phase_cost, scenario_timing
from harmony_ref.device.physics import bounds
from harmony_ref.device.runtime import (
    Float16Core,
    RuntimeFloat16,
    apply_runtime,
    float16_shares,
    load_profile,
    load_runtime,
    runtime_from_dict,
)
from harmony_ref.device.soc import WIDENED_SHARE, load_soc
from harmony_ref.quant.policy import load_policy
from tests.device.test_runtime import GOOD  # a valid cpu runtime profile


def test_a_bad_field_is_exit_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "rt.toml"
    path.write_text(GOOD + '\n[float16]\nbf16 = "wide"\n')
    assert main(["predict", "--profile", "snapdragon-8-gen-3", "--runtime", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "float16.bf16" in err and "'wide'" in err and str(path) in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_a_bad_policy_float16_is_one_line(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('default = "fp16"\nfloat16 = "fp8"\n')
    with pytest.raises(ValueError, match="field 'float16' = 'fp8': must be one of") as e:
        load_policy(str(path))
    assert str(path) in str(e.value)
    assert load_policy("bf16").float16 == "bf16" and load_policy("fp16").float16 == "fp16"


def _cpu_runtime(**float16) -> object:
    rt = runtime_from_dict(
        {
            "name": "t",
            "description": "d",
            "unit": "cpu",
            "weight_only_compute": "weight",
            "thread_split": "dynamic",
            "efficiency": {"matmul": 0.4, "memory": 0.8},
            "overhead": {"launch_us": 5.0},
            "float16": float16,
        },
        "<test>",
    )
    return rt


def test_a_widened_core_kind_counts_at_half_its_fp16_rate():
    cpu = load_soc("snapdragon-8-gen-3").cpu
    used = cpu.cores_used(6)  # prime + 3 gold + 2 gold-low
    fp16 = {c.name: c.core_ops_per_s("fp16") for c in used}
    total = sum(c.core_ops_per_s("fp16") for c in used)
    prime = fp16["prime"]
    # only the prime core widens bf16: the pool loses half of the prime core's rate
    f16 = RuntimeFloat16(core=(Float16Core("prime", bf16="widened"),))
    shares = float16_shares(cpu, 6, "dynamic", f16)
    assert shares["fp16"] == 1.0
    assert shares["bf16"] == pytest.approx((total - WIDENED_SHARE * prime) / total)
    # every core widened: half, under either split; a core kind the SoC lacks changes nothing
    assert float16_shares(cpu, 6, "even", RuntimeFloat16(bf16="widened"))["bf16"] == 0.5
    assert float16_shares(cpu, 6, "dynamic", RuntimeFloat16(fp16="widened"))["fp16"] == 0.5
    other = RuntimeFloat16(core=(Float16Core("Cortex-X925", fp16="widened"),))
    assert float16_shares(cpu, 6, "dynamic", other) == {"fp16": 1.0, "bf16": 1.0}
    # and the merged profile carries the shares
    p = apply_runtime(load_soc("snapdragon-8-gen-3"), _cpu_runtime(bf16="widened"))
    assert (p.compute.float16_share("fp16"), p.compute.float16_share("bf16")) == (1.0, 0.5)


def test_a_widened_bf16_prompt_takes_twice_the_matrix_time_and_decode_barely_moves():
    soc = load_soc("snapdragon-8-gen-3")
    native = apply_runtime(soc, _cpu_runtime())
    widened = apply_runtime(soc, _cpu_runtime(bf16="widened"))
    fp16 = RunConfig.from_names("llama-3.2-1b", "fp16", 512, 16, 2048)
    bf16 = RunConfig.from_names("llama-3.2-1b", "bf16", 512, 16, 2048)
    # native: a bf16 weight is an fp16 one (same bytes, same rate)
    assert (
        scenario_timing(native, bf16).prefill.time_s == scenario_timing(native, fp16).prefill.time_s
    )
    a, b = phase_cost(widened, fp16, "prefill"), phase_cost(widened, bf16, "prefill")
    assert a.time_s == scenario_timing(native, fp16).prefill.time_s  # fp16 stays native
    # the prompt is compute-bound: its matrix time doubles, its vector work does not
    assert b.compute_s - a.compute_s == pytest.approx(
        a.compute_s - _vector_s(native, fp16), rel=1e-9
    )
    assert b.time_s > 1.8 * a.time_s
    da, db = phase_cost(widened, fp16, "decode"), phase_cost(widened, bf16, "decode")
    assert db.time_s == pytest.approx(da.time_s, rel=0.02)  # memory-bound: the same bytes
    # the widened prediction is still no faster than the profile's own bounds
    bd = bounds(widened, bf16)
    assert scenario_timing(widened, bf16).decode_tokens_per_s <= bd.decode_tokens_per_s_max
    assert b.time_s * 1e3 >= bd.prefill_ms_min


def _vector_s(profile, config) -> float:
    """The prompt's vector-op time on `profile` (its compute time with no matrix work)."""
    from harmony_ref.device.cost import Roofline

    return phase_cost(profile, config, "prefill").vector_ops / Roofline.of(profile).vector_ops_per_s


def test_a_compiled_graph_pays_graph_us_per_forward_instead_of_a_launch_per_op():
    ops = load_runtime("qnn-npu")
    ops = dataclasses.replace(
        ops, overhead=dataclasses.replace(ops.overhead, graph="ops", graph_us=0.0)
    )
    compiled = dataclasses.replace(
        ops, overhead=dataclasses.replace(ops.overhead, graph="compiled", graph_us=700.0)
    )
    soc = load_soc("snapdragon-8-elite")
    p_ops, p_graph = apply_runtime(soc, ops), apply_runtime(soc, compiled)
    assert p_graph.runtime.launch_overhead_us == 0.0
    assert p_graph.runtime.forward_overhead_us == ops.overhead.forward_us + 700.0
    cfg = RunConfig.from_names("qwen2.5-0.5b", "int4-g32", 128, 32, 1024)
    for phase in ("prefill", "decode"):
        a, b = phase_cost(p_ops, cfg, phase), phase_cost(p_graph, cfg, phase)
        launches = a.kernel_launches * ops.overhead.launch_us * 1e-6
        assert a.time_s - b.time_s == pytest.approx(launches - 700e-6, rel=1e-9)
        assert b.launch_s == pytest.approx(700e-6)


def test_a_static_kv_cache_is_read_whole_at_every_step():
    rt = load_runtime("qnn-npu")
    soc = load_soc("snapdragon-8-elite")
    dynamic = apply_runtime(soc, dataclasses.replace(rt, kv_cache="dynamic"))
    static = apply_runtime(soc, dataclasses.replace(rt, kv_cache="static"))
    fixed = apply_runtime(soc, dataclasses.replace(rt, kv_cache="static", kv_context=1536))
    cfg = RunConfig.from_names("llama-3.2-1b", "int4-g32", 128, 64, 4096)
    full = phase_cost(dynamic, cfg, "decode", context=4096)
    assert phase_cost(static, cfg, "decode").time_s == pytest.approx(full.time_s, rel=1e-12)
    assert phase_cost(static, cfg, "decode").time_s > phase_cost(dynamic, cfg, "decode").time_s
    at = phase_cost(dynamic, cfg, "decode", context=1536)
    assert phase_cost(fixed, cfg, "decode").time_s == pytest.approx(at.time_s, rel=1e-12)
    # the prompt attends over itself either way
    assert phase_cost(static, cfg, "prefill").time_s == phase_cost(dynamic, cfg, "prefill").time_s
    short = apply_runtime(soc, dataclasses.replace(rt, kv_cache="static", kv_context=100))
    with pytest.raises(ValueError, match="kv_context = 100: the runtime's static KV cache"):
        scenario_timing(short, cfg)


def test_the_new_fields_round_trip_through_the_written_toml(tmp_path):
    from harmony_ref.calibrate.fit_runtime import runtime_toml

    rt = dataclasses.replace(
        load_runtime("qnn-npu"),
        kv_cache="static",
        kv_context=2048,
        float16=RuntimeFloat16(bf16="widened", core=(Float16Core("silver", fp16="widened"),)),
    )
    path = tmp_path / "rt.toml"
    path.write_text(runtime_toml(rt))
    again = load_runtime(path)
    assert again == rt and again.overhead.graph == "compiled" and again.overhead.graph_us > 0


def test_shipped_paths_are_the_sourced_ones():
    assert load_runtime("executorch-xnnpack").float16.bf16 == "widened"
    assert load_runtime("executorch-xnnpack").float16.fp16 == "native"
    assert load_runtime("qnn-npu").overhead.graph == "compiled"
    p = load_profile("snapdragon-8-gen-3", "litert-lm-cpu")
    assert p.compute.float16_share("bf16") == 0.5
