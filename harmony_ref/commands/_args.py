"""Shared argument spellings: the scenario flags every command spells the same way.

`--prompt/--new/--context/--batch` (token counts) everywhere; the long forms
`--prompt-tokens/--new-tokens/--context-tokens` are accepted as aliases. Counts are checked by
argparse (a negative or non-integer count is a usage error, exit 2, before any work).
"""

from __future__ import annotations

import argparse


def count(lo: int):
    """An argparse type: an integer >= lo."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: must be an integer >= {lo}") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"{text!r}: must be an integer >= {lo}")
        return value

    parse.__name__ = f"integer >= {lo}"
    return parse


def add_scenario_arguments(p, *, prompt: int | None = 512, new: int | None = 128,
                           context: int | None = 2048, batch: int | None = None,
                           long_dest: bool = False, what: str = "") -> None:
    """Add the scenario flags (None: the command does not take that one). `long_dest` stores
    them as prompt_tokens/new_tokens/context_tokens, else as prompt/new/context."""
    suffix = "_tokens" if long_dest else ""
    per = f" {what}" if what else ""
    if prompt is not None:
        p.add_argument("--prompt", "--prompt-tokens", dest="prompt" + suffix, type=count(1),
                       default=prompt, metavar="N", help=f"prompt tokens{per} (default {prompt})")
    if new is not None:
        p.add_argument("--new", "--new-tokens", dest="new" + suffix, type=count(0), default=new,
                       metavar="N", help=f"tokens to generate{per} (default {new})")
    if context is not None:
        p.add_argument("--context", "--context-tokens", dest="context" + suffix, type=count(1),
                       default=context, metavar="N",
                       help=f"KV cache context tokens (default {context})")
    if batch is not None:
        p.add_argument("--batch", type=count(1), default=batch, metavar="N",
                       help=f"concurrent requests (default {batch})")
