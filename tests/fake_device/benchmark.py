"""Fake device: print a recorded benchmark output in the requested format (see README.md)."""

import argparse
import json
import sys
from pathlib import Path

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "device_outputs"
FILES = {
    "mslite": "mslite_benchmark.txt",
    "tflite": "tflite_benchmark_model.txt",
    "llama-bench": "llama_bench.json",
    "executorch": "executorch_llama_main.txt",
    "llama-perplexity": "llama_perplexity.txt",
}

ap = argparse.ArgumentParser()
ap.add_argument("--format", required=True, choices=sorted(FILES))
ap.add_argument("--device-model")
ap.add_argument("--os-build")
ap.add_argument("--file", help="print this fixture instead of the format's default")
ap.add_argument("--exit", type=int, default=0, help="exit with this code (a tool that failed)")
ap.add_argument(
    "--scale", type=float, default=1.0, help="multiply every time by this (llama-bench only)"
)
a = ap.parse_args()

if a.device_model:
    print(f"device_model={a.device_model}")
if a.os_build:
    print(f"os_build={a.os_build}")
text = (FIX / (a.file or FILES[a.format])).read_text()
if a.format == "llama-bench" and a.scale != 1.0:
    rows = json.loads(text)
    for r in rows:
        n = r["n_prompt"] or r["n_gen"]
        r["avg_ns"] = int(r["avg_ns"] * a.scale)
        r["samples_ns"] = [int(s * a.scale) for s in r["samples_ns"]]
        r["samples_ts"] = [n * 1e9 / s for s in r["samples_ns"]]
        r["avg_ts"] = sum(r["samples_ts"]) / len(r["samples_ts"])
    text = json.dumps(rows, indent=2)
# benchmark_model logs to stderr; the others print to stdout
(sys.stderr if a.format == "tflite" else sys.stdout).write(text)
sys.exit(a.exit)
