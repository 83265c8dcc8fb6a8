"""What a policy asks beyond weight formats: structured pruning and static INT8 activations.

Two optional tables of a policy TOML (quant/policy.py reads them into `Policy.prune` and
`Policy.activations`):

    [prune]                       # structured pruning (fine-tuning only with distill_epochs)
    ffn = 0.25                    # fraction of FFN channels removed in every block
    heads = 0.0                   # fraction of attention heads removed in every block
    head_unit = "query"           # "query": query heads, the same count in every KV group
                                  # "kv": whole KV groups (a KV head with all its query heads)
    score = "l1"                  # "l1": the L1 norms of the unit's weights (default), or
                                  # "activation": ||activation|| x L1 of what the unit writes,
                                  # "obs": FFN channels the repair reconstructs best (repair)
    samples = 10                  # activation only: N calibration windows of
    sample_tokens = 128           #   `sample_tokens` tokens, drawn with `seed` (the
    seed = 0                      #   [activations] defaults)
    repair = false                # refit the Linear after each pruned unit (down_proj, o_proj)
    repair_ridge = 0.01           #   on calibration activations (model/prune.py: repair_next)
    calibration = "corpus"        # activation / repair: the windows' text, as [activations]
    distill_epochs = 0            # then train on the unpruned model's outputs over the same
    distill_lr = 5e-5             #   windows (model/distill.py): passes, Adam step, and what
    distill_params = "ffn"        #   is trained ("down": down_proj; "ffn": gate, up and down)
    [prune.blocks]                # per-block ratios: block index or range "a-b" (inclusive)
    "0-3" = { ffn = 0.5 }         #   a missing key keeps the top-level ratio

    [activations]                 # W8A8: int8 activations with static (calibrated) scales
    granularity = "per-tensor"    # or "per-channel" (one scale per input channel of a Linear),
                                  # or "smooth" (SmoothQuant: per-channel factors max|x|^alpha /
                                  # max|w|^(1 - alpha) into the weight, then one per-tensor scale)
    alpha = 0.5                   # smooth only
    calibration = "corpus"        # the corpus's calibration split, "random" token ids, or
                                  # "generated": text the model samples itself (below)
    samples = 10                  # N windows of `sample_tokens` tokens
    sample_tokens = 128
    seed = 0

    [quantize]                    # how int4 / int8 weights are fitted (quant/gptq.py, awq.py)
    method = "gptq"               # "rtn" (round to nearest, the default), "gptq" or "awq"
    calibration = "corpus"        # the corpus's calibration split, "random" token ids, or
                                  # "generated": text the model samples itself (below)
    samples = 16                  # N windows of `sample_tokens` tokens, drawn with `seed`
    sample_tokens = 128
    seed = 0
    damp = 0.01                   # gptq: H + damp x mean(diag H) x I
    block_size = 128              # gptq: columns per lazy batch update
    act_order = false             # gptq: columns by decreasing diag(H)
    grid = 20                     # awq: alpha in 0, 1/grid, ..., (grid - 1)/grid
    [quantize.methods]            # per layer pattern (as [layers] matches) or per format name
    "*.down_proj" = "rtn"         #   an exact name, then patterns in file order, then
    "int8" = "rtn"                #   format names, then `method`

`score = "activation"` (decoders only; MiniLM refuses it) runs the unpruned FP32 model on N
windows of the corpus's *calibration* split (compress/observe.py: calibration_windows, the
same windows rule as [activations] with calibration = "corpus"; the held-out split is never
read) and scores an FFN channel j by ||h_j|| (the L2 norm over every calibration token of the
SwiGLU output feeding down_proj) x ||down[:, j]||_1, a query head by ||its attention output||
(over tokens and its head_dim values, the input of o_proj) x the L1 norm of its o_proj columns,
a KV group by the sum of its query heads' scores. `samples`, `sample_tokens` and `seed` apply to
that score only and are refused with score = "l1". `repair = true` refits down_proj (and o_proj)
on the same windows (model/prune.py: repair_next). `score = "obs"` (with repair = true) chooses
the FFN channels by what they cost *after* that refit, greedily, Optimal Brain Surgeon on
down_proj's input Gram (model/prune.py: obs_keep); heads keep the activation score.
`distill_epochs = N` (N > 0) then fine-tunes the pruned model on the same windows: knowledge
distillation with the unpruned model as the teacher, KL of its next-token distribution per
position, Adam at `distill_lr`, N passes, training each block's down_proj ("down") or its whole
FFN ("ffn"); shapes do not change (model/distill.py).

`calibration` picks the windows' text, in all three tables: "corpus" (the calibration split),
"random" (uniform token ids), or "generated": each window is 4 calibration-split tokens the
model continues itself, sampling its own next-token distribution (compress/observe.py:
generated_windows; data-free calibration as in LLM-QAT, Liu et al. 2023). The shipped split has
~1,600 tokens, so a fit with more unknowns per row than that (repair's ridge refit of a
1,536-wide down_proj) overfits it; generated windows are as many distinct tokens as asked for.

The ratio per layer type is `ffn` / `heads`, per block `[prune.blocks]`; kept counts are
rounded (FFN channels to a multiple of FFN_MULTIPLE so every INT4 group size the policies use
still divides the row, heads to whole heads, at least one kept). Validation (the tables read
into these specs: quant/compress_tables.py) names the file, the field and the value, like the
rest of a policy.
"""

from __future__ import annotations

from dataclasses import dataclass

HEAD_UNITS = ("query", "kv")
PRUNE_SCORES = ("l1", "activation", "obs")
GRANULARITIES = ("per-tensor", "per-channel", "smooth")
CALIBRATIONS = ("corpus", "random", "generated")
PRUNE_KEYS = {
    "ffn",
    "heads",
    "head_unit",
    "blocks",
    "score",
    "samples",
    "sample_tokens",
    "seed",
    "repair",
    "repair_ridge",
    "calibration",
    "distill_epochs",
    "distill_lr",
    "distill_params",
}
DISTILL_PARAMS = ("down", "ffn")  # model/distill.py: TRAINED_MATRICES
MAX_DISTILL_EPOCHS = 100
PRUNE_SAMPLE_KEYS = (
    "samples",
    "sample_tokens",
    "seed",
    "calibration",
)  # activation score or repair only
BLOCK_KEYS = {"ffn", "heads"}
METHODS = ("rtn", "gptq", "awq")
QUANTIZE_KEYS = {
    "method",
    "methods",
    "calibration",
    "samples",
    "sample_tokens",
    "seed",
    "damp",
    "block_size",
    "act_order",
    "grid",
}
ACTIVATION_KEYS = {"granularity", "calibration", "samples", "sample_tokens", "seed", "alpha"}
# What each field of [prune], [prune.blocks] and [activations] means: docs/reference/policy.md is
# generated from these (tools/docs_reference.py), and the build fails on a key they do not describe.
PRUNE_FIELD_DOCS = {
    "ffn": "fraction of FFN channels removed in every block (0 to < 1)",
    "heads": "fraction of attention heads removed in every block (0 to < 1)",
    "head_unit": '"query": query heads, the same count in every KV group; "kv": whole KV groups',
    "blocks": 'table: block index ("3") or inclusive range ("0-3") -> { ffn = r, heads = r }',
    "score": '"l1": L1 norms of the unit\'s weights (default); "activation": ||activation|| x '
    'L1 of what the unit writes, on the calibration split; "obs" (repair = true): the FFN '
    "channels whose removal the repair reconstructs best (greedy Optimal Brain Surgeon), heads "
    "as activation",
    "samples": 'score = "activation" only: calibration windows (default 10)',
    "sample_tokens": 'score = "activation" only: tokens per window (default 128)',
    "seed": 'score = "activation" only: the windows\' seed (default 0)',
    "repair": "true: refit the Linear after each pruned unit (down_proj, o_proj) on calibration "
    "activations, a ridge fit of the correction to the kept columns (default false)",
    "repair_ridge": "repair only: the ridge, x mean(diag) of the kept Gram (default 0.01)",
    "calibration": 'score = "activation" or repair only: the windows\' text, as [activations] '
    'calibration (default "corpus")',
    "distill_epochs": "passes of knowledge distillation after pruning (and repair) on the same "
    "calibration windows, the unpruned model the teacher (default 0: none)",
    "distill_lr": "distill_epochs > 0 only: Adam's step size (default 5e-5)",
    "distill_params": 'distill_epochs > 0 only: what is trained, "down" (each down_proj) or '
    '"ffn" (gate_proj, up_proj and down_proj; default)',
}
BLOCK_FIELD_DOCS = {"ffn": "this block's FFN ratio", "heads": "this block's heads ratio"}
ACTIVATION_FIELD_DOCS = {
    "granularity": '"per-tensor", "per-channel" (one scale per input channel) or "smooth" '
    "(SmoothQuant factors into the weight, then one per-tensor scale)",
    "calibration": '"corpus" (the corpus\'s calibration split), "random" token ids, or '
    '"generated" (text the model samples itself from calibration-split prompts)',
    "alpha": "smooth only: SmoothQuant's migration strength, in [0, 1] (default 0.5)",
    "samples": "calibration windows (default 10)",
    "sample_tokens": "tokens per window (default 128)",
    "seed": "the windows' seed (default 0)",
}
QUANTIZE_FIELD_DOCS = {
    "method": '"rtn" (round to nearest, default), "gptq" (Frantar et al. 2022) or "awq" '
    "(Lin et al. 2023): how every Linear's format is fitted",
    "methods": "table: layer-name pattern or format name -> method, overriding `method`",
    "calibration": '"corpus" (the corpus\'s calibration split), "random" token ids, or '
    '"generated" (text the model samples itself from calibration-split prompts)',
    "samples": "calibration windows (default 16)",
    "sample_tokens": "tokens per window (default 128)",
    "seed": "the windows' seed (default 0)",
    "damp": "gptq: dampening, a fraction of mean(diag H) added to H's diagonal, in (0, 1) "
    "(default 0.01)",
    "block_size": "gptq: columns per lazy block update (default 128)",
    "act_order": "gptq: columns in order of decreasing diag H (default false)",
    "grid": "awq: points of the alpha grid in [0, 1) (default 20)",
}
FFN_MULTIPLE = 32  # kept FFN channels: a multiple of this (int4-g32 rows, 32-value act blocks)
MAX_SAMPLES = 10_000
MAX_BLOCKS = 1024  # blocks a [prune.blocks] range may name: model/spec.py SPEC_LIMITS["n_layers"]
MAX_SAMPLE_TOKENS = 8192


@dataclass(frozen=True)
class PruneSpec:
    ffn: float = 0.0
    heads: float = 0.0
    head_unit: str = "query"
    blocks: tuple[tuple[int, float | None, float | None], ...] = ()  # (block, ffn, heads)
    score: str = "l1"  # l1 | activation | obs
    samples: int = 10  # activation score / repair: calibration windows (see the module doc)
    sample_tokens: int = 128
    seed: int = 0
    repair: bool = False  # refit the next Linear on calibration activations (model/prune.py)
    repair_ridge: float = 0.01  # ridge on the correction, x mean(diag) of the kept Gram
    calibration: str = "corpus"  # activation score / repair: the windows' text (CALIBRATIONS)
    distill_epochs: int = 0  # knowledge distillation afterwards (model/distill.py); 0: none
    distill_lr: float = 5e-5
    distill_params: str = "ffn"  # DISTILL_PARAMS

    @property
    def calibrates(self) -> bool:
        """Whether pruning reads calibration windows (activation or obs score, repair or
        distillation)."""
        return self.score != "l1" or self.repair or self.distill_epochs > 0

    @property
    def is_empty(self) -> bool:
        """True when nothing is removed in any block."""
        return self.ffn == 0 and self.heads == 0 and all(not f and not h for _, f, h in self.blocks)

    def windows(self) -> ActivationSpec:
        """The calibration windows of the activation score and repair, as an [activations]
        sampling."""
        return ActivationSpec(
            calibration=self.calibration,
            samples=self.samples,
            sample_tokens=self.sample_tokens,
            seed=self.seed,
        )

    def ratios(self, block: int) -> tuple[float, float]:
        """(ffn ratio, heads ratio) of block `block`: its [prune.blocks] entry, else the
        top-level ratios (later entries win where ranges overlap)."""
        ffn, heads = self.ffn, self.heads
        for i, f, h in self.blocks:
            if i == block:
                ffn = ffn if f is None else f
                heads = heads if h is None else h
        return ffn, heads

    @property
    def label(self) -> str:
        parts = []
        if self.ffn:
            parts.append(f"ffn{self.ffn:g}")
        if self.heads:
            parts.append(f"heads{self.heads:g}" + ("kv" if self.head_unit == "kv" else ""))
        if self.blocks:
            parts.append(f"{len({b for b, _, _ in self.blocks})}blocks")
        gen = "-gen" if self.calibration == "generated" else ""
        if self.calibration == "random":
            gen = "-random"
        if self.score != "l1":
            score = "act" if self.score == "activation" else self.score
            parts.append(f"{score}{gen}-n{self.samples}x{self.sample_tokens}")
        if self.repair:
            parts.append(
                "repair"
                + ("" if self.score != "l1" else f"{gen}-n{self.samples}x{self.sample_tokens}")
            )
        if self.distill_epochs:
            parts.append(f"distill{self.distill_params}{self.distill_epochs}-lr{self.distill_lr:g}")
        return "prune-" + "-".join(parts) if parts else "prune-none"

    def to_dict(self) -> dict:
        """Every field, JSON-ready (records and sweep rows carry it)."""
        d = {"ffn": self.ffn, "heads": self.heads, "head_unit": self.head_unit, "score": self.score}
        if self.calibrates:
            d.update(samples=self.samples, sample_tokens=self.sample_tokens, seed=self.seed)
            if self.calibration != "corpus":
                d["calibration"] = self.calibration
        if self.repair:
            d.update(repair=True, repair_ridge=self.repair_ridge)
        if self.distill_epochs:
            d.update(
                distill_epochs=self.distill_epochs,
                distill_lr=self.distill_lr,
                distill_params=self.distill_params,
            )
        if self.blocks:
            d["blocks"] = [list(b) for b in self.blocks]
        return d

    def to_toml(self) -> list[str]:
        lines = [
            "",
            "[prune]",
            f"ffn = {self.ffn!r}",
            f"heads = {self.heads!r}",
            f'head_unit = "{self.head_unit}"',
        ]
        if self.score != "l1":
            lines.append(f'score = "{self.score}"')
        if self.calibrates:
            lines += [
                f"samples = {self.samples}",
                f"sample_tokens = {self.sample_tokens}",
                f"seed = {self.seed}",
            ]
            if self.calibration != "corpus":
                lines.append(f'calibration = "{self.calibration}"')
        if self.repair:
            lines += ["repair = true", f"repair_ridge = {self.repair_ridge!r}"]
        if self.distill_epochs:
            lines += [
                f"distill_epochs = {self.distill_epochs}",
                f"distill_lr = {self.distill_lr!r}",
                f'distill_params = "{self.distill_params}"',
            ]
        if self.blocks:
            lines += ["", "[prune.blocks]"]
            for i, f, h in self.blocks:
                items = ([f"ffn = {f!r}"] if f is not None else []) + (
                    [f"heads = {h!r}"] if h is not None else []
                )
                lines.append(f'"{i}" = {{ {", ".join(items)} }}')
        return lines


@dataclass(frozen=True)
class ActivationSpec:
    granularity: str = "per-tensor"
    calibration: str = "corpus"
    samples: int = 10
    sample_tokens: int = 128
    seed: int = 0
    alpha: float = 0.5  # smooth: the share of each channel's range moved into the weight

    @property
    def label(self) -> str:
        return f"a8-{self.granularity}-{self.calibration}-n{self.samples}"

    def to_dict(self) -> dict:
        """Every field, JSON-ready (records and sweep rows carry it)."""
        return {
            "granularity": self.granularity,
            "calibration": self.calibration,
            "samples": self.samples,
            "sample_tokens": self.sample_tokens,
            "seed": self.seed,
            "alpha": self.alpha,
        }

    def to_toml(self) -> list[str]:
        return [
            "",
            "[activations]",
            f'granularity = "{self.granularity}"',
            f'calibration = "{self.calibration}"',
            f"samples = {self.samples}",
            f"sample_tokens = {self.sample_tokens}",
            f"seed = {self.seed}",
            f"alpha = {self.alpha!r}",
        ]


@dataclass(frozen=True)
class QuantizeSpec:
    """A policy's [quantize] table: the fitting method per Linear and its calibration."""

    method: str = "rtn"
    methods: tuple[tuple[str, str], ...] = ()  # ordered (layer pattern or format name, method)
    calibration: str = "corpus"
    samples: int = 16
    sample_tokens: int = 128
    seed: int = 0
    damp: float = 0.01
    block_size: int = 128
    act_order: bool = False
    grid: int = 20

    @property
    def label(self) -> str:
        used = sorted({self.method, *(m for _, m in self.methods)} - {"rtn"})
        return "+".join(used) + f"-n{self.samples}x{self.sample_tokens}" if used else "rtn"

    def activations(self) -> ActivationSpec:
        """The calibration windows, as an [activations] sampling (compress/observe.py)."""
        return ActivationSpec(
            calibration=self.calibration,
            samples=self.samples,
            sample_tokens=self.sample_tokens,
            seed=self.seed,
        )

    def to_dict(self) -> dict:
        """Every field, JSON-ready (records and sweep rows carry it)."""
        return {
            "method": self.method,
            "methods": [list(m) for m in self.methods],
            "calibration": self.calibration,
            "samples": self.samples,
            "sample_tokens": self.sample_tokens,
            "seed": self.seed,
            "damp": self.damp,
            "block_size": self.block_size,
            "act_order": self.act_order,
            "grid": self.grid,
        }

    def to_toml(self) -> list[str]:
        def q(s: str) -> str:
            return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

        lines = [
            "",
            "[quantize]",
            f"method = {q(self.method)}",
            f"calibration = {q(self.calibration)}",
            f"samples = {self.samples}",
            f"sample_tokens = {self.sample_tokens}",
            f"seed = {self.seed}",
            f"damp = {self.damp!r}",
            f"block_size = {self.block_size}",
            f"act_order = {'true' if self.act_order else 'false'}",
            f"grid = {self.grid}",
        ]
        if self.methods:
            lines += ["", "[quantize.methods]"] + [f"{q(p)} = {q(m)}" for p, m in self.methods]
        return lines
