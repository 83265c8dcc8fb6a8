"""`harmony-ref sensitivity`: each layer group alone in a format (the others FP32), ranked by the
loss it causes: on a decoder (default smollm2-135m, or a checkpoint) by KL divergence to the FP32
reference on the calibration corpus, per Linear type or per block (eval/lm_sensitivity.py), in a
weight format, as W8A8 (`--weight-format w8a8[-per-tensor|-per-channel|-smooth]`) or pruned instead
(`--prune ffn=0.1`, `--prune heads=0.25`, `--prune-score l1|activation`); on
`--model all-minilm-l6` per Linear by cosine loss (eval/sensitivity.py)."""

from __future__ import annotations

NAME = "sensitivity"
HELP = (
    "rank layer types / blocks (decoder, by KLD) or MiniLM's Linears (by cosine loss) by the "
    "loss each causes alone in INT4 (or --weight-format)"
)
MINILM = "all-minilm-l6"


def add_arguments(p) -> None:
    from harmony_ref.commands._args import (
        add_checkpoint_argument,
        add_renamed,
        add_scoring_arguments,
    )
    from harmony_ref.commands._output import add_json_flag

    add_checkpoint_argument(p, minilm=MINILM)
    add_renamed(
        p,
        "--weight-format",
        default=None,
        help="weight format to put one group at a time in (default int4-g32); decoder: "
        "also w8a8 (= w8a8-per-channel), w8a8-per-tensor, w8a8-smooth (int8 "
        "weights and static int8 activations calibrated on the calibration part)",
    )
    p.add_argument(
        "--prune",
        metavar="KIND=RATIO",
        default=None,
        help="decoder: prune instead of quantizing (FP32 weights): ffn=R and/or "
        "heads=R; --by type: rows ffn / heads (every block), --by block: one "
        "block at a time",
    )
    p.add_argument(
        "--prune-score",
        choices=["l1", "activation"],
        default=None,
        help="decoder, with --prune: L1 weight norms (default) or activation-aware "
        "(||activation|| on calibration windows x L1 of the unit's output)",
    )
    p.add_argument(
        "--method",
        choices=["rtn", "gptq", "awq"],
        default=None,
        help="decoder: how the group's int4 / int8 weights are fitted: round to "
        "nearest (default), GPTQ or AWQ, calibrated on the calibration part's "
        "unscored tokens ([quantize] defaults)",
    )
    p.add_argument(
        "--by",
        choices=["type", "block"],
        default=None,
        help="decoder: one Linear type across blocks (default), or one block",
    )
    add_scoring_arguments(p, chunks_of="the calibration part")
    p.add_argument("--top", type=int, default=0, help="show only the N most sensitive")
    p.add_argument("--pairs", metavar="TSV", help=f"{MINILM}: evaluation pairs (default: shipped)")
    add_json_flag(p)


def run(args) -> int:
    from harmony_ref.commands._args import spelled
    from harmony_ref.eval.lm_sensitivity import parse_prune
    from harmony_ref.quant.policy import parse_format

    flag = spelled(args, "weight_format", "--weight-format")
    if args.top < 0:
        raise ValueError(f"--top must be >= 0, got {args.top}")
    if args.model.lower() == MINILM:
        if args.by or args.chunks is not None or args.context != 512:
            raise ValueError(f"--by/--chunks/--context apply to a decoder, not --model {MINILM}")
        if args.prune or args.prune_score or args.method:
            raise ValueError(
                f"--prune/--prune-score/--method apply to a decoder, not --model {MINILM}"
            )
        if str(args.weight_format or "").lower().startswith("w8a8"):
            raise ValueError(
                f"{flag} {args.weight_format}: W8A8 sensitivity applies to a decoder, "
                f"not --model {MINILM}"
            )
        return run_minilm(args, parse_format(args.weight_format or "int4-g32", flag))
    if args.pairs:
        raise ValueError(f"--pairs applies to --model {MINILM} only")
    if args.prune_score and not args.prune:
        raise ValueError("--prune-score applies with --prune only")
    if args.prune:
        if args.method:
            raise ValueError(
                f"--method {args.method} fits quantized weights: --prune measures "
                "pruning alone (FP32 weights)"
            )
        if args.weight_format:
            raise ValueError(
                f"--prune measures pruning alone (FP32 weights): drop {flag} {args.weight_format}"
            )
        args.prune_ratios = parse_prune(args.prune)
        return run_decoder(args, "fp32")
    args.prune_ratios = None
    return run_decoder(args, args.weight_format or "int4-g32", flag)


def run_decoder(args, fmt: str, flag: str = "--weight-format") -> int:
    import pandas as pd

    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.commands.accuracy import progress_run
    from harmony_ref.eval.lm_sensitivity import lm_sensitivity, parse_variant, variant_name
    from harmony_ref.runtime.loader import resolve_model_path
    from harmony_ref.units import MB

    name = variant_name(*parse_variant(fmt, flag))
    from harmony_ref.eval.lm import check_scoring

    check_scoring(args.context, args.chunks)
    resolve_model_path(args.model)
    by = args.by or "type"
    prune, score = args.prune_ratios, args.prune_score or "l1"
    method = args.method or "rtn"
    what = (
        f"pruned {', '.join(f'{k} {v:g}' for k, v in prune.items())} by {score}"
        if prune
        else f"in {name}" + ("" if method == "rtn" else f" by {method.upper()}")
    )
    rows = progress_run(
        lambda progress: lm_sensitivity(
            args.model,
            name,
            by,
            args.context,
            args.chunks,
            progress,
            prune=prune,
            prune_score=score,
            method=method,
        ),
        args.json,
        f"sensitivity: each {by} alone {what}",
    )
    df = pd.DataFrame(rows).sort_values("kld_mean", ascending=False, kind="stable")
    df.insert(0, "rank", range(1, len(df) + 1))
    if args.top:
        df = df.head(args.top)
    scored = f"calibration corpus ({rows[0]['corpus']}), {rows[0]['scored_tokens']} scored tokens"
    if args.json:
        extra = {"prune": prune, "prune_score": score} if prune else {"method": method}
        print_json(
            {
                "model": args.model,
                "format": rows[0]["format"],
                **extra,
                "by": by,
                "ranked_by": "kld_mean",
                "scored_on": scored,
                "groups": df.to_dict(orient="records"),
            }
        )
        return 0
    df = df.assign(saved_mb=(df["bytes_fp32"] - df["bytes"]) / MB)
    cols = ["rank", "group", "kld_mean", "kld_p99", "ppl_ratio", "top1_agreement_pct", "saved_mb"]
    rest = "FP32 weights" if prune else "the rest FP32"
    print_table(
        df[cols],
        title=f"{args.model}: one {by} at a time {what}, {rest}; "
        f"scored on the {scored}, context {args.context}",
    )
    print(
        "kld: KL(FP32 || policy) per scored token, in nats, against the checkpoint's weights "
        "dequantized exactly; the held-out corpus is not used (it scores plans)."
    )
    unscored = (
        "calibrated on the corpus tokens these rows never score (each chunk's context "
        "half and the tail; 10 windows of 128 tokens)"
    )
    if prune:
        print(
            "pruned without fine-tuning (the drop before the recovery training the literature "
            "prescribes); saved_mb: the group's FP32 Linears, unpruned minus pruned shapes."
        )
        if score == "activation":
            print(f"activation score {unscored}.")
    elif method != "rtn":
        print(
            f"{method}: weights fitted ([quantize] defaults) on the corpus tokens these rows "
            "never score (each chunk's context half and the tail; 16 windows of 128 tokens)."
        )
    elif name.startswith("w8a8"):
        print(f"w8a8: static activation scales ([activations] defaults) {unscored}.")
    return 0


def run_minilm(args, fmt) -> int:
    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.eval.embedding import load_pairs
    from harmony_ref.eval.sensitivity import sensitivity
    from harmony_ref.units import MB

    evalset = load_pairs(args.pairs)
    df = sensitivity(fmt.name, evalset=evalset, progress=True)
    if args.top:
        df = df.head(args.top)
    if args.json:
        print_json(
            {"format": fmt.name, "ranked_by": "cosine_loss", "layers": df.to_dict(orient="records")}
        )
        return 0
    df = df.assign(saved_mb=(df["bytes_fp32"] - df["bytes"]) / MB)
    cols = [
        "rank",
        "layer",
        "cosine_loss",
        "cosine_min",
        "accuracy_drop_pct",
        "drop_rank",
        "top1_agreement_pct",
        "saved_mb",
    ]
    print_table(df[cols], title=f"one Linear at a time in {fmt.name}, all others FP32")
    print(
        "rank: by cosine_loss = 1 - mean cosine to FP32 embeddings (continuous); drop_rank: by "
        "accuracy_drop_pct (recall@1 points, coarse: one sentence = "
        f"{100 / len(evalset.sentences):.2f} points here)."
    )
    return 0
