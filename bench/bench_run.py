"""asv track_ benchmarks for the run-level metrics `harmony-ref run` records beyond
bench_device.py: cold start and the 10-minute thermal summary over policy x profile (exact), and
the host decode-GEMV speedup over NumPy FP32 (measured, interleaved within one call). The
accuracy drop per policy is tracked by bench_accuracy.py, the host model's error by bench_hil.py.

Each class computes its metrics through the same job parts as `harmony-ref run`, so a curve here
and a gate row there are the same number.
"""

from harmony_ref.config import RunConfig
from harmony_ref.track.job import PARTS, run_part

from .common import MODEL, POLICIES, PROFILES


def _part(name: str, policy: str, profile: str = "harmony-flagship", model: str = MODEL, **scenario):
    part = next(p for p in PARTS if p.name == name)
    return run_part(part, RunConfig.from_names(model, policy, profile=profile, **scenario))


class ColdStart:
    params = (POLICIES, PROFILES)
    param_names = ["policy", "profile"]

    def setup(self, policy, profile):
        self.m = _part("coldstart", policy, profile)

    def track_coldstart_cold_ms(self, policy, profile):
        return self.m.value("coldstart_cold_ms")

    track_coldstart_cold_ms.unit = "ms"

    def track_coldstart_preload_warmup_ms(self, policy, profile):
        return self.m.value("coldstart_preload_warmup_ms")

    track_coldstart_preload_warmup_ms.unit = "ms"


class Thermal10Min:
    params = (POLICIES, PROFILES)
    param_names = ["policy", "profile"]

    def setup(self, policy, profile):
        self.m = _part("thermal", policy, profile)

    def track_sustained_peak_ratio_10min(self, policy, profile):
        return self.m.value("sustained_peak_ratio_10min")

    track_sustained_peak_ratio_10min.unit = "ratio"

    def track_time_to_first_throttle_s(self, policy, profile):
        return self.m.value("time_to_first_throttle_s")

    track_time_to_first_throttle_s.unit = "s"

    def track_energy_per_token_mj(self, policy, profile):
        return self.m.value("energy_per_token_mj")

    track_energy_per_token_mj.unit = "mJ"


class HostGemvSpeedup:
    """Best NumPy FP32 time / best kernel time over interleaved rounds (`host_gemv_speedup_x`
    of the run's host part), decode GEMV of Llama-3.2-3B's up_proj (8192 x 3072) in the
    policy's format, one thread: a ratio measured within one call, so it survives a slower or
    busier machine better than a time."""

    params = (["int8", "int4-g32", "int4-g128"],)
    param_names = ["policy"]
    timeout = 300

    def setup(self, policy):
        _part("host", policy)  # compile (or load the Numba cache) outside the tracked call

    def track_gemv_speedup_vs_numpy(self, policy):
        return _part("host", policy).value("host_gemv_speedup_x")

    track_gemv_speedup_vs_numpy.unit = "x"
