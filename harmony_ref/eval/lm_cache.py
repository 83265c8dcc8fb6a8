"""The on-disk cache of FP32 reference log-probabilities for LM accuracy (eval/lm.py).

The reference forward (`LlamaRef`, NumPy FP32) costs as much as the policy being scored, and it
is the same for every policy, KV dtype and run: so it is computed once per (model file, corpus,
context, scoring rule, code version) and kept under $HARMONY_REF_CACHE/lm-reference/<key>/:

    cache = ReferenceCache.for_run(model_sha256, corpus_sha256, context=512, add_bos=False)
    lp = cache.get(chunk_index)            # (scored, V) float32 log-softmax, or None
    cache.put(chunk_index, lp)             # written atomically (harmony_ref/_io.py)

One .npy file per chunk (so a run over the first N chunks and a run over all of them share the
first N), float32 as computed: a chunk of context 512 scores 255 tokens, 255 x 49,152 x 4 bytes =
50 MB for SmolLM2. The key is the SHA-256 of: the model file's SHA-256 (an HF directory: its
config.json and safetensors files), the corpus text's SHA-256, the context, the scoring rule
(`SCORING_RULE`, with whether BOS replaces each chunk's first token) and `code_version()`, a hash
of the source of every module the reference forward runs through, so an edit to any of them
starts a fresh cache rather than reuse stale logits. A file that does not load, or has the
wrong shape, is computed again and overwritten. HARMONY_REF_NO_LM_CACHE=1 turns the cache off.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from harmony_ref._io import write_bytes_atomic

CACHE_FOLDER = "lm-reference"
SCORING_RULE = "llama-perplexity chunks: second half of each chunk scored, log-softmax float32"
# The modules whose code the cached numbers come from (the reference forward and its inputs).
CODE_MODULES = (
    "runtime/llama.py",
    "kernels/rope.py",
    "model/decoder.py",
    "checkpoint/gguf.py",
    "checkpoint/hf.py",
    "eval/lm.py",
    "eval/lm_cache.py",
)


def code_version() -> str:
    """SHA-256 (16 hex digits) over the source of CODE_MODULES."""
    h = hashlib.sha256()
    root = resources.files("harmony_ref")
    for rel in CODE_MODULES:
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_root() -> Path | None:
    if os.environ.get("HARMONY_REF_NO_LM_CACHE"):
        return None
    from harmony_ref.checkpoint.assets import cache_dir

    return cache_dir() / CACHE_FOLDER


@dataclass(frozen=True)
class ReferenceCache:
    directory: Path | None  # None: caching off
    key: str

    @classmethod
    def for_run(
        cls,
        model_sha256: str,
        corpus_sha256: str,
        context: int,
        add_bos: bool,
        root: Path | None = None,
    ) -> ReferenceCache:
        fields = (
            model_sha256,
            corpus_sha256,
            str(int(context)),
            f"{SCORING_RULE}; bos={'replaces first token' if add_bos else 'no'}",
            code_version(),
        )
        key = hashlib.sha256("|".join(fields).encode()).hexdigest()[:32]
        root = root if root is not None else cache_root()
        return cls(None if root is None else root / key, key)

    def _path(self, chunk: int) -> Path:
        return self.directory / f"chunk-{chunk:05d}.npy"

    def get(self, chunk: int, shape: tuple[int, int]) -> np.ndarray | None:
        """The cached (scored, V) log-probs of chunk `chunk`, or None (absent or unusable)."""
        if self.directory is None:
            return None
        p = self._path(chunk)
        if not p.is_file():
            return None
        try:
            a = np.load(p, allow_pickle=False)
        except (OSError, ValueError, EOFError):
            return None
        if a.shape != tuple(shape) or a.dtype != np.float32:
            return None
        return a

    def put(self, chunk: int, lp: np.ndarray) -> None:
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(lp, dtype=np.float32), allow_pickle=False)
        write_bytes_atomic(self._path(chunk), buf.getvalue())

    def cached_chunks(self) -> int:
        if self.directory is None or not self.directory.is_dir():
            return 0
        return sum(1 for _ in self.directory.glob("chunk-*.npy"))
