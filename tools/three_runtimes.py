"""llama.cpp, ExecuTorch (XNNPACK) and harmony-ref's own kernels on one model, one policy family
(int4 weights in groups of 32, int8 activations), one CPU: prefill and decode tokens/s and
perplexity, for the docs' three-runtime table (docs/how-to/executorch.md). A maintainer script:
it needs a llama.cpp build and the `executorch` extra, neither of which CI or the default install
has.

    /work/bin/quiet /work/venv-et/bin/python tools/three_runtimes.py \
        --llama-bin /path/to/llama.cpp/build/bin --work /tmp/three [--rounds 3] [--chunks 4] [--json]

Files (made once under --work by the user-facing commands, then reused):
- `export --policy q4_0 --format gguf`: SmolLM2-135M in GGUF Q4_0 (llama.cpp's Q4_0 dot product
  quantizes activations to Q8_0 blocks of 32: int4 g32 weights, int8 g32 activations). llama.cpp
  and harmony-ref's kernels (`--policy as-stored`) run these same bytes.
- `export --policy w4a8-g32 --format pte`: the ExecuTorch program, torchao 8da4w g32 (int8
  activations per token); harmony-ref's kernels also run `w4a8-g32` itself, the policy it came from.

Speed, interleaved in each round: llama-bench pp128 and tg64 (`--repack 0`, as
tools/decoder_vs_llamacpp.py); ours in this process (prefill of 128 tokens; 64 decode steps from
BOS; tools/decoder_vs_llamacpp.py's own timers); ExecuTorch's runner (backends/executorch_runner.py)
in a child process, its PyTorchObserver lines read by the `executorch` parser: a 128-token prompt
for the prompt-evaluation rate, a 1-token prompt then 64 new tokens for the generation rate. All at
--threads (the runner sizes ExecuTorch's thread pool with it). Perplexity: the held-out corpus,
chunks of 512, the second half of each scored (llama-perplexity's rule, which `accuracy`
follows): `llama-perplexity` on the GGUF, `accuracy` for the rest. Medians over rounds; every
round printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np

from harmony_ref.backends.executorch import runner_metrics
from harmony_ref.compress import build_model
from harmony_ref.job.runtime_check import write_corpus
from harmony_ref.lab.parsers_accuracy import parse_llama_perplexity
from harmony_ref.runtime.loader import load_decoder, stored_policy
from tools.decoder_vs_llamacpp import cpu_name, llama_bench, ours_pp, ours_tg

MODEL = "smollm2-135m"
PP, TG, CONTEXT = 128, 64, 512


def cli(python: str, *args: str) -> str:
    r = subprocess.run(
        [python, "-m", "harmony_ref", *args], capture_output=True, text=True, env=_env()
    )
    if r.returncode != 0:
        sys.exit(f"harmony-ref {' '.join(args)}: {r.stderr.strip()[-400:]}")
    return r.stdout


def _env() -> dict:
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}


def make_files(work: Path, python: str) -> tuple[Path, Path]:
    work.mkdir(parents=True, exist_ok=True)
    gguf, pte = work / "smollm2-q4_0.gguf", work / "smollm2-w4a8-g32.pte"
    if not gguf.exists():
        cli(python, "export", "--model", MODEL, "--policy", "q4_0", "--format", "gguf",
            "--out", str(gguf))  # fmt: skip
    if not pte.exists():
        cli(python, "export", "--model", MODEL, "--policy", "w4a8-g32", "--format", "pte",
            "--out", str(pte), "--max-context", str(CONTEXT))  # fmt: skip
    return gguf, pte


def et_rate(python: str, pte: Path, prompt: int, new: int, what: str, threads: int, reps: int):
    """ExecuTorch's runner, `reps` timed generations after a warm-up, read as the executorch
    backend reads it (backends/executorch.py runner_metrics: the median over the generations)."""
    r = subprocess.run(
        [python, "-m", "harmony_ref.backends.executorch_runner", "--model", str(pte),
         "--prompt-tokens", str(prompt), "--new-tokens", str(new), "--repeats", str(reps),
         "--threads", str(threads)],
        capture_output=True, text=True, env=_env(), check=True,
    )  # fmt: skip
    m = runner_metrics(r.stdout)
    return m.value("prefill_tokens_per_s" if what == "prefill" else "decode_tokens_per_s")


def perplexities(python: str, llama_bin: str, gguf: Path, pte: Path, chunks: int, threads: int):
    corpus = write_corpus(gguf.parent)
    r = subprocess.run(
        [f"{llama_bin}/llama-perplexity", "-m", str(gguf), "-f", str(corpus), "-c", str(CONTEXT),
         "--chunks", str(chunks), "-t", str(threads)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    llama = parse_llama_perplexity(r.stdout + r.stderr).metrics["perplexity"].value
    common = ["--context", str(CONTEXT), "--chunks", str(chunks), "--json"]
    stored = json.loads(cli(python, "accuracy", "--model", str(gguf), "--policy", "as-stored",
                            *common))  # fmt: skip
    et = json.loads(cli(python, "accuracy", "--model", str(pte), *common))
    by = {row["kv_cache"]: row for row in et["rows"]}  # the runtime's column: fp16, or its name
    ref = stored["rows"][0]["ppl"]
    return {
        "fp32_reference": ref,  # the GGUF's weights dequantized (the Q4_0 rows' reference)
        "fp32_reference_checkpoint": et["rows"][0]["ppl"],  # the checkpoint the .pte came from
        "llama_cpp": llama,
        "ours_as_stored": stored["rows"][-1]["ppl"],
        "executorch": by["executorch-xnnpack"]["ppl"],
        "ours_w4a8_g32": by["fp16"]["ppl"],
        "scored_tokens": stored["scored_tokens"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--work", required=True, type=Path, help="where the exported files are kept")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    python = sys.executable
    numba.set_num_threads(args.threads)
    gguf, pte = make_files(args.work, python)
    w, _ = load_decoder(str(gguf), keep_stored=True)
    bos = w.config.bos_id or 0
    ours = {
        "ours_as_stored": build_model(w, stored_policy(w, str(gguf)), max_context=PP + TG + 8),
        "ours_w4a8_g32": build_model(load_decoder(MODEL)[0], "w4a8-g32", max_context=PP + TG + 8),
    }
    for m in ours.values():  # compile, warm up
        ours_tg(m, 8, bos)
        ours_pp(m, 8, w.config.vocab_size)
    rows = ("llama_cpp", "ours_as_stored", "executorch", "ours_w4a8_g32")
    runs: dict[str, dict[str, list[float]]] = {r: {"prefill": [], "decode": []} for r in rows}
    for k in range(args.rounds):
        t = args.threads
        runs["llama_cpp"]["prefill"].append(
            llama_bench(args.llama_bin, str(gguf), t, PP, args.reps, "pp")
        )
        runs["llama_cpp"]["decode"].append(
            llama_bench(args.llama_bin, str(gguf), t, TG, args.reps, "tg")
        )
        for name, m in ours.items():
            runs[name]["prefill"].append(
                float(np.mean([ours_pp(m, PP, w.config.vocab_size) for _ in range(args.reps)]))
            )
            runs[name]["decode"].append(
                float(np.mean([ours_tg(m, TG, bos) for _ in range(args.reps)]))
            )
        runs["executorch"]["prefill"].append(et_rate(python, pte, PP, 2, "prefill", t, args.reps))
        runs["executorch"]["decode"].append(et_rate(python, pte, 1, TG, "decode", t, args.reps))
        if not args.json:
            print(f"round {k}: " + "; ".join(
                f"{r} pp{PP} {runs[r]['prefill'][-1]:.1f} tg{TG} {runs[r]['decode'][-1]:.1f}"
                for r in rows), flush=True)  # fmt: skip
    ppl = perplexities(python, args.llama_bin, gguf, pte, args.chunks, args.threads)
    out = {
        "cpu": cpu_name(),
        "threads": args.threads,
        "model": MODEL,
        "files": {"gguf": str(gguf), "pte": str(pte)},
        "sizes_mb": {"gguf": gguf.stat().st_size / 1e6, "pte": pte.stat().st_size / 1e6},
        "rounds": args.rounds,
        "runs": runs,
        "median_tokens_per_s": {
            r: {p: float(np.median(v)) for p, v in runs[r].items()} for r in rows
        },
        "perplexity": ppl,
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return
    med = out["median_tokens_per_s"]
    print(f"CPU: {out['cpu']}; {args.threads} threads; FP32 reference PPL {ppl['fp32_reference']:.3f}"
          f" ({ppl['scored_tokens']} tokens)")  # fmt: skip
    for r in rows:
        print(f"{r:16s} prefill {med[r]['prefill']:7.1f}  decode {med[r]['decode']:6.1f}  "
              f"PPL {ppl[r]:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
