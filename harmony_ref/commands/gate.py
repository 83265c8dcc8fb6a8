"""`harmony-ref gate`: compare a run record with the baseline and print a Markdown verdict table
(or `--json`). The workflow lives in job/gate_run.py, the rules in track/gate.py.

Exit codes: 0 pass, 1 regression (or a part of the fresh run failed), 2 bad input (missing or
corrupt baseline, schema mismatch, a metric missing on one side). `--update-baseline` is the only
way the baseline file is written; it keeps the previous one as <baseline>.prev.json.
"""

from __future__ import annotations

NAME = "gate"
HELP = "compare a run with the baseline (exit 0 pass, 1 regression, 2 bad input)"


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_history_arguments
    from harmony_ref.commands._output import add_json_flag

    p.add_argument(
        "--baseline", required=True, help="baseline run record (e.g. results/baseline.json)"
    )
    p.add_argument(
        "--current",
        help="run record to judge ('latest': the newest record in "
        "--out-dir); without it a fresh `run` of the baseline's "
        "config is made",
    )
    p.add_argument(
        "--tolerances", help="tolerance TOML (default: harmony_ref/data/gate_tolerances.toml)"
    )
    p.add_argument("--summary", help="also write the Markdown summary to this file")
    p.add_argument(
        "--out-dir",
        default="results/runs",
        help="where a fresh run's record goes (default results/runs)",
    )
    p.add_argument(
        "--no-rerun", action="store_true", help="never re-measure a failing measured metric"
    )
    add_history_arguments(p)
    p.add_argument(
        "--update-baseline",
        action="store_true",
        help="make the current record the new baseline (the previous one is kept as .prev.json)",
    )
    add_json_flag(p)


def run(args) -> int:
    import sys
    from functools import partial
    from pathlib import Path

    from harmony_ref._io import check_output_dir, check_output_file, write_text_atomic
    from harmony_ref.commands._output import print_json
    from harmony_ref.commands.run import DEFAULTS
    from harmony_ref.config import RunConfig
    from harmony_ref.job.gate_run import (
        current_record,
        failed_parts,
        prev_path,
        read_baseline,
        remeasure_policy,
        replace_baseline,
    )
    from harmony_ref.track.gate import compare, load_tolerances, to_json, to_markdown

    note = partial(print, file=sys.stderr)
    tolerances = load_tolerances(args.tolerances)
    baseline_path = Path(args.baseline)
    if args.summary:
        check_output_file(args.summary, "--summary")
    if args.update_baseline:
        check_output_file(baseline_path, "--baseline")
        check_output_file(prev_path(baseline_path), "--baseline's previous copy")
    history = sut = None
    if not args.current:
        from harmony_ref.commands._args import open_history_arguments

        check_output_dir(args.out_dir, "--out-dir")
        history, sut = open_history_arguments(args, args.out_dir)
    baseline = read_baseline(baseline_path, args.update_baseline, note)
    current, current_path, fresh = current_record(
        args.current,
        args.out_dir,
        baseline,
        baseline_path,
        RunConfig.from_names(**DEFAULTS),
        note,
        history,
        sut,
    )
    names = (str(baseline_path), str(current_path))

    if args.update_baseline:
        comparison = None
        if baseline is not None:
            try:
                comparison = compare(baseline, current, tolerances, None, "", *names)
            except ValueError as e:
                note(f"note: not comparable with the old baseline ({e})")
        kept = replace_baseline(baseline_path, current, current_path)
        if args.json:
            print_json(
                {
                    "baseline_updated": str(baseline_path),
                    "from": str(current_path),
                    "previous_kept_as": str(kept) if kept else None,
                    "comparison": to_json(comparison, *names) if comparison else None,
                }
            )
            return 0
        if comparison is not None:
            print(to_markdown(comparison, *names))
        if kept:
            print(f"previous baseline kept as {kept}")
        print(f"baseline updated: {baseline_path} <- {current_path}")
        return 0

    failed = failed_parts(current)
    if failed:
        if args.json:
            print_json(
                {
                    "verdict": "FAIL",
                    "exit_code": 1,
                    "failed_parts": failed,
                    "current": {"path": str(current_path)},
                }
            )
        print(f"error: parts of the current run failed: {failed}", file=sys.stderr)
        return 1
    remeasure, reason = remeasure_policy(current, fresh, args.no_rerun)
    report = compare(baseline, current, tolerances, remeasure, reason, *names)
    text = to_markdown(report, *names)
    if args.summary:
        write_text_atomic(args.summary, text)
    if args.json:
        print_json(to_json(report, *names))
    else:
        print(text, end="")
    return report.exit_code
