"""Structured pruning (model/prune.py) on tiny random decoders and the tiny MiniLM: a pruned model
(smaller matrices) equals the unpruned one with the pruned channels / heads zeroed, within
PRUNED_VS_ZEROED_ABS_TOL; head pruning keeps grouped-query attention valid; L1 picks the units
with the smallest norms; per-block ratios; the runtime runs pruned policies end to end."""

import dataclasses

import numpy as np
import pytest

from harmony_ref.compress import compress
from harmony_ref.model.prune import (
    decoder_heads_keep,
    ffn_keep,
    prune_decoder,
    prune_minilm,
)
from harmony_ref.quant.compress import PruneSpec
from harmony_ref.quant.policy import policy_from_dict
from harmony_ref.runtime.llama import Llama, LlamaRef
from tests.fixtures.decoder.tiny import tiny_config, tiny_weights

TOKENS = [1, 40, 50, 260, 268, 35, 52, 53, 7, 2, 99, 100]
# Logits of the pruned model vs the zeroed unpruned one: the same sums with some exact-zero
# terms removed, so float32 summation order only (measured <= 2e-6 on these models).
PRUNED_VS_ZEROED_ABS_TOL = 2e-5


def _zeroed(w, pruned, head_dim):
    """The unpruned weights with every unit `pruned` dropped set to zero (found by matching)."""
    out = dataclasses.replace(w, layers=[dataclasses.replace(lw) for lw in w.layers])
    for lw, pw in zip(out.layers, pruned.layers):
        kept_ch = [int(np.flatnonzero((lw.w_up == row).all(1))[0]) for row in pw.w_up]
        drop_ch = np.setdiff1d(np.arange(lw.w_up.shape[0]), kept_ch)
        lw.w_gate, lw.w_up, lw.w_down = lw.w_gate.copy(), lw.w_up.copy(), lw.w_down.copy()
        lw.w_gate[drop_ch] = 0
        lw.w_up[drop_ch] = 0
        lw.w_down[:, drop_ch] = 0
        q_rows = lw.wq.reshape(-1, head_dim, lw.wq.shape[1])
        kept_h = [
            int(np.flatnonzero((q_rows == h).all((1, 2)))[0])
            for h in pw.wq.reshape(-1, head_dim, pw.wq.shape[1])
        ]
        drop_h = np.setdiff1d(np.arange(q_rows.shape[0]), kept_h)
        lw.wo = lw.wo.copy().reshape(lw.wo.shape[0], -1, head_dim)
        lw.wo[:, drop_h] = 0  # a head whose o columns are zero contributes nothing
        lw.wo = lw.wo.reshape(lw.wo.shape[0], -1)
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("ffn,heads", [(0.5, 0.0), (0.0, 0.5), (0.25, 0.5)])
def test_pruned_equals_zeroed(arch, ffn, heads):
    c = tiny_config(arch, n_heads=8, n_kv_heads=2, ffn_dim=128)
    w = tiny_weights(c, seed=5)
    pruned = prune_decoder(w, PruneSpec(ffn=ffn, heads=heads))
    ref = LlamaRef(_zeroed(w, pruned, c.head_dim)).prefill(TOKENS, all_logits=True)
    got = LlamaRef(pruned).prefill(TOKENS, all_logits=True)
    assert np.abs(got - ref).max() <= PRUNED_VS_ZEROED_ABS_TOL
    # the kernel path through the same runtime, with narrower matrices, follows it too
    pol = policy_from_dict(
        {"name": "p", "default": "fp32", "prune": {"ffn": ffn, "heads": heads}}, "<test>"
    )
    m = Llama(compress(w, pol), pol)
    kern = m.prefill(TOKENS, all_logits=True)
    assert np.abs(kern - ref).max() <= 1e-3  # fp16 KV cache
    lw = pruned.layers[0]
    assert lw.w_gate.shape[0] == m.blocks[0].ffn_dim == (128 if not ffn else int(128 * (1 - ffn)))


@pytest.mark.parametrize("unit", ["query", "kv"])
def test_head_pruning_keeps_gqa_valid(unit):
    c = tiny_config("llama", n_heads=12, n_kv_heads=3, head_dim=16)
    w = tiny_weights(c, seed=6)
    pruned = prune_decoder(w, PruneSpec(heads=0.34, head_unit=unit))
    for lw, pw in zip(w.layers, pruned.layers):
        nh, nkv, _ = pw.dims(c.head_dim)
        assert nh % nkv == 0 and nh >= nkv >= 1
        q_keep, kv_keep = decoder_heads_keep(lw, c.head_dim, 0.34, unit)
        group, new_group = c.n_heads // c.n_kv_heads, nh // nkv
        # kept query head j reads new KV head j // new_group, which must be its old KV head
        for j, h in enumerate(q_keep):
            assert kv_keep[j // new_group] == h // group
        if unit == "query":
            assert (nh, nkv) == (9, 3)  # one of 4 query heads dropped in each group
        else:
            assert (nh, nkv) == (8, 2)  # one whole KV group dropped
    LlamaRef(pruned).prefill(TOKENS)  # runs


def test_l1_drops_the_smallest_units():
    rng = np.random.default_rng(0)
    up, gate, down = (
        rng.standard_normal(s).astype(np.float32) for s in ((128, 16), (128, 16), (16, 128))
    )
    small = rng.choice(128, 32, replace=False)  # 32 channels with norms 100x smaller
    for a in (up, gate):
        a[small] *= 0.01
    down[:, small] *= 0.01
    kept = ffn_keep(gate, up, down, 0.25)
    assert len(kept) == 96 and not set(small.tolist()) & set(kept.tolist())
    assert list(kept) == sorted(kept)
    # kept counts are whole multiples of 32: 0.1 of 128 keeps 128 (115.2 rounds to 4 x 32)
    assert len(ffn_keep(gate, up, down, 0.1)) == 128


def test_per_block_ratios_and_errors():
    w = tiny_weights(tiny_config("llama", n_layers=3, ffn_dim=128), seed=1)
    spec = PruneSpec(ffn=0.25, blocks=((1, 0.5, None), (2, 0.0, None)))
    p = prune_decoder(w, spec)
    assert [lw.w_up.shape[0] for lw in p.layers] == [96, 64, 128]
    pol = policy_from_dict(
        {
            "default": "int4-g32",
            "prune": {"ffn": 0.25, "blocks": {"1": {"ffn": 0.5}, "2": {"ffn": 0.0}}},
        },
        "x.toml",
    )
    Llama(compress(w, pol), pol)
    with pytest.raises(ValueError, match="block 5"):
        prune_decoder(w, PruneSpec(blocks=((5, 0.5, None),)))


def test_minilm_pruned_equals_zeroed(tiny):
    params, nh = tiny.params, tiny.n_heads
    hd = tiny.hidden // nh
    spec = PruneSpec(ffn=0.5, heads=0.5)
    pruned = prune_minilm(params, nh, spec)
    zeroed = dict(params)
    for i in range(tiny.n_layers):
        p = f"encoder.layer.{i}."
        inter = params[p + "intermediate.dense.weight"]
        kept = [
            int(np.flatnonzero((inter == r).all(1))[0])
            for r in pruned[p + "intermediate.dense.weight"]
        ]
        drop = np.setdiff1d(np.arange(inter.shape[0]), kept)
        od = params[p + "output.dense.weight"].copy()
        od[:, drop] = 0  # GELU(bias) of a dropped channel is multiplied by a zero column
        zeroed[p + "output.dense.weight"] = od
        q = params[p + "attention.self.query.weight"].reshape(nh, hd, -1)
        kept_h = [
            int(np.flatnonzero((q == h).all((1, 2)))[0])
            for h in pruned[p + "attention.self.query.weight"].reshape(-1, hd, q.shape[2])
        ]
        drop_h = np.setdiff1d(np.arange(nh), kept_h)
        o = params[p + "attention.output.dense.weight"].copy().reshape(-1, nh, hd)
        o[:, drop_h] = 0
        zeroed[p + "attention.output.dense.weight"] = o.reshape(o.shape[0], -1)
        assert pruned[p + "attention.self.query.weight"].shape[0] == nh // 2 * hd
    sentences = ["A cat sat on the mat.", "Numbers: 12 and 7.", "hello"]
    tiny.params = zeroed
    tiny._cache.clear()
    try:
        ref = tiny.encode(sentences, "fp32")
    finally:
        tiny.params = params
        tiny._cache.clear()
    pol = policy_from_dict(
        {"name": "p", "default": "fp32", "prune": {"ffn": 0.5, "heads": 0.5}}, "<test>"
    )
    got = tiny.encode(sentences, pol)
    assert np.abs(got - ref).max() <= PRUNED_VS_ZEROED_ABS_TOL
    lin = tiny.linears(pol)
    assert (
        lin["encoder.layer.0.intermediate.dense"].shape[0]
        == pruned["encoder.layer.0.intermediate.dense.weight"].shape[0]
    )


# ----------------------------------------------------------------------------------------------
# Activation-aware score (prune.score = "activation")

CAL_TOKENS = list(range(3, 200))  # tiny models have no tokenizer file: windows from these ids


def _act_policy(ffn, heads, unit="query"):
    return policy_from_dict(
        {
            "name": "act",
            "default": "fp32",
            "prune": {
                "ffn": ffn,
                "heads": heads,
                "head_unit": unit,
                "score": "activation",
                "samples": 3,
                "sample_tokens": 16,
            },
        },
        "<act>",
    )


def _norms(w, pol):
    from harmony_ref.compress.observe import activation_norms, calibration_windows

    act = pol.prune.windows()
    base = Llama(w, "fp32", max_context=act.sample_tokens)
    return activation_norms(base, calibration_windows(w, act, CAL_TOKENS), w.config.head_dim)


@pytest.mark.parametrize("unit", ["query", "kv"])
@pytest.mark.parametrize("ffn,heads", [(0.5, 0.0), (0.25, 0.5)])
def test_activation_pruned_runtime_equals_zeroed(ffn, heads, unit):
    """The runtime under an activation-scored [prune] gives the FP32 reference's logits with
    the same channels / heads zeroed (the scores only choose which units; the mechanics are
    the L1 path's)."""
    c = tiny_config("llama", n_heads=8, n_kv_heads=2, ffn_dim=128)
    w = tiny_weights(c, seed=7)
    pol = _act_policy(ffn, heads, unit)
    pruned = prune_decoder(w, pol.prune, _norms(w, pol))
    ref = LlamaRef(_zeroed(w, pruned, c.head_dim)).prefill(TOKENS, all_logits=True)
    assert (
        np.abs(LlamaRef(pruned).prefill(TOKENS, all_logits=True) - ref).max()
        <= PRUNED_VS_ZEROED_ABS_TOL
    )
    m = Llama(compress(w, pol, CAL_TOKENS), pol)
    assert np.abs(m.prefill(TOKENS, all_logits=True) - ref).max() <= 1e-3  # fp16 KV cache
    assert m.blocks[0].ffn_dim == pruned.layers[0].w_up.shape[0]
    # a different criterion: the kept channels differ from L1's somewhere on this model
    l1 = prune_decoder(w, PruneSpec(ffn=ffn, heads=heads, head_unit=unit))
    assert any(
        not np.array_equal(a.w_up, b.w_up) or not np.array_equal(a.wq, b.wq)
        for a, b in zip(l1.layers, pruned.layers)
    )


def test_activation_score_prefers_high_activation_channels():
    """Constructed: 32 of 128 FFN channels have 10x smaller weights (L1 drops them) but carry
    the largest activations; every down column has the same L1 norm. The activation score keeps
    them and drops the quiet channels; L1 does the opposite."""
    rng = np.random.default_rng(3)
    up, gate = (rng.standard_normal((128, 16)).astype(np.float32) for _ in range(2))
    down = np.sign(rng.standard_normal((16, 128))).astype(np.float32)  # every |column| = 16
    loud = rng.choice(128, 32, replace=False)
    up[loud] *= 0.1
    gate[loud] *= 0.1
    act = np.ones(128)
    act[loud] = 50.0
    quiet = np.argsort(rng.standard_normal(128))
    quiet = np.setdiff1d(quiet, loud)[:32]
    act[quiet] = 0.01
    by_act = set(ffn_keep(gate, up, down, 0.25, act=act).tolist())
    by_l1 = set(ffn_keep(gate, up, down, 0.25).tolist())
    assert set(loud.tolist()) <= by_act and not set(quiet.tolist()) & by_act
    assert not set(loud.tolist()) & by_l1
    # heads: the head with the loudest output survives even with the smallest o columns
    c = tiny_config("llama", n_heads=4, n_kv_heads=1, head_dim=16)
    lw = tiny_weights(c, seed=2).layers[0]
    lw = dataclasses.replace(lw, wo=lw.wo.copy())
    lw.wo[:, :16] *= 0.1  # head 0: smallest o columns
    q_l1, _ = decoder_heads_keep(lw, 16, 0.25, "query")
    q_act, _ = decoder_heads_keep(lw, 16, 0.25, "query", act=np.array([100.0, 1, 1, 0.5]))
    assert 0 not in q_l1 and 0 in q_act and 3 not in q_act


def test_activation_norms_are_the_inputs_norms():
    """Block 0's up_proj row j scaled by 3: its FFN norm (the SwiGLU output, linear in up)
    scales by exactly 3, the other channels' do not move; head norms are the o inputs' L2."""
    c = tiny_config("llama", ffn_dim=128)
    w = tiny_weights(c, seed=4)
    pol = _act_policy(0.25, 0.0)
    n0 = _norms(w, pol)
    lw = w.layers[0]
    up = lw.w_up.copy()
    up[5] *= 3
    w3 = dataclasses.replace(w, layers=[dataclasses.replace(lw, w_up=up), *w.layers[1:]])
    n3 = _norms(w3, pol)
    np.testing.assert_allclose(n3[0][0][5], 3 * n0[0][0][5], rtol=1e-5)
    others = np.delete(np.arange(128), 5)
    np.testing.assert_allclose(n3[0][0][others], n0[0][0][others], rtol=1e-5)
    assert n0[0][1].shape == (c.n_heads,) and (n0[0][1] > 0).all()


def test_activation_score_fields_validated(tmp_path):
    for prune, pattern in [
        ({"score": "l2"}, "prune.score"),
        ({"samples": 4}, "prune.samples' = 4: applies to score"),
        ({"score": "activation", "samples": 0}, "prune.samples' = 0"),
        ({"score": "activation", "sample_tokens": 1}, "sample_tokens"),
    ]:
        with pytest.raises(ValueError, match=pattern) as e:
            policy_from_dict({"default": "fp32", "prune": prune}, "my.toml")
        assert "my.toml" in str(e.value)
    pol = _act_policy(0.25, 0.5)
    from harmony_ref.quant.policy import load_policy

    f = tmp_path / "p.toml"
    f.write_text(pol.to_toml())
    assert load_policy(str(f)).prune == pol.prune
    with pytest.raises(ValueError, match="MiniLM prunes by L1 only"):
        prune_minilm({}, 4, pol.prune)
