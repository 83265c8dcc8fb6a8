"""Calibration windows, and what the FP32 decoder's activations show on them: static activation
scales for W8A8 and activation norms for activation-aware pruning (compress/pipeline.py runs
both; "calibration" here means calibration data, not calibrate/'s fitting of a device profile).

    windows = calibration_windows(weights, spec)          # (N, sample_tokens) token ids
    scales = observe_scales(fp32_model, windows, "per-tensor")   # Linear name -> (K,) float32
    norms = activation_norms(fp32_model, windows)         # per block: (F,) FFN, (H,) heads

Samples (quant/compress.py: ActivationSpec): `calibration = "corpus"` takes N windows of
`sample_tokens` tokens at seeded random offsets in the corpus's *calibration* split
(harmony_ref/data/lm_corpus/calibration.txt, ~1,600 SmolLM2 tokens; windows overlap once
N x sample_tokens exceeds it), tokenized by the model's own tokenizer; the held-out split that
`eval/lm.py` scores is never read here. `calibration = "random"` draws uniformly random token
ids from the vocabulary (the unrealistic calibration the literature warns about), same seed
rule. `calibration = "generated"` starts each window from 4 calibration-split tokens and lets
the model write the rest (generated_windows: sampled from its own distribution, int8 weights,
seeded), so the windows hold as many distinct tokens as asked for. Each window runs from an empty KV cache through the (pruned) model in FP32 while every
Linear's input is observed (max|x| per input channel, quant/activations.py); q|k|v and
gate|up share their input and so their scale. `activation_norms` observes the inputs of o_proj
(the attention output, head after head) and down_proj (the SwiGLU output) the same way, as L2
norms over every calibration token (model/prune.py scores channels and heads with them).
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

import numpy as np

from harmony_ref.quant.activations import AbsMaxObserver
from harmony_ref.quant.compress import ActivationSpec
from harmony_ref.runtime.generate import Sampler
from harmony_ref.runtime.progress import report

CALIBRATION_PART = "calibration"
# The calibration split's pin; eval/lm.py pins the same file (tests hold the two equal).
CALIBRATION_SHA256 = "e950a9dacfb3d219cde8321763adcb03c3c614173141b5741f6736fa999cf2a1"


def calibration_text() -> str:
    data = (
        resources.files("harmony_ref") / "data" / "lm_corpus" / f"{CALIBRATION_PART}.txt"
    ).read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != CALIBRATION_SHA256:
        raise ValueError(
            f"harmony_ref/data/lm_corpus/{CALIBRATION_PART}.txt has SHA-256 {got}, "
            f"expected {CALIBRATION_SHA256}: the shipped corpus was modified"
        )
    return data.decode("utf-8")


def corpus_calibration_tokens(weights) -> list[int]:
    """The calibration split tokenized by the tokenizer of the checkpoint `weights` came from."""
    from harmony_ref.runtime.tokenizer import Tokenizer

    src = Path(weights.source) if weights.source else None
    if src is None or not src.exists():
        raise ValueError(
            f"corpus calibration needs the model's tokenizer, but the weights come "
            f"from {weights.source or '<memory>'!r}: pass calibration_tokens, or "
            'use calibration = "random"'
        )
    tok = Tokenizer.from_hf_dir(src) if src.is_dir() else Tokenizer.from_gguf(src)
    return tok.encode(calibration_text())


def calibration_windows(
    weights, spec: ActivationSpec, tokens=None, sampling_model=None
) -> np.ndarray:
    """(N, sample_tokens) int64 token ids to calibrate on (see the module doc).
    `sampling_model(weights, max_context)` builds the model that writes `calibration =
    "generated"` windows (compress/pipeline.py passes the decoder under GENERATED_POLICY)."""
    rng = np.random.default_rng(spec.seed)
    n, length = spec.samples, spec.sample_tokens
    if spec.calibration == "random":
        return rng.integers(0, weights.config.vocab_size, size=(n, length), dtype=np.int64)
    tokens = np.asarray(
        corpus_calibration_tokens(weights) if tokens is None else tokens, dtype=np.int64
    )
    if spec.calibration == "generated":
        if sampling_model is None:
            raise ValueError('calibration = "generated" needs a model to sample the windows from')
        return generated_windows(weights, spec, tokens, sampling_model)
    if tokens.ndim != 1 or tokens.shape[0] < length:
        raise ValueError(
            f"calibration text has {tokens.shape[0]} tokens, fewer than sample_tokens = {length}"
        )
    starts = rng.integers(0, tokens.shape[0] - length + 1, size=n)
    return np.stack([tokens[s : s + length] for s in starts])


# calibration = "generated": what the model writes itself, started from calibration-split prompts
GENERATED_PROMPT_TOKENS = 4  # each window's prompt: this many calibration-split tokens
GENERATED_POLICY = "int8"  # the sampling model: a proxy of FP32 (KLD 0.006 on SmolLM2)
GENERATED_TEMPERATURE = 1.0  # the model's own distribution ...
GENERATED_TOP_P = 0.95  # ... without its least likely 5% tail
_GENERATED: dict = {}  # (id(weights), sample_tokens, seed, prompt text) -> (weights, ids)


def generated_windows(weights, spec: ActivationSpec, tokens, sampling_model) -> np.ndarray:
    """(N, sample_tokens) ids: window i starts with GENERATED_PROMPT_TOKENS tokens at a seeded
    offset of `tokens` (the calibration split) and goes on with tokens the model samples from
    its own next-token distribution (GENERATED_POLICY weights, temperature GENERATED_TEMPERATURE,
    top-p GENERATED_TOP_P, seed `spec.seed`), one window after another from an empty cache;
    `sampling_model(weights, max_context)` builds that model (reset / prefill / decode).
    Data-free calibration as LLM-QAT (Liu et al. 2023, section 2.1) builds it: as many distinct
    tokens as asked for, where the shipped split has ~1,600. Kept per process (the same weights
    and fields give the same windows, so a run's variants share one generation; the first n of
    N windows are the N-window run's first n, so a smaller `samples` reuses a larger one)."""
    n, length = spec.samples, spec.sample_tokens
    prompt = GENERATED_PROMPT_TOKENS
    if tokens.ndim != 1 or tokens.shape[0] < prompt:
        raise ValueError(
            f"calibration text has {tokens.shape[0]} tokens, fewer than the {prompt} a "
            "generated window starts from"
        )
    if length <= prompt:
        raise ValueError(
            f'calibration = "generated": sample_tokens = {length} must exceed the '
            f"{prompt}-token prompt"
        )
    key = (id(weights), length, spec.seed, hashlib.sha256(tokens.tobytes()).hexdigest())
    hit = _GENERATED.get(key)
    if hit is not None and hit[0] is weights and hit[1].shape[0] >= n:
        return hit[1][:n].copy()
    rng = np.random.default_rng(spec.seed)
    starts = rng.integers(0, tokens.shape[0] - prompt + 1, size=n)
    sample = Sampler(temperature=GENERATED_TEMPERATURE, top_p=GENERATED_TOP_P, seed=spec.seed)
    model = sampling_model(weights, length)
    out = np.empty((n, length), np.int64)
    for i, s in enumerate(starts):
        out[i, :prompt] = tokens[s : s + prompt]
        model.reset()
        logits = model.prefill(out[i, :prompt])
        for t in range(prompt, length):
            out[i, t] = sample(logits)
            if t + 1 < length:
                logits = model.decode(int(out[i, t]))
        report("generating calibration windows", i + 1, n)
    _GENERATED[key] = (weights, out)
    return out.copy()


class _Watch:
    """Calls `inner` and records its input's per-channel max|x| under `names` (`inner` None:
    records only; the output head's logits are not needed to calibrate its input)."""

    def __init__(self, inner, names, observers):
        self.inner, self.names, self.observers = inner, names, observers

    def __call__(self, x):
        obs = self.observers.get(self.names[0])
        if obs is None:
            obs = AbsMaxObserver(x.shape[-1])
            for n in self.names:
                self.observers[n] = obs
        obs.update(x)
        return None if self.inner is None else self.inner(x)


def _weight_amax(lin) -> np.ndarray:
    """(K,) max|w| per input column of an FP32 QuantLinear or Fused (stored (N, K))."""
    lin = getattr(lin, "single", None) or lin
    return np.abs(np.asarray(lin.stored, dtype=np.float32)).max(axis=0)


def observe_scales(
    model, windows: np.ndarray, granularity: str, alpha: float = 0.5
) -> dict[str, np.ndarray]:
    """Run `model` (a runtime.llama.Llama, FP32) on every window with every Linear's input
    observed; Linear name -> (K,) float32 static scale. The model's Linears are restored."""
    observers: dict[str, AbsMaxObserver] = {}
    w_amax: dict[str, np.ndarray] = {}
    saved = []

    def watch(owner, attr, names, call=True):
        inner = getattr(owner, attr)
        saved.append((owner, attr, inner))
        amax = _weight_amax(inner)
        for n in names:
            w_amax[n] = amax
        setattr(owner, attr, _Watch(inner if call else None, names, observers))

    for b in model.blocks:
        watch(b, "qkv", list(b.qkv.formats))
        watch(b, "o", [b.o.name])
        watch(b, "gate_up", list(b.gate_up.formats))
        watch(b, "down", [b.down.name])
    watch(model, "lm_head", ["lm_head"], call=False)  # last op of forward: output unused
    try:
        for w in windows:
            model.reset()
            model.forward(w, all_logits=True)  # every position reaches lm_head
    finally:
        for owner, attr, inner in saved:
            setattr(owner, attr, inner)
        model.reset()
    return {n: o.scales(granularity, w_amax[n], alpha) for n, o in observers.items()}


class _SumSquares:
    """Calls `inner` and adds its input's per-channel sum of squares (float64) into `acc`."""

    def __init__(self, inner, acc: list):
        self.inner, self.acc = inner, acc

    def __call__(self, x):
        x2 = np.asarray(x, dtype=np.float64).reshape(-1, x.shape[-1])
        if not np.isfinite(x2).all():
            raise ValueError("calibration activations contain NaN/Inf")
        sq = (x2 * x2).sum(axis=0)
        if self.acc:
            self.acc[0] += sq
        else:
            self.acc.append(sq)
        return self.inner(x)


def activation_norms(
    model, windows: np.ndarray, head_dim: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per block of `model` (a runtime.llama.Llama, FP32, unpruned): (FFN channel norms (F,),
    query head norms (H,)), L2 over every token of every window of the inputs of down_proj and
    o_proj (a head's norm over its head_dim columns too). The model's Linears are restored."""
    saved, accs = [], []
    for b in model.blocks:
        pair = ([], [])
        for attr, acc in (("down", pair[0]), ("o", pair[1])):
            inner = getattr(b, attr)
            saved.append((b, attr, inner))
            setattr(b, attr, _SumSquares(inner, acc))
        accs.append(pair)
    try:
        for w in windows:
            model.reset()
            model.forward(w, all_logits=False)
    finally:
        for owner, attr, inner in saved:
            setattr(owner, attr, inner)
        model.reset()
    out = []
    for ffn_acc, o_acc in accs:
        ffn = np.sqrt(ffn_acc[0])
        heads = np.sqrt(o_acc[0].reshape(-1, head_dim).sum(axis=1))
        out.append((ffn, heads))
    return out
