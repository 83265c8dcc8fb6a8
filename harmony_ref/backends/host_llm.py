"""The host backend on a real decoder checkpoint: the model's generation timed end to end on this
CPU, with the metric names SimulatedDevice predicts for the same model.

    m = HostDevice().run(config)    # config.checkpoint set: run --backend host --model smollm2-135m

What is measured (runtime/llama.py's `Llama` under the config's policy and KV dtype, through
runtime/generate.py, greedy, EOS ignored so every repeat makes the same number of tokens):
- the prompt: the first `prompt_tokens` tokens of the shipped held-out corpus (real text);
- `warmup` untimed generations (Numba compilation or its cache load, first-touch of the weights),
  then `repeats` timed ones; each gives one sample of prefill, TTFT (prefill + choosing the first
  token), the mean decode step (new_tokens - 1 steps read the KV cache) and end to end; the value
  is the median of the samples, all samples are kept;
- decode tokens/s at several context lengths (`decode_tokens_per_s_ctx<N>`): the cache filled by
  a prefill of N tokens, then DECODE_PROBE_STEPS decode steps timed, per repeat;
- peak RSS of the process (weights, KV cache and all).
Counted, from the same code as SimulatedDevice (exact): the memory split (device/memory.py's
add_memory_metrics, against the host profile's budget or this machine's RAM), kernel launches per
token and per prefill (model/graph.py: the graph a phone runtime would run), DRAM bytes per
decoded token. Derived from the measurement: decode bandwidth (counted bytes / measured step),
launch overhead (graph calls x the host profile's launch_overhead_us, or a timed empty Numba
call, / measured e2e) and decode_memory_bound_pct (the share of the measured step that reading
the counted bytes at the profile's DRAM bandwidth, or a measured streaming read, accounts for).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from harmony_ref.metrics import Metrics
from harmony_ref.units import GB, MB, MS_PER_S, US_PER_S

DECODE_CONTEXTS = (128, 512, 2048)  # decode tokens/s probed at these contexts (those that fit)
DECODE_PROBE_STEPS = 8


def prompt_ids(tok, n: int) -> np.ndarray:
    """The first n tokens of the held-out corpus (repeated if the corpus is shorter)."""
    from harmony_ref.eval.lm import load_corpus

    ids = tok.encode(load_corpus("heldout"))
    reps = -(-n // len(ids))
    return np.asarray((ids * reps)[:n], dtype=np.int64)


def measure_checkpoint(config, warmup: int = 1, repeats: int = 3, profile=None):
    """(Metrics, provenance) of the real generation of config.checkpoint (see module doc)."""
    from harmony_ref.backends.host_timing import peak_rss_mb
    from harmony_ref.compress import compress
    from harmony_ref.runtime.generate import Sampler, generate
    from harmony_ref.runtime.llama import Llama
    from harmony_ref.runtime.loader import load_decoder_shared, model_label

    s = config.scenario
    if s.batch != 1:
        raise ValueError(f"host: a checkpoint runs batch 1, got batch {s.batch}")
    if s.new_tokens < 2:
        raise ValueError(f"host: new_tokens must be >= 2 to time a decode step, got {s.new_tokens}")
    weights, tok = load_decoder_shared(config.checkpoint)
    if s.context_tokens > weights.config.max_positions:
        raise ValueError(
            f"host: context_tokens {s.context_tokens} exceeds {config.checkpoint}'s "
            f"{weights.config.max_positions} positions"
        )
    t0 = time.perf_counter()
    model = Llama(
        compress(weights, config.policy),
        config.policy,
        config.kv_dtype,
        max_context=s.context_tokens,
    )
    build_s = time.perf_counter() - t0
    prompt = prompt_ids(tok, s.prompt_tokens)
    greedy = Sampler()
    runs = []
    for i in range(warmup + repeats):
        g = generate(model, prompt, s.new_tokens, greedy, stop_ids=())
        if i >= warmup:
            runs.append(g)
    pre = [g.prefill_s for g in runs]
    ttft = [g.ttft_s for g in runs]
    step = [g.decode_s / g.decode_steps for g in runs]
    e2e = [g.prefill_s + g.decode_s for g in runs]
    m = Metrics()
    ms = lambda xs: [MS_PER_S * x for x in xs]  # noqa: E731
    med = statistics.median
    m.add(
        "ttft_ms",
        MS_PER_S * med(ttft),
        "ms",
        "lower",
        "measured",
        ms(ttft),
        description="prefill of the prompt + choosing the first token (real generation)",
    )
    m.add("prefill_ms", MS_PER_S * med(pre), "ms", "lower", "measured", ms(pre))
    m.add(
        "prefill_tokens_per_s",
        s.prompt_tokens / med(pre),
        "tokens/s",
        "higher",
        "measured",
        [s.prompt_tokens / x for x in pre],
    )
    m.add(
        "decode_step_ms",
        MS_PER_S * med(step),
        "ms",
        "lower",
        "measured",
        ms(step),
        description=f"mean of {s.new_tokens - 1} decode steps at contexts "
        f"{s.prompt_tokens + 1}..{s.prompt_tokens + s.new_tokens - 1}",
    )
    m.add(
        "decode_tokens_per_s",
        1.0 / med(step),
        "tokens/s",
        "higher",
        "measured",
        [1.0 / x for x in step],
    )
    m.add(
        "e2e_ms",
        MS_PER_S * med(e2e),
        "ms",
        "lower",
        "measured",
        ms(e2e),
        description=f"prefill + {s.new_tokens - 1} decode steps (the first token comes from "
        "the prefill)",
    )
    contexts = [c for c in DECODE_CONTEXTS if c + DECODE_PROBE_STEPS <= s.context_tokens]
    for c in contexts:
        rates = _decode_rate_at(model, prompt_ids(tok, c), repeats)
        m.add(
            f"decode_tokens_per_s_ctx{c}",
            med(rates),
            "tokens/s",
            "higher",
            "measured",
            rates,
            description=f"{DECODE_PROBE_STEPS} decode steps after a {c}-token prefill",
        )
    m.add(
        "peak_memory_mb",
        peak_rss_mb(),
        "MB",
        "lower",
        "measured",
        description="peak RSS of this process (psutil/getrusage): FP32 checkpoint weights kept "
        "for the reference, the policy's weights, KV cache and all",
    )
    prov = {
        "host_model": model_label(config.checkpoint, weights),
        "measured": f"real generation through runtime/llama.py, {warmup} warm-up + {repeats} "
        f"timed generations of {s.new_tokens} tokens after a {s.prompt_tokens}-"
        "token prompt from the held-out corpus, greedy, EOS ignored",
        "model_build_s": f"{build_s:.1f} (quantizing the checkpoint to {config.policy.name})",
        "weights_in_memory_mb": f"{sum(model.weight_bytes().values()) / MB:.1f}",
    }
    return m, prov


def _decode_rate_at(model, prefix: np.ndarray, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats + 1):  # the first round is a warm-up at this context
        model.reset()
        logits = model.prefill(prefix)
        token = int(np.argmax(logits))
        t0 = time.perf_counter()
        for _ in range(DECODE_PROBE_STEPS):
            token = int(np.argmax(model.decode(token)))
        out.append(DECODE_PROBE_STEPS / (time.perf_counter() - t0))
    return out[1:]


def add_counted_metrics(m: Metrics, config, profile, prov: dict) -> None:
    """The breakdown SimulatedDevice reports, for the checkpoint's model (see the module doc)."""
    from harmony_ref.backends.host_timing import (
        add_host_memory_metrics,
        launch_timing,
        stream_read_gbps,
    )
    from harmony_ref.device.physics import bandwidth_bytes_per_s
    from harmony_ref.model.graph import build_graph

    s = config.scenario
    add_host_memory_metrics(m, prov, profile, config)
    common = dict(fused=config.fused, kv_dtype=config.kv_dtype, batch=s.batch)
    prefill = build_graph(config.spec, config.policy, "prefill", tokens=s.prompt_tokens, **common)
    decode = build_graph(
        config.spec,
        config.policy,
        "decode",
        context=s.prompt_tokens + s.new_tokens // 2 + 1,
        **common,
    )
    m.add(
        "kernel_launches_per_token",
        decode.kernel_launches / s.batch,
        "launches",
        "lower",
        "exact",
        description="ops of the decode-step graph (model/graph.py)",
    )
    m.add(
        "prefill_kernel_launches",
        prefill.kernel_launches,
        "launches",
        "lower",
        "exact",
        description="ops of the prefill graph (model/graph.py)",
    )
    m.add(
        "decode_dram_mb_per_token",
        decode.dram_bytes / s.batch / MB,
        "MB",
        "lower",
        "exact",
        description="DRAM bytes of the decode-step graph (model/graph.py) / batch",
    )
    steps = m["decode_step_ms"].samples
    m.add(
        "decode_bandwidth_gbps",
        decode.dram_bytes / (m.value("decode_step_ms") / MS_PER_S) / GB,
        "GB/s",
        "none",
        "measured",
        [decode.dram_bytes / (x / MS_PER_S) / GB for x in steps],
        description="counted DRAM bytes of the decode step / measured decode step",
    )
    if profile is not None:
        launch_s = profile.runtime.launch_overhead_us / US_PER_S
        bw = bandwidth_bytes_per_s(profile)
        src = f"{profile.name}'s launch_overhead_us and DRAM bandwidth"
    else:
        launch_s = launch_timing().median_s
        bw = stream_read_gbps() * GB
        src = "a timed empty Numba call and a measured streaming read"
    calls = prefill.kernel_launches + (s.new_tokens - 1) * decode.kernel_launches
    pct = lambda e2e_ms: 100.0 * calls * launch_s / (e2e_ms / MS_PER_S)  # noqa: E731
    m.add(
        "launch_overhead_pct",
        pct(m.value("e2e_ms")),
        "%",
        "lower",
        "measured",
        [pct(x) for x in m["e2e_ms"].samples],
        description=f"graph calls x launch overhead / measured e2e ({src})",
    )
    mem_pct = 100.0 * (decode.dram_bytes / bw) / (m.value("decode_step_ms") / MS_PER_S)
    m.add(
        "decode_memory_bound_pct",
        min(100.0, mem_pct),
        "%",
        "none",
        "measured",
        description=f"counted decode bytes at the DRAM bandwidth ({src}) / measured step",
    )
