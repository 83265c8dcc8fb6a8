"""llama.cpp's CPU matmul as a peer for the matmul benchmarks: a thin ctypes harness over ggml's
shared libraries that runs `ggml_mul_mat` on weights quantized by ggml itself (Q4_0, Q4_1, Q8_0),
in each weight buffer type the CPU backend offers here: the plain "CPU" buffer, "CPU_REPACK"
(weights interleaved once at load, as llama.cpp does for Q4_0 / Q8_0) and "AMX" (only in a build
for a CPU with AMX-INT8). Nothing of llama.cpp is vendored: the libraries come from the optional
`peer` extra (`pip install llama-cpp-python`, which builds llama.cpp for this CPU and ships
libggml*.so inside the `llama_cpp` package) or from a directory named by HARMONY_REF_GGML_LIB.

    peer = GgmlPeer.load()                  # None when no ggml library is found
    mm = peer.matmul(w, x, "q4_0", "CPU_REPACK", copies=4, threads=2)
    y = mm()                                # (M, N) float32, one ggml graph compute
    mm.run()                                # the next weight copy, output not copied out

Each `matmul` builds `copies` weight tensors and one graph per copy, so a benchmark can cycle
through more weight bytes than the last-level cache holds, as it does for our kernels. Results are
only as good as the peer build: check them (`relative_error`) before trusting a speed.
"""

from __future__ import annotations

import ctypes
import glob
import os
from dataclasses import dataclass

import numpy as np

LIB_ENV = "HARMONY_REF_GGML_LIB"  # a directory holding libggml.so, libggml-base.so, libggml-cpu.so
GGML_TYPES = {"f32": 0, "q4_0": 2, "q4_1": 3, "q8_0": 8}
# What each buffer type takes on x86 (ggml-cpu/repack.cpp ggml_repack_get_optimal_repack_type:
# only Q4_0 is repacked there, to q4_0_8x8; amx/amx.cpp supports_op: Q4_0, Q4_1, Q8_0). Setting a
# tensor of another format in CPU_REPACK crashes the process, so `matmul` refuses it.
BUFFER_FORMATS = {
    "CPU": ("q4_0", "q4_1", "q8_0"),
    "CPU_REPACK": ("q4_0",),
    "AMX": ("q4_0", "q4_1", "q8_0"),
}
_DEVICE_TYPE_CPU = 0
_OBJECT_SLACK_BYTES = 1 << 20


class _InitParams(ctypes.Structure):
    _fields_ = [
        ("mem_size", ctypes.c_size_t),
        ("mem_buffer", ctypes.c_void_p),
        ("no_alloc", ctypes.c_bool),
    ]


_P = ctypes.c_void_p
_SIGNATURES = {  # name: (restype, argtypes)
    "ggml_init": (_P, [_InitParams]),
    "ggml_free": (None, [_P]),
    "ggml_tensor_overhead": (ctypes.c_size_t, []),
    "ggml_graph_overhead": (ctypes.c_size_t, []),
    "ggml_new_tensor_2d": (_P, [_P, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]),
    "ggml_mul_mat": (_P, [_P, _P, _P]),
    "ggml_new_graph": (_P, [_P]),
    "ggml_build_forward_expand": (None, [_P, _P]),
    "ggml_row_size": (ctypes.c_size_t, [ctypes.c_int, ctypes.c_int64]),
    "ggml_quantize_chunk": (
        ctypes.c_size_t,
        [ctypes.c_int, _P, _P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _P],
    ),
    "ggml_backend_cpu_init": (_P, []),
    "ggml_backend_cpu_set_n_threads": (None, [_P, ctypes.c_int]),
    "ggml_backend_free": (None, [_P]),
    "ggml_backend_cpu_buffer_type": (_P, []),
    "ggml_backend_buft_name": (ctypes.c_char_p, [_P]),
    "ggml_backend_alloc_ctx_tensors_from_buft": (_P, [_P, _P]),
    "ggml_backend_buffer_free": (None, [_P]),
    "ggml_backend_tensor_set": (None, [_P, _P, ctypes.c_size_t, ctypes.c_size_t]),
    "ggml_backend_tensor_get": (None, [_P, _P, ctypes.c_size_t, ctypes.c_size_t]),
    "ggml_backend_graph_compute": (ctypes.c_int, [_P, _P]),
    "ggml_backend_dev_by_type": (_P, [ctypes.c_int]),
    "ggml_backend_dev_backend_reg": (_P, [_P]),
    "ggml_backend_reg_get_proc_address": (_P, [_P, ctypes.c_char_p]),
}


def find_library_dir() -> str | None:
    """HARMONY_REF_GGML_LIB, else the `llama_cpp` package's lib/ directory, else None."""
    candidates = []
    if os.environ.get(LIB_ENV):
        candidates.append(os.environ[LIB_ENV])
    try:
        import llama_cpp  # the optional `peer` extra

        candidates.append(os.path.join(os.path.dirname(llama_cpp.__file__), "lib"))
    except Exception:  # noqa: BLE001 - absent or broken: no peer
        pass
    for d in candidates:
        found = [glob.glob(os.path.join(d, p)) for p in ("libggml-cpu*.so*", "libggml.so*")]
        if all(found):
            return d
    return None


class GgmlPeer:
    """ggml's CPU backend loaded from one directory of shared libraries."""

    def __init__(self, lib_dir: str):
        self.lib_dir = lib_dir
        mode = ctypes.RTLD_GLOBAL
        for name in ("libggml-base.so", "libggml-cpu.so", "libggml.so"):
            path = sorted(glob.glob(os.path.join(lib_dir, name + "*")))[0]
            lib = ctypes.CDLL(path, mode=mode)
        self._lib = lib
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        self.backend = lib.ggml_backend_cpu_init()
        self.buffer_types = self._buffer_types()

    @classmethod
    def load(cls) -> GgmlPeer | None:
        d = find_library_dir()
        return cls(d) if d else None

    def _buffer_types(self) -> dict[str, int]:
        lib = self._lib
        found = {"CPU": lib.ggml_backend_cpu_buffer_type()}
        dev = lib.ggml_backend_dev_by_type(_DEVICE_TYPE_CPU)
        reg = lib.ggml_backend_dev_backend_reg(dev)
        addr = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
        if addr:
            extra = ctypes.CFUNCTYPE(ctypes.POINTER(_P), _P)(addr)(dev)
            i = 0
            while extra[i]:
                found[lib.ggml_backend_buft_name(extra[i]).decode()] = extra[i]
                i += 1
        return found

    def matmul(
        self,
        w: np.ndarray,
        x: np.ndarray,
        fmt: str,
        buffer_type: str = "CPU",
        copies: int = 1,
        threads: int = 2,
    ) -> PeerMatmul:
        """x (M, K) @ w (N, K).T with w quantized by ggml to `fmt` in `buffer_type`."""
        if buffer_type not in self.buffer_types:
            raise ValueError(
                f"ggml buffer type {buffer_type!r} not in this build "
                f"({', '.join(self.buffer_types)})"
            )
        if fmt not in BUFFER_FORMATS.get(buffer_type, ()):
            raise ValueError(f"ggml buffer type {buffer_type!r} does not take {fmt} on x86")
        return PeerMatmul(
            self,
            np.asarray(w, np.float32),
            np.asarray(x, np.float32),
            fmt,
            buffer_type,
            copies,
            threads,
        )


@dataclass
class _Ctx:
    ctx: int
    buffer: int = 0


class PeerMatmul:
    """`copies` quantized weight tensors, one graph each; `run()` computes the next one."""

    def __init__(self, peer: GgmlPeer, w, x, fmt, buffer_type, copies, threads):
        lib = peer._lib
        self._lib, self._peer = lib, peer
        n, k = w.shape
        x = np.ascontiguousarray(x.reshape(-1, k))
        m = x.shape[0]
        self.shape, self.fmt, self.buffer_type = (m, n, k), fmt, buffer_type
        gtype = GGML_TYPES[fmt]
        overhead = lib.ggml_tensor_overhead()
        size = overhead * copies + _OBJECT_SLACK_BYTES
        self._w = _Ctx(lib.ggml_init(_InitParams(size, None, True)))
        weights = [lib.ggml_new_tensor_2d(self._w.ctx, gtype, k, n) for _ in range(copies)]
        buft = peer.buffer_types[buffer_type]
        self._w.buffer = lib.ggml_backend_alloc_ctx_tensors_from_buft(self._w.ctx, buft)
        qbytes = lib.ggml_row_size(gtype, k) * n
        q = np.empty(qbytes, np.uint8)
        w = np.ascontiguousarray(w)
        done = lib.ggml_quantize_chunk(gtype, w.ctypes.data, q.ctypes.data, 0, n, k, None)
        assert done == qbytes, (done, qbytes)
        self.weight_bytes = qbytes
        for t in weights:
            lib.ggml_backend_tensor_set(t, q.ctypes.data, 0, qbytes)
        size = (
            overhead * (2 * copies + 1) + lib.ggml_graph_overhead() * copies + _OBJECT_SLACK_BYTES
        )
        self._a = _Ctx(lib.ggml_init(_InitParams(size, None, True)))
        self._x = lib.ggml_new_tensor_2d(self._a.ctx, GGML_TYPES["f32"], k, m)
        self._ys, self._graphs = [], []
        for t in weights:
            y = lib.ggml_mul_mat(self._a.ctx, t, self._x)
            g = lib.ggml_new_graph(self._a.ctx)
            lib.ggml_build_forward_expand(g, y)
            self._ys.append(y)
            self._graphs.append(g)
        cpu = lib.ggml_backend_cpu_buffer_type()
        self._a.buffer = lib.ggml_backend_alloc_ctx_tensors_from_buft(self._a.ctx, cpu)
        lib.ggml_backend_tensor_set(self._x, x.ctypes.data, 0, x.nbytes)
        lib.ggml_backend_cpu_set_n_threads(peer.backend, threads)
        self._next = 0

    def run(self) -> int:
        """Compute the next copy's product; returns its index."""
        i = self._next
        self._next = (i + 1) % len(self._graphs)
        status = self._lib.ggml_backend_graph_compute(self._peer.backend, self._graphs[i])
        if status != 0:
            raise RuntimeError(f"ggml_backend_graph_compute failed with status {status}")
        return i

    def __call__(self) -> np.ndarray:
        i = self.run()
        m, n, _ = self.shape
        y = np.empty((m, n), np.float32)
        self._lib.ggml_backend_tensor_get(self._ys[i], y.ctypes.data, 0, y.nbytes)
        return y

    def close(self):
        for c in (self._a, self._w):
            if c.buffer:
                self._lib.ggml_backend_buffer_free(c.buffer)
            if c.ctx:
                self._lib.ggml_free(c.ctx)
            c.ctx = c.buffer = 0

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """||got - want|| / ||want|| (Frobenius)."""
    return float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want))


# A peer configuration is benchmarked only after a subprocess has run it once at the same shape
# and matched the float64 product within these bounds (ours on the same Gaussian data: Q4 g32
# ~0.06-0.09, Q8 ~0.01): llama.cpp's AMX path can crash (SIGILL in a VM without AMX tile state)
# or return garbage in some builds, and a crash must not take the benchmark process with it.
PEER_MAX_REL_ERR = {"q4_0": 0.15, "q4_1": 0.15, "q8_0": 0.02}
_PROBE = """
import json, sys
import numpy as np
from harmony_ref.lab.ggml_peer import GgmlPeer, relative_error
fmt, buft, m, n, k, threads = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
rng = np.random.default_rng(0)
w = rng.standard_normal((n, k), dtype=np.float32) * np.float32(0.02)
x = rng.standard_normal((m, k), dtype=np.float32)
y = GgmlPeer(sys.argv[7]).matmul(w, x, fmt, buft, 1, threads)()
print(json.dumps({"rel_err": relative_error(y, x.astype(np.float64) @ w.T.astype(np.float64))}))
"""


@dataclass(frozen=True)
class Probe:
    ok: bool
    detail: str  # "rel err 0.086" or why not


def probe(
    peer: GgmlPeer,
    fmt: str,
    buffer_type: str,
    m: int,
    n: int,
    k: int,
    threads: int = 2,
    timeout_s: float = 300,
) -> Probe:
    """Run one peer matmul of this shape in a subprocess and check its result (see above)."""
    import json
    import subprocess
    import sys

    if buffer_type not in peer.buffer_types:
        return Probe(False, f"no {buffer_type} buffer type in this build")
    if fmt not in BUFFER_FORMATS.get(buffer_type, ()):
        return Probe(False, f"{buffer_type} does not take {fmt} on x86")
    args = [
        sys.executable,
        "-c",
        _PROBE,
        fmt,
        buffer_type,
        str(m),
        str(n),
        str(k),
        str(threads),
        peer.lib_dir,
    ]
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Probe(False, f"timed out after {timeout_s:.0f} s")
    if out.returncode != 0:
        signal = f"signal {-out.returncode}" if out.returncode < 0 else f"exit {out.returncode}"
        return Probe(False, f"crashed ({signal})")
    err = json.loads(out.stdout.strip().splitlines()[-1])["rel_err"]
    if not err <= PEER_MAX_REL_ERR[fmt]:
        return Probe(False, f"wrong results (rel err {err:.3g} > {PEER_MAX_REL_ERR[fmt]})")
    return Probe(True, f"rel err {err:.3g}")
