"""Issue 16 item 10: one spelling of the scenario flags in every command, each with help text."""

import pytest

from harmony_ref.cli import build_parser

SCENARIO_COMMANDS = {  # command -> the scenario flags it takes
    "run": ("prompt", "new", "context", "batch"),
    "compare": ("prompt", "new", "context", "batch"),
    "measure": ("prompt", "new", "context"),
    "predict": ("prompt", "new", "context", "batch"),
    "serve": ("prompt", "new"),
    "thermal": ("prompt", "new"),
    "coldstart": ("prompt",),
}
LONG = {"prompt": "--prompt-tokens", "new": "--new-tokens", "context": "--context-tokens"}


def _actions(command):
    parser = build_parser(commands=[command])
    sub = next(a for a in parser._actions if a.dest == "_command_name")
    return {s: a for a in sub.choices[command]._actions for s in a.option_strings}


@pytest.mark.parametrize("command", sorted(SCENARIO_COMMANDS))
def test_scenario_flags_have_one_spelling_an_alias_and_help(command):
    actions = _actions(command)
    for flag in SCENARIO_COMMANDS[command]:
        short = actions.get(f"--{flag}")
        assert short is not None, f"{command} has no --{flag}"
        assert short.help, f"{command} --{flag} has no help text"
        if flag in LONG:
            assert actions.get(LONG[flag]) is short, f"{command}: {LONG[flag]} is not an alias"


@pytest.mark.parametrize("value", ["-1", "x", "1.5"])
def test_a_bad_count_is_a_usage_error(value, capsys):
    from harmony_ref.cli import main

    assert main(["predict", "--prompt", value]) == 2
    assert "--prompt" in capsys.readouterr().err


def test_a_mistyped_command_suggests_the_closest(capsys):
    from harmony_ref.cli import main

    assert main(["gat", "--baseline", "x"]) == 2
    assert "did you mean 'gate'" in capsys.readouterr().err
