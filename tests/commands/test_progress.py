"""Issue 16 item 9: long commands show progress on stderr, also with --json (stdout stays JSON)."""

import json

from harmony_ref.cli import main


def test_run_json_shows_progress_on_stderr_and_keeps_stdout_json(tmp_path, capsys):
    rc = main(
        ["run", "--skip", "host,accuracy,coldstart,thermal", "--json", "--out-dir", str(tmp_path)]
    )
    out, err = capsys.readouterr()
    assert rc == 0
    json.loads(out)
    assert "device metrics" in err
