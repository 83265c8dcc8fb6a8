"""Distillation of a pruned decoder (model/distill.py; runtime wiring in runtime/llama.py): the
training forward gives LlamaRef's logits on every architecture the loader reads; its gradients
equal central finite differences of the KL loss (float64 copies of the weights); distillation
lowers the training KL of a pruned tiny decoder, changes only the matrices it trains and leaves
its inputs alone; a policy with distill_epochs builds a model that differs from the undistilled
one with the same shapes, reads only the calibration windows (a spy), and its fields are
validated (file, field, value)."""

import dataclasses

import numpy as np
import pytest

from harmony_ref._toml import tomllib
from harmony_ref.model.distill import (
    TRAINED_MATRICES,
    TrainingForward,
    distill_decoder,
    kl_loss,
    log_softmax,
)
from harmony_ref.model.prune import prune_decoder
from harmony_ref.quant.compress import DISTILL_PARAMS, PruneSpec
from harmony_ref.quant.policy import policy_from_dict
from harmony_ref.runtime.llama import LlamaRef
from tests.fixtures.decoder.tiny import tiny_config, tiny_weights

ARCHS = ("llama", "qwen2", "qwen3", "gemma3")
TOKENS = np.array([1, 5, 9, 3, 7, 11, 2, 4, 8, 6])
# float32 forward against float32 LlamaRef, the same operations in another order: measured worst
# absolute difference 1.3e-6 on logits ~4 (Llama, Qwen), 7.6e-6 on logits ~67 (tiny Gemma)
FORWARD_RTOL, FORWARD_ATOL = 1e-5, 1e-5
# float64 analytic gradient against central differences with step 1e-5: measured worst relative
# error 2e-8 (Llama, Qwen) and 7e-7 (tiny Gemma, whose KL is ~59: the loss's rounding over 2e-5)
GRAD_RTOL, GRAD_ATOL = 1e-5, 1e-8


def _as64(w):
    def cast(a):
        return None if a is None else np.asarray(a, np.float64)

    fields = [f.name for f in dataclasses.fields(w.layers[0])]
    layers = [
        dataclasses.replace(
            lw,
            **{f: cast(getattr(lw, f)) for f in fields if isinstance(getattr(lw, f), np.ndarray)},
        )
        for lw in w.layers
    ]
    return dataclasses.replace(
        w,
        layers=layers,
        embed=cast(w.embed),
        final_norm=cast(w.final_norm),
        lm_head=cast(w.lm_head),
    )


@pytest.mark.parametrize("arch", ARCHS)
def test_training_forward_is_the_reference_forward(arch):
    w = tiny_weights(tiny_config(arch), seed=1)
    want = LlamaRef(w).prefill(TOKENS, all_logits=True)
    got = TrainingForward(w, len(TOKENS)).forward(TOKENS)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=FORWARD_RTOL, atol=FORWARD_ATOL)


@pytest.mark.parametrize("arch", ARCHS)
def test_gradients_are_the_finite_differences(arch):
    w = _as64(tiny_weights(tiny_config(arch), seed=2))
    rng = np.random.default_rng(3)
    teacher = log_softmax(rng.standard_normal((len(TOKENS), w.head.shape[0])))
    net = TrainingForward(w, len(TOKENS))
    logits, state = net.forward(TOKENS, keep=True)
    assert logits.dtype == np.float64
    grads = net.backward(kl_loss(logits, teacher)[1], state)
    step = 1e-5
    for block in range(len(w.layers)):
        for name in ("w_gate", "w_up", "w_down"):
            mat = getattr(w.layers[block], name)
            for r, c in zip(rng.integers(0, mat.shape[0], 3), rng.integers(0, mat.shape[1], 3)):
                old = mat[r, c]
                mat[r, c] = old + step
                up = kl_loss(net.forward(TOKENS), teacher)[0]
                mat[r, c] = old - step
                down = kl_loss(net.forward(TOKENS), teacher)[0]
                mat[r, c] = old
                numeric = (up - down) / (2 * step)
                assert grads[block][name][r, c] == pytest.approx(
                    numeric, rel=GRAD_RTOL, abs=GRAD_ATOL
                ), (block, name, r, c)


def test_kl_loss_is_zero_at_the_teacher_and_positive_elsewhere():
    rng = np.random.default_rng(0)
    z = rng.standard_normal((4, 7))
    kl, grad = kl_loss(z, log_softmax(z))
    assert kl == pytest.approx(0.0, abs=1e-12) and np.abs(grad).max() < 1e-12
    assert kl_loss(z + rng.standard_normal(z.shape), log_softmax(z))[0] > 0


def _pruned_pair(seed=4):
    w = tiny_weights(tiny_config("llama", n_heads=8, n_kv_heads=2, ffn_dim=128), seed=seed)
    pruned = prune_decoder(w, PruneSpec(ffn=0.5))
    windows = np.random.default_rng(seed).integers(3, w.config.vocab_size, (6, 12))
    return w, pruned, windows


@pytest.mark.parametrize("params", sorted(TRAINED_MATRICES))
def test_distillation_lowers_the_training_kl_and_trains_only_its_matrices(params):
    w, pruned, windows = _pruned_pair()
    before = [dataclasses.replace(lw) for lw in pruned.layers]
    copies = [lw.w_down.copy() for lw in pruned.layers]
    trained, losses = distill_decoder(w, pruned, windows, epochs=4, lr=3e-3, params=params)
    assert len(losses) == 4 and losses[-1] < 0.8 * losses[0]
    assert all(np.isfinite(losses))
    for lw, old, down in zip(trained.layers, before, copies):
        assert np.array_equal(old.w_down, down)  # the input is not changed
        for f in ("w_gate", "w_up", "w_down", "wq", "wo"):
            changed = not np.array_equal(getattr(lw, f), getattr(old, f))
            assert changed == (f in TRAINED_MATRICES[params]), f
            assert getattr(lw, f).shape == getattr(old, f).shape
    again, losses_again = distill_decoder(w, pruned, windows, epochs=4, lr=3e-3, params=params)
    assert losses_again == losses  # seeded: the same run twice
    assert set(TRAINED_MATRICES) == set(DISTILL_PARAMS)


def test_distillation_refuses_bad_arguments():
    w, pruned, windows = _pruned_pair()
    with pytest.raises(ValueError, match="params = 'attn'"):
        distill_decoder(w, pruned, windows, 1, 1e-3, params="attn")
    with pytest.raises(ValueError, match=r"shape \(12,\)"):
        distill_decoder(w, pruned, windows[0], 1, 1e-3)


def _policy(**prune):
    base = {"ffn": 0.25, "score": "activation", "samples": 2, "sample_tokens": 16}
    return policy_from_dict({"name": "d", "default": "fp32", "prune": {**base, **prune}}, "<d>")


def test_a_distilled_policy_builds_a_different_model_of_the_same_shapes(monkeypatch):
    import harmony_ref.compress.pipeline as pipeline
    from harmony_ref.runtime.llama import Llama

    w = tiny_weights(tiny_config("llama", n_heads=8, n_kv_heads=2, ffn_dim=128), seed=5)
    toks = np.arange(3, 90, 2)
    seen = []
    real = pipeline.calibration_windows

    def spy(weights, spec, tokens=None, sampling_model=None):
        seen.append(np.asarray(tokens).copy())
        return real(weights, spec, tokens, sampling_model)

    monkeypatch.setattr(pipeline, "calibration_windows", spy)
    plain = Llama(pipeline.compress(w, _policy(), toks), _policy())
    fitted = _policy(distill_epochs=2, distill_lr=1e-3, distill_params="down")
    fit = Llama(pipeline.compress(w, fitted, toks), fitted)
    # every window came from the calibration tokens given, none from anywhere else
    assert seen and all(np.array_equal(s, toks) for s in seen)
    assert [b.ffn_dim for b in fit.blocks] == [b.ffn_dim for b in plain.blocks] == [96, 96]
    assert not np.array_equal(fit.blocks[0].down.stored, plain.blocks[0].down.stored)
    assert np.array_equal(
        fit.blocks[0].gate_up.single.stored, plain.blocks[0].gate_up.single.stored
    )
    assert np.isfinite(fit.prefill([1, 40, 50, 26])).all()


def test_distill_fields_round_trip_and_label():
    p = _policy(distill_epochs=3, distill_lr=1e-4, distill_params="down")
    assert p.prune.distill_epochs == 3 and p.prune.calibrates
    assert "distilldown3-lr0.0001" in p.prune.label
    assert p.prune.to_dict()["distill_params"] == "down"
    assert policy_from_dict(tomllib.loads(p.to_toml()), "<d>") == p
    # distillation alone (L1 channels) reads calibration windows, so it takes their fields
    alone = policy_from_dict(
        {"name": "a", "default": "fp32", "prune": {"ffn": 0.25, "distill_epochs": 1, "samples": 4}},
        "<a>",
    )
    assert alone.prune.calibrates and alone.prune.samples == 4


@pytest.mark.parametrize(
    "prune, message",
    [
        ({"distill_epochs": -1}, r"field 'prune.distill_epochs' = -1: must be an integer"),
        ({"distill_epochs": 1.5}, r"field 'prune.distill_epochs' = 1.5"),
        ({"distill_epochs": 1, "distill_lr": 0}, r"field 'prune.distill_lr' = 0: must be a number"),
        ({"distill_epochs": 1, "distill_lr": True}, r"field 'prune.distill_lr' = True"),
        (
            {"distill_epochs": 1, "distill_params": "attn"},
            r"field 'prune.distill_params' = 'attn': must be one of",
        ),
        ({"distill_lr": 1e-4}, r"'prune.distill_lr' = 0.0001: applies with distill_epochs > 0"),
        ({"distill_params": "down"}, r"'prune.distill_params' = 'down': applies with distill"),
    ],
)
def test_bad_distill_fields_name_file_field_and_value(prune, message):
    with pytest.raises(ValueError, match=message) as err:
        _policy(**prune)
    assert "<d>" in str(err.value)
