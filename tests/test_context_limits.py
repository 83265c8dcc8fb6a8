"""Issue 16 item 5: a decoder's context is bounded by its model's max positions (as an encoder's
prompt already is); an absurd context is refused with the number (and the KV cache it needs)."""

import pytest

from harmony_ref.cli import main
from harmony_ref.config import RunConfig


def test_llama2_context_above_4096_is_refused():
    RunConfig.from_names("llama-2-7b", context_tokens=4096)  # its maximum: fine
    with pytest.raises(
        ValueError,
        match=r"context_tokens = 8192 exceeds llama-2-7b's "
        r"max_positions = 4096",
    ):
        RunConfig.from_names("llama-2-7b", context_tokens=8192)


@pytest.mark.parametrize(
    "argv",
    [
        ["predict", "--model", "llama-2-7b", "--context", "8192"],
        ["predict", "--context", "10000000"],
        ["run", "--context-tokens", "10000000", "--no-record"],
        ["compare", "--model", "llama-2-7b", "--context", "5000"],
    ],
)
def test_commands_refuse_with_the_number(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "max_positions" in err and "Traceback" not in err


def test_absurd_context_names_the_kv_cache_size():
    with pytest.raises(ValueError, match=r"10000000.*TB of KV cache|TB of KV cache.*10000000"):
        RunConfig.from_names("llama-3.2-3b", context_tokens=10_000_000)
