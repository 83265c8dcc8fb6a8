"""The LM accuracy table (README): perplexity, ratio to FP32, KLD mean / p99 and top-1 agreement
of each policy against the FP32 reference on the shipped held-out corpus, llama-perplexity's rule.

    python tools/lm_accuracy.py [--model smollm2-135m] [--context 512] [--json out.json]

`--sensitivity int4-g32`: one row per Linear type quantized alone (the rest FP32).
Variants: fp32, int8, int4-g128, int4-g32, mixed (each with the fp16 KV cache), then fp32 and
int4-g32 with the int8 KV cache. Prints a Markdown table with the corpus size and context, and
the seconds each took. The README's table is made by `harmony-ref accuracy --markdown` (the same
scoring, with the FP32 reference cached on disk) and sensitivity by `harmony-ref sensitivity
--model smollm2-135m`; this script stays for timing all variants in one process.
"""

from __future__ import annotations

import argparse
import json
import time

from harmony_ref.eval.lm import evaluate_lm, load_corpus
from harmony_ref.runtime.loader import load_decoder

VARIANTS = [
    ("fp32", "fp16"),
    ("int8", "fp16"),
    ("int4-g128", "fp16"),
    ("int4-g32", "fp16"),
    ("mixed", "fp16"),
    ("fp32", "int8"),
    ("int4-g32", "int8"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--json")
    ap.add_argument(
        "--corpus",
        choices=["heldout", "calibration"],
        default=None,
        help="corpus part (default: heldout; --sensitivity: calibration, since "
        "sensitivity feeds planning and held-out text must not)",
    )
    ap.add_argument("--variants", nargs="*", help="policy[:kv] (default: the table's seven)")
    ap.add_argument(
        "--sensitivity",
        metavar="FMT",
        help="instead: each Linear type alone in FMT (e.g. int4-g32), the rest FP32",
    )
    args = ap.parse_args()
    variants = VARIANTS
    if args.sensitivity:
        from harmony_ref.eval.lm import one_type_policies

        variants = one_type_policies(args.sensitivity)
    elif args.variants:
        variants = [tuple((v + ":fp16").split(":")[:2]) for v in args.variants]
    w, tok = load_decoder(args.model)
    part = args.corpus or ("calibration" if args.sensitivity else "heldout")
    ids = tok.encode(load_corpus(part))
    t0 = time.perf_counter()
    r = evaluate_lm(
        w,
        ids,
        args.context,
        variants,
        progress=lambda a, b: print(f"chunk {a}/{b} {time.perf_counter() - t0:.0f} s", flush=True),
    )
    r["seconds"] = time.perf_counter() - t0
    r["model"] = args.model
    print(
        f"\n{args.model}, {part} corpus {r['tokens']} tokens, {r['chunks']} chunks of "
        f"context {r['context']}, {r['chunks'] * r['scored_tokens_per_chunk']} scored tokens "
        f"({r['seconds']:.0f} s for {len(variants)} variants + reference)\n"
    )
    print("| policy | KV | PPL | PPL / FP32 | KLD mean | KLD p99 | top-1 % |")
    print("|---|---|---|---|---|---|---|")
    for name, s in r["results"].items():
        policy, _, kv = name.partition("+kv-")
        print(
            f"| {policy} | {kv or ('fp32' if name == 'reference' else 'fp16')} | {s['ppl']:.3f} "
            f"| {s['ppl_ratio']:.4f} | {s['kld_mean']:.4f} | {s['kld_p99']:.4f} | "
            f"{s['top1_agreement_pct']:.1f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)


if __name__ == "__main__":
    main()
