"""How numbers look in every table the package prints: the CLI's tables, the gate's Markdown and the
profile comparison all use `fmt_number`, so a value reads the same wherever it is shown
(26,522 ms, not 2.652e+04 ms; 0.0001234 as 0.0001234; NaN as "-"). And how a bad-input error
looks: `error_line`, one line under 200 characters, whatever the message and its paths."""

from __future__ import annotations

import math
import os
import re


def fmt_number(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.4g}"
        # .4g would switch to 1.265e+04 from 10,000 up: print whole numbers there instead.
        if abs(v) >= 10_000:
            return f"{v:,.0f}"
        return f"{v:,.4g}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v)


def did_you_mean(word: str, choices) -> str:
    """' (did you mean 'x'?)' for the closest of `choices` (difflib), or '': for the error of a
    mistyped command, model, policy, profile or format name."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


ERROR_LINE_MAX_CHARS = 199  # a bad-input error is one line under 200 characters


_PATH = re.compile(r"(?<![\w.])/[^\s:'\",;()\[\]{}]+")  # an absolute path in a message
_LONG_LIST = re.compile(r"\[[^\[\]]{40,}\]|\{[^{}]{40,}\}")  # a list or dict of 40+ characters


def _deep_path(match) -> str:
    """/tmp/a/b/c/d/m.gguf -> /tmp/.../d/m.gguf: a deep path's first folder and last two parts."""
    parts = match.group(0).split("/")
    return "/".join([*parts[:2], "...", *parts[-2:]]) if len(parts) > 5 else match.group(0)


def _path_name(match) -> str:
    """/tmp/a/b/m.gguf -> .../m.gguf: a path's last part."""
    parts = match.group(0).split("/")
    return ".../" + parts[-1] if len(parts) > 3 else match.group(0)


def _list_head(match) -> str:
    """['a', 'b', ... 40 more] -> ['a', 'b', ...]: a long list's first items."""
    text = match.group(0)
    kept: list[str] = []
    for item in text[1:-1].split(", "):
        if len(", ".join([*kept, item])) > 36:
            break
        kept.append(item)
    return text[0] + ", ".join([*kept, "..."]) + text[-1]


def _relative(text: str) -> str:
    try:
        cwd = os.getcwd().rstrip(os.sep) + os.sep
    except OSError:  # the working directory was removed
        return text
    return text.replace(cwd, "") if cwd != os.sep else text


def error_line(command: str, message: object) -> str:
    """`harmony-ref COMMAND: error: MESSAGE` on one line (line breaks become "; ") under 200
    characters. A line that fits is left as it is. One too long is shortened a step at a time
    until it fits: paths under the working directory written relative to it; deep paths as their
    first folder and last two parts (/tmp/.../run3/m.gguf); then every path as its last part
    (.../m.gguf); then long lists as their first items (['a', 'b', ...]); what is still too long
    is cut at the end, after the file, the field and the verdict that messages put first.
    Messages are written to fit; this is the guard for the paths and details none can foresee."""
    head = f"harmony-ref {command}: error: "
    text = "; ".join(part.strip() for part in str(message).splitlines() if part.strip())
    steps = (
        _relative,
        lambda s: _PATH.sub(_deep_path, s),
        lambda s: _PATH.sub(_path_name, s),
        lambda s: _LONG_LIST.sub(_list_head, s),
    )
    for step in steps:
        if len(head + text) <= ERROR_LINE_MAX_CHARS:
            break
        text = step(text)
    line = head + text
    return line if len(line) <= ERROR_LINE_MAX_CHARS else line[: ERROR_LINE_MAX_CHARS - 3] + "..."
