"""What every command with `--session FILE` shares: the flag, progress lines while a session
runs, and the per-repeat telemetry table it prints."""

from __future__ import annotations

import sys

from harmony_ref._format import error_line

KEY_METRICS = ("decode_tokens_per_s", "e2e_ms", "ttft_ms")  # the one each run row shows


def add_session_argument(p) -> None:
    p.add_argument(
        "--session",
        metavar="FILE",
        help="run through a device session (TOML: transport local/hdc/adb, serial, "
        "pushes, cooldown, warm-up, repeats, telemetry, throttle detection; see "
        "harmony_ref/lab/session_spec.py)",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="with --session: after an error's one line, print its detail (the script sent "
        "to the device, the last lines of stderr)",
    )


def load(path: str | None):
    """The session file's spec (bad input is a ValueError naming file, field and value)."""
    if not path:
        return None
    from harmony_ref.lab.session_spec import load_session

    return load_session(path)


def progress(quiet: bool = False):
    """A progress callback printing one dim line per session step on stderr (rich)."""
    if quiet:
        return None
    from rich.console import Console

    console = Console(stderr=True, highlight=False)
    return lambda text: console.print(f"[dim]session:[/] {text}")


def telemetry_frame(block: dict):
    """One row per run: repeat, kind, throttled, cooldown, temperatures, the big cores' lowest
    frequency while loaded (a parked core in the start window is not shown), Android's thermal
    status where read, memory."""
    import pandas as pd

    rows = []
    runs = block.get("telemetry", [])
    key = next((k for k in KEY_METRICS if runs and all(k in r["metrics"] for r in runs)), None)
    throttle = block.get("throttle", {})
    big, loaded = throttle.get("big_cpus", []), throttle.get("loaded_share", 0.0)
    top = block.get("max_freq_mhz", {})
    for r in block.get("telemetry", []):
        samples = r.get("samples", {})
        during = [i for i, ph in enumerate(samples.get("phase", [])) if ph == "during"]

        def busy(c, i, samples=samples):  # alive and loaded at that read (rule 4's samples)
            share = samples.get(f"cpu{c}_busy", [None] * (i + 1))[i]
            alive = samples.get("alive", [True] * (i + 1))[i]
            return alive is not False and (share is None or share >= loaded)

        fracs = [
            samples[f"cpu{c}_mhz"][i] / top[str(c)]
            for c in big
            if f"cpu{c}_mhz" in samples and str(c) in top
            for i in during
            if samples[f"cpu{c}_mhz"][i] is not None and busy(c, i)
        ]
        status = [x for x in samples.get("thermal_status", []) if x is not None]
        rows.append(
            {
                "run": f"{r['kind']} {r['repeat']}",
                "throttled": "THROTTLED" if r["throttled"] else "no",
                "cooldown_s": r["cooldown_s"],
                "temp_before_c": _dash(r["temp_before_c"]),
                "temp_peak_c": _dash(r["temp_peak_c"]),
                "big_freq_min": f"{min(fracs):.0%}" if fracs else "-",
                **({"thermal_status": max(status)} if status else {}),
                "samples": len(samples.get("t_s", [])),
                "peak_memory_mb": _dash(r["peak_memory_mb"]),
                "wall_s": r["wall_s"],
                **({key: r["metrics"][key]} if key else {}),
            }
        )
    return pd.DataFrame(rows)


def _dash(v):
    return "-" if v is None else v


def print_block(block: dict, file=None) -> None:
    """The session's identity, pushes, telemetry table, throttle reasons and notes."""
    from harmony_ref.commands._output import print_table

    out = file or sys.stdout
    ident = ", ".join(f"{k} {v}" for k, v in block.get("identity", {}).items())
    print(
        f"device: {block['transport']} {block['serial']}" + (f" ({ident})" if ident else ""),
        file=out,
    )
    for p in block.get("pushes", []):
        print(
            f"  push {p['remote']}: {p['action']} ({p['bytes']:,} bytes, sha256 "
            f"{p['sha256'][:12]}...)",
            file=out,
        )
    if block.get("telemetry"):
        print_table(
            telemetry_frame(block),
            title=f"runs: {block['valid_repeats']} of "
            f"{block['repeats']} measured repeats valid (session asks for "
            f"{block['min_valid_repeats']}); clock: {block['clock']}",
            file=out,
        )
    for r in block.get("telemetry", []):
        if r["throttled"]:
            print(f"  THROTTLED {r['kind']} {r['repeat']}: " + "; ".join(r["reasons"]), file=out)
    power = block.get("power") or {}
    if "idle_power_w" in power:
        how = (
            "from the ODPM rails"
            if power.get("source") == "odpm"
            else f"current_now {power['current_sign']}"
        )
        print(f"  power: idle {power['idle_power_w']:.3f} W before the run; {how}", file=out)
    for note in block.get("notes", []):
        print(f"  note: {note}", file=out)


def error_exit(command: str, error, code: int, verbose: bool = False) -> int:
    """A session error: its one line on stderr (and, with --verbose, its detail), exit `code`."""
    print(error_line(command, error), file=sys.stderr)
    detail = getattr(error, "detail", "")
    if verbose and detail:
        print(detail, file=sys.stderr)
    return code


def gone_exit(command: str, error, verbose: bool = False) -> int:
    """A device that left mid-session: one line, exit 2, nothing recorded."""
    return error_exit(command, error, 2, verbose)
