"""GPTQ and AWQ through the decoder runtime (compress/sequential.py) on tiny random checkpoints:
AWQ's folded scales leave the FP32 model's outputs unchanged (exactness, before any rounding),
GPTQ and AWQ policies build and run in the stored formats RTN uses, each Linear's GPTQ output
error on its calibration inputs is at most RTN's, the calibration windows come from the
calibration split only (a spy on the windows, as the W8A8 test), and policy errors name the
field."""

import dataclasses

import numpy as np
import pytest

from harmony_ref.compress import compress
from harmony_ref.compress import sequential as seq
from harmony_ref.quant.compress import QuantizeSpec
from harmony_ref.quant.policy import FP32, Policy, policy_from_dict
from harmony_ref.runtime.llama import Llama, LlamaRef
from tests.fixtures.decoder.tiny import tiny_config, tiny_weights

TOKENS = [1, 40, 50, 260, 268, 35, 52, 53, 7, 2, 99, 100, 101]
FOLD_REL_TOL = 1e-5  # float32 reassociation of x / s * s: the same logits to ~1e-6 relative
# The kernel path keeps K and V in fp16: v / s rounds to other fp16 values (measured 2.8e-4)
FP16_KV_REL_TOL = 2e-3


def _pol(default="int4-g32", **quantize):
    return policy_from_dict(
        {
            "name": "t",
            "default": default,
            "quantize": {"calibration": "random", "samples": 4, "sample_tokens": 16, **quantize},
        },
        "<t>",
    )


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3"])
def test_awq_folding_leaves_fp32_outputs_unchanged(arch, monkeypatch):
    """Scales for every stage and the head (alpha forced to 0.5: the search may keep s = 1 for a
    stage), folded into the norms and v / up rows, the weights left in FP32: the oracle's logits
    do not move."""
    from harmony_ref.quant import awq

    def forced(parts, fmts, gram, mean_abs, grid=20, tie=None):
        stat = tie(mean_abs) if tie is not None else mean_abs
        return awq.scales_for(stat, 0.5), 0.5, []

    monkeypatch.setattr(seq, "awq_search", forced)
    w = tiny_weights(tiny_config(arch), seed=4)
    pol = _pol(method="awq")
    windows = np.random.default_rng(0).integers(0, w.config.vocab_size, (4, 16))
    base = Llama(w, Policy("fp32", FP32), max_context=16)
    # the search runs on the int4 policy; only the folding is kept, the rounding is not
    folded, stored = seq.calibrate_weights(base, w, pol, windows)
    assert stored == {}
    changed = [
        not np.array_equal(a.attn_norm, b.attn_norm)
        and not np.array_equal(a.wv, b.wv)
        and not np.array_equal(a.w_up, b.w_up)
        for a, b in zip(folded.layers, w.layers)
    ]
    assert all(changed)  # every fold happened
    ref = LlamaRef(w, 64).prefill(TOKENS, all_logits=True)
    got = LlamaRef(folded, 64).prefill(TOKENS, all_logits=True)
    assert _rel(got, ref) <= FOLD_REL_TOL
    kern = Llama(folded, "fp32", max_context=64).prefill(TOKENS, all_logits=True)
    assert (
        _rel(kern, Llama(w, "fp32", max_context=64).prefill(TOKENS, all_logits=True))
        <= FP16_KV_REL_TOL
    )


def test_gptq_and_awq_policies_build_the_same_formats_and_bytes():
    w = tiny_weights(tiny_config("llama"), seed=1)
    rtn = Llama(w, "int4-g32")
    for method in ("gptq", "awq"):
        m = Llama(compress(w, _pol(method=method)), _pol(method=method))
        assert m.formats() == rtn.formats()
        assert m.weight_bytes()["linear"] == rtn.weight_bytes()["linear"]
        logits = m.prefill(TOKENS, all_logits=True)
        assert np.isfinite(logits).all()
    pol = _pol("int8", method="gptq", act_order=True)
    m = Llama(compress(w, pol), pol)
    assert set(m.formats().values()) == {"int8"}


def test_gptq_layer_error_is_at_most_rtn_on_its_calibration_inputs():
    """Every stage of block 0, on the inputs GPTQ was fitted on: output error <= RTN's."""
    from harmony_ref.quant.awq import fake_quantize
    from harmony_ref.quant.gptq import gptq_quantize

    w = tiny_weights(tiny_config("llama", dim=64, ffn_dim=128), seed=2)
    windows = np.random.default_rng(1).integers(0, w.config.vocab_size, (6, 32))
    base = Llama(w, Policy("fp32", FP32), max_context=32)
    xs = [base.embed[t] for t in windows]
    stats = seq.stage_inputs(base, 0, xs, list(seq.STAGES), stop=False)
    fmt = policy_from_dict({"default": "int4-g32"}, "<t>").default
    lw = w.layers[0]
    for st, parts in seq.STAGE_PARTS.items():
        g = stats[st].gram
        for _, attr in parts:
            wt = getattr(lw, attr)
            d_g = gptq_quantize(wt, stats[st].hessian, fmt).dequantized - wt
            d_r = fake_quantize(wt, fmt) - wt
            assert ((d_g @ g) * d_g).sum() <= ((d_r @ g) * d_r).sum()


def test_mixed_methods_per_pattern_and_format():
    w = tiny_weights(tiny_config("llama"), seed=3)
    pol = policy_from_dict(
        {
            "name": "m",
            "default": "int4-g32",
            "keep_int8_layers": ["o_proj"],
            "quantize": {
                "method": "gptq",
                "calibration": "random",
                "samples": 2,
                "sample_tokens": 16,
                "methods": {"*.k_proj": "rtn", "int8": "awq"},
            },
        },
        "<m>",
    )
    assert pol.method_for("model.layers.0.self_attn.k_proj") == "rtn"
    assert pol.method_for("model.layers.0.self_attn.q_proj") == "gptq"
    assert pol.method_for("model.layers.0.self_attn.o_proj") == "awq"
    assert (
        policy_from_dict(
            {"default": "fp16", "layers": {"o_proj": "int8"}, "quantize": {"method": "gptq"}},
            "<f>",
        ).method_for("lm_head")
        == "rtn"
    )  # nothing to fit
    m = Llama(compress(w, pol), pol)  # q, v fitted by GPTQ and k rounded: one fused q|k|v tensor
    assert m.blocks[0].qkv.single is not None
    assert np.isfinite(m.prefill(TOKENS)).all()
    assert pol == policy_from_dict(__import__("tomllib").loads(pol.to_toml()), "<m>")


def test_calibration_windows_come_from_the_calibration_split(monkeypatch):
    """GPTQ / AWQ calibrate on the windows of the policy's [quantize] sampling, drawn from the
    tokens given (the calibration split by default), never from what is scored."""
    import harmony_ref.compress.pipeline as pipeline
    from harmony_ref.eval.lm import unscored_tokens

    seen = []
    real = pipeline.calibration_windows

    def spy(weights, spec, tokens=None, sampling_model=None):
        seen.append((spec, None if tokens is None else np.asarray(tokens).copy()))
        return real(weights, spec, tokens, sampling_model)

    monkeypatch.setattr(pipeline, "calibration_windows", spy)
    w = tiny_weights(tiny_config("llama"), seed=5)
    text = np.arange(3, 200)
    pol = policy_from_dict(
        {
            "name": "g",
            "default": "int4-g32",
            "quantize": {"method": "gptq", "samples": 3, "sample_tokens": 16, "seed": 7},
        },
        "<g>",
    )
    compress(w, pol, text)
    assert len(seen) == 1 and seen[0][0] == pol.quantize.activations()
    assert np.array_equal(seen[0][1], text)
    # within sensitivity-style scoring: the tokens the scored chunks never score
    from harmony_ref.eval.lm import evaluate_lm

    ids = np.arange(3, 3 + 4 * 32)
    seen.clear()
    evaluate_lm(
        w, ids, 32, [(pol, "fp16")], max_chunks=2, calibration_tokens=unscored_tokens(ids, 32, 2)
    )
    assert np.array_equal(seen[0][1], unscored_tokens(ids, 32, 2))


def test_corpus_windows_never_read_the_heldout_split(monkeypatch):
    """With no tokens given, the windows are the calibration split's (compress/observe.py),
    whose text differs from the held-out split's."""
    from harmony_ref.compress import observe as cal
    from harmony_ref.eval.lm import load_corpus

    read = []
    monkeypatch.setattr(cal, "calibration_text", lambda: read.append(1) or "calibration text")

    class Tok:
        def encode(self, text):
            assert text == "calibration text" and text != load_corpus("heldout")[:16]
            return list(range(3, 40))

    monkeypatch.setattr(
        "harmony_ref.runtime.tokenizer.Tokenizer.from_hf_dir", staticmethod(lambda p: Tok())
    )
    w = dataclasses.replace(tiny_weights(tiny_config("llama"), seed=6), source="/")
    pol = policy_from_dict(
        {
            "name": "g",
            "default": "int8",
            "quantize": {"method": "gptq", "samples": 2, "sample_tokens": 16},
        },
        "<g>",
    )
    compress(w, pol)
    assert read == [1]


@pytest.mark.parametrize(
    "table, match",
    [
        ({"method": "gptqq"}, r"<p>: field 'quantize.method' = 'gptqq': must be one of"),
        ({"methods": {"*.q_proj": "x"}}, r"field 'quantize.methods.\*.q_proj' = 'x'"),
        ({"damp": 0}, r"field 'quantize.damp' = 0: must be a number in \(0, 1\)"),
        ({"act_order": 1}, r"field 'quantize.act_order' = 1: must be true or false"),
        ({"samples": 0}, r"field 'quantize.samples' = 0"),
        ({"calibration": "heldout"}, r"field 'quantize.calibration' = 'heldout'"),
        ({"metod": "gptq"}, r"unknown field 'metod' \(did you mean 'method'"),
    ],
)
def test_bad_quantize_tables_name_file_field_value(table, match):
    with pytest.raises(ValueError, match=match):
        policy_from_dict({"default": "int4-g32", "quantize": table}, "<p>")


def test_unmatched_method_pattern_is_refused():
    from harmony_ref.quant.policy import unmatched

    pol = policy_from_dict(
        {"default": "int4-g32", "quantize": {"methods": {"*.gate_prj": "gptq", "int8": "rtn"}}},
        "<p>",
    )
    out = unmatched(pol, [("model.layers.0.mlp.gate_proj", 64)], 1)
    assert len(out) == 1 and "'quantize.methods' has '*.gate_prj'" in out[0]


def test_quantize_spec_defaults():
    q = QuantizeSpec()
    assert q.method == "rtn" and q.label == "rtn"
    assert QuantizeSpec(method="gptq").label == "gptq-n16x128"


@pytest.mark.parametrize(
    "policy, match",
    [
        (
            {"default": "q4_0", "quantize": {"method": "gptq"}},
            "<p>: field 'quantize.method' = 'gptq': GPTQ/AWQ fit int4-gNN / int8 only; the "
            "policy has none (default q4_0)",
        ),
        (
            {"default": "fp16", "quantize": {"method": "awq"}},
            "field 'quantize.method' = 'awq': GPTQ/AWQ fit int4-gNN / int8 only; the policy "
            "has none (default fp16)",
        ),
        (
            {"default": "int4-g32", "quantize": {"methods": {"q8_0": "gptq"}}},
            "field 'quantize.methods.q8_0' = 'gptq': q8_0 cannot take it (GPTQ/AWQ fit",
        ),
    ],
)
def test_a_method_a_format_cannot_take_is_refused_at_load(policy, match):
    # issue 45 item 2: gptq on q4_0 gave plain q4_0 bytes while everything said gptq
    with pytest.raises(ValueError) as e:
        policy_from_dict(policy, "<p>")
    assert match in str(e.value) and len(str(e.value)) < 200


def test_a_method_pattern_whose_layers_cannot_take_it_is_refused():
    from harmony_ref.quant.policy import unmatched

    pol = policy_from_dict(
        {
            "default": "int4-g32",
            "layers": {"*.gate_proj": "q4_0"},
            "quantize": {"methods": {"*.gate_proj": "awq"}},
        },
        "<p>",
    )
    out = unmatched(pol, [("model.layers.0.mlp.gate_proj", 64)], 1)
    assert out == [
        "<p>: field 'quantize.methods.*.gate_proj' = 'awq': its layers are q4_0 (GPTQ/AWQ "
        "fit int4-gNN / int8 only)"
    ]
