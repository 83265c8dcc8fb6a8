import json
import subprocess
import sys

from harmony_ref.cli import build_parser, main


def test_every_command_has_help():
    parser = build_parser()
    assert parser.format_help()


def test_quantize_report_json(capsys):
    assert main(["quantize-report", "--rows", "8", "--cols", "256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    by = {r["format"]: r for r in out["formats"]}
    assert by["int4-g32-asym"]["bits_per_weight"] == 4.75
    assert by["int4-g32-asym"]["rmse"] < by["int4-g128-asym"]["rmse"]
    assert by["int8"]["rmse"] < by["int4-g32-asym"]["rmse"]


def test_python_dash_m():
    r = subprocess.run(
        [sys.executable, "-m", "harmony_ref", "--version"], capture_output=True, text=True
    )
    assert r.returncode == 0 and "harmony-ref" in r.stdout


def test_closed_pipe_is_not_a_traceback():
    # `harmony-ref profiles --json | head -1`: the reader goes away early.
    # Closing our end before the child has even imported makes its first write fail with EPIPE.
    p = subprocess.Popen(
        [sys.executable, "-m", "harmony_ref", "profiles", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()
    err = p.stderr.read().decode()
    p.wait(timeout=60)
    assert "Traceback" not in err


def test_error_names_the_subcommand_even_with_a_command_option(capsys):
    # `run --command` must not overwrite the subcommand name shown in errors.
    assert main(["run", "--backend", "command", "--command", "echo hi"]) == 2
    assert "harmony-ref run: error:" in capsys.readouterr().err


def test_top_level_help_runs_no_command_add_arguments():
    # `harmony-ref --help` must stay fast: no command's add_arguments (some import numpy-backed
    # modules for their defaults) runs unless that command was named.
    code = (
        "import sys\nfrom harmony_ref.cli import main\ntry:\n    main(['--help'])\n"
        "except SystemExit:\n    pass\nprint('numpy' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "False", "numpy was imported by --help"


def test_each_command_gets_its_own_arguments(capsys):
    # Only the named command's arguments are added: they still parse, and its help lists them.
    parser = build_parser(commands=["serve"])
    assert parser.parse_args(["serve", "--queue", "5"]).queue == 5
    assert main(["coldstart", "--help"]) == 0  # usage exits are return codes in-process
    assert "--layers" in capsys.readouterr().out


def test_run_and_sweep_name_every_part_of_the_job(capsys):
    # the part list lives once, in job/main.py; run --skip and sweep --parts print it
    from harmony_ref.job.main import part_names
    from harmony_ref.sweep.grid import GRID_FIELD_DOCS

    assert "fidelity" in part_names()
    for command, flag in (("run", "--skip"), ("sweep", "--parts")):
        try:
            main([command, "--help"])
        except SystemExit:
            pass
        text = " ".join(capsys.readouterr().out.split())
        assert f"{flag} PARTS" in text
        assert ",".join(part_names()) in text.replace(", ", ","), (command, text)
    assert ", ".join(part_names()) in GRID_FIELD_DOCS["parts"]
