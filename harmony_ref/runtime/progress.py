"""Progress of the long steps inside a model build, for whoever shows it: a command wraps its
work in `reporting(callback)` and compression (compress/) calls `report(step, done, total)` as it
goes (generated calibration windows, a Gram pass, GPTQ / AWQ block by block). With no listener a
report costs a list lookup; nothing here prints.

    with reporting(lambda step, done, total: bar.update(...)):
        compress(weights, policy)       # reports "generating calibration windows", 1..N, ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

Listener = Callable[[str, int, int], None]
_LISTENERS: list[Listener] = []


@contextmanager
def reporting(listener: Listener) -> Iterator[None]:
    """`listener(step, done, total)` hears every report made inside the block."""
    _LISTENERS.append(listener)
    try:
        yield
    finally:
        _LISTENERS.remove(listener)


def report(step: str, done: int, total: int) -> None:
    for listener in list(_LISTENERS):
        listener(step, done, total)
