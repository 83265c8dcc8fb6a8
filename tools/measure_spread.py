"""How far a relative track moves between fresh processes, and the asv thresholds derived from it.

asv times every benchmark (every parameter combination) in a new interpreter, and on this shared
2-core machine fresh processes differ far more than the interleaved rounds inside one process
(common.relative_samples): the page layout of a 64 MB NumPy matrix, the caches and memory state
a process starts with. A `track_` has no samples in asv's results, so asv's Regressions page
judges it by `regressions_thresholds` alone; a threshold below the cross-process spread lists
noise as a regression. This script measures that spread: every parameter combination of every
relative track whose entry name "module.Class.track(params)" matches --bench (a regex; the
combinations a track skips excluded) is run PROCESSES times, each in a fresh interpreter that
does what asv does (setup, then one call of the track), the entries interleaved (process 1 of
every entry, then process 2, ...) so a drift of the machine spreads over all of them. It writes bench/asv_spread.json; with --write-conf it also puts the
derived thresholds into asv.conf.json, one regex per entry (tests/track/test_perf_gate.py
checks that the two agree and that the thresholds follow the rule below).

Rule: spread = max / min - 1 over the processes (asv flags a later value above
(1 + threshold) x an earlier one, so max/min is the quantity to cover); threshold = MARGIN x
spread rounded up to 5%, never below the default relative limit (perf.LIMIT_PCT). MARGIN = 1.5
because a handful of processes sees less than the whole range.

    /work/bin/quiet python -m tools.measure_spread --processes 6 --write-conf \
        --bench "DecodeAttention.*'int8', 512"   # one entry
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import itertools
import json
import math
import pkgutil
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPREAD_FILE = ROOT / "bench" / "asv_spread.json"
CONF_FILE = ROOT / "asv.conf.json"
MARGIN = 1.5
STEP = 0.05

_CHILD = """
import importlib, json, sys
mod, cls, track, params = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
obj = getattr(importlib.import_module("bench." + mod), cls)()
if hasattr(obj, "setup"):
    obj.setup(*params)
print(json.dumps(getattr(obj, track)(*params)))
"""


def default_limit() -> float:
    from harmony_ref.track import perf

    return perf.LIMIT_PCT / 100


def threshold_for(spread: float, floor: float) -> float:
    """MARGIN x spread, rounded up to STEP, at least `floor`."""
    return max(floor, round(math.ceil(round(MARGIN * spread / STEP, 9)) * STEP, 2))


def entry_regex(entry: str) -> str:
    """The asv.conf.json key for one entry: asv re.match-es it against the entry name, with
    '@branch' appended when the graph is a branch's."""
    return re.escape(entry) + "(@|$)"


def bench_classes():
    """(module name, class name, class) of every class a bench_*.py module defines."""
    import bench

    for mod in pkgutil.iter_modules(bench.__path__):
        if not mod.name.startswith("bench_"):
            continue
        module = importlib.import_module(f"bench.{mod.name}")
        for cls_name, cls in vars(module).items():
            if inspect.isclass(cls) and cls.__module__ == module.__name__:
                yield mod.name, cls_name, cls


def relative_entries(pattern: str) -> list[tuple[str, str, str, tuple]]:
    """(module, class, track, params) of every relative track_ (unit 'x ...'), one row per
    parameter combination asv runs (not those in the track's skip_params), whose entry name
    ("module.Class.track(params)", as asv names it) matches the regex `pattern`."""
    rx = re.compile(pattern)
    out = []
    for mod, cls_name, cls in bench_classes():
        if hasattr(cls, "setup_cache"):
            continue  # a cached set-up is not what this script reproduces
        for attr in sorted(dir(cls)):
            fn = getattr(cls, attr)
            relative = str(getattr(fn, "unit", "")).startswith("x ")
            if not attr.startswith("track_") or not relative:
                continue
            params = getattr(cls, "params", ())
            if params and not isinstance(params[0], list):
                params = (params,)
            skipped = set(getattr(fn, "skip_params", ()))
            for combo in itertools.product(*params) if params else [()]:
                entry = (mod, cls_name, attr, tuple(combo))
                if tuple(combo) not in skipped and rx.search(entry_name(*entry)):
                    out.append(entry)
    return out


def entry_name(mod: str, cls: str, track: str, params: tuple) -> str:
    name = f"{mod}.{cls}.{track}"
    return f"{name}({', '.join(repr(p) for p in params)})" if params else name


def run_fresh(mod, cls, track, params) -> float:
    res = subprocess.run(
        [sys.executable, "-c", _CHILD, mod, cls, track, json.dumps(list(params))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(res.stdout.strip().splitlines()[-1]))


def cpu_name() -> str:
    from harmony_ref._cpus import cpu_model

    return cpu_model()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--bench", default=".", help="regex searched in each entry name, module.Class.track(params)"
    )
    ap.add_argument("--processes", type=int, default=6, help="fresh processes per entry")
    ap.add_argument("--write-conf", action="store_true", help="update asv.conf.json")
    ap.add_argument(
        "--rederive",
        action="store_true",
        help="measure nothing: re-apply the rule to the recorded values",
    )
    ap.add_argument("--json", action="store_true", help="print the measured entries as JSON")
    args = ap.parse_args(argv)
    if args.processes < 2:
        print(f"measure_spread: --processes {args.processes}: need at least 2", file=sys.stderr)
        return 2
    entries = relative_entries(args.bench)
    if not entries:
        print(f"measure_spread: --bench {args.bench!r} matches no relative track", file=sys.stderr)
        return 2
    values = {}
    if not args.rederive:
        values = {entry_name(*e): [] for e in entries}
        t0 = time.monotonic()
        for i in range(args.processes):
            for e in entries:
                values[entry_name(*e)].append(run_fresh(*e))
            print(
                f"process round {i + 1}/{args.processes} done ({time.monotonic() - t0:.0f} s)",
                file=sys.stderr,
            )
    floor = default_limit()
    doc = json.loads(SPREAD_FILE.read_text()) if SPREAD_FILE.exists() else {}
    if values:
        doc["cpu"] = cpu_name()
    doc.update({"margin": MARGIN, "step": STEP, "floor": floor})
    measured = doc.setdefault("entries", {})
    defined = {entry_name(*e) for e in relative_entries(".")}
    for name in sorted(set(measured) - defined):  # a track removed, or a combination skipped
        print(f"measure_spread: {name}: no longer run by asv, dropped", file=sys.stderr)
        del measured[name]
    for name, vals in values.items():
        measured[name] = {"processes": len(vals), "values": vals}
    for m in measured.values():  # the rule, applied to every recorded entry
        m["spread"] = round(max(m["values"]) / min(m["values"]) - 1, 4)
        m["threshold"] = threshold_for(m["spread"], floor)
    doc["entries"] = dict(sorted(measured.items()))
    SPREAD_FILE.write_text(json.dumps(doc, indent=1) + "\n")
    if args.write_conf:
        conf = json.loads(CONF_FILE.read_text())
        th = {k: v for k, v in conf["regressions_thresholds"].items() if not k.endswith("(@|$)")}
        for name, m in doc["entries"].items():
            if m["threshold"] > floor:
                th[entry_regex(name)] = m["threshold"]
        conf["regressions_thresholds"] = th
        CONF_FILE.write_text(json.dumps(conf, indent=4) + "\n")
    values = values or {entry_name(*e): None for e in entries if entry_name(*e) in measured}
    rows = {n: measured[n] for n in values}
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for n, m in rows.items():
            print(f"{m['spread'] * 100:6.1f}%  -> {m['threshold'] * 100:4.0f}%  {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
