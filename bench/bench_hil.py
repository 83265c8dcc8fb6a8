"""asv: how far the host model is from the host (track_*), recomputed per commit.

setup_cache runs `harmony-ref calibrate --backend host --quick` once: the microbenchmarks, the fit,
and the held-out whole-model runs; the tracked numbers are its held-out MAPEs (%), so a kernel or
cost-model change that moves the model away from the measurement shows up as a step. Host timings
are noisy on shared machines: read the curve's trend, not one point."""

import json
import os
import tempfile


class HostModelError:
    timeout = 300

    def setup_cache(self):
        import contextlib
        import io

        from harmony_ref.cli import main

        out = os.path.join(tempfile.mkdtemp(prefix="asv-host-"), "host.toml")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = main(["calibrate", "--backend", "host", "--quick", "--repeats", "3", "--out", out,
                       "--json"])
        if rc != 0:  # its error went to stderr; without this asv reports a JSON decode error
            raise RuntimeError(f"harmony-ref calibrate exited {rc}")
        return json.loads(buf.getvalue())

    def track_host_model_mape_pct(self, r):
        return r["host_model_mape_pct"]

    track_host_model_mape_pct.unit = "%"

    def track_per_op_mape_pct(self, r):
        return r["per_op_mape_pct"]

    track_per_op_mape_pct.unit = "%"

    def track_launch_overhead_us(self, r):
        return r["launch_overhead_us"]

    track_launch_overhead_us.unit = "us"
