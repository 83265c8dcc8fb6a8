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


_PATH = re.compile(r"(?<![\w.])/[^\s:'\"]+")


def _short_path(match) -> str:
    """/tmp/a/b/c/d/m.gguf -> /tmp/.../d/m.gguf: a deep path's first folder and its last two parts."""
    parts = match.group(0).split("/")
    return "/".join([*parts[:2], "...", *parts[-2:]]) if len(parts) > 5 else match.group(0)


def error_line(command: str, message: object) -> str:
    """`harmony-ref COMMAND: error: MESSAGE` on one line under 200 characters: line breaks become
    "; ", a path under the working directory is written relative to it; in a line still too long
    a deep path keeps its first folder and its last two parts (/tmp/.../run3/m.gguf), and what is
    then still too long (a library's long detail) keeps its start (the file and the verdict) and
    its end (the value or the hint) around "..."."""
    text = "; ".join(part.strip() for part in str(message).splitlines() if part.strip())
    try:
        cwd = os.getcwd().rstrip(os.sep) + os.sep
    except OSError:  # the working directory was removed
        cwd = os.sep
    if cwd != os.sep:
        text = text.replace(cwd, "")
    line = f"harmony-ref {command}: error: {text}"
    if len(line) > ERROR_LINE_MAX_CHARS:
        line = f"harmony-ref {command}: error: {_PATH.sub(_short_path, text)}"
    if len(line) <= ERROR_LINE_MAX_CHARS:
        return line
    tail = (ERROR_LINE_MAX_CHARS - 3) // 3
    return line[: ERROR_LINE_MAX_CHARS - 3 - tail] + "..." + line[len(line) - tail :]
