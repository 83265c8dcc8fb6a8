"""The decoder tokenizer: a byte-level BPE from a GGUF's vocabulary and a SentencePiece-style
model from a GGUF's vocabulary and scores (tiny vocabularies written by the tests; the real
SmolLM2 and Gemma 3 GGUFs' ids against llama.cpp's, committed in tests/fixtures/decoder/
llamacpp_tokens*.json by make_llamacpp_tokens.py), decode(encode(t)) == t, control tokens kept
whole, the chat template, an HF tokenizer.json used as is."""

import json
from pathlib import Path

import pytest

from harmony_ref.model.decoder import CheckpointError
from harmony_ref.runtime.tokenizer import Tokenizer, build_bpe
from tests.fixtures.decoder.tiny import tiny_vocab, write_tiny_gguf, write_tiny_hf

FIXTURES = Path(__file__).parents[1] / "fixtures" / "decoder"
FIXTURE = json.loads((FIXTURES / "llamacpp_tokens.json").read_text(encoding="utf-8"))
GEMMA_FIXTURE = json.loads((FIXTURES / "llamacpp_tokens_gemma3.json").read_text(encoding="utf-8"))
ROUND_TRIP = [
    "plain words and the theme",
    "digits 0123456789 and 3.14",
    "  runs   of\t\tspace\n\n\n x ",
    "naïve café 日本語 😀🚀 👨‍👩‍👧",
    "def f(x):\n    return x**2\n",
    "",
    "\r\n\r\n",
    "a<|im_end|>b",
]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok") / "t.gguf"
    write_tiny_gguf(path)
    return Tokenizer.from_gguf(path)


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip_tiny(tiny_gguf, text):
    assert tiny_gguf.decode(tiny_gguf.encode(text)) == text


def test_digits_split_one_by_one_and_controls_whole(tiny_gguf):
    tokens, _, _ = tiny_vocab()
    ids = tiny_gguf.encode("in 2024<|im_end|>")
    pieces = [tokens[i] for i in ids]
    assert pieces[-1] == "<|im_end|>"
    assert [p for p in pieces if p.isdigit()] == ["2", "0", "2", "4"]
    assert tiny_gguf.eog_ids == {0, 2}
    assert tiny_gguf.decode(ids, skip_special=True) == "in 2024"


def test_chat_template(tiny_gguf):
    text = tiny_gguf.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tiny_gguf.encode(text)[0] == 1


def test_hf_directory_tokenizer_json_as_is(tmp_path, tiny_gguf):
    write_tiny_hf(tmp_path)
    tok = Tokenizer.from_hf_dir(tmp_path)
    for text in ROUND_TRIP:
        assert tok.encode(text) == tiny_gguf.encode(text)
    assert tok.eos_id == 2 and tok.chat_template


def test_unknown_pre_tokenizer_and_model_are_refused(tmp_path):
    tokens, types, merges = tiny_vocab()
    with pytest.raises(CheckpointError, match="'llama-bpe' is not supported"):
        build_bpe(tokens, merges, types, "llama-bpe")
    from harmony_ref.checkpoint.gguf import write_gguf
    from tests.fixtures.decoder.tiny import tiny_weights

    write_gguf(tiny_weights(), tmp_path / "nt.gguf")  # no tokenizer metadata at all
    with pytest.raises(CheckpointError, match="tokenizer.ggml.model = None"):
        Tokenizer.from_gguf(tmp_path / "nt.gguf")


@pytest.mark.network
def test_real_smollm2_ids_equal_llama_cpp():
    from harmony_ref.checkpoint.assets import AssetUnavailable
    from harmony_ref.checkpoint.smollm2 import GGUF_SHA256, smollm2_gguf
    from harmony_ref.eval.lm import load_corpus

    try:
        path = smollm2_gguf()
    except AssetUnavailable as e:
        pytest.skip(f"SmolLM2 weights unavailable (package registry unreachable): {e}")
    assert FIXTURE["gguf_sha256"] == GGUF_SHA256
    _check_llama_cpp_ids(Tokenizer.from_gguf(path), FIXTURE, load_corpus)


def _check_llama_cpp_ids(tok, fixture, load_corpus, bos: int = 0):
    """Our ids equal llama.cpp's on every string and corpus part of `fixture`; decoding the ids
    after the `bos` leading BOS tokens gives the text back (SentencePiece: "▁" as a space)."""
    for text, ids in zip(fixture["strings"], fixture["ids"]):
        assert tok.encode(text) == ids, repr(text)
        assert tok.decode(ids[bos:]) == (text.replace("▁", " ") if bos else text), repr(text)
    for part, ids in fixture["corpus"].items():
        text = load_corpus(part)
        assert tok.encode(text) == ids, part
        assert tok.decode(ids[bos:]) == text


# ----------------------------------------------------------------------------------------------
# SentencePiece-style vocabularies (tokenizer.ggml.model = llama): Gemma 3


@pytest.fixture(scope="module")
def tiny_spm(tmp_path_factory):
    from tests.fixtures.decoder.tiny import tiny_config

    path = tmp_path_factory.mktemp("spm") / "g.gguf"
    write_tiny_gguf(path, tiny_config("gemma3"))
    return Tokenizer.from_gguf(path)


@pytest.mark.parametrize("text", ROUND_TRIP + ["aba ba", "x<b>y  z\n\nw", "▁ itself"])
def test_spm_round_trip_tiny(tiny_spm, text):
    ids = tiny_spm.encode(text)
    assert ids[:1] == [2]  # the file says add_bos_token
    # SentencePiece's one loss, llama.cpp's too: a literal "▁" is a space once decoded
    assert tiny_spm.decode(ids[1:]) == text.replace("▁", " ")


def test_spm_merges_by_score_and_cuts_user_defined_tokens(tiny_spm):
    from tests.fixtures.decoder.tiny import tiny_spm_vocab

    tokens, _, _ = tiny_spm_vocab()
    pieces = [tokens[i] for i in tiny_spm.encode("the and  of\n", add_bos=False)]
    # "the" has no leading space (add_space_prefix false); "▁and" beats "▁an" + "d"; the two
    # spaces and the newline are user-defined tokens cut out first, so "of" has no "▁"
    assert pieces == ["t", "he", "▁and", "  ", "o", "<0x66>", "\n"]
    assert tiny_spm.decode(tiny_spm.encode("x<start_of_turn>y"), skip_special=True) == "xy"
    assert tiny_spm.encode("q", add_bos=False) == [tokens.index("<0x71>")]  # byte fallback


def test_special_cut_is_llama_cpp_longest_token_first():
    from harmony_ref.runtime.tokenizer import split_special

    specials = (("bcd", 1), ("ab", 2))  # longest first, each found left to right
    assert split_special("abcd", specials) == ["a", 1]  # tokenizers' leftmost match: [2, "cd"]
    assert split_special("ab ab", specials) == [2, " ", 2]
    assert split_special("", specials) == []


@pytest.mark.network
def test_real_gemma3_ids_equal_llama_cpp():
    from harmony_ref.checkpoint.assets import AssetUnavailable
    from harmony_ref.checkpoint.gemma3 import GGUF_SHA256, gemma3_gguf
    from harmony_ref.eval.lm import load_corpus

    try:
        path = gemma3_gguf()
    except AssetUnavailable as e:
        pytest.skip(f"Gemma 3 weights unavailable (package registry unreachable): {e}")
    assert GEMMA_FIXTURE["gguf_sha256"] == GGUF_SHA256
    tok = Tokenizer.from_gguf(path)
    assert tok.vocab_size == 262144 and tok.add_bos and tok.bos_id == 2
    _check_llama_cpp_ids(tok, GEMMA_FIXTURE, load_corpus, bos=1)
