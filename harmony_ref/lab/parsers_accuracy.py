"""Parsers for the accuracy output of real runtimes, beside the speed parsers of parsers.py.

- `llama-perplexity` (llama.cpp tools/perplexity/perplexity.cpp): the running estimate after
  each chunk `LOG("[%d]%.4lf,")`, `LOG_INF("Final estimate: PPL = %.4lf +/- %.5lf\\n")`; with
  `--kl-divergence` instead the per-chunk table and the summary `Mean PPL(Q) : %10.6lf ± %10.6lf`,
  `Mean PPL(base)`, `Mean PPL(Q)/PPL(base)`, `Mean    KLD: %10.6lf ± %10.6lf`, `Maximum KLD:`,
  `99.9%   KLD:` ... `Minimum KLD:`, `RMS Δp    : %6.3lf ± %5.3lf %`,
  `Same top p: %6.3lf ± %5.3lf %`;
  `calculating perplexity over %d chunks, n_ctx=%d, batch_size=%d, n_seq=%d` (`computing over`
  in KLD mode), `%.2f seconds per pass - ETA` (the first pass of n_seq chunks), and, when llama's
  own log level lets it through, llama-context.cpp's `llama_perf_context_print`: `prompt eval
  time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)`. Log lines carry a
  `0.06.879.559 I ` prefix and the ETA's tail can glue onto the next line; only the default
  `--ppl-output-type 0` is read. Perplexity, ratios and KL divergence are `exact` (the same build
  on the same text repeats them bit for bit), only timings `measured`.
- MindSpore Lite `benchmark` accuracy (benchmark_base.h `CompareData` /
  `CompareDatabyCosineDistance`, benchmark_unified_api.cc): `mslite_accuracy(text)` reads the
  comparison even from a failed run: `Data of node <name> : <first 50 values>`, `Mean bias of
  node/tensor <name> : <f>%`, `Mean cosine distance of node/tensor <name> : <f>%` (cosine x 100),
  the totals `Mean bias of all nodes/tensors: <f>%` and `Cosine distance of all nodes/tensors:
  <f>` (setprecision(15)), and the tool's own verdict lines (`... is too big`, `... too small`,
  `Output tensor has nan or inf data, compare fail`). parse_mslite (parsers.py) reads the totals
  as metrics of a successful run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harmony_ref.lab._parse import _NUM, Parsed, ParseError, _measured, _num, _tail
from harmony_ref.metrics import Metrics

# --- MindSpore Lite benchmark accuracy -----------------------------------------------------------

_MSLITE_BIAS = re.compile(r"^Mean bias of all nodes/tensors: " + _NUM + r"\s*%", re.M)
_MSLITE_COSINE = re.compile(r"^Cosine distance of all nodes/tensors: " + _NUM, re.M)
_MSLITE_DATA = re.compile(r"^Data of node (.+?) : (.*)$", re.M)
_MSLITE_NODE_BIAS = re.compile(r"^Mean bias of node/tensor (.+?) : " + _NUM + r"\s*%", re.M)
_MSLITE_NODE_COSINE = re.compile(
    r"^Mean cosine distance of node/tensor (.+?) : " + _NUM + r"\s*%", re.M
)
_MSLITE_ACC_FAIL = re.compile(
    r"^.*(?:Mean bias of all nodes/tensors is too big|cosine distance of all nodes/tensors is too "
    r"small|Output tensor has nan or inf data|Shape of mslite output.*are different|"
    r"Error in CompareData|Compare output error).*$",
    re.M | re.I,
)


@dataclass
class MsliteAccuracy:
    """The accuracy part of a MindSpore Lite `benchmark` run (with --benchmarkDataFile), read even
    when the tool failed on it: per output tensor the first values it printed (at most 50), its
    mean bias (%) and cosine (%) where printed, the totals, and the tool's own failure line."""

    mean_bias_pct: float | None
    cosine: float | None
    printed_values: dict[str, list[float]]
    tensor_bias_pct: dict[str, float]
    tensor_cosine_pct: dict[str, float]
    failure: str | None


def mslite_accuracy(text: str) -> MsliteAccuracy:
    fmt = "mslite"
    values = {}
    for name, rest in _MSLITE_DATA.findall(text):
        nums = []
        for tok in rest.split():
            try:
                nums.append(float(tok))
            except ValueError:
                break  # a value's text ends the list (e.g. a log line glued on)
        values.setdefault(name.strip(), nums)  # the cosine pass prints the same tensor again
    bias = _MSLITE_BIAS.search(text)
    cos = _MSLITE_COSINE.search(text)
    fail = _MSLITE_ACC_FAIL.search(text)
    return MsliteAccuracy(
        None if bias is None else _num(bias.group(1), "Mean bias", fmt),
        None if cos is None else _num(cos.group(1), "Cosine distance", fmt),
        values,
        {n.strip(): _num(v, f"mean bias of {n}", fmt) for n, v in _MSLITE_NODE_BIAS.findall(text)},
        {n.strip(): _num(v, f"cosine of {n}", fmt) for n, v in _MSLITE_NODE_COSINE.findall(text)},
        None if fail is None else fail.group(0).strip(),
    )


# --- llama.cpp llama-perplexity ------------------------------------------------------------------

_PPL_CHUNK = re.compile(r"\[(\d+)\]" + _NUM + r",")
_PPL_FINAL = re.compile(r"Final estimate: PPL = " + _NUM + r" \+/- " + _NUM)
_PPL_OVER = re.compile(
    r"(?:calculating perplexity|computing) over (\d+) chunks, n_ctx=(\d+), "
    r"batch_size=(\d+), n_seq=(\d+)"
)
_PPL_PASS = re.compile(r"(?:perplexity|kl_divergence): " + _NUM + r" seconds per pass")
_PM = r"\s*(?:±|\+/-)\s*"  # the KLD summary prints U+00B1
_KLD_LINES = (  # (metric, regex of its summary line, unit, direction, description)
    (
        "perplexity",
        r"Mean PPL\(Q\)\s*:\s*" + _NUM + _PM + _NUM,
        "1",
        "lower",
        "Mean PPL(Q): the perplexity of the model under test",
    ),
    (
        "perplexity_base",
        r"Mean PPL\(base\)\s*:\s*" + _NUM + _PM + _NUM,
        "1",
        "none",
        "Mean PPL(base): the model the --kl-divergence-base file was made with",
    ),
    (
        "ppl_ratio_to_base",
        r"Mean PPL\(Q\)/PPL\(base\)\s*:\s*" + _NUM + _PM + _NUM,
        "1",
        "lower",
        "",
    ),
    (
        "ln_ppl_ratio_to_base",
        r"Mean ln\(PPL\(Q\)/PPL\(base\)\)\s*:\s*" + _NUM + _PM + _NUM,
        "1",
        "lower",
        "",
    ),
    ("kld_mean", r"Mean\s+KLD:\s*" + _NUM + _PM + _NUM, "nats", "lower", "KL(base || Q) per token"),
    ("kld_max", r"Maximum KLD:\s*" + _NUM, "nats", "lower", ""),
    ("kld_p99_9", r"99\.9%\s+KLD:\s*" + _NUM, "nats", "lower", ""),
    ("kld_p99", r"99\.0%\s+KLD:\s*" + _NUM, "nats", "lower", ""),
    ("kld_p95", r"95\.0%\s+KLD:\s*" + _NUM, "nats", "lower", ""),
    ("kld_p90", r"90\.0%\s+KLD:\s*" + _NUM, "nats", "lower", ""),
    ("kld_median", r"Median\s+KLD:\s*" + _NUM, "nats", "lower", ""),
    ("kld_p10", r"10\.0%\s+KLD:\s*" + _NUM, "nats", "lower", ""),
    ("kld_p5", r" 5\.0%\s+KLD:\s*" + _NUM, "nats", "lower", ""),
    ("kld_p1", r" 1\.0%\s+KLD:\s*" + _NUM, "nats", "lower", ""),
    ("kld_p0_1", r" 0\.1%\s+KLD:\s*" + _NUM, "nats", "lower", ""),
    ("kld_min", r"Minimum KLD:\s*" + _NUM, "nats", "lower", ""),
    (
        "rms_dp_pct",
        r"RMS Δp\s*:\s*" + _NUM + _PM + _NUM + r"\s*%",
        "%",
        "lower",
        "RMS of the change in the probability of the right token",
    ),
    (
        "same_top_p_pct",
        r"Same top p:\s*" + _NUM + _PM + _NUM + r"\s*%",
        "%",
        "higher",
        "share of tokens whose most likely next token is the base model's",
    ),
)
_KLD_RE = tuple((n, re.compile(rx), u, d, desc) for n, rx, u, d, desc in _KLD_LINES)
_PPL_PROMPT_EVAL = re.compile(
    r"prompt eval time =\s*"
    + _NUM
    + r" ms /\s*(\d+) tokens \(\s*"
    + _NUM
    + r" ms per token,\s*"
    + _NUM
    + r" tokens per second\)"
)
_PPL_LOAD = re.compile(r"llama_perf_context_print:\s+load time =\s*" + _NUM + r" ms")
_PPL_ERRORS = re.compile(
    r"^.*(?:you need at least \d+ tokens|tokenizes to only \d+ tokens|unable to load model|"
    r"failed to create context|failed to decode|failed reading|does not look like a file|"
    r"has been computed with|inconsistent vocabulary|Unexpected negative standard deviation|"
    r"must provide a name of a file).*$",
    re.M,
)
_PPL_SYSTEM = re.compile(r"system_info: (.*?)\s*$", re.M)
_PPL_BUILD = re.compile(r"^(?:.* )?build: (\d+ \([0-9a-f]+\).*?)\s*$", re.M)
_PPL_MODEL = re.compile(r"llama_model_loader: loaded meta data with .* from (\S+)")
_PPL_FTYPE = re.compile(r"print_info: file type\s*=\s*(.*?)\s*$", re.M)


def parse_llama_perplexity(text: str) -> Parsed:
    fmt = "llama-perplexity"
    err = _PPL_ERRORS.search(text)
    if err:
        raise ParseError(f"{fmt}: the tool reported an error: {err.group(0).strip()!r}")
    m = Metrics()
    over = _PPL_OVER.search(text)
    prov = {}
    if over:
        prov.update(n_chunks=over.group(1), n_ctx=over.group(2), n_seq=over.group(4))
    kld = {}
    for name, rx, _unit, _direction, _desc in _KLD_RE:
        hit = rx.search(text)
        if hit:
            kld[name] = hit
    if kld:
        missing = [
            n
            for n in ("perplexity", "perplexity_base", "kld_mean", "same_top_p_pct")
            if n not in kld
        ]
        if missing:
            raise ParseError(
                f"{fmt}: --kl-divergence summary incomplete, no line for {missing} "
                f"(truncated output?); output ends: {_tail(text)!r}"
            )
        for name, _rx, unit, direction, desc in _KLD_RE:
            if name in kld:
                m.add(
                    name,
                    _num(kld[name].group(1), name, fmt),
                    unit,
                    direction,
                    "exact",
                    description=desc,
                )
                if name in ("perplexity", "kld_mean", "same_top_p_pct"):
                    m.add(
                        f"{name}_uncertainty",
                        _num(kld[name].group(2), name, fmt),
                        unit,
                        "none",
                        "exact",
                    )
        prov["mode"] = "kl-divergence"
    else:
        final = _PPL_FINAL.search(text)
        if not final:
            raise ParseError(
                f"{fmt}: expected 'Final estimate: PPL = <f> +/- <f>' (or a "
                f"--kl-divergence summary); output was: {_tail(text)!r}"
            )
        ppl = _num(final.group(1), "Final estimate PPL", fmt)
        chunks = [(int(i), _num(v, f"chunk [{i}]", fmt)) for i, v in _PPL_CHUNK.findall(text)]
        if not chunks:
            raise ParseError(
                f"{fmt}: no per-chunk estimates '[1]<f>,[2]<f>,...' before the final estimate"
            )
        if [i for i, _ in chunks] != list(range(1, len(chunks) + 1)):
            raise ParseError(
                f"{fmt}: per-chunk estimates are not numbered 1..{len(chunks)} "
                "(output of two runs mixed?)"
            )
        if over and int(over.group(1)) != len(chunks):
            raise ParseError(
                f"{fmt}: the tool announced {over.group(1)} chunks but printed "
                f"{len(chunks)} estimates"
            )
        # Both are printed with 4 decimals from the same running sum: they must agree.
        if abs(chunks[-1][1] - ppl) > 1.5e-4:
            raise ParseError(
                f"{fmt}: the last running estimate [{chunks[-1][0]}]{chunks[-1][1]} "
                f"disagrees with the final estimate {ppl}"
            )
        m.add(
            "perplexity",
            ppl,
            "1",
            "lower",
            "exact",
            description=f"Final estimate over {len(chunks)} chunks",
        )
        m.add("perplexity_uncertainty", _num(final.group(2), "PPL +/-", fmt), "1", "none", "exact")
        m.add("perplexity_chunks", len(chunks), "chunks", "none", "exact")
        prov["mode"] = "perplexity"
        prov["ppl_per_chunk"] = ",".join(f"{v:.4f}" for _, v in chunks)
    pe = _PPL_PROMPT_EVAL.search(text)
    per_pass = _PPL_PASS.search(text)
    if per_pass:
        _measured(
            m,
            "ppl_first_pass_s",
            _num(per_pass.group(1), "seconds per pass", fmt),
            "s",
            description="the tool's timing of its first batch of n_seq chunks",
        )
    if pe:  # printed when llama's own log level lets it through (e.g. -lv 3 or --verbose)
        total_ms, n_tok, _per_tok, tps = pe.groups()
        _measured(
            m,
            "prefill_tokens_per_s",
            _num(tps, "tokens per second", fmt),
            "tokens/s",
            "higher",
            description=f"prompt eval over {n_tok} tokens (llama_perf)",
        )
        _measured(
            m,
            "prompt_eval_ms",
            _num(total_ms, "prompt eval time", fmt),
            "ms",
            description=f"all {n_tok} tokens",
        )
    elif per_pass and over and m.value("ppl_first_pass_s") > 0:
        tokens = int(over.group(2)) * min(int(over.group(4)), int(over.group(1)))
        _measured(
            m,
            "prefill_tokens_per_s",
            tokens / m.value("ppl_first_pass_s"),
            "tokens/s",
            "higher",
            description=f"first pass: {tokens} tokens (n_ctx x n_seq) / its seconds per pass",
        )
    load = _PPL_LOAD.search(text)
    if load:
        _measured(m, "model_load_ms", _num(load.group(1), "load time", fmt), "ms")
    for key, rx in (
        ("system_info", _PPL_SYSTEM),
        ("build", _PPL_BUILD),
        ("model_file", _PPL_MODEL),
        ("file_type", _PPL_FTYPE),
    ):
        hit = rx.search(text)
        if hit:
            prov[key] = hit.group(1).strip()
    return Parsed(m, prov)
