"""`harmony-ref measure`: run a benchmark command once and print the metrics parsed from it."""

from __future__ import annotations

import sys

from harmony_ref.commands._output import add_json_flag, print_json, print_table

NAME = "measure"
HELP = ("run an external benchmark command once (e.g. over hdc/adb shell) and print its parsed "
        "metrics")


def add_arguments(p) -> None:
    from harmony_ref.commands._args import number

    from harmony_ref.backends.parsers import FORMATS
    from harmony_ref.commands._args import add_scenario_arguments

    p.add_argument("--command", dest="command_template", metavar="CMD", required=True,
                   help="command to run; placeholders {name} filled from --set name=value")
    p.add_argument("--format", required=True, choices=FORMATS, help="output format of the command")
    p.add_argument("--timeout", type=number(0, above=True), default=600.0, metavar="S",
                   help="kill the command (and its children) after S seconds (default 600)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="value for a {NAME} placeholder in the command (repeatable)")
    g = p.add_argument_group(
        "physics sanity (flag measurements faster than the profile's roofline)")
    g.add_argument("--profile", help="device profile to check against (name or .toml path)")
    g.add_argument("--model", help="model the command runs (required with --profile)")
    g.add_argument("--policy", default="int4-g128",
                   help="quantization policy it runs (default int4-g128)")
    add_scenario_arguments(g, long_dest=True)
    from harmony_ref.commands._args import add_allow_unmatched

    add_allow_unmatched(p)
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
    from harmony_ref.backends.base import BackendError
    from harmony_ref.backends.command import CommandDevice

    config = profile = None
    if args.profile:
        from harmony_ref.config import RunConfig
        from harmony_ref.device.profile import load_profile

        if not args.model:
            raise ValueError("--profile needs --model (the model the command runs) "
                             "for the roofline bound")
        profile = load_profile(args.profile)
        config = RunConfig.from_names(model=args.model, policy=args.policy,
                                      prompt_tokens=args.prompt_tokens, new_tokens=args.new_tokens,
                                      context_tokens=args.context_tokens,
                                      allow_unmatched=args.allow_unmatched)
    dev = CommandDevice(args.command_template, args.format, args.timeout, values=_values(args.set),
                        profile=profile)
    try:
        m = dev.run(config)
    except BackendError as e:
        print(f"harmony-ref measure: error: {e}", file=sys.stderr)
        return 1
    metrics, findings = m.metrics, list(m.findings)
    if args.json:
        print_json({"backend": "command", "metrics": metrics.to_dict(), "provenance": m.provenance,
                    "implausible": findings})
        return 0
    print_table(metrics.to_frame(), title=f"measured ({args.format})")
    for k, v in m.provenance.items():
        print(f"  {k}: {v}")
    for f in findings:
        print(f"IMPLAUSIBLE: {f}")
    return 0
