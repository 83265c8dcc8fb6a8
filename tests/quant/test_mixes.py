"""llama.cpp's Q4_K_M mix (quant/mixes.py) and the shipped q4_k_m policy that names it: bound to
SmolLM2-135M, every tensor gets the GGUF type llama-quantize (llama.cpp 0c1e570) itself gave it
(tests/fixtures/kquants/q4_k_m_types_smollm2.json, made by make_q4_k_m_types.py there); the rule's
pieces (use_more_bits, the fallback for rows that are not 256-multiples) as llama-quant.cpp has
them; a mix policy is never used unbound."""

import json
from pathlib import Path

import pytest

from harmony_ref._toml import loads
from harmony_ref.checkpoint.gguf import LAYER_TENSORS, LINEAR_FIELDS
from harmony_ref.model.decoder import layer_name
from harmony_ref.model.spec import get_spec
from harmony_ref.quant.mixes import q4_k_m, use_more_bits
from harmony_ref.quant.policy import load_policy, policy_from_dict, unmatched

FIXTURE = Path(__file__).parents[1] / "fixtures" / "kquants" / "q4_k_m_types_smollm2.json"


def _bound(spec_name):
    spec = get_spec(spec_name)
    return load_policy("q4_k_m").bind(spec.weight_rows(), spec.n_layers), spec


def test_bound_to_smollm2_every_tensor_is_llama_quantizes_type():
    llama = json.loads(FIXTURE.read_text())["tensor_types"]
    policy, spec = _bound("smollm2-135m")
    ours = {}
    for i in range(spec.n_layers):
        for key, short in LINEAR_FIELDS.items():
            fmt = policy.format_for(layer_name(i, short))
            ours[f"blk.{i}.{LAYER_TENSORS[key]}"] = fmt.facts.gguf_type
    ours["token_embd.weight"] = policy.format_for("lm_head").facts.gguf_type  # tied: the head
    assert ours == {name: t for name, t in llama.items() if name in ours}
    assert set(llama) - set(ours) == {n for n, t in llama.items() if t == "F32"}  # norms only
    assert {t for t in ours.values()} == {"Q5_0", "Q8_0", "Q4_K", "Q6_K"}


def test_bound_to_smollm2_its_weights_are_llama_quantizes_bytes():
    """The stored bytes of every tensor under the bound policy (the export writes exactly these,
    plus metadata) are llama-quantize's Q4_K_M tensor bytes: 103,668,480."""
    policy, spec = _bound("smollm2-135m")
    linears = sum(
        policy.format_for(lin.name).nbytes(lin.n_out, lin.k_in)
        for lin in spec.linears()
        if lin.name != "lm_head"  # tied: stored once, as token_embd
    )
    head = policy.format_for("lm_head").nbytes(spec.vocab, spec.hidden)
    norms = (2 * spec.n_layers + 1) * spec.hidden * 4  # F32 RMSNorm weights
    assert linears + head + norms == json.loads(FIXTURE.read_text())["tensor_bytes"]


def test_use_more_bits_is_llama_quants():
    # n = 30 (SmolLM2): n/8 = 3, 7n/8 = 26, then every third layer from 5
    assert [i for i in range(30) if use_more_bits(i, 30)] == [
        *(0, 1, 2),
        *(5, 8, 11, 14, 17, 20, 23),
        *(26, 27, 28, 29),
    ]
    assert [i for i in range(2) if use_more_bits(i, 2)] == [1]  # n/8 = 0, 7n/8 = 1


@pytest.mark.parametrize(
    "name, k, want",
    [
        ("model.layers.0.self_attn.v_proj", 3072, "q6_k"),
        ("model.layers.3.self_attn.v_proj", 3072, "q4_k"),
        ("model.layers.0.self_attn.v_proj", 576, "q8_0"),  # Q6_K falls back to Q8_0
        ("model.layers.3.self_attn.v_proj", 576, "q5_0"),  # Q4_K falls back to Q5_0
        ("model.layers.29.mlp.down_proj", 1536, "q6_k"),
        ("model.layers.4.mlp.down_proj", 1536, "q4_k"),
        ("model.layers.0.self_attn.q_proj", 3072, "q4_k"),
        ("model.layers.0.mlp.gate_proj", 576, "q5_0"),
        ("lm_head", 3072, "q6_k"),
        ("lm_head", 576, "q8_0"),
        ("model.layers.0.mlp.up_proj", 48, "fp16"),  # not even a 32-multiple: F16
    ],
)
def test_the_rule_with_its_fallback(name, k, want):
    assert q4_k_m(name, k, 30) == want


def test_a_model_whose_rows_are_256_multiples_takes_q4_k_and_q6_k_only():
    policy, spec = _bound("llama-3.2-3b")
    counts = {}
    for name, _ in spec.weight_rows():
        f = policy.format_for(name).name
        counts[f] = counts.get(f, 0) + 1
    # 28 layers: use_more_bits picks 12 of each of attn_v and ffn_down, and the output is Q6_K
    picked = sum(use_more_bits(i, spec.n_layers) for i in range(spec.n_layers))
    assert counts["q6_k"] == 2 * picked + 2  # + lm_head and the (tied) embedding
    assert set(counts) == {"q4_k", "q6_k"}
    assert unmatched(load_policy("q4_k_m"), spec.weight_rows(), spec.n_layers) == []


def test_a_mix_policy_is_never_used_unbound_and_names_only_known_mixes():
    policy = load_policy("q4_k_m")
    with pytest.raises(ValueError, match="bind the policy to a model first"):
        policy.format_for("model.layers.0.mlp.down_proj")
    assert policy.bind([], 1).mix == ""
    with pytest.raises(ValueError, match="field 'mix' = 'q3_k_m': must be one of"):
        policy_from_dict({"default": "q4_k", "mix": "q3_k_m"}, "p.toml")
    with pytest.raises(ValueError, match="field 'default' = 'q8_0': mix 'q4_k_m' starts from"):
        policy_from_dict({"default": "q8_0", "mix": "q4_k_m"}, "p.toml")
    # another field's layer stays what that field says (llama-quantize's --tensor-type wins too)
    own = policy_from_dict(
        {"default": "q4_k", "mix": "q4_k_m", "layers": {"*.down_proj": "q8_0"}}, "p.toml"
    )
    spec = get_spec("smollm2-135m")
    bound = own.bind(spec.weight_rows(), spec.n_layers)
    assert bound.format_for("model.layers.0.mlp.down_proj").name == "q8_0"
    assert bound.format_for("model.layers.0.self_attn.v_proj").name == "q8_0"
    # the TOML a record or an exported file keeps reads back to the same policy
    assert policy_from_dict(loads(policy.to_toml(), "t"), policy.source) == policy
