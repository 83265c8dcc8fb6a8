import numpy as np
import pytest

from harmony_ref.quant.int4 import quantize_int4
from harmony_ref.quant.int8 import quantize_int8
from harmony_ref.quant.policy import (
    FP16,
    INT8,
    load_policy,
    parse_format,
    policy_from_dict,
    shipped_policies,
)


def test_shipped_policies_load():
    names = shipped_policies()
    for required in ("fp16", "int8", "int4-g32", "int4-g128", "mixed", "w8a16", "w4a16"):
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
    p = policy_from_dict(
        {
            "default": "int4-g128",
            "keep_fp16_layers": ["mlp"],
            "layers": {"a.mlp.up": "int8", "*.down": "int4-g32-sym"},
        },
        "x.toml",
    )
    assert p.format_for("a.mlp.up") == INT8  # exact [layers] beats keep_fp16
    assert p.format_for("b.mlp.down").name == "int4-g32-sym"
    assert p.format_for("b.mlp.gate") == FP16
    assert p.format_for("attn.q").name == "int4-g128"
    path = tmp_path / "p.toml"
    path.write_text(p.to_toml())
    assert load_policy(path) == p


@pytest.mark.parametrize(
    "fmt,shape", [("int4-g32", (64, 256)), ("int4-g128-sym", (8, 512)), ("int8", (7, 33))]
)
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


# --- a policy resolved against the model it is applied to (check_applies) ---------------------


def _rows(spec_name):
    from harmony_ref.model.spec import get_spec

    s = get_spec(spec_name)
    return s.weight_rows(), s.n_layers


def test_shipped_policies_fit_the_models_they_are_made_for():
    from harmony_ref.quant.policy import unmatched

    for spec in ("llama-3.2-1b", "llama-3.2-3b", "qwen2.5-0.5b"):
        rows, n = _rows(spec)
        for name in ("fp16", "fp32", "int8", "int4-g32", "int4-g128", "mixed"):
            assert unmatched(load_policy(name), rows, n) == [], (spec, name)
    rows, n = _rows("all-minilm-l6")
    assert unmatched(load_policy("minilm-mixed"), rows, n) == []
    # a decoder recipe names layers MiniLM does not have, and the other way round
    assert unmatched(load_policy("mixed"), rows, n)
    assert unmatched(load_policy("minilm-mixed"), *_rows("llama-3.2-1b"))


@pytest.mark.parametrize(
    "table, says",
    [
        (
            {"keep_fp16_layers": ["gate_prj"]},
            "'gate_prj', which matches no layer of M (did you mean 'gate_proj'?)",
        ),
        ({"keep_int8_layers": ["q_proj", "kv_proj"]}, "'kv_proj'"),
        (
            {"layers": {"model.layers.99.mlp.gate_proj": "int8"}},
            "did you mean 'model.layers.9.mlp.gate_proj'",
        ),
        ({"layers": {"*.attn.*": "int8"}}, "field 'layers' has '*.attn.*'"),
        (
            {"prune": {"ffn": 0.1, "blocks": {"15-17": {"ffn": 0.5}}}},
            "block 16, but M has 16 blocks",
        ),
        (
            {"default": "int4-g16384"},
            "group of 16384 is longer than every row of M it applies to (the longest has K = 8192)",
        ),
    ],
)
def test_a_policy_that_does_not_fit_names_what_and_the_closest(table, says):
    from harmony_ref.quant.policy import check_applies, unmatched

    p = policy_from_dict({"default": "int4-g32", **table}, "p.toml")
    rows, n = _rows("llama-3.2-1b")  # 16 blocks, K up to 8192
    problems = unmatched(p, rows, n, "M")
    assert len(problems) == 1 and problems[0].startswith("p.toml: ") and says in problems[0], (
        problems
    )
    with pytest.raises(ValueError, match="--allow-unmatched"):
        check_applies(p, rows, n, "M")
    check_applies(p, rows, n, "M", allow_unmatched=True)  # deliberate: applied as it is


def test_a_group_longer_than_some_rows_but_not_all_still_fits():
    from harmony_ref.quant.policy import unmatched

    # llama-3.2-1b: K = 2048 (attention, gate/up) and 8192 (down_proj): g4096 fits down_proj
    rows, n = _rows("llama-3.2-1b")
    assert unmatched(policy_from_dict({"default": "int4-g4096"}, "p.toml"), rows, n) == []


def test_run_config_refuses_an_unmatched_policy_unless_allowed(tmp_path):
    from harmony_ref.config import RunConfig

    path = tmp_path / "typo.toml"
    path.write_text('name = "typo"\ndefault = "int4-g32"\nkeep_fp16_layers = ["gate_prj"]\n')
    with pytest.raises(ValueError, match="gate_prj"):
        RunConfig.from_names("llama-3.2-1b", str(path))
    cfg = RunConfig.from_names("llama-3.2-1b", str(path), allow_unmatched=True)
    assert cfg.to_dict()["allow_unmatched"] is True
    assert RunConfig.from_dict(cfg.to_dict()) == cfg
    assert "allow_unmatched" not in RunConfig.from_names("llama-3.2-1b", "mixed").to_dict()
