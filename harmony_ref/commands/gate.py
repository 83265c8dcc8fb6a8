"""`harmony-ref gate`: compare a run record with the baseline and print a Markdown verdict table.

Exit codes: 0 pass, 1 regression (or a part of the fresh run failed), 2 bad input (missing or
corrupt baseline, schema mismatch, a metric missing on one side). `--update-baseline` is the only
way the baseline file is written; it keeps the previous one as <baseline>.prev.json.
"""

from __future__ import annotations

NAME = "gate"
HELP = "compare a run with the baseline (exit 0 pass, 1 regression, 2 bad input)"


def add_arguments(p) -> None:
    p.add_argument("--baseline", required=True, help="baseline run record (e.g. results/baseline.json)")
    p.add_argument("--current", help="run record to judge ('latest': the newest record in --out-dir); "
                                     "without it a fresh `run` of the baseline's config is made")
    p.add_argument("--tolerances", help="tolerance TOML (default: harmony_ref/data/gate_tolerances.toml)")
    p.add_argument("--summary", help="also write the Markdown summary to this file")
    p.add_argument("--out-dir", default="results/runs", help="where a fresh run's record goes (default results/runs)")
    p.add_argument("--no-rerun", action="store_true", help="never re-measure a failing measured metric")
    p.add_argument("--update-baseline", action="store_true",
                   help="make the current record the new baseline (the previous one is kept as .prev.json)")


def _prev_path(baseline):
    return baseline.with_name(baseline.stem + ".prev.json")


def _fresh_run(config, only, out_dir: str):
    from harmony_ref.track.job import run_job
    from harmony_ref.track.record import write_record

    record = run_job(config, only=only)
    path = write_record(record, out_dir)
    return record, path


def run(args) -> int:
    import socket
    import sys
    from pathlib import Path

    from harmony_ref._io import write_text_atomic
    from harmony_ref.commands.run import DEFAULTS
    from harmony_ref.config import RunConfig
    from harmony_ref.track.gate import compare, load_tolerances, to_markdown
    from harmony_ref.track.job import ran_parts, remeasure_fn
    from harmony_ref.track.record import load_record, write_json_atomic

    from harmony_ref._io import check_output_dir, check_output_file

    tolerances = load_tolerances(args.tolerances)
    baseline_path = Path(args.baseline)
    if args.summary:
        check_output_file(args.summary, "--summary")
    if args.update_baseline:
        check_output_file(baseline_path, "--baseline")
    if not args.current:
        check_output_dir(args.out_dir, "--out-dir")
    baseline = None
    if not baseline_path.exists():
        if not args.update_baseline:
            raise ValueError(f"{baseline_path}: baseline does not exist; make one with "
                             "`harmony-ref run` then `harmony-ref gate --baseline "
                             f"{baseline_path} --current <record> --update-baseline`")
    else:
        try:
            baseline = load_record(baseline_path)
        except ValueError:
            if not args.update_baseline:
                raise
            print(f"note: the existing baseline {baseline_path} is not a valid record; it is kept "
                  f"as {_prev_path(baseline_path)}", file=sys.stderr)

    if args.current == "latest":
        from harmony_ref.track.record import latest_record

        args.current = latest_record(args.out_dir)
        if args.current is None:
            raise ValueError(f"--current latest: no run record in {args.out_dir}; run `harmony-ref run` first")
    if args.current:
        current_path = Path(args.current)
        current = load_record(current_path)
        fresh = False
    else:
        config = (RunConfig.from_dict(baseline.config, str(baseline_path)) if baseline
                  else RunConfig.from_names(**DEFAULTS))
        only = ran_parts(baseline) if baseline else None
        current, current_path = _fresh_run(config, only, args.out_dir)
        fresh = True
        print(f"fresh run record: {current_path}", file=sys.stderr)
    failed = {n: p["detail"] for n, p in current.parts.items() if p["status"] == "failed"}

    inaccurate = current.metrics.items.get("runtime_accurate")
    if args.update_baseline:
        if failed:
            raise ValueError(f"{current_path}: parts failed ({failed}); refusing to make it the baseline")
        if inaccurate is not None and "inaccurate" in inaccurate.flags:
            raise ValueError(f"{current_path}: the runtime was flagged inaccurate "
                             f"({inaccurate.description}); refusing to make it the baseline")
        if baseline is not None:
            try:
                report = compare(baseline, current, tolerances, None, "", str(baseline_path), str(current_path))
                print(to_markdown(report, str(baseline_path), str(current_path)))
            except ValueError as e:
                print(f"note: not comparable with the old baseline ({e})", file=sys.stderr)
        if baseline_path.exists():
            write_text_atomic(_prev_path(baseline_path), baseline_path.read_text())
            print(f"previous baseline kept as {_prev_path(baseline_path)}")
        write_json_atomic(baseline_path, current.to_dict())
        print(f"baseline updated: {baseline_path} <- {current_path}")
        return 0

    if failed:
        print(f"error: parts of the current run failed: {failed}", file=sys.stderr)
        return 1
    if args.no_rerun:
        remeasure, reason = None, "--no-rerun given"
    elif current.config.get("backend_options", {}).get("check") == "runtime":
        remeasure, reason = None, "a check-runtime record (re-run `harmony-ref check-runtime`)"
    elif fresh or current.provenance.get("hostname") == socket.gethostname():
        remeasure, reason = remeasure_fn(current), ""
    else:
        remeasure, reason = None, (f"the record was made on {current.provenance.get('hostname')!r}, "
                                   f"this is {socket.gethostname()!r}")
    report = compare(baseline, current, tolerances, remeasure, reason, str(baseline_path), str(current_path))
    text = to_markdown(report, str(baseline_path), str(current_path))
    print(text, end="")
    if args.summary:
        write_text_atomic(args.summary, text)
    return report.exit_code
