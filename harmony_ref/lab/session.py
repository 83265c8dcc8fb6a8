"""A device session: everything a phone benchmark needs around the one command that measures.

    spec = load_session("phone.toml")                       # lab/session_spec.py
    s = DeviceSession(spec)
    result = s.run(command, parse=lambda text: parse("llama-bench", text))
    result.metrics()        # a SessionResult (lab/session_result.py): valid repeats + telemetry
    result.to_record()      # identity, pushes, per-repeat telemetry, notes: the record's block

In order:
1. the device must be attached (`hdc list targets` / `adb devices -l`), its identity is read
   (`param get` / `getprop`), the work directory made;
2. each [[push]] file is compared by SHA-256 with what the device holds and skipped when equal;
   otherwise it goes to a temporary name, its SHA-256 is checked on the device, and only then is
   it renamed into place: a truncated or corrupted push is refused (the temporary file removed)
   and the device keeps its previous file;
3. telemetry is probed once (which files this device lacks is said, not guessed);
4. warm-up runs (not measured), then for each repeat: cooldown until the watched zone is at or
   below the threshold (device-side `sleep` between checks, device uptime as the clock; a zone
   that never cools within max_wait_s is one line of error), a sample before, samples every
   poll_interval_s while the benchmark runs, one after, and the verdict (telemetry.py);
   With [power] (energy.py) the idle power is read first (the battery's current and voltage,
   or Pixel's ODPM rail counters), after a `stop_charging` command when the session gives one
   (its `restore_charging` runs at the end, also when the run fails);
5. the benchmark's metrics are the median over the valid (unthrottled) repeats, their samples
   pooled; throttled repeats stay in the record with their telemetry and reasons, and count
   only with `keep_throttled`. Too few valid repeats (fewer than min_valid_repeats, default all)
   is said in the record, and the gate refuses such a measurement.

The benchmark runs as `cd <work_dir> && sh -c 'echo $$ > .harmony-ref-bench.pid; exec <cmd>'`,
so the pid file names the benchmark process itself (memory telemetry reads it). A timeout kills
the local process group and, on a phone, the benchmark by that pid. A device that disappears at
any step is DeviceGone (transport.py): nothing is returned, so nothing can be recorded.
"""

from __future__ import annotations

import hashlib
import secrets
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from harmony_ref.lab.errors import BackendError
from harmony_ref.lab.process import last_line, needs_shell, tail
from harmony_ref.lab.session_result import Repeat, SessionResult
from harmony_ref.lab.session_spec import SessionSpec, replaced
from harmony_ref.lab.telemetry import (
    PID_FILE,
    Sample,
    Telemetry,
    Verdict,
    sample_table,
)
from harmony_ref.lab.transport import ShellResult, Transport, make_transport
from harmony_ref.metrics import Metrics


class CooldownTimeout(BackendError):
    """The watched zone did not cool to the threshold within the time limit."""


def session_values(spec: SessionSpec) -> dict[str, str]:
    """The placeholders a session adds to a command template."""
    return {"work_dir": spec.device.work_dir, "python": sys.executable}


class DeviceSession:
    """Runs benchmarks through a session (see the module docstring)."""

    def __init__(
        self,
        spec: SessionSpec,
        transport: Transport | None = None,
        progress: Callable[[str], None] | None = None,
    ):
        self.spec = spec
        d = spec.device
        self.transport = transport or make_transport(
            d.transport, d.serial, d.executable, d.command_timeout_s
        )
        self.telemetry = Telemetry(
            self.transport,
            spec.telemetry,
            spec.throttle,
            d.work_dir,
            spec.memory_source,
            spec.thermal_status_source,
            spec.power.enabled
            and spec.power.source == "battery"
            and bool(spec.telemetry.battery_dir),
        )
        self.say = progress or (lambda text: None)
        self.identity: dict = {}
        self.pushes: list[dict] = []
        self.notes: list[str] = []
        self._prepared = False
        self._odpm: list[str | None] = []  # the energy counters before and after the last run

    @property
    def work_dir(self) -> str:
        return self.spec.device.work_dir

    def remote(self, name: str) -> str:
        return f"{self.work_dir.rstrip('/')}/{name}"

    # --- preparing the device ------------------------------------------------------------------
    def prepare(self, extra: tuple[tuple[object, str, bool], ...] = ()) -> None:
        """Attach, identify, make the work directory, push (SHA-256 checked), probe telemetry.
        `extra`: more (local path, remote name, executable) files to push (check-runtime's
        corpus)."""
        t = self.transport
        if not self._prepared:
            t.check_attached()
            self.identity = t.identity()
            self._ok(
                t.shell(f"mkdir -p {shlex.quote(self.work_dir)}", what="mkdir -p work_dir"),
                "mkdir -p work_dir",
            )
        items = [(self.spec.local_path(i), i.remote, i.executable) for i in self.spec.push]
        if self._prepared:
            items = []
        for local, name, exe in list(items) + list(extra):
            self.pushes.append(self.push(local, name, exe))
        if not self._prepared:
            self.telemetry.probe()
            self.notes += self.telemetry.notes
            self._prepared = True

    def _ok(self, r: ShellResult, what: str) -> ShellResult:
        if r.returncode != 0:
            raise BackendError(
                f"{self.transport.label}: `{what}` failed (exit {r.returncode}): "
                f"{last_line(r.err or r.out)}",
                f"script: {r.script}\noutput:\n{tail(r.err) or tail(r.out)}",
            )
        return r

    def push(self, local, name: str, executable: bool = False) -> dict:
        """One file to the device by the rule of the module docstring; returns what happened."""
        local = Path(local)
        h = hashlib.sha256()
        with local.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        want = h.hexdigest()
        target = self.remote(name)
        entry = {
            "local": str(local),
            "remote": target,
            "bytes": local.stat().st_size,
            "sha256": want,
        }
        have = self.transport.sha256(target)
        if have == want:
            self.say(f"push {name}: skipped, the device holds the same SHA-256")
            return {**entry, "action": "skipped (same SHA-256 on the device)"}
        tmp = f"{target}.tmp-{secrets.token_hex(4)}"
        self.say(
            f"push {name}: {entry['bytes']:,} bytes"
            + (" (replacing a different file)" if have else "")
        )
        self.transport.push(local, tmp)
        got = self.transport.sha256(tmp)
        if got != want:
            self.transport.shell(f"rm -f {shlex.quote(tmp)}")
            kept = "keeps its previous file" if have else "has no such file"
            raise BackendError(
                f"push of {local.name} to {self.transport.label}"
                + (f" as {name}" if name != local.name else "")
                + " arrived "
                + ("incomplete" if got is None else f"with SHA-256 {got[:8]}..., not {want[:8]}...")
                + f" (truncated or corrupted); refused: the device {kept}",
                f"local: {local}\nremote: {target}",
            )
        mode = f" && chmod 755 {shlex.quote(target)}" if executable else ""
        self._ok(
            self.transport.shell(f"mv -f {shlex.quote(tmp)} {shlex.quote(target)}{mode}"),
            f"mv {tmp} {target}",
        )
        return {**entry, "action": "pushed" + (" (replaced a different file)" if have else "")}

    # --- cooling down --------------------------------------------------------------------------
    def cooldown(self) -> tuple[float, Sample | None]:
        """Wait until the watched zone is at or below the threshold: (seconds waited on the
        device's clock, the last reading, which is the next run's "before"). CooldownTimeout
        when it does not get there in max_wait_s."""
        c, tel = self.spec.cooldown, self.telemetry
        if not c.enabled or not tel.can_watch:
            return 0.0, None
        zone = self.spec.telemetry.watch_zone
        first = tel.read("before")
        t0 = first.t_s
        s = first
        while True:
            temp = tel.watched_c(s)
            if temp is None:
                self.notes.append(f"cooldown: zone {zone} gave no reading at t={s.t_s:.1f} s")
                return s.t_s - t0, s
            status = s.thermal_status
            hot_status = status is not None and status > self.spec.throttle.max_thermal_status
            if temp <= c.threshold_c and not hot_status:
                return s.t_s - t0, s
            waited = s.t_s - t0
            if waited >= c.max_wait_s:
                where = (
                    f"thermal zone {zone} of {self.transport.label} is at {temp:.1f} C after "
                    f"{waited:.0f} s, above the {c.threshold_c:g} C threshold"
                    if temp > c.threshold_c
                    else f"{self.transport.label}'s Android thermal status is {status} after "
                    f"{waited:.0f} s, above {self.spec.throttle.max_thermal_status}"
                )
                raise CooldownTimeout(
                    f"cooldown: {where} (cooldown.max_wait_s = {c.max_wait_s:g}): it never "
                    "cooled; no result recorded"
                )
            self.say(
                f"cooldown: zone {zone} at {temp:.1f} C"
                + (f", thermal status {status}" if hot_status else "")
                + f", waiting for {c.threshold_c:g} C ({waited:.0f} s so far)"
            )
            step = min(c.check_interval_s, max(c.max_wait_s - waited, 0.001))
            self.transport.shell(
                f"sleep {step:g}", timeout_s=step + self.spec.device.command_timeout_s, what="sleep"
            )
            s = tel.read("before")

    # --- one run -------------------------------------------------------------------------------
    def launch_script(self, command: str) -> str:
        exe = "" if needs_shell(command) else "exec "
        inner = f"echo $$ > {PID_FILE}; {exe}{command}"
        return f"cd {shlex.quote(self.work_dir)} && sh -c {shlex.quote(inner)}"

    def run_once(
        self, command: str, timeout_s: float | None = None, before: Sample | None = None
    ) -> tuple[ShellResult, list[Sample], Verdict, float | None, str]:
        """One benchmark run with telemetry: (result, samples, verdict, peak memory kB or None,
        where the memory came from); `before`: a reading just taken (cooldown's last), else one
        is read. BackendError on a timeout, DeviceGone when the device left; a non-zero exit is
        returned (the caller decides)."""
        tel, poll = self.telemetry, self.spec.telemetry.poll_interval_s
        timeout = timeout_s or self.spec.benchmark.timeout_s
        samples = [before or tel.read("before")]
        self._odpm = [self.odpm_read()] if self.odpm else []
        run = self.transport.start(self.launch_script(command), what="the benchmark")
        try:
            while not run.wait(poll):
                if run.elapsed_s > timeout:
                    err = run.timed_out(timeout)
                    self.transport.check_still_there(
                        f"after the benchmark hung for {timeout:g} s", self.launch_script(command)
                    )
                    self._kill_remote()
                    raise err
                samples.append(tel.read("during", with_memory=True))
        except BaseException:
            run.kill()  # a poll found the device gone (or we were interrupted): end the run too
            raise
        result = run.finish()
        if self.odpm:
            self._odpm.append(self.odpm_read())
        samples.append(tel.read("after"))
        mem = [s.mem_kb for s in samples if s.mem_kb is not None]
        sources = []
        peak = None
        if mem:
            peak = float(max(mem))
            sources.append(
                {"hidumper": "hidumper --mem Pss, sampled", "proc_status": "VmHWM, sampled"}.get(
                    tel.memory_source, tel.memory_source
                )
            )
        if self.transport.local and result.max_rss_kb:
            peak = max(peak or 0.0, float(result.max_rss_kb))
            sources.append("wait4 ru_maxrss")
        if peak is None and tel.memory_source != "none":
            source = "not read (the run ended before a sample found its process)"
        else:
            source = " and ".join(sources) or "none"
        return result, samples, tel.verdict(samples), peak, source

    def _kill_remote(self) -> None:
        if self.transport.local:
            return
        pid = shlex.quote(self.remote(PID_FILE))
        try:
            self.transport.shell(
                f"kill -9 $(cat {pid}) 2>/dev/null; rm -f {pid}",
                timeout_s=min(10.0, self.spec.device.command_timeout_s),
                what="kill of the hung benchmark",
            )
        except BackendError:
            pass  # the device may be gone too: the local group is dead either way

    def run_single(
        self, command: str, timeout_s: float | None = None
    ) -> tuple[ShellResult, Callable[[Metrics], SessionResult]]:
        """One cooled-down run with telemetry (an accuracy check needs no repeats): its result,
        and a function that makes the SessionResult once the caller has judged the output into
        metrics (one measured repeat; valid when not throttled)."""
        import dataclasses

        self.prepare()
        waited, before = self.cooldown()
        self.say(f"run: {command}")
        result, samples, verdict, peak, source = self.run_once(command, timeout_s, before)
        spec = replaced(
            self.spec,
            benchmark=dataclasses.replace(
                self.spec.benchmark, warmup_runs=0, repeats=1, min_valid_repeats=1
            ),
        )

        def finish(metrics: Metrics) -> SessionResult:
            rep = Repeat(
                1, "measured", metrics, samples, verdict, waited, result.wall_s, peak, source
            )
            return SessionResult(
                spec,
                self.transport.kind,
                self.transport.serial,
                self.identity,
                self.pushes,
                [rep],
                self.telemetry,
                command,
                list(self.notes),
            )

        return result, finish

    # --- energy --------------------------------------------------------------------------------
    @property
    def odpm(self) -> bool:
        return self.spec.power.enabled and self.spec.power.source == "odpm"

    def odpm_read(self) -> str | None:
        """`cat` of the ODPM energy counters (energy.py), or None where the device has none."""
        from harmony_ref.lab.energy import ODPM_FILES

        # exit status not read: an iio device without the file fails `cat` while others print
        r = self.transport.shell(f"cat {ODPM_FILES} 2>/dev/null", what="ODPM energy_value")
        return r.out if r.out.strip() else None

    def idle_power(self) -> dict:
        """The phone's idle power before the run (lab/energy.py): {} when the session reads
        no power, else idle_power_w and how (the current's sign, or the ODPM rails), or why
        there is none."""
        from harmony_ref.lab import energy
        from harmony_ref.lab.telemetry import POWER_FILES

        tel, p = self.telemetry, self.spec.power
        if self.odpm:
            span = p.idle_samples * p.idle_interval_s
            first = self.odpm_read()
            if first is None:
                return {"source": "odpm", "why": f"no ODPM energy counters ({energy.ODPM_FILES})"}
            self.transport.shell(
                f"sleep {span:g}", timeout_s=span + self.spec.device.command_timeout_s, what="sleep"
            )
            watts, why = energy.odpm_power_w(first, self.odpm_read())
            if watts is None:
                return {"source": "odpm", "why": why}
            self.say(f"idle power {watts:.3f} W (ODPM rails over {span:g} s)")
            return {"source": "odpm", "idle_power_w": round(watts, 6)}
        files = [f"{self.spec.telemetry.battery_dir}/{n}" for n in POWER_FILES]
        if not tel.power:
            return {}
        if any(f in tel.unreadable for f in files):
            return {"why": "current_now / voltage_now not readable on this device"}
        idle = []
        for i in range(p.idle_samples):
            if i:
                self.transport.shell(
                    f"sleep {p.idle_interval_s:g}",
                    timeout_s=p.idle_interval_s + self.spec.device.command_timeout_s,
                    what="sleep",
                )
            idle.append(tel.read("idle"))
        sign, how = energy.discharge_sign(p.current_sign, idle)
        watts, why = energy.idle_power_w(idle, sign)
        out = {"current_sign": how, "idle_samples": sample_table(idle)}
        if watts is None:
            return {**out, "why": why}
        self.say(f"idle power {watts:.3f} W ({len(idle)} reads)")
        return {**out, "idle_power_w": round(watts, 6)}

    def run_power(self, samples: list[Sample], metrics: Metrics, power: dict) -> dict:
        """One run's average power and energy per token, or why not ({} without power)."""
        from harmony_ref.lab import energy

        if "idle_power_w" not in power:
            return {}
        if self.odpm:
            avg, why = energy.odpm_power_w(*self._odpm)
        else:
            sign = 1 if power["current_sign"].startswith("positive") else -1
            avg, why = energy.run_power_w(samples, sign)
        if avg is None:
            return {"energy_note": why}
        out = {"avg_power_w": round(avg, 6)}
        tps = metrics.value("decode_tokens_per_s") if "decode_tokens_per_s" in metrics else None
        if not tps:
            return {**out, "energy_note": "the benchmark reports no decode_tokens_per_s"}
        mj = energy.energy_per_token_mj(avg, power["idle_power_w"], tps)
        return {**out, "energy_per_token_mj": round(mj, 6)}

    # --- the whole session ---------------------------------------------------------------------
    def run(self, command: str, parse: Callable[[str], Metrics]) -> SessionResult:
        """Prepare, warm up, cool down and repeat (module docstring); `parse(text)` turns one
        run's output into metrics (raising on garbage). With [power] stop_charging, the phone's
        charging is stopped before the idle reads and restore_charging run after, also when the
        run fails (its own failure then a note, or, when the run failed, left unsaid)."""
        self.prepare()
        p = self.spec.power
        if not p.stop_charging:
            return self._run(command, parse)
        self.say(f"power: stop charging: {p.stop_charging}")
        self._ok(
            self.transport.shell(p.stop_charging, what="[power] stop_charging"),
            "[power] stop_charging",
        )
        try:
            out = self._run(command, parse)
        except BaseException:
            self._restore_charging()
            raise
        failed = self._restore_charging()
        out.power["charge_control"] = "stopped before the idle reads, " + (
            f"not restored: {failed}" if failed else "restored after the run"
        )
        if failed:
            out.notes.append(f"charging not restored: {failed}")
        return out

    def _restore_charging(self) -> str:
        """Run [power] restore_charging: "" when it ran, else why not (one line)."""
        self.say(f"power: restore charging: {self.spec.power.restore_charging}")
        try:
            self._ok(
                self.transport.shell(self.spec.power.restore_charging, what="[power] restore"),
                "[power] restore_charging",
            )
        except BackendError as e:  # the device may be gone too
            return str(e).splitlines()[0]
        return ""

    def _run(self, command: str, parse: Callable[[str], Metrics]) -> SessionResult:
        b = self.spec.benchmark
        power = self.idle_power()
        repeats: list[Repeat] = []
        for kind, n, cool in (("warmup", b.warmup_runs, False), ("measured", b.repeats, True)):
            for i in range(1, n + 1):
                waited, before = self.cooldown() if cool else (0.0, None)
                self.say(f"{kind} {i}/{n}: {command}")
                result, samples, verdict, peak, source = self.run_once(command, before=before)
                if result.returncode != 0:
                    raise BackendError(
                        f"{self.transport.label}: the benchmark exited with code "
                        f"{result.returncode} ({kind} {i}); no result recorded (last stderr: "
                        f"{last_line(result.err, 60)})",
                        f"command: {command}\nlast stderr:\n{tail(result.err) or '(empty)'}",
                    )
                metrics = parse(result.text)
                repeats.append(
                    Repeat(
                        i,
                        kind,
                        metrics,
                        samples,
                        verdict,
                        waited,
                        result.wall_s,
                        peak,
                        source,
                        self.run_power(samples, metrics, power),
                    )
                )
                if verdict.throttled:
                    more = len(verdict.reasons) - 1
                    self.say(
                        f"{kind} {i}: THROTTLED ({verdict.reasons[0]}"
                        + (f"; {more} more" if more else "")
                        + ")"
                    )
        out = SessionResult(
            self.spec,
            self.transport.kind,
            self.transport.serial,
            self.identity,
            self.pushes,
            repeats,
            self.telemetry,
            command,
            list(self.notes),
            power,
        )
        if power.get("why"):
            out.notes.append(f"no energy metric: {power['why']}")
        else:
            whys = sorted({r.power["energy_note"] for r in out.valid if "energy_note" in r.power})
            out.notes += [f"no energy metric: {w}" for w in whys]
        if not out.enough_valid:
            out.notes.append(
                f"only {len(out.valid)} of {b.repeats} repeats ran unthrottled; "
                f"the session asks for {b.required_valid}: the gate will refuse "
                "this measurement"
            )
        return out
