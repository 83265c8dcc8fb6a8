"""`harmony-ref sensitivity`: each Linear of all-MiniLM-L6-v2 alone in a format (the others FP32),
ranked by the loss it causes (continuous cosine loss, recall drop beside it)."""

from __future__ import annotations

NAME = "sensitivity"
HELP = "rank MiniLM's Linear layers by the accuracy loss each causes alone in INT4 (or --format)"


def add_arguments(p) -> None:
    from harmony_ref.commands._output import add_json_flag

    p.add_argument("--format", default="int4-g32",
                   help="format to put one layer at a time in (default int4-g32)")
    p.add_argument("--top", type=int, default=0, help="show only the N most sensitive layers")
    p.add_argument("--pairs", metavar="TSV", help="evaluation pairs (default: the shipped set)")
    add_json_flag(p)


def run(args) -> int:
    from harmony_ref.eval.embedding import load_pairs
    from harmony_ref.eval.sensitivity import sensitivity
    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.quant.policy import parse_format
    from harmony_ref.units import MB

    fmt = parse_format(args.format, "--format")
    if args.top < 0:
        raise ValueError(f"--top must be >= 0, got {args.top}")
    evalset = load_pairs(args.pairs)
    df = sensitivity(fmt.name, evalset=evalset, progress=True)
    if args.top:
        df = df.head(args.top)
    if args.json:
        print_json({"format": fmt.name, "ranked_by": "cosine_loss",
                    "layers": df.to_dict(orient="records")})
        return 0
    df = df.assign(saved_mb=(df["bytes_fp32"] - df["bytes"]) / MB)
    cols = ["rank", "layer", "cosine_loss", "cosine_min", "accuracy_drop_pct", "drop_rank",
            "top1_agreement_pct", "saved_mb"]
    print_table(df[cols], title=f"one Linear at a time in {fmt.name}, all others FP32")
    print("rank: by cosine_loss = 1 - mean cosine to FP32 embeddings (continuous); drop_rank: by "
          "accuracy_drop_pct (recall@1 points, coarse: one sentence = "
          f"{100 / len(evalset.sentences):.2f} points here).")
    return 0
