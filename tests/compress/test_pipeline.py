"""compress() as its own step before the decoder (compress/pipeline.py): a policy without pruning,
W8A8 scales or GPTQ / AWQ leaves the weights as they are (the same object); a compressing one
returns new weights, marked with the policy, and never changes the ones it was given; Llama
refuses a compressing policy on weights that did not go through compress() for it, and
compress() refuses weights already compressed; an AWQ + W8A8 policy fails before any
calibration pass; build_model is compress() then Llama() (the same logits bit for bit) or the
FP32 oracle. The numbers of each step are held by tests/runtime/test_compress_llama.py,
test_calibrated_quant.py and tests/model/test_prune*.py, test_distill.py."""

import numpy as np
import pytest

import harmony_ref.compress.pipeline as pipeline
from harmony_ref.compress import build_model, compress
from harmony_ref.model.decoder import layer_name
from harmony_ref.quant.policy import load_policy, policy_from_dict
from harmony_ref.runtime.llama import Llama, LlamaRef
from tests.fixtures.decoder.tiny import tiny_config, tiny_weights

TOKENS = [1, 40, 50, 260, 268, 35, 52, 53, 7]
WINDOWS = {"calibration": "random", "samples": 2, "sample_tokens": 16}


def _pol(name="t", **tables):
    return policy_from_dict({"name": name, "default": "int8", **tables}, f"<{name}>")


def _linear_names(c):
    parts = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    return {layer_name(i, p) for i in range(c.n_layers) for p in parts} | {"lm_head"}


@pytest.mark.parametrize("policy", ["fp32", "int8", "int4-g32"])
def test_a_policy_without_steps_leaves_the_weights_as_they_are(policy):
    w = tiny_weights(tiny_config("llama"), seed=1)
    assert compress(w, policy) is w
    assert np.array_equal(
        Llama(compress(w, policy), policy).prefill(TOKENS), Llama(w, policy).prefill(TOKENS)
    )


def test_compressed_weights_carry_the_policy_and_leave_the_input_alone():
    c = tiny_config("llama", n_heads=8, n_kv_heads=2, ffn_dim=128)
    w = tiny_weights(c, seed=2)
    before = [(lw.w_up.copy(), lw.wq.copy()) for lw in w.layers]
    pol = _pol(prune={"ffn": 0.5, "heads": 0.5}, activations=WINDOWS)
    out = compress(w, pol)
    assert out is not w and out.compressed_for == pol and w.compressed_for is None
    assert set(out.act_scales) == _linear_names(c) and w.act_scales == {}
    assert all(s.dtype == np.float32 and np.isfinite(s).all() for s in out.act_scales.values())
    assert [lw.w_up.shape[0] for lw in out.layers] == [64, 64]
    assert [lw.wq.shape[0] for lw in out.layers] == [4 * c.head_dim] * 2
    for lw, (up, wq) in zip(w.layers, before):  # the checkpoint's weights are untouched
        assert np.array_equal(lw.w_up, up) and np.array_equal(lw.wq, wq)
    gptq = _pol("g", default="int4-g32", quantize={"method": "gptq", **WINDOWS})
    fitted = compress(w, gptq)
    assert set(fitted.stored) == _linear_names(c) and fitted.act_scales == {}


def test_llama_refuses_weights_not_compressed_for_its_policy():
    w = tiny_weights(tiny_config("llama"), seed=3)
    w8a8 = _pol("w8a8", activations=WINDOWS)
    with pytest.raises(ValueError, match=r"^<w8a8>: policy 'w8a8' prunes or calibrates: build"):
        Llama(w, w8a8)
    done = compress(w, w8a8)
    other = _pol("other", activations={**WINDOWS, "seed": 1})
    for pol in (other, load_policy("int8")):  # another compressing policy, or a plain one
        with pytest.raises(ValueError, match="the weights were compressed for policy 'w8a8'"):
            Llama(done, pol)
    with pytest.raises(ValueError, match="the weights are already compressed"):
        compress(done, other)
    assert Llama(done, _pol("w8a8", activations=WINDOWS)).name == "w8a8"  # an equal policy


def test_awq_with_w8a8_fails_before_any_calibration(monkeypatch):
    calls = []
    monkeypatch.setattr(pipeline, "calibration_windows", lambda *a, **k: calls.append(a))
    w = tiny_weights(tiny_config("llama"), seed=4)
    pol = _pol(activations=WINDOWS, quantize={"method": "awq", **WINDOWS})
    with pytest.raises(ValueError, match=r"awq with \[activations\]"):
        compress(w, pol)
    assert calls == []


def test_build_model_is_compress_then_llama():
    w = tiny_weights(tiny_config("qwen2"), seed=5)
    pol = _pol("g", default="int4-g32", quantize={"method": "gptq", **WINDOWS})
    built = build_model(w, pol, max_context=32)
    by_hand = Llama(compress(w, pol), pol, max_context=32)
    assert built.formats() == by_hand.formats()
    assert np.array_equal(
        built.prefill(TOKENS, all_logits=True), by_hand.prefill(TOKENS, all_logits=True)
    )
    assert isinstance(build_model(w, "reference"), LlamaRef)
    assert isinstance(build_model(w, pol, reference=True), LlamaRef)
