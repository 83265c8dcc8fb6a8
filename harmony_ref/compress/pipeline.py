"""compress(weights, policy, calibration_tokens) -> weights: a policy's steps that change the
weights, run before the decoder is built, in this order:

1. `[prune]` (model/prune.py): FFN channels and heads removed. With `score = "activation"` the
   unpruned model first runs in FP32 on the calibration windows to score them
   (compress/observe.py: activation_norms); with `repair` it records the inputs' Gram
   matrices instead (unpruned_grams), which also choose the channels of `score = "obs"`; with
   `distill_epochs` the pruned model is fine-tuned on the unpruned one's outputs
   (model/distill.py). All three read one set of windows.
2. `[activations]` (W8A8): static activation scales observed by the (pruned) model in FP32 on
   the policy's samples (compress/observe.py: observe_scales).
3. `[quantize]` gptq / awq: fitted block by block on the (pruned) model's calibration windows
   (compress/sequential.py: calibrate_weights); AWQ's scales fold into the FP32 weights, GPTQ's
   tensors are kept by Linear name.

The result is a DecoderWeights whose `layers` are the pruned / distilled / folded FP32 matrices,
whose `stored` holds the GPTQ-fitted tensors (the file's own stored tensors are dropped once a
step changes the matrices), whose `act_scales` holds the W8A8 scales, and whose
`compressed_for` names the policy: runtime/llama.py's Llama builds its Linears from it and
refuses weights compressed for another policy. A policy with none of the three steps returns
`weights` itself. The windows come from the corpus's calibration split (or `calibration_tokens`),
never the held-out split that eval/lm.py scores.
"""

from __future__ import annotations

import dataclasses
import hashlib
from functools import partial

import numpy as np

from harmony_ref.compress.observe import (
    GENERATED_POLICY,
    activation_norms,
    calibration_windows,
    observe_scales,
)
from harmony_ref.compress.sequential import activation_grams, calibrate_weights
from harmony_ref.model.decoder import DecoderWeights
from harmony_ref.model.distill import distill_decoder
from harmony_ref.model.prune import prune_decoder
from harmony_ref.quant.compress import PruneSpec
from harmony_ref.quant.policy import FP32, Policy, load_policy
from harmony_ref.runtime.llama import DEFAULT_MAX_CONTEXT, Llama, LlamaRef, compresses
from harmony_ref.runtime.progress import report

FP32_POLICY = Policy("fp32", FP32)  # the model every calibration pass runs


def compress(
    weights: DecoderWeights, policy: str | Policy, calibration_tokens=None
) -> DecoderWeights:
    """`weights` after `policy`'s pruning, distillation, activation scales and GPTQ / AWQ (see
    the module doc). `calibration_tokens`: token ids to draw the calibration windows from
    (default: the corpus's calibration split, tokenized by the checkpoint's tokenizer)."""
    policy = load_policy(policy)
    if not compresses(policy):
        return weights
    if weights.compressed_for is not None:
        raise ValueError(
            f"{policy.source}: the weights are already compressed "
            f"(for policy {weights.compressed_for.name!r}): compress the checkpoint's weights"
        )
    q = policy.quantize
    if policy.activations is not None and policy.calibrated:
        if "awq" in {q.method, *(m for _, m in q.methods)}:
            raise ValueError(
                f"{policy.source}: [quantize] awq with [activations]: the "
                "static activation scales would no longer fit the folded model"
            )
    stored = weights.stored
    if policy.prune is not None:
        # pruning changes the matrices: the file's stored tensors no longer apply
        weights = dataclasses.replace(_pruned(weights, policy.prune, calibration_tokens), stored={})
        stored = {}
    scales = {}
    act = policy.activations
    if act is not None:  # static scales from this (pruned) model run in FP32
        base = Llama(weights, FP32_POLICY, max_context=act.sample_tokens)
        windows = calibration_windows(weights, act, calibration_tokens, _sampling_model)
        scales = observe_scales(base, windows, act.granularity, act.alpha)
        del base
    if policy.calibrated:  # GPTQ / AWQ on this (pruned) model's calibration windows
        windows = calibration_windows(weights, q.activations(), calibration_tokens, _sampling_model)
        base = Llama(weights, FP32_POLICY, max_context=q.sample_tokens)
        # the fitted tensors replace the file's (AWQ rescales the weights it folds into)
        weights, stored = calibrate_weights(base, weights, policy, windows)
        del base
    return dataclasses.replace(weights, stored=stored, act_scales=scales, compressed_for=policy)


def build_model(
    weights: DecoderWeights,
    policy: str | Policy = "fp32",
    kv_dtype: str = "fp16",
    max_context: int = DEFAULT_MAX_CONTEXT,
    reference: bool = False,
    calibration_tokens=None,
):
    """The oracle (`reference=True`, or policy "reference") or the kernel path on the weights
    `policy` compresses."""
    if reference or policy == "reference":
        return LlamaRef(weights, max_context)
    policy = load_policy(policy)
    return Llama(compress(weights, policy, calibration_tokens), policy, kv_dtype, max_context)


def _sampling_model(weights: DecoderWeights, max_context: int) -> Llama:
    """The model that writes `calibration = "generated"` windows (GENERATED_POLICY)."""
    return Llama(weights, GENERATED_POLICY, max_context=max_context)


def _pruned(weights: DecoderWeights, prune: PruneSpec, calibration_tokens) -> DecoderWeights:
    """Step 1: `weights` pruned by `prune`, repaired and distilled as it asks."""
    c = weights.config
    norms = None
    grams = None
    windows = (  # the one set every calibrated part of the step reads
        calibration_windows(weights, prune.windows(), calibration_tokens, _sampling_model)
        if prune.calibrates
        else None
    )
    if prune.repair:  # Gram matrices (and norms) of the unpruned model in FP32
        grams = unpruned_grams(weights, windows)
        norms = [
            (np.sqrt(np.diag(gf)), np.sqrt(np.diag(go).reshape(-1, c.head_dim).sum(axis=1)))
            for gf, go in grams
        ]
    elif prune.score == "activation":  # scored by the unpruned model run in FP32
        base = Llama(weights, FP32_POLICY, max_context=prune.sample_tokens)
        norms = activation_norms(base, windows, c.head_dim)
        del base
    pruned = prune_decoder(weights, prune, norms, grams)
    if prune.distill_epochs:  # fine-tuned on the unpruned model's outputs
        pruned, _ = distill_decoder(
            weights,
            pruned,
            windows,
            prune.distill_epochs,
            prune.distill_lr,
            prune.distill_params,
            prune.seed,
            partial(report, "distilling the pruned model (windows x epochs)"),
        )
    return pruned


_GRAMS: dict = {}  # (id(weights), windows' SHA-256) -> (weights, grams): the last one computed


def unpruned_grams(weights: DecoderWeights, windows: np.ndarray) -> list:
    """compress/sequential.py activation_grams of `weights` run in FP32 on `windows`, kept for the
    last (weights, windows) pair of the process: the policies of one run that repair on the same
    windows (ridges, ratios, scores) share one pass (the Grams of SmolLM2 on 512 windows of 128
    tokens take minutes; they hold ~0.6 GB)."""
    windows = np.ascontiguousarray(windows, np.int64)
    key = (id(weights), hashlib.sha256(windows.tobytes()).hexdigest())
    hit = _GRAMS.get(key)
    if hit is not None and hit[0] is weights:
        return hit[1]
    base = Llama(weights, FP32_POLICY, max_context=windows.shape[1])
    grams = activation_grams(base, windows)
    _GRAMS.clear()
    _GRAMS[key] = (weights, grams)
    return grams
