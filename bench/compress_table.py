"""Pruning x quantization on the real SmolLM2-135M: accuracy against the FP32 reference on the
corpus's held-out split (W8A8 scales calibrated on the calibration split, or on random ids),
measured host decode tokens/s, predicted phone decode tokens/s. Writes JSON; `--markdown`
prints the README tables from it.

    python bench/compress_table.py accuracy --out acc.json    # under /work/bin/cpu (~20 min)
    python bench/compress_table.py speed --out speed.json     # under /work/bin/quiet (~2 min)
    python bench/compress_table.py markdown acc.json speed.json

Committed results: results/compress/smollm2_accuracy.json, results/compress/smollm2_speed.json.
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
    "w8a8 per-channel": {"default": "int8", "activations": {
        "granularity": "per-channel", "calibration": "corpus", "samples": 10,
        "sample_tokens": 64}},
}
CALIB = [  # the calibration study: (granularity, source, N)
    (g, src, n) for g in ("per-tensor", "per-channel") for src in ("corpus", "random")
    for n in (1, 10, 100)
]
CONTEXT, CHUNKS, SAMPLE_TOKENS = 512, 2, 64
PROFILES = ("harmony-flagship", "harmony-midrange", "harmony-lowend")


def policy(prune_label, quant_label, fast_calibration=False):
    fields = dict(QUANT[quant_label])
    if fast_calibration and "activations" in fields:  # speed runs: scales do not change speed
        fields["activations"] = dict(fields["activations"], calibration="random", samples=1,
                                     sample_tokens=8)
    if PRUNE[prune_label] is not None:
        fields["prune"] = PRUNE[prune_label]
    name = f"{quant_label} | {prune_label}"
    return policy_from_dict({"name": name, **fields}, f"<{name}>")


def calib_policy(g, src, n):
    name = f"w8a8 {g} {src} N={n}"
    return policy_from_dict({"name": name, "default": "int8", "activations": {
        "granularity": g, "calibration": src, "samples": n, "sample_tokens": SAMPLE_TOKENS}},
        f"<{name}>")


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
        print(f"[{time.time() - t0:7.1f} s] {done}/{total} {label}: PPL ratio "
              f"{summary['ppl_ratio']:.4f} KLD {summary['kld_mean']:.4f}", file=sys.stderr,
              flush=True)

    out = evaluate_policies(w, heldout, pols, context=CONTEXT, max_chunks=CHUNKS,
                            progress=progress)
    out.update(split="heldout (scored); W8A8 calibrated on the calibration split or random ids",
               sample_tokens=SAMPLE_TOKENS, cpu=platform.processor())
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


def speed(args):
    from harmony_ref._threads import set_threads
    from harmony_ref.config import RunConfig, Scenario
    from harmony_ref.device.cost import scenario_timing
    from harmony_ref.device.profile import load_profile
    from harmony_ref.model.prune import decoder_spec, pruned_spec
    from harmony_ref.runtime.llama import Llama
    from harmony_ref.runtime.loader import load_decoder

    # One thread for Numba and OpenBLAS alike (the harness's host default): with both pools at
    # 2 on the 2 cores, the FP32 rows' BLAS GEMVs ran ~25x slower (gate|up 8.2 ms vs 0.34 ms)
    # while Numba's idle workers held the cores, ~0.7-3 tokens/s instead of ~17.
    threads_note = set_threads(args.threads)
    w, _ = load_decoder("smollm2-135m")
    base = decoder_spec(w.config)
    labels = [(p, q) for p in PRUNE for q in QUANT]
    models = {lab: Llama(w, policy(*lab, fast_calibration=True), max_context=256)
              for lab in labels}
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
    out = {"cpu": args.cpu, "tokens": args.tokens, "rounds": args.rounds,
           "threads": args.threads, "threads_note": threads_note, "rows": []}
    scen = Scenario()
    for lab in labels:
        pol = policy(*lab)
        spec = pruned_spec(base, pol.prune)  # for the record: build_graph prunes `base` itself
        pred = {}
        for prof in PROFILES:
            cfg = RunConfig(spec=base, policy=pol, scenario=scen, profile=prof)
            pred[prof] = scenario_timing(load_profile(prof), cfg).decode_tokens_per_s
        out["rows"].append({"prune": lab[0], "quant": lab[1],
                            "host_decode_tokens_per_s": statistics.median(samples[lab]),
                            "samples": samples[lab], "predicted_decode_tokens_per_s": pred,
                            "spec": [spec.n_heads, spec.n_kv_heads, spec.intermediate]})
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


def markdown(args):
    acc = json.load(open(args.accuracy))
    sp = json.load(open(args.speed)) if args.speed else None
    res = acc["results"]
    print(f"| pruning | quantization | PPL / FP32 | KLD mean | host decode tokens/s | "
          + " | ".join(f"predicted {p} tokens/s" for p in PROFILES) + " |")
    print("|---|---|---|---|---|" + "---|" * len(PROFILES))
    rows = {(r["prune"], r["quant"]): r for r in sp["rows"]} if sp else {}
    for p in PRUNE:
        for q in QUANT:
            r = res.get(f"{q} | {p}")
            s = rows.get((p, q))
            host = f"{s['host_decode_tokens_per_s']:.1f}" if s else "-"
            pred = " | ".join(f"{s['predicted_decode_tokens_per_s'][x]:.0f}" if s else "-"
                              for x in PROFILES)
            print(f"| {p} | {q} | {r['ppl_ratio']:.3f} | {r['kld_mean']:.3f} | {host} | {pred} |")
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
    args = ap.parse_args()
    {"accuracy": accuracy, "speed": speed, "markdown": markdown}[args.cmd](args)


if __name__ == "__main__":
    main()
