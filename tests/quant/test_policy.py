import numpy as np
import pytest

from harmony_ref.quant.int4 import quantize_int4
from harmony_ref.quant.int8 import quantize_int8
from harmony_ref.quant.policy import FP16, INT8, load_policy, parse_format, policy_from_dict, shipped_policies


def test_shipped_policies_load():
    names = shipped_policies()
    for required in ("fp16", "int8", "int4-g32", "int4-g128", "mixed"):
        assert required in names
    for name in names:
        assert load_policy(name).name == name


def test_mixed_policy_recipe():
    p = load_policy("mixed")
    assert p.format_for("model.layers.3.mlp.gate_proj") == FP16
    assert p.format_for("lm_head") == FP16
    assert p.format_for("model.layers.0.self_attn.q_proj") == INT8
    assert p.format_for("model.layers.0.mlp.down_proj").name == "int4-g32"


def test_layers_table_precedence_and_roundtrip(tmp_path):
    p = policy_from_dict({"default": "int4-g128", "keep_fp16_layers": ["mlp"],
                          "layers": {"a.mlp.up": "int8", "*.down": "int4-g32-sym"}}, "x.toml")
    assert p.format_for("a.mlp.up") == INT8  # exact [layers] beats keep_fp16
    assert p.format_for("b.mlp.down").name == "int4-g32-sym"
    assert p.format_for("b.mlp.gate") == FP16
    assert p.format_for("attn.q").name == "int4-g128"
    path = tmp_path / "p.toml"
    path.write_text(p.to_toml())
    assert load_policy(path) == p


@pytest.mark.parametrize("fmt,shape", [("int4-g32", (64, 256)), ("int4-g128-sym", (8, 512)), ("int8", (7, 33))])
def test_format_nbytes_matches_real_arrays(fmt, shape):
    f = parse_format(fmt)
    w = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    t = quantize_int8(w) if f.kind == "int8" else quantize_int4(w, f.group_size, f.scheme)
    assert f.nbytes(*shape) == t.nbytes


def test_bad_policies_name_file_field_value(tmp_path):
    with pytest.raises(ValueError, match=r"p.toml: field 'default'.*'int3'"):
        policy_from_dict({"default": "int3"}, "p.toml")
    with pytest.raises(ValueError, match=r"unknown field.*'keep_fp8_layers'"):
        policy_from_dict({"default": "int8", "keep_fp8_layers": []}, "p.toml")
    with pytest.raises(ValueError, match="missing field 'default'"):
        policy_from_dict({}, "p.toml")
    with pytest.raises(ValueError, match=r"layers.q'.*int4-g0"):
        policy_from_dict({"default": "int8", "layers": {"q": "int4-g0"}}, "p.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("default = ")
    with pytest.raises(ValueError, match="bad.toml: not valid TOML"):
        load_policy(bad)
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        load_policy("nope")
