"""Child processes with a deadline: every command a backend or a transport runs goes through here.

    done = run_process(["hdc", "list", "targets"], timeout_s=30, label="hdc list targets")
    proc = start_process(["/bin/sh", "-c", "exec llama-bench ..."], label="benchmark")
    while not proc.wait(0.5):          # poll telemetry while it runs
        ...
    done = proc.result()               # CommandOutput (stdout, stderr, exit code, wall time)

Each process is the leader of a new process group (`start_new_session`), so on a timeout the whole
group, children included, is killed with SIGKILL: an `hdc shell` client and whatever it started, a
shell and its pipeline. (A grandchild that calls setsid itself escapes the group: the one case this
cannot reach.) Output is read by two threads while the process runs, so a chatty child never
blocks on a full pipe. `Running.max_rss_kb` is the child's own peak resident set (wait4's
ru_maxrss) once it has exited: exact for a benchmark that `exec`s in place of the shell.

A timeout raises `BackendError` naming the label and the seconds, after the kill: never a hang.
A non-zero exit is returned, not raised (the caller knows what it means).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from harmony_ref.lab.errors import BackendError

STDERR_TAIL_LINES = 15
_NEEDS_SHELL = re.compile(r"[|;<>&`]|\$\(")
KILL_GRACE_S = 5.0  # after SIGKILL, how long the pipes may take to close


def brief(text: str, limit: int = 60) -> str:
    """`text` on one line (whitespace collapsed), cut to `limit` characters with '...': what an
    error line names of a script or a command."""
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."


def last_line(text: str, limit: int = 80) -> str:
    """The last non-empty line of `text`, brief; '(empty)' when there is none."""
    lines = [x for x in text.splitlines() if x.strip()]
    return brief(lines[-1], limit) if lines else "(empty)"


def needs_shell(command: str) -> bool:
    """A command line with pipes, lists, redirections or substitutions runs under /bin/sh -c."""
    return bool(_NEEDS_SHELL.search(command))


def tail(text: str, n: int = STDERR_TAIL_LINES) -> str:
    lines = text.rstrip().splitlines()
    return "\n".join(lines[-n:])


@dataclass(frozen=True)
class CommandOutput:
    command: str
    returncode: int
    out: str
    err: str
    wall_s: float
    shell: bool = False
    max_rss_kb: int | None = None  # the child's peak RSS (wait4), where it could be read

    @property
    def text(self) -> str:
        """stdout then stderr: what the parsers read."""
        return self.out + "\n" + self.err

    def stderr_tail(self) -> str:
        return tail(self.err) or "(empty)"


class Running:
    """A started process: `wait(s)` polls, `result()` collects, `kill()` ends its group."""

    def __init__(
        self,
        argv: list[str],
        label: str,
        shell: bool = False,
        cwd=None,
        stdin_data: bytes | None = None,
    ):
        self.label = label
        self.shell = shell
        self._t0 = time.perf_counter()
        try:
            self._proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                start_new_session=True,
                cwd=cwd,
            )
        except OSError as e:
            raise BackendError(f"command {label!r} could not start: {e}") from e
        self.pid = self._proc.pid
        self._chunks: dict[str, list[bytes]] = {"out": [], "err": []}
        self._readers = [
            threading.Thread(target=self._read, args=(s, k), daemon=True)
            for s, k in ((self._proc.stdout, "out"), (self._proc.stderr, "err"))
        ]
        for r in self._readers:
            r.start()
        if stdin_data is not None:
            try:
                self._proc.stdin.write(stdin_data)
                self._proc.stdin.close()
            except BrokenPipeError:
                pass
        self._exited = threading.Event()
        self._status: int | None = None
        self.max_rss_kb: int | None = None
        threading.Thread(target=self._reap, daemon=True).start()
        self._wall_s: float | None = None

    def _read(self, stream, key) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            self._chunks[key].append(chunk)
        stream.close()

    def _reap(self) -> None:
        try:
            _, status, usage = os.wait4(self.pid, 0)
            self.max_rss_kb = int(usage.ru_maxrss)  # KiB on Linux
            self._status = os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # pragma: no cover - reaped elsewhere
            self._status = self._proc.poll() if self._proc.poll() is not None else -1
        self._proc.returncode = self._status  # Popen must not wait for it again
        self._wall_s = time.perf_counter() - self._t0
        self._exited.set()

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self._t0

    def wait(self, timeout_s: float) -> bool:
        """True once the process has exited (waiting up to `timeout_s` for it)."""
        return self._exited.wait(max(0.0, timeout_s))

    def kill(self) -> None:
        """SIGKILL the whole process group, then wait for it and its pipes."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._exited.wait(KILL_GRACE_S)
        for r in self._readers:  # an escaped grandchild may still hold the pipes: give up on them
            r.join(KILL_GRACE_S)

    def output(self) -> tuple[str, str]:
        return tuple(b"".join(self._chunks[k]).decode("utf-8", "replace") for k in ("out", "err"))

    def result(self) -> CommandOutput:
        """The finished process's output (call after `wait` returned True)."""
        for r in self._readers:
            r.join(KILL_GRACE_S)
        out, err = self.output()
        return CommandOutput(
            self.label,
            self._status if self._status is not None else -1,
            out,
            err,
            self._wall_s or self.elapsed_s,
            self.shell,
            self.max_rss_kb,
        )

    def timed_out(self, timeout_s: float) -> BackendError:
        """Kill the group and return the error to raise: one line naming the command (brief)
        and the last line of stderr; the whole command and the stderr tail in its detail."""
        self.kill()
        _out, err = self.output()
        return BackendError(
            f"command {brief(self.label)!r} timed out after {timeout_s:g} s; its process group "
            f"was killed; no result recorded (last stderr: {last_line(err)})",
            f"command: {self.label}\nlast stderr:\n{tail(err) or '(empty)'}",
        )


def start_process(
    argv: list[str],
    label: str | None = None,
    shell: bool = False,
    cwd=None,
    stdin_data: bytes | None = None,
) -> Running:
    if not argv:
        raise BackendError("command is empty")
    return Running(argv, label or " ".join(argv), shell, cwd, stdin_data)


def run_process(
    argv: list[str],
    timeout_s: float,
    label: str | None = None,
    shell: bool = False,
    cwd=None,
    stdin_data: bytes | None = None,
) -> CommandOutput:
    """Run to completion; BackendError when it cannot start or outlives `timeout_s` (its whole
    process group killed first)."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
    proc = start_process(argv, label, shell, cwd, stdin_data)
    if not proc.wait(timeout_s):
        raise proc.timed_out(timeout_s)
    return proc.result()
