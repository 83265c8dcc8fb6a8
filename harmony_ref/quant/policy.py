"""Mixed-precision quantization policies: which weight format each layer gets.

A policy is a TOML file (shipped ones live in harmony_ref/policies/):

    name = "mixed"
    description = "..."
    default = "int4-g32"                          # format of every Linear not matched below
    keep_fp16_layers = ["gate_proj", "lm_head"]   # patterns kept at FP16 (the reference recipe)
    keep_int8_layers = ["q_proj", "v_proj"]       # patterns kept at INT8
    [layers]                                      # per-layer formats (the planner writes these)
    "encoder.layer.0.attention.self.query" = "int8"

A pattern matches a dotted layer name if it is a substring of it, or, when it contains a glob
character (* ? [), if the glob matches the whole name. Precedence: an exact [layers] name, then
[layers] patterns in file order, then keep_fp16_layers, then keep_int8_layers, then `default`.

Format strings: "fp32", "fp16" (also "f16", GGUF's name), "int8", "int4-g<group>" (asym),
"int4-g<group>-sym", or GGUF's block formats "q4_0", "q4_1", "q8_0" (quant/ggml.py: blocks of
32 along K, float16 scales, bit-exact with llama.cpp's quantizers), "q5_0" and the K-quants
"q4_k", "q5_k", "q6_k" (quant/kquants.py: super-blocks of 256 along K, also bit-exact).

`mix = "q4_k_m"` names a llama.cpp type mix (quant/mixes.py): every weight no other field names
gets the format llama.cpp's rule gives it from its role, layer index and row length (Q6_K for the
output and some attn_v / ffn_down layers, Q4_K else, Q5_0 / Q8_0 where K is not a multiple of
256); such a policy is bound to one model (`Policy.bind`) before any weight gets a format.

Optional `[prune]` (structured pruning) and `[activations]` (static INT8 activations, W8A8)
tables combine pruning and quantization in one policy, and `[quantize]` says how each int4 /
int8 weight is fitted (`method = "rtn" | "gptq" | "awq"`, per layer pattern or format in
`[quantize.methods]`, with its calibration windows); quant/compress.py describes them.
`Policy.method_for(name)` is the method a Linear gets ("rtn" for fp32 / fp16 ones). GPTQ and
AWQ fit int4-gNN and int8 only: a gptq / awq method that no Linear of the policy could take (a
q4_0 / q8_0 / fp16 policy, a ggml or float format name, a pattern over such layers) is refused in
one line naming the file, field and value, never labelled over round-to-nearest bytes.
`dynamic_activations = "int8"` says the runtime quantizes the activations of every int4 and
int8 Linear to int8 on the fly (ExecuTorch's 8da4w, W4A8): the op graph then marks those
matmuls int8-activated, so a runtime computes them in int8 whatever it does for weight-only
ones (device/soc.py `compute_dtype`). Our host kernels do that for every quantized Linear
anyway (matmul_w4 / matmul_w8: int8 per 32-block), so on the host it changes nothing.
`float16 = "bf16"` says its 16-bit float weights and activations are bfloat16 (policy `bf16`):
the same 2 bytes, computed on the runtime's bf16 path (a runtime profile's [float16], native or
widened to fp32); this project's own runtime stores and computes them as float16.

A policy is checked against the model it is applied to before any work (`check_applies`): every
pattern, layer name and [prune.blocks] index must match something of that model, and no INT4
group may be longer than every row it would apply to, so a typo ("gate_prj") is an error naming
the closest real name, never a run that silently scores another policy. A deliberate cross-model
policy passes `allow_unmatched`.
"""

from __future__ import annotations

import fnmatch
import functools
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from harmony_ref._toml import read_toml, shipped_names
from harmony_ref.quant.compress import ActivationSpec, PruneSpec, QuantizeSpec
from harmony_ref.quant.compress_tables import (
    activations_from_dict,
    prune_from_dict,
    quantize_from_dict,
)
from harmony_ref.quant.formats import (
    ALIASES,
    DEFAULT_SCHEME,
    FORMAT_RE,
    FormatFacts,
    facts_of,
    format_names,
)
from harmony_ref.quant.mixes import MIX_DEFAULTS, MIXES

POLICY_KEYS = {
    "name",
    "description",
    "default",
    "keep_fp16_layers",
    "keep_int8_layers",
    "layers",
    "prune",
    "activations",
    "dynamic_activations",
    "quantize",
    "float16",
    "mix",
}
DYNAMIC_ACTIVATIONS = ("", "int8")
FLOAT16 = ("fp16", "bf16")  # device/soc.py FLOAT16_FORMATS
# What each field of a policy TOML means: docs/reference/policy.md is generated from this table
# (tools/docs_reference.py), and the docs build fails on a key of POLICY_KEYS it does not describe.
POLICY_FIELD_DOCS = {
    "name": "the policy's name (default: the file's stem)",
    "description": "one line saying what the policy is for",
    "default": "required: the weight format of every Linear no other field names: "
    + format_names(),
    "keep_fp16_layers": "list of layer-name patterns kept in fp16",
    "keep_int8_layers": "list of layer-name patterns kept in int8",
    "layers": "table: layer-name pattern (`*.q_proj`, `lm_head`) -> weight format",
    "prune": "table: structured pruning ([prune], below)",
    "activations": "table: W8A8, int8 activations with static calibrated scales ([activations], "
    "below)",
    "quantize": "table: how each format is fitted, rtn, gptq or awq, on calibration windows "
    "([quantize], below)",
    "dynamic_activations": '"" (none) or "int8": activations quantized per call (the kernels\' '
    "per-32-block int8)",
    "mix": "a llama.cpp type mix (quant/mixes.py: q4_k_m) assigning each weight not named by "
    "another field a format by its role, layer index and row length; `default` is the mix's own "
    "starting type (q4_k for q4_k_m)",
    "float16": '"fp16" (default) or "bf16": the 16-bit float format of its fp16 Linears and '
    "activations on a phone runtime (2 bytes a weight either way; a runtime profile's [float16] "
    "says what each computes in); this project's own runtime stores both as float16",
}


@dataclass(frozen=True)
class WeightFormat:
    """How one weight matrix is stored: a format of the facts table (quant/formats.py) and,
    for a grouped one, its group size. Storage per weight mirrors the real arrays (`Int4Tensor`,
    `Int8Tensor`, `GGMLTensor`); tests hold `bits_per_weight` equal to the arrays' true size."""

    kind: (
        str  # a FormatFacts.kind: fp32 | fp16 | int8 | int4 | q4_0 | q4_1 | q8_0 | q5_0 | q4_k ...
    )
    group_size: int | None = None  # grouped formats only (int4; GGUF's: their blocks, facts.block)
    scheme: str | None = None  # grouped formats only: asym | sym

    @property
    def facts(self) -> FormatFacts:
        """Everything the table knows of this format (quant/formats.py)."""
        return facts_of(self.kind, self.scheme)

    @property
    def name(self) -> str:
        return self.facts.format_name(self.group_size)

    def __str__(self) -> str:
        return self.name

    def nbytes(self, n: int, k: int) -> int:
        """Stored bytes of an (N, K) matrix in this format, scales and zero points included."""
        return self.facts.nbytes(n, k, self.group_size)

    def bits_per_weight(self, k: int = 4096) -> float:
        """Bits per weight for a row length K (INT8's per-row scale depends on K)."""
        return 8.0 * self.nbytes(1, k) / k

    @property
    def compute_dtype(self) -> str:
        """Dtype the NPU multiplies in: fp32 weights still run in fp16 on a phone NPU."""
        return self.facts.compute_dtype

    @property
    def ggml(self) -> bool:
        """One of GGUF's block formats (q4_0, q4_1, q8_0, q5_0, the K-quants)."""
        return self.facts.ggml


FP32 = WeightFormat("fp32")
FP16 = WeightFormat("fp16")
INT8 = WeightFormat("int8")


def parse_format(text: str, where: str = "format") -> WeightFormat:
    """'int4-g128' -> WeightFormat('int4', 128, 'asym'); errors name where the string came from."""
    key = str(text).strip().lower()
    m = FORMAT_RE.match(ALIASES.get(key, key))
    if not m:
        raise ValueError(f"{where}: unknown weight format {text!r}; expected {format_names()}")
    if m["plain"] is not None:
        return WeightFormat(m["plain"])
    group = int(m["group"])
    if group <= 0 or group % 2:
        raise ValueError(f"{where}: INT4 group size must be a positive even number, got {text!r}")
    return WeightFormat(m["kind"], group, m["scheme"] or DEFAULT_SCHEME[m["kind"]])


def _matches(pattern: str, name: str) -> bool:
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern in name


@dataclass(frozen=True)
class Policy:
    name: str
    default: WeightFormat
    keep_fp16_layers: tuple[str, ...] = ()
    keep_int8_layers: tuple[str, ...] = ()
    layers: tuple[tuple[str, WeightFormat], ...] = ()  # ordered (name or pattern, format)
    description: str = ""
    source: str = field(default="<memory>", compare=False)
    prune: PruneSpec | None = None  # structured pruning before quantizing (quant/compress.py)
    activations: ActivationSpec | None = None  # static int8 activations for int8 Linears
    dynamic_activations: str = ""  # "int8": every int4/int8 Linear's activations, on the fly
    quantize: QuantizeSpec | None = None  # how int4/int8 weights are fitted (rtn, gptq, awq)
    # the 16-bit float format of its fp16 weights and activations (FLOAT16): a phone runtime
    # computes "bf16" on its bf16 path (runtime profile [float16]); our runtime stores float16
    float16: str = "fp16"
    mix: str = ""  # a llama.cpp type mix (quant/mixes.py), resolved per model by `bind`

    def method_for(self, layer_name: str) -> str:
        """How the Linear `layer_name` is fitted: "rtn", "gptq" or "awq" ("rtn" when it is not
        int4/int8). Precedence: an exact [quantize.methods] name, its patterns in file order,
        its format names, then [quantize] method."""
        q = self.quantize
        fmt = self.format_for(layer_name)
        if q is None or not fmt.facts.fitted:
            return "rtn"
        for key, m in q.methods:
            if key == layer_name:
                return m
        for key, m in q.methods:
            if not FORMAT_RE.match(key) and _matches(key, layer_name):
                return m
        for key, m in q.methods:
            if FORMAT_RE.match(key) and parse_format(key) == fmt:
                return m
        return q.method

    @property
    def calibrated(self) -> bool:
        """Whether any Linear is fitted on calibration data (gptq or awq somewhere)."""
        q = self.quantize
        return q is not None and (q.method != "rtn" or any(m != "rtn" for _, m in q.methods))

    def format_for(self, layer_name: str) -> WeightFormat:
        """The format a Linear (or embedding) called `layer_name` is stored in."""
        # Graph building asks this for every layer of every prediction; policies are frozen.
        return _format_for_cached(self, layer_name)

    def _resolve(self, layer_name: str) -> WeightFormat:
        fmt = self._named(layer_name)
        if fmt is not None:
            return fmt
        if self.mix:
            raise ValueError(
                f"{self.source}: mix {self.mix!r} gives {layer_name} a format by its layer and "
                "row length: bind the policy to a model first (Policy.bind)"
            )
        return self.default

    def _named(self, layer_name: str) -> WeightFormat | None:
        """The format a field other than `default` and `mix` names for the layer, or None."""
        for pattern, fmt in self.layers:
            if pattern == layer_name:
                return fmt
        for pattern, fmt in self.layers:
            if _matches(pattern, layer_name):
                return fmt
        if any(_matches(p, layer_name) for p in self.keep_fp16_layers):
            return FP16
        if any(_matches(p, layer_name) for p in self.keep_int8_layers):
            return INT8
        return None

    def bind(self, rows: list[tuple[str, int]], n_blocks: int) -> Policy:
        """This policy for one model whose weights are `rows` ((name, row length K), as
        ModelSpec.weight_rows gives them) in `n_blocks` layers: a `mix` resolved to one explicit
        [layers] entry per weight no other field names (quant/mixes.py); a policy without a mix
        as it is."""
        if not self.mix:
            return self
        rule = MIXES[self.mix]
        mixed = tuple(
            (name, parse_format(rule(name, k, n_blocks)))
            for name, k in rows
            if self._named(name) is None
        )
        return replace(self, layers=self.layers + mixed, mix="")

    def to_toml(self) -> str:
        """TOML text that `load_policy` reads back to an equal policy."""

        def q(s: str) -> str:
            return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

        lines = [f"name = {q(self.name)}"]
        if self.description:
            lines.append(f"description = {q(self.description)}")
        lines.append(f"default = {q(self.default.name)}")
        lines.append("keep_fp16_layers = [" + ", ".join(map(q, self.keep_fp16_layers)) + "]")
        lines.append("keep_int8_layers = [" + ", ".join(map(q, self.keep_int8_layers)) + "]")
        if self.float16 != "fp16":
            lines.append(f"float16 = {q(self.float16)}")
        if self.mix:
            lines.append(f"mix = {q(self.mix)}")
        if self.layers:
            lines.append("")
            lines.append("[layers]")
            lines.extend(f"{q(p)} = {q(f.name)}" for p, f in self.layers)
        if self.dynamic_activations:
            lines.append(f"dynamic_activations = {q(self.dynamic_activations)}")
        for extra in (self.prune, self.activations, self.quantize):
            if extra is not None:
                lines.extend(extra.to_toml())
        return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=65536)
def _format_for_cached(policy: Policy, layer_name: str) -> WeightFormat:
    return policy._resolve(layer_name)


def _closest(pattern: str, names: list[str]) -> str:
    """' (closest: ...)' among the model's full names and their short forms (gate_proj)."""
    from harmony_ref._format import did_you_mean

    shorts = sorted({n.rsplit(".", 1)[-1] for n in names})
    hint = did_you_mean(pattern, shorts) or did_you_mean(pattern, names)
    return hint or f" (its layers are named like {names[0]!r}, ..., {names[-1]!r})"


def unmatched(
    policy: Policy, layers: list[tuple[str, int]], n_blocks: int, model: str = "the model"
) -> list[str]:
    """Why `policy` does not fit a model with these (weight name, row length K) layers and
    `n_blocks` blocks: one line per pattern that matches nothing, [prune.blocks] index past the
    last block, or INT4 group longer than every row it applies to ([] when it fits). A policy
    with a `mix` is checked as bound to these layers (Policy.bind)."""
    policy = policy.bind(layers, n_blocks)
    names = [n for n, _ in layers]
    out = []
    for field_name, patterns in (
        ("keep_fp16_layers", policy.keep_fp16_layers),
        ("keep_int8_layers", policy.keep_int8_layers),
        ("layers", tuple(p for p, _ in policy.layers)),
    ):
        for pattern in patterns:
            if not any(pattern == n or _matches(pattern, n) for n in names):
                out.append(
                    f"{policy.source}: field '{field_name}' has {pattern!r}, which matches "
                    f"no layer of {model}{_closest(pattern, names)}"
                )
    if policy.quantize is not None:
        for key, m in policy.quantize.methods:
            if FORMAT_RE.match(key):
                continue
            hits = [n for n in names if key == n or _matches(key, n)]
            if not hits:
                out.append(
                    f"{policy.source}: field 'quantize.methods' has {key!r}, which "
                    f"matches no layer of {model}{_closest(key, names)}"
                )
            elif m != "rtn" and not any(policy.format_for(n).facts.fitted for n in hits):
                fmt = policy.format_for(hits[0])
                out.append(
                    f"{policy.source}: field 'quantize.methods.{key}' = {m!r}: its layers are "
                    f"{fmt.name} ({_why_not_fitted(fmt)})"
                )
    if policy.prune is not None:
        past = sorted({b for b, _, _ in policy.prune.blocks if b >= n_blocks})
        if past:
            out.append(
                f"{policy.source}: field 'prune.blocks' names block {past[0]}, but "
                f"{model} has {n_blocks} blocks (0-{n_blocks - 1})"
            )
    widths: dict[WeightFormat, int] = {}
    for name, k in layers:
        fmt = policy.format_for(name)
        if fmt.facts.grouped:
            widths[fmt] = max(widths.get(fmt, 0), k)
    for fmt, k in widths.items():
        if fmt.group_size > k:
            out.append(
                f"{policy.source}: format {fmt.name}: group of {fmt.group_size} is longer "
                f"than every row of {model} it applies to (the longest has K = {k})"
            )
    for name, k in layers:
        fmt = policy.format_for(name)
        if fmt.ggml and k % fmt.facts.block:
            out.append(
                f"{policy.source}: format {fmt.name} for {name}: its rows have K = {k}, "
                f"not a multiple of GGUF's block of {fmt.facts.block}"
            )
            break
    return out


def check_applies(
    policy: Policy,
    layers: list[tuple[str, int]],
    n_blocks: int,
    model: str,
    allow_unmatched: bool = False,
) -> None:
    """Raise ValueError (its first `unmatched` line, naming `model`) unless `policy` fits the
    model or `allow_unmatched` says a mismatch is deliberate."""
    problems = [] if allow_unmatched else unmatched(policy, layers, n_blocks, repr(model))
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ValueError(f"{problems[0]}{more}; --allow-unmatched applies it anyway")


def policy_from_dict(data: dict, source: str) -> Policy:
    """Validate a parsed policy table; every error names the source file, the field and value."""
    unknown = sorted(set(data) - POLICY_KEYS)
    if unknown:
        from harmony_ref._format import did_you_mean

        raise ValueError(
            f"{source}: unknown field {unknown[0]!r}"
            f"{did_you_mean(unknown[0], sorted(POLICY_KEYS))}; allowed: "
            f"{sorted(POLICY_KEYS)}"
        )
    if "default" not in data:
        raise ValueError(f"{source}: missing field 'default' (e.g. default = \"int4-g32\")")
    default = parse_format(data["default"], f"{source}: field 'default'")
    lists = {}
    for key in ("keep_fp16_layers", "keep_int8_layers"):
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ValueError(
                f"{source}: field '{key}' must be a list of non-empty strings, got {value!r}"
            )
        lists[key] = tuple(value)
    layers_table = data.get("layers", {})
    if not isinstance(layers_table, dict):
        raise ValueError(f"{source}: field 'layers' must be a table, got {layers_table!r}")
    layers = tuple(
        (pattern, parse_format(fmt, f"{source}: field 'layers.{pattern}'"))
        for pattern, fmt in layers_table.items()
    )
    dynamic = data.get("dynamic_activations", "")
    if dynamic not in DYNAMIC_ACTIVATIONS:
        raise ValueError(
            f"{source}: field 'dynamic_activations' = {dynamic!r}: must be one of "
            f"{list(DYNAMIC_ACTIVATIONS)}"
        )
    float16 = data.get("float16", "fp16")
    if float16 not in FLOAT16:
        raise ValueError(f"{source}: field 'float16' = {float16!r}: must be one of {list(FLOAT16)}")
    mix = data.get("mix", "")
    if not isinstance(mix, str) or (mix and mix not in MIXES):
        raise ValueError(f"{source}: field 'mix' = {mix!r}: must be one of {sorted(MIXES)}")
    if mix and default.name != MIX_DEFAULTS[mix]:
        raise ValueError(
            f"{source}: field 'default' = {default.name!r}: mix {mix!r} starts from "
            f"{MIX_DEFAULTS[mix]!r}, so its default is that"
        )
    name = data.get("name", Path(source).stem)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{source}: field 'name' must be a non-empty string, got {name!r}")
    policy = Policy(
        name=name,
        default=default,
        keep_fp16_layers=lists["keep_fp16_layers"],
        keep_int8_layers=lists["keep_int8_layers"],
        layers=layers,
        description=str(data.get("description", "")),
        source=source,
        prune=prune_from_dict(data["prune"], source) if "prune" in data else None,
        activations=(
            activations_from_dict(data["activations"], source) if "activations" in data else None
        ),
        dynamic_activations=dynamic,
        float16=float16,
        mix=mix,
        quantize=(quantize_from_dict(data["quantize"], source) if "quantize" in data else None),
    )
    _check_methods_apply(policy)
    return policy


def _why_not_fitted(fmt: WeightFormat) -> str:
    if not fmt.facts.quantized:
        return "a float format is not quantized"
    return "GPTQ/AWQ fit int4-gNN / int8 only"


def _check_methods_apply(policy: Policy) -> None:
    """A gptq / awq method named for a format it cannot fit is refused at load: otherwise the
    weights would be plain round-to-nearest while the policy, the record and an exported file
    all say gptq (issue 45)."""
    q = policy.quantize
    if q is None:
        return
    # `method` is every int4 / int8 Linear's: refused when the policy stores none
    formats = [policy.default, *(f for _, f in policy.layers)]
    formats += [INT8] if policy.keep_int8_layers else []
    if q.method != "rtn" and not any(f.facts.fitted for f in formats):
        raise ValueError(
            f"{policy.source}: field 'quantize.method' = {q.method!r}: GPTQ/AWQ fit int4-gNN / "
            f"int8 only; the policy has none (default {policy.default.name})"
        )
    for key, m in q.methods:
        if m != "rtn" and FORMAT_RE.match(key):
            fmt = parse_format(key)
            if not fmt.facts.fitted:
                raise ValueError(
                    f"{policy.source}: field 'quantize.methods.{key}' = {m!r}: "
                    f"{fmt.name} cannot take it ({_why_not_fitted(fmt)})"
                )


AS_STORED = "as-stored"  # --policy as-stored: every Linear in the format its GGUF file stores


def as_stored_policy(formats: dict[str, WeightFormat], source: str) -> Policy:
    """The policy that runs each Linear (name -> the format the checkpoint file stores it in)
    exactly as stored: the runtime uses the file's bytes (DecoderWeights.stored), no requantizing."""
    return Policy(
        name=AS_STORED,
        default=FP32,
        layers=tuple(sorted(formats.items())),
        description=f"every Linear as {source} stores it",
        source=source,
    )


POLICIES_FOLDER = "policies"


def shipped_policies() -> list[str]:
    """Names of the policies shipped in harmony_ref/policies/."""
    return shipped_names(POLICIES_FOLDER)


def load_policy(name_or_path: str | Path | Policy) -> Policy:
    """A shipped policy by name ("int4-g128"), or a policy TOML by path."""
    if isinstance(name_or_path, Policy):
        return name_or_path
    data, source = read_toml("policy", POLICIES_FOLDER, name_or_path)
    return policy_from_dict(data, source)


def int4_format_for_rows(fmt: WeightFormat, k: int) -> WeightFormat:
    """`fmt`, or when its group does not divide the row length K, the largest group that
    divides both (gcd): SmolLM2's K = 576 rows take int4-g128 as g64 (576 = 4.5 x 128). The
    format actually used is what `Llama.formats()` reports, and what the op graph and
    memory model count (model/graph.py)."""
    g = math.gcd(fmt.group_size, k)
    if g == fmt.group_size:
        return fmt
    if g < 2:
        raise ValueError(f"K = {k} has no even group size dividing {fmt.name}'s {fmt.group_size}")
    return WeightFormat(fmt.kind, g, fmt.scheme)


def format_for_rows(fmt: WeightFormat, k: int) -> WeightFormat:
    """The format a row of length K is stored in: a grouped format narrowed as
    `int4_format_for_rows` says, any other as it is."""
    return int4_format_for_rows(fmt, k) if fmt.facts.grouped else fmt
