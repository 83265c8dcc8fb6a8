"""harmony_ref.config: the one run config, RunConfig, and its dict form (what records hold)."""

import dataclasses
import json
from pathlib import Path

import pytest

from harmony_ref.config import RunConfig, Scenario
from harmony_ref.model.spec import get_spec
from harmony_ref.quant.policy import load_policy

ROOT = Path(__file__).resolve().parents[1]


def test_dict_round_trip_names_what_was_loaded():
    cfg = RunConfig.from_names(
        "llama-3.2-3b",
        "int4-g128",
        prompt_tokens=256,
        new_tokens=64,
        context_tokens=1024,
        batch=2,
        profile="harmony-midrange",
    )
    d = cfg.to_dict()
    assert d == {
        "model": "llama-3.2-3b",
        "policy": "int4-g128",
        "profile": "harmony-midrange",
        "backend": "simulated",
        "scenario": {"prompt_tokens": 256, "new_tokens": 64, "context_tokens": 1024, "batch": 2},
    }
    assert list(d) == ["model", "policy", "profile", "backend", "scenario"]  # as records have it
    assert RunConfig.from_dict(d) == cfg and RunConfig.from_dict(d).to_dict() == d


def test_non_defaults_and_user_files_survive_the_round_trip(tmp_path):
    policy = tmp_path / "mine.toml"
    policy.write_text('name = "mine"\ndefault = "int8"\n')
    cfg = RunConfig.from_names(
        "qwen2.5-0.5b",
        str(policy),
        fused=False,
        kv_dtype="int8",
        backend="command",
        backend_options={"command": "x", "format": "mslite"},
    )
    d = cfg.to_dict()
    assert d["policy"] == str(policy) and d["fused"] is False and d["kv_dtype"] == "int8"
    assert d["backend_options"] == {"command": "x", "format": "mslite"}
    back = RunConfig.from_dict(json.loads(json.dumps(d)))
    assert back == cfg and back.options == {"command": "x", "format": "mslite"}


def test_the_committed_baseline_config_reads_back_unchanged():
    data = json.loads((ROOT / "results" / "baseline.json").read_text())["config"]
    cfg = RunConfig.from_dict(data, "results/baseline.json")
    assert cfg.spec == get_spec(data["model"]) and cfg.policy == load_policy(data["policy"])
    assert (cfg.fused, cfg.kv_dtype) == (True, "fp16")  # absent: the defaults
    # a run record's config is the RunConfig's dict plus the decoder its accuracy part scored
    # (job/main.py adds `accuracy_model`; it follows from the config and is not read back)
    assert data.pop("accuracy_model") == "smollm2-135m"
    assert cfg.to_dict() == data


def test_in_memory_specs_and_policies_serialise_by_name():
    cfg = RunConfig.from_names("qwen2.5-0.5b", "int8")
    scaled = cfg.with_spec(dataclasses.replace(cfg.spec, name="qwen2.5-0.5b/w2", hidden=448))
    assert scaled.to_dict()["model"] == "qwen2.5-0.5b/w2" and scaled.spec.hidden == 448


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.pop("profile"), "field 'config.profile': missing"),
        (lambda d: d.update(model=""), "field 'config.model': must be a non-empty string"),
        (
            lambda d: d["scenario"].update(batch=0),
            "field 'config.scenario.batch': must be an integer >= 1",
        ),
        (lambda d: d.update(kv_dtype="int4"), "field 'config.kv_dtype': must be one of"),
        (lambda d: d.update(fused="yes"), "field 'config.fused': must be true or false"),
        (lambda d: d.update(backend_options={"command": 1}), "field 'config.backend_options'"),
        (lambda d: d.update(model="gpt-9"), "config: unknown model 'gpt-9'"),
        (lambda d: d.update(policy="no-such"), "config: unknown policy 'no-such'"),
        (lambda d: d.update(backend="fpga"), "field 'backend' = 'fpga'"),
        (
            lambda d: d["scenario"].update(prompt_tokens=2000, new_tokens=100),
            "exceeds context_tokens",
        ),
    ],
)
def test_bad_dicts_name_the_source_and_the_field(change, message):
    d = RunConfig.from_names().to_dict()
    change(d)
    with pytest.raises(ValueError, match=f"rec.json: .*{message}"):
        RunConfig.from_dict(d, "rec.json")


def test_scenario_and_config_checks():
    with pytest.raises(ValueError, match="new_tokens = 0: llama-3.2-3b is a decoder"):
        RunConfig.from_names(new_tokens=0)
    with pytest.raises(ValueError, match="exceeds all-minilm-l6's max_positions"):
        RunConfig.from_names("all-minilm-l6", prompt_tokens=1024, new_tokens=0)
    with pytest.raises(ValueError, match="field 'profile'"):
        RunConfig(get_spec("llama-3.2-1b"), load_policy("int8"), Scenario(), profile="")
    assert RunConfig.from_names(fused=False, kv_dtype="int8").label.endswith("/unfused/kv-int8")


def test_a_runtime_is_stored_only_when_given_and_reads_back():
    plain = RunConfig.from_names("llama-3.2-1b", "int4-g32", profile="dimensity-9300")
    assert "runtime" not in plain.to_dict()  # records written before the field are unchanged
    cfg = RunConfig.from_names(
        "llama-3.2-1b", "int4-g32", profile="snapdragon-8-gen-3", runtime="llama.cpp-cpu"
    )
    assert cfg.to_dict()["runtime"] == "llama.cpp-cpu"
    assert RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="field 'config.runtime': must be a string, got 3"):
        RunConfig.from_dict({**cfg.to_dict(), "runtime": 3}, "rec.json")


def test_the_parts_run_on_the_configs_runtime():
    from harmony_ref.job.main import PARTS, run_part

    by_name = {p.name: p for p in PARTS}
    base = dict(model="llama-3.2-1b", policy="int4-g32", profile="snapdragon-8-gen-3")
    npu = run_part(by_name["predicted"], RunConfig.from_names(**base))
    cpu = run_part(by_name["predicted"], RunConfig.from_names(**base, runtime="llama.cpp-cpu"))
    # QNN on the Hexagon NPU prefills far faster than llama.cpp on the CPU cores
    assert npu["prefill_tokens_per_s"].value > 5 * cpu["prefill_tokens_per_s"].value
    with pytest.raises(ValueError, match="runtime 'qnn-npu' runs on a Qualcomm Hexagon NPU"):
        run_part(
            by_name["coldstart"],
            RunConfig.from_names(**{**base, "profile": "kirin-9000e"}, runtime="qnn-npu"),
        )
