"""asv benchmarks for the simulated device: the predicted metrics of Llama-3.2-3B for every
shipped policy on every shipped profile (track_*), and the prediction speed (time_*).

Predicted metrics are exact functions of the code and data, so a change in a track_* curve is a
change in the model or a profile, never noise. Each track_ is the record metric in its
lower-is-better form (common.tracks): decode speed is drawn as the decode step time."""

from harmony_ref.backends.simulated import SimulatedDevice
from harmony_ref.config import RunConfig
from harmony_ref.model import graph

from .common import lower_is_better, reference_probe, relative_time, tracks

POLICIES = ["fp16", "int8", "int4-g32", "int4-g128", "mixed"]
PROFILES = ["harmony-flagship", "harmony-midrange", "harmony-lowend"]
MODEL = "llama-3.2-3b"


class PredictedLlama32_3B:
    params = (POLICIES, PROFILES)
    param_names = ["policy", "profile"]

    def setup_cache(self):  # every point once, shared by the tracks
        return {
            (po, pr): SimulatedDevice(pr).predict(RunConfig.from_names(model=MODEL, policy=po))
            for po in POLICIES
            for pr in PROFILES
        }

    def setup(self, cache, policy, profile):
        self.m = cache[policy, profile]

    @tracks("ttft_ms", unit="ms")
    def track_ttft_ms(self, cache, policy, profile):
        return lower_is_better(self.m["ttft_ms"], "same")

    @tracks("decode_step_ms", unit="ms")
    def track_decode_step_ms(self, cache, policy, profile):
        return lower_is_better(self.m["decode_step_ms"], "same")

    @tracks("e2e_ms", unit="ms")
    def track_e2e_ms(self, cache, policy, profile):
        return lower_is_better(self.m["e2e_ms"], "same")

    @tracks("peak_memory_mb", unit="MB")
    def track_peak_memory_mb(self, cache, policy, profile):
        return lower_is_better(self.m["peak_memory_mb"], "same")

    @tracks("launch_overhead_pct", unit="%")
    def track_launch_overhead_pct(self, cache, policy, profile):
        return lower_is_better(self.m["launch_overhead_pct"], "same")


class KernelLaunches:
    """Launches per decoded token depend on the graph (layers, fusion), not on the policy or the
    phone, so they are swept over model and fusion here rather than over policy x profile."""

    params = (["llama-3.2-1b", "llama-3.2-3b"], ["fused", "unfused"])
    param_names = ["model", "fusion"]

    def setup(self, model, fusion):
        config = RunConfig.from_names(model=model, policy="int4-g128", fused=fusion == "fused")
        self.m = SimulatedDevice("harmony-flagship").predict(config)

    @tracks("kernel_launches_per_token", unit="launches")
    def track_kernel_launches_per_token(self, model, fusion):
        return lower_is_better(self.m["kernel_launches_per_token"], "same")


class PredictSpeed:
    """CPU time of one prediction relative to common.reference_probe, a fixed pure-Python
    workload timed in the same seconds (common.relative_time says why a ratio)."""

    params = (["cached", "cold"],)
    param_names = ["graphs"]

    def setup(self, graphs):
        self.dev = SimulatedDevice("harmony-flagship")
        self.config = RunConfig.from_names(model=MODEL, policy="int4-g128")
        self.clear_graphs = graphs == "cold"

    def _predict(self):
        if self.clear_graphs:
            graph.build_graph.cache_clear()
            graph.layer_groups.cache_clear()
        self.dev.predict(self.config)

    @tracks(None, unit="x probe time", direction="lower")
    def track_predict_time_vs_probe(self, graphs):
        return relative_time(self._predict, reference_probe)
