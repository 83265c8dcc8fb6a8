"""`harmony-ref tokenize`: a decoder checkpoint's token ids for a text (the ids llama.cpp's
tokenizer gives for the same GGUF)."""

from __future__ import annotations

import sys

NAME = "tokenize"
HELP = "token ids of a text under a decoder checkpoint's tokenizer (GGUF or HF)"


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_checkpoint_argument
    from harmony_ref.commands._output import add_json_flag

    add_checkpoint_argument(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="the text")
    src.add_argument("--file", help="a UTF-8 text file")
    p.add_argument("--bos", action="store_true", help="prepend BOS even if the model adds none")
    add_json_flag(p)


def run(args) -> int:
    from pathlib import Path

    from harmony_ref.commands._output import print_json
    from harmony_ref.runtime.loader import checkpoint_config, load_tokenizer

    if args.file is not None:
        path = Path(args.file)
        if not path.is_file():
            raise ValueError(f"--file {path}: no such file")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"--file {path}: not UTF-8 ({e})") from e
    else:
        text = args.text
    checkpoint_config(args.model)  # a model harmony-ref cannot run is refused, as elsewhere
    tok = load_tokenizer(args.model)
    ids = tok.encode(text, add_bos=True if args.bos else None)
    if args.json:
        print_json(
            {
                "model": args.model,
                "n_tokens": len(ids),
                "ids": ids,
                "tokens": [tok.token_text(i) for i in ids],
            }
        )
        return 0
    print(" ".join(map(str, ids)))
    print(f"{len(ids)} tokens", file=sys.stderr)
    return 0
