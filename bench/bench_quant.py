"""asv benchmarks for the weight quantizers (see numpy's asv suite for the layout)."""

import numpy as np

from harmony_ref.quant.int4 import quantize_int4, quantize_int4_ref
from harmony_ref.quant.int8 import quantize_int8


class QuantizeInt4:
    params = ([32, 128], ["asym", "sym"])
    param_names = ["group_size", "scheme"]

    def setup(self, group_size, scheme):
        self.w = (np.random.default_rng(0).standard_normal((1024, 4096)) * 0.02).astype(np.float32)
        quantize_int4(self.w[:2], group_size, scheme)  # JIT compile outside the timing

    def time_quantize_int4(self, group_size, scheme):
        quantize_int4(self.w, group_size, scheme)

    def time_quantize_int4_ref(self, group_size, scheme):
        quantize_int4_ref(self.w, group_size, scheme)

    def track_bits_per_weight(self, group_size, scheme):
        return quantize_int4(self.w[:4], group_size, scheme).bits_per_weight

    track_bits_per_weight.unit = "bits"


class QuantizeInt8:
    def setup(self):
        self.w = (np.random.default_rng(0).standard_normal((1024, 4096)) * 0.02).astype(np.float32)
        quantize_int8(self.w[:2])

    def time_quantize_int8(self):
        quantize_int8(self.w)
