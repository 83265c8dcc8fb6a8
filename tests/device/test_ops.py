"""Operator support and CPU fallback: a hand-worked fallback op's cost, the op-kind lists in the
profiles (bad values named by file, field and value), check-ops and its exit codes."""

import dataclasses
import json
from importlib import resources

import pytest

from harmony_ref.cli import main
from harmony_ref.config import RunConfig
from harmony_ref.device.cost import config_graph, scenario_timing
from harmony_ref.device.cost_breakdown import fallback_rows
from harmony_ref.device.ops import OpsUnsupported, check_ops, fallback_ops, placement
from harmony_ref.device.runtime import load_profile
from harmony_ref.model.graph import OP_TYPES, op_types_used
from harmony_ref.model.spec import get_spec

TINY = """name = "tiny"
kind = "decoder"
n_layers = 1
hidden = 64
n_heads = 4
n_kv_heads = 2
head_dim = 16
intermediate = 128
vocab = 1000
max_positions = 4096
tie_embeddings = true
norm_eps = 1e-5
activation = "silu"
rope_theta = 10000.0
"""


def _without(profile, op):
    npu = dataclasses.replace(profile.npu, ops=tuple(t for t in profile.npu.ops if t != op))
    return dataclasses.replace(profile, npu=npu)


def test_a_fallback_ops_cost_worked_by_hand(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    cfg = RunConfig.from_names(
        model=str(path), policy="fp16", prompt_tokens=8, new_tokens=1, context_tokens=16
    )
    prof = _without(load_profile("harmony-flagship"), "silu")
    assert fallback_ops(prof, cfg) == {"silu"}
    g = config_graph(prof, cfg, "decode", context=9)
    [row] = fallback_rows(prof, [("decode step", g)])
    # One decode row through SiLU over intermediate = 128 values, by hand on harmony-flagship:
    #   vector work 128 x 4 flops = 512 on the CPU at 344 GFLOP/s x 0.5        = 2.977 ns
    #   DRAM: 128 x 2 bytes in + 128 x 2 out = 512 B at 68.3 GB/s x 0.7           = 10.709 ns
    #   NPU <-> CPU copy of the same 512 B at npu.transfer_gbps = 20 GB/s         = 25.6 ns
    #   a CPU dispatch (cpu.launch_us = 8) + the extra NPU launch (20 us)         = 28 us
    # time = max(2.977 ns, 10.709 ns) + 25.6 ns + 28 us = 28.036309 us
    want_ms = (max(512 / 172e9, 512 / (68.3e9 * 0.7)) + 512 / 20e9 + 28e-6) * 1e3
    assert row["op"] == "silu" and row["runs"] == 1
    assert row["time_ms"] == pytest.approx(want_ms, rel=1e-9)
    assert row["transfer_ms"] == pytest.approx(512 / 20e9 * 1e3, rel=1e-9)
    assert row["launch_ms"] == pytest.approx(28e-3, rel=1e-9)
    # The op is left unfused: on the NPU it rides on gate_proj (EPILOGUE_KINDS); here it cannot.
    kinds = [op.op_type for op, _ in g.unique_ops()]
    assert "silu" in kinds
    assert "silu" not in [
        op.op_type
        for op, _ in config_graph(
            load_profile("harmony-flagship"), cfg, "decode", context=9
        ).unique_ops()
    ]
    t = scenario_timing(prof, cfg)
    assert t.decode.fallback_runs == 1
    assert t.decode.fallback_s == pytest.approx(want_ms / 1e3, rel=1e-9)


def test_gemma_gelu_tanh_falls_back_on_the_shipped_npus():
    cfg = RunConfig.from_names(model="gemma-2b")
    assert "gelu_tanh" in op_types_used(cfg.spec, cfg.policy)
    for name in ("harmony-flagship", "harmony-midrange"):
        assert fallback_ops(load_profile(name), cfg) == {"gelu_tanh"}
    assert fallback_ops(load_profile("harmony-lowend"), cfg) == frozenset()  # no NPU: all CPU
    from harmony_ref.backends.simulated import SimulatedDevice

    m = SimulatedDevice("harmony-flagship").predict(cfg)
    assert m.value("npu_fallback_ops") == get_spec("gemma-2b").n_layers
    assert m.value("npu_fallback_ms_per_token") > 0
    m = SimulatedDevice("harmony-flagship").predict(RunConfig.from_names())
    assert m.value("npu_fallback_ops") == 0 and m.value("npu_fallback_ms_per_token") == 0


def test_the_shipped_op_lists():
    for name in ("harmony-flagship", "harmony-midrange", "harmony-lowend"):
        p = load_profile(name)
        assert set(p.npu.cpu_ops) == set(OP_TYPES)  # the CPU runtime runs everything
    assert load_profile("harmony-lowend").npu.ops == ()
    assert placement(load_profile("harmony-lowend"), "matmul") == "cpu"


def test_an_op_no_backend_runs_is_refused(tmp_path, capsys):
    prof = load_profile("harmony-flagship")
    npu = dataclasses.replace(
        prof.npu,
        ops=tuple(t for t in prof.npu.ops if t != "silu"),
        cpu_ops=tuple(t for t in prof.npu.cpu_ops if t != "silu"),
    )
    bad = dataclasses.replace(prof, npu=npu)
    object.__setattr__(bad, "source", "phone.toml")
    cfg = RunConfig.from_names()
    rows = {r["op"]: r["runs_on"] for r in check_ops(bad, cfg)}
    assert rows["silu"] == "none" and rows["matmul"] == "npu"
    with pytest.raises(OpsUnsupported, match=r"phone.toml: field 'npu' does not list op 'silu'"):
        scenario_timing(bad, cfg)
    # The same through the CLI, from a profile file.
    text = (resources.files("harmony_ref") / "device/profiles/harmony-flagship.toml").read_text()
    path = tmp_path / "phone.toml"
    path.write_text(text.replace('"silu", ', ""))
    assert main(["check-ops", "--profile", str(path), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["unsupported"] == ["silu"] and out["exit_code"] == 1
    assert main(["check-ops", "--model", "gemma-2b"]) == 0
    out = capsys.readouterr().out
    assert "gelu_tanh" in out and "CPU fallback" in out
    assert main(["predict", "--profile", str(path)]) == 2
    assert "does not list op 'silu'" in capsys.readouterr().err


FLAGSHIP = "device/profiles/harmony-flagship.toml"


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            ('"silu", "gelu", "gate_mul"', '"silu", "swish", "gate_mul"'),
            r"field 'npu.ops' has 'swish': each item must be one of",
        ),
        (
            ('"silu", "gelu", "gate_mul"', '"silu", "silu", "gate_mul"'),
            r"field 'npu.ops' lists 'silu' twice",
        ),
        (
            ("transfer_gbps = 20.0", "transfer_gbps = -1.0"),
            r"field 'npu.transfer_gbps' = -1.0: must be >=",
        ),
        (
            ("memory_mb = 3072.0", 'memory_mb = "lots"'),
            r"field 'npu.memory_mb' = 'lots': expected float",
        ),
        (("cores = 3  #", "cores = 0  #"), r"field 'cpu.clusters\[1\].cores' = 0: must be >= 1"),
        (("freq_ghz = 2.05", "freq_ghz = -2.05"), r"field 'cpu.clusters\[2\].freq_ghz' = -2.05"),
        (
            ('name = "little"', 'name = "big"'),
            r"field 'cpu.clusters\[2\].name' = 'big': another cluster",
        ),
        (
            ("sync_us_per_thread = 0.5", "sync_us_per_thread = -0.5"),
            r"field 'cpu.sync_us_per_thread' = -0.5",
        ),
        (("sync_us_per_thread = 0.5", "sync_us = 0.5"), r"unknown field 'cpu.sync_us' = 0.5"),
        (
            ('name = "prime"', 'name = "prime"\nghz = 3.0'),
            r"unknown field 'cpu.clusters\[0\].ghz' = 3.0",
        ),
    ],
)
def test_bad_new_profile_fields_name_file_field_value(tmp_path, edit, message):
    text = (resources.files("harmony_ref") / FLAGSHIP).read_text()
    assert edit[0] in text
    path = tmp_path / "bad.toml"
    path.write_text(text.replace(*edit, 1))
    with pytest.raises(ValueError, match=f"bad.toml: {message}"):
        load_profile(str(path))


def test_a_profile_without_an_npu_lists_no_npu_ops(tmp_path):
    text = (resources.files("harmony_ref") / "device/profiles/harmony-lowend.toml").read_text()
    path = tmp_path / "low.toml"
    path.write_text(text.replace("ops = []", 'ops = ["matmul"]'))
    with pytest.raises(
        ValueError, match=r"low.toml: field 'npu.ops' = \['matmul'\]: this profile has no NPU"
    ):
        load_profile(str(path))


def test_bad_profile_field_is_exit_2_on_the_cli(tmp_path, capsys):
    text = (resources.files("harmony_ref") / FLAGSHIP).read_text()
    path = tmp_path / "bad.toml"
    path.write_text(text.replace("transfer_gbps = 20.0", "transfer_gbps = 0.0"))
    assert main(["check-ops", "--profile", str(path)]) == 2
    err = capsys.readouterr().err
    assert "bad.toml: field 'npu.transfer_gbps' = 0.0" in err and "Traceback" not in err
