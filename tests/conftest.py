"""Fixtures shared by several test modules.

- `tiny` (module): a MiniLM built on the tiny random checkpoint of tests/fixtures/minilm/tiny.py.
  Module-scoped, not session-scoped: MiniLM caches quantized linears per policy, so each module
  starts from a fresh model as it did when every module defined its own copy of this fixture.
"""

from __future__ import annotations

import pytest

from tests.fixtures.minilm.tiny import make_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model, _, _ = make_tiny_model(tmp_path_factory.mktemp("tiny"))
    return model
