"""Test-side handle on a fake phone (phone_server.py, fake_client.py): make one in a folder, get
its `hdc` / `adb` executable, write a session file for it, change its faults, read its state.

    phone = FakePhone.create(tmp_path / "phone", kind="hdc", die_c=30.0)
    session = phone.session_file(tmp_path / "phone.toml", repeats=3)
    ...                                             # harmony-ref measure --session session
    phone.state()["runs"]; phone.device_file("/data/local/tmp/hr/model.gguf")
    phone.stop()
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

HERE = Path(__file__).resolve().parent
CLIENT = HERE / "fake_client.py"
WORK_DIR = "/data/local/tmp/hr"

# Property names as the real tools list them (transport.py reads these); values are made up.
HDC_PROPS = {
    "const.product.model": "ALN-AL00",
    "const.product.brand": "HUAWEI",
    "const.product.manufacturer": "HUAWEI",
    "const.product.software.version": "ALN-AL00 5.0.0.120(SP6C00E120R4P5)",
    "const.ohos.apiversion": "12",
    "ohos.boot.hardware": "kirin9000s",
    "const.debuggable": "0",
}
ADB_PROPS = {
    "ro.product.model": "Pixel 8",
    "ro.product.manufacturer": "Google",
    "ro.soc.model": "Tensor G3",
    "ro.board.platform": "zuma",
    "ro.build.display.id": "AP2A.240805.005",
    "ro.build.version.release": "14",
    "ro.build.fingerprint": "google/shiba/shiba:14/AP2A.240805.005/12025142:user/release-keys",
}
SERIALS = {"hdc": "FMR0223C13000649", "adb": "38011FDJH0008X"}


def process_alive(pid: int) -> bool:
    """Is `pid` a live process (a killed child not yet reaped by init is a zombie: gone)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


def toml_dumps(doc: dict) -> str:
    """Tables of scalars and lists, and arrays of tables (enough for a session file)."""
    lines = []
    for name, table in doc.items():
        if isinstance(table, list):
            for item in table:
                lines.append(f"[[{name}]]")
                lines += [f"{k} = {toml_value(v)}" for k, v in item.items()]
                lines.append("")
            continue
        lines.append(f"[{name}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
        lines.append("")
    return "\n".join(lines)


@dataclass
class FakePhone:
    root: Path
    kind: str
    serial: str

    @classmethod
    def create(
        cls,
        root: Path,
        kind: str = "hdc",
        serial: str | None = None,
        die_c: float = 30.0,
        skin_c: float = 30.0,
        faults: dict | None = None,
        load_s: float = 0.0,
        loaded_freq_fraction: float = 1.0,
        charging: bool = False,
        current_sign: str = "positive",
    ) -> FakePhone:
        """`load_s`: each benchmark's start window (simulated seconds: process alive, model
        loading, cores parked); `loaded_freq_fraction`: the big cores' running frequency while
        computing, as a share of their cap (below 1: slow without a cap); `charging`: on its
        charger; `current_sign`: current_now's sign while discharging."""
        root.mkdir(parents=True, exist_ok=True)
        serial = serial or SERIALS[kind]
        (root / "phone.json").write_text(
            json.dumps(
                {
                    "kind": kind,
                    "serial": serial,
                    "die_c": die_c,
                    "skin_c": skin_c,
                    "faults": faults or {},
                    "load_s": load_s,
                    "loaded_freq_fraction": loaded_freq_fraction,
                    "charging": charging,
                    "current_sign": current_sign,
                    "props": HDC_PROPS if kind == "hdc" else ADB_PROPS,
                },
                indent=1,
            )
        )
        bindir = root / "bin"
        bindir.mkdir(exist_ok=True)
        for tool in ("hdc", "adb"):
            exe = bindir / tool
            # -S: no site packages, a faster start (the client needs the standard library only)
            exe.write_text(f'#!/bin/sh\nexec {sys.executable} -S {CLIENT} {tool} {root} "$@"\n')
            exe.chmod(0o755)
        return cls(root, kind, serial)

    @property
    def executable(self) -> Path:
        return self.root / "bin" / self.kind

    def tool(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.executable), *args], capture_output=True, text=True, timeout=timeout
        )

    def reconfigure(self, **changes) -> None:
        """Change phone.json (faults, die_c, skin_c) and have the server start over from it."""
        cfg = json.loads((self.root / "phone.json").read_text())
        cfg.update(changes)
        (self.root / "phone.json").write_text(json.dumps(cfg, indent=1))
        self.tool("_reload")

    def state(self) -> dict:
        return json.loads((self.root / "state.json").read_text())

    def device_file(self, path: str) -> Path:
        return self.root / "fs" / Path(*PurePosixPath(path).parts[1:])

    def stop(self) -> None:
        self.tool("kill" if self.kind == "hdc" else "kill-server")

    def files(self, folder: Path, model_bytes: int = 64 * 1024) -> tuple[Path, Path]:
        """A benchmark 'binary' and a model file to push (the model's bytes seeded)."""
        folder.mkdir(parents=True, exist_ok=True)
        bench = folder / "llama-bench"
        bench.write_text("#!fake llama-bench: the phone runs its own simulation\n")
        model = folder / "model.gguf"
        model.write_bytes(os.urandom(model_bytes))
        return bench, model

    def session_doc(self, folder: Path, **sections) -> dict:
        bench, model = (
            self.files(folder)
            if not (folder / "model.gguf").exists()
            else (folder / "llama-bench", folder / "model.gguf")
        )
        doc = {
            "device": {
                "transport": self.kind,
                "serial": self.serial,
                "work_dir": WORK_DIR,
                "profile": "harmony-flagship",
                "executable": str(self.executable),
                "command_timeout_s": 30.0,
            },
            "benchmark": {
                "command": "{work_dir}/llama-bench -m {work_dir}/model.gguf -p 64 "
                "-n 1024 -r 1 -o json",
                "format": "llama-bench",
                "timeout_s": 30.0,
                "warmup_runs": 0,
                "repeats": 3,
            },
            "push": [
                {"local": str(bench), "remote": "llama-bench", "executable": True},
                {"local": str(model), "remote": "model.gguf"},
            ],
            "cooldown": {"threshold_c": 38.0, "max_wait_s": 1800.0, "check_interval_s": 15.0},
            "telemetry": {
                "thermal_zones": [0, 1],
                "watch_zone": 0,
                "cpus": [0, 4, 7],
                "big_cpus": [4, 7],
                "poll_interval_s": 0.05,
                "battery_dir": "/sys/class/power_supply/Battery",
            },
            "throttle": {"temp_c": 60.0, "min_big_freq_fraction": 0.9},
        }
        if self.kind == "adb":
            doc["telemetry"]["battery_dir"] = "/sys/class/power_supply/battery"
        for name, table in sections.items():
            if isinstance(table, dict):
                doc[name] = {**doc.get(name, {}), **table}
            else:
                doc[name] = table
        return doc

    def session_file(self, path: Path, **sections) -> Path:
        path.write_text(toml_dumps(self.session_doc(path.parent / "files", **sections)))
        return path


if __name__ == "__main__":  # python tests/fake_device/fakephone.py DIR [hdc|adb]: try it by hand
    import argparse

    from phone_server import WORKLOAD  # beside this file (run as a script)

    ap = argparse.ArgumentParser(description="make a fake phone and a session file for it")
    ap.add_argument("folder", type=Path)
    ap.add_argument("kind", nargs="?", default="hdc", choices=("hdc", "adb"))
    ap.add_argument("--die-c", type=float, default=30.0, help="starting die temperature")
    ap.add_argument(
        "--load-s", type=float, default=0.0, help="each benchmark's start window (simulated s)"
    )
    ap.add_argument(
        "--warmup-runs", type=int, default=0, help="the session's benchmark.warmup_runs"
    )
    ap.add_argument("--repeats", type=int, default=3, help="the session's benchmark.repeats")
    a = ap.parse_args()
    phone = FakePhone.create(a.folder.resolve() / "phone", a.kind, die_c=a.die_c, load_s=a.load_s)
    session = phone.session_file(
        a.folder.resolve() / f"{a.kind}-phone.toml",
        # the workload whose decode power the phone draws: the energy model scores it
        # (`fidelity --records`), and the record names a model and policy
        benchmark={
            "warmup_runs": a.warmup_runs,
            "repeats": a.repeats,
            "model": WORKLOAD[0],
            "policy": WORKLOAD[1],
        },
    )
    print(f"{phone.kind}: {phone.executable}\nsession: {session}")
