"""`harmony-ref measure`: run a benchmark command once and print the metrics parsed from it."""

from __future__ import annotations

import sys

from harmony_ref.commands._output import add_json_flag, print_json, print_table

NAME = "measure"
HELP = "run an external benchmark command once (e.g. over hdc/adb shell) and print its parsed metrics"


def add_arguments(p) -> None:
    from harmony_ref.hil.parsers import FORMATS

    p.add_argument("--command", required=True,
                   help="command to run; placeholders {name} filled from --set name=value")
    p.add_argument("--format", required=True, choices=FORMATS, help="output format of the command")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="kill the command (and its children) after S seconds (default 600)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="value for a {NAME} placeholder in the command (repeatable)")
    add_json_flag(p)


def _values(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--set {pair!r}: expected NAME=VALUE")
        out[name] = value
    return out


def run(args) -> int:
    from harmony_ref.hil.base import BackendError
    from harmony_ref.hil.command import CommandDevice

    dev = CommandDevice(args.command, args.format, args.timeout, values=_values(args.set))
    try:
        m = dev.measure()
    except BackendError as e:
        print(f"harmony-ref measure: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print_json({"backend": "command", "metrics": m.metrics.to_dict(), "provenance": m.provenance})
        return 0
    print_table(m.metrics.to_frame(), title=f"measured ({args.format})")
    for k, v in m.provenance.items():
        print(f"  {k}: {v}")
    return 0
