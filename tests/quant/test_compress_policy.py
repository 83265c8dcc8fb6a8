"""Policy [prune] and [activations] tables (quant/compress.py): parsed, written back by
to_toml to an equal policy, per-block ranges, and every bad value refused with the file, field
and value named; the CLI turns that into one line and exit 2. The device model costs the pruned
shapes (fewer weight bytes, faster predicted decode) and refuses per-block shapes it cannot
represent."""

import pytest
import tomllib

from harmony_ref.quant.policy import load_policy, policy_from_dict

GOOD = """
name = "p"
default = "int8"
[prune]
ffn = 0.25
heads = 0.34
head_unit = "kv"
[prune.blocks]
"0-2" = { ffn = 0.5 }
"7" = { heads = 0.0 }
[activations]
granularity = "per-channel"
calibration = "random"
samples = 100
sample_tokens = 32
seed = 3
"""


def test_parse_and_round_trip():
    pol = policy_from_dict(tomllib.loads(GOOD), "p.toml")
    assert pol.prune.ratios(1) == (0.5, 0.34) and pol.prune.ratios(7) == (0.25, 0.0)
    assert pol.prune.ratios(5) == (0.25, 0.34) and pol.prune.head_unit == "kv"
    a = pol.activations
    assert (a.granularity, a.calibration, a.samples, a.sample_tokens, a.seed) == (
        "per-channel",
        "random",
        100,
        32,
        3,
    )
    assert policy_from_dict(tomllib.loads(pol.to_toml()), "q.toml") == pol
    plain = load_policy("int8")
    assert plain.prune is None and plain.activations is None
    assert "[prune]" not in plain.to_toml()


@pytest.mark.parametrize(
    "table,match",
    [
        ({"prune": {"ffn": 1.0}}, r"p.toml: field 'prune.ffn' = 1.0: must be a number in \[0, 1\)"),
        ({"prune": {"ffn": -0.1}}, "'prune.ffn' = -0.1"),
        ({"prune": {"heads": "half"}}, "'prune.heads' = 'half'"),
        ({"prune": {"head_unit": "group"}}, "'prune.head_unit' = 'group': must be one of"),
        ({"prune": {"ffm": 0.1}}, r"'prune': unknown field 'ffm' \(did you mean 'ffn'\?\)"),
        ({"prune": {"blocks": {"x": {"ffn": 0.1}}}}, "key 'x'"),
        ({"prune": {"blocks": {"3-1": {"ffn": 0.1}}}}, "range end before its start"),
        ({"prune": {"blocks": {"1": {"mlp": 0.1}}}}, "'prune.blocks.1'"),
        ({"prune": {"blocks": {"1": {"ffn": 2}}}}, "'prune.blocks.1.ffn' = 2"),
        ({"prune": 0.5}, "'prune' must be a table"),
        ({"activations": {"granularity": "per-row"}}, "'activations.granularity' = 'per-row'"),
        ({"activations": {"calibration": "heldout"}}, "'activations.calibration' = 'heldout'"),
        ({"activations": {"samples": 0}}, r"'activations.samples' = 0: must be an integer in \[1"),
        ({"activations": {"sample_tokens": 1.5}}, "'activations.sample_tokens' = 1.5"),
        ({"activations": {"bits": 4}}, r"'activations': unknown field 'bits'"),
    ],
)
def test_bad_fields_are_named(table, match):
    with pytest.raises(ValueError, match=match):
        policy_from_dict({"default": "int8", **table}, "p.toml")


def test_cli_bad_policy_exits_2(tmp_path, capsys):
    from harmony_ref.cli import main

    bad = tmp_path / "bad.toml"
    bad.write_text('default = "int8"\n[prune]\nffn = 1.5\n')
    assert main(["predict", "--policy", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.toml: field 'prune.ffn' = 1.5" in err and "Traceback" not in err
    assert len(err.splitlines()) == 1


def test_device_model_costs_pruned_shapes(tmp_path):
    from harmony_ref.config import RunConfig
    from harmony_ref.device.cost import scenario_timing
    from harmony_ref.device.memory import weights_bytes
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.model.graph import build_graph
    from harmony_ref.model.prune import pruned_spec
    from harmony_ref.model.spec import get_spec

    spec = get_spec("llama-3.2-1b")  # 32 query heads, 8 KV heads, FFN 8192
    prof = load_profile("harmony-flagship")
    base = policy_from_dict({"name": "b", "default": "int4-g32"}, "b.toml")
    pruned = policy_from_dict(
        {"name": "p", "default": "int4-g32", "prune": {"ffn": 0.5, "heads": 0.25}}, "p.toml"
    )
    s = pruned_spec(spec, pruned.prune)
    assert (s.n_heads, s.n_kv_heads, s.intermediate) == (24, 8, 4096)
    g = build_graph(spec, pruned, "decode", context=16)
    ffn = [op for op in g.ops if op.layer.endswith("mlp.down_proj")][0]
    assert ffn.k == 4096
    assert weights_bytes(spec, pruned) < 0.8 * weights_bytes(spec, base)
    fast = scenario_timing(prof, RunConfig(spec=spec, policy=pruned)).decode_tokens_per_s
    slow = scenario_timing(prof, RunConfig(spec=spec, policy=base)).decode_tokens_per_s
    assert fast > 1.2 * slow
    uneven = policy_from_dict(
        {"default": "int8", "prune": {"ffn": 0.5, "blocks": {"0": {"ffn": 0.0}}}}, "u.toml"
    )
    with pytest.raises(ValueError, match="one block shape per model"):
        build_graph(spec, uneven, "decode", context=16)
