"""asv: how far the host model is from the host (track_*), recomputed per commit.

setup_cache runs `harmony-ref calibrate --backend host --quick` once: the microbenchmarks, the fit,
and the held-out whole-model runs, writing a host profile with its [calibration] section; the
tracked number is `host_model_mape_pct` as a run record holds it (a SimulatedDevice prediction on
that profile), so a kernel or cost-model change that moves the model away from the measurement
shows up as a step. Host timings are noisy on shared machines: read the curve's trend, not one
point (the gate allows this metric 50%)."""

import os
import tempfile

from .common import lower_is_better, tracks


class HostModelError:
    timeout = 300

    def setup_cache(self):
        import contextlib
        import io

        from harmony_ref.cli import main
        from harmony_ref.config import Config
        from harmony_ref.hil.simulated import SimulatedDevice

        out = os.path.join(tempfile.mkdtemp(prefix="asv-host-"), "host.toml")
        with contextlib.redirect_stdout(io.StringIO()):
            rc = main(["calibrate", "--backend", "host", "--quick", "--repeats", "3", "--out", out,
                       "--json"])
        if rc != 0:  # its error went to stderr; without this asv reports a JSON decode error
            raise RuntimeError(f"harmony-ref calibrate exited {rc}")
        return SimulatedDevice(out).predict(Config.from_names(model="qwen2.5-0.5b"))

    @tracks("host_model_mape_pct", unit="%")
    def track_host_model_mape_pct(self, m):
        return lower_is_better(m["host_model_mape_pct"], "same")
