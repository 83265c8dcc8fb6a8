"""SimulatedDevice: the standard metric names, exact and deterministic; and the CLI commands."""

import json

import pytest

from harmony_ref.backends.base import Backend
from harmony_ref.backends.simulated import SimulatedDevice
from harmony_ref.cli import main
from harmony_ref.config import RunConfig, Scenario

STANDARD = {
    "ttft_ms": "lower",
    "prefill_ms": "lower",
    "decode_step_ms": "lower",
    "decode_tokens_per_s": "higher",
    "e2e_ms": "lower",
    "peak_memory_mb": "lower",
    "weights_mb": "lower",
    "kv_cache_mb": "lower",
    "kernel_launches_per_token": "lower",
    "launch_overhead_pct": "lower",
}


def test_standard_metrics_exact_with_directions():
    dev = SimulatedDevice("harmony-midrange")
    assert dev.name == "simulated" and isinstance(dev, Backend)
    m = dev.predict(RunConfig.from_names())
    run = dev.run(RunConfig.from_names())  # the backend interface: the prediction, as a Measurement
    assert (
        run.metrics.to_dict() == m.to_dict()
        and run.findings == ()
        and run.config == RunConfig.from_names()
    )
    for name, direction in STANDARD.items():
        assert m[name].direction == direction, name
    assert all(metric.kind == "exact" for metric in m)
    assert m.value("decode_tokens_per_s") == pytest.approx(1000.0 / m.value("decode_step_ms"))
    assert m.value("e2e_ms") > m.value("ttft_ms") > m.value("prefill_ms") > 0
    assert m.value("kv_cache_mb") == pytest.approx(2 * 28 * 8 * 128 * 2048 * 2 / 1e6)


def test_prediction_is_pure_and_deterministic():
    config = RunConfig.from_names(
        model="qwen2.5-1.5b", policy="mixed", prompt_tokens=200, new_tokens=50
    )
    a = SimulatedDevice("harmony-flagship").predict(config).to_dict()
    b = SimulatedDevice("harmony-flagship").run(config).metrics.to_dict()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_encoder_predicts_a_forward_pass():
    config = RunConfig.from_names(
        model="all-minilm-l6", policy="int8", prompt_tokens=128, new_tokens=0, context_tokens=128
    )
    m = SimulatedDevice("harmony-lowend").predict(config)
    assert "decode_tokens_per_s" not in m and m.value("e2e_ms") == m.value("ttft_ms") > 0


def test_bad_scenarios_raise():
    with pytest.raises(ValueError, match="exceeds context_tokens"):
        Scenario(prompt_tokens=2000, new_tokens=100, context_tokens=2048)
    with pytest.raises(ValueError, match="'batch' = 0"):
        Scenario(batch=0)
    with pytest.raises(ValueError, match="max_positions = 512"):
        RunConfig.from_names(model="all-minilm-l6", prompt_tokens=1024, new_tokens=0)
    with pytest.raises(ValueError, match="kv_dtype"):
        RunConfig.from_names(kv_dtype="int4")
    with pytest.raises(ValueError, match="new_tokens = 0: llama-3.2-3b is a decoder"):
        RunConfig.from_names(new_tokens=0)  # no first token: TTFT would exceed e2e


def test_cli_profiles(capsys):
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    for name in ("harmony-flagship", "harmony-midrange", "harmony-lowend"):
        assert name in out
    assert main(["profiles", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["harmony-flagship"]["memory"]["dram_bandwidth_gbps"] == 68.3
    assert data["harmony-lowend"]["compute"]["cube_int8_tops"] == 0.0


def test_cli_predict(capsys):
    args = [
        "predict",
        "--model",
        "llama-3.2-3b",
        "--policy",
        "int4-g128",
        "--profile",
        "harmony-flagship",
        "--prompt",
        "256",
        "--new",
        "64",
        "--context",
        "1024",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "decode_tokens_per_s" in out and "ttft_ms" in out
    assert main(args + ["--json"]) == 0
    fused = json.loads(capsys.readouterr().out)
    assert main(args + ["--json", "--no-fusion"]) == 0
    raw = json.loads(capsys.readouterr().out)
    launches = lambda d: d["metrics"]["kernel_launches_per_token"]["value"]  # noqa: E731
    assert launches(fused) < launches(raw)
    direct = SimulatedDevice("harmony-flagship").predict(
        RunConfig.from_names(prompt_tokens=256, new_tokens=64, context_tokens=1024)
    )
    assert fused["metrics"]["ttft_ms"]["value"] == direct.value("ttft_ms")


def test_cli_predict_breakdown(capsys):
    assert main(["predict", "--breakdown", "--json", "--new", "16"]) == 0
    out = json.loads(capsys.readouterr().out)
    prefill, decode = out["breakdown"].values()
    assert prefill[0]["kind"] == "matmul"  # the projections dominate
    assert sum(r["time_pct"] for r in decode) == pytest.approx(100.0)
    assert (
        sum(r["launches"] for r in decode) == out["metrics"]["kernel_launches_per_token"]["value"]
    )
    assert "attention" in {r["kind"] for r in decode}


def test_cli_predict_bad_input_is_a_clean_error(capsys):
    assert main(["predict", "--profile", "harmony-pro"]) == 2
    assert "unknown profile 'harmony-pro'" in capsys.readouterr().err
    assert main(["predict", "--prompt", "4000"]) == 2
    assert "exceeds context_tokens" in capsys.readouterr().err
    assert main(["predict", "--policy", "mixed", "--profile", "harmony-lowend"]) == 0
    assert "exceeds the app budget" in capsys.readouterr().out


def test_device_benchmarks_declare_matching_params():
    import inspect

    import bench.bench_device as b

    for _, cls in inspect.getmembers(b, inspect.isclass):
        if cls.__module__ == b.__name__ and hasattr(cls, "params"):
            assert len(cls.params) == len(cls.param_names), cls.__name__
            obj = cls()
            args = [p[0] for p in cls.params]
            args = ([obj.setup_cache()] if hasattr(cls, "setup_cache") else []) + args
            obj.setup(*args)
            for name in dir(cls):
                if name.startswith("track_"):
                    assert getattr(obj, name)(*args) > 0, name
                    assert getattr(cls, name).unit, name
