"""Pruning with repair (model/prune.py repair_next, runtime wiring in runtime/llama.py): the
repaired layer equals the ridge least-squares solution for the correction, computed here with
lstsq on the stacked system; it never does worse than no repair on the calibration inputs; a
pruned and repaired tiny decoder runs, with its down_proj changed and the shapes of plain
pruning; the policy fields are validated. The OBS choice (obs_keep): one step removes the column
a brute-force search over every candidate's refitted error removes, its compensations add up to
repair_next of the kept set, a column its neighbours reproduce goes first however large, and a
decoder pruned with score = "obs" runs."""

import numpy as np
import pytest

from harmony_ref.model.prune import obs_keep, repair_next
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
    from harmony_ref.compress import compress
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
    plain = Llama(compress(w, pol(False), toks), pol(False))
    fixed = Llama(compress(w, pol(True), toks), pol(True))
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


def _refit_error(x, w, keep, lam):
    """||X W'^T - X W^T||^2 + lam ||W' - W_K||^2 after the ridge refit of `keep`: what OBS's
    cost of removing the rest is, on H = X^T X + lam I."""
    wk = repair_next(w, keep, x.T @ x, 0.0, lam).astype(np.float64)
    full = np.zeros_like(w)
    full[:, keep] = wk
    d = full - w
    return float(np.einsum("ij,jk,ik->", d, x.T @ x + lam * np.eye(w.shape[1]), d))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_obs_one_step_is_the_brute_force_choice(seed):
    rng = np.random.default_rng(seed)
    x = _acts(seed + 10, k=16)
    w = rng.standard_normal((4, 16))
    lam = 0.02 * np.mean(np.diag(x.T @ x))
    kept, _ = obs_keep(w, x.T @ x, 15, lam)
    errors = [_refit_error(x, w, np.delete(np.arange(16), j), lam) for j in range(16)]
    assert np.setdiff1d(np.arange(16), kept).tolist() == [int(np.argmin(errors))]


def test_obs_compensation_is_the_repair_of_what_it_keeps():
    rng = np.random.default_rng(4)
    x = _acts(5)
    w = rng.standard_normal((6, 24))
    g = x.T @ x
    lam = 0.05 * np.mean(np.diag(g))
    kept, compensated = obs_keep(w, g, 15, lam)
    assert kept.size == 15 and (np.diff(kept) > 0).all()
    removed = np.setdiff1d(np.arange(24), kept)
    assert np.all(compensated[:, removed] == 0)
    # float32 output of repair_next against the float64 downdates: float32 resolution
    assert np.allclose(
        compensated[:, kept], repair_next(w, kept, g, 0.0, lam), rtol=1e-5, atol=1e-5
    )
    assert np.array_equal(obs_keep(w, g, 24, lam)[0], np.arange(24))


def test_obs_removes_a_reproducible_column_first():
    rng = np.random.default_rng(6)
    x = _acts(7, k=10)
    x[:, 4] = 0.7 * x[:, 1] - 0.3 * x[:, 8]  # any of channels 1, 4, 8 is the others' sum
    w = rng.standard_normal((5, 10))
    w[:, [1, 4, 8]] *= 50.0  # and they write the most: every norm-based score keeps them
    kept, _ = obs_keep(w, x.T @ x, 9, 1e-6 * np.mean(np.diag(x.T @ x)))
    assert np.setdiff1d(np.arange(10), kept).tolist()[0] in (1, 4, 8)


def test_obs_pruned_decoder_runs():
    from harmony_ref.compress import compress
    from harmony_ref.runtime.llama import Llama

    w = tiny_weights(tiny_config("llama", n_heads=8, n_kv_heads=2, ffn_dim=128), seed=9)
    pol = policy_from_dict(
        {
            "name": "o",
            "default": "fp32",
            "prune": {
                "ffn": 0.5,
                "score": "obs",
                "repair": True,
                "samples": 2,
                "sample_tokens": 16,
            },
        },
        "<o>",
    )
    assert "obs" in pol.prune.label and pol.prune.calibrates
    m = Llama(compress(w, pol, np.arange(3, 60, 3)), pol)
    assert [b.ffn_dim for b in m.blocks] == [64, 64]
    assert np.isfinite(m.prefill([1, 40, 50, 260])).all()


@pytest.mark.parametrize(
    "table, match",
    [
        ({"ffn": 0.1, "repair": 1}, r"field 'prune.repair' = 1: must be true or false"),
        ({"ffn": 0.1, "repair_ridge": 0.1}, r"'prune.repair_ridge' = 0.1: applies with repair"),
        ({"ffn": 0.1, "repair": True, "repair_ridge": 0}, r"'prune.repair_ridge' = 0: must be"),
        ({"ffn": 0.1, "samples": 4}, r"'prune.samples' = 4: applies to score"),
        ({"ffn": 0.1, "score": "obs"}, r"'prune.score' = \"obs\": .* needs repair = true"),
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


def test_repairs_on_the_same_windows_share_one_gram_pass(monkeypatch):
    import harmony_ref.compress.pipeline as pipeline
    from harmony_ref.runtime.llama import Llama

    w = tiny_weights(tiny_config("llama", n_heads=8, n_kv_heads=2, ffn_dim=128), seed=3)
    calls = []
    real = pipeline.activation_grams

    def spy(model, windows):
        calls.append(np.asarray(windows).copy())
        return real(model, windows)

    monkeypatch.setattr(pipeline, "activation_grams", spy)
    pipeline._GRAMS.clear()

    def pol(**prune):
        base = {"ffn": 0.25, "repair": True, "samples": 2, "sample_tokens": 16}
        return policy_from_dict({"name": "g", "default": "fp32", "prune": {**base, **prune}}, "<g>")

    toks = np.arange(3, 90, 2)
    a = Llama(pipeline.compress(w, pol(), toks), pol())
    b_pol = pol(repair_ridge=0.5, score="obs")
    b = Llama(pipeline.compress(w, b_pol, toks), b_pol)
    assert len(calls) == 1  # the same weights and windows: one pass
    pipeline.compress(w, pol(seed=1), toks)
    assert len(calls) == 2 and not np.array_equal(calls[0], calls[1])  # other windows: a pass
    # what the shared pass gave is what a fresh one gives
    pipeline._GRAMS.clear()
    again = Llama(pipeline.compress(w, pol(), toks), pol())
    assert len(calls) == 3 and np.array_equal(again.blocks[0].down.stored, a.blocks[0].down.stored)
    assert b.blocks[0].ffn_dim == a.blocks[0].ffn_dim
