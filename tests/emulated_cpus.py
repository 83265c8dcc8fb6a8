"""Run the numeric tests under every emulated x86-64 CPU (harmony_ref/_cpus.py), one fresh pytest
process each, and print one line per CPU: a test that passes on the Intel Xeon it was written on
and fails on an AMD EPYC (or a Haswell, or at one thread) fails here first.

    tox -e cpus                                  # every configuration, tests marked `numeric`
    python tests/emulated_cpus.py --cpus znver5-epyc,haswell -- tests/runtime -x
    python tests/emulated_cpus.py --all          # the whole suite, not only `numeric` tests
    python tests/emulated_cpus.py --list

`numeric` marks tests whose expectations depend on float kernels' results (tests/conftest.py marks
the folders that hold them; a module elsewhere sets `pytestmark = pytest.mark.numeric`). Each
configuration compiles the Numba kernels for its own target (cached per target), so the first run
of a configuration takes a few minutes longer. Exit 1 when any configuration fails.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harmony_ref._cpus import EMULATED_CPUS, Unemulable, by_name, environment, host_features  # noqa: E402


def summary_line(output: str) -> str:
    """pytest's last '=== N passed ... ===' line, without the rule."""
    for line in reversed(output.splitlines()):
        if " passed" in line or " failed" in line or " error" in line or "no tests ran" in line:
            return line.strip("= ").strip()
    return "no summary (pytest crashed?)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpus", help="comma-separated configurations (default: all)")
    ap.add_argument("--all", action="store_true", help="the whole suite, not only `numeric` tests")
    ap.add_argument("--list", action="store_true", help="list the configurations and exit")
    ap.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = ap.parse_args(argv)
    try:
        cpus = by_name(args.cpus)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.list:
        for c in EMULATED_CPUS:
            print(f"{c.name:<24} {c.what}")
        return 0
    host = host_features()
    selection = [] if args.all else ["-m", "numeric"]
    failed = []
    for cfg in cpus:
        try:
            env = environment(cfg, host)
        except Unemulable as e:
            print(f"{cfg.name:<24} skipped: {e}", flush=True)
            continue
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *selection,
            *args.pytest_args,
        ]
        start = time.monotonic()
        r = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True)
        line = summary_line(r.stdout + r.stderr)
        print(
            f"{cfg.name:<24} {'ok  ' if r.returncode == 0 else 'FAIL'} {line} "
            f"({time.monotonic() - start:.0f} s)",
            flush=True,
        )
        if r.returncode != 0:
            failed.append(cfg.name)
            tail = [x for x in r.stdout.splitlines() if x.startswith(("FAILED", "ERROR"))]
            for x in tail[:20]:
                print(f"    {x}", flush=True)
    if failed:
        print(f"failed under: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
