"""`harmony-ref accuracy`: what quantization costs a model in quality.

- a decoder (default `--model smollm2-135m`, or a .gguf file / HF directory): perplexity, its ratio
  to FP32, KL divergence mean / p99 and top-1 agreement against the FP32 reference (the
  checkpoint's weights dequantized exactly), llama-perplexity's rule (harmony_ref/eval/lm.py);
- `--model FILE.pte` (an ExecuTorch program from `export --format pte`, the executorch extra):
  the program's logits scored the same way against the FP32 reference of the checkpoint it was
  exported from (its manifest names it), beside our kernels' row for its policy (or --policy);
- `--model all-minilm-l6`: the sentence-embedding accuracy of the real all-MiniLM-L6-v2 weights
  (cosine to FP32, paraphrase recall@1, drop in points; harmony_ref/eval/embedding.py).
"""

from __future__ import annotations

NAME = "accuracy"
HELP = (
    "accuracy of policies on a real model: LM perplexity/KLD (SmolLM2 or a checkpoint), or "
    "MiniLM recall@1 (--model all-minilm-l6)"
)
MINILM = "all-minilm-l6"
COLUMNS = [
    "weights_mb",
    "linear_weights_mb",
    "cosine_mean",
    "cosine_min",
    "cosine_p5",
    "recall_at_1",
    "accuracy_drop_pct",
    "top1_agreement_pct",
]


def add_arguments(p) -> None:
    from harmony_ref.commands._args import add_checkpoint_argument, add_scoring_arguments
    from harmony_ref.commands._output import add_json_flag

    add_checkpoint_argument(p, minilm=MINILM)
    p.add_argument(
        "--policy",
        action="append",
        metavar="P",
        help="shipped policy name or policy TOML path; repeat to compare several "
        "(default: int4-g32)",
    )
    p.add_argument(
        "--corpus",
        metavar="FILE",
        help="decoder: score this UTF-8 text file instead of the shipped held-out corpus "
        "(read up to its first 4 MB, and tokenized only as far as --chunks needs)",
    )
    add_scoring_arguments(p)
    p.add_argument(
        "--kv-dtype",
        action="append",
        choices=["fp16", "int8"],
        default=None,
        help="decoder: KV cache dtype; repeat for both (default fp16)",
    )
    p.add_argument(
        "--artifact",
        metavar="FILE",
        help=f"{MINILM}: evaluate an exported artifact (verified on load)",
    )
    p.add_argument("--pairs", metavar="TSV", help=f"{MINILM}: evaluation pairs (default: shipped)")
    p.add_argument(
        "--backend",
        choices=["auto", "kernels", "dequant"],
        default=None,
        help=f"{MINILM}: int8/int4 matmuls through harmony_ref.kernels (int8 "
        "activations too), or dequantize + float32 matmul; default auto",
    )
    p.add_argument(
        "--markdown",
        action="store_true",
        help="decoder: print the table as Markdown (the README's form)",
    )
    from harmony_ref.commands._args import add_allow_unmatched

    add_allow_unmatched(p)
    add_json_flag(p)


def run(args) -> int:
    if args.model.lower() == MINILM:
        for flag in ("corpus", "chunks", "kv_dtype"):
            if getattr(args, flag) is not None:
                raise ValueError(
                    f"--{flag.replace('_', '-')} applies to a decoder model, not --model {MINILM}"
                )
        if args.context != 512:
            raise ValueError(f"--context applies to a decoder model, not --model {MINILM}")
        return run_minilm(args)
    for flag in ("artifact", "pairs", "backend"):
        if getattr(args, flag) is not None:
            raise ValueError(
                f"--{flag} applies to --model {MINILM} only (got --model {args.model})"
            )
    return run_decoder(args)


def run_decoder(args) -> int:
    import pandas as pd

    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.eval.lm import check_scoring
    from harmony_ref.eval.lm_accuracy import Corpus, lm_accuracy
    from harmony_ref.runtime.loader import resolve_model_path

    check_scoring(args.context, args.chunks)
    corpus = Corpus.from_file(args.corpus) if args.corpus else Corpus.shipped("heldout")
    model, programs, default_policy = args.model, [], "int4-g32"
    if args.model.endswith(".pte"):
        from harmony_ref.runtime.pte import program_for_scoring

        model, program = program_for_scoring(args.model, args.context)
        default_policy = program.manifest["policy"]
        programs = [(program, default_policy, "executorch-xnnpack")]
    resolve_model_path(model)  # a bad --model fails before anything is loaded
    from harmony_ref.commands._args import check_policies
    from harmony_ref.runtime.loader import checkpoint_spec

    policies = args.policy or [default_policy]
    check_policies(policies, checkpoint_spec(model), args.allow_unmatched)
    variants = [(p, kv) for p in policies for kv in (args.kv_dtype or ["fp16"])]
    acc = progress_run(
        lambda progress: lm_accuracy(
            model, variants, corpus, args.context, args.chunks, progress, programs=programs
        ),
        args.json,
        f"scoring {len(variants)} variant(s) + the FP32 reference",
    )
    if args.json:
        print_json(acc.to_dict())
        return 0
    if args.markdown:
        from harmony_ref.eval.lm_accuracy import MARKDOWN_HEADER, markdown_rows

        print(acc.title() + "\n")
        print(MARKDOWN_HEADER)
        print("\n".join(markdown_rows(acc.to_dict())))
        return 0
    df = pd.DataFrame(acc.rows())
    print_table(df, title=acc.title())
    print(
        "ppl_ratio: PPL / the FP32 reference's; kld: KL(FP32 || policy) per scored token, in "
        "nats; top1_agreement_pct: scored tokens whose argmax equals the reference's."
    )
    return 0


def progress_run(work, quiet: bool, what: str):
    """Run work(progress) under a rich progress bar on stderr (chunks done / total, and the long
    steps of building each model: generated calibration windows, Gram and GPTQ/AWQ passes)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=quiet,
    ) as bar:
        from harmony_ref.runtime.progress import reporting

        task = bar.add_task(f"{what}: loading the model", total=None)

        def progress(done, total):
            bar.update(task, completed=done, total=total, description=f"{what}: chunks")

        def step(name, done, total):  # the long steps of a model build (runtime/progress.py)
            bar.update(task, completed=done, total=total, description=f"{what}: {name}")

        with reporting(step):
            return work(progress)


def run_minilm(args) -> int:
    import pandas as pd

    from harmony_ref.commands._output import print_json, print_table
    from harmony_ref.eval.embedding import evaluate, load_pairs
    from harmony_ref.runtime.minilm import real_model

    backend = args.backend or "auto"
    from harmony_ref.commands._args import check_policies
    from harmony_ref.model.spec import get_spec

    check_policies(args.policy or [], get_spec(MINILM), args.allow_unmatched)
    evalset = load_pairs(args.pairs)
    model = real_model(backend)
    results = {}
    if args.artifact:
        from harmony_ref.runtime.minilm import MiniLM

        art = MiniLM.from_artifact(args.artifact, linear_backend=backend)
        results[args.artifact] = evaluate(model=model, evalset=evalset, artifact_model=art)
    policies = args.policy or ([] if args.artifact else ["int4-g32"])
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(
            f"encoding {len(evalset.sentences)} sentences per policy", total=len(policies)
        )
        for policy in policies:
            results[policy] = evaluate(policy, model=model, evalset=evalset)
            bar.advance(task)
    fp32_recall = next(iter(results.values())).value("recall_at_1_fp32")
    if args.json:
        print_json(
            {
                "model": "all-MiniLM-L6-v2",
                "pairs": evalset.source,
                "linear_backend": model.resolved_backend(),
                "sentences": len(evalset.sentences),
                "policies": {k: m.to_dict() for k, m in results.items()},
            }
        )
        return 0
    df = pd.DataFrame(
        [{"policy": k, **{c: m.value(c) for c in COLUMNS}} for k, m in results.items()]
    )
    print_table(
        df,
        title=f"all-MiniLM-L6-v2 on {len(evalset.sentences)} sentences "
        f"({len(evalset.sentences) // 2} paraphrase pairs); "
        f"FP32 recall@1 = {fp32_recall:.2f} %; int8/int4 matmuls: "
        f"{model.resolved_backend()}",
    )
    print(
        "cosine: of each sentence's embedding to its FP32 embedding; recall_at_1 (%): the "
        "paraphrase is the nearest neighbour; accuracy_drop_pct: FP32 recall@1 minus the "
        "policy's, in points; weights_mb: Linears in the policy's formats + FP32 embeddings."
    )
    return 0
