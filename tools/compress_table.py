"""Pruning x quantization on the real SmolLM2-135M: accuracy against the FP32 reference on the
corpus's held-out split (W8A8 scales calibrated on the calibration split, or on random ids),
measured host decode tokens/s, predicted phone decode tokens/s and prefill ms. Writes JSON;
`markdown` prints the README tables from it. And pruning x quantization on the real
all-MiniLM-L6-v2 (`minilm`): cosine to FP32, recall@1 drop, weights MB, predicted encode ms.

    python tools/compress_table.py accuracy --out acc.json    # under /work/bin/cpu (~20 min)
    python tools/compress_table.py speed --out speed.json     # under /work/bin/quiet (~2 min)
    python tools/compress_table.py predict speed.json         # predictions only, in place
    python tools/compress_table.py markdown acc.json speed.json
    python tools/compress_table.py minilm --out minilm.json   # under /work/bin/cpu (~3 min)
    python tools/compress_table.py minilm-markdown minilm.json

`predict` recomputes the predicted columns of a speed JSON from the device model as it is now
and keeps its measured host columns (a device-model change moves only the predictions).
Committed results: results/compress/smollm2_accuracy.json, results/compress/smollm2_speed.json,
results/compress/minilm_prune.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np

from harmony_ref.quant.policy import policy_from_dict

PRUNE = {  # label -> [prune] table
    "none": None,
    "ffn 0.1": {"ffn": 0.1},
    "ffn 0.25": {"ffn": 0.25},
    "ffn 0.5": {"ffn": 0.5},
    "heads 0.34 (6 of 9 query heads, 3 KV)": {"heads": 0.34},
}
QUANT = {  # label -> policy fields
    "fp32": {"default": "fp32"},
    "int8": {"default": "int8"},
    "int4-g32": {"default": "int4-g32"},
    "w8a8 per-channel": {
        "default": "int8",
        "activations": {
            "granularity": "per-channel",
            "calibration": "corpus",
            "samples": 10,
            "sample_tokens": 64,
        },
    },
}
CALIB = [  # the calibration study: (granularity, source, N)
    (g, src, n)
    for g in ("per-tensor", "per-channel")
    for src in ("corpus", "random")
    for n in (1, 10, 100)
]
CONTEXT, CHUNKS, SAMPLE_TOKENS = 512, 2, 64
PROFILES = ("harmony-flagship", "harmony-midrange", "harmony-lowend")
PREFILL_PROFILE = "harmony-flagship"  # the prefill column: where W8A8's INT8 rate shows
MINILM_PRUNE = {  # label -> [prune] table (12 heads, FFN 1536 per block)
    "none": None,
    "ffn 0.25": {"ffn": 0.25},
    "ffn 0.5": {"ffn": 0.5},
    "heads 0.25 (9 of 12)": {"heads": 0.25},
    "heads 0.5 (6 of 12)": {"heads": 0.5},
    "ffn 0.25 + heads 0.25": {"ffn": 0.25, "heads": 0.25},
}
MINILM_QUANT = ("fp32", "int8", "int4-g32")
MINILM_TOKENS = 128  # the encode the prediction column costs (one sentence batch of 128 tokens)


def policy(prune_label, quant_label, fast_calibration=False):
    fields = dict(QUANT[quant_label])
    if fast_calibration and "activations" in fields:  # speed runs: scales do not change speed
        fields["activations"] = dict(
            fields["activations"], calibration="random", samples=1, sample_tokens=8
        )
    if PRUNE[prune_label] is not None:
        fields["prune"] = PRUNE[prune_label]
    name = f"{quant_label} | {prune_label}"
    return policy_from_dict({"name": name, **fields}, f"<{name}>")


def calib_policy(g, src, n):
    name = f"w8a8 {g} {src} N={n}"
    return policy_from_dict(
        {
            "name": name,
            "default": "int8",
            "activations": {
                "granularity": g,
                "calibration": src,
                "samples": n,
                "sample_tokens": SAMPLE_TOKENS,
            },
        },
        f"<{name}>",
    )


def accuracy(args):
    from harmony_ref.eval.compress import evaluate_policies
    from harmony_ref.eval.lm import load_corpus
    from harmony_ref.runtime.loader import load_decoder

    w, tok = load_decoder("smollm2-135m")
    heldout = tok.encode(load_corpus("heldout"))
    pols = [calib_policy(*c) for c in CALIB] if args.part in ("calibration", "all") else []
    if args.part in ("table", "all"):
        pols += [policy(p, q) for p in PRUNE for q in QUANT]
    t0 = time.time()

    def progress(done, total, label, summary):
        print(
            f"[{time.time() - t0:7.1f} s] {done}/{total} {label}: PPL ratio "
            f"{summary['ppl_ratio']:.4f} KLD {summary['kld_mean']:.4f}",
            file=sys.stderr,
            flush=True,
        )

    out = evaluate_policies(w, heldout, pols, context=CONTEXT, max_chunks=CHUNKS, progress=progress)
    out.update(
        split="heldout (scored); W8A8 calibrated on the calibration split or random ids",
        sample_tokens=SAMPLE_TOKENS,
        cpu=platform.processor(),
    )
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


def speed(args):
    from harmony_ref._threads import set_threads
    from harmony_ref.compress import build_model
    from harmony_ref.model.prune import decoder_spec, pruned_spec
    from harmony_ref.runtime.loader import load_decoder

    # One thread for Numba and OpenBLAS alike (the harness's host default): with both pools at
    # 2 on the 2 cores, the FP32 rows' BLAS GEMVs ran ~25x slower (gate|up 8.2 ms vs 0.34 ms)
    # while Numba's idle workers held the cores, ~0.7-3 tokens/s instead of ~17.
    threads_note = set_threads(args.threads)
    w, _ = load_decoder("smollm2-135m")
    base = decoder_spec(w.config)
    labels = [(p, q) for p in PRUNE for q in QUANT]
    models = {
        lab: build_model(w, policy(*lab, fast_calibration=True), max_context=256) for lab in labels
    }
    prompt = np.arange(100, 108)
    samples = {lab: [] for lab in labels}
    for _ in range(args.rounds):  # interleaved rounds
        for lab, m in models.items():
            m.reset()
            m.prefill(prompt)
            t = time.perf_counter()
            tok = 200
            for _ in range(args.tokens):
                tok = int(m.decode(tok).argmax())
            samples[lab].append(args.tokens / (time.perf_counter() - t))
    out = {
        "cpu": args.cpu,
        "tokens": args.tokens,
        "rounds": args.rounds,
        "threads": args.threads,
        "threads_note": threads_note,
        "rows": [],
    }
    for lab in labels:
        spec = pruned_spec(base, policy(*lab).prune)  # for the record: build_graph prunes `base`
        out["rows"].append(
            {
                "prune": lab[0],
                "quant": lab[1],
                "host_decode_tokens_per_s": statistics.median(samples[lab]),
                "samples": samples[lab],
                "spec": [spec.n_heads, spec.n_kv_heads, spec.intermediate],
            }
        )
    add_predictions(out, base)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


def add_predictions(out, base):
    """Fill each row's predicted columns from the device model: decode tokens/s on every
    profile, and prefill ms on PREFILL_PROFILE (Scenario(): 512-token prompt, 128 new)."""
    from harmony_ref.config import RunConfig, Scenario
    from harmony_ref.device.cost import scenario_timing
    from harmony_ref.device.runtime import load_profile

    scen = Scenario()
    for row in out["rows"]:
        pol = policy(row["prune"], row["quant"])
        pred, prefill = {}, {}
        for prof in PROFILES:
            cfg = RunConfig(spec=base, policy=pol, scenario=scen, profile=prof)
            t = scenario_timing(load_profile(prof), cfg)
            pred[prof], prefill[prof] = t.decode_tokens_per_s, t.prefill.time_s * 1e3
        row["predicted_decode_tokens_per_s"] = pred
        row["predicted_prefill_ms"] = prefill
    out["prediction_scenario"] = (
        f"{scen.prompt_tokens}-token prompt, {scen.new_tokens} new tokens, batch 1"
    )


def predict(args):
    """Recompute the predictions of a speed JSON in place; its measured columns stay."""
    from harmony_ref.model.prune import decoder_spec
    from harmony_ref.runtime.loader import load_decoder

    w, _ = load_decoder("smollm2-135m")
    out = json.load(open(args.speed))
    add_predictions(out, decoder_spec(w.config))
    with open(args.speed, "w") as f:
        json.dump(out, f, indent=1)


def markdown(args):
    acc = json.load(open(args.accuracy))
    sp = json.load(open(args.speed)) if args.speed else None
    res = acc["results"]
    print(
        "| pruning | quantization | PPL / FP32 | KLD mean | host decode tokens/s | "
        + " | ".join(f"predicted {p} tokens/s" for p in PROFILES)
        + f" | predicted {PREFILL_PROFILE} prefill ms |"
    )
    print("|---|---|---|---|---|" + "---|" * (len(PROFILES) + 1))
    rows = {(r["prune"], r["quant"]): r for r in sp["rows"]} if sp else {}
    for p in PRUNE:
        for q in QUANT:
            r = res.get(f"{q} | {p}")
            s = rows.get((p, q))
            host = f"{s['host_decode_tokens_per_s']:.1f}" if s else "-"
            pred = " | ".join(
                f"{s['predicted_decode_tokens_per_s'][x]:.0f}" if s else "-" for x in PROFILES
            )
            pre = f"{s['predicted_prefill_ms'][PREFILL_PROFILE]:.1f}" if s else "-"
            print(
                f"| {p} | {q} | {r['ppl_ratio']:.3f} | {r['kld_mean']:.3f} | {host} | {pred} "
                f"| {pre} |"
            )
    print()
    print("| activation scales | calibrated on | N = 1 | N = 10 | N = 100 |")
    print("|---|---|---|---|---|")
    for g in ("per-tensor", "per-channel"):
        for src in ("corpus", "random"):
            cells = []
            for n in (1, 10, 100):
                r = res.get(f"w8a8 {g} {src} N={n}")
                cells.append(f"{r['kld_mean']:.3f} ({r['ppl_ratio']:.3f})" if r else "-")
            print(f"| {g} | {src} | " + " | ".join(cells) + " |")


def minilm_policy(prune_label, quant):
    fields = {"default": quant}
    if MINILM_PRUNE[prune_label] is not None:
        fields["prune"] = MINILM_PRUNE[prune_label]
    name = f"{quant} | {prune_label}"
    return policy_from_dict({"name": name, **fields}, f"<{name}>")


def minilm(args):
    """Every MINILM_PRUNE x MINILM_QUANT policy through eval/embedding.evaluate (what
    `harmony-ref accuracy --model all-minilm-l6 --policy pruned.toml` runs), plus its predicted
    encode time on each profile."""
    from harmony_ref.config import RunConfig, Scenario
    from harmony_ref.device.cost import scenario_timing
    from harmony_ref.device.runtime import load_profile
    from harmony_ref.eval.embedding import evaluate, load_pairs
    from harmony_ref.model.spec import get_spec
    from harmony_ref.runtime.minilm import real_model

    model, evalset = real_model(), load_pairs()
    spec = get_spec("all-minilm-l6")
    scen = Scenario(prompt_tokens=MINILM_TOKENS, new_tokens=0, context_tokens=MINILM_TOKENS)
    rows, t0 = [], time.time()
    for p in MINILM_PRUNE:
        for q in MINILM_QUANT:
            pol = minilm_policy(p, q)
            m = evaluate(pol, model=model, evalset=evalset)
            pred = {
                prof: scenario_timing(
                    load_profile(prof),
                    RunConfig(spec=spec, policy=pol, scenario=scen, profile=prof),
                ).prefill.time_s
                * 1e3
                for prof in PROFILES
            }
            rows.append(
                {
                    "prune": p,
                    "quant": q,
                    **{
                        k: m.value(k)
                        for k in (
                            "cosine_mean",
                            "cosine_min",
                            "recall_at_1",
                            "recall_at_1_fp32",
                            "accuracy_drop_pct",
                            "linear_weights_mb",
                            "weights_mb",
                        )
                    },
                    "predicted_encode_ms": pred,
                }
            )
            print(
                f"[{time.time() - t0:6.1f} s] {p} | {q}: cosine {m.value('cosine_mean'):.4f}",
                file=sys.stderr,
                flush=True,
            )
    out = {
        "model": "all-MiniLM-L6-v2",
        "pairs": evalset.source,
        "sentences": len(evalset.sentences),
        "linear_backend": model.resolved_backend(),
        "cpu": platform.processor(),
        "encode_tokens": MINILM_TOKENS,
        "rows": rows,
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


def minilm_markdown(args):
    d = json.load(open(args.minilm))
    print(
        "| pruning | quantization | mean / min cosine to FP32 | recall@1 | drop (points) | "
        "Linear weights MB | all weights MB | "
        + " | ".join(f"predicted {p} encode ms" for p in PROFILES)
        + " |"
    )
    print("|---|---|---|---|---|---|---|" + "---|" * len(PROFILES))
    for r in d["rows"]:
        ref = r["prune"] == "none" and r["quant"] == "fp32"
        cos = "1 / 1" if ref else f"{r['cosine_mean']:.4f} / {r['cosine_min']:.4f}"
        drop = "0" if ref else f"{r['accuracy_drop_pct']:.2f}"
        pred = " | ".join(f"{r['predicted_encode_ms'][p]:.2f}" for p in PROFILES)
        print(
            f"| {r['prune']} | {r['quant']} | {cos} | {r['recall_at_1']:.2f}% | {drop} | "
            f"{r['linear_weights_mb']:.2f} | {r['weights_mb']:.2f} | {pred} |"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("accuracy")
    a.add_argument("--out", required=True)
    a.add_argument("--part", choices=("table", "calibration", "all"), default="all")
    s = sub.add_parser("speed")
    s.add_argument("--out", required=True)
    s.add_argument("--tokens", type=int, default=32)
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--cpu", default="")
    s.add_argument("--threads", type=int, default=1, help="Numba and OpenBLAS threads")
    m = sub.add_parser("markdown")
    m.add_argument("accuracy")
    m.add_argument("speed", nargs="?")
    pr = sub.add_parser("predict")
    pr.add_argument("speed")
    mm = sub.add_parser("minilm")
    mm.add_argument("--out", required=True)
    mk = sub.add_parser("minilm-markdown")
    mk.add_argument("minilm")
    args = ap.parse_args()
    {
        "accuracy": accuracy,
        "speed": speed,
        "markdown": markdown,
        "predict": predict,
        "minilm": minilm,
        "minilm-markdown": minilm_markdown,
    }[args.cmd](args)


if __name__ == "__main__":
    main()
