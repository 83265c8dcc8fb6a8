"""The fake phone behind tests/fake_device's `hdc` and `adb` clients (fake_client.py).

    python phone_server.py STATE_DIR        # started by the first client call, like hdc's server

STATE_DIR/phone.json says what the phone is (kind hdc|adb, serial, properties, starting
temperatures, faults); STATE_DIR/fs/ is its file system (a push lands there); STATE_DIR/state.json
is its state after every request (the tests read it); the clients talk to this process over the
Unix socket STATE_DIR/server.sock, one JSON request and one JSON reply per connection.

The phone:
- a shell (FakeShell) that runs what harmony-ref's sessions send: `;`, `&&`, newlines, `$?`, `$$`,
  `$(cat FILE)`, `> FILE`, `2>/dev/null`, and the commands mkdir, rm, mv, chmod, cat, echo,
  grep -sH, sha256sum, sleep, kill, sh -c, exec, cd, param (HarmonyOS) / getprop (Android),
  hidumper --mem, and two benchmark binaries (files pushed to the phone, recognised by name):
  `llama-bench -m MODEL -p P -n N -r R -o json` and MindSpore Lite's
  `benchmark --modelFile=MODEL --loopCount=L`, whose outputs are in the tools' formats
  (tests/fixtures/device_outputs/README.md);
- /sys/class/thermal/thermal_zone0/temp (die) and thermal_zone1 (skin) from harmony-ref's own
  thermal model (harmony_ref/device/thermal.py: the RC network and governor of
  harmony-flagship's [thermal] table), driven by the power of decoding llama-3.2-1b int4-g32 on
  that profile (decode_operating_points) while a benchmark runs and by IDLE_W otherwise;
- CPU frequencies: each core's cpuinfo_max_freq from harmony-flagship's [cpu] clusters (cpu0-3
  little, 4-6 big, 7 prime); scaling_max_freq = max x freq_steps[governor state] (one cooling
  state for CPU and NPU: the fake's simplification), scaling_cur_freq = that while a benchmark
  runs, IDLE_FREQ_FRACTION of max when idle;
- time: the phone's clock (/proc/uptime) is simulated and accelerated: a benchmark advances it by
  its simulated duration, `sleep N` by N seconds at once, every other command by COMMAND_S; no
  test waits for the phone to cool in real time. A benchmark's client sleeps REAL_RUN_S of real
  time so that telemetry can poll it, and reads in that window see the run part way through.

Faults on demand (phone.json "faults"): `vanish_on_run` (the k-th benchmark run prints part of
its output and the device leaves), `truncate_pushes` (the next N pushes arrive cut in half while
the tool reports success), `hang_on_run` (the k-th run never returns; its client starts a child
that must die with it), `stuck_zone` (the temperature never falls: a zone that never cools),
`cap_from_run` (from the k-th run on, every core's scaling_max_freq is capped at `cap_fraction`,
default 0.6, of its maximum, whatever the temperature: a cap a thermal daemon or power mode
sets), `cap_on_run` (the same cap while the k-th run runs, and that run's rates times
cap_fraction: one slow, throttled repeat). A pushed benchmark binary holding a line `speed=X`
runs at X times the phone's rates (a build that made it slower or faster). phone.json `load_s` gives each benchmark a start window of that many simulated seconds
(REAL_LOAD_S of real time): the process is alive, its model loading, the big cores parked at
IDLE_FREQ_FRACTION and idle in /proc/stat; `loaded_freq_fraction` runs the big cores below
their cap while computing. /proc/stat counts the big cores busy while a benchmark computes;
`dumpsys thermalservice` (adb) reports the governor's state as Android's thermal status.
The battery's current_now is the load's power (the operating point's while a benchmark
computes, IDLE_W otherwise) over BATTERY_V, in microamps, positive while discharging (this
fake vendor's sign; phone.json `current_sign`: "negative" for the kernel ABI's); phone.json
`charging` makes its status "Charging" and its current the charger's minus the load, unless
`1` was written to the battery folder's `input_suspend` (Qualcomm's charger-input switch, the
file a [power] stop_charging command writes): then it discharges. The Android fake has Pixel's
ODPM: /sys/bus/iio/devices/iio:device0/energy_value, energy counters of two rails (ODPM_RAILS)
that accumulate all the power it draws (idle and computing, charger or not), in the HAL's
`t=` / `CH<n>(T=..)[rail], uWs` format; `cat` expands a `*` in that path.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import os
import re
import socket
import sys
import time
from pathlib import Path, PurePosixPath

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

import numpy as np  # noqa: E402

from harmony_ref.config import RunConfig  # noqa: E402
from harmony_ref.device.cost import phase_cost  # noqa: E402
from harmony_ref.device.runtime import load_profile  # noqa: E402
from harmony_ref.device.thermal import decode_operating_points, simulate  # noqa: E402

PROFILE = "harmony-flagship"
WORKLOAD = ("llama-3.2-1b", "int4-g32")
IDLE_W = 0.6  # assumption: screen off, SoC idle, the fake's own number
# The Android fake's ODPM (Pixel's power-rail energy counters, one monitor chip): the rails
# share all of its power in these proportions (made up; the format is the Pixel HAL's).
ODPM_PATH = "/sys/bus/iio/devices/iio:device0/energy_value"
ODPM_RAILS = {"S2M_VDD_CPUCL2": 0.7, "S10M_VDD_MEM": 0.3}
COMMAND_S = 0.05  # simulated seconds one shell command costs
REAL_RUN_S = 0.1  # real seconds a benchmark's client takes at least, so telemetry can poll it
REAL_LOAD_S = 0.25  # real seconds of a benchmark's start window (phone.json load_s > 0)
LITTLE_BUSY = 0.05  # the little cores' busy share, always (assumption: background work)
USER_HZ = 100  # /proc/stat's tick (proc.rst)
BATTERY_V = 3.87  # assumption: a Li-ion cell near its nominal voltage, held constant
CHARGER_W = 10.0  # assumption: what the charger delivers while phone.json says "charging"
WINDOW_MAX_S = 30.0  # a run whose client never said it is done (killed) ends after this
IDLE_FREQ_FRACTION = 0.3  # a parked core's scaling_cur_freq, share of its maximum
DT_S = 0.05  # thermal step (the model's backward Euler is stable at any step)
IDLE_TIMEOUT_S = 300.0  # the server exits when nobody asked anything for this long
UPTIME0_S = 5000.0
MODEL_RUNTIME_MB = 60.0  # a benchmark's memory beyond its model file: assumption


class Phone:
    def __init__(self, state_dir: Path):
        self.dir = state_dir
        self.fs = state_dir / "fs"
        self.fs.mkdir(parents=True, exist_ok=True)
        self.load()
        profile = load_profile(PROFILE)
        self.thermal = profile.thermal
        cfg = RunConfig.from_names(*WORKLOAD, prompt_tokens=128, new_tokens=128)
        pts = decode_operating_points(profile, cfg)
        self.power_w = pts.power_w
        self.decode_tps = pts.tokens_per_s
        steps = self.thermal.freq_steps
        self.prefill_tps = np.array(
            [128 / phase_cost(profile, cfg, "prefill", f, f).time_s for f in steps]
        )
        self.max_khz = {}
        cpu = 0
        for cluster in sorted(profile.cpu.clusters, key=lambda c: c.freq_ghz):
            for _ in range(cluster.cores):
                self.max_khz[cpu] = int(round(cluster.freq_ghz * 1e6))
                cpu += 1
        self.warmup()

    def warmup(self) -> None:
        """Compile the thermal stepper before the first client waits on it."""
        simulate(
            self.thermal,
            np.full(len(self.thermal.freq_steps), IDLE_W),
            np.zeros(len(self.thermal.freq_steps)),
            1.0,
            DT_S,
            "off",
            30.0,
            30.0,
        )

    # --- state ----------------------------------------------------------------------------------
    def load(self) -> None:
        cfg = json.loads((self.dir / "phone.json").read_text())
        self.cfg = cfg
        self.kind = cfg["kind"]
        self.serial = cfg["serial"]
        self.faults = dict(cfg.get("faults", {}))
        self.t = UPTIME0_S
        self.die = float(cfg.get("die_c", 30.0))
        self.skin = float(cfg.get("skin_c", 30.0))
        self.gov_state = 0
        self.gone = False
        self.runs = 0
        self.rails_uws = {rail: 0.0 for rail in ODPM_RAILS}  # the ODPM counters
        self.next_pid = 4100
        self.active = None  # the benchmark run a client is sleeping through
        self.log: list[str] = []
        self.pushes = 0
        self.busy_s = 0.0  # the big cores' busy seconds since boot (benchmarks computing)
        self.load_s = float(cfg.get("load_s", 0.0))  # a benchmark's start window, simulated s
        self.loaded_freq_fraction = float(cfg.get("loaded_freq_fraction", 1.0))
        self.charging = bool(cfg.get("charging", False))
        # current_now's sign while discharging: this fake's vendor reports it positive, unlike the
        # kernel ABI's negative (Documentation/ABI/testing/sysfs-class-power)
        self.discharge_sign = 1 if cfg.get("current_sign", "positive") == "positive" else -1

    def save(self) -> None:
        state = {
            "uptime_s": self.t,
            "die_c": self.die,
            "skin_c": self.skin,
            "gov_state": self.gov_state,
            "gone": self.gone,
            "runs": self.runs,
            "pushes": self.pushes,
            "log": self.log[-200:],
        }
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.dir / "state.json")

    def path(self, device_path: str) -> Path:
        p = PurePosixPath(device_path)
        if not p.is_absolute():
            raise ValueError(device_path)
        return self.fs.joinpath(*p.parts[1:])

    # --- thermal --------------------------------------------------------------------------------
    def _window(self):
        """(fraction of the active run done, its record) while a client is inside a run: from
        the benchmark's request until its client says it is done (or WINDOW_MAX_S passed)."""
        a = self.active
        if a is None:
            return None
        elapsed = time.monotonic() - a["real_t0"]
        if elapsed > WINDOW_MAX_S:
            self.active = None
            return None
        real_load = a["real_load_s"]
        a["loading"] = elapsed < real_load
        if a["loading"]:
            return elapsed / real_load, a
        return min((elapsed - real_load) / REAL_RUN_S, 0.95), a

    def spend(self, joules: float) -> None:
        """The energy the phone used: onto its ODPM rail counters."""
        for rail, share in ODPM_RAILS.items():
            self.rails_uws[rail] += joules * share * 1e6

    def idle(self, seconds: float) -> None:
        if seconds <= 0:
            return
        self.t += seconds
        self.spend(IDLE_W * seconds)
        if self.faults.get("stuck_zone"):
            return
        n = len(self.thermal.freq_steps)
        tr = simulate(
            self.thermal,
            np.full(n, IDLE_W),
            np.zeros(n),
            max(seconds, DT_S),
            DT_S,
            "off",
            self.die,
            self.skin,
        )
        self.die, self.skin = float(tr.die_c[-1]), float(tr.skin_c[-1])
        if self.die < self.thermal.passive_trip_c:  # step_wise/IPA release the cap below the trip
            self.gov_state = 0

    def work(self, units: float, rate: np.ndarray) -> tuple[float, dict]:
        """Run `units` tokens at `rate[state]` tokens/s from the current temperatures; returns
        (simulated seconds, the trace slice for mid-run reads) and moves the phone to its end."""
        worst = units / float(rate[-1]) * 1.2 + 1.0
        tr = simulate(self.thermal, self.power_w, rate, worst, DT_S, None, self.die, self.skin)
        done = np.cumsum(tr.rate) * DT_S
        i = int(min(np.searchsorted(done, units), len(done) - 1))
        seconds = (i + 1) * DT_S
        if not self.faults.get("stuck_zone"):
            self.die, self.skin = float(tr.die_c[i]), float(tr.skin_c[i])
        self.gov_state = int(tr.state[i])
        self.t += seconds
        self.spend(float(tr.power_w[: i + 1].sum()) * DT_S)
        return seconds, {
            "die": tr.die_c[: i + 1].tolist()[::20] or [self.die],
            "state": tr.state[: i + 1].tolist()[::20] or [self.gov_state],
        }

    def now(self):
        """(uptime, die, skin, governor state, running?, computing?) as a read sees them: in a
        run's start window the process is alive but not computing (loading its model)."""
        w = self._window()
        if w is None:
            return self.t, self.die, self.skin, self.gov_state, False, False
        f, a = w
        if a["loading"]:
            t = a["t0"] + f * (a["tc"] - a["t0"])
            return t, a["die"][0], self.skin, a["state"][0], True, False
        k = min(int(f * len(a["die"])), len(a["die"]) - 1)
        t = a["tc"] + f * (a["t1"] - a["tc"])
        return t, a["die"][k], self.skin, a["state"][k], True, True

    def busy_at(self, t: float) -> float:
        """The big cores' busy seconds up to uptime `t` (a read inside a run sees part of it)."""
        a = self.active
        if a is None or self._window() is None:
            return self.busy_s
        return a["busy0"] + max(0.0, min(t, a["t1"]) - a["tc"])

    def proc_stat(self, t: float) -> str:
        """/proc/stat's cpu lines (proc.rst) in USER_HZ ticks: the big cores busy while a
        benchmark computes, the little ones at LITTLE_BUSY."""
        lines = []
        for cpu, top in self.max_khz.items():
            big = top >= max(self.max_khz.values()) * 0.8
            busy = self.busy_at(t) if big else LITTLE_BUSY * t
            idle = max(t - busy, 0.0)
            lines.append(f"cpu{cpu} {int(busy * USER_HZ)} 0 0 {int(idle * USER_HZ)} 0 0 0 0 0 0")
        total = [sum(int(x.split()[i]) for x in lines) for i in (1, 4)]
        return "\n".join([f"cpu  {total[0]} 0 0 {total[1]} 0 0 0 0 0 0", *lines])

    def thermalservice(self) -> str:
        """`dumpsys thermalservice` in ThermalManagerService.dump's layout; the status follows
        the governor's state (the fake's simplification: one cooling state, one status)."""
        _t, die, skin, state, _running, _computing = self.now()
        return (
            "IsStatusOverride: false\nThermalEventListeners:\n\tcallbacks: 0\n"
            "ThermalStatusListeners:\n\tcallbacks: 1\n"
            f"Thermal Status: {min(int(state), 6)}\nCached temperatures:\n"
            f"\tTemperature{{mValue={die:.1f}, mType=0, mName=CPU, mStatus={min(int(state), 6)}}}\n"
            f"\tTemperature{{mValue={skin:.1f}, mType=3, mName=skin, mStatus=0}}\n"
            "HAL Ready: true\n"
        )

    # --- files the kernel makes up --------------------------------------------------------------
    def special(self, path: str) -> str | None:
        t, die, skin, state, running, computing = self.now()
        frac = self.thermal.freq_steps[state]
        capped_from = self.faults.get("cap_from_run")
        window = self._window()
        capped_now = window is not None and window[1]["run"] == self.faults.get("cap_on_run")
        if (capped_from and self.runs >= capped_from) or capped_now:  # not the governor's cap
            frac = min(frac, float(self.faults.get("cap_fraction", 0.6)))
        if path == "/proc/uptime":
            return f"{t:.2f} {t * 7.3:.2f}"
        if path == ODPM_PATH and self.kind == "adb":  # counters as of the last completed step
            ms = int(self.t * 1000)
            return f"t={ms}\n" + "".join(
                f"CH{i}(T={ms})[{rail}], {int(uws)}\n"
                for i, (rail, uws) in enumerate(self.rails_uws.items())
            )
        if path == "/proc/stat":
            return self.proc_stat(t)
        m = re.fullmatch(r"/sys/class/thermal/thermal_zone(\d+)/(temp|type)", path)
        if m:
            zone, what = int(m.group(1)), m.group(2)
            if zone > 1:
                return None
            if what == "type":
                return ("soc_thermal", "shell_frame")[zone]
            return str(int(round((die if zone == 0 else skin) * 1000)))
        m = re.fullmatch(r"/sys/devices/system/cpu/cpu(\d+)/cpufreq/(\w+)", path)
        if m:
            cpu, name = int(m.group(1)), m.group(2)
            top = self.max_khz.get(cpu)
            if top is None:
                return None
            if name == "cpuinfo_max_freq":
                return str(top)
            if name == "scaling_max_freq":
                return str(int(top * frac))
            if name == "scaling_cur_freq":
                share = frac * self.loaded_freq_fraction if computing else IDLE_FREQ_FRACTION
                return str(int(top * share))
            return None
        m = re.fullmatch(
            r"/sys/class/power_supply/(battery|Battery)/"
            r"(capacity|status|current_now|voltage_now)",
            path,
        )
        if m:
            what = m.group(2)
            if what == "capacity":
                return str(max(5, 87 - self.runs))
            suspend = self.path(f"/sys/class/power_supply/{m.group(1)}/input_suspend")
            charging = self.charging and not (
                suspend.is_file() and suspend.read_text().strip() == "1"
            )
            if what == "status":
                return "Charging" if charging else "Discharging"
            if what == "voltage_now":
                return str(int(round(BATTERY_V * 1e6)))
            load_w = float(self.power_w[state]) if computing else IDLE_W
            out_w = load_w - (CHARGER_W if charging else 0.0)  # > 0: out of the battery
            return str(int(round(self.discharge_sign * out_w / BATTERY_V * 1e6)))
        m = re.fullmatch(r"/proc/(\d+)/status", path)
        if m:
            a = self._window()
            if a is None or a[1]["pid"] != int(m.group(1)):
                return None
            kb = a[1]["mem_kb"]
            return (
                f"Name:\t{a[1]['name']}\nVmPeak:\t{kb + 9000} kB\nVmHWM:\t{kb} kB\nVmRSS:\t{kb} kB"
            )
        return None

    def read_file(self, path: str) -> str | None:
        special = self.special(path)
        if special is not None:
            return special
        if path.startswith(("/proc/", "/sys/")):
            return None
        p = self.path(path)
        return p.read_text(errors="replace") if p.is_file() else None

    # --- benchmarks -----------------------------------------------------------------------------
    def benchmark(
        self, name: str, args: list[str], pid: int, cwd: str, speed: float = 1.0
    ) -> tuple[str, str, int, dict]:
        """(stdout, stderr, exit code, what the client must do in real time); `speed`: the
        pushed binary's own factor on the phone's rates (a `speed=X` line in it: a build that
        runs X times as fast), times cap_fraction in the run `cap_on_run` names."""
        self.runs += 1
        k = self.runs
        if self.faults.get("cap_on_run") == k:
            speed *= float(self.faults.get("cap_fraction", 0.6))
        opts = _options(args)
        model = opts.get("-m") or opts.get("--modelFile")
        if model and not model.startswith("/"):
            model = str(PurePosixPath(cwd) / model)
        if not model or self.read_file(model) is None:
            what = (
                "error: failed to load model" if name == "llama-bench" else "Read model file failed"
            )
            return "", f"{what} '{model}'\n", 1, {}
        model_kb = self.path(model).stat().st_size // 1024
        mem_kb = int(model_kb + MODEL_RUNTIME_MB * 1024)
        t0 = self.t
        trace = {"die": [self.die], "state": [self.gov_state]}
        self.idle(self.load_s)  # the start window: loading the model, the cores parked
        tc, busy0 = self.t, self.busy_s
        trace = {"die": [], "state": []} if not self.load_s else trace
        if name == "llama-bench":
            out = self._llama_bench(opts, model, trace, speed)
        else:
            out = self._mslite(opts, model, trace)
        self.busy_s += self.t - tc
        real_load = REAL_LOAD_S if self.load_s else 0.0
        self.active = {
            "real_t0": time.monotonic(),
            "real_load_s": real_load,
            "loading": bool(real_load),
            "busy0": busy0,
            "t0": t0,
            "tc": tc,
            "t1": self.t,
            "pid": pid,
            "mem_kb": mem_kb,
            "name": name,
            "run": k,
            "reads": 0,
            **trace,
        }
        then = {"sleep_s": real_load + REAL_RUN_S, "run": k}
        if self.faults.get("hang_on_run") == k:
            then = {"hang": True, "child_pid_file": str(self.dir / "hang_child.pid")}
        if self.faults.get("vanish_on_run") == k:
            self.gone = True
            self.log.append(f"device vanished during run {k}")
            then = {"sleep_s": REAL_RUN_S / 2, "vanish": True, "run": k}
            out = out[: len(out) // 3]
        return out, "", 0, then

    def _run_trace(self, trace, units, rate):
        seconds, part = self.work(units, rate)
        trace["die"] += part["die"]
        trace["state"] += part["state"]
        return seconds

    def _llama_bench(self, opts, model, trace, speed: float = 1.0) -> str:
        p, n, r = int(opts.get("-p", 512)), int(opts.get("-n", 128)), int(opts.get("-r", 5))
        rows = []
        common = {
            "build_commit": "fake0c1",
            "build_number": 1,
            "cpu_info": "fake phone (Kirin-class)",
            "model_filename": model,
            "model_type": "llama 1B Q4_0",
            "n_threads": 4,
            "n_batch": 2048,
            "type_k": "f16",
            "type_v": "f16",
            "n_gpu_layers": 0,
        }
        for n_prompt, n_gen in ((p, 0), (0, n)):
            if not (n_prompt or n_gen):
                continue
            rate = (self.prefill_tps if n_prompt else self.decode_tps) * speed
            units = n_prompt or n_gen
            ns = [int(self._run_trace(trace, units, rate) * 1e9) for _ in range(r)]
            ts = [units * 1e9 / x for x in ns]
            rows.append(
                dict(
                    common,
                    n_prompt=n_prompt,
                    n_gen=n_gen,
                    avg_ns=int(np.mean(ns)),
                    stddev_ns=int(np.std(ns)),
                    avg_ts=float(np.mean(ts)),
                    stddev_ts=float(np.std(ts)),
                    samples_ns=ns,
                    samples_ts=ts,
                )
            )
        return json.dumps(rows, indent=2) + "\n"

    def _mslite(self, opts, model, trace) -> str:
        loops = int(opts.get("--loopCount", 10))
        ms = [self._run_trace(trace, 128, self.prefill_tps) * 1e3 for _ in range(loops)]
        return (
            "ModelPath = " + model + "\nModelType = MindIR\nInDataPath = \nConfigFilePath = \n"
            "NumThreads = 4\nLoopCount = " + str(loops) + "\nstart unified benchmark run\n"
            "PrepareTime = 41.337 ms\nRunning warm up loops...\nRunning benchmark loops...\n"
            f"Model = {PurePosixPath(model).name}, NumThreads = 4, MinRunTime = {min(ms):f} ms, "
            f"MaxRuntime = {max(ms):f} ms, AvgRunTime = {np.mean(ms):f} ms\n"
            f"Run Benchmark {PurePosixPath(model).name} Success.\n"
        )

    def hidumper_mem(self, pid: str) -> tuple[str, int]:
        """`hidumper --mem PID` in memory_info.cpp's layout (device_parsers.py names it)."""
        a = self._window()
        if a is None or not pid.isdigit() or a[1]["pid"] != int(pid):
            return "", 0
        kb = a[1]["mem_kb"]
        rows = [
            ("native heap", kb - 9000, 0, 120, 0, kb - 9000, 0, 0, kb - 7000, kb - 8000, 1000),
            ("AnonPage other", 4200, 0, 300, 0, 4200, 0, 0, 0, 0, 0),
            ("stack", 300, 0, 0, 0, 300, 0, 0, 0, 0, 0),
            (".so", 4500, 3800, 0, 200, 500, 0, 0, 0, 0, 0),
        ]
        title = max(len(r[0]) for r in rows)
        head1 = [
            "Pss",
            "Shared",
            "Shared",
            "Private",
            "Private",
            "Swap",
            "SwapPss",
            "Heap",
            "Heap",
            "Heap",
        ]
        head2 = [
            "Total",
            "Clean",
            "Dirty",
            "Clean",
            "Dirty",
            "Total",
            "Total",
            "Size",
            "Alloc",
            "Free",
        ]
        lines = [
            " " * title + " " + "".join(f"{h:>14} " for h in head1),
            " " * title + " " + "".join(f"{h:>14} " for h in head2),
            " " * title + " " + "".join(f"{'( kB )':>14} " for _ in head1),
            " " * title + "".join("-" * 15 for _ in head1),
        ]
        for r in rows:
            lines.append(f"{r[0]:>{title}} " + "".join(f"{v:>14} " for v in r[1:]))
        total = [sum(r[i] for r in rows) for i in range(1, 8)] + [
            rows[0][8],
            rows[0][9],
            rows[0][10],
        ]
        lines.append("-" * (title + 1) + "-" * 15 * 9 + "-" * 14)
        lines.append(f"{'Total':>{title}} " + "".join(f"{v:>14} " for v in total))
        lines += [
            "",
            "Purgeable:",
            f"{'PurgSum:':>16}0 kB",
            f"{'PurgPin:':>16}0 kB",
            "",
            "DMA:",
            f"{'Dma:':>16}0 kB",
        ]
        return "\n".join(lines) + "\n", 0


def _options(args: list[str]) -> dict[str, str]:
    out, i = {}, 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and "=" in a:
            k, v = a.split("=", 1)
            out[k] = v
        elif a.startswith("-") and i + 1 < len(args):
            out[a] = args[i + 1]
            i += 1
        i += 1
    return out


class FakeShell:
    """Just enough of a POSIX shell for harmony-ref's session scripts (module docstring)."""

    def __init__(self, phone: Phone):
        self.phone = phone
        self.then: dict = {}

    def run(self, script: str, cwd: str = "/", pid: int | None = None) -> tuple[str, str, int]:
        self.cwd, self.out, self.err, self.rc = cwd, [], [], 0
        self.pid = pid or self.phone.next_pid
        self.phone.next_pid += 1
        for line in script.split("\n"):
            for chain in _split(line, ";"):
                rc = 0
                for i, simple in enumerate(_split(chain, "&&")):
                    if i and rc != 0:
                        break
                    rc = self.simple(simple)
                    self.rc = rc
                    if (
                        self.then.get("exec_done")
                        or self.then.get("vanish")
                        or self.then.get("hang")
                    ):
                        break
                if self.then.get("vanish") or self.then.get("hang"):
                    return "".join(self.out), "".join(self.err), self.rc
        return "".join(self.out), "".join(self.err), self.rc

    def expand(self, text: str) -> list[tuple[str, bool]]:
        """Words of a simple command: (word, was it an unquoted operator)."""
        words, cur, i, has = [], [], 0, False
        while i < len(text):
            ch = text[i]
            if ch == "'":
                j = text.index("'", i + 1)
                cur.append(text[i + 1 : j])
                i, has = j + 1, True
            elif ch == '"':
                j = text.index('"', i + 1)
                cur.append(self._vars(text[i + 1 : j]))
                i, has = j + 1, True
            elif ch.isspace():
                if cur or has:
                    words.append(("".join(cur), False))
                cur, has = [], False
                i += 1
            elif text.startswith("2>/dev/null", i) and not cur:
                words.append(("2>/dev/null", True))
                i += len("2>/dev/null")
            elif ch == ">" and not cur:
                words.append((">", True))
                i += 1
            elif text.startswith("$(", i):
                j = text.index(")", i)
                inner = [w for w in text[i + 2 : j].split() if w != "2>/dev/null"]
                val = ""
                if inner[:1] == ["cat"] and len(inner) == 2:
                    val = (self.phone.read_file(self._abs(inner[1])) or "").strip()
                cur.append(val)
                i, has = j + 1, True
            elif text.startswith("$$", i):
                cur.append(str(self.pid))
                i, has = i + 2, True
            elif text.startswith("$?", i):
                cur.append(str(self.rc))
                i, has = i + 2, True
            else:
                cur.append(ch)
                i += 1
        if cur or has:
            words.append(("".join(cur), False))
        return words

    def _vars(self, s: str) -> str:
        return s.replace("$$", str(self.pid)).replace("$?", str(self.rc))

    def _abs(self, path: str) -> str:
        return path if path.startswith("/") else str(PurePosixPath(self.cwd) / path)

    def simple(self, text: str) -> int:
        words = self.expand(text.strip())
        if not words:
            return 0
        argv, redirect = [], None
        it = iter(words)
        for w, op in it:
            if op and w == ">":
                redirect = next(it)[0]
            elif op and w == "2>/dev/null":
                continue
            else:
                argv.append(w)
        out_mark = len(self.out)
        rc = self.command(argv)
        if redirect is not None:
            text_out = "".join(self.out[out_mark:])
            del self.out[out_mark:]
            p = self.phone.path(self._abs(redirect))
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text_out)
        return rc

    def command(self, argv: list[str]) -> int:
        ph, name, args = self.phone, argv[0], argv[1:]
        ph.log.append(" ".join(argv))
        if name != "sleep" and ph._window() is None:
            ph.idle(COMMAND_S)
        if name == "echo":
            self.out.append(" ".join(args) + "\n")
        elif name == "cd":
            if not ph.path(self._abs(args[0])).is_dir():
                self.err.append(f"sh: cd: {args[0]}: No such file or directory\n")
                return 2
            self.cwd = self._abs(args[0])
        elif name == "mkdir":
            for a in args:
                if a != "-p":
                    ph.path(self._abs(a)).mkdir(parents=True, exist_ok=True)
        elif name == "rm":
            for a in args:
                if not a.startswith("-"):
                    p = ph.path(self._abs(a))
                    if p.is_file():
                        p.unlink()
        elif name == "mv":
            src, dst = [a for a in args if not a.startswith("-")]
            ph.path(self._abs(src)).replace(ph.path(self._abs(dst)))
        elif name == "chmod":
            ph.path(self._abs(args[-1])).chmod(0o755)
        elif name == "cat":
            rc = 0
            for a in args:
                globbed = [p for p in (ODPM_PATH,) if "*" in a and fnmatch.fnmatch(p, a)]
                text = ph.read_file(globbed[0] if globbed else self._abs(a))
                if text is None:
                    self.err.append(f"cat: {a}: No such file or directory\n")
                    rc = 1
                else:
                    self.out.append(text if text.endswith("\n") else text + "\n")
            return rc
        elif name == "grep":
            flags = [a for a in args if a.startswith("-")]
            rest = [a for a in args if not a.startswith("-")]
            pattern, files = rest[0], rest[1:]
            found = False
            for f in files:
                text = ph.read_file(self._abs(f))
                if text is None:
                    if "-s" not in "".join(flags):
                        self.err.append(f"grep: {f}: No such file or directory\n")
                    continue
                for line in text.splitlines():
                    if line and re.search(pattern, line):
                        self.out.append(f"{f}:{line}\n" if "H" in "".join(flags) else line + "\n")
                        found = True
            return 0 if found else 1
        elif name == "sha256sum":
            p = ph.path(self._abs(args[0]))
            if not p.is_file():
                self.err.append(f"sha256sum: {args[0]}: No such file or directory\n")
                return 1
            self.out.append(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {args[0]}\n")
        elif name == "sleep":
            if ph._window() is None:
                ph.idle(float(args[0]))
        elif name == "kill":
            return 0
        elif name == "test" and len(args) == 2 and args[0] in ("-f", "-d"):
            path = self._abs(args[1])
            if path.startswith("/proc/"):
                return 0 if ph.read_file(path) is not None else 1
            p = ph.path(path)
            return 0 if (p.is_file() if args[0] == "-f" else p.is_dir()) else 1
        elif name == "sh" and args[:1] == ["-c"]:
            sub = FakeShell(ph)
            out, err, rc = sub.run(args[1], self.cwd)
            self.out.append(out)
            self.err.append(err)
            self.then.update(sub.then)
            self.then.pop("exec_done", None)
            return rc
        elif name == "exec":
            rc = self.command(args)
            self.then["exec_done"] = True
            return rc
        elif name == "param" and ph.kind == "hdc":
            props = ph.cfg.get("props", {})
            if len(args) >= 2:
                if args[1] in props:
                    self.out.append(f"{props[args[1]]} \n")
                else:
                    self.out.append(f'Get parameter "{args[1]}" fail\n')
            else:
                self.out += [f"    {k} = {v}\n" for k, v in props.items()]
        elif name == "getprop" and ph.kind == "adb":
            props = ph.cfg.get("props", {})
            if args:
                self.out.append(props.get(args[0], "") + "\n")
            else:
                self.out += [f"[{k}]: [{v}]\n" for k, v in sorted(props.items())]
        elif name == "dumpsys" and ph.kind == "adb" and args == ["thermalservice"]:
            self.out.append(ph.thermalservice())
        elif name == "hidumper" and ph.kind == "hdc" and args[:1] == ["--mem"]:
            text, rc = ph.hidumper_mem(args[1] if len(args) > 1 else "")
            self.out.append(text)
            return rc
        elif PurePosixPath(name).name in ("llama-bench", "benchmark"):
            p = ph.path(self._abs(name))
            if not p.is_file():
                self.err.append(f"sh: {name}: not found\n")
                return 127
            speed = re.search(r"^speed=([0-9.]+)$", p.read_text(errors="replace"), re.M)
            out, err, rc, then = ph.benchmark(
                PurePosixPath(name).name,
                args,
                self.pid,
                self.cwd,
                float(speed.group(1)) if speed else 1.0,
            )
            self.out.append(out)
            self.err.append(err)
            self.then.update(then)
            return rc
        else:
            self.err.append(f"sh: {name}: inaccessible or not found\n")
            return 127
        return 0


def _split(text: str, sep: str) -> list[str]:
    """Split at `sep` outside quotes and $( )."""
    parts, cur, quote, depth, i = [], [], None, 0, 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif text.startswith("$(", i):
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            parts.append("".join(cur))
            cur = []
            i += len(sep)
            continue
        cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


# --- the host tools ----------------------------------------------------------------------------


def handle(phone: Phone, req: dict) -> dict:
    tool, argv = req["tool"], req["argv"]
    if argv[:1] == ["_reload"]:
        phone.load()
        return {"out": "reloaded\n"}
    if req.get("op") in ("run_status", "run_done"):  # a benchmark's own client, in real time
        a = phone.active
        if a is None or a["run"] != req["run"]:
            return {"reads": -1}
        if req["op"] == "run_done":
            phone.active = None
        return {"reads": a["reads"]}
    if phone.active is not None and argv[2:3] == ["shell"] and "sh -c" not in " ".join(argv[3:]):
        w = phone._window()
        if w is not None and not w[1]["loading"]:
            phone.active["reads"] += 1  # telemetry read while a benchmark computes
    if tool == "hdc":
        return hdc(phone, argv, req)
    return adb(phone, argv, req)


def _targets(phone: Phone) -> list[str]:
    return [] if phone.gone or phone.kind != "hdc" else [phone.serial]


def hdc(phone: Phone, argv: list[str], req: dict) -> dict:
    if argv[:2] == ["list", "targets"]:
        t = _targets(phone)
        if "-v" in argv:
            return {"out": "".join(f"{s}\t\tUSB\tConnected\tlocalhost\n" for s in t) or "[Empty]\n"}
        return {"out": "".join(f"{s}\n" for s in t) or "[Empty]\n"}
    if argv[:1] == ["kill"]:
        return {"out": "Kill server finish\n", "stop": True}
    serial = argv[1] if argv[:1] == ["-t"] else None
    rest = argv[2:] if serial else argv
    if serial not in _targets(phone):
        return {"out": "[Fail][E001005] Device not found or connected\n"}
    if rest[:1] == ["shell"]:
        sh = FakeShell(phone)
        out, err, _rc = sh.run(" ".join(rest[1:]))
        if sh.then.get("vanish"):
            out += "\n[Fail][E001005] Device not found or connected\n"
        return {"out": out, "err": err, "rc": 0, "then": sh.then}
    if rest[:2] == ["file", "send"]:
        data = _pushed(phone, req, rest[3])
        return {
            "out": f"FileTransfer finish, Size:{len(data)}, File count = 1, time:3ms "
            f"rate:{len(data) / 3:.2f}kB/s\n"
        }
    return {"out": f"[Fail]Unknown command: {' '.join(rest)}\n"}


def adb(phone: Phone, argv: list[str], req: dict) -> dict:
    if argv[:1] == ["devices"]:
        lines = ["List of devices attached\n"]
        if not phone.gone and phone.kind == "adb":
            if "-l" in argv:
                lines.append(
                    f"{phone.serial:<22} device usb:1-1 product:fake model:"
                    f"{phone.cfg.get('props', {}).get('ro.product.model', 'Fake')}"
                    " device:fake transport_id:1\n"
                )
            else:
                lines.append(f"{phone.serial}\tdevice\n")
        return {"out": "".join(lines) + "\n"}
    if argv[:1] == ["kill-server"]:
        return {"out": "", "stop": True}
    serial = argv[1] if argv[:1] == ["-s"] else None
    rest = argv[2:] if serial else argv
    if phone.gone or phone.kind != "adb" or serial != phone.serial:
        return {"err": f"adb: device '{serial}' not found\n", "rc": 1}
    if rest[:1] == ["shell"]:
        sh = FakeShell(phone)
        out, err, rc = sh.run(" ".join(rest[1:]))
        if sh.then.get("vanish"):
            return {"out": out, "err": "", "rc": 1, "then": sh.then}
        return {"out": out, "err": err, "rc": rc, "then": sh.then}
    if rest[:1] == ["push"]:
        data = _pushed(phone, req, rest[2])
        return {
            "out": f"{rest[1]}: 1 file pushed, 0 skipped. 12.3 MB/s ({len(data)} bytes in 0.001s)\n"
        }
    return {"err": f"adb: unknown command {rest[:1]}\n", "rc": 1}


def _pushed(phone: Phone, req: dict, remote: str) -> bytes:
    data = base64.b64decode(req.get("data", ""))
    phone.pushes += 1
    if phone.faults.get("truncate_pushes", 0) > 0:
        phone.faults["truncate_pushes"] -= 1
        data = data[: len(data) // 2]
        phone.log.append(f"push to {remote} truncated")
    p = phone.path(remote)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    phone.idle(COMMAND_S)
    return data


def serve(state_dir: Path) -> None:
    phone = Phone(state_dir)
    sock_path = state_dir / "server.sock"
    if sock_path.exists():
        sock_path.unlink()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(sock_path))
    srv.listen(16)
    srv.settimeout(IDLE_TIMEOUT_S)
    (state_dir / "server.pid").write_text(str(os.getpid()))
    phone.save()
    while True:
        try:
            conn, _ = srv.accept()
        except TimeoutError:
            break
        with conn:
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
            if not data:
                continue
            try:
                reply = handle(phone, json.loads(data))
            except Exception as e:  # noqa: BLE001 - a fake phone's bug must be visible, not a hang
                reply = {"err": f"fake phone error: {type(e).__name__}: {e}\n", "rc": 70}
            phone.save()
            try:
                conn.sendall(json.dumps(reply).encode() + b"\n")
            except OSError:
                pass
            if reply.get("stop"):
                break
    srv.close()
    sock_path.unlink(missing_ok=True)


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
