"""`harmony-ref plan --budget-mb X`: per-layer formats that minimise the measured loss within a
weight budget, printed as a policy TOML: on a decoder (default smollm2-135m, or a checkpoint)
per Linear type by KLD on the calibration corpus, the plan then scored on the held-out corpus
(eval/lm_plan.py), optionally with pruning choices (`--prune-ffn`, `--prune-heads`,
`--prune-score`) and as a W8A8 model (`--activations`); on `--model all-minilm-l6` per Linear by
cosine loss (eval/plan.py)."""

from __future__ import annotations

import math

NAME = "plan"
HELP = "choose per-layer formats (fp16/int8/int4) minimising measured loss within --budget-mb"


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_checkpoint_argument, add_scoring_arguments
    from harmony_ref.commands._output import add_json_flag

    add_checkpoint_argument(p, minilm="all-minilm-l6")
    p.add_argument(
        "--budget-mb",
        type=float,
        required=True,
        help="budget for the Linear weights in MB (1e6 bytes), scales included",
    )
    add_scoring_arguments(p, chunks_of="each corpus part")
    p.add_argument(
        "--formats",
        metavar="F,F,...",
        default=None,
        help="decoder: the formats to choose among (default fp16,int8,int4-g128,"
        "int4-g32); GGUF's q4_0,q4_1,q8_0,f16 make a policy `export --format "
        "gguf` writes",
    )
    p.add_argument(
        "--prune-ffn",
        metavar="R,R,...",
        default=None,
        help="decoder: FFN pruning ratios to choose from, uniform across blocks "
        "(e.g. 0,0.1,0.25; default: no pruning)",
    )
    p.add_argument(
        "--prune-heads",
        metavar="R,R,...",
        default=None,
        help="decoder: head pruning ratios to choose from (e.g. 0,0.25)",
    )
    p.add_argument(
        "--prune-score",
        choices=["l1", "activation"],
        default=None,
        help="decoder: how pruned units are chosen (default l1)",
    )
    p.add_argument(
        "--activations",
        choices=["per-tensor", "per-channel", "smooth"],
        default=None,
        help="decoder: plan a W8A8 model: int8 measured with static activation "
        "scales of this granularity, the policy carries [activations]",
    )
    p.add_argument(
        "--methods",
        metavar="M,M,...",
        default=None,
        help="decoder: fitting methods the planner may pick per type and format "
        "(rtn, gptq, awq; default rtn): the knapsack chooses among (format, "
        "method) pairs, the policy carries [quantize.methods]",
    )
    p.add_argument("--out", metavar="TOML", help="also write the policy to this file (atomically)")
    p.add_argument("--pairs", metavar="TSV", help="evaluation pairs (default: the shipped set)")
    add_json_flag(p)


def run(args) -> int:
    if args.out:  # before minutes of measuring
        from harmony_ref._io import check_output_file

        check_output_file(args.out, "--out")
    compress = [
        f
        for f in ("prune_ffn", "prune_heads", "prune_score", "activations")
        if getattr(args, f) is not None
    ]
    if args.model.lower() != "all-minilm-l6":
        if args.pairs:
            raise ValueError("--pairs applies to --model all-minilm-l6 only")
        if args.prune_score and not (args.prune_ffn or args.prune_heads):
            raise ValueError("--prune-score applies with --prune-ffn / --prune-heads only")
        args.ffn_ratios = _ratio_list(args.prune_ffn, "--prune-ffn")
        args.head_ratios = _ratio_list(args.prune_heads, "--prune-heads")
        return run_decoder(args)
    if args.chunks is not None or args.context != 512:
        raise ValueError("--chunks/--context apply to a decoder, not --model all-minilm-l6")
    if args.formats is not None:
        raise ValueError("--formats applies to a decoder, not --model all-minilm-l6")
    if compress:
        flag = "--" + compress[0].replace("_", "-")
        raise ValueError(f"{flag} applies to a decoder, not --model all-minilm-l6")
    return run_minilm(args)


def _ratio_list(text: str | None, where: str) -> tuple[float, ...]:
    if text is None:
        return (0.0,)
    out = []
    for part in text.split(","):
        try:
            r = float(part)
        except ValueError:
            raise ValueError(f"{where} {text!r}: {part.strip()!r} is not a number") from None
        if not 0 <= r < 1:
            raise ValueError(f"{where} {text!r}: ratio {r:g} must be in [0, 1)")
        out.append(r)
    return tuple(out)


def _method_list(text: str | None) -> tuple[str, ...]:
    """--methods "rtn,gptq" -> the methods, none given twice (lm_plan checks the names)."""
    out = tuple(m.strip() for m in (text or "rtn").split(","))
    dup = next((m for i, m in enumerate(out) if m in out[:i]), None)
    if dup:
        raise ValueError(f"--methods {text!r}: {dup} is given twice")
    return out


def _format_list(text: str | None) -> tuple[str, ...]:
    """--formats "q4_0,q4_1,q8_0,f16" -> canonical format names, each checked."""
    from harmony_ref.eval.plan import PLANNER_FORMATS
    from harmony_ref.quant.policy import parse_format

    if text is None:
        return PLANNER_FORMATS
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise ValueError(f"--formats {text!r}: give at least one format")
    out = []
    for name in names:
        fmt = parse_format(name, f"--formats {text!r}").name
        if fmt in out:
            raise ValueError(f"--formats {text!r}: {fmt} is given twice")
        out.append(fmt)
    return tuple(out)


def run_decoder(args) -> int:
    from harmony_ref._io import write_text_atomic
    from harmony_ref.commands._output import print_json
    from harmony_ref.commands.accuracy import progress_run
    from harmony_ref.eval.lm import check_scoring
    from harmony_ref.eval.lm_accuracy import Corpus, lm_accuracy
    from harmony_ref.eval.lm_plan import lm_plan
    from harmony_ref.units import MB

    check_scoring(args.context, args.chunks)
    if not (math.isfinite(args.budget_mb) and args.budget_mb > 0):  # before any progress bar
        raise ValueError(f"--budget-mb must be a finite number > 0, got {args.budget_mb!r}")
    formats = _format_list(args.formats)
    plan = progress_run(
        lambda progress: lm_plan(
            args.model,
            args.budget_mb,
            formats=formats,
            context=args.context,
            chunks=args.chunks,
            progress=progress,
            prune_ffn=args.ffn_ratios,
            prune_heads=args.head_ratios,
            prune_score=args.prune_score or "l1",
            activations=args.activations,
            methods=_method_list(args.methods),
        ),
        args.json,
        "plan: each Linear type alone in each format (calibration)",
    )
    acc = progress_run(
        lambda progress: lm_accuracy(
            args.model,
            [(plan.policy, "fp16")],
            Corpus.shipped("heldout"),
            args.context,
            max_chunks=args.chunks,
            progress=progress,
        ),
        args.json,
        "plan: scoring the planned policy (held-out)",
    )
    row = acc.rows()[1]
    toml = plan.policy.to_toml()
    if args.out:
        write_text_atomic(args.out, toml)
    summary = {
        "model": args.model,
        "budget_mb": args.budget_mb,
        "linear_weights_mb": plan.linear_bytes / MB,
        "predicted_kld_mean": plan.predicted_kld,
        "calibration_scored_tokens": plan.calibration_scored_tokens,
        "heldout": acc.title(),
        "heldout_kld_mean": row["kld_mean"],
        "heldout_kld_p99": row["kld_p99"],
        "heldout_ppl_ratio": row["ppl_ratio"],
        "heldout_top1_agreement_pct": row["top1_agreement_pct"],
        "formats_per_type": plan.choices,
    }
    if plan.methods:
        summary["methods_per_type"] = plan.methods
    pruning = plan.predicted_parts is not None
    if pruning:
        summary.update(
            prune=plan.prune,
            prune_score=args.prune_score or "l1",
            prune_ffn_choices=list(args.ffn_ratios),
            prune_heads_choices=list(args.head_ratios),
            predicted_kld_parts=plan.predicted_parts,
        )
    if plan.activations is not None:
        summary["activations"] = plan.activations.to_dict()
    if args.json:
        print_json({"policy_toml": toml, **summary})
        return 0
    print(toml, end="")
    print()
    print(
        f"# planned within {args.budget_mb:g} MB: Linear weights "
        f"{summary['linear_weights_mb']:.3f} MB (embedding table and norms FP32, not counted)"
    )
    print("# per type: " + ", ".join(f"{t} {f}" for t, f in plan.choices.items()))
    if pruning:
        chosen = ", ".join(f"{k} {v:g}" for k, v in plan.prune.items()) or "none"
        print(
            f"# pruning ({args.prune_score or 'l1'}, no fine-tuning): {chosen}; predicted KLD "
            "by group: " + ", ".join(f"{k} {v:.4f}" for k, v in plan.predicted_parts.items())
        )
    if plan.activations is not None:
        print(
            f"# W8A8: int8 Linears with static {plan.activations.granularity} activation "
            "scales (calibration part)"
        )
    print(
        f"# KLD mean: predicted {plan.predicted_kld:.4f} (sum of types alone, calibration "
        f"part, {plan.calibration_scored_tokens} scored tokens)"
    )
    print(f"# held out ({acc.title()}):")
    print(
        f"#   KLD mean {row['kld_mean']:.4f}, p99 {row['kld_p99']:.4f}, PPL / FP32 "
        f"{row['ppl_ratio']:.4f}, top-1 {row['top1_agreement_pct']:.1f} %"
    )
    if args.out:
        print(f"# written to {args.out}")
    return 0


def run_minilm(args) -> int:

    from harmony_ref._io import write_text_atomic
    from harmony_ref.commands._output import print_json
    from harmony_ref.eval.embedding import evaluate, load_pairs, split_pairs
    from harmony_ref.eval.plan import PLANNER_FORMATS, plan_policy
    from harmony_ref.units import MB

    # held out means held out: planned on the calibration pairs, scored on the others
    calibration, heldout = split_pairs(load_pairs(args.pairs))
    plan = plan_policy(args.budget_mb, evalset=calibration, progress=True)
    m = evaluate(plan.policy, evalset=heldout)
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
        "planned_on": calibration.source,
        "scored_on": heldout.source,
    }
    if args.json:
        print_json({"policy_toml": toml, "choices": plan.choices, **summary})
        return 0
    print(toml, end="")
    print()
    print(
        f"# planned within {args.budget_mb:g} MB: Linear weights {summary['linear_weights_mb']:.3f} MB "
        f"(all weights {summary['weights_mb']:.2f} MB with FP32 embeddings)"
    )
    print("# layers per format: " + ", ".join(f"{f} {n}" for f, n in counts.items()))
    print(f"# planned on {calibration.source}; scored on {heldout.source}, never planned on")
    print(
        f"# cosine loss: predicted {summary['predicted_cosine_loss']:.5f} (sum of layers alone, "
        f"calibration pairs), measured {summary['measured_cosine_loss']:.5f} (held-out pairs); "
        f"cosine_min {summary['cosine_min']:.4f}"
    )
    print(
        f"# held out: recall@1 {summary['recall_at_1']:.2f} % vs FP32 "
        f"{summary['recall_at_1_fp32']:.2f} %: "
        f"accuracy_drop_pct {summary['accuracy_drop_pct']:.2f} points"
    )
    if args.out:
        print(f"# written to {args.out}")
    return 0
