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
}
CAT = f"{shlex.quote(sys.executable)} -c 'import sys; sys.stdout.write(open(sys.argv[1]).read())'"

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
    (["measure", "--command", "true", "--format", "mslite", "--profile", "nope", "--model",
      "llama-3.2-3b"], "nope"),
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
    (["measure", "--command", "true", "--format", "mslite", "--profile", "harmony-flagship"],
     "--model"),
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
    (["gate", "--baseline", "{d}/truncated.json", "--current", "{d}/baseline.json"],
     "truncated.json"),
    (["gate", "--baseline", "{d}/nan_ttft.json", "--current", "{d}/baseline.json"], "ttft_ms"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/nan_ttft.json"], "nan"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/neg_ttft.json"], "-1.0"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/inf_tps.json"],
     "decode_tokens_per_s"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/pct_200.json"],
     "launch_overhead_pct"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/nan_sample.json"],
     "host_gemv_ms.samples"),
    (["gate", "--baseline", "{d}/schema99.json", "--current", "{d}/baseline.json"],
     "schema_version"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/list.json"], "list.json"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/no_config.json"], "config"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/kind_fuzzy.json"], "kind"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/dir_sideways.json"],
     "direction"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/no_prov.json"],
     "provenance.cpu_model"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/other_model.json"],
     "llama-3.2-1b"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/fewer_metrics.json"],
     "ttft_ms"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "latest", "--out-dir",
      "{d}/empty_runs"], "no run record"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/nan_ttft.json",
      "--update-baseline"], "ttft_ms"),
    (["gate", "--baseline", "{d}/new_base.json", "--current", "{d}/neg_ttft.json",
      "--update-baseline"], "ttft_ms"),
    # tolerances
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/baseline.json",
      "--tolerances", "{d}/nope.toml"], "nope.toml"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/baseline.json",
      "--tolerances", "{d}/tol_bad.toml"], "defaults.exact_pct"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/baseline.json",
      "--tolerances", "{d}/tol_unknown.toml"], "exactpct"),
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/baseline.json",
      "--tolerances", "{d}/tol_section.toml"], "limits"),
    # artifacts
    (["verify", "{d}/missing.safetensors"], "missing.safetensors"),
    (["accuracy", "--model", "all-minilm-l6", "--artifact", "{d}/garbage.safetensors"],
     "garbage.safetensors"),
    # traces
    (["serve", "--trace", "{d}/missing.csv"], "missing.csv"),
    (["serve", "--trace", "{d}/trace_arrival.csv"], "line 2"),
    (["serve", "--trace", "{d}/trace_order.csv"], "non-decreasing"),
    (["serve", "--trace", "{d}/trace_cols.csv"], "trace_cols.csv"),
    (["serve", "--trace", "{d}/trace_empty.csv"], "no requests"),
    (["serve", "--trace", "{d}/trace_tokens.csv"], "prompt_tokens"),
    (["serve", "--trace", "{d}/trace_nan.csv"], "arrival_s"),
    # device outputs
    (["measure", "--command", CAT + " {d}/bench_neg.json", "--format", "llama-bench"],
     "decode_tokens_per_s"),
    (["measure", "--command", CAT + " {d}/bench_zero.json", "--format", "llama-bench"],
     "decode_tokens_per_s"),
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
    (["gate", "--baseline", "{d}/baseline.json", "--current", "{d}/baseline.json", "--summary",
      "{d}/adir"], "adir"),
    # command-line names and combinations
    (["gat"], "did you mean 'gate'"),
    (["run", "--backend", "command", "--out-dir", "{d}/runs"], "--command"),
    (["run", "--backend", "command", "--command", "true", "--command-format", "mslit",
      "--out-dir", "{d}/runs"], "did you mean 'mslite'"),
    (["run", "--skip", "bogus", "--out-dir", "{d}/runs"], "bogus"),
    (["calibrate", "--repeats", "0", "--out", "{d}/h.toml"], "--repeats"),
]


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "adir").mkdir()
    (tmp_path / "empty_runs").mkdir()
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
    r = subprocess.run([sys.executable, "-m", "harmony_ref", *argv], capture_output=True,
                       text=True, cwd=sandbox, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and says.format(d=sandbox) in r.stderr
