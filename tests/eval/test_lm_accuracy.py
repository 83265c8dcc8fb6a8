"""`harmony-ref accuracy` on a decoder (tiny GGUF written by the test): the table, --json, the
reference-logit cache (a second run reads it and gives the same numbers), --corpus, record
metrics naming the model, and bad input (exit 2, one line, before any scoring)."""

import json

import numpy as np
import pytest

from harmony_ref.cli import main
from harmony_ref.eval.lm_accuracy import LM_METRIC_KIND, Corpus, lm_accuracy, lm_metrics

TEXT = (
    "the cat sat on the mat and then the dog ran in the sun. " * 12
    + "Numbers 12, 345 and 6789; code: def f(x): return x * 2\n" * 4
)


@pytest.fixture()
def corpus_file(tmp_path):
    p = tmp_path / "corpus.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARMONY_REF_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HARMONY_REF_NO_LM_CACHE", raising=False)
    return tmp_path / "cache"


def test_cache_is_reused_and_gives_the_same_numbers(tiny_gguf, corpus_file, cache, monkeypatch):
    corpus = Corpus.from_file(corpus_file)
    a = lm_accuracy(str(tiny_gguf), [("int8", "fp16")], corpus, context=32)
    files = sorted((cache / "lm-reference").rglob("chunk-*.npy"))
    assert len(files) == a.result["chunks"] >= 2 and a.result["reference_chunks_cached"] == 0
    # the second run must not run the reference at all
    import harmony_ref.eval.lm as lm

    monkeypatch.setattr(lm, "LlamaRef", None)
    b = lm_accuracy(str(tiny_gguf), [("int8", "fp16"), ("int4-g32", "int8")], corpus, context=32)
    assert b.result["reference_chunks_cached"] == b.result["chunks"]
    assert b.rows()[:2] == a.rows()
    # a different context is a different key
    monkeypatch.undo()
    monkeypatch.setenv("HARMONY_REF_CACHE", str(cache))
    c = lm_accuracy(str(tiny_gguf), [("int8", "fp16")], corpus, context=16, max_chunks=2)
    assert c.result["reference_chunks_cached"] == 0 and c.result["chunks"] == 2
    m = lm_metrics(b, "int4-g32+kv-int8")
    assert {x.kind for x in m if x.name != "lm_scored_tokens"} == {LM_METRIC_KIND}
    assert all(
        "tiny.gguf" in x.description and "dequantized exactly" in x.description
        for x in m
        if x.name.startswith("lm_kld")
    )
    assert m.value("lm_ppl_ratio") == pytest.approx(b.rows()[2]["ppl_ratio"])


def test_damaged_cache_file_is_recomputed(tiny_gguf, corpus_file, cache):
    corpus = Corpus.from_file(corpus_file)
    a = lm_accuracy(str(tiny_gguf), [("fp32", "fp16")], corpus, context=32, max_chunks=1)
    (f,) = (cache / "lm-reference").rglob("chunk-*.npy")
    f.write_bytes(b"garbage")
    b = lm_accuracy(str(tiny_gguf), [("fp32", "fp16")], corpus, context=32, max_chunks=1)
    assert b.result["reference_chunks_cached"] == 0 and b.rows() == a.rows()
    assert np.load(f).dtype == np.float32


def test_accuracy_command_table_and_json(tiny_gguf, corpus_file, capsys):
    argv = [
        "accuracy",
        "--model",
        str(tiny_gguf),
        "--policy",
        "int8",
        "--policy",
        "int4-g32",
        "--corpus",
        str(corpus_file),
        "--context",
        "32",
        "--kv-dtype",
        "fp16",
        "--kv-dtype",
        "int8",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "dequantized exactly" in out and "context 32" in out and "scored tokens" in out
    assert main(argv + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in d["rows"]] == [
        "FP32 reference (NumPy)",
        "int8",
        "int8",
        "int4-g32",
        "int4-g32",
    ]
    assert [r["kv_cache"] for r in d["rows"]][1:] == ["fp16", "int8"] * 2
    assert d["context"] == 32 and d["scored_tokens"] == d["chunks"] * 15
    assert d["reference"] == "FP32 = the checkpoint's weights dequantized exactly"


@pytest.mark.parametrize(
    "argv,pattern",
    [
        (["--corpus", "NOFILE"], "no such file"),
        (["--corpus", "BINARY"], "not UTF-8"),
        (["--policy", "no-such-policy"], "no-such-policy"),
        (["--context", "7"], "even number"),
        (["--context", "4096"], "fewer than one chunk|exceeds"),
        (["--pairs", "x.tsv"], "applies to --model all-minilm-l6"),
        (["--chunks", "0"], "--chunks"),
        (["--context", "32", "--chunks", "100000"], r"--chunks 100000: corpus .* has \d+ chunks"),
    ],
)
def test_accuracy_bad_input_exit_2(tiny_gguf, tmp_path, capsys, argv, pattern):
    import re

    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00bad")
    argv = [
        str(tmp_path / "none.txt")
        if a == "NOFILE"
        else str(tmp_path / "bin.txt")
        if a == "BINARY"
        else a
        for a in argv
    ]
    assert main(["accuracy", "--model", str(tiny_gguf), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(pattern, err), err


def test_bad_checkpoint_through_accuracy(tmp_path, capsys):
    from tests.runtime.test_decoder_commands import _bad

    path = _bad(tmp_path, truncate=True)
    assert main(["accuracy", "--model", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.gguf: not a readable GGUF file" in err and len(err.splitlines()) == 1


# --- issue 45 item 3: a corpus read only as far as the chunks need, with a stated cap ----------


class _Spy:
    """A tokenizer that records the longest text it was asked to encode."""

    def __init__(self, tok):
        self.tok, self.longest, self.add_bos = tok, 0, tok.add_bos

    def encode(self, text, add_bos=None):
        self.longest = max(self.longest, len(text))
        return self.tok.encode(text, add_bos)


def test_a_long_corpus_is_tokenized_only_as_far_as_the_chunks_need(tiny_gguf, tmp_path):
    from harmony_ref.eval.lm_accuracy import CORPUS_PIECE_CHARS
    from harmony_ref.runtime.tokenizer import Tokenizer

    path = tmp_path / "long.txt"
    path.write_text(TEXT * (4 * CORPUS_PIECE_CHARS // len(TEXT)), encoding="utf-8")
    corpus = Corpus.from_file(path)
    spy = _Spy(Tokenizer.from_gguf(tiny_gguf))
    need = 3 * 32
    ids = corpus.tokens(spy, need)
    whole = spy.tok.encode(corpus.text)
    assert ids[:need] == whole[:need]  # the chunks scored are the whole text's chunks
    assert len(ids) >= need and spy.longest < 2 * CORPUS_PIECE_CHARS < len(corpus.text)
    assert corpus.tokens(spy, None) == whole  # every chunk: the whole text


def test_a_corpus_past_the_cap_is_read_to_its_first_megabytes(tmp_path, monkeypatch):
    from harmony_ref.eval import lm_accuracy

    monkeypatch.setattr(lm_accuracy, "CORPUS_MAX_MB", 1)
    path = tmp_path / "big.txt"
    line = "caf\u00e9 au lait, s'il vous pla\u00eet\n"  # 2-byte characters, cut anywhere
    path.write_text(line * (1_500_000 // len(line.encode())), encoding="utf-8")
    corpus = Corpus.from_file(path)
    assert corpus.name == f"{path} (its first 1 MB)"
    assert len(corpus.text.encode()) <= 1_000_000 and corpus.text.endswith("\n")
    assert (path.read_text(encoding="utf-8")).startswith(corpus.text)


def test_the_corpus_cap_is_the_one_the_help_and_docs_state():
    from pathlib import Path

    from harmony_ref.eval.lm_accuracy import CORPUS_MAX_MB

    root = Path(__file__).resolve().parents[2]
    said = f"first {CORPUS_MAX_MB} MB"
    for f in ("harmony_ref/commands/accuracy.py", "harmony_ref/commands/check_runtime.py"):
        assert said in (root / f).read_text(), f
    assert said in (root / "docs/explanations/decoders.md").read_text()
