"""What every output parser shares: the number pattern, the error and result types, and the
helpers that read a number and add a measured metric (lab/parsers.py, parsers_accuracy.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from harmony_ref.metrics import Metrics

_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf)"


class ParseError(ValueError):
    """The output is not in the expected format (or reports the tool's own failure)."""


@dataclass
class Parsed:
    metrics: Metrics
    provenance: dict[str, str] = field(default_factory=dict)
    # the token counts the tool says it ran ("prompt_tokens", "new_tokens"): the record's
    # scenario is what ran, not what the command line's defaults say
    ran: dict[str, int] = field(default_factory=dict)


def _num(s: str, what: str, fmt: str) -> float:
    v = float(s)
    if v != v or v in (float("inf"), float("-inf")):
        raise ParseError(f"{fmt}: {what} is {s!r}, expected a finite number")
    return v


def _tail(text: str, n: int = 300) -> str:
    t = text.strip()
    return ("..." + t[-n:]) if len(t) > n else t


def _measured(m: Metrics, name, value, unit, direction="lower", samples=(), description=""):
    # A measured time or rate of zero (or less) is not a measurement: refuse it, whatever the
    # tool printed (Metric refuses negative and non-finite values itself).
    if direction != "none" and unit in ("ms", "s", "tokens/s") and not value > 0:
        raise ValueError(f"{name} = {value!r} {unit}: a measured time or rate must be > 0")
    m.add(name, value, unit, direction, "measured", samples, description)
