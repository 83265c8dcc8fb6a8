"""Sensitivity of a decoder to each group of its Linears, by KL divergence to the FP32
reference: the rows the weight-budget planner (eval/lm_plan.py) chooses from.

    rows = lm_sensitivity("smollm2-135m", "int4-g32", by="type")    # one row per Linear type
    rows = lm_sensitivity("smollm2-135m", "int4-g32", by="block")   # one row per block
    rows = lm_sensitivity("smollm2-135m", "w8a8-per-channel")       # int8 W8A8, one type each
    rows = lm_sensitivity("smollm2-135m", prune={"ffn": 0.1}, prune_score="activation")

Sensitivity: one group alone in the format, everything else FP32 (the FP32 weights as read, run
by the kernel path), scored against the FP32 reference (eval/lm.py): KLD mean / p99, PPL ratio,
top-1 agreement. Groups: `type` (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj
across every block, and the output head `lm_head`) or `block` (every Linear of block i).
`method` ("rtn", "gptq", "awq") fits the group's int4 / int8 weights by that method
(quant/gptq.py, quant/awq.py; the [quantize] defaults, calibrated, like W8A8, on the tokens of the
calibration part the rows never score). A format `w8a8-per-channel` / `w8a8-per-tensor` /
`w8a8-smooth` (`w8a8`: per-channel) puts the group's Linears in int8 with static activation
scales (the policy's [activations] table with its defaults, quant/compress.py). With `prune`
(ratios {"ffn": r} and/or {"heads": r}, `prune_score` "l1" or "activation") the weights stay
FP32 and the group is pruned instead: by `type` the rows are `ffn` (every block's FFN at the
ratio) and `heads` (every block's heads), by `block` one block at a time at the given ratios;
`bytes` are the group's FP32 Linears at the pruned shapes, `bytes_fp32` unpruned.

Held out means held out: sensitivity scores the shipped corpus's `calibration` part only (the
planner's policy is then scored on the `heldout` part). Within sensitivity, W8A8 scales and
activation pruning scores calibrate on the tokens of that part its rows never score (each
chunk's context half and the tail: eval/lm.py unscored_tokens), so no row is scored on text it
was calibrated on.

Rows are cached on disk per (model file, corpus, context, chunks, format, activations, pruning,
grouping, code version) under $HARMONY_REF_CACHE/lm-sensitivity/ (HARMONY_REF_NO_LM_CACHE=1: off).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from importlib import resources

from harmony_ref._io import write_text_atomic
from harmony_ref.eval.lm import DEFAULT_CONTEXT, LAYER_TYPES, evaluate_lm, unscored_tokens
from harmony_ref.eval.lm_accuracy import Corpus, model_sha256
from harmony_ref.eval.lm_cache import ReferenceCache, cache_root, code_version
from harmony_ref.quant.compress import (
    GRANULARITIES,
    METHODS,
    PRUNE_SCORES,
    ActivationSpec,
    PruneSpec,
)
from harmony_ref.quant.policy import (
    FP32,
    INT8,
    WeightFormat,
    format_for_rows,
    parse_format,
    policy_from_dict,
)

GROUPINGS = ("type", "block")
CALIBRATION = "calibration"  # the corpus part sensitivity and planning score
W8A8 = "w8a8"  # sensitivity format prefix: int8 weights + static int8 activations
PRUNE_KINDS = ("ffn", "heads")
ATTENTION_TYPES = ("q_proj", "k_proj", "v_proj", "o_proj")
FFN_TYPES = ("gate_proj", "up_proj", "down_proj")
PRUNED_TYPES = {"ffn": FFN_TYPES, "heads": ATTENTION_TYPES}  # what each PRUNE_KINDS kind cuts
# Modules the cached rows' numbers come from beyond lm_cache.CODE_MODULES
ROW_CODE_MODULES = (
    "model/prune.py",
    "compress/observe.py",
    "quant/compress.py",
    "quant/activations.py",
    "kernels/matmul_w8a8.py",
    "eval/lm_sensitivity.py",
    "quant/gptq.py",
    "quant/awq.py",
    "compress/sequential.py",
    "runtime/linear.py",
    "compress/pipeline.py",
)


def parse_variant(
    text: str, where: str = "--weight-format"
) -> tuple[WeightFormat, ActivationSpec | None]:
    """A weight format, or w8a8[-<granularity>]: (int8, its ActivationSpec with the defaults)."""
    t = str(text).strip().lower()
    if t == W8A8 or t.startswith(W8A8 + "-"):
        g = t[len(W8A8) + 1 :] or "per-channel"
        if g not in GRANULARITIES:
            raise ValueError(
                f"{where}: unknown W8A8 variant {text!r}; expected w8a8 or "
                + ", ".join(f"w8a8-{x}" for x in GRANULARITIES)
            )
        return INT8, ActivationSpec(granularity=g)
    return parse_format(text, where), None


def variant_name(fmt: WeightFormat, act: ActivationSpec | None) -> str:
    return fmt.name if act is None else f"{W8A8}-{act.granularity}"


def parse_prune(text: str, where: str = "--prune") -> dict[str, float]:
    """'ffn=0.1' / 'heads=0.25' / 'ffn=0.1,heads=0.25' -> {kind: ratio}, ratios in (0, 1)."""
    out = {}
    for part in str(text).split(","):
        kind, eq, value = part.strip().partition("=")
        kind = kind.strip()
        try:
            ratio = float(value) if eq else None
        except ValueError:
            ratio = None
        if kind not in PRUNE_KINDS or ratio is None:
            raise ValueError(
                f"{where} {text!r}: expected ffn=<ratio> and/or heads=<ratio>, "
                f"comma-separated (e.g. ffn=0.1)"
            )
        if not 0 < ratio < 1 or kind in out:
            raise ValueError(f"{where} {text!r}: {kind} ratio must be in (0, 1), once")
        out[kind] = ratio
    return out


def _rows_code_version() -> str:
    h = hashlib.sha256(code_version().encode())
    root = resources.files("harmony_ref")
    for rel in ROW_CODE_MODULES:
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def group_patterns(config, by: str) -> list[tuple[str, str]]:
    """(group name, policy pattern) for every group of a decoder."""
    if by == "type":
        return [(t, "lm_head" if t == "lm_head" else f"*.{t}") for t in LAYER_TYPES]
    if by == "block":
        return [(f"block {i}", f"model.layers.{i}.*") for i in range(config.n_layers)]
    raise ValueError(f"--by must be one of {', '.join(GROUPINGS)}, got {by!r}")


def _block_shapes(d: int, q: int, kv: int, f: int) -> dict[str, tuple[int, int]]:
    """(N, K) of each Linear type of one block: model width d, query / kv widths, FFN width f."""
    return {
        "q_proj": (q, d),
        "k_proj": (kv, d),
        "v_proj": (kv, d),
        "o_proj": (d, q),
        "gate_proj": (f, d),
        "up_proj": (f, d),
        "down_proj": (d, f),
    }


def group_shapes(config, group: str, by: str) -> list[tuple[int, int]]:
    """(N, K) of every Linear in a group."""
    d = config.dim
    shape = _block_shapes(d, config.q_dim, config.kv_dim, config.ffn_dim)
    if by == "block":
        return list(shape.values())
    if group == "lm_head":
        return [(config.vocab_size, d)]
    return [shape[group]] * config.n_layers


def fits(fmt, shapes) -> bool:
    """Whether a policy may give `fmt` to these (N, K) rows: an INT4 group no longer than the
    longest row (quant/policy.py check_applies refuses a plan that does otherwise)."""
    if fmt.ggml:  # GGUF's blocks along K (32; the K-quants' 256)
        return all(k % fmt.facts.block == 0 for _, k in shapes)
    return not fmt.facts.grouped or fmt.group_size <= max(k for _, k in shapes)


def stored_bytes(fmt, shapes) -> int:
    """Bytes of the shapes in `fmt` as the runtime stores them (INT4 groups narrowed to K)."""
    return sum(format_for_rows(fmt, k).nbytes(n, k) for n, k in shapes)


def pruned_shapes(
    config, ffn: float = 0.0, heads: float = 0.0, score: str = "l1"
) -> dict[str, list[tuple[int, int]]]:
    """Type -> (N, K) of every Linear of that type with every block pruned at (ffn, heads):
    model/prune.py's kept counts (pruned_spec, the shapes the device model costs)."""
    from harmony_ref.model.prune import decoder_spec, pruned_spec

    sp = pruned_spec(decoder_spec(config), PruneSpec(ffn=ffn, heads=heads, score=score))
    d = config.dim
    shape = _block_shapes(
        d, sp.n_heads * config.head_dim, sp.n_kv_heads * config.head_dim, sp.intermediate
    )
    out = {t: [s] * config.n_layers for t, s in shape.items()}
    out["lm_head"] = [(config.vocab_size, d)]
    return out


def _rows_cache_path(
    model: str, path, corpus: Corpus, context: int, chunks, key: dict, by: str, stem: str
):
    root = cache_root()
    if root is None:
        return None
    digest = hashlib.sha256(
        "|".join(
            [
                model_sha256(model, path),
                corpus.sha256,
                str(context),
                str(chunks),
                json.dumps(key, sort_keys=True),
                by,
                _rows_code_version(),
            ]
        ).encode()
    )
    return root.parent / "lm-sensitivity" / f"{stem}-{by}-{digest.hexdigest()[:32]}.json"


@dataclass(frozen=True)
class _Group:
    name: str
    pattern: str
    policy: dict = field(hash=False)  # the policy table (default fp32)
    shapes: list = field(hash=False)  # (N, K) of the Linears it changes
    pruned_shapes: list | None = field(default=None, hash=False)


def _groups(
    config, by: str, fmt: WeightFormat, act, prune: dict | None, score: str, method: str = "rtn"
):
    """The rows' groups with the policy each is measured under (see the module doc)."""
    if not prune:
        out = []
        for group, pattern in group_patterns(config, by):
            pol = {"default": "fp32", "layers": {pattern: fmt.name}}
            if method != "rtn":
                pol["quantize"] = {"method": method}
            if act is not None:
                pol["activations"] = {"granularity": act.granularity}
            out.append(_Group(group, pattern, pol, group_shapes(config, group, by)))
        return out
    extra = {} if score == "l1" else {"score": score}
    full = pruned_shapes(config)
    if by == "type":
        out = []
        for kind, ratio in prune.items():
            cut = pruned_shapes(config, **{kind: ratio}, score=score)
            types = PRUNED_TYPES[kind]
            out.append(
                _Group(
                    kind,
                    f"{kind}={ratio:g} in every block",
                    {"default": "fp32", "prune": {kind: ratio, **extra}},
                    [s for t in types for s in full[t]],
                    [s for t in types for s in cut[t]],
                )
            )
        return out
    if by != "block":
        raise ValueError(f"--by must be one of {', '.join(GROUPINGS)}, got {by!r}")
    cut = pruned_shapes(config, **prune, score=score)
    per_block = lambda shapes: [shapes[t][0] for t in LAYER_TYPES if t != "lm_head"]  # noqa
    return [
        _Group(
            f"block {i}",
            f"model.layers.{i}.*",
            {"default": "fp32", "prune": {"blocks": {str(i): dict(prune)}, **extra}},
            per_block(full),
            per_block(cut),
        )
        for i in range(config.n_layers)
    ]


def lm_sensitivity(
    model: str = "smollm2-135m",
    fmt: str = "int4-g32",
    by: str = "type",
    context: int = DEFAULT_CONTEXT,
    chunks: int | None = None,
    progress=None,
    loaded=None,
    corpus: Corpus | None = None,
    prune: dict | None = None,
    prune_score: str = "l1",
    method: str = "rtn",
) -> list[dict]:
    """One row per group (see the module doc), in group order, scored on the calibration part;
    no row for a group whose rows the format cannot store (fits: q4_k on 576-wide rows).
    Keys: group, pattern, format, kld_mean, kld_p99, ppl_ratio, top1_agreement_pct, bytes,
    bytes_fp32, scored_tokens, corpus, plus activations (W8A8 rows) / prune (pruning rows).
    `progress(done, total)` is called after every chunk."""
    from harmony_ref.runtime.loader import load_decoder_shared, resolve_model_path

    f, act = parse_variant(fmt, "--weight-format")
    if prune_score not in PRUNE_SCORES:
        raise ValueError(
            f"--prune-score must be one of {', '.join(PRUNE_SCORES)}, got {prune_score!r}"
        )
    if prune and (act is not None or f != FP32):
        raise ValueError("--prune measures pruning alone, FP32 weights: drop --weight-format")
    path = resolve_model_path(model)
    corpus = corpus or Corpus.shipped(CALIBRATION)
    weights, tok = loaded or load_decoder_shared(model)
    if method not in METHODS:
        raise ValueError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")
    if method != "rtn" and (prune or act is not None or not f.facts.fitted):
        raise ValueError(
            f"--method {method} fits int4 / int8 weights: not with --prune, W8A8 or {f.name}"
        )
    groups = _groups(weights.config, by, f, act, prune, prune_score, method)
    if f.ggml and not prune:  # a group whose rows its blocks cannot store (q4_k: 256) has no row
        groups = [g for g in groups if fits(f, g.shapes)]
        if not groups:
            raise ValueError(
                f"--weight-format {f.name}: stores no {by} group of {model} (its rows are not "
                f"multiples of its block of {f.facts.block})"
            )
    key = {
        "format": f.name,
        "activations": None if act is None else act.to_dict(),
        **({"method": method} if method != "rtn" else {}),
        "prune": prune or None,
        "prune_score": prune_score if prune else None,
    }
    stem = (
        "prune-" + "-".join(f"{k}{v:g}" for k, v in prune.items()) + f"-{prune_score}"
        if prune
        else variant_name(f, act) + ("" if method == "rtn" else f"-{method}")
    )
    cache_path = _rows_cache_path(model, path, corpus, context, chunks, key, by, stem)
    if cache_path is not None and cache_path.is_file():
        try:
            rows = json.loads(cache_path.read_text())["rows"]
            if [r["group"] for r in rows] == [g.name for g in groups]:
                return rows
        except (ValueError, KeyError, TypeError):
            pass  # damaged: measured again and overwritten
    ids = tok.encode(corpus.text)
    ref_cache = ReferenceCache.for_run(
        model_sha256(model, path), corpus.sha256, context, tok.add_bos
    )
    n_chunks = min(chunks or len(ids) // context, len(ids) // context)
    # W8A8 scales and activation scores calibrate on the tokens these rows never score
    calibration = unscored_tokens(ids, context, n_chunks)
    fp32 = parse_format("fp32")
    rows = []
    for gi, g in enumerate(groups):
        policy = policy_from_dict(
            {"name": f"{g.name}@{stem}", **g.policy}, f"<{g.name} alone in {stem}>"
        )
        step = (
            (lambda done, total, gi=gi: progress(gi * n_chunks + done, len(groups) * n_chunks))
            if progress
            else None
        )
        r = evaluate_lm(
            weights,
            ids,
            context,
            [(policy, "fp16")],
            add_bos=tok.add_bos,
            progress=step,
            max_chunks=chunks,
            reference_cache=ref_cache,
            calibration_tokens=calibration,
        )
        s = r["results"][policy.name]
        row = {
            "group": g.name,
            "pattern": g.pattern,
            "format": variant_name(f, act) if not prune else "fp32",
            "kld_mean": s["kld_mean"],
            "kld_p99": s["kld_p99"],
            "ppl_ratio": s["ppl_ratio"],
            "top1_agreement_pct": s["top1_agreement_pct"],
            "bytes": stored_bytes(f, g.pruned_shapes or g.shapes),
            "bytes_fp32": stored_bytes(fp32, g.shapes),
            "scored_tokens": s["scored_tokens"],
            "corpus": corpus.label,
        }
        if act is not None:
            row["activations"] = policy.activations.to_dict()
        if method != "rtn":
            row["method"] = method
            row["quantize"] = policy.quantize.to_dict()
        if prune:
            row["prune"] = policy.prune.to_dict()
        rows.append(row)
    if cache_path is not None:
        write_text_atomic(cache_path, json.dumps({**key, "by": by, "rows": rows}))
    return rows


__all__ = [
    "GROUPINGS",
    "group_patterns",
    "lm_sensitivity",
    "parse_prune",
    "parse_variant",
    "pruned_shapes",
]
