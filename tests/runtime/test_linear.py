"""runtime/linear.py's QuantLinear: the call it binds once (the format's compiled kernel, looked
up at the first call) follows its operand and kernel when either is replaced afterwards."""

from __future__ import annotations

import numpy as np

from harmony_ref.kernels.formats import format_of
from harmony_ref.quant.policy import parse_format
from harmony_ref.runtime.linear import make_linear


def test_a_replaced_operand_or_kernel_is_what_the_next_call_runs():
    rng = np.random.default_rng()
    fmt = parse_format("q4_1")
    w1, w2 = (rng.standard_normal((64, 256)).astype(np.float32) for _ in range(2))
    x = rng.standard_normal((3, 256)).astype(np.float32)
    a, b = make_linear("a", w1, fmt), make_linear("b", w2, fmt)
    assert format_of(a.fmt).bind is not None  # q4_1 binds a compiled kernel per Linear
    y1, y2 = a(x), b(x)
    assert not np.array_equal(y1, y2)
    a.operand = b.prepare()  # swapped after a's call was bound
    np.testing.assert_array_equal(a(x), y2)
    a.matmul = lambda x, op: np.zeros((x.shape[0], 64), np.float32)
    np.testing.assert_array_equal(a(x), np.zeros((3, 64), np.float32))
