"""asv benchmarks for the weight quantizers (see numpy's asv suite for the layout): each fast
Numba quantizer's CPU time relative to its NumPy `_ref` twin timed in the same seconds, one
thread (common.relative_time says why a ratio and not a time), and the stored bits per weight."""

from harmony_ref.quant.int4 import quantize_int4, quantize_int4_ref
from harmony_ref.quant.int8 import quantize_int8, quantize_int8_ref

from .common import pin_threads, relative_time, tracks, weights

VS_REF = "x _ref time"


class QuantizeInt4:
    params = ([32, 128], ["asym", "sym"])
    param_names = ["group_size", "scheme"]

    def setup(self, group_size, scheme):
        pin_threads()
        self.w = weights(1024, 4096)

    @tracks(None, unit=VS_REF, direction="lower")
    def track_time_vs_ref(self, group_size, scheme):
        return relative_time(
            lambda: quantize_int4(self.w, group_size, scheme),
            lambda: quantize_int4_ref(self.w, group_size, scheme),
            rounds=7,
        )

    @tracks(None, unit="bits", direction="lower")  # storage per weight: fewer bits, smaller model
    def track_bits_per_weight(self, group_size, scheme):
        return quantize_int4(self.w[:4], group_size, scheme).bits_per_weight


class QuantizeInt8:
    def setup(self):
        pin_threads()
        self.w = weights(1024, 4096)

    @tracks(None, unit=VS_REF, direction="lower")
    def track_time_vs_ref(self):
        return relative_time(
            lambda: quantize_int8(self.w), lambda: quantize_int8_ref(self.w), rounds=7
        )


class QuantizeLlama7BMlp:
    """One 4096 x 11008 matrix (a Llama-7B MLP projection): the fast quantizer's CPU time
    relative to its NumPy `_ref` twin on it."""

    params = (["int4-g128-asym", "int4-g32-sym", "int8"],)
    param_names = ["format"]
    timeout = 300

    def setup(self, fmt):
        pin_threads()
        self.w = weights(4096, 11008)
        self.fast, self.ref = _quantizers(fmt)

    @tracks(None, unit=VS_REF, direction="lower")
    def track_time_vs_ref(self, fmt):
        return relative_time(lambda: self.fast(self.w), lambda: self.ref(self.w), rounds=5)


def _quantizers(fmt):
    if fmt == "int8":
        return quantize_int8, quantize_int8_ref
    _, g, scheme = fmt.split("-")
    group = int(g.removeprefix("g"))
    return (lambda w: quantize_int4(w, group, scheme)), (
        lambda w: quantize_int4_ref(w, group, scheme)
    )
