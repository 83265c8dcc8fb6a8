"""Emulated x86-64 machines: environment variables that make this machine's float code run the
code another CPU (or library build) would run.

CI and users land on an Intel Xeon (AVX-512, VNNI, AMX) or an AMD EPYC Zen 5 (AVX-512 VNNI, no AMX)
by chance, and the float results of the kernels differ in their last digits between them: Numba
compiles for the CPU it runs on (vector width and FMA use, hence the order of every fastmath
reduction), OpenBLAS picks kernels by core type, NumPy dispatches its own SIMD loops, and the
int8-dot matmul takes the best path the CPU has. Each `EmulatedCpu` sets all four for one target:

- NUMBA_CPU_NAME / NUMBA_CPU_FEATURES: LLVM's target CPU and an explicit feature list, the target's
  own features (`TARGET_FEATURES`, from LLVM's X86.td processor definitions) that this host also
  has, every other feature switched off, so nothing is emitted that this host cannot execute and
  nothing the target lacks is used;
- OPENBLAS_CORETYPE: OpenBLAS's kernels for that core (DYNAMIC_ARCH builds, as NumPy's wheels are);
- NPY_DISABLE_CPU_FEATURES: NumPy's dispatch targets the CPU does not have;
- HARMONY_REF_MATMUL_ISA: the int8-dot matmul path (portable, avx2, avxvnni, avx512vnni), when a
  configuration forces one; otherwise the best the emulated target supports;
- NUMBA_NUM_THREADS / OPENBLAS_NUM_THREADS: 1 or 2 threads.

A target needs the vector features that shape its code (`VECTOR_FEATURES`) on this host; one this
host lacks is skipped with the reason (`environment` raises `Unemulable`). The `znver5-epyc`
configuration reproduces the AMD EPYC (family 26 model 2) that CI may run on: on an Intel Xeon it
gives the same greedy text, recall and perplexity digits that machine gave.

What this host's CPU is (`cpuinfo`, `cpu_model`: /proc/cpuinfo) lives here too, so the run record,
the host timing and a local device session name it one way.

Used by tests/emulated_cpus.py (`tox -e cpus`: the numeric tests under every configuration) and
tools/numerical_spread.py (the spread the gate's `numerical` tolerances are derived from).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

_V2 = {
    "64bit",
    "cmov",
    "cx8",
    "cx16",
    "fxsr",
    "mmx",
    "sahf",
    "popcnt",
    "sse",
    "sse2",
    "sse3",
    "ssse3",
    "sse4.1",
    "sse4.2",
    "crc32",
}
_V3 = _V2 | {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"}
_AVX512 = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}
_HASWELL = _V3 | {"aes", "pclmul", "fsgsbase", "invpcid", "rdrnd", "xsaveopt"}
_SKX = (
    _HASWELL
    | _AVX512
    | {"adx", "rdseed", "prfchw", "clflushopt", "clwb", "xsavec", "xsaves", "pku"}
)
_ICX = _SKX | {
    "avx512vbmi",
    "avx512ifma",
    "avx512vnni",
    "avx512bitalg",
    "avx512vbmi2",
    "avx512vpopcntdq",
    "gfni",
    "vaes",
    "vpclmulqdq",
    "rdpid",
    "sha",
    "wbnoinvd",
}
_SPR = _ICX | {
    "avx512bf16",
    "avx512fp16",
    "avxvnni",
    "amx-bf16",
    "amx-int8",
    "amx-tile",
    "cldemote",
    "movdir64b",
    "movdiri",
    "serialize",
    "tsxldtrk",
    "waitpkg",
}
_ZNVER3 = _HASWELL | {
    "adx",
    "clflushopt",
    "clwb",
    "clzero",
    "mwaitx",
    "prfchw",
    "rdpid",
    "rdpru",
    "rdseed",
    "sha",
    "sse4a",
    "vaes",
    "vpclmulqdq",
    "wbnoinvd",
    "xsavec",
    "xsaves",
    "pku",
    "shstk",
}
_ZNVER4 = (
    _ZNVER3
    | _AVX512
    | {
        "avx512ifma",
        "avx512vbmi",
        "avx512vbmi2",
        "avx512vnni",
        "avx512bitalg",
        "avx512vpopcntdq",
        "avx512bf16",
        "gfni",
    }
)
_ZNVER5 = _ZNVER4 | {"avxvnni", "avx512vp2intersect", "movdir64b", "movdiri", "prefetchi"}

# LLVM target CPU -> its features (X86.td's ProcessorFeatures lists, the ones that matter here)
TARGET_FEATURES = {
    "generic": _V2 - {"popcnt", "sse3", "ssse3", "sse4.1", "sse4.2", "cx16", "sahf", "crc32"},
    "haswell": _HASWELL,
    "skylake-avx512": _SKX,
    "icelake-server": _ICX,
    "sapphirerapids": _SPR,
    "znver3": _ZNVER3,
    "znver4": _ZNVER4,
    "znver5": _ZNVER5,
}

# features that change the float and int8-dot code; an emulated target without one of its own
# on this host would run other code than the real target
VECTOR_FEATURES = {
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512dq",
    "avx512vl",
    "avx512vnni",
    "avxvnni",
    "avx512bf16",
}

# NumPy's dispatch targets (numpy._core._multiarray_umath.__cpu_dispatch__) a CPU lacks
_NPY_NO_AVX512 = "X86_V4 AVX512_ICL AVX512_SPR"


@dataclass(frozen=True)
class EmulatedCpu:
    """One machine to emulate: LLVM target (None = this host), OpenBLAS core type, NumPy dispatch
    targets to disable, a forced matmul path, thread count."""

    name: str
    cpu: str | None = None
    openblas: str | None = None
    numpy_disable: str | None = None
    matmul_isa: str | None = None
    threads: int | None = None
    what: str = ""


EMULATED_CPUS = (
    EmulatedCpu("native-2t", what="this machine as it is"),
    EmulatedCpu("native-1t", threads=1, what="this machine, 1 thread"),
    EmulatedCpu(
        "generic-portable",
        "generic",
        "Prescott",
        _NPY_NO_AVX512 + " X86_V3",
        "portable",
        what="baseline x86-64: no AVX, portable int8 loops",
    ),
    EmulatedCpu(
        "haswell",
        "haswell",
        "Haswell",
        _NPY_NO_AVX512,
        "avx2",
        what="AVX2 without AVX-512 (Intel Haswell)",
    ),
    EmulatedCpu(
        "skylake-avx512-1t",
        "skylake-avx512",
        "SkylakeX",
        "AVX512_ICL AVX512_SPR",
        threads=1,
        what="AVX-512 without VNNI (Intel Skylake-SP), 1 thread",
    ),
    EmulatedCpu(
        "icelake-vnni-1t",
        "icelake-server",
        "SkylakeX",
        "AVX512_SPR",
        "avx512vnni",
        1,
        what="AVX-512 VNNI (Intel Ice Lake-SP), 1 thread",
    ),
    EmulatedCpu(
        "sapphirerapids-avxvnni",
        "sapphirerapids",
        "SapphireRapids",
        None,
        "avxvnni",
        what="Intel Sapphire Rapids tuning, AVX-VNNI int8 path",
    ),
    EmulatedCpu(
        "znver3", "znver3", "Zen", _NPY_NO_AVX512, "avx2", what="AMD Zen 3: AVX2, no AVX-512"
    ),
    EmulatedCpu(
        "znver4-1t",
        "znver4",
        "SkylakeX",
        "AVX512_SPR",
        threads=1,
        what="AMD Zen 4: AVX-512 VNNI, no AVX-VNNI, 1 thread",
    ),
    EmulatedCpu(
        "znver5-epyc",
        "znver5",
        "Haswell",
        "AVX512_SPR",
        what="AMD EPYC Zen 5 as CI meets it (OPENBLAS_CORETYPE=Haswell set there)",
    ),
    EmulatedCpu(
        "znver5-avxvnni-1t",
        "znver5",
        "Zen",
        "AVX512_SPR",
        "avxvnni",
        1,
        what="AMD Zen 5, AVX-VNNI int8 path, Zen BLAS kernels, 1 thread",
    ),
)


class Unemulable(Exception):
    """This host lacks a vector feature the target has: its code cannot run here."""


def host_features() -> dict[str, bool]:
    """LLVM's view of this host: feature -> present (every feature LLVM knows for x86)."""
    import llvmlite.binding as ll

    flat = ll.get_host_cpu_features().flatten()
    return {f[1:]: f[0] == "+" for f in flat.split(",") if f}


def numba_features(cpu: str, host: dict[str, bool] | None = None) -> str:
    """The NUMBA_CPU_FEATURES string for target `cpu` on this host: its own features that the host
    has switched on, every other feature LLVM knows switched off."""
    host = host_features() if host is None else host
    own = TARGET_FEATURES[cpu]
    missing = sorted((own & VECTOR_FEATURES) - {f for f, on in host.items() if on})
    if missing:
        raise Unemulable(f"{cpu}: this host lacks {', '.join(missing)}")
    return ",".join(("+" if on and f in own else "-") + f for f, on in sorted(host.items()))


def environment(cfg: EmulatedCpu, host: dict[str, bool] | None = None) -> dict[str, str]:
    """Environment variables that make a fresh process compute as `cfg` would."""
    env: dict[str, str] = {}
    if cfg.cpu is not None:
        env["NUMBA_CPU_NAME"] = cfg.cpu
        env["NUMBA_CPU_FEATURES"] = numba_features(cfg.cpu, host)
    if cfg.openblas:
        env["OPENBLAS_CORETYPE"] = cfg.openblas
    if cfg.numpy_disable:
        env["NPY_DISABLE_CPU_FEATURES"] = cfg.numpy_disable
    if cfg.matmul_isa:
        env["HARMONY_REF_MATMUL_ISA"] = cfg.matmul_isa
    if cfg.threads is not None:
        for var in ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
            env[var] = str(cfg.threads)
    return env


def by_name(names: str | None) -> list[EmulatedCpu]:
    """The configurations a comma-separated list names (all when None); unknown names raise."""
    if not names:
        return list(EMULATED_CPUS)
    known = {c.name: c for c in EMULATED_CPUS}
    out = []
    for n in (x.strip() for x in names.split(",") if x.strip()):
        if n not in known:
            raise ValueError(f"unknown emulated CPU {n!r}; known: {', '.join(known)}")
        out.append(known[n])
    return out


def cpuinfo(key: str) -> str | None:
    """The first value of `key` in /proc/cpuinfo ('model name', 'cpu family', 'flags'), or None
    (no such key, or no /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                name, sep, value = line.partition(":")
                if sep and name.strip() == key:
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform module says."""
    return cpuinfo("model name") or platform.processor() or platform.machine()
