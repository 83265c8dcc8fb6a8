"""A test-only switch that makes one kernel 30% slower, to show that `tox -e perf` catches a
real slowdown: `HARMONY_REF_PERF_SLOW=matmul_w8 tox -e perf` fails with a verdict naming the
benchmarks of matmul_w8. Never active unless the variable names a kernel."""

from __future__ import annotations

import functools
import os
import time

SLOW_ENV = "HARMONY_REF_PERF_SLOW"
SLOW_FACTOR = 1.3


def slowable(fn):
    """fn itself, or (when $HARMONY_REF_PERF_SLOW is fn's name) fn followed by a busy wait of
    30% of the call's own time, so every call takes 1.3x as long."""
    if os.environ.get(SLOW_ENV, "") != fn.__name__:
        return fn

    @functools.wraps(fn)
    def slowed(*args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        until = start + (time.perf_counter() - start) * SLOW_FACTOR
        while time.perf_counter() < until:
            pass
        return out

    return slowed
