"""`harmony-ref accuracy`: accuracy drop of quantization policies on the real all-MiniLM-L6-v2
weights (cosine to FP32, paraphrase recall@1, drop in points); see harmony_ref/eval/embedding.py."""

from __future__ import annotations

NAME = "accuracy"
HELP = "accuracy drop of a policy on real all-MiniLM-L6-v2 weights (recall@1, cosine to FP32)"
COLUMNS = ["weights_mb", "linear_weights_mb", "cosine_mean", "cosine_min", "cosine_p5",
           "recall_at_1", "accuracy_drop_pct", "top1_agreement_pct"]


def add_arguments(p) -> None:
    from harmony_ref.commands._output import add_json_flag

    p.add_argument("--policy", action="append", metavar="P",
                   help="shipped policy name or policy TOML path; repeat to compare several "
                        "(default: int4-g32)")
    p.add_argument("--artifact", metavar="FILE",
                   help="evaluate an exported artifact (verified on load) instead of a policy")
    p.add_argument("--pairs", metavar="TSV", help="evaluation pairs (default: the shipped set)")
    p.add_argument("--backend", choices=["auto", "kernels", "dequant"], default="auto",
                   help="int8/int4 matmuls: harmony_ref.kernels (int8 activations too), or "
                        "dequantize + float32 matmul (weight-only error); default auto")
    add_json_flag(p)


def run(args) -> int:
    import pandas as pd

    from harmony_ref.eval.embedding import evaluate, load_pairs
    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.runtime.minilm import real_model

    evalset = load_pairs(args.pairs)
    model = real_model(args.backend)
    results = {}
    if args.artifact:
        from harmony_ref.runtime.minilm import MiniLM

        art = MiniLM.from_artifact(args.artifact, linear_backend=args.backend)
        results[args.artifact] = evaluate(model=model, evalset=evalset, artifact_model=art)
    policies = args.policy or ([] if args.artifact else ["int4-g32"])
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"encoding {len(evalset.sentences)} sentences per policy",
                            total=len(policies))
        for policy in policies:
            results[policy] = evaluate(policy, model=model, evalset=evalset)
            bar.advance(task)
    fp32_recall = next(iter(results.values())).value("recall_at_1_fp32")
    if args.json:
        print_json({"model": "all-MiniLM-L6-v2", "pairs": evalset.source,
                    "linear_backend": model.resolved_backend(),
                    "sentences": len(evalset.sentences),
                    "policies": {k: m.to_dict() for k, m in results.items()}})
        return 0
    df = pd.DataFrame([{"policy": k, **{c: m.value(c) for c in COLUMNS}} for k, m in results.items()])
    print_table(df, title=f"all-MiniLM-L6-v2 on {len(evalset.sentences)} sentences "
                          f"({len(evalset.sentences) // 2} paraphrase pairs); "
                          f"FP32 recall@1 = {fp32_recall:.2f} %; int8/int4 matmuls: "
                          f"{model.resolved_backend()}")
    print("cosine: of each sentence's embedding to its FP32 embedding; recall_at_1 (%): the "
          "paraphrase is the nearest neighbour; accuracy_drop_pct: FP32 recall@1 minus the "
          "policy's, in points; weights_mb: Linears in the policy's formats + FP32 embeddings.")
    return 0
