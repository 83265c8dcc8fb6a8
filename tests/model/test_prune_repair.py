"""Pruning with repair (model/prune.py repair_next, runtime wiring in runtime/llama.py): the
repaired layer equals the ridge least-squares solution for the correction, computed here with
lstsq on the stacked system; it never does worse than no repair on the calibration inputs; a
pruned and repaired tiny decoder runs, with its down_proj changed and the shapes of plain
pruning; the policy fields are validated."""

import numpy as np
import pytest

from harmony_ref.model.prune import repair_next
from harmony_ref.quant.policy import policy_from_dict
from tests.fixtures.decoder.tiny import tiny_config, tiny_weights


def _acts(seed, n=200, k=24):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, k)) @ rng.standard_normal((k, k)) * 0.5 + rng.standard_normal(
        (n, k)
    )


def test_repair_is_the_ridge_least_squares_correction():
    rng = np.random.default_rng(0)
    x = _acts(1)
    w = rng.standard_normal((5, 24))
    keep = np.sort(rng.choice(24, 18, replace=False))
    removed = np.setdiff1d(np.arange(24), keep)
    ridge = 0.05
    g = x.T @ x
    got = repair_next(w, keep, g, ridge)
    lam = ridge * np.mean(np.diag(g[np.ix_(keep, keep)]))
    # min ||X_K D^T - X_R W_R^T||^2 + lam ||D||^2 as one least-squares problem
    a = np.vstack([x[:, keep], np.sqrt(lam) * np.eye(keep.size)])
    b = np.vstack([x[:, removed] @ w[:, removed].T, np.zeros((keep.size, 5))])
    d_t, *_ = np.linalg.lstsq(a, b, rcond=None)
    assert np.allclose(got, w[:, keep] + d_t.T, rtol=1e-5, atol=1e-5)


def test_repair_lowers_the_output_error():
    rng = np.random.default_rng(2)
    x = _acts(3)
    w = rng.standard_normal((6, 24))
    keep = np.arange(0, 24, 2)
    full = x @ w.T

    def err(wk):
        return float(((x[:, keep] @ wk.T - full) ** 2).sum())

    assert err(repair_next(w, keep, x.T @ x, 1e-3)) < 0.8 * err(w[:, keep])
    assert np.array_equal(repair_next(w, np.arange(24), x.T @ x, 0.01), w.astype(np.float32))


def test_repaired_decoder_runs_with_plain_pruning_shapes():
    from harmony_ref.runtime.llama import Llama

    w = tiny_weights(tiny_config("llama", n_heads=8, n_kv_heads=2, ffn_dim=128), seed=9)
    base = {"ffn": 0.5, "heads": 0.5, "samples": 2, "sample_tokens": 16}

    def pol(repair):
        return policy_from_dict(
            {
                "name": "p",
                "default": "fp32",
                "prune": {**base, "score": "activation", "repair": repair},
            },
            "<p>",
        )

    toks = np.arange(3, 60, 3)
    plain = Llama(w, pol(False), calibration_tokens=toks)
    fixed = Llama(w, pol(True), calibration_tokens=toks)
    assert (
        [(b.n_heads, b.ffn_dim) for b in fixed.blocks]
        == [(b.n_heads, b.ffn_dim) for b in plain.blocks]
        == [(4, 64)] * 2
    )
    assert not np.array_equal(fixed.blocks[0].down.stored, plain.blocks[0].down.stored)
    # the same channels kept: the activation norms are the Grams' diagonals
    assert np.array_equal(
        fixed.blocks[0].gate_up.single.stored, plain.blocks[0].gate_up.single.stored
    )
    assert np.isfinite(fixed.prefill([1, 40, 50, 260])).all()


@pytest.mark.parametrize(
    "table, match",
    [
        ({"ffn": 0.1, "repair": 1}, r"field 'prune.repair' = 1: must be true or false"),
        ({"ffn": 0.1, "repair_ridge": 0.1}, r"'prune.repair_ridge' = 0.1: applies with repair"),
        ({"ffn": 0.1, "repair": True, "repair_ridge": 0}, r"'prune.repair_ridge' = 0: must be"),
        ({"ffn": 0.1, "samples": 4}, r"'prune.samples' = 4: applies to score"),
    ],
)
def test_bad_repair_fields(table, match):
    with pytest.raises(ValueError, match=match):
        policy_from_dict({"default": "fp32", "prune": table}, "<p>")


def test_repair_round_trips_and_labels():
    import tomllib

    p = policy_from_dict(
        {"name": "r", "default": "fp32", "prune": {"ffn": 0.1, "repair": True, "samples": 32}},
        "<r>",
    )
    assert p.prune.calibrates and "repair" in p.prune.label
    assert policy_from_dict(tomllib.loads(p.to_toml()), "<r>") == p
