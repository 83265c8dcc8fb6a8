"""`harmony-ref sweep`: a grid of run configs (models x policies x profiles x runtimes x
scenarios) measured
by the main job's parts on Dask (a LocalCluster here, or --scheduler), resumable; every point a
run record and a row of results/sweeps/<name>/points.parquet. With `--sessions phones/*.toml` a
device lab (sweep/lab.py): each config measured on the phones whose profile it names, one
benchmark per phone at a time, then one line per phone. Ends with one summary line."""

from __future__ import annotations

NAME = "sweep"
HELP = "measure a grid of configs on Dask, resumably, into results/sweeps/<name>/ (parquet)"

AXIS_FLAGS = (
    "models",
    "policies",
    "profiles",
    "runtimes",
    "parts",
    "backend",
    "prompt",
    "new",
    "context",
    "batch",
    "kv_dtype",
)


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_history_arguments, number
    from harmony_ref.commands._output import add_json_flag
    from harmony_ref.job.main import part_names

    p.add_argument("--name", required=True, help="the sweep: results/sweeps/NAME/")
    p.add_argument("--grid", metavar="TOML", help="a sweep TOML file (instead of the axis flags)")
    p.add_argument("--models", help="comma-separated model presets or spec TOML paths")
    p.add_argument("--policies", help="comma-separated policies")
    p.add_argument("--profiles", help="comma-separated device profiles (default: the shipped)")
    p.add_argument(
        "--runtimes",
        help="comma-separated runtime profiles, each run on every profile (default: each "
        "profile's own); a pair whose unit the SoC lacks is a failed point",
    )
    p.add_argument(
        "--parts",
        help=f"comma-separated parts of `run` (default predicted): {','.join(part_names())}",
    )
    p.add_argument("--backend", choices=("simulated", "host"), help="default simulated")
    p.add_argument("--prompt", help="prompt tokens, comma-separated (default 512)")
    p.add_argument("--new", help="new tokens, comma-separated (default 128)")
    p.add_argument("--context", help="context tokens, comma-separated (default 2048)")
    p.add_argument("--batch", help="batch sizes, comma-separated (default 1)")
    p.add_argument("--kv-dtype", help="KV cache dtypes, comma-separated: fp16,int8 (default fp16)")
    p.add_argument(
        "--sessions",
        nargs="+",
        metavar="TOML",
        help="a device lab: one session file per phone (hdc/adb); each config runs on the phones "
        "whose device.profile it names (--profiles default: theirs), one at a time per phone",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDR",
        help="a running Dask scheduler, tcp://HOST:8786 (default: a LocalCluster here)",
    )
    p.add_argument(
        "--workers",
        type=int,
        help="LocalCluster worker processes (default: one per "
        "core); 0 runs the points in this process",
    )
    p.add_argument(
        "--points-per-task",
        type=int,
        help="points per Dask task (default: cheap points batched, a few tasks per worker)",
    )
    p.add_argument(
        "--timeout-s",
        type=number(0, above=True),
        help="a task running longer fails its points and its worker is restarted (Dask only)",
    )
    p.add_argument(
        "--retry-failed", action="store_true", help="compute again the points that failed before"
    )
    p.add_argument("--out-dir", default="results/sweeps", help="default results/sweeps")
    add_history_arguments(p)
    add_json_flag(p)


def grid_from_args(args, profiles: tuple[str, ...] = ()):
    """The grid of the flags or --grid file; `profiles`: the default profiles (the shipped)."""
    from harmony_ref.sweep.grid import DEFAULT_SCENARIO, Grid, grid_from_toml, split_list

    given = [f for f in AXIS_FLAGS if getattr(args, f) is not None]
    if args.grid:
        if given:
            raise ValueError(
                f"--grid {args.grid}: give the grid in the file or as flags, not both "
                f"(--{given[0].replace('_', '-')} given)"
            )
        return grid_from_toml(args.grid)
    for flag in ("models", "policies"):
        if getattr(args, flag) is None:
            raise ValueError(f"--{flag}: missing (or give --grid FILE)")
    from harmony_ref.device.soc import shipped_profiles

    scenario = dict(DEFAULT_SCENARIO)
    for flag, axis in (
        ("prompt", "prompt_tokens"),
        ("new", "new_tokens"),
        ("context", "context_tokens"),
        ("batch", "batch"),
    ):
        if getattr(args, flag) is not None:
            scenario[axis] = split_list(getattr(args, flag), f"--{flag}", int)
    if args.kv_dtype is not None:
        scenario["kv_dtype"] = split_list(args.kv_dtype, "--kv-dtype")
    profiles = (
        split_list(args.profiles, "--profiles")
        if args.profiles
        else (profiles or tuple(shipped_profiles()))
    )
    parts = split_list(args.parts, "--parts") if args.parts else ("predicted",)
    return Grid(
        split_list(args.models, "--models"),
        split_list(args.policies, "--policies"),
        profiles,
        parts,
        args.backend or "simulated",
        scenario,
        source="flags",
        runtimes=split_list(args.runtimes, "--runtimes") if args.runtimes else (),
    )


def run(args) -> int:
    from harmony_ref.commands._output import print_json
    from harmony_ref.sweep.store import SweepStore, check_name

    check_name(args.name)
    if args.workers is not None and args.workers < 0:
        raise ValueError(f"--workers {args.workers}: must be >= 0 (0: in this process, no Dask)")
    if args.points_per_task is not None and args.points_per_task < 1:
        raise ValueError(f"--points-per-task {args.points_per_task}: must be >= 1")
    if args.scheduler and args.workers is not None:
        raise ValueError("--workers applies to the LocalCluster; a --scheduler has its own workers")
    grid = lab_from_args(args)
    from harmony_ref.commands._args import open_history_arguments

    SweepStore(args.name, args.out_dir).check_outputs()  # before any point runs or any history
    history, sut = open_history_arguments(args, args.out_dir)
    store = SweepStore(args.name, args.out_dir, history, sut)
    from harmony_ref.sweep.run import check_scheduler_address, run_sweep

    if args.scheduler:
        check_scheduler_address(args.scheduler)
    summary = run_sweep(
        grid,
        store,
        workers=args.workers,
        scheduler=args.scheduler,
        retry_failed=args.retry_failed,
        show_progress=not args.json,
        batch_size=args.points_per_task,
        timeout_s=args.timeout_s,
    )
    if args.json:
        print_json(summary.to_dict())
    else:
        for line in summary.phone_lines():
            print(line)
        print(summary.line())
    return 1 if summary.failed else 0


def lab_from_args(args):
    """The grid, or a device lab when phones are given (--sessions or the grid file's
    `sessions`): the grid on them, --profiles defaulting to the phones'."""
    from harmony_ref.sweep.lab import Lab, load_phones

    grid = None if args.sessions else grid_from_args(args)
    if grid is not None and not grid.sessions:
        return grid
    if args.workers not in (None, 0):
        raise ValueError(
            f"--workers {args.workers}: a lab has one worker per phone (--sessions); "
            "0 runs its points here, one after another"
        )
    if args.backend is not None:
        raise ValueError(f"--backend {args.backend}: with --sessions the phones measure")
    if args.sessions and args.grid and grid_from_args(args).sessions:
        raise ValueError(
            f"--sessions: {args.grid} lists sessions too; give the phones in one place"
        )
    phones = load_phones(args.sessions or grid.sessions)
    grid = grid or grid_from_args(args, tuple(dict.fromkeys(p.profile for p in phones)))
    return Lab(grid, phones)
