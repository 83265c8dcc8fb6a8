"""Every compiled kernel in harmony_ref/kernels is cached (compile once per machine, not per
process) and, when it is a top-level kernel rather than an inlined helper, parallel: `prange`
loops are what make `numba.set_num_threads` apply (tests/kernels/test_matmul.py checks that the
thread count does not change results)."""

import pytest
from numba.core.registry import CPUDispatcher

from harmony_ref.kernels import activation, attention, matmul, norm, rope

# Compiled functions that may be serial, and why.
_DECODE_ROW = (
    "decoder hot path over one row of 576-1536 values per call: a parallel launch "
    "(2.5 us measured) costs more than the work; prefill runs its `_par` twin"
)
SERIAL_OK = {
    "_tanh_vec": "norm.tanh_approx: exposes the kernels' tanh to its accuracy test",
    "_exp_vec": "norm.exp_approx: exposes the kernels' exp32 to its accuracy test",
    "_keys_by_dim": "called by _prefill_attention before its prange: an L x D copy per kv "
    "head, small next to the T x L scores it feeds",
    "rms_norm_rows": _DECODE_ROW,
    "add_rms_norm_rows": _DECODE_ROW,
    "rope_rows": _DECODE_ROW,
    "silu_gate_rows": _DECODE_ROW,
    "gelu_tanh_gate_rows": _DECODE_ROW,
    "rms_norm_heads_rows": _DECODE_ROW,
    "_quantize_activations": "allocates int32 xq for quantize_activations_into, whose rows "
    "run in parallel (matmul_portable.py)",
    "_quantize_activations_bytes": "allocates int8 xq for quantize_activations_into, whose "
    "rows run in parallel (matmul_portable.py)",
    "_attend_span": "the body both decode attention kernels call (the parallel one once per "
    "(kv head, span) job): compiled once per cache dtype, not inlined into each (first-call "
    "compile of the four kernels 40 s -> 16 s on the Xeon)",
    "_decode_attention_serial": "one kv head or under DECODE_PARALLEL_MIN_LENGTH cached tokens, "
    "where a parallel launch costs more than it splits; longer contexts take _decode_attention",
    "_fixed_sum": "a row's sum (of squares) in one fixed order, called by the norms' row bodies "
    "and softmax "
    "(not inlined at Numba's level, which would give it its callers' fastmath)",
    "_scale_row": "a norm row's output pass without reassociation, called like _fixed_sum",
    "decode_step_attention": "a decode step's row ops on one (1, (H + 2 Hkv) D) row; its "
    "attention calls the parallel _decode_attention from DECODE_PARALLEL_MIN_LENGTH tokens",
}

DISPATCHERS = [
    (mod.__name__.rsplit(".", 1)[-1], name, obj)
    for mod in (activation, attention, matmul, norm, rope)
    for name, obj in vars(mod).items()
    if isinstance(obj, CPUDispatcher)
]


def test_kernels_found():
    assert {name for _, name, _ in DISPATCHERS} >= {
        "_matmul_w4_tiles",
        "_matmul_w8_tiles",
        "_norm_bias_gelu_rows",
        "_decode_attention",
    }


@pytest.mark.parametrize(
    "module, name, kernel", DISPATCHERS, ids=[f"{m}.{n}" for m, n, _ in DISPATCHERS]
)
def test_kernel_is_cached_and_parallel(module, name, kernel):
    opts = kernel.targetoptions
    if opts.get("inline") == "always":
        return  # inlined into its callers: compiled (and cached) as part of them
    assert type(kernel._cache).__name__ != "NullCache", f"{module}.{name} lacks cache=True"
    if name not in SERIAL_OK:
        assert opts.get("parallel"), f"{module}.{name}: not parallel, set_num_threads has no effect"
