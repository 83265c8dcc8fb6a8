"""The x86 paths of the int8 matmul kernels as ids numba types as literals (`Isa`), their names,
the LLVM target features each path's instructions need, and which of them numba compiles for on
this CPU (`supported_isas`). The kernels and their intrinsics are in matmul_x86.py, matmul.py
chooses among the paths."""

from __future__ import annotations

from numba import types
from numba.extending import typeof_impl


class Isa(int):
    """A path id that numba types as a literal, so each path is its own specialisation (and
    cache entry) and calls dispatch on it without retyping (`numba.literally` on a plain int
    would re-run type inference on every call)."""


_LITERALS: dict[int, types.IntegerLiteral] = {}


@typeof_impl.register(Isa)
def _typeof_isa(val, c):
    """The literal type of `val`, built once per value: every kernel call types its Isa
    arguments, and building an IntegerLiteral costs more than the dispatch of a small matmul
    (measured, AMD EPYC Zen 4: a call with an Isa argument 7.1 us uncached, 2.9 us cached; a
    plain int 0.5 us)."""
    t = _LITERALS.get(int(val))
    if t is None:
        t = _LITERALS[int(val)] = types.IntegerLiteral(int(val))
    return t


ISA_PORTABLE, ISA_AVX2, ISA_AVX_VNNI, ISA_AVX512_VNNI = (Isa(i) for i in range(4))
ISA_NAMES = {
    ISA_PORTABLE: "portable",
    ISA_AVX2: "avx2",
    ISA_AVX_VNNI: "avxvnni",
    ISA_AVX512_VNNI: "avx512vnni",
}
# LLVM target features each path's instructions need (beyond x86-64).
ISA_FEATURES = {
    ISA_AVX2: ("avx2", "f16c"),
    ISA_AVX_VNNI: ("avx2", "f16c", "avxvnni"),
    ISA_AVX512_VNNI: ("avx512f", "avx512bw", "avx512vnni"),
}


def target_features() -> set[str]:
    """LLVM features of the CPU numba compiles for (an emulated one's under tests/emulated_cpus.py),
    or an empty set off x86-64."""
    from numba.core.registry import cpu_target

    codegen = cpu_target.target_context.codegen()
    if codegen.magic_tuple()[0].split("-")[0] != "x86_64":
        return set()
    return {f[1:] for f in codegen._tm_features.split(",") if f.startswith("+")}


def supported_isas() -> list[int]:
    """Paths numba can compile for its target CPU, best last (always starts with portable)."""
    features = target_features()
    if not features:
        return [ISA_PORTABLE]
    return [ISA_PORTABLE] + [isa for isa, need in ISA_FEATURES.items() if features.issuperset(need)]
