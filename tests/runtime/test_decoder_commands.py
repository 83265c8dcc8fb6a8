"""`harmony-ref generate` and `harmony-ref tokenize` end to end on a tiny GGUF and HF directory,
and bad checkpoints: one error line naming the file and tensor, exit 2, no traceback."""

import json

import numpy as np
import pytest

from harmony_ref.checkpoint.gguf import write_gguf
from harmony_ref.cli import main
from tests.fixtures.decoder.tiny import tiny_vocab, tiny_weights, write_tiny_hf


def test_generate_json(tiny_gguf, capsys):
    assert (
        main(
            [
                "generate",
                "--model",
                str(tiny_gguf),
                "--policy",
                "int4-g32",
                "--prompt",
                "the cat",
                "--max-new",
                "5",
                "--threads",
                "1",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["new_tokens"] + out["stopped_at_eos"] >= 1 and out["prompt_tokens"] == 5
    for key in ("ttft_ms", "prefill_tokens_per_s", "decode_tokens_per_s", "peak_rss_mb"):
        assert key in out
    assert isinstance(out["completion"], str) and out["policy"] == "int4-g32"


def test_generate_text_chat_seeded_and_hf(tiny_gguf, tmp_path, capsys):
    argv = [
        "generate",
        "--model",
        str(tiny_gguf),
        "--policy",
        "int8",
        "--prompt",
        "hi",
        "--chat",
        "--max-new",
        "4",
        "--seed",
        "3",
        "--kv",
        "int8",
    ]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "TTFT" in first and "decode" in first and "peak RSS" in first
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[0] == first.splitlines()[0]  # same seed
    write_tiny_hf(tmp_path / "hf")
    assert (
        main(
            [
                "generate",
                "--model",
                str(tmp_path / "hf"),
                "--policy",
                "reference",
                "--prompt",
                "a",
                "--max-new",
                "2",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["policy"] == "fp32-reference"


def test_tokenize(tiny_gguf, tmp_path, capsys):
    assert main(["tokenize", "--model", str(tiny_gguf), "--text", "the 12", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    tokens, _, _ = tiny_vocab()
    assert [tokens[i] for i in out["ids"]] == out["tokens"] == ["t", "he", "Ġ", "1", "2"]
    (tmp_path / "t.txt").write_text("the 12", encoding="utf-8")
    assert main(["tokenize", "--model", str(tiny_gguf), "--file", str(tmp_path / "t.txt")]) == 0
    assert capsys.readouterr().out.split() == [str(i) for i in out["ids"]]


def _bad(tmp_path, edit=None, truncate=False):
    w = tiny_weights()
    if edit:
        edit(w)
    tokens, types, merges = tiny_vocab()
    path = tmp_path / "bad.gguf"
    write_gguf(w, path, tokens=tokens, token_types=types, merges=merges)
    if truncate:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    return path


@pytest.mark.parametrize(
    "case,pattern",
    [
        ("truncated", r"bad\.gguf: not a readable GGUF file"),
        ("nan", r"bad\.gguf: tensor blk\.1\.attn_v\.weight: value nan"),
        ("shape", r"bad\.gguf: tensor blk\.0\.ffn_up\.weight: shape"),
    ],
)
def test_bad_checkpoint_is_one_line_exit_2(tmp_path, capsys, case, pattern):
    import re

    def nan(w):
        w.layers[1].wv[2, 2] = np.nan

    def shape(w):
        w.layers[0].w_up = w.layers[0].w_up[:64]

    path = _bad(tmp_path, edit={"nan": nan, "shape": shape}.get(case), truncate=case == "truncated")
    for argv in (["generate", "--prompt", "x"], ["tokenize", "--text", "x"]):
        if argv[0] == "tokenize" and case != "truncated":
            continue  # the tokenizer reads no weights
        code = main([*argv, "--model", str(path)])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and re.search(pattern, err), err
        assert "Traceback" not in err


def test_bad_arguments(tiny_gguf, capsys):
    assert main(["generate", "--model", str(tiny_gguf), "--prompt", "x", "--max-new", "0"]) == 2
    assert main(["generate", "--model", "nonsense-model", "--prompt", "x"]) == 2
    assert "not a shipped model" in capsys.readouterr().err
    assert main(["generate", "--model", str(tiny_gguf), "--prompt", "x", "--temperature", "1"]) == 2
