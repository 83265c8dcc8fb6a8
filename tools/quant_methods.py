"""docs/quantization-methods.md's tables, made from the tool's own output (paste them, do not type
them): RTN vs GPTQ vs AWQ at int4-g32, int4-g128 and int8 on SmolLM2-135M, and activation-aware
FFN pruning with and without repair, scored by `harmony-ref accuracy --json` on the shipped
held-out split (calibration: the calibration split), beside the time each policy takes to build
(quantize) on this CPU.

    P=results/quant-methods/policies
    harmony-ref accuracy --policy int4-g32 --policy $P/int4-g32-gptq.toml --policy $P/int4-g32-awq.toml \\
        --json > results/quant-methods/accuracy-int4-g32.json     # (and int4-g128, int8)
    harmony-ref accuracy --policy $P/prune-ffn0.1-act.toml ... --json \\
        > results/quant-methods/pruning.json
    python tools/quant_methods.py time --out results/quant-methods/quantize_time.json  # idle machine
    python tools/quant_methods.py markdown        # both tables, from the committed JSON files
    python tools/quant_methods.py section         # the document's results section (tables + ratios)
    python tools/quant_methods.py gemma-section   # Gemma 3 270M's (results/quant-methods/gemma3/)
    python tools/quant_methods.py sensitivity-section   # the gate_proj table

tests/test_quant_methods_doc.py holds the document's numbers to those files (within the gate's
limit for each metric's class) and its stated targets to the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "quant-methods"
POLICIES = RESULTS / "policies"
FORMATS = ("int4-g32", "int4-g128", "int8")
# model -> the folder of its accuracy outputs and timing (the policies are shared)
MODELS = {"smollm2-135m": RESULTS, "gemma3-270m": RESULTS / "gemma3"}
METHODS = ("rtn", "gptq", "awq")
PRUNING = (  # the pruning table's rows, in order; their columns are read from the policy files
    "prune-ffn0.1-act",
    "prune-ffn0.1-act-repair",
    "prune-ffn0.1-act-repair-r0.5",
    "prune-ffn0.1-act-gen",
    "prune-ffn0.1-act-gen-repair",
    "prune-ffn0.1-act-gen-repair-distill",
    "prune-ffn0.1-obs-gen-r0.01",
    "prune-ffn0.1-obs-gen-r0.1",
    "prune-ffn0.25-act",
    "prune-ffn0.25-act-repair",
    "prune-ffn0.25-act-gen",
    "prune-ffn0.25-act-gen-repair",
    "prune-ffn0.25-obs-gen-r0.01",
    "prune-ffn0.25-obs-gen-r0.1",
)
CHOSEN_BY = {"l1": "L1", "activation": "activation", "obs": "OBS"}  # [prune] score
PRUNING_RATIOS = (  # (a policy, the one it is compared with): the ratios the document states
    ("prune-ffn0.1-act-repair", "prune-ffn0.1-act"),
    ("prune-ffn0.1-act-repair-r0.5", "prune-ffn0.1-act"),
    ("prune-ffn0.1-act-gen-repair", "prune-ffn0.1-act-gen"),
    ("prune-ffn0.1-act-gen-repair", "prune-ffn0.1-act"),
    ("prune-ffn0.1-act-gen-repair-distill", "prune-ffn0.1-act-gen"),
    ("prune-ffn0.1-act-gen-repair-distill", "prune-ffn0.1-act-gen-repair"),
    ("prune-ffn0.1-obs-gen-r0.01", "prune-ffn0.1-act-gen"),
    ("prune-ffn0.1-obs-gen-r0.1", "prune-ffn0.1-act-gen"),
    ("prune-ffn0.25-act-repair", "prune-ffn0.25-act"),
    ("prune-ffn0.25-act-gen-repair", "prune-ffn0.25-act-gen"),
    ("prune-ffn0.25-obs-gen-r0.01", "prune-ffn0.25-act-gen"),
    ("prune-ffn0.25-obs-gen-r0.1", "prune-ffn0.25-act-gen"),
)

METHOD_HEADER = (
    "| format | method | KLD mean | KLD p99 | PPL / FP32 | top-1 agreement | "
    "quantize s |\n|---|---|---|---|---|---|---|"
)
PRUNE_HEADER = (
    "| policy | FFN pruned | channels by | calibration windows | repair | distilled | KLD mean | "
    "KLD p99 | PPL / FP32 | top-1 agreement |\n|---|---|---|---|---|---|---|---|---|---|"
)


def policy_arg(fmt: str, method: str) -> str:
    """The --policy argument of one (format, method): shipped RTN policy or a committed TOML."""
    return fmt if method == "rtn" else str(POLICIES.relative_to(ROOT) / f"{fmt}-{method}.toml")


def policy_name(fmt: str, method: str) -> str:
    return fmt if method == "rtn" else f"{fmt}-{method}"


def _rows(d: dict) -> dict:
    return {r["policy"]: r for r in d["rows"]}


def method_rows(accs: list[dict], times: dict) -> list[str]:
    """One row per (format, method) scored in any of `accs` (formats, then methods, in order)."""
    rows = {k: v for acc in accs for k, v in _rows(acc).items()}
    out = []
    for fmt in FORMATS:
        for m in METHODS:
            r = rows.get(policy_name(fmt, m))
            if r is None:
                continue
            t = times.get("seconds", {}).get(policy_name(fmt, m))
            out.append(
                f"| {fmt} | {m.upper()} | {r['kld_mean']:.4f} | {r['kld_p99']:.4f} | "
                f"{r['ppl_ratio']:.4f} | {r['top1_agreement_pct']:.1f} % | "
                f"{'-' if t is None else f'{t:.1f}'} |"
            )
    return out


def prune_columns(name: str) -> tuple[str, str, str, str, str]:
    """(FFN pruned, channels chosen by, calibration windows, repair, distilled) of a committed
    policy."""
    from harmony_ref.quant.policy import load_policy

    p = load_policy(POLICIES / f"{name}.toml").prune
    text = "split" if p.calibration == "corpus" else p.calibration
    return (
        f"{p.ffn:.0%}",
        CHOSEN_BY[p.score],
        f"{text}, {p.samples}",
        f"ridge {p.repair_ridge:g}" if p.repair else "no",
        (
            f"{p.distill_params}, {p.distill_epochs} epoch{'s' if p.distill_epochs > 1 else ''}, "
            f"Adam {p.distill_lr:g}"
            if p.distill_epochs
            else "no"
        ),
    )


def prune_rows(accs: list[dict]) -> list[str]:
    rows = {k: v for acc in accs for k, v in _rows(acc).items()}
    out = []
    for name in PRUNING:
        r = rows.get(name)
        if r is None:
            continue
        cells = " | ".join(prune_columns(name))
        out.append(
            f"| {name} | {cells} | {r['kld_mean']:.4f} | "
            f"{r['kld_p99']:.4f} | {r['ppl_ratio']:.4f} | "
            f"{r['top1_agreement_pct']:.1f} % |"
        )
    return out


def load_outputs(res: Path, pattern: str) -> list[tuple[Path, dict]]:
    """Every committed `harmony-ref accuracy --json` output under `res` matching `pattern`."""
    return [(p, json.loads(p.read_text())) for p in sorted(res.glob(pattern))]


def load_times(res: Path) -> dict:
    """The committed build times under `res` ({} when not measured)."""
    p = res / "quantize_time.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def output_facts(outputs: list[tuple[Path, dict]]) -> list[str]:
    """Each output file with the chunks and tokens it scored, as the document cites them."""
    return [
        f"`{p.relative_to(ROOT)}`: {d['chunks']} chunks of context 512 "
        f"({d['scored_tokens']:,} scored tokens)"
        for p, d in outputs
    ]


def ratio_line(rows: dict, a: str, b: str, prefix: str = "") -> str | None:
    """ "- `a` / `b` KLD mean = r x", the form tests/test_quant_methods_doc.py recomputes."""
    if a not in rows or b not in rows:
        return None
    return f"- {prefix}`{a}` / `{b}` KLD mean = {rows[a]['kld_mean'] / rows[b]['kld_mean']:.2f}x"


def measure_times(
    out: Path, repeats: int = 1, only: tuple[str, ...] = FORMATS, model: str = "smollm2-135m"
) -> dict:
    """Seconds to build (load excluded: prune, calibrate, quantize) every policy of the table."""
    from harmony_ref.compress import build_model
    from harmony_ref.quant.policy import load_policy
    from harmony_ref.runtime.llama import Llama
    from harmony_ref.runtime.loader import load_decoder

    weights, _ = load_decoder(model)
    Llama(weights, "int4-g32", max_context=64)  # compile the kernels first
    seconds = {}
    for fmt in only:
        for m in METHODS:
            pol = load_policy(ROOT / policy_arg(fmt, m) if m != "rtn" else fmt)
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                build_model(weights, pol, max_context=512)
                best = min(best, time.perf_counter() - t0)
            seconds[pol.name] = best
            print(pol.name, f"{best:.1f} s", file=sys.stderr)
    from harmony_ref._cpus import cpu_model

    cpu = cpu_model()
    import os

    d = {
        "model": model,
        "what": "seconds to build the policy's model (prune, calibrate, "
        "quantize), the checkpoint already loaded",
        "cpu": cpu,
        "cores": os.cpu_count(),
        "seconds": seconds,
    }
    out.write_text(json.dumps(d, indent=1) + "\n")
    return d


def section() -> str:
    """The document's results section: its tables and the ratios it states, from the JSON files."""
    accs = load_outputs(RESULTS, "accuracy*.json")
    prunes = load_outputs(RESULTS, "pruning*.json")
    rows = {k: v for _, d in accs + prunes for k, v in _rows(d).items()}
    times = load_times(RESULTS)
    out = [
        "Scored by `harmony-ref accuracy --json` on the shipped held-out split "
        "(`harmony_ref/data/lm_corpus/heldout.txt`) against the FP32 reference (the checkpoint's "
        "weights dequantized exactly; SmolLM2's GGUF stores Q4_1, so every int4 row here is a "
        "second 4-bit rounding); GPTQ and AWQ calibrated on the calibration split "
        "(`calibration.txt`, 16 windows of 128 tokens, seed 0). Outputs: "
        + "; ".join(output_facts(accs + prunes))
        + ".",
        "",
        "<!-- quant methods table -->",
        METHOD_HEADER,
        *method_rows([d for _, d in accs], times),
        "<!-- /quant methods table -->",
        "",
    ]
    if times:
        out.append(
            f"quantize s: seconds to build the model from the loaded checkpoint (calibration "
            f"runs included), measured with nothing else running on {times['cpu']} "
            f"({times['cores']} cores)."
        )
    out.append("")
    for fmt in ("int4-g128", "int4-g32", "int8"):
        for m in ("gptq", "awq"):
            line = ratio_line(rows, policy_name(fmt, m), fmt)
            if line:
                out.append(line)
    out += ["", "## Pruning with and without repair", ""]
    table = prune_rows([d for _, d in prunes])
    if prunes:
        out += [
            "FFN channels pruned in every block, FP32 weights; channels chosen by "
            'the activation-aware score, or by OBS (`score = "obs"`: greedy structured Optimal '
            "Brain Surgeon on down_proj's input Gram, what each channel costs after the repair); "
            "repair = down_proj refitted as above, on the windows that chose the channels "
            "(windows of 128 tokens: 32 of the calibration split, or 512 the model generated "
            'itself from 4-token prompts of the split, `calibration = "generated"`); distilled = '
            "fine-tuned afterwards on the same windows, the unpruned model the teacher "
            "(`distill_epochs`, below):",
            "",
            "<!-- pruning repair table -->",
            PRUNE_HEADER,
            *table,
            "<!-- /pruning repair table -->",
            "",
        ]
        for a, b in PRUNING_RATIOS:
            line = ratio_line(rows, a, b)
            if line:
                out.append(line)
    return "\n".join(out)


def gemma_section() -> str:
    """The Gemma 3 270M table and its ratios, from results/quant-methods/gemma3/."""
    res = MODELS["gemma3-270m"]
    accs = load_outputs(res, "accuracy*.json")
    times = load_times(res)
    rows = {k: v for _, d in accs for k, v in _rows(d).items()}
    out = [
        "Scored and calibrated as above (the same policy files, the same held-out and "
        "calibration splits, Gemma's own tokenizer), against Gemma's FP32 reference: the Q4_K_M "
        "file's weights dequantized exactly, so every row here is a second rounding of weights "
        "llama.cpp already stored in 4 to 8 bits (Q4_K, Q5_0, Q6_K, Q8_0). Outputs: "
        + "; ".join(output_facts(accs))
        + ".",
        "",
        "<!-- gemma quant methods table -->",
        METHOD_HEADER,
        *method_rows([d for _, d in accs], times),
        "<!-- /gemma quant methods table -->",
        "",
    ]
    if times:
        out += [
            f"quantize s: as above, measured on {times['cpu']} ({times['cores']} cores), "
            "nothing else running.",
            "",
        ]
    for fmt in FORMATS:
        for m in ("gptq", "awq"):
            line = ratio_line(rows, policy_name(fmt, m), fmt, prefix="Gemma 3: ")
            if line:
                out.append(line)
    return "\n".join(out)


def sensitivity_section() -> str:
    """One Linear type at a time in int4-g32 (the rest FP32), fitted by RTN and by GPTQ: the KLD
    each type costs alone and its rank, from results/quant-methods/sensitivity-int4-g32-*.json
    (`harmony-ref sensitivity --weight-format int4-g32 [--method gptq] --json`)."""
    by = {}
    for m in ("rtn", "gptq"):
        d = json.loads((RESULTS / f"sensitivity-int4-g32-{m}.json").read_text())
        by[m] = {g["group"]: g for g in d["groups"]}
        scored = d["scored_on"]
    out = [
        f"Scored on {scored} (sensitivity feeds planning, so it reads the calibration part: "
        "GPTQ is fitted on its unscored tokens), SmolLM2-135M, one Linear type in int4-g32 at a "
        "time, every other Linear FP32:",
        "",
        "<!-- gate_proj table -->",
        "| Linear type | RTN KLD mean | RTN rank | GPTQ KLD mean | GPTQ rank | GPTQ / RTN |",
        "|---|---|---|---|---|---|",
    ]
    for name in sorted(by["rtn"], key=lambda n: by["rtn"][n]["rank"]):
        r, g = by["rtn"][name], by["gptq"][name]
        out.append(
            f"| {name} | {r['kld_mean']:.4f} | {r['rank']} | {g['kld_mean']:.4f} | "
            f"{g['rank']} | {g['kld_mean'] / r['kld_mean']:.2f}x |"
        )
    out.append("<!-- /gate_proj table -->")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("time")
    t.add_argument("--out", type=Path, help="default: the model's results folder")
    t.add_argument("--formats", default=",".join(FORMATS))
    t.add_argument("--model", choices=list(MODELS), default="smollm2-135m")
    md = sub.add_parser("markdown")
    md.add_argument("--model", choices=list(MODELS), default="smollm2-135m")
    sub.add_parser("section")
    sub.add_parser("gemma-section")
    sub.add_parser("sensitivity-section")
    args = p.parse_args(argv)
    if args.cmd == "time":
        out = args.out or MODELS[args.model] / "quantize_time.json"
        measure_times(out, only=tuple(args.formats.split(",")), model=args.model)
        return 0
    if args.cmd == "section":
        print(section())
        return 0
    if args.cmd == "gemma-section":
        print(gemma_section())
        return 0
    if args.cmd == "sensitivity-section":
        print(sensitivity_section())
        return 0
    res = MODELS[args.model]
    print(METHOD_HEADER)
    print(
        "\n".join(method_rows([d for _, d in load_outputs(res, "accuracy*.json")], load_times(res)))
    )
    prunes = [d for _, d in load_outputs(res, "pruning*.json")]
    if prunes:
        print()
        print(PRUNE_HEADER)
        print("\n".join(prune_rows(prunes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
