"""Prompt prefix reuse: the TTFT a cached prefix saves, worked by hand; the session KV cache (LRU,
whole-session eviction, context limit truncate/refuse) step by step; serve with sessions."""

import dataclasses
import json

import pytest

from harmony_ref.backends.simulated import SimulatedDevice
from harmony_ref.cli import main
from harmony_ref.config import RunConfig, Scenario
from harmony_ref.device.chat import Admission, ConversationCache, ConversationService
from harmony_ref.device.cost import scenario_timing
from harmony_ref.device.runtime import load_profile
from harmony_ref.device.serve import Request, simulate_serving
from tests.device.test_ops import TINY


def test_ttft_saved_by_a_cached_prefix_worked_by_hand(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    flag = load_profile("harmony-flagship")
    # Compute only: DRAM 1e9 GB/s (memory time ~1e-14 s per op) and no launch overhead.
    prof = dataclasses.replace(
        flag,
        memory=dataclasses.replace(flag.memory, dram_bandwidth_gbps=1e9),
        runtime=dataclasses.replace(flag.runtime, launch_overhead_us=0.0),
    )
    P, N = 48, 16  # cached prefix, new prompt tokens
    full = RunConfig.from_names(
        model=str(path), policy="fp16", prompt_tokens=P + N, new_tokens=1, context_tokens=128
    )
    reuse = dataclasses.replace(full, scenario=dataclasses.replace(full.scenario, prefix_tokens=P))
    # Prefill of n rows over C positions on the tiny decoder (1 layer, hidden 64, q_dim 64,
    # kv_dim 32, FFN 128, 4 heads), by hand:
    #   Cube (fp16): 2n(64*64 + 2*32*64 + 64*64 + 3*128*64) = 73728 n, attention 2 x 2nC*64 = 256 nC
    #   vector: norms 2*5*64 n, rope 3*96 n, residuals 2*64 n, silu 4*128 n, gate 128 n = 1696 n,
    #           softmax 5*4 nC = 20 nC  (lm_head and the final norm run on the last row in both)
    # Full: n = C = P + N; reused: n = N, C = P + N. Saved = 73728 P + 256 P(P+N) Cube flops and
    # 1696 P + 20 P(P+N) vector flops = 4,325,376 at 16.384 TOPS x 0.5 + 142,848 at 256 GFLOP/s x 0.5.
    cube, vector = 73728 * P + 256 * P * (P + N), 1696 * P + 20 * P * (P + N)
    assert (cube, vector) == (4_325_376, 142_848)
    want_s = cube / (16.384e12 * 0.5) + vector / (256e9 * 0.5)  # 1.6438 us
    saved = scenario_timing(prof, full).ttft_s - scenario_timing(prof, reuse).ttft_s
    assert saved == pytest.approx(want_s, rel=1e-6)


def test_prefix_metrics_on_the_shipped_flagship():
    m = SimulatedDevice().predict(RunConfig.from_names(prefix_tokens=384))
    assert m.value("ttft_ms") < m.value("ttft_without_reuse_ms")
    assert m.value("prefix_ttft_saved_ms") == pytest.approx(
        m.value("ttft_without_reuse_ms") - m.value("ttft_ms")
    )
    assert m.value("ttft_without_reuse_ms") == pytest.approx(
        SimulatedDevice().predict(RunConfig.from_names()).value("ttft_ms")
    )
    assert "prefix_ttft_saved_ms" not in SimulatedDevice().predict(RunConfig.from_names())
    with pytest.raises(
        ValueError, match="field 'prefix_tokens' = 512: must be less than prompt_tokens"
    ):
        Scenario(512, 128, 2048, 1, 512)
    # A record's config keeps the prefix only when there is one (older records stay comparable).
    cfg = RunConfig.from_names(prefix_tokens=384)
    assert cfg.to_dict()["scenario"]["prefix_tokens"] == 384
    assert RunConfig.from_dict(cfg.to_dict()) == cfg
    assert "prefix_tokens" not in RunConfig.from_names().to_dict()["scenario"]


def test_session_cache_step_by_step():
    c = ConversationCache(
        budget_tokens=1000, context_limit=600, overflow="truncate", prefix_tokens=100
    )
    assert c.admit(1, 50, 50) == Admission("ok", False, 100, 50, 150)  # prefix reused
    assert c.admit(2, 50, 50) == Admission("ok", False, 100, 50, 150)
    assert c.admit(1, 50, 50) == Admission("ok", True, 200, 50, 250)  # prefix + its history
    assert c.admit(3, 400, 50) == Admission("ok", False, 100, 400, 500)
    assert c.held_tokens == 100 + 100 + 200 + 450
    assert c.admit(4, 300, 50) == Admission("ok", False, 100, 300, 400)
    # 100 + 100 + 200 + 450 + 350 = 1200 > 1000: sessions 2 then 1 (least recent) leave, whole.
    assert c.counts["evicted_sessions"] == 2 and c.held_tokens == 900
    # Session 1 was evicted: its 200 tokens of history are prefilled again after the prefix.
    assert c.admit(1, 50, 50) == Admission("ok", False, 100, 250, 350)
    assert c.held_tokens == 100 + 350 + 300  # session 3 evicted in turn
    # 100 + 350 + 200 + 50 = 700 > 600: the history is dropped, the system prompt kept.
    assert c.admit(4, 200, 50) == Admission("truncated", False, 100, 200, 300)
    assert c.admit(9, 550, 10) == Admission("refused", False, 0, 0, 0)  # 660 > 600 even so
    s = c.stats(kv_bytes_per_token=1000.0)
    assert (s["requests"], s["hits"], s["misses"], s["truncated"], s["refused"]) == (8, 1, 6, 1, 1)
    assert (
        s["hit_rate"] == pytest.approx(1 / 7) and s["max_held_tokens"] == 900
    )  # after eviction, never above budget
    assert s["max_held_mb"] == pytest.approx(900 * 1000 / 1e6)
    r = ConversationCache(1000, 600, "refuse", 100)
    r.admit(4, 300, 50)
    assert r.admit(4, 200, 50).status == "refused"  # 100 + 350 + 250 > 600
    for kw, msg in (
        ({"overflow": "drop"}, "overflow = 'drop'"),
        ({"prefix_tokens": 2000}, "exceeds budget"),
        ({"budget_tokens": 0}, "budget_tokens = 0"),
    ):
        with pytest.raises(ValueError, match=msg):
            ConversationCache(**{"budget_tokens": 1000, "context_limit": 600, **kw})


def test_serve_with_sessions_counts_refusals():
    cfg = RunConfig.from_names(model="qwen2.5-0.5b", prompt_tokens=64, new_tokens=16)
    svc = ConversationService(
        ConversationCache(4096, 256, "refuse", 64), load_profile("harmony-flagship"), cfg
    )
    reqs = [
        Request(float(i), 64, 16, conversation=0) for i in range(4)
    ]  # 64 + 80k + 80 > 256 at k = 2
    res = simulate_serving(reqs, None, admit=svc)
    assert [o.status for o in res.outcomes] == ["completed", "completed", "refused", "refused"]
    assert res.summary()["refused"] == 2
    assert svc.ttft_reuse_ms[1] < svc.ttft_no_reuse_ms[1]


def test_serve_cli_sessions(capsys):
    args = [
        "serve",
        "--model",
        "qwen2.5-0.5b",
        "--rate",
        "0.5",
        "--minutes",
        "2",
        "--prompt",
        "128",
        "--new",
        "32",
        "--prefix-tokens",
        "256",
        "--sessions",
        "4",
        "--kv-budget-tokens",
        "2048",
        "--context-limit",
        "1024",
        "--json",
    ]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    s = out["sessions"]
    assert 0 < s["hit_rate"] < 1 and s["truncated"] > 0
    assert s["ttft_reuse_mean_ms"] < s["ttft_no_reuse_mean_ms"]
    assert out["metrics"]["serve_session_hit_rate"]["value"] == s["hit_rate"]
    assert main(args[:-1] + ["--overflow", "drop"]) == 2  # argparse's choices: a usage error
    assert main(args[:-1] + ["--kv-budget-tokens", "100"]) == 2  # prefix 256 cannot be cached
    assert "prefix_tokens = 256 exceeds budget_tokens = 100" in capsys.readouterr().err
