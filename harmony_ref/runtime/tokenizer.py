"""The decoder's tokenizer: a `tokenizers` byte-level BPE built from a GGUF file's vocabulary,
merges, token types and pre-tokenizer name, a SentencePiece-style model from a GGUF's vocabulary
and scores, or an HF directory's tokenizer.json used as is; and the chat template applied with
jinja2.

    tok = Tokenizer.from_gguf(path)        # or Tokenizer.from_hf_dir(directory)
    ids = tok.encode("text")               # llama.cpp's ids for the same GGUF
    tok.decode(ids) == "text"
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}])

GGUF (`tokenizer.ggml.model = gpt2`) pre-tokenizers, as llama.cpp's llama-vocab.cpp defines them:
    smollm (also codeshell, exaone, minerva): every digit on its own (`\\p{N}`), then GPT-2's
        regex; in `tokenizers` terms Sequence([Digits(individual), ByteLevel(regex)])
    default / gpt2: GPT-2's regex alone.
Any other name is refused (its ids would silently differ from llama.cpp's). Token type 3
(control) and 4 (user-defined) tokens are added whole: control ones as special tokens, matched in
the text like llama.cpp's tokenizer does with special-token parsing on (llama-tokenize's default)
and dropped by decode(skip_special=True). No BOS is added unless the file's
tokenizer.ggml.add_bos_token says so.

GGUF `tokenizer.ggml.model = llama` (SentencePiece: Gemma, Llama 2) follows llama.cpp's
llm_tokenizer_spm. The text is first cut at every control, user-defined and unknown token's text,
longest token first (llama.cpp's tokenizer_st_partition: Gemma's newline, space and tab runs and
HTML tags are user-defined, so "a  b" is "a", the two-space token, "b"); each remaining fragment
gets a leading space when tokenizer.ggml.add_space_prefix says so and its spaces become "▁";
then, starting from single characters, the adjacent pair whose concatenation is the vocabulary
token of the highest score merges, leftmost first on ties, until no pair forms a token;
characters left outside the vocabulary become their UTF-8 bytes' <0xXX> tokens. In `tokenizers`
terms that is a BPE whose merges are every split of every token into two vocabulary tokens,
ranked by the token's score, with byte fallback (`build_spm`); the cut is done here, in Python,
with llama.cpp's rule rather than `tokenizers`' leftmost-longest match, which differs when two
such tokens overlap.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harmony_ref.model.decoder import CheckpointError

TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_UNKNOWN = 2
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
SPM_SPACE = "\u2581"  # "▁": SentencePiece's visible space
DIGIT_SPLIT_PRE = ("smollm", "codeshell", "exaone", "minerva")
GPT2_PRE = ("default", "gpt2")
# llama.cpp treats these as end of generation besides the EOS id (llama-vocab.cpp's EOG list).
EOG_TOKEN_TEXTS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")


@dataclass
class Tokenizer:
    tk: object  # tokenizers.Tokenizer
    bos_id: int | None = None
    eos_id: int | None = None
    add_bos: bool = False
    chat_template: str | None = None
    bos_token: str = ""
    eos_token: str = ""
    source: str = ""
    eog_ids: frozenset = field(default_factory=frozenset)
    # SentencePiece models: (text, id) of the tokens cut out before the BPE, longest first
    specials: tuple = ()
    add_space_prefix: bool = False

    @property
    def vocab_size(self) -> int:
        return self.tk.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        if self.specials or self.add_space_prefix:
            ids = self._encode_spm(text)
        else:
            ids = self.tk.encode(text, add_special_tokens=False).ids
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            ids = [self.bos_id] + ids
        return ids

    def _encode_spm(self, text: str) -> list[int]:
        ids: list[int] = []
        prev_special = True
        for piece in split_special(text, self.specials):
            if isinstance(piece, int):
                ids.append(piece)
                prev_special = True
                continue
            if self.add_space_prefix and prev_special:
                piece = " " + piece
            ids.extend(self.tk.encode(piece, add_special_tokens=False).ids)
            prev_special = False
        return ids

    def decode(self, ids, skip_special: bool = False) -> str:
        return self.tk.decode(list(map(int, ids)), skip_special_tokens=skip_special)

    def token_text(self, i: int) -> str:
        return self.tk.id_to_token(int(i))

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The checkpoint's own chat template (jinja2, sandboxed like transformers')."""
        if not self.chat_template:
            raise ValueError(f"{self.source}: the checkpoint has no chat template (drop --chat)")
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise ValueError(f"{self.source}: chat template: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.chat_template).render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )

    # -- construction ----------------------------------------------------------------------------

    @classmethod
    def from_gguf(cls, path) -> Tokenizer:
        from harmony_ref.checkpoint.gguf import open_reader

        path = Path(path)
        reader = open_reader(path)

        def get(key, default=None):
            f = reader.fields.get(key)
            return default if f is None else f.contents()

        model = get("tokenizer.ggml.model")
        if model not in ("gpt2", "llama"):
            raise CheckpointError(
                f"{path}: tokenizer.ggml.model = {model!r}: supported 'gpt2' "
                "(byte-level BPE) and 'llama' (SentencePiece)"
            )
        tokens = get("tokenizer.ggml.tokens")
        if tokens is None:
            raise CheckpointError(f"{path}: tokenizer.ggml.tokens missing")
        types = get("tokenizer.ggml.token_type", [TOKEN_TYPE_NORMAL] * len(tokens))
        extra: dict = {}
        if model == "llama":  # SentencePiece: scores, cut tokens, BOS by default
            scores = get("tokenizer.ggml.scores")
            if scores is None or len(scores) != len(tokens):
                raise CheckpointError(
                    f"{path}: tokenizer.ggml.scores missing or not one per "
                    "token (a SentencePiece model needs them)"
                )
            tk = build_spm(tokens, scores, types, where=f"{path}: tokenizer.ggml.tokens")
            extra = dict(
                specials=special_pieces(tokens, types),
                add_space_prefix=bool(get("tokenizer.ggml.add_space_prefix", True)),
            )
        else:
            merges = get("tokenizer.ggml.merges")
            if merges is None:
                raise CheckpointError(f"{path}: tokenizer.ggml.tokens / merges missing")
            pre = get("tokenizer.ggml.pre", "default")
            tk = build_bpe(tokens, merges, types, pre, where=f"{path}: tokenizer.ggml.pre")
        bos, eos = get("tokenizer.ggml.bos_token_id"), get("tokenizer.ggml.eos_token_id")
        for key, v in (("bos", bos), ("eos", eos)):
            if v is not None and not (
                isinstance(v, (int, np.integer))
                and not isinstance(v, bool)
                and 0 <= v < len(tokens)
            ):
                raise CheckpointError(
                    f"{path}: metadata key tokenizer.ggml.{key}_token_id = {v!r}: must be a "
                    f"token id in 0..{len(tokens) - 1}"
                )
        eog = {
            i
            for i, t in enumerate(tokens)
            if types[i] == TOKEN_TYPE_CONTROL and t in EOG_TOKEN_TEXTS
        }
        if eos is not None:
            eog.add(int(eos))
        return cls(
            tk,
            bos_id=None if bos is None else int(bos),
            eos_id=None if eos is None else int(eos),
            add_bos=bool(get("tokenizer.ggml.add_bos_token", model == "llama")),
            chat_template=get("tokenizer.chat_template"),
            bos_token="" if bos is None else tokens[int(bos)],
            eos_token="" if eos is None else tokens[int(eos)],
            source=str(path),
            eog_ids=frozenset(eog),
            **extra,
        )

    @classmethod
    def from_hf_dir(cls, directory) -> Tokenizer:
        """tokenizer.json as it is; BOS/EOS and the chat template from tokenizer_config.json."""
        from tokenizers import Tokenizer as TK

        d = Path(directory)
        if not (d / "tokenizer.json").is_file():
            raise CheckpointError(f"{d}: no tokenizer.json")
        try:
            tk = TK.from_file(str(d / "tokenizer.json"))
        except Exception as e:  # the Rust parser raises a bare Exception
            msg = str(e).splitlines()[0][:100] if str(e) else type(e).__name__
            raise CheckpointError(f"{d / 'tokenizer.json'}: not a tokenizer ({msg})") from None
        cfg = {}
        if (d / "tokenizer_config.json").is_file():
            try:
                cfg = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
            except ValueError as e:
                raise CheckpointError(f"{d / 'tokenizer_config.json'}: not valid JSON: {e}") from e
            if not isinstance(cfg, dict):
                raise CheckpointError(f"{d / 'tokenizer_config.json'}: must be a JSON object")

        def tok_text(v):
            return v.get("content") if isinstance(v, dict) else v

        bos_t, eos_t = tok_text(cfg.get("bos_token")), tok_text(cfg.get("eos_token"))
        bos = tk.token_to_id(bos_t) if bos_t else None
        eos = tk.token_to_id(eos_t) if eos_t else None
        eog = {tk.token_to_id(t) for t in EOG_TOKEN_TEXTS if tk.token_to_id(t) is not None}
        if eos is not None:
            eog.add(eos)
        template = cfg.get("chat_template")
        if template is None and (d / "chat_template.jinja").is_file():
            template = (d / "chat_template.jinja").read_text(encoding="utf-8")
        return cls(
            tk,
            bos_id=bos,
            eos_id=eos,
            add_bos=bool(cfg.get("add_bos_token", False)),
            chat_template=template,
            bos_token=bos_t or "",
            eos_token=eos_t or "",
            source=str(d),
            eog_ids=frozenset(eog),
        )


def build_bpe(tokens, merges, types, pre: str, where: str = "tokenizer"):
    """A byte-level BPE `tokenizers.Tokenizer` from GGUF-style vocabulary lists."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as TK

    if pre in DIGIT_SPLIT_PRE:
        pre_tok = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    elif pre in GPT2_PRE:
        pre_tok = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        raise CheckpointError(
            f"{where} = {pre!r} is not supported (supported: "
            f"{', '.join(DIGIT_SPLIT_PRE + GPT2_PRE)})"
        )
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = []
    for m in merges:
        a, sep, b = m.partition(" ")
        if not sep:
            raise CheckpointError(f"{where}: merge {m!r} is not 'left right'")
        pairs.append((a, b))
    tk = TK(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tk.pre_tokenizer = pre_tok
    tk.decoder = decoders.ByteLevel()
    special = [
        AddedToken(t, special=True, normalized=False)
        for t, ty in zip(tokens, types)
        if ty == TOKEN_TYPE_CONTROL
    ]
    user = [
        AddedToken(t, special=False, normalized=False)
        for t, ty in zip(tokens, types)
        if ty == TOKEN_TYPE_USER_DEFINED
    ]
    if special:
        tk.add_special_tokens(special)
    if user:
        tk.add_tokens(user)
    return tk


# ----------------------------------------------------------------------------------------------
# SentencePiece-style models (GGUF tokenizer.ggml.model = llama)

CUT_TYPES = (TOKEN_TYPE_UNKNOWN, TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)


def special_pieces(tokens, types) -> tuple:
    """(text, id) of the tokens llama.cpp cuts out of the text before the BPE, longest first."""
    pieces = [(t, i) for i, (t, ty) in enumerate(zip(tokens, types)) if ty in CUT_TYPES and t]
    return tuple(sorted(pieces, key=lambda p: -len(p[0])))


def split_special(text: str, specials) -> list:
    """`text` cut into raw str fragments and token ids: each special token in turn, longest
    first, is found left to right in every raw fragment (llama.cpp's tokenizer_st_partition)."""
    parts: list = [text] if text else []
    for piece, token_id in specials:
        if piece not in text:
            continue
        out: list = []
        for frag in parts:
            if isinstance(frag, int) or piece not in frag:
                out.append(frag)
                continue
            for j, raw in enumerate(frag.split(piece)):
                if j:
                    out.append(token_id)
                if raw:
                    out.append(raw)
        parts = out
    return parts


def spm_merges(tokens, scores) -> list[tuple[str, str]]:
    """Every split (left, right) of a token into two vocabulary tokens, the highest-scoring
    token's splits first: a BPE that merges in this order picks, like llm_tokenizer_spm, the
    adjacent pair forming the best-scoring token (ties by position: leftmost first)."""
    vocab = set(tokens)
    ranked = []
    for i, t in enumerate(tokens):
        for k in range(1, len(t)):
            a, b = t[:k], t[k:]
            if a in vocab and b in vocab:
                ranked.append((-float(scores[i]), i, k, a, b))
    ranked.sort()
    return [(a, b) for _, _, _, a, b in ranked]


def build_spm(tokens, scores, types, where: str = "tokenizer"):
    """A `tokenizers.Tokenizer` for a SentencePiece vocabulary with scores and <0xXX> byte tokens
    (see the module docstring); control tokens registered as special (dropped by decode with
    skip_special), user-defined ones as added tokens."""
    from tokenizers import AddedToken, decoders, models, normalizers
    from tokenizers import Tokenizer as TK

    vocab = {}
    for i, t in enumerate(tokens):
        if t in vocab:
            raise CheckpointError(f"{where}: token {t!r} appears twice (ids {vocab[t]} and {i})")
        vocab[t] = i
    missing = [f"<0x{b:02X}>" for b in range(256) if f"<0x{b:02X}>" not in vocab]
    if missing:
        raise CheckpointError(
            f"{where}: no byte-fallback tokens {', '.join(missing[:4])}"
            f"{' ...' if len(missing) > 4 else ''} (needed for characters "
            "outside the vocabulary)"
        )
    tk = TK(
        models.BPE(
            vocab=vocab, merges=spm_merges(tokens, scores), fuse_unk=False, byte_fallback=True
        )
    )
    tk.normalizer = normalizers.Replace(" ", SPM_SPACE)
    tk.decoder = decoders.Sequence(
        [decoders.Replace(SPM_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    special = [
        AddedToken(t, special=True, normalized=False)
        for t, ty in zip(tokens, types)
        if ty == TOKEN_TYPE_CONTROL
    ]
    user = [
        AddedToken(t, special=False, normalized=False)
        for t, ty in zip(tokens, types)
        if ty in (TOKEN_TYPE_USER_DEFINED, TOKEN_TYPE_UNKNOWN)
    ]
    if special:
        tk.add_special_tokens(special)
    if user:
        tk.add_tokens(user)
    return tk
