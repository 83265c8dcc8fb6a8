"""asv benchmarks for the simulated device: the predicted metrics of Llama-3.2-3B for every
shipped policy on every shipped profile (track_*), and the prediction speed (time_*).

Predicted metrics are exact functions of the code and data, so a change in a track_* curve is a
change in the model or a profile, never noise."""

from harmony_ref.config import RunConfig
from harmony_ref.backends.simulated import SimulatedDevice
from harmony_ref.model import graph

POLICIES = ["fp16", "int8", "int4-g32", "int4-g128", "mixed"]
PROFILES = ["harmony-flagship", "harmony-midrange", "harmony-lowend"]
MODEL = "llama-3.2-3b"


class PredictedLlama32_3B:
    params = (POLICIES, PROFILES)
    param_names = ["policy", "profile"]

    def setup(self, policy, profile):
        self.m = SimulatedDevice(profile).predict(RunConfig.from_names(model=MODEL, policy=policy))

    def track_ttft_ms(self, policy, profile):
        return self.m.value("ttft_ms")

    track_ttft_ms.unit = "ms"

    def track_decode_tokens_per_s(self, policy, profile):
        return self.m.value("decode_tokens_per_s")

    track_decode_tokens_per_s.unit = "tokens/s"

    def track_e2e_ms(self, policy, profile):
        return self.m.value("e2e_ms")

    track_e2e_ms.unit = "ms"

    def track_peak_memory_mb(self, policy, profile):
        return self.m.value("peak_memory_mb")

    track_peak_memory_mb.unit = "MB"

    def track_launch_overhead_pct(self, policy, profile):
        return self.m.value("launch_overhead_pct")

    track_launch_overhead_pct.unit = "%"

    def track_kernel_launches_per_token(self, policy, profile):
        return self.m.value("kernel_launches_per_token")

    track_kernel_launches_per_token.unit = "launches"


class PredictSpeed:
    params = (["cached", "cold"],)
    param_names = ["graphs"]

    def setup(self, graphs):
        self.dev = SimulatedDevice("harmony-flagship")
        self.config = RunConfig.from_names(model=MODEL, policy="int4-g128")
        self.dev.predict(self.config)

    def time_predict(self, graphs):
        if graphs == "cold":
            graph.build_graph.cache_clear()
            graph.layer_groups.cache_clear()
        self.dev.predict(self.config)
