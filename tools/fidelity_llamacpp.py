"""llama.cpp on this host as a device under test: the llama-bench runs `harmony-ref fidelity`
fits the `llama.cpp-cpu` runtime on and scores it against, recorded as raw `llama-bench -o json`
outputs (the committed fixtures under harmony_ref/data/fidelity/llamacpp/).

    /work/bin/quiet python tools/fidelity_llamacpp.py --llama-bin /path/to/llama.cpp/build/bin \
        --out harmony_ref/data/fidelity/llamacpp [--session 1] [--reps 5]

llama.cpp comes from the `peer` extra's sdist (llama-cpp-python vendors it) built with CMake,
never from CI. Before any timing the script checks the runtime's perplexity on harmony-ref's
corpus against the FP32 reference (`harmony-ref check-runtime`): a build whose perplexity is off
measures nothing. It makes the second quant type with `llama-quantize --allow-requantize` (Q8_0
from the shipped Q4_1 GGUF), then runs every configuration of `RUNS` once per session, writing
`<session>-<id>.json` (llama-bench's stdout, untouched). Which runs are fitted and which are
scored is data (harmony_ref/data/fidelity/llamacpp.toml), not decided here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

# id -> (quant, llama-bench arguments). pp: prompt processing of -p tokens (after -d cached);
# tg: -n tokens generated after -d cached tokens.
RUNS = {
    "q4_1-t1-pp64": ("q4_1", ["-t", "1", "-p", "64", "-n", "0"]),
    "q4_1-t1-pp128": ("q4_1", ["-t", "1", "-p", "128", "-n", "0"]),
    "q4_1-t1-tg32": ("q4_1", ["-t", "1", "-p", "0", "-n", "32"]),
    "q4_1-t1-tg32-d256": ("q4_1", ["-t", "1", "-p", "0", "-n", "32", "-d", "256"]),
    "q4_1-t1-pp256": ("q4_1", ["-t", "1", "-p", "256", "-n", "0"]),
    "q4_1-t1-pp512": ("q4_1", ["-t", "1", "-p", "512", "-n", "0"]),
    "q4_1-t1-tg32-d1024": ("q4_1", ["-t", "1", "-p", "0", "-n", "32", "-d", "1024"]),
    "q4_1-t2-pp128": ("q4_1", ["-t", "2", "-p", "128", "-n", "0"]),
    "q4_1-t2-tg32": ("q4_1", ["-t", "2", "-p", "0", "-n", "32"]),
    "q4_1-t2-tg32-d512": ("q4_1", ["-t", "2", "-p", "0", "-n", "32", "-d", "512"]),
    "q8_0-t1-pp128": ("q8_0", ["-t", "1", "-p", "128", "-n", "0"]),
    "q8_0-t1-tg32": ("q8_0", ["-t", "1", "-p", "0", "-n", "32"]),
    "q8_0-t1-pp64": ("q8_0", ["-t", "1", "-p", "64", "-n", "0"]),
    "q8_0-t1-pp256": ("q8_0", ["-t", "1", "-p", "256", "-n", "0"]),
    "q8_0-t2-pp128": ("q8_0", ["-t", "2", "-p", "128", "-n", "0"]),
    "q8_0-t2-tg32": ("q8_0", ["-t", "2", "-p", "0", "-n", "32"]),
    "q8_0-t1-tg32-d1024": ("q8_0", ["-t", "1", "-p", "0", "-n", "32", "-d", "1024"]),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--session", default="s1", help="fixture file prefix (s1, s2, ...)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--q8",
        default="/tmp/smollm2-135m-q8_0.gguf",
        help="where the requantized Q8_0 GGUF is written (outside the repo)",
    )
    ap.add_argument("--skip-check", action="store_true")
    args = ap.parse_args()
    from harmony_ref.runtime.loader import resolve_model_path

    b = Path(args.llama_bin)
    q4 = str(resolve_model_path("smollm2-135m"))
    if not Path(args.q8).exists():
        subprocess.run(
            [str(b / "llama-quantize"), "--allow-requantize", q4, args.q8, "Q8_0"],
            check=True,
            capture_output=True,
        )
    models = {"q4_1": q4, "q8_0": args.q8}
    if not args.skip_check:
        for quant, path in models.items():
            r = subprocess.run(
                [
                    "harmony-ref",
                    "check-runtime",
                    "--model",
                    path,
                    "--context",
                    "512",
                    "--command",
                    f"{b}/llama-perplexity -m {{model}} -f {{corpus}} -c {{context}} "
                    "--chunks {chunks} -t 2",
                    "--label",
                    f"llama.cpp-{quant}",
                    "--json",
                ],
                capture_output=True,
                text=True,
            )
            print(quant, "check-runtime exit", r.returncode, r.stdout[-600:])
            if r.returncode != 0:
                raise SystemExit(f"llama.cpp {quant}: perplexity check failed; not timing it")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for rid, (quant, extra) in RUNS.items():
        cmd = [
            str(b / "llama-bench"),
            "-m",
            models[quant],
            "-r",
            str(args.reps),
            "-o",
            "json",
            *extra,
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
        json.loads(r.stdout)  # must be llama-bench's JSON
        (out / f"{args.session}-{rid}.json").write_text(r.stdout)
        row = json.loads(r.stdout)[0]
        print(rid, f"{row['avg_ts']:.1f} tokens/s +- {row['stddev_ts']:.1f}")


if __name__ == "__main__":
    main()
