"""`harmony-ref plan --budget-mb X`: per-layer formats for all-MiniLM-L6-v2 that minimise the
measured loss within a weight budget, printed as a policy TOML (method: harmony_ref/eval/plan.py)."""

from __future__ import annotations

NAME = "plan"
HELP = "choose per-layer formats (fp16/int8/int4) minimising measured loss within --budget-mb"


def add_arguments(p) -> None:
    from harmony_ref.commands._output import add_json_flag

    p.add_argument("--budget-mb", type=float, required=True,
                   help="budget for the Linear weights in MB (1e6 bytes), scales included")
    p.add_argument("--out", metavar="TOML", help="also write the policy to this file (atomically)")
    p.add_argument("--pairs", metavar="TSV", help="evaluation pairs (default: the shipped set)")
    add_json_flag(p)


def run(args) -> int:
    from pathlib import Path

    from harmony_ref.eval.embedding import evaluate, load_pairs
    from harmony_ref.eval.plan import PLANNER_FORMATS, plan_policy
    from harmony_ref.commands._output import print_json
    from harmony_ref._io import write_text_atomic
    from harmony_ref.units import MB

    if args.out:  # before minutes of measuring
        from harmony_ref._io import check_output_file

        check_output_file(args.out, "--out")
    evalset = load_pairs(args.pairs)
    plan = plan_policy(args.budget_mb, evalset=evalset, progress=True)
    m = evaluate(plan.policy, evalset=evalset)
    toml = plan.policy.to_toml()
    if args.out:
        write_text_atomic(args.out, toml)
    counts = {f: sum(1 for c in plan.choices.values() if c == f) for f in PLANNER_FORMATS}
    summary = {
        "budget_mb": args.budget_mb,
        "linear_weights_mb": plan.linear_bytes / MB,
        "weights_mb": m.value("weights_mb"),
        "predicted_cosine_loss": plan.predicted_cosine_loss,
        "measured_cosine_loss": 1.0 - m.value("cosine_mean"),
        "cosine_min": m.value("cosine_min"),
        "recall_at_1": m.value("recall_at_1"),
        "recall_at_1_fp32": m.value("recall_at_1_fp32"),
        "accuracy_drop_pct": m.value("accuracy_drop_pct"),
        "layers_per_format": counts,
    }
    if args.json:
        print_json({"policy_toml": toml, "choices": plan.choices, **summary})
        return 0
    print(toml, end="")
    print()
    print(f"# planned within {args.budget_mb:g} MB: Linear weights {summary['linear_weights_mb']:.3f} MB "
          f"(all weights {summary['weights_mb']:.2f} MB with FP32 embeddings)")
    print("# layers per format: " + ", ".join(f"{f} {n}" for f, n in counts.items()))
    print(f"# cosine loss: predicted {summary['predicted_cosine_loss']:.5f} (sum of layers alone), "
          f"measured {summary['measured_cosine_loss']:.5f}; cosine_min {summary['cosine_min']:.4f}")
    print(f"# recall@1 {summary['recall_at_1']:.2f} % vs FP32 {summary['recall_at_1_fp32']:.2f} %: "
          f"accuracy_drop_pct {summary['accuracy_drop_pct']:.2f} points")
    if args.out:
        print(f"# written to {args.out}")
    return 0
