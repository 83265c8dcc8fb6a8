"""Issue 16: a sweep of bad inputs across every command (profiles, policies, models, scenarios,
records, baselines, tolerances, artifacts, traces, device outputs, output paths, names). Each
must exit 2 with one error line naming the file, field or value, no traceback, and no file
written or changed anywhere under the test's directory (which is also the working directory, so
a default output path would show up too). A few run as real subprocesses: no traceback reaches
stderr from the installed entry point either."""

import hashlib
import json
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harmony_ref.cli import main

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "results" / "baseline.json"
BENCH = ROOT / "tests" / "fixtures" / "device_outputs" / "llama_bench.json"


def _record(**change) -> str:
    d = json.loads(BASELINE.read_text())
    for dotted, value in change.items():
        *path, last = dotted.split(".")
        node = d
        for k in path:
            node = node[k]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value
    return json.dumps(d)


_DELETE = object()


PROFILE = (ROOT / "harmony_ref" / "device" / "profiles" / "harmony-flagship.toml").read_text()
SPEC = (ROOT / "harmony_ref" / "model" / "specs" / "llama-3.2-1b.toml").read_text()


def _edit(text: str, old: str, new: str) -> str:
    """`text` with the one line starting with `old` replaced by `new` (a field's new value)."""
    lines = text.splitlines()
    hits = [i for i, line in enumerate(lines) if line.startswith(old)]
    assert len(hits) == 1, (old, hits)
    lines[hits[0]] = new
    return "\n".join(lines) + "\n"


def _bench(decode) -> str:
    rows = json.loads(BENCH.read_text())
    rows[1]["avg_ts"] = decode
    return json.dumps(rows)


# Files each case may refer to as {name}; written before the case runs.
FILES = {
    "bad.toml": "this is = = not toml\n",
    "unknown_field.toml": 'name = "x"\nbogus_field = 3\n',
    "policy_bad.toml": 'name = "p"\ndefault = "int3-g7"\n',
    "nan_ttft.json": _record(**{"metrics.ttft_ms.value": math.nan}),
    "neg_ttft.json": _record(**{"metrics.ttft_ms.value": -1.0}),
    "inf_tps.json": _record(**{"metrics.decode_tokens_per_s.value": math.inf}),
    "pct_200.json": _record(**{"metrics.launch_overhead_pct.value": 200.0}),
    "nan_sample.json": _record(**{"metrics.host_gemv_ms.samples": [1.0, math.nan]}),
    "schema99.json": _record(schema_version=99),
    "no_config.json": _record(config=_DELETE),
    "kind_fuzzy.json": _record(**{"metrics.ttft_ms.kind": "fuzzy"}),
    "dir_sideways.json": _record(**{"metrics.ttft_ms.direction": "sideways"}),
    "other_model.json": _record(**{"config.model": "llama-3.2-1b"}),
    "fewer_metrics.json": _record(**{"metrics.ttft_ms": _DELETE}),
    "no_prov.json": _record(**{"provenance.cpu_model": _DELETE}),
    "list.json": "[1, 2, 3]\n",
    "truncated.json": BASELINE.read_text()[:200],
    "baseline.json": BASELINE.read_text(),
    "tol_bad.toml": "[defaults]\nexact_pct = -1\n",
    "tol_unknown.toml": "[defaults]\nexactpct = 1\n",
    "tol_section.toml": "[limits]\nx = 1\n",
    "garbage.safetensors": "not a safetensors file at all",
    "trace_arrival.csv": "0,8,8\nsoon,8,8\n",
    "trace_order.csv": "5,8,8\n1,8,8\n",
    "trace_cols.csv": "0,8\n",
    "trace_empty.csv": "# nothing\n",
    "trace_tokens.csv": "0,-3,8\n",
    "trace_nan.csv": "nan,8,8\n",
    "bench_neg.json": _bench(-5.0),
    "bench_zero.json": _bench(0.0),
    "afile": "x",
    # numbers and names checked where they are read
    "prof_inf_bw.toml": _edit(PROFILE, "dram_bandwidth_gbps", "dram_bandwidth_gbps = inf"),
    "prof_nan_bw.toml": _edit(PROFILE, "dram_bandwidth_gbps", "dram_bandwidth_gbps = nan"),
    "prof_nan_ambient.toml": _edit(PROFILE, "ambient_c", "ambient_c = nan"),
    "prof_nan_npu.toml": _edit(PROFILE, "npu_init_ms", "npu_init_ms = nan"),
    "prof_typo.toml": _edit(PROFILE, "dram_bandwidth_gbps", "dram_bandwith_gbps = 68.3"),
    "spec_inf_eps.toml": _edit(SPEC, "norm_eps", "norm_eps = inf"),
    "spec_huge.toml": _edit(SPEC, "n_layers", "n_layers = 100000000"),
    "pol_gate_prj.toml": 'name = "p"\ndefault = "int4-g32"\nkeep_fp16_layers = ["gate_prj"]\n',
    "pol_layer99.toml": 'name = "p"\ndefault = "int4-g32"\n[layers]\n'
    '"model.layers.99.mlp.gate_proj" = "int8"\n',
    "pol_block99.toml": 'name = "p"\ndefault = "int4-g32"\n[prune]\nffn = 0.1\n'
    '[prune.blocks]\n"99" = { ffn = 0.5 }\n',
    "pol_blocks_huge.toml": 'name = "p"\ndefault = "int4-g32"\n[prune]\n[prune.blocks]\n'
    '"0-100000000" = { ffn = 0.5 }\n',
    "pol_g16384.toml": 'name = "p"\ndefault = "int4-g16384"\n',
    "pol_mix.toml": 'name = "p"\ndefault = "q4_k"\nmix = "q3_k_m"\n',
    "pol_typo_key.toml": 'name = "p"\ndefault = "int4-g32"\nkeep_fp16_layer = ["lm_head"]\n',
    "pol_dup_a.toml": 'name = "same"\ndefault = "int8"\n',
    "pol_dup_b.toml": 'name = "same"\ndefault = "int4-g32"\n',
    "grid_inf.toml": 'models = ["llama-3.2-1b"]\npolicies = ["int8"]\n'
    'profiles = ["{d}/prof_inf_bw.toml"]\n',
    "grid_typo_pol.toml": 'models = ["llama-3.2-1b"]\npolicies = ["{d}/pol_gate_prj.toml"]\n'
    'profiles = ["harmony-flagship"]\n',
    "grid_huge.toml": 'models = ["llama-3.2-1b"]\npolicies = ["int8"]\n'
    'profiles = ["harmony-flagship"]\n[scenario]\n'
    f"prompt_tokens = {list(range(1, 1001))}\nnew_tokens = {list(range(1, 201))}\n",
    "grid_typo_field.toml": 'models = ["llama-3.2-1b"]\npolices = ["int8"]\n'
    'profiles = ["harmony-flagship"]\n',
    "tol_typo.toml": "[metrics.ttft_ms]\ntolerance_pc = 1\n",
    "tol_inf.toml": '[metrics.ttft_ms]\ntolerance_pct = inf\nreason = "never fail"\n',
}
CAT = f"{shlex.quote(sys.executable)} -c 'import sys; sys.stdout.write(open(sys.argv[1]).read())'"

# gate of the baseline against itself, under the tolerance file that follows
GATE_TOLERANCES = (
    "gate --baseline {d}/baseline.json --current {d}/baseline.json --tolerances".split()
)

CASES = [  # (argv, a substring the error line must hold)
    # profiles
    (["predict", "--profile", "nope"], "nope"),
    (["predict", "--profile", "{d}/missing.toml"], "missing.toml"),
    (["predict", "--profile", "{d}/bad.toml"], "bad.toml"),
    (["predict", "--profile", "{d}/unknown_field.toml"], "unknown_field.toml"),
    (["thermal", "--profile", "harmony-flagshp"], "did you mean 'harmony-flagship'"),
    (["compare", "--profiles", "harmony-flagship,nope"], "nope"),
    (["serve", "--profile", "nope"], "nope"),
    (["coldstart", "--profile", "nope"], "nope"),
    (["run", "--profile", "nope", "--out-dir", "{d}/runs"], "nope"),
    (
        [
            "measure",
            "--command",
            "true",
            "--format",
            "mslite",
            "--profile",
            "nope",
            "--model",
            "llama-3.2-3b",
        ],
        "nope",
    ),
    # policies
    (["predict", "--policy", "nope"], "nope"),
    (["predict", "--policy", "{d}/policy_bad.toml"], "policy_bad.toml"),
    (["thermal", "--policy", "int4-g12"], "did you mean 'int4-g128'"),
    (["serve", "--policy", "nope"], "nope"),
    (["run", "--policy", "nope", "--out-dir", "{d}/runs"], "nope"),
    (["compare", "--policy", "nope"], "nope"),
    # models
    (["predict", "--model", "nope"], "nope"),
    (["run", "--model", "lama-3.2-3b", "--out-dir", "{d}/runs"], "did you mean 'llama-3.2-3b'"),
    (["thermal", "--model", "nope"], "nope"),
    (["serve", "--model", "nope"], "nope"),
    (
        ["measure", "--command", "true", "--format", "mslite", "--profile", "harmony-flagship"],
        "--model",
    ),
    # scenarios
    (["predict", "--prompt", "0"], "--prompt"),
    (["predict", "--new", "-1"], "--new"),
    (["predict", "--context", "16"], "context_tokens = 16"),
    (["predict", "--model", "llama-2-7b", "--context", "8192"], "max_positions = 4096"),
    (["predict", "--context", "10000000"], "10000000"),
    (["predict", "--batch", "0"], "--batch"),
    (["predict", "--kv-dtype", "int3"], "--kv-dtype"),
    (["run", "--context-tokens", "16", "--out-dir", "{d}/runs"], "context_tokens = 16"),
    (["compare", "--prompt", "x"], "--prompt"),
    (["thermal", "--minutes", "0"], "--minutes"),
    (["thermal", "--dt-ms", "-1"], "--dt-ms"),
    (["thermal", "--minutes", "nan"], "--minutes"),
    (["serve", "--rate", "1e9"], "1,000,000"),
    (["serve", "--minutes", "inf"], "--minutes"),
    (["serve", "--rate", "nan"], "--rate"),
    (["serve", "--queue", "-1"], "--queue"),
    (["serve", "--timeout-s", "0"], "--timeout-s"),
    # records and baselines (gate)
    (["gate", "--baseline", "{d}/missing.json", "--current", "{d}/baseline.json"], "missing.json"),
    (
        ["gate", "--baseline", "{d}/truncated.json", "--current", "{d}/baseline.json"],
        "truncated.json",
    ),
    (["gate", "--baseline", "{d}/nan_ttft.json", "--current", "{d}/baseline.json"], "ttft_ms"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/nan_ttft.json"], "nan"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/neg_ttft.json"], "-1.0"),
    (
        ["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/inf_tps.json"],
        "decode_tokens_per_s",
    ),
    (
        ["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/pct_200.json"],
        "launch_overhead_pct",
    ),
    (
        ["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/nan_sample.json"],
        "host_gemv_ms.samples",
    ),
    (
        ["gate", "--baseline", "{d}/schema99.json", "--current", "{d}/baseline.json"],
        "schema_version",
    ),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/list.json"], "list.json"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/no_config.json"], "config"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/kind_fuzzy.json"], "kind"),
    (
        ["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/dir_sideways.json"],
        "direction",
    ),
    (
        ["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/no_prov.json"],
        "provenance.cpu_model",
    ),
    (
        ["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/other_model.json"],
        "llama-3.2-1b",
    ),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/fewer_metrics.json"], "ttft_ms"),
    (
        [
            "gate",
            "--baseline",
            "{d}/baseline.json",
            "--current",
            "latest",
            "--out-dir",
            "{d}/empty_runs",
        ],
        "no run record",
    ),
    (
        [
            "gate",
            "--baseline",
            "{d}/baseline.json",
            "--current",
            "{d}/nan_ttft.json",
            "--update-baseline",
        ],
        "ttft_ms",
    ),
    (
        [
            "gate",
            "--baseline",
            "{d}/new_base.json",
            "--current",
            "{d}/neg_ttft.json",
            "--update-baseline",
        ],
        "ttft_ms",
    ),
    # tolerances
    ([*GATE_TOLERANCES, "{d}/nope.toml"], "nope.toml"),
    ([*GATE_TOLERANCES, "{d}/tol_bad.toml"], "defaults.exact_pct"),
    ([*GATE_TOLERANCES, "{d}/tol_unknown.toml"], "exactpct"),
    ([*GATE_TOLERANCES, "{d}/tol_section.toml"], "limits"),
    # artifacts
    (["verify", "{d}/missing.safetensors"], "missing.safetensors"),
    (
        ["accuracy", "--model", "all-minilm-l6", "--artifact", "{d}/garbage.safetensors"],
        "garbage.safetensors",
    ),
    # traces
    (["serve", "--trace", "{d}/missing.csv"], "missing.csv"),
    (["serve", "--trace", "{d}/trace_arrival.csv"], "line 2"),
    (["serve", "--trace", "{d}/trace_order.csv"], "non-decreasing"),
    (["serve", "--trace", "{d}/trace_cols.csv"], "trace_cols.csv"),
    (["serve", "--trace", "{d}/trace_empty.csv"], "no requests"),
    (["serve", "--trace", "{d}/trace_tokens.csv"], "prompt_tokens"),
    (["serve", "--trace", "{d}/trace_nan.csv"], "arrival_s"),
    # device outputs
    (
        ["measure", "--command", CAT + " {d}/bench_neg.json", "--format", "llama-bench"],
        "decode_tokens_per_s",
    ),
    (
        ["measure", "--command", CAT + " {d}/bench_zero.json", "--format", "llama-bench"],
        "decode_tokens_per_s",
    ),
    (["measure", "--command", "true", "--format", "mslite", "--set", "novalue"], "--set"),
    (["measure", "--command", "true", "--format", "bogus"], "--format"),
    # output paths
    (["run", "--out-dir", "{d}/afile"], "afile"),
    (["run", "--out-dir", "{d}/afile/sub"], "afile"),
    (["thermal", "--plot", "{d}/adir"], "adir"),
    (["compare", "--plot", "{d}/adir"], "adir"),
    (["plan", "--budget-mb", "40", "--out", "{d}/adir"], "adir"),
    (["calibrate", "--out", "{d}/adir"], "adir"),
    (["export", "--policy", "int8", "{d}/adir"], "adir"),
    (
        [
            "gate",
            "--baseline",
            "{d}/baseline.json",
            "--current",
            "{d}/baseline.json",
            "--summary",
            "{d}/adir",
        ],
        "adir",
    ),
    # command-line names and combinations
    (["gat"], "did you mean 'gate'"),
    (["run", "--backend", "command", "--out-dir", "{d}/runs"], "--command"),
    (
        [
            "run",
            "--backend",
            "command",
            "--command",
            "true",
            "--command-format",
            "mslit",
            "--out-dir",
            "{d}/runs",
        ],
        "did you mean 'mslite'",
    ),
    (["run", "--skip", "bogus", "--out-dir", "{d}/runs"], "bogus"),
    (["calibrate", "--repeats", "0", "--out", "{d}/h.toml"], "--repeats"),
    (["calibrate", "--name", "", "--out", "{d}/h.toml"], "--name '': give the profile a name"),
    # non-finite numbers in input files, named by file and field where they are read
    (["predict", "--profile", "{d}/prof_inf_bw.toml"], "memory.dram_bandwidth_gbps' = inf"),
    (["predict", "--profile", "{d}/prof_nan_bw.toml"], "memory.dram_bandwidth_gbps' = nan"),
    (
        ["run", "--profile", "{d}/prof_nan_bw.toml", "--out-dir", "{d}/runs"],
        "prof_nan_bw.toml: field 'memory.dram_bandwidth_gbps'",
    ),
    (
        ["run", "--profile", "{d}/prof_inf_bw.toml", "--backend", "host", "--out-dir", "{d}/runs"],
        "memory.dram_bandwidth_gbps",
    ),
    (["thermal", "--profile", "{d}/prof_nan_ambient.toml"], "thermal.ambient_c' = nan"),
    (["coldstart", "--profile", "{d}/prof_nan_npu.toml"], "runtime.npu_init_ms' = nan"),
    (["coldstart", "--profile", "{d}/prof_nan_npu.toml", "--json"], "runtime.npu_init_ms"),
    (["compare", "--profiles", "harmony-flagship,{d}/prof_inf_bw.toml"], "dram_bandwidth_gbps"),
    (["serve", "--profile", "{d}/prof_nan_bw.toml"], "dram_bandwidth_gbps"),
    (["lifecycle", "--profile", "{d}/prof_nan_npu.toml"], "npu_init_ms"),
    (["check-ops", "--profile", "{d}/prof_inf_bw.toml"], "dram_bandwidth_gbps"),
    (["predict", "--profile", "{d}/prof_typo.toml"], "did you mean 'dram_bandwidth_gbps'"),
    (["predict", "--model", "{d}/spec_inf_eps.toml"], "norm_eps' = inf"),
    (["sweep", "--name", "s", "--grid", "{d}/grid_inf.toml"], "dram_bandwidth_gbps"),
    # typo'd and unmatched policy names, resolved against the model before any work
    (["predict", "--policy", "{d}/pol_gate_prj.toml"], "did you mean 'gate_proj'"),
    (["run", "--policy", "{d}/pol_gate_prj.toml", "--out-dir", "{d}/runs"], "'gate_prj'"),
    (["thermal", "--policy", "{d}/pol_gate_prj.toml"], "'gate_prj'"),
    (
        ["accuracy", "--model", "all-minilm-l6", "--policy", "{d}/pol_gate_prj.toml"],
        "matches no layer of 'all-minilm-l6'",
    ),
    (["predict", "--policy", "{d}/pol_layer99.toml"], "'model.layers.99.mlp.gate_proj'"),
    (
        ["export", "--policy", "{d}/pol_gate_prj.toml", "{d}/x.safetensors"],
        "'gate_prj', which matches no layer of 'all-minilm-l6'",
    ),
    (["predict", "--policy", "{d}/pol_block99.toml"], "block 99"),
    (["predict", "--policy", "{d}/pol_blocks_huge.toml"], "100,000,000"),
    (["predict", "--policy", "{d}/pol_g16384.toml"], "int4-g16384"),
    (["predict", "--policy", "{d}/pol_mix.toml"], "field 'mix' = 'q3_k_m'"),
    (["predict", "--policy", "{d}/pol_typo_key.toml"], "did you mean 'keep_fp16_layers'"),
    (
        [
            "accuracy",
            "--model",
            "all-minilm-l6",
            "--policy",
            "{d}/pol_dup_a.toml",
            "--policy",
            "{d}/pol_dup_b.toml",
        ],
        "both named 'same'",
    ),
    (["sweep", "--name", "s", "--grid", "{d}/grid_typo_pol.toml"], "'gate_prj'"),
    (["sweep", "--name", "s", "--grid", "{d}/grid_typo_field.toml"], "did you mean 'policies'"),
    ([*GATE_TOLERANCES, "{d}/tol_typo.toml"], "tolerance_pc"),
    # bounded work
    (["predict", "--model", "{d}/spec_huge.toml"], "n_layers' = 100,000,000: at most 1,024"),
    (["predict", "--batch", "1000000"], "at most 1,024"),
    (["sweep", "--name", "s", "--grid", "{d}/grid_huge.toml"], "200,000 points"),
    (["lifecycle", "--entries", "100000000"], "--entries 100,000,000: at most 10,000"),
    # an infinite tolerance: the metric could never fail the gate
    (
        [*GATE_TOLERANCES, "{d}/tol_inf.toml"],
        "'metrics.ttft_ms.tolerance_pct' = inf: must be a finite number >= 0",
    ),
    # without --sessions these were ignored, whatever their value
    (["serve", "--kv-budget-tokens", "-1"], "--kv-budget-tokens -1: must be >= 1"),
    (["serve", "--context-limit", "0"], "--context-limit 0: must be >= 2"),
    (["quantize-report", "--rows", "1000000", "--cols", "1048576"], "at most 67,108,864"),
    (
        ["coldstart", "--measure", "--rows", "1000000", "--cols", "1048576"],
        "12,582,912,000,000 weights, at most 2,147,483,648",
    ),
    (["plan", "--budget-mb", "inf"], "--budget-mb"),
    (["plan", "--budget-mb", "nan"], "--budget-mb"),
    (["pick", "--sweep", "s", "--budget-mb", "inf"], "--budget-mb"),
    # export --format gguf (issue 29): a format GGUF has no type for, an unwritable output, a
    # checkpoint without tokenizer metadata, a missing --model
    (
        [
            "export",
            "--format",
            "gguf",
            "--model",
            "{d}/tiny.gguf",
            "--policy",
            "int4-g32",
            "--out",
            "{d}/x.gguf",
        ],
        "blk.0.attn_q.weight (model.layers.0.self_attn.q_proj) is int4-g32, which "
        "GGUF has no type for; the nearest GGUF type is q4_1",
    ),
    (
        [
            "export",
            "--format",
            "gguf",
            "--model",
            "{d}/tiny.gguf",
            "--policy",
            "int8",
            "--out",
            "{d}/x.gguf",
        ],
        "nearest GGUF type is q8_0",
    ),
    (
        [
            "export",
            "--format",
            "gguf",
            "--model",
            "{d}/tiny.gguf",
            "--policy",
            "q4_0",
            "--out",
            "{d}/afile/x.gguf",
        ],
        "afile",
    ),
    (
        [
            "export",
            "--format",
            "gguf",
            "--model",
            "{d}/tiny.gguf",
            "--policy",
            "q4_0",
            "--out",
            "{d}/adir",
        ],
        "adir",
    ),
    (
        [
            "export",
            "--format",
            "gguf",
            "--model",
            "{d}/bare.gguf",
            "--policy",
            "q4_0",
            "--out",
            "{d}/x.gguf",
        ],
        "tokenizer.ggml.model is missing",
    ),
    (["export", "--format", "gguf", "--policy", "q4_0", "--out", "{d}/x.gguf"], "--model"),
    (
        [
            "export",
            "--format",
            "gguf",
            "--model",
            "{d}/missing.gguf",
            "--policy",
            "q4_0",
            "--out",
            "{d}/x.gguf",
        ],
        "missing.gguf",
    ),
    (["accuracy", "--model", "{d}/tiny_hf", "--policy", "as-stored"], "not a GGUF file"),
    # check-runtime --corpus: missing, not UTF-8, too short for one chunk, with mslite
    (
        [
            "check-runtime",
            "--model",
            "{d}/tiny.gguf",
            "--command",
            "true {{corpus}}",
            "--corpus",
            "{d}/missing.txt",
            "--out-dir",
            "{d}/runs",
        ],
        "--corpus {d}/missing.txt: no such file",
    ),
    (
        [
            "check-runtime",
            "--model",
            "{d}/tiny.gguf",
            "--command",
            "true {{corpus}}",
            "--corpus",
            "{d}/latin1.txt",
            "--out-dir",
            "{d}/runs",
        ],
        "not UTF-8",
    ),
    (
        [
            "check-runtime",
            "--model",
            "{d}/tiny.gguf",
            "--command",
            "true {{corpus}}",
            "--corpus",
            "{d}/short.txt",
            "--context",
            "64",
            "--out-dir",
            "{d}/runs",
            "--no-cache",
        ],
        "fewer than one chunk of --context 64",
    ),
    (
        [
            "check-runtime",
            "--model",
            "{d}/tiny.gguf",
            "--command",
            "true {{corpus}}",
            "--corpus",
            "{d}/empty.txt",
            "--out-dir",
            "{d}/runs",
        ],
        "empty",
    ),
    (
        [
            "check-runtime",
            "--format",
            "mslite",
            "--command",
            "true",
            "--corpus",
            "{d}/short.txt",
            "--out-dir",
            "{d}/runs",
        ],
        "--format llama-perplexity only",
    ),
    (["plan", "--budget-mb", "80", "--formats", "q4_0,q3_k"], "unknown weight format 'q3_k'"),
    (
        ["plan", "--model", "all-minilm-l6", "--budget-mb", "8", "--formats", "q4_0"],
        "--formats applies to a decoder",
    ),
    # every plot is a PNG: another name is refused before any work, by every --plot
    *(
        ([*argv, "--plot", "{d}/c.txt"], "c.txt: must be a .png path")
        for argv in (
            ["compare"],
            ["thermal"],
            ["serve"],
            ["lifecycle"],
            ["fidelity"],
            ["history", "--metric", "ttft_ms"],
            ["pick", "--sweep", "nosuch"],
        )
    ),
]


def _snapshot(root: Path) -> dict:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text.replace("{d}", str(tmp_path)))
    (tmp_path / "adir").mkdir()
    (tmp_path / "empty_runs").mkdir()
    from harmony_ref.checkpoint.gguf import write_gguf
    from tests.fixtures.decoder.tiny import tiny_weights, write_tiny_gguf, write_tiny_hf

    write_tiny_gguf(tmp_path / "tiny.gguf")
    write_gguf(tiny_weights(), tmp_path / "bare.gguf")  # no tokenizer metadata
    write_tiny_hf(tmp_path / "tiny_hf")
    (tmp_path / "latin1.txt").write_bytes("caf\u00e9 au lait ".encode("latin-1") * 50)
    (tmp_path / "short.txt").write_text("the cat sat")
    (tmp_path / "empty.txt").write_text("")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_sweep_is_big_enough():
    assert len(CASES) >= 60


@pytest.mark.parametrize("argv, says", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_input_exits_2_cleanly(sandbox, capsys, argv, says):
    before = _snapshot(sandbox)
    argv = [a.format(d=sandbox) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert lines, err
    assert says.format(d=sandbox) in lines[-1], err
    assert _snapshot(sandbox) == before, "a file was written or changed"


SUBPROCESS = [0, 3, 22, 39, 41, 66, 76, 84]  # a few of every kind, as real processes


@pytest.mark.parametrize("i", SUBPROCESS)
def test_no_traceback_reaches_stderr(sandbox, i):
    argv, says = CASES[i]
    argv = [a.format(d=sandbox) for a in argv]
    r = subprocess.run(
        [sys.executable, "-m", "harmony_ref", *argv],
        capture_output=True,
        text=True,
        cwd=sandbox,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and says.format(d=sandbox) in r.stderr


# --- issue 45: the files users bring (checkpoints, corpora, exports, policies with [quantize],
# figures, runtime profiles, sweep grids, devices). Each case: exit 2, exactly one line under 200
# characters naming the input, and nothing under the directory changed: the sandbox holds
# previous outputs (out.gguf and its manifest, a sweep's folder, a baseline and its kept copy)
# that a case aims at, and they must survive byte for byte.

GRID = 'models = ["llama-3.2-1b"]\npolicies = ["{p}"]\nprofiles = ["harmony-flagship"]\n'
RUNTIME = (ROOT / "harmony_ref" / "device" / "runtimes" / "llama.cpp-cpu.toml").read_text()
FILES_45 = {
    "pol_q4_gptq.toml": 'name = "p"\ndefault = "q4_0"\n[quantize]\nmethod = "gptq"\n',
    "pol_fp16_awq.toml": 'name = "p"\ndefault = "fp16"\n[quantize]\nmethod = "awq"\n',
    "pol_q8_methods.toml": 'name = "p"\ndefault = "int8"\n[quantize.methods]\n"q8_0" = "gptq"\n',
    "pol_pattern_q4.toml": 'name = "p"\ndefault = "int8"\n[layers]\n"*.gate_proj" = "q4_0"\n'
    '[quantize.methods]\n"*.gate_proj" = "awq"\n',
    "pol_nomatch.toml": 'name = "p"\ndefault = "q8_0"\n[layers]\n"*.gate_prj" = "q4_0"\n',
    "grid_q4_gptq.toml": GRID.format(p="{d}/pol_q4_gptq.toml"),
    "grid_dup_prompt.toml": GRID.format(p="int8") + "[scenario]\nprompt_tokens = [64, 64]\n",
    "grid_dup_kv.toml": GRID.format(p="int8") + '[scenario]\nkv_dtype = ["fp16", "fp16"]\n',
    "grid_ok.toml": GRID.format(p="int8"),
    "rt_soc_typo.toml": RUNTIME.replace('soc = "kirin-9000e"', 'soc = "kirin-9000"'),
    "figs_dup.toml": (ROOT / "harmony_ref" / "data" / "fidelity" / "published.toml").read_text(),
    "figs_ctx.toml": (ROOT / "harmony_ref" / "data" / "fidelity" / "published.toml")
    .read_text()
    .replace('id = "xiao24-d9300-llama2-7b-prefill"', 'id = "mine"\ncontext_tokens = 8', 1),
    "corpus.txt": "the cat sat on the mat and then the dog ran in the sun.\n" * 40,
    "out.gguf": "GGUF the user's previous export",
    "out.gguf.manifest.json": '{"the user\'s": "previous manifest"}\n',
    "kept.gguf": "GGUF another previous export",
    "gb.json": BASELINE.read_text(),
    "rec_noprofile.json": _record(**{"config.profile": "nope-phone"}),
}
HF_EDITS = {  # HF directory name -> config.json edit (returns a replacement, or edits in place)
    "hf_list": lambda c: [c],
    "hf_null_hidden": lambda c: c.update(hidden_size=None),
    "hf_heads0": lambda c: (c.update(num_attention_heads=0), c.pop("head_dim", None)),
    "hf_tie_str": lambda c: c.update(tie_word_embeddings="false"),
    "hf_float_hidden": lambda c: c.update(hidden_size=64.7),
    "hf_bos_big": lambda c: c.update(bos_token_id=1_000_000),
    "hf_eos_neg": lambda c: c.update(eos_token_id=-1),
    "hf_maxpos0": lambda c: c.update(max_position_embeddings=0),
    "hf_str_int": lambda c: c.update(intermediate_size="sixty-four"),
    "hf_rope_str": lambda c: c.update(rope_theta="big"),
    "hf_eps_str": lambda c: c.update(rms_norm_eps="tiny"),
    "hf_kv_str": lambda c: c.update(num_key_value_heads="2"),
    "hf_archs_str": lambda c: c.update(architectures="LlamaForCausalLM"),
    "hf_mamba": lambda c: c.update(architectures=["MambaForCausalLM"]),
}


def _gen(model: str, *extra: str) -> list[str]:
    return ["generate", "--model", model, "--prompt", "hi", "--max-new", "2", *extra]


def _export(policy: str, out: str = "{d}/out.gguf", *extra: str) -> list[str]:
    argv = ["export", "--format", "gguf", "--model", "{d}/tiny.gguf", "--policy", policy]
    return [*argv, "--out", out, *extra]


def _check(*extra: str) -> list[str]:
    argv = ["check-runtime", "--model", "{d}/tiny.gguf", "--command", "true {{corpus}}"]
    return [*argv, *extra]


CASES_45 = [  # (argv, the words the one error line must hold)
    # 1. outputs checked before the work; a previous file never lost
    (_export("q8_0", "{d}/kept.gguf"), "kept.gguf.manifest.json: is a directory"),
    (_export("q8_0", "{d}/adir/x.gguf"), "x.gguf.manifest.json"),  # parent has a dir of it
    (_export("{d}/pol_q4_gptq.toml"), "'quantize.method' = 'gptq'"),
    (_export("{d}/pol_nomatch.toml"), "'*.gate_prj', which matches no layer"),
    (_check("--out-dir", "{d}/afile"), "--out-dir {d}/afile: is a file"),
    (["sweep", "--name", "s", "--grid", "{d}/grid_ok.toml", "--out-dir", "{d}/afile"], "afile"),
    (["sweep", "--name", "s", "--grid", "{d}/grid_ok.toml", "--out-dir", "{d}/sw"], "points"),
    (
        [
            "gate",
            "--baseline",
            "{d}/gb.json",
            "--current",
            "{d}/baseline.json",
            "--update-baseline",
        ],
        "gb.prev.json: is a directory",
    ),
    (["export", "--policy", "{d}/pol_fp16_awq.toml", "{d}/out.gguf"], "'awq'"),
    # 2. a method a format cannot take
    (["predict", "--policy", "{d}/pol_q4_gptq.toml"], "the policy has none (default q4_0)"),
    (["predict", "--policy", "{d}/pol_fp16_awq.toml"], "the policy has none (default fp16)"),
    (["predict", "--policy", "{d}/pol_q8_methods.toml"], "'quantize.methods.q8_0' = 'gptq'"),
    (["predict", "--policy", "{d}/pol_pattern_q4.toml"], "its layers are q4_0 (GPTQ/AWQ fit"),
    (["run", "--policy", "{d}/pol_q4_gptq.toml", "--out-dir", "{d}/runs"], "pol_q4_gptq.toml"),
    (
        ["accuracy", "--model", "{d}/tiny.gguf", "--policy", "{d}/pol_fp16_awq.toml"],
        "pol_fp16_awq.toml: field 'quantize.method'",
    ),
    (["sweep", "--name", "s", "--grid", "{d}/grid_q4_gptq.toml"], "quantize.method"),
    # 3. corpora: --chunks beyond the text, context and chunks checked first
    (
        ["accuracy", "--model", "{d}/tiny.gguf", "--corpus", "{d}/corpus.txt", "--context", "16"]
        + ["--chunks", "100000", "--policy", "fp32"],
        "--chunks 100000: corpus {d}/corpus.txt has",
    ),
    (
        _check("--corpus", "{d}/corpus.txt", "--context", "16", "--chunks", "100000")
        + ["--no-cache", "--out-dir", "{d}/runs"],
        "--chunks 100000: corpus {d}/corpus.txt has",
    ),
    (["plan", "--budget-mb", "80", "--context", "0"], "--context 0: must be an even number"),
    (["plan", "--budget-mb", "80", "--context", "7"], "--context 7"),
    (["plan", "--budget-mb", "80", "--chunks", "0"], "--chunks 0: must be >= 1"),
    (["sensitivity", "--model", "{d}/tiny.gguf", "--context", "0"], "--context 0"),
    # 4. checkpoint metadata validated at load, every line naming the file and the field
    (_gen("{d}/hf_list"), "config.json: must be a JSON object, got list"),
    (_gen("{d}/hf_null_hidden"), "field 'hidden_size' = None"),
    (_gen("{d}/hf_heads0"), "field 'num_attention_heads' = 0"),
    (_gen("{d}/hf_tie_str"), "field 'tie_word_embeddings' = 'false': must be true or false"),
    (_gen("{d}/hf_float_hidden"), "field 'hidden_size' = 64.7"),
    (_gen("{d}/hf_bos_big"), "field 'bos_token_id' = 1000000: must be a token id"),
    (_gen("{d}/hf_eos_neg"), "field 'eos_token_id' = -1"),
    (_gen("{d}/hf_maxpos0"), "hf_maxpos0/config.json: field 'max_position_embeddings' = 0"),
    (_gen("{d}/hf_str_int"), "field 'intermediate_size' = 'sixty-four'"),
    (_gen("{d}/hf_rope_str"), "field 'rope_theta' = 'big'"),
    (_gen("{d}/hf_eps_str"), "field 'rms_norm_eps' = 'tiny'"),
    (_gen("{d}/hf_kv_str"), "field 'num_key_value_heads' = '2'"),
    (_gen("{d}/hf_archs_str"), "field 'architectures'"),
    (_gen("{d}/hf_badtok"), "hf_badtok/tokenizer.json: not a tokenizer"),
    (_gen("{d}/hf_badtok2"), "hf_badtok2/tokenizer.json: not a tokenizer"),
    (_gen("{d}/hf_badtokcfg"), "tokenizer_config.json: not valid JSON"),
    (["accuracy", "--model", "{d}/hf_null_hidden", "--policy", "fp32"], "hidden_size"),
    (["tokenize", "--model", "{d}/hf_badtok", "--text", "hi"], "tokenizer.json: not a tokenizer"),
    (["tokenize", "--model", "{d}/hf_mamba", "--text", "hi"], "['MambaForCausalLM']: supported"),
    (["tokenize", "--model", "{d}/hf_heads0", "--text", "hi"], "num_attention_heads"),
    (_gen("{d}/bos_big.gguf"), "tokenizer.ggml.bos_token_id = 1000000"),
    (_gen("{d}/eos_big.gguf"), "tokenizer.ggml.eos_token_id = 99999"),
    (
        ["tokenize", "--model", "{d}/tiny.gguf", "--text", "a\udc80b"],
        "--text 'a\\x80b': not UTF-8 text (byte 0x80 at 1)",
    ),
    (_gen("{d}/tiny.gguf", "--chat").__add__(["--prompt", "\udcff"]), "not UTF-8 text (byte 0xff"),
    # predict reads a GGUF as a checkpoint (issue 44): its spec from the file, the default
    # 2048-token context refused against the file's own 128 positions
    (["predict", "--model", "{d}/tiny.gguf"], "tiny.gguf's max_positions = 128"),
    (["predict", "--model", "{d}/tiny.gguf", "--policy", "{d}/tiny.gguf"], "a GGUF file"),
    (["predict", "--profile", "{d}/latin1.toml"], "latin1.toml: not UTF-8 text"),
    # 5. combinations a command cannot honour, duplicates, values that meant something else
    (
        ["accuracy", "--model", "{d}/tiny.gguf", "--policy", "as-stored", "--policy", "as-stored"],
        "--policy as-stored: given twice",
    ),
    (["fidelity", "--sets", "host", "--figures", "{d}/figs_dup.toml"], "applies to --sets phones"),
    (["fidelity", "--runtime", "llama.cpp-cpu"], "--runtime llama.cpp-cpu: applies to --records"),
    (
        ["fidelity", "--sets", "records", "--records", "{d}/rec_noprofile.json"],
        "rec_noprofile.json: field 'config.profile' = 'nope-phone': not a profile file",
    ),
    (["fidelity", "--sets", "phones", "--figures", "{d}/figs_dup.toml"], "a shipped figure's id"),
    (
        ["fidelity", "--sets", "phones", "--figures", "{d}/figs_ctx.toml"],
        "figs_ctx.toml: figure 'mine'",
    ),
    (
        ["calibrate", "--set", "host", "--runtime", "llama.cpp-cpu", "--out", "{d}/o.toml"]
        + ["--figures", "{d}/figs_dup.toml"],
        "applies to --set phones, not host",
    ),
    (["calibrate", "--figures", "{d}/figs_dup.toml", "--out", "{d}/o.toml"], "--figures"),
    (["calibrate", "--params", "matmul", "--out", "{d}/o.toml"], "--params matmul"),
    (["predict", "--runtime", "{d}/rt_soc_typo.toml"], "'kirin-9000': not a shipped SoC"),
    (["predict", "--runtime-threads", "0"], "--runtime-threads 0: must be >= 1"),
    (["predict", "--runtime-threads", "-3"], "--runtime-threads -3"),
    (["plan", "--budget-mb", "80", "--formats", "q4_0,q4_0"], "q4_0 is given twice"),
    (["plan", "--budget-mb", "80", "--formats", "q8_0,q4_1,q8_0"], "q8_0 is given twice"),
    (["plan", "--budget-mb", "80", "--methods", "rtn,gptq,rtn"], "rtn is given twice"),
    (["sweep", "--name", "s", "--grid", "{d}/grid_dup_prompt.toml"], "prompt_tokens' = 64"),
    (["sweep", "--name", "s", "--grid", "{d}/grid_dup_kv.toml"], "kv_dtype' = 'fp16'"),
    (["devices", "--timeout", "0"], "--timeout 0.0"),
    (["devices", "--timeout", "nan"], "--timeout nan"),
    (["devices", "--timeout", "-5"], "--timeout -5.0"),
    (["devices", "--hdc", "{d}/nohdc"], "--hdc {d}/nohdc: no such file"),
    (["devices", "--transport", "adb", "--adb", "{d}/noadb"], "--adb {d}/noadb"),
    (["devices", "--hdc", "h\x00dc"], "--hdc 'h\\x00dc': holds a null byte"),
    # usage errors argparse finds: one line naming the command, not its usage synopsis first
    (["thermal", "--every-s", "0"], "thermal: error: argument --every-s: '0': must be a finite"),
    (["pick", "--sweep", "s", "--max-kld", "nan"], "argument --max-kld: 'nan'"),
    (["sweep", "--name", "s", "--timeout-s", "0"], "argument --timeout-s: '0'"),
    (["bisect", "--parser", "bogus"], "bisect: error: argument --parser/--format: invalid choice"),
    (["gate", "--baseline"], "gate: error: argument --baseline: expected one argument"),
    (["predict", "--bogus", "3"], "predict: error: unrecognized arguments: --bogus 3"),
]


@pytest.fixture
def sandbox_45(sandbox):
    import json as _json
    import shutil
    from dataclasses import replace

    from harmony_ref.checkpoint.gguf import write_gguf
    from tests.fixtures.decoder.tiny import tiny_vocab, tiny_weights

    d = sandbox
    for name, text in FILES_45.items():
        (d / name).write_text(text.replace("{d}", str(d)))
    (d / "kept.gguf.manifest.json").mkdir()
    (d / "adir" / "x.gguf.manifest.json").mkdir()
    (d / "gb.prev.json").mkdir()
    (d / "sw" / "s" / "points.parquet").mkdir(parents=True)
    (d / "latin1.toml").write_bytes('name = "caf\u00e9"\n'.encode("latin-1"))
    for name, edit in HF_EDITS.items():
        shutil.copytree(d / "tiny_hf", d / name)
        cfg = _json.loads((d / name / "config.json").read_text())
        new = edit(cfg)
        (d / name / "config.json").write_text(_json.dumps(new if isinstance(new, list) else cfg))
    for name, text in (("hf_badtok", "{not json"), ("hf_badtok2", '{"model": 3}')):
        shutil.copytree(d / "tiny_hf", d / name)
        (d / name / "tokenizer.json").write_text(text)
    shutil.copytree(d / "tiny_hf", d / "hf_badtokcfg")
    (d / "hf_badtokcfg" / "tokenizer_config.json").write_text("{oops")
    tokens, types, merges = tiny_vocab()
    w = tiny_weights()
    for name, field, value in (("bos_big", "bos_id", 1_000_000), ("eos_big", "eos_id", 99_999)):
        bad = replace(w, config=replace(w.config, **{field: value}))
        write_gguf(bad, d / f"{name}.gguf", tokens=tokens, token_types=types, merges=merges)
    return d


def test_the_issue_45_sweep_is_big_enough():
    assert len(CASES_45) >= 60


@pytest.mark.parametrize("argv, says", CASES_45, ids=[" ".join(a)[:70] for a, _ in CASES_45])
def test_issue_45_bad_input_is_one_line_exit_2_nothing_changed(sandbox_45, capsys, argv, says):
    d = sandbox_45
    before = _snapshot(d)
    dirs = sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_dir())
    assert main([a.format(d=d) for a in argv]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    # under 200 characters as a user with a short path sees it (the sandbox's path is long)
    assert "Traceback" not in err[0] and len(err[0].replace(str(d), "d")) < 200, err[0]
    assert says.format(d=d) in err[0], err[0]
    assert _snapshot(d) == before, "a file was written, changed or lost"
    assert sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_dir()) == dirs


def test_non_utf8_bytes_in_a_real_argv_are_one_line(sandbox_45):
    # the installed entry point gets raw bytes from the shell: Python hands them over as lone
    # surrogates, which reached the tokenizer as a TypeError (issue 45 item 4)
    r = subprocess.run(
        [sys.executable, "-m", "harmony_ref", "tokenize", "--model", "tiny.gguf", "--text"]
        + [b"caf\xe9"],
        capture_output=True,
        cwd=sandbox_45,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    err = r.stderr.decode("utf-8", "replace").strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1, err
    assert "--text 'caf\\xe9': not UTF-8 text (byte 0xe9 at 3)" in err, err
