"""`harmony-ref devices`: what is attached, over hdc (HarmonyOS) and adb (Android), and this host:
serial, state, model, SoC and OS build (from `param get` / `getprop`), one row each. A tool that
is not installed is said, not an error; a device that is attached but not usable (unauthorized,
offline) is listed with its state and no identity."""

from __future__ import annotations

NAME = "devices"
HELP = "list attached devices (hdc, adb, this host): serial, model, SoC, OS build"


def add_arguments(p) -> None:
    from harmony_ref.commands._output import add_json_flag

    p.add_argument(
        "--transport",
        choices=("all", "hdc", "adb", "local"),
        default="all",
        help="which to list (default all)",
    )
    p.add_argument(
        "--hdc", default="hdc", metavar="PATH", help="the hdc executable (default: hdc on PATH)"
    )
    p.add_argument(
        "--adb", default="adb", metavar="PATH", help="the adb executable (default: adb on PATH)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="kill each tool call after S seconds (default 30)",
    )
    add_json_flag(p)


def list_devices(kinds, executables: dict, timeout_s: float) -> tuple[list[dict], list[str]]:
    """(one row per device, notes about tools that could not be asked)."""
    import shutil
    from pathlib import Path

    from harmony_ref.lab.errors import BackendError
    from harmony_ref.lab.transport import make_transport

    rows, notes = [], []
    for kind in kinds:
        exe = executables.get(kind, "")
        if kind != "local" and not (shutil.which(exe) or Path(exe).is_file()):
            notes.append(f"{kind}: {exe!r} not found (install it or pass --{kind} PATH)")
            continue
        probe = make_transport(kind, "", exe, timeout_s)
        try:
            attached = probe.list_devices()
        except BackendError as e:
            notes.append(f"{kind}: {str(e).splitlines()[0]}")
            continue
        for d in attached:
            row = {"transport": kind, "serial": d.serial, "state": d.state}
            if d.usable:
                try:
                    row.update(make_transport(kind, d.serial, exe, timeout_s).identity())
                except BackendError as e:
                    row["error"] = str(e).splitlines()[0]
            rows.append(row)
        if not attached:
            notes.append(f"{kind}: no device attached")
    return rows, notes


def _check_args(args, kinds) -> None:
    """--timeout and an explicitly given --hdc / --adb, checked before any tool runs."""
    import math
    import shutil
    from pathlib import Path

    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise ValueError(f"--timeout {args.timeout!r}: must be a finite number of seconds > 0")
    for kind in ("hdc", "adb"):
        exe = getattr(args, kind)
        if "\0" in exe:
            raise ValueError(f"--{kind} {exe!r}: holds a null byte")
        if exe != kind and kind in kinds and not (shutil.which(exe) or Path(exe).is_file()):
            raise ValueError(f"--{kind} {exe}: no such file (and no such program on PATH)")


def run(args) -> int:
    from harmony_ref.commands._output import print_json, print_table

    kinds = ("hdc", "adb", "local") if args.transport == "all" else (args.transport,)
    _check_args(args, kinds)
    rows, notes = list_devices(kinds, {"hdc": args.hdc, "adb": args.adb}, args.timeout)
    if args.json:
        print_json({"devices": rows, "notes": notes})
        return 0
    import pandas as pd

    cols = ["transport", "serial", "state", "device_model", "soc", "os_build"]
    df = pd.DataFrame([{c: r.get(c, "-") for c in cols} for r in rows], columns=cols)
    print_table(df, title="attached devices")
    for note in notes:
        print(f"  note: {note}")
    return 0
