"""asv benchmarks for the weight quantizers (see numpy's asv suite for the layout). The Numba
quantizers run on one thread (common.THREADS) and their inputs are built once per process."""

from harmony_ref.quant.int4 import quantize_int4, quantize_int4_ref
from harmony_ref.quant.int8 import quantize_int8

from .common import Timed, pin_threads, tracks, weights


class QuantizeInt4(Timed):
    params = ([32, 128], ["asym", "sym"])
    param_names = ["group_size", "scheme"]

    def setup(self, group_size, scheme):
        pin_threads()
        self.w = weights(1024, 4096)
        quantize_int4(self.w[:2], group_size, scheme)  # JIT compile outside the timing

    def time_quantize_int4(self, group_size, scheme):
        quantize_int4(self.w, group_size, scheme)

    def time_quantize_int4_ref(self, group_size, scheme):
        quantize_int4_ref(self.w, group_size, scheme)

    @tracks(None, unit="bits", direction="lower")  # storage per weight: fewer bits, smaller model
    def track_bits_per_weight(self, group_size, scheme):
        return quantize_int4(self.w[:4], group_size, scheme).bits_per_weight


class QuantizeInt8(Timed):
    def setup(self):
        pin_threads()
        self.w = weights(1024, 4096)
        quantize_int8(self.w[:2])

    def time_quantize_int8(self):
        quantize_int8(self.w)


class QuantizeLlama7BMlp:
    """One 4096 x 11008 matrix (a Llama-7B MLP projection), fast Numba quantizers against their
    NumPy `_ref` twins. asv's default sampling: the NumPy twins take seconds on this shape."""

    params = (["int4-g128-asym", "int4-g32-sym", "int8"],)
    param_names = ["format"]
    timeout = 300

    def setup(self, fmt):
        pin_threads()
        self.w = weights(4096, 11008)
        self.fast, self.ref = _quantizers(fmt)
        self.fast(self.w[:2])  # JIT compile outside the timing

    def time_fast(self, fmt):
        self.fast(self.w)

    def time_ref(self, fmt):
        self.ref(self.w)


def _quantizers(fmt):
    from harmony_ref.quant.int8 import quantize_int8_ref

    if fmt == "int8":
        return quantize_int8, quantize_int8_ref
    _, g, scheme = fmt.split("-")
    group = int(g.removeprefix("g"))
    return (lambda w: quantize_int4(w, group, scheme)), (lambda w: quantize_int4_ref(w, group, scheme))
