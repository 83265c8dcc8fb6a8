"""Runtime profiles: the shipped ones load and run on every shipped SoC, a runtime merged with a
SoC prices ops with the SoC's peaks and the runtime's efficiencies (a roofline point worked by
hand), defaults and thread counts, and bad files fail with file, field and value."""

import json
import math

import pytest

from harmony_ref.cli import main
from harmony_ref.config import RunConfig
from harmony_ref.device.cost import scenario_timing
from harmony_ref.device.physics import bounds
from harmony_ref.device.runtime import (
    apply_runtime,
    load_profile,
    load_runtime,
    performant_cores,
    shipped_runtimes,
)
from harmony_ref.device.soc import load_soc
from harmony_ref.units import GB, GIGA
from tests.device.test_soc import SOCS  # the real SoCs, listed once

REQUIRED = (
    "llama.cpp-cpu",
    "executorch-xnnpack",
    "qnn-npu",
    "mlc-gpu",
    "mslite-npu",
    "harmony-ref-host",
    "litert-lm-cpu",
    "litert-lm-gpu",
)


def test_the_required_runtimes_ship_and_load():
    assert set(REQUIRED) <= set(shipped_runtimes())
    for name in shipped_runtimes():
        rt = load_runtime(name)
        assert rt.name == name and 0 < rt.efficiency.matmul <= 1 and 0 < rt.efficiency.memory <= 1
        assert load_runtime(rt) is rt


# The one NPU runtime each SoC's NPU runs, by the SoC's product name (QNN: Qualcomm's Hexagon;
# MindSpore Lite: HiSilicon's Da Vinci); a Dimensity's APU (or a Tensor's, an Exynos's) runs neither
NPU_RUNTIME = {"snapdragon": "qnn-npu", "kirin": "mslite-npu"}


@pytest.mark.parametrize("soc", SOCS)
def test_every_phone_runtime_predicts_on_every_soc_with_its_unit(soc):
    cfg = RunConfig.from_names("llama-3.2-3b", "w4a8-g32", 64, 128, 2048)
    for rt in REQUIRED:
        if rt.endswith("-npu") and rt != NPU_RUNTIME.get(soc.split("-")[0]):
            with pytest.raises(ValueError, match=f"runtime '{rt}' runs on a .* only; {soc} has a"):
                load_profile(soc, rt)
            continue
        p = load_profile(soc, rt)
        t = scenario_timing(p, cfg)
        b = bounds(p, cfg)
        assert math.isfinite(t.ttft_s) and t.ttft_s > 0
        # no prediction faster than its own profile's bandwidth bound (the physics check)
        assert t.decode_tokens_per_s <= b.decode_tokens_per_s_max
        assert t.prefill.time_s * 1e3 >= b.prefill_ms_min


def test_predict_json_prints_the_four_numbers_for_the_issue_example(capsys):
    assert (
        main(
            [
                "predict",
                "--profile",
                "snapdragon-8-gen-3",
                "--runtime",
                "executorch-xnnpack",
                "--model",
                "llama-3.2-3b",
                "--policy",
                "w4a8-g32",
                "--prompt",
                "64",
                "--new",
                "128",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["runtime"] == "executorch-xnnpack"
    for k in ("prefill_tokens_per_s", "decode_tokens_per_s", "ttft_ms", "peak_memory_mb"):
        assert out["metrics"][k]["value"] > 0


def test_the_profiles_own_runtime_when_none_is_named():
    soc = load_soc("kirin-9000e")
    assert soc.default_runtime == "mslite-npu" and math.isnan(soc.compute.compute_efficiency)
    merged = load_profile("kirin-9000e")
    assert merged == load_profile("kirin-9000e", "mslite-npu")
    assert merged.compute.compute_efficiency == load_runtime("mslite-npu").efficiency.matmul


def test_a_cpu_runtime_on_a_soc_worked_by_hand():
    """llama.cpp-cpu on the Dimensity 9300 at 6 threads (dynamic split: the sum of the 6 fastest
    cores): 1 X4 at 3.25 GHz + 3 X4 at 2.85 + 2 A720 at 2.0, int8 128 / 128 / 64 ops per cycle."""
    rt = load_runtime("llama.cpp-cpu")
    p = load_profile("dimensity-9300", rt, threads=6)
    int8 = (128 * 3.25 + 3 * 128 * 2.85 + 2 * 64 * 2.0) * GIGA
    assert p.compute.cpu_int8_gops * GIGA == pytest.approx(int8)
    assert p.compute.matmul_ops_per_s("int8") == pytest.approx(int8)  # no NPU path: the CPU's
    # the Dimensity 9300 has a matmul efficiency of its own (its calibration figures pin one)
    assert p.compute.efficiency("int8") == rt.matmul_on("dimensity-9300")
    assert rt.matmul_on("dimensity-9300") == rt.soc_entry("dimensity-9300").matmul
    # the CPU's read bandwidth replaces the DRAM peak: measured on the Snapdragon 8 Gen 3
    # (PowerInfer-2), elsewhere assumed at that SoC's share of the peak (43.9 of 76.8)
    assert (
        p.memory.dram_bandwidth_gbps == 43.9 and p.memory.memory_efficiency == rt.efficiency.memory
    )
    assert load_profile("snapdragon-8-gen-3", rt).memory.dram_bandwidth_gbps == 43.9
    assert load_profile("kirin-9000e", rt).memory.dram_bandwidth_gbps == 25.2  # 0.572 x 44.0
    # one decode step of a big memory-bound model is about its weight bytes at that bandwidth
    cfg = RunConfig.from_names("llama-2-7b", "int4-g32-sym", 64, 2, 128)
    t = scenario_timing(p, cfg)
    weights = bounds(p, cfg).weight_bytes
    floor = weights / (43.9 * GB * rt.efficiency.memory)
    assert floor <= t.decode.time_s <= floor * 1.15


def test_a_runtimes_gemv_thread_share_scales_its_decode_gemvs_only(tmp_path):
    """executorch-xnnpack on the xeon-2core-kvm profile with thread_share 0.25 and
    gemv_thread_share 0.5: at 2 threads the one-row matmuls run at (1 + 0.5) / (1 + 0.25) of
    the rate thread_share alone gives them, the prompt's GEMMs unchanged; 1 thread, or the field
    unset, leaves every efficiency as it was; written and read back by runtime_toml."""
    import dataclasses

    from harmony_ref.calibrate.fit_runtime import runtime_toml
    from harmony_ref.device.soc import DTYPES

    base = dataclasses.replace(load_runtime("executorch-xnnpack"), thread_share=0.25)
    own = dataclasses.replace(base, gemv_thread_share=0.5)
    for threads, scale in ((1, 1.0), (2, 1.5 / 1.25)):
        a = load_profile("xeon-2core-kvm", base, threads).compute
        b = load_profile("xeon-2core-kvm", own, threads).compute
        for d in DTYPES:
            assert b.efficiency(f"gemv_{d}") == pytest.approx(a.efficiency(f"gemv_{d}") * scale)
            assert b.efficiency(d) == a.efficiency(d)
        assert b.efficiency("attention_decode") == a.efficiency("attention_decode")
    capped = dataclasses.replace(
        base, gemv_thread_share=1.0, efficiency=dataclasses.replace(base.efficiency, gemv=0.9)
    )
    assert load_profile("xeon-2core-kvm", capped, 2).compute.efficiency("gemv_int4") == 1.0
    assert "gemv_thread_share" not in runtime_toml(base)
    path = tmp_path / "rt.toml"
    path.write_text(runtime_toml(own))
    assert load_runtime(path).gemv_thread_share == 0.5


def test_a_socs_own_matmul_efficiency_applies_on_that_soc_only():
    rt = load_runtime("llama.cpp-cpu")
    own = {e.soc: e.matmul for e in rt.soc_efficiency}
    assert {"dimensity-9300", "kirin-9000e"} <= set(own)
    for soc in SOCS:
        p = load_profile(soc, rt)
        want = own.get(soc, rt.efficiency.matmul)
        assert p.compute.compute_efficiency == want, soc
        assert p.compute.efficiency("int4") == want, soc  # unset classes fall back to it
    assert "snapdragon-8-elite" not in own  # no llama.cpp figure of its own: the shared one
    # every entry names what it was fitted on, all of it among the runtime's fit points
    for e in rt.soc_efficiency:
        assert e.fitted_on and set(e.fitted_on) <= set(rt.calibration.fitted_on)


def test_a_runtime_with_soc_entries_round_trips_through_its_toml(tmp_path):
    from harmony_ref.calibrate.fit_runtime import runtime_toml

    for name in ("llama.cpp-cpu", "qnn-npu"):
        rt = load_runtime(name)
        path = tmp_path / f"{name}.toml"
        path.write_text(runtime_toml(rt))
        again = load_runtime(path)
        assert again.soc_efficiency == rt.soc_efficiency and again == rt


def test_threads_default_to_the_performant_cores():
    assert performant_cores(load_soc("snapdragon-8-gen-3").cpu) == 6  # not the 2 A520
    assert performant_cores(load_soc("dimensity-9300").cpu) == 4  # the X4s
    assert performant_cores(load_soc("snapdragon-8-elite").cpu) == 8  # all Oryon
    assert "x6" in load_profile("snapdragon-8-gen-3", "llama.cpp-cpu").name
    assert "x2" in load_profile("snapdragon-8-gen-3", "llama.cpp-cpu", threads=2).name
    with pytest.raises(ValueError, match="threads = 9: must be in 1..8"):
        load_profile("snapdragon-8-gen-3", "llama.cpp-cpu", threads=9)


def test_a_unit_the_soc_lacks_is_an_error():
    with pytest.raises(ValueError, match="runs on the GPU, and this profile has no \\[gpu\\]"):
        apply_runtime(load_profile("harmony-flagship"), load_runtime("mlc-gpu"))
    with pytest.raises(ValueError, match="runs on the NPU, and this profile has no NPU"):
        apply_runtime(load_profile("harmony-lowend"), load_runtime("qnn-npu"))


GOOD = """name = "x"
description = "d"
unit = "cpu"
weight_only_compute = "weight"

[efficiency]
matmul = 0.3
memory = 0.5

[overhead]
launch_us = 5.0
"""


@pytest.mark.parametrize(
    "edit, message",
    [
        (("matmul = 0.3", "matmul = 1.5"), "field 'efficiency.matmul' = 1.5: must be <= 1.0"),
        (('unit = "cpu"', 'unit = "dsp"'), "field 'unit' = 'dsp': must be one of"),
        (
            ("launch_us = 5.0", "launch_us = -1.0"),
            "field 'overhead.launch_us' = -1.0: must be >= 0",
        ),
        (("memory = 0.5", "memory = 0.5\ncahce = 0.5"), "unknown field 'efficiency.cahce'"),
        (("matmul = 0.3\n", ""), "missing field 'efficiency.matmul'"),
        (("threads", "threads"), None),
        (
            ("launch_us = 5.0", 'launch_us = 5.0\n[[soc_efficiency]]\nsoc = "a"\nmatmul = 1.5'),
            "field 'soc_efficiency\\[0\\].matmul' = 1.5: must be <= 1.0",
        ),
        (
            ("launch_us = 5.0", 'launch_us = 5.0\n[[soc_efficiency]]\nsoc = "a"'),
            "missing field 'soc_efficiency\\[0\\].matmul'",
        ),
        (
            ("launch_us = 5.0", 'launch_us = 5.0\n[[soc_efficiency]]\nsoc = "a"\nmatmull = 0.2'),
            "unknown field 'soc_efficiency\\[0\\].matmull'",
        ),
        (
            (
                "launch_us = 5.0",
                'launch_us = 5.0\n[[soc_efficiency]]\nsoc = "kirin-9000e"\nmatmul = 0.2\n'
                '[[soc_efficiency]]\nsoc = "kirin-9000e"\nmatmul = 0.3',
            ),
            "field 'soc_efficiency\\[1\\].soc' = 'kirin-9000e': that SoC has an entry already",
        ),
        (
            (
                "launch_us = 5.0",
                'launch_us = 5.0\n[[soc_efficiency]]\nsoc = "kirin-900e"\nmatmul = 0.2',
            ),
            "field 'soc_efficiency\\[0\\].soc' = 'kirin-900e': not a shipped SoC profile "
            "\\(did you mean 'kirin-9000e'",
        ),
        (
            ("launch_us = 5.0", 'launch_us = 5.0\n[[soc_efficiency]]\nsoc = " "\nmatmul = 0.2'),
            "field 'soc_efficiency\\[0\\].soc' = ' ': empty",
        ),
        # issue 44: [float16], a compiled graph, a static KV cache
        (
            ("launch_us = 5.0", 'launch_us = 5.0\n[float16]\nfp16 = "half"'),
            "field 'float16.fp16' = 'half': must be one of",
        ),
        (
            ("launch_us = 5.0", 'launch_us = 5.0\n[float16]\nbf16f = "native"'),
            "unknown field 'float16.bf16f'",
        ),
        (
            (
                "launch_us = 5.0",
                'launch_us = 5.0\n[[float16.core]]\nname = "silver"\nbf16 = "slow"',
            ),
            "field 'float16.core\\[0\\].bf16' = 'slow': must be one of",
        ),
        (
            (
                "launch_us = 5.0",
                'launch_us = 5.0\n[[float16.core]]\nname = "silver"\n[[float16.core]]\nname = "silver"',
            ),
            "field 'float16.core\\[1\\].name' = 'silver': another entry names that core kind",
        ),
        (
            ("launch_us = 5.0", 'launch_us = 5.0\n[[float16.core]]\nname = ""'),
            "field 'float16.core\\[0\\].name' = '': empty",
        ),
        (
            ("launch_us = 5.0", 'launch_us = 5.0\ngraph = "fused"'),
            "field 'overhead.graph' = 'fused': must be one of",
        ),
        (
            ("launch_us = 5.0", "launch_us = 5.0\ngraph_us = 100.0"),
            "field 'overhead.graph_us' = 100.0: only a compiled graph",
        ),
        (
            ("launch_us = 5.0", 'launch_us = 5.0\ngraph = "compiled"\ngraph_us = -1.0'),
            "field 'overhead.graph_us' = -1.0: must be >= 0",
        ),
        (('unit = "cpu"', 'unit = "cpu"\nkv_cache = "ring"'), "field 'kv_cache' = 'ring'"),
        (
            ('unit = "cpu"', 'unit = "cpu"\nkv_context = 1024'),
            "field 'kv_context' = 1024: only a static KV cache",
        ),
        (
            ('unit = "cpu"', 'unit = "cpu"\nkv_cache = "static"\nkv_context = -5'),
            "field 'kv_context' = -5: must be >= 0",
        ),
    ],
)
def test_bad_runtime_files_name_file_field_and_value(tmp_path, edit, message):
    path = tmp_path / "rt.toml"
    path.write_text(GOOD.replace(*edit))
    if message is None:
        assert load_runtime(path).name == "x"
        return
    with pytest.raises(ValueError, match=message) as e:
        load_runtime(path)
    assert str(path) in str(e.value)


def test_a_bad_runtime_is_exit_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "rt.toml"
    path.write_text(GOOD.replace("memory = 0.5", "memory = 0"))
    assert main(["predict", "--profile", "dimensity-9300", "--runtime", str(path)]) == 2
    err = capsys.readouterr().err
    assert "efficiency.memory" in err and str(path) in err and "Traceback" not in err
    assert main(["predict", "--profile", "dimensity-9300", "--runtime", "no-such-runtime"]) == 2


def test_a_soc_without_a_runtime_must_give_the_runtime_fields(tmp_path):
    text = (
        _shipped_path("dimensity-9300")
        .read_text()
        .replace('default_runtime = "llama.cpp-cpu"\n', "")
    )
    path = tmp_path / "soc.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match="missing field 'compute.compute_efficiency'"):
        load_profile(path)


def _shipped_path(name):
    from importlib import resources

    return resources.files("harmony_ref") / "device" / "profiles" / f"{name}.toml"


# --- NPU families: a runtime on the NPU runs on its own vendor's NPU only ---------------------


@pytest.mark.parametrize(
    "soc, runtime, theirs",
    [
        ("dimensity-9300", "qnn-npu", "MediaTek APU"),
        ("kirin-9000e", "qnn-npu", "HiSilicon Da Vinci NPU"),
        ("snapdragon-8-gen-3", "mslite-npu", "Qualcomm Hexagon NPU"),
        ("snapdragon-8-elite", "mslite-npu", "Qualcomm Hexagon NPU"),
        ("harmony-flagship", "qnn-npu", "HiSilicon Da Vinci NPU"),
    ],
)
def test_an_npu_runtime_on_another_vendors_npu_is_refused_naming_both(soc, runtime, theirs):
    with pytest.raises(ValueError) as e:
        load_profile(soc, runtime)
    msg = str(e.value)
    assert runtime in msg and soc in msg and theirs in msg and len(msg) < 200


def test_each_npu_runtime_runs_on_its_own_family():
    assert load_profile("snapdragon-8-gen-3", "qnn-npu").name == "snapdragon-8-gen-3+qnn-npu"
    assert load_profile("kirin-990-5g", "mslite-npu").name == "kirin-990-5g+mslite-npu"
    assert load_profile("harmony-flagship", "mslite-npu").npu_family == "davinci"


@pytest.mark.parametrize(
    "soc_string, family",
    [
        ("Qualcomm SM8850", "hexagon"),  # Snapdragon 8 Elite Gen 5, written as its part number
        ("Snapdragon 8 Elite Gen 5", "hexagon"),
        ("MediaTek MT6991", "mediatek-apu"),
        ("MediaTek Dimensity 9400", "mediatek-apu"),
        ("HiSilicon Kirin 9020", "davinci"),
        ("Google Tensor G4", "tensor-tpu"),
        ("Samsung Exynos 2500", "samsung-npu"),
        ("Kirin 810-class (assumption)", "davinci"),
        ("some phone", ""),
    ],
)
def test_a_soc_profile_without_npu_family_takes_its_soc_strings(tmp_path, soc_string, family):
    """SoC profiles written before the field (or without it) still load: the family comes from
    the vendor or product word of `soc`; one naming no vendor has none, and an NPU runtime on it
    asks for the field."""
    text = (
        _shipped_path("dimensity-9300")
        .read_text()
        .replace('npu_family = "mediatek-apu"', "")
        .replace('soc = "MediaTek MT6989"', f"soc = {soc_string!r}")
    )
    path = tmp_path / "phone.toml"
    path.write_text(text)
    assert load_soc(path).npu_family == family
    if not family:
        with pytest.raises(ValueError, match="names no NPU family \\(set field 'npu_family'"):
            load_profile(path, "qnn-npu")


def test_npu_family_on_a_profile_without_an_npu_is_refused(tmp_path):
    text = _shipped_path("harmony-lowend").read_text()
    path = tmp_path / "phone.toml"
    path.write_text(text.replace('name = "harmony-lowend"', 'name = "x"\nnpu_family = "hexagon"'))
    with pytest.raises(ValueError, match="field 'npu_family' = 'hexagon': this profile has no NPU"):
        load_soc(path)
    assert load_soc("harmony-lowend").npu_family == ""


@pytest.mark.parametrize(
    "edit, message",
    [
        (('unit = "cpu"', 'unit = "npu"'), "missing field 'npu': a runtime on the NPU names"),
        (('unit = "cpu"', 'unit = "cpu"\nnpu = "hexagon"'), "field 'npu' = 'hexagon': only a"),
        (('unit = "cpu"', 'unit = "npu"\nnpu = "apu"'), "field 'npu' = 'apu': must be one of"),
    ],
)
def test_a_runtime_names_its_npu_family_exactly_when_it_runs_on_the_npu(tmp_path, edit, message):
    path = tmp_path / "rt.toml"
    path.write_text(GOOD.replace(*edit))
    with pytest.raises(ValueError, match=message):
        load_runtime(path)


def test_predict_refuses_qnn_on_a_dimensity_with_exit_2(capsys):
    assert main(["predict", "--profile", "dimensity-9300", "--runtime", "qnn-npu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "qnn-npu" in err and "dimensity-9300" in err
    assert "Traceback" not in err


def test_run_takes_a_runtime_refuses_a_mismatch_and_records_it(capsys):
    assert main(["run", "--profile", "kirin-9000e", "--runtime", "qnn-npu", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "qnn-npu" in err and "kirin-9000e" in err
    argv = [
        "run",
        "--profile",
        "kirin-9000e",
        "--runtime",
        "llama.cpp-cpu",
        "--model",
        "llama-3.2-1b",
        "--policy",
        "int4-g32",
        "--skip",
        "host,accuracy,coldstart,thermal",
        "--json",
    ]
    assert main(argv) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["config"]["runtime"] == "llama.cpp-cpu"
    assert rec["parts"]["predicted"]["model_runtime"] == "llama.cpp-cpu"


def test_a_runtimes_prompt_sync_prices_multi_row_ops_at_more_than_one_thread(tmp_path):
    """[overhead] prompt_sync_us_per_thread 50 on executorch-xnnpack (xeon-2core-kvm): at 2
    threads a prefill takes 50 us more per multi-row op (its launches minus the head's one-row
    op), a decode step and a 1-thread prefill what they took unset; written and read back."""
    import dataclasses

    from harmony_ref.calibrate.fit_runtime import runtime_toml
    from harmony_ref.device.cost import phase_cost

    base = load_runtime("executorch-xnnpack")
    own = dataclasses.replace(
        base, overhead=dataclasses.replace(base.overhead, prompt_sync_us_per_thread=50.0)
    )
    cfg = RunConfig.from_names("smollm2-135m", "w4a8-g32", 64, 8, 128)
    for threads in (1, 2):
        a, b = (load_profile("xeon-2core-kvm", rt, threads) for rt in (base, own))
        pa, pb = phase_cost(a, cfg, "prefill"), phase_cost(b, cfg, "prefill")
        multi_row = pa.kernel_launches - 1  # the head runs on the last position only
        want = 50e-6 * multi_row * (threads - 1)
        assert pb.time_s - pa.time_s == pytest.approx(want, rel=0.05, abs=1e-12), threads
        assert pb.launch_s - pa.launch_s == pytest.approx(want, rel=0.05, abs=1e-12)
        assert phase_cost(b, cfg, "decode").time_s == phase_cost(a, cfg, "decode").time_s
    assert "prompt_sync_us_per_thread" not in runtime_toml(base)
    path = tmp_path / "rt.toml"
    path.write_text(runtime_toml(own))
    assert load_runtime(path).overhead.prompt_sync_us_per_thread == 50.0


def test_a_runtimes_attention_cost_per_position_prices_each_layers_decode_positions(tmp_path):
    """[overhead] attention_ns_per_position 1000 on executorch-xnnpack (xeon-2core-kvm): a decode
    step takes 1 us more per cached position in each layer (at 2 threads over 1 + the thread
    share), a prefill what it took unset; written and read back, left out when 0."""
    import dataclasses

    from harmony_ref.calibrate.fit_runtime import runtime_toml
    from harmony_ref.device.cost import phase_cost

    base = load_runtime("executorch-xnnpack")
    assert base.overhead.attention_ns_per_position == 0.0  # no shipped prediction moves
    own = dataclasses.replace(
        base, overhead=dataclasses.replace(base.overhead, attention_ns_per_position=1000.0)
    )
    cfg = RunConfig.from_names("smollm2-135m", "w4a8-g32", 64, 8, 128)
    for threads in (1, 2):
        a, b = (load_profile("xeon-2core-kvm", rt, threads) for rt in (base, own))
        share = 1 + (threads - 1) * a.cpu.thread_share
        # steps attend 65..72 positions (their mean 68.5) in each of the 30 layers
        want = 1e-6 * 68.5 * cfg.spec.n_layers / share
        da, db = phase_cost(a, cfg, "decode"), phase_cost(b, cfg, "decode")
        assert db.time_s - da.time_s == pytest.approx(want, rel=1e-9), threads
        assert phase_cost(b, cfg, "prefill").time_s == phase_cost(a, cfg, "prefill").time_s
    assert "attention_ns_per_position" not in runtime_toml(base)
    path = tmp_path / "rt.toml"
    path.write_text(runtime_toml(own))
    assert load_runtime(path).overhead.attention_ns_per_position == 1000.0
