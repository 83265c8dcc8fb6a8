"""How numbers look in every table the package prints: the CLI's tables, the gate's Markdown and the
profile comparison all use `fmt_number`, so a value reads the same wherever it is shown
(26,522 ms, not 2.652e+04 ms; 0.0001234 as 0.0001234; NaN as "-")."""

from __future__ import annotations

import math


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
