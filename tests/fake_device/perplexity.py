"""Fake runtime for `check-runtime`: scores the corpus file with harmony-ref's own FP32 reference
(llama-perplexity's rule) and prints the result in llama-perplexity's format with the perplexity
multiplied by --factor (or $FAKE_PPL_FACTOR): 1 is a correct runtime, 5 a fast-but-wrong one. It
also prints llama_perf's prompt-eval line with a plausible --tokens-per-s."""

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

import numpy as np  # noqa: E402

from harmony_ref.eval.lm import chunk_tokens, log_softmax  # noqa: E402
from harmony_ref.runtime.llama import LlamaRef  # noqa: E402
from harmony_ref.runtime.loader import load_decoder  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("-m", "--model", required=True)
ap.add_argument("-f", "--file", required=True)
ap.add_argument("-c", "--context", type=int, required=True)
ap.add_argument("--chunks", type=int, default=-1)
ap.add_argument("--factor", type=float, default=float(os.environ.get("FAKE_PPL_FACTOR", "1")))
ap.add_argument("--tokens-per-s", type=float, default=2150.0)
a = ap.parse_args()

weights, tok = load_decoder(a.model)
ids = tok.encode(Path(a.file).read_text(encoding="utf-8"))
chunks = chunk_tokens(ids, a.context, tok.bos_id if tok.add_bos else None)
if a.chunks > 0:
    chunks = chunks[: a.chunks]
first = a.context // 2
print("system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : FAKE = 1 |", file=sys.stderr)
print(
    f"perplexity: calculating perplexity over {len(chunks)} chunks, n_ctx={a.context}, "
    f"batch_size={a.context}, n_seq=1",
    file=sys.stderr,
)
ref = LlamaRef(weights, max_context=a.context)
nll, n = [], 0
for i, chunk in enumerate(chunks):
    ref.reset()
    lp = log_softmax(ref.prefill(chunk, all_logits=True)[first:-1])
    target = chunk[first + 1 :]
    nll.extend(-lp[np.arange(target.shape[0]), target])
    print(f"[{i + 1}]{np.exp(np.mean(nll)) * a.factor:.4f},", end="")
print()
nll = np.asarray(nll)
ppl = float(np.exp(nll.mean())) * a.factor
sd = float(np.sqrt(max(nll.var(), 0) / (nll.size - 1)))
print(f"Final estimate: PPL = {ppl:.4f} +/- {sd * ppl:.5f}", file=sys.stderr)
tokens = len(chunks) * a.context
ms = tokens / a.tokens_per_s * 1e3
print(f"llama_perf_context_print:        load time = {40.0:10.2f} ms", file=sys.stderr)
print(
    f"llama_perf_context_print: prompt eval time = {ms:10.2f} ms / {tokens:5d} tokens "
    f"({ms / tokens:8.2f} ms per token, {a.tokens_per_s:8.2f} tokens per second)",
    file=sys.stderr,
)
