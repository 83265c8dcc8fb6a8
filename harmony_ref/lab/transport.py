"""Transports: how harmony-ref reaches the machine that runs a benchmark.

    t = make_transport("hdc", serial="23E0223C13000649")   # or "adb", or "local" (this host)
    t.check_attached()                                     # DeviceGone when it is not there
    r = t.shell("cat /proc/uptime", timeout_s=30)          # ShellResult: the remote exit status
    run = t.start("cd /data/local/tmp && exec ./benchmark")   # poll telemetry while it runs
    while not run.wait(1.0): ...
    r = run.finish()
    t.push(Path("model.gguf"), "/data/local/tmp/model.gguf")
    t.identity()        # {"device_model": ..., "soc": ..., "os_build": ...}

- `local`: this machine; a script runs under `/bin/sh -c`, its exit status is the real one.
- `hdc` (HarmonyOS): `hdc list targets`, `hdc -t SERIAL shell SCRIPT`, `hdc -t SERIAL file send`.
  The hdc client exits 0 whatever happened (developtools_hdc src/host/main.cpp) and does not pass
  the remote exit status on, so every script ends in `; echo __HARMONY_REF_RC=$?` and the
  status is read from that line; its failures are `[Fail]...` lines (device_parsers.py).
- `adb` (Android): `adb devices -l`, `adb -s SERIAL shell SCRIPT`, `adb -s SERIAL push`; the
  same status line (older devices' adb shell drops the exit status too).

Every call runs with a timeout that kills the whole process group (lab/process.py). A remote
call that ends without its status line, or with the tool saying the device is not there, is
followed by a look at the attached-device list: a device no longer attached is `DeviceGone`
naming the serial (the command turns it into exit 2, nothing recorded), never a hang; one still
attached is a BackendError with what the tool printed.

Identity: HarmonyOS `param get` (all parameters, one call): const.product.model, .brand,
.manufacturer, const.product.software.version (the OS build), const.ohos.apiversion, and the SoC
from the first of const.product.soc / ohos.boot.hardware present (which one a vendor fills
varies: recorded as found). Android `getprop`: ro.product.model, .manufacturer, ro.soc.model
(Android 12+; else ro.board.platform, ro.hardware), ro.build.display.id,
ro.build.version.release, ro.build.fingerprint. Local: the CPU model, kernel and OS.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from harmony_ref.lab._parse import ParseError
from harmony_ref.lab.device_parsers import (
    AttachedDevice,
    adb_failure,
    hdc_failure,
    parse_adb_devices,
    parse_getprop,
    parse_hdc_targets,
    parse_param_get,
)
from harmony_ref.lab.errors import BackendError
from harmony_ref.lab.process import (
    CommandOutput,
    Running,
    brief,
    last_line,
    run_process,
    start_process,
    tail,
)

RC_MARK = "__HARMONY_REF_RC="
_RC_LINE = re.compile(r"^" + re.escape(RC_MARK) + r"(-?\d+)\s*$", re.M)
DEFAULT_TIMEOUT_S = 60.0


class DeviceGone(BackendError):
    """The device left mid-session (unplugged, rebooted, offline): no result can be recorded."""


@dataclass(frozen=True)
class ShellResult:
    script: str
    returncode: int  # the remote script's own exit status
    out: str
    err: str
    wall_s: float
    max_rss_kb: int | None = None  # local only: the benchmark's peak RSS (wait4)

    @property
    def text(self) -> str:
        return self.out + "\n" + self.err


def _quote(path: str) -> str:
    return shlex.quote(path)


class RemoteRun:
    """A started script: `wait(s)` polls; `finish()` returns its ShellResult (or raises)."""

    def __init__(self, transport: Transport, script: str, running: Running, what: str = ""):
        self.transport, self.script, self._running = transport, script, running
        self.what = what or brief(script)

    def wait(self, timeout_s: float) -> bool:
        return self._running.wait(timeout_s)

    @property
    def elapsed_s(self) -> float:
        return self._running.elapsed_s

    def kill(self) -> None:
        self._running.kill()

    def timed_out(self, timeout_s: float) -> BackendError:
        return self._running.timed_out(timeout_s)

    def finish(self) -> ShellResult:
        return self.transport._finish(self.script, self._running.result(), f"while {self.what} ran")


class Transport:
    """What every transport does (the module docstring); subclasses say how."""

    kind = "?"
    local = False  # this machine (LocalTransport)

    def __init__(
        self, serial: str = "", executable: str = "", timeout_s: float = DEFAULT_TIMEOUT_S
    ):
        self.serial = serial
        self.executable = executable or self.kind
        self.timeout_s = float(timeout_s)

    @property
    def label(self) -> str:
        return f"{self.kind} {self.serial}".strip()

    # --- what subclasses provide ----------------------------------------------------------------
    def shell_argv(self, script: str) -> list[str]:
        raise NotImplementedError

    def list_devices(self, timeout_s: float | None = None) -> list[AttachedDevice]:
        raise NotImplementedError

    def push(self, local: Path, remote: str, timeout_s: float | None = None) -> None:
        raise NotImplementedError

    def identity(self) -> dict[str, str]:
        raise NotImplementedError

    def _tool_failure(self, text: str) -> str | None:
        return None

    # --- shared ---------------------------------------------------------------------------------
    def _check_executable(self, argv: list[str]) -> None:
        if not shutil.which(argv[0]) and not Path(argv[0]).is_file():
            raise BackendError(
                f"{self.kind}: executable {argv[0]!r} not found (install it or "
                "set device.executable in the session file)"
            )

    def _host(self, argv: list[str], timeout_s: float | None, label: str) -> CommandOutput:
        self._check_executable(argv)
        return run_process(argv, timeout_s or self.timeout_s, label=label)

    def _wrap(self, script: str) -> str:
        """The script as sent: remote ones report their exit status on a last line."""
        return f"{script}\necho {RC_MARK}$?"

    def shell(self, script: str, timeout_s: float | None = None, what: str = "") -> ShellResult:
        """Run `script` on the device; `what` names it in errors (default: the script, brief;
        the whole script is in the error's detail)."""
        run = self.start(script, what)
        timeout = timeout_s or self.timeout_s
        if not run.wait(timeout):
            err = run.timed_out(timeout)
            self.check_still_there(f"while {run.what} hung", script)
            raise err
        return self._finish(script, run._running.result(), f"during {run.what}")

    def check_still_there(self, when: str, script: str = "") -> None:
        """After a remote call hung: DeviceGone if the device has left (a vanished phone often
        hangs the tool instead of failing it), else nothing."""
        try:
            d = self.attached(min(self.timeout_s, 30.0))
        except BackendError:
            d = None
        if d is None or not d.usable:
            raise DeviceGone(
                f"{self.kind} device {self.serial} is no longer attached ({when}); "
                "no result recorded",
                f"script: {script}" if script else "",
            )

    def start(self, script: str, what: str = "") -> RemoteRun:
        argv = self.shell_argv(self._wrap(script))
        self._check_executable(argv)
        what = what or brief(script)
        return RemoteRun(self, script, start_process(argv, f"{self.label} shell {what}"), what)

    def _finish(self, script: str, done: CommandOutput, when: str) -> ShellResult:
        m = None
        for m in _RC_LINE.finditer(done.out):  # noqa: B007 - the last match is the one kept
            pass
        if m is None:
            self._gone_or_error(done, when, script)
        out = done.out[: m.start()] + done.out[m.end() :].lstrip("\n")
        return ShellResult(script, int(m.group(1)), out, done.err, done.wall_s, done.max_rss_kb)

    def attached(self, timeout_s: float | None = None) -> AttachedDevice | None:
        for d in self.list_devices(timeout_s):
            if d.serial == self.serial:
                return d
        return None

    def check_attached(self) -> AttachedDevice:
        """The device's entry in the attached list; DeviceGone when it is absent or not usable."""
        d = self.attached()
        if d is None or not d.usable:
            seen = brief(
                ", ".join(f"{x.serial} ({x.state})" for x in self.list_devices()) or "none", 60
            )
            state = "not attached" if d is None else f"{d.state}, not usable"
            raise DeviceGone(
                f"{self.kind} device {self.serial} is {state} (attached: {seen}); "
                "no result recorded"
            )
        return d

    def _gone_or_error(self, done: CommandOutput, when: str, script: str = "") -> None:
        said = self._tool_failure(done.text) or ""
        try:
            d = self.attached(min(self.timeout_s, 30.0))
        except BackendError as e:  # the tool itself is wedged: the device is not reachable
            d, said = None, said or str(e).splitlines()[0]
        if d is None or not d.usable:
            what = "disappeared" if d is None else f"went {d.state}"
            raise DeviceGone(
                f"{self.kind} device {self.serial} {what} {when}"
                + (f" ({brief(said, 80)})" if said else "")
                + "; no result recorded",
                f"script: {script}" if script else "",
            )
        raise BackendError(
            f"{self.label}: the shell ended without the script's exit status "
            f"{when} (client exit {done.returncode}){': ' + brief(said, 60) if said else ''}; "
            f"last stderr: {last_line(done.err, 60)}",
            (f"script: {script}\n" if script else "") + f"stderr:\n{tail(done.err)}",
        )

    def _send(
        self, argv: list[str], local: Path, remote: str, timeout_s: float | None, ok, what: str
    ) -> None:
        """Run a push command; the tool saying the device is not there is DeviceGone (or an
        error if it still is), a push that `ok(done)` does not accept is a BackendError."""
        done = self._host(argv, timeout_s, " ".join(argv))
        failed = self._tool_failure(done.text)
        if ok(done) and not failed:
            return
        if failed:
            self._gone_or_error(done, f"while pushing {local.name}")
        raise BackendError(
            f"{self.kind}: push {local.name} -> {self.serial}:{remote} {what} (exit "
            f"{done.returncode}): {last_line(done.text, 60)}",
            f"local: {local}\noutput:\n{tail(done.text)}",
        )

    def sha256(self, remote: str, timeout_s: float | None = None) -> str | None:
        """The SHA-256 of a file on the device, None when it has no such file."""
        r = self.shell(f"sha256sum {_quote(remote)}", timeout_s)
        if r.returncode != 0:
            return None
        first = r.out.strip().split()
        if not first or not re.fullmatch(r"[0-9a-f]{64}", first[0]):
            raise BackendError(
                f"{self.label}: `sha256sum {remote}` printed {brief(r.out, 40)!r}, not a SHA-256"
            )
        return first[0]


class LocalTransport(Transport):
    """This machine: scripts under /bin/sh -c, files copied."""

    kind = "local"
    local = True  # this machine: its own process's peak memory is the run's

    def __init__(
        self, serial: str = "", executable: str = "", timeout_s: float = DEFAULT_TIMEOUT_S
    ):
        super().__init__(serial or platform.node() or "localhost", "/bin/sh", timeout_s)

    @property
    def label(self) -> str:
        return "local"

    def shell_argv(self, script: str) -> list[str]:
        return ["/bin/sh", "-c", script]

    def _wrap(self, script: str) -> str:
        return script

    def check_still_there(self, when: str, script: str = "") -> None:
        return None

    def _finish(self, script: str, done: CommandOutput, when: str) -> ShellResult:
        return ShellResult(
            script, done.returncode, done.out, done.err, done.wall_s, done.max_rss_kb
        )

    def list_devices(self, timeout_s: float | None = None) -> list[AttachedDevice]:
        return [AttachedDevice(self.serial, "device", {"model": platform.machine()})]

    def push(self, local: Path, remote: str, timeout_s: float | None = None) -> None:
        Path(remote).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, remote)

    def sha256(self, remote: str, timeout_s: float | None = None) -> str | None:
        p = Path(remote)
        if not p.is_file():
            return None
        h = hashlib.sha256()
        with p.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()

    def identity(self) -> dict[str, str]:
        from harmony_ref._cpus import cpu_model

        return {
            "device_model": platform.node(),
            "soc": cpu_model(),
            "os_build": platform.platform(),
            "kernel": platform.release(),
            "cpu_cores": str(os.cpu_count()),
        }


class HdcTransport(Transport):
    """HarmonyOS over hdc."""

    kind = "hdc"

    def shell_argv(self, script: str) -> list[str]:
        return [self.executable, "-t", self.serial, "shell", script]

    def _tool_failure(self, text: str) -> str | None:
        return hdc_failure(text)

    def list_devices(self, timeout_s: float | None = None) -> list[AttachedDevice]:
        done = self._host([self.executable, "list", "targets"], timeout_s, "hdc list targets")
        try:
            return parse_hdc_targets(done.text)
        except ParseError as e:
            raise BackendError(str(e)) from e

    def push(self, local: Path, remote: str, timeout_s: float | None = None) -> None:
        self._send(
            [self.executable, "-t", self.serial, "file", "send", str(local), remote],
            local,
            remote,
            timeout_s,
            lambda done: "FileTransfer finish" in done.text,
            "did not report 'FileTransfer finish'",
        )

    def identity(self) -> dict[str, str]:
        r = self.shell("param get")
        p = parse_param_get(r.out)
        soc = next((p[k] for k in ("const.product.soc", "ohos.boot.hardware") if p.get(k)), "")
        return _present(
            {
                "device_model": p.get("const.product.model", ""),
                "brand": p.get("const.product.brand", ""),
                "manufacturer": p.get("const.product.manufacturer", ""),
                "soc": soc,
                "os_build": p.get("const.product.software.version", ""),
                "api_version": p.get("const.ohos.apiversion", ""),
            }
        )


class AdbTransport(Transport):
    """Android over adb."""

    kind = "adb"

    def shell_argv(self, script: str) -> list[str]:
        return [self.executable, "-s", self.serial, "shell", script]

    def _tool_failure(self, text: str) -> str | None:
        return adb_failure(text)

    def list_devices(self, timeout_s: float | None = None) -> list[AttachedDevice]:
        done = self._host([self.executable, "devices", "-l"], timeout_s, "adb devices -l")
        if done.returncode != 0:
            raise BackendError(
                f"adb devices -l exited {done.returncode}: {last_line(done.text)}",
                tail(done.text),
            )
        return parse_adb_devices(done.out)

    def push(self, local: Path, remote: str, timeout_s: float | None = None) -> None:
        self._send(
            [self.executable, "-s", self.serial, "push", str(local), remote],
            local,
            remote,
            timeout_s,
            lambda done: done.returncode == 0,
            "failed",
        )

    def identity(self) -> dict[str, str]:
        r = self.shell("getprop")
        p = parse_getprop(r.out)
        soc = next(
            (p[k] for k in ("ro.soc.model", "ro.board.platform", "ro.hardware") if p.get(k)), ""
        )
        return _present(
            {
                "device_model": p.get("ro.product.model", ""),
                "manufacturer": p.get("ro.product.manufacturer", ""),
                "soc": soc,
                "os_build": p.get("ro.build.display.id", ""),
                "android_version": p.get("ro.build.version.release", ""),
                "build_fingerprint": p.get("ro.build.fingerprint", ""),
            }
        )


def _present(d: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in d.items() if v}


TRANSPORT_CLASSES = {"local": LocalTransport, "hdc": HdcTransport, "adb": AdbTransport}


def make_transport(
    kind: str, serial: str = "", executable: str = "", timeout_s: float = DEFAULT_TIMEOUT_S
) -> Transport:
    if kind not in TRANSPORT_CLASSES:
        raise ValueError(f"transport {kind!r} unknown; known: {list(TRANSPORT_CLASSES)}")
    return TRANSPORT_CLASSES[kind](serial, executable, timeout_s)
