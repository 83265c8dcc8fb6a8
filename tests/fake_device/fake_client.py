"""The fake `hdc` / `adb` client: STATE_DIR/bin/hdc and STATE_DIR/bin/adb run

    python fake_client.py hdc|adb STATE_DIR ARGS...

It sends its arguments (and, for `file send` / `push`, the local file's bytes) to the fake phone's
server (phone_server.py, started here on first use in its own session with its output in
STATE_DIR/server.log, as the real hdc starts its server), prints the reply and exits with its
code. What must happen in real time happens here, in this process: a benchmark's run takes
REAL_RUN_S; a hung one starts a child (its pid in the reply's file) and never returns, so a
timeout must kill the whole process group; a device that vanishes mid-run prints part of the
output and the tool's own failure. Standard library only: it starts in a few tens of ms.
"""

import _socket  # the C module: `socket` itself costs more to import than the whole request
import binascii
import fcntl
import json
import os
import sys
import time

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "phone_server.py")
START_TIMEOUT_S = 60.0
OBSERVED_CAP_S = 3.0  # a run nobody polls ends after this anyway


def _connect(sock_path: str):
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.connect(sock_path)
    except OSError:
        s.close()
        raise
    return s


def _ensure_server(state: str):
    sock_path = os.path.join(state, "server.sock")
    try:
        return _connect(sock_path)
    except OSError:
        pass
    with open(os.path.join(state, "start.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _connect(sock_path)
        except OSError:
            pass
        import subprocess

        with open(os.path.join(state, "server.log"), "ab") as log:
            subprocess.Popen(
                [sys.executable, SERVER, state],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                return _connect(sock_path)
            except OSError:
                time.sleep(0.05)
    sys.stderr.write(f"fake phone server did not start (see {state}/server.log)\n")
    sys.exit(70)


def _ask(state: str, req: dict) -> dict:
    s = _ensure_server(state)
    try:
        s.sendall(json.dumps(req).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    return json.loads(data)


def _through_the_run(state: str, then: dict) -> None:
    """Take at least sleep_s, and stay until telemetry has read the phone once during the run
    (or OBSERVED_CAP_S): the session's during-run samples do not depend on machine speed."""
    t0 = time.monotonic()
    time.sleep(then["sleep_s"])
    if then.get("vanish"):
        return
    while time.monotonic() - t0 < OBSERVED_CAP_S:
        if (
            _ask(state, {"tool": "_", "argv": [], "op": "run_status", "run": then["run"]})["reads"]
            != 0
        ):
            break
        time.sleep(0.02)
    _ask(state, {"tool": "_", "argv": [], "op": "run_done", "run": then["run"]})


def main() -> int:
    tool, state, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    if argv[:1] in (["kill"], ["kill-server"]) and not os.path.exists(
        os.path.join(state, "server.sock")
    ):
        return 0
    req = {"tool": tool, "argv": argv}
    local = None
    if tool == "hdc" and "file" in argv and "send" in argv:
        local = argv[argv.index("send") + 1]
    elif tool == "adb" and "push" in argv:
        local = argv[argv.index("push") + 1]
    if local is not None:
        try:
            with open(local, "rb") as f:
                req["data"] = binascii.b2a_base64(f.read(), newline=False).decode()
        except OSError as e:
            print(
                f"[Fail]Error opening file: {e}"
                if tool == "hdc"
                else f"adb: error: cannot stat '{local}': {e.strerror}",
                file=sys.stdout if tool == "hdc" else sys.stderr,
            )
            return 0 if tool == "hdc" else 1
    reply = _ask(state, req)
    then = reply.get("then") or {}
    if then.get("hang"):
        import subprocess

        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(then["child_pid_file"], "w") as f:
            f.write(str(child.pid))
        print("Running warm up loops...", flush=True)
        time.sleep(600)
    if then.get("sleep_s"):
        _through_the_run(state, then)
    sys.stdout.write(reply.get("out", ""))
    sys.stderr.write(reply.get("err", ""))
    return int(reply.get("rc", 0))


if __name__ == "__main__":
    sys.exit(main())
