"""Every fact of a weight format, declared once (ggml's type-traits table, the facts half): how
many bits its codes take, how its scales are laid out, the bytes of an (N, K) matrix, what a
phone multiplies it in, its GGUF type, and which of our steps take it. This table sits in quant/
so that policies (quant/policy.py), GPTQ / AWQ and the cost model read it; kernels/formats.py
extends each entry with the code that stores, reads back and multiplies it. Nothing else
compares a format's kind: a new format (the K-quants) is one entry here, one entry there, and its
kernels.

    facts = FACTS["q4_0"]                       # or parse_format("int4-g32").facts (policy.py)
    facts.nbytes(n, k, group_size)              # stored bytes, scales and zero points included
    facts.bits, facts.compute_dtype, facts.gguf_type, facts.gguf_id

Scale layouts (`scales`; `scale_bytes` of scale data per row, group or block):
    none   the values alone (fp32, fp16)
    row    one scale per row (int8: a float32 scale)
    group  one scale (and zero point) per `group_size` weights along K, the group in the format's
           name (int4-g32: a float16 scale + an int8 zero point per group; -sym: no zero point)
    block  GGUF's blocks of `block` weights along K, each `block_bytes` long (quant/ggml.py;
           the K-quants' super-blocks of 256 with their sub-block scales, quant/kquants.py)
`tests/quant/test_formats.py` holds every entry complete and consistent: the GGUF ids and names
round-trip through the `gguf` package, `nbytes` equals the real arrays' size, the nominal bits
agree with the block bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LAYOUTS = ("none", "row", "group", "block")
GGUF_BLOCK = 32  # weights per block along K of GGUF's Q4_0 / Q4_1 / Q8_0 / Q5_0 (ggml's QK4_0 ...)
QK_K = 256  # weights per super-block along K of GGUF's K-quants (ggml's QK_K)


@dataclass(frozen=True)
class FormatFacts:
    name: str  # the table's key; a grouped format's name takes its group: int4-sym -> int4-g32-sym
    kind: str  # WeightFormat.kind (int4 and int4-sym are both kind "int4", schemes apart)
    bits: int  # nominal bits per weight: the codes alone, no scales
    scales: str  # scale layout, one of LAYOUTS
    scale_bytes: int  # bytes of scales (and zero points / minima) per row, group or block
    layout: str  # the scale layout in words
    compute_dtype: str  # what a phone NPU multiplies it in (fp32 weights still run in fp16)
    scheme: str | None = None  # grouped formats: asym (zero point) | sym
    block: int = 0  # "block" layout: weights per block along K
    dtype: str | None = None  # float formats: the NumPy dtype of the stored (N, K) array
    gguf_type: str | None = None  # GGUF's type name (GGMLQuantizationType), None: GGUF has none
    gguf_id: int | None = None  # GGUF's type id, as a file's tensor info stores it
    file_type: str | None = None  # llama.cpp's LlamaFileType when a whole model is in it
    nearest_gguf: str | None = None  # the format GGUF stores closest to it (a refusal names it)
    fitted: bool = False  # GPTQ / AWQ fit it (quant/gptq.py, quant/awq.py)
    w8a8: bool = False  # takes static int8 activation scales (a policy's [activations])
    dynamic_int8: bool = False  # a policy's dynamic_activations = "int8" quantizes its inputs
    aliases: tuple[str, ...] = ()  # other spellings parse_format reads (GGUF's "f16")
    # ExecuTorch's LLM flow (runtime/torch_decoder.py): the scheme it quantizes a Linear in this
    # format with, with weights only / with dynamic int8 activations (None: no counterpart), and
    # the shipped policy nearest to it that has one ("w4a8": w4a8-g32 or -g128 by the group)
    pte_weight_only: str | None = None
    pte_dynamic: str | None = None
    pte_nearest: str = "fp32"

    def __post_init__(self):
        if self.scales not in LAYOUTS:
            raise ValueError(f"format {self.name}: scales {self.scales!r} not in {LAYOUTS}")
        if (self.scales == "block") != (self.block > 0):
            raise ValueError(f"format {self.name}: a block length goes with the block layout")
        if (self.scales == "none") != (self.dtype is not None):
            raise ValueError(f"format {self.name}: a NumPy dtype goes with the float formats")

    @property
    def quantized(self) -> bool:
        return self.scales != "none"

    @property
    def grouped(self) -> bool:
        """Its name carries a group size (int4-g<group>)."""
        return self.scales == "group"

    @property
    def ggml(self) -> bool:
        """Stored as GGUF's own blocks (quant/ggml.py GGMLTensor; q5_0 and the K-quants:
        quant/kquants.py KQuantTensor)."""
        return self.scales == "block"

    @property
    def block_bytes(self) -> int:
        """Bytes of one block (the "block" layout; ggml's sizeof(block_q4_0) ...)."""
        return self.block * self.bits // 8 + self.scale_bytes

    def format_name(self, group_size: int | None = None) -> str:
        """The format's name for a policy: int4-sym with group 32 -> "int4-g32-sym"."""
        if not self.grouped:
            return self.name
        return f"{self.kind}-g{group_size}{self.name[len(self.kind) :]}"

    def nbytes(self, n: int, k: int, group_size: int | None = None) -> int:
        """Stored bytes of an (N, K) matrix in this format, scales and zero points included."""
        if self.scales == "block":  # K % block != 0 cannot be stored (policy.unmatched says so)
            return n * -(-k // self.block) * self.block_bytes
        values = n * k * self.bits // 8
        if self.scales == "row":
            return values + n * self.scale_bytes
        if self.scales == "group":
            return values + n * (k // group_size) * self.scale_bytes
        return values


FACTS: dict[str, FormatFacts] = {
    f.name: f
    for f in [
        FormatFacts(
            name="fp32",
            kind="fp32",
            bits=32,
            scales="none",
            scale_bytes=0,
            layout="float32 values",
            compute_dtype="fp16",
            dtype="float32",
            gguf_type="F32",
            gguf_id=0,
            file_type="ALL_F32",
            nearest_gguf="fp32",
            pte_weight_only="fp32",
            pte_dynamic="fp32",
        ),
        FormatFacts(
            name="fp16",
            kind="fp16",
            bits=16,
            scales="none",
            scale_bytes=0,
            layout="float16 values",
            compute_dtype="fp16",
            dtype="float16",
            gguf_type="F16",
            gguf_id=1,
            file_type="MOSTLY_F16",
            nearest_gguf="fp16",
            aliases=("f16",),
        ),
        FormatFacts(
            name="int8",
            kind="int8",
            bits=8,
            scales="row",
            scale_bytes=4,
            layout="int8 values, a float32 scale per row (quant/int8.py)",
            compute_dtype="int8",
            nearest_gguf="q8_0",
            fitted=True,
            w8a8=True,
            dynamic_int8=True,
            pte_weight_only="int8",
            pte_dynamic="8da8w",
            pte_nearest="int8",
        ),
        FormatFacts(
            name="int4",
            kind="int4",
            scheme="asym",
            bits=4,
            scales="group",
            scale_bytes=3,
            layout="packed nibbles, a float16 scale + an int8 zero point per group (quant/int4.py)",
            compute_dtype="int4",
            nearest_gguf="q4_1",
            fitted=True,
            dynamic_int8=True,
            pte_nearest="w4a8",
        ),
        FormatFacts(
            name="int4-sym",
            kind="int4",
            scheme="sym",
            bits=4,
            scales="group",
            scale_bytes=2,
            layout="packed nibbles, a float16 scale per group (quant/int4.py)",
            compute_dtype="int4",
            nearest_gguf="q4_0",
            fitted=True,
            dynamic_int8=True,
            pte_dynamic="8da4w",
            pte_nearest="w4a8",
        ),
        FormatFacts(
            name="q4_0",
            kind="q4_0",
            bits=4,
            scales="block",
            block=GGUF_BLOCK,
            scale_bytes=2,
            layout="blocks of 32: a float16 delta + 16 bytes of nibbles (quant/ggml.py)",
            compute_dtype="int4",
            gguf_type="Q4_0",
            gguf_id=2,
            file_type="MOSTLY_Q4_0",
            nearest_gguf="q4_0",
            pte_nearest="w4a8-g32",
        ),
        FormatFacts(
            name="q4_1",
            kind="q4_1",
            bits=4,
            scales="block",
            block=GGUF_BLOCK,
            scale_bytes=4,
            layout="blocks of 32: a float16 delta and minimum + 16 bytes of nibbles",
            compute_dtype="int4",
            gguf_type="Q4_1",
            gguf_id=3,
            file_type="MOSTLY_Q4_1",
            nearest_gguf="q4_1",
            pte_nearest="w4a8-g32",
        ),
        FormatFacts(
            name="q8_0",
            kind="q8_0",
            bits=8,
            scales="block",
            block=GGUF_BLOCK,
            scale_bytes=2,
            layout="blocks of 32: a float16 delta + 32 int8",
            compute_dtype="int8",
            gguf_type="Q8_0",
            gguf_id=8,
            file_type="MOSTLY_Q8_0",
            nearest_gguf="q8_0",
            pte_nearest="int8",
        ),
        FormatFacts(
            name="q5_0",
            kind="q5_0",
            bits=5,
            scales="block",
            block=GGUF_BLOCK,
            scale_bytes=2,
            layout="blocks of 32: a float16 delta + 4 bytes of 5th bits + 16 bytes of nibbles "
            "(quant/kquants.py)",
            compute_dtype="int8",
            gguf_type="Q5_0",
            gguf_id=6,
            file_type="MOSTLY_Q5_0",
            nearest_gguf="q5_0",
        ),
        FormatFacts(
            name="q4_k",
            kind="q4_k",
            bits=4,
            scales="block",
            block=QK_K,
            scale_bytes=16,
            layout="super-blocks of 256: float16 d and dmin, eight 6-bit (scale, min) pairs in "
            "12 bytes + 128 bytes of nibbles (quant/kquants.py)",
            compute_dtype="int4",
            gguf_type="Q4_K",
            gguf_id=12,
            file_type="MOSTLY_Q4_K_S",  # llama.cpp's name for "every Linear in Q4_K"
            nearest_gguf="q4_k",
        ),
        FormatFacts(
            name="q5_k",
            kind="q5_k",
            bits=5,
            scales="block",
            block=QK_K,
            scale_bytes=16,
            layout="super-blocks of 256: q4_k's scales + 32 bytes of 5th bits + 128 bytes of "
            "nibbles (quant/kquants.py)",
            compute_dtype="int8",
            gguf_type="Q5_K",
            gguf_id=13,
            file_type="MOSTLY_Q5_K_S",
            nearest_gguf="q5_k",
        ),
        FormatFacts(
            name="q6_k",
            kind="q6_k",
            bits=6,
            scales="block",
            block=QK_K,
            scale_bytes=18,
            layout="super-blocks of 256: 128 bytes of low nibbles + 64 of high 2 bits, sixteen "
            "int8 scales (one per 16 weights), a float16 d (quant/kquants.py)",
            compute_dtype="int8",
            gguf_type="Q6_K",
            gguf_id=14,
            file_type="MOSTLY_Q6_K",
            nearest_gguf="q6_k",
        ),
    ]
}
# GGUF type name -> our format, for a checkpoint's tensors kept as stored (`as-stored`)
BY_GGUF_TYPE = {f.gguf_type: f for f in FACTS.values() if f.gguf_type is not None}
_BY_KIND = {(f.kind, f.scheme): f for f in FACTS.values()}
ALIASES = {a: f.name for f in FACTS.values() for a in f.aliases}
# the default scheme of a grouped kind is the entry named as the kind (int4 -> asym)
DEFAULT_SCHEME = {f.kind: f.scheme for f in FACTS.values() if f.grouped and f.name == f.kind}


def facts_of(kind: str, scheme: str | None = None) -> FormatFacts:
    """The entry of a WeightFormat's kind (and scheme, for a grouped kind)."""
    return _BY_KIND[(kind, scheme)]


def _format_re() -> re.Pattern:
    plain = "|".join(re.escape(f.name) for f in FACTS.values() if not f.grouped)
    kinds = "|".join(sorted({re.escape(f.kind) for f in FACTS.values() if f.grouped}))
    schemes = "|".join(sorted({f.scheme for f in FACTS.values() if f.grouped}))
    return re.compile(
        rf"^(?:(?P<plain>{plain})|(?P<kind>{kinds})-g(?P<group>\d+)(?:-(?P<scheme>{schemes}))?)$"
    )


FORMAT_RE = _format_re()  # every format name a policy may write (aliases resolved first)


def format_names() -> str:
    """The format names a policy may write, in words: "fp32, ..., int4-g<group>-sym, ... or f16"."""
    names = [f.format_name("<group>") for f in FACTS.values()]
    return ", ".join(names) + "".join(f" or {a}" for a in ALIASES)
