"""The `harmony-ref` command line.

Each subcommand is a module in harmony_ref/commands/ that defines NAME, HELP,
`add_arguments(parser)` and `run(args) -> int`; they are discovered, not listed here, so adding a
command is adding a file. Command modules import heavy things (numba, pandas) inside `run`, and
`main` adds the arguments of the named command only, so `harmony-ref --help` (and any command)
does not pay for another command's `add_arguments` imports.

Exit codes: 0 success, 1 a check failed (a regression, a refused artifact), 2 bad input.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Container

import harmony_ref
import harmony_ref.commands
from harmony_ref._format import ERROR_LINE_MAX_CHARS, did_you_mean, error_line


def _command_modules():
    for info in sorted(pkgutil.iter_modules(harmony_ref.commands.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        yield importlib.import_module(f"harmony_ref.commands.{info.name}")


class _Parser(argparse.ArgumentParser):
    """A usage error (a count of 0, an unknown choice, a missing value) is one line on stderr
    and exit 2, like every other bad input: not argparse's usage synopsis (many lines, and
    `--help` shows it) before the message. The subcommands' parsers are of this class too."""

    def error(self, message: str):
        print(usage_error(self.prog.removeprefix("harmony-ref").strip(), message), file=sys.stderr)
        self.exit(2)


def usage_error(command: str, message: str) -> str:
    """The one line of a usage error, with where to look when it fits."""
    prog = f"harmony-ref {command}" if command else "harmony-ref"
    line = error_line(command, message) if command else f"harmony-ref: error: {message}"
    hint = f"; see `{prog} --help`"
    return line + hint if len(line + hint) <= ERROR_LINE_MAX_CHARS else line


def build_parser(commands: Container[str] | None = None) -> argparse.ArgumentParser:
    """Every command is listed; `commands` limits whose arguments are added (None: all)."""
    parser = _Parser(
        prog="harmony-ref",
        description="Benchmark and regression harness for quantized on-device LLM inference.",
    )
    parser.add_argument(
        "--version", action="version", version=f"harmony-ref {harmony_ref.__version__}"
    )
    # A private dest: subcommands may have their own --command option (measure, run, calibrate).
    sub = parser.add_subparsers(dest="_command_name", metavar="COMMAND")
    for module in _command_modules():
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        if commands is None or module.NAME in commands:
            module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def _command_names(parser) -> list[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def _not_utf8(argv: list[str]) -> str:
    """The first argument holding bytes that are not UTF-8 (Python hands them over as lone
    surrogates, which no tokenizer or file name takes), named with its flag; "" if none."""
    for i, a in enumerate(argv):
        try:
            a.encode("utf-8")
        except UnicodeEncodeError as e:
            flag = a.split("=", 1)[0] if a.startswith("--") else ""
            if not flag and i and argv[i - 1].startswith("-"):
                flag = argv[i - 1]
            byte = ord(a[e.start]) - 0xDC00 if 0xDC80 <= ord(a[e.start]) <= 0xDCFF else None
            what = f"byte 0x{byte:02x}" if byte is not None else f"character {e.start}"
            try:  # the bytes as given, the bad ones as \xNN
                raw = a.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:
                raw = a.encode("utf-8", "backslashreplace")
            shown = raw.decode("utf-8", "backslashreplace")[:60]
            return f"{flag or 'argument'} '{shown}': not UTF-8 text ({what} at {e.start})"
    return ""


def _intermixed(parser, args, argv: list[str], extra: list[str]):
    """(args, extra) of the command's arguments parsed again with positionals and options in
    any order (argparse's parse_known_intermixed_args: a positional list after an option is
    otherwise left over), or as they were where that parse does not apply."""
    command = getattr(args, "_command_name", None)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if not command or not argv or argv[0] != command:
        return args, extra
    try:
        again, rest = sub.choices[command].parse_known_intermixed_args(argv[1:])
    except TypeError:  # a parser the intermixed parse does not take
        return args, extra
    again._command_name = command
    return again, rest


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    bad = _not_utf8(argv)
    if bad:
        print(f"harmony-ref: error: {bad}", file=sys.stderr)
        return 2
    # The command comes first (the top-level options only print and exit).
    parser = build_parser(commands=argv[:1])
    names = _command_names(parser)
    if argv and not argv[0].startswith("-") and argv[0] not in names:
        print(
            f"harmony-ref: error: unknown command {argv[0]!r}{did_you_mean(argv[0], names)}; "
            "see `harmony-ref --help`",
            file=sys.stderr,
        )
        return 2
    try:
        args, extra = parser.parse_known_args(argv)
    except SystemExit as e:  # a usage error (exit 2) or --help/--version (exit 0): no traceback
        return e.code if isinstance(e.code, int) else 2
    if extra:  # positionals after an option (history import --history DB FILE...): again,
        try:  # argparse's intermixed parse
            args, extra = _intermixed(parser, args, argv, extra)
        except SystemExit as e:  # its usage error, printed in one line
            return e.code if isinstance(e.code, int) else 2
    if extra:  # named with the command they were given to
        command = getattr(args, "_command_name", None) or ""
        print(usage_error(command, f"unrecognized arguments: {' '.join(extra)}"), file=sys.stderr)
        return 2
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    # A renamed flag given by its old spelling (commands/_args.py add_renamed): one line each
    # after the command has run; a bad-input error stays one line without them.
    notes = list(getattr(args, "_deprecated", ()))
    try:
        return int(args._run(args) or 0)
    except (ValueError, FileNotFoundError) as e:
        # Bad input: say what and where, no traceback.
        notes = []
        print(error_line(args._command_name, e), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `harmony-ref ... | head` closed the pipe: not an error worth a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as e:
        # A full disk, a read-only place, a permission: one line, exit 2, nothing half written.
        where = f"{e.filename}: " if e.filename else ""
        notes = []
        print(error_line(args._command_name, f"{where}{e.strerror or e}"), file=sys.stderr)
        return 2
    finally:
        for note in notes:
            print(f"harmony-ref {args._command_name}: {note}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
