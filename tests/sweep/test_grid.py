"""The sweep grid: names resolved before any work (errors name the file or flag, the field and the
value), one point per combination, keys stable across runs and changed by what changes a result,
invalid combinations kept as points that carry their error."""

from __future__ import annotations

import pytest

from harmony_ref.sweep.grid import Grid, grid_from_toml, split_list


def small(**kw):
    base = dict(
        models=("llama-3.2-1b", "qwen2.5-0.5b"),
        policies=("int4-g128", "int8"),
        profiles=("harmony-flagship",),
    )
    return Grid(**{**base, **kw})


def test_points_are_the_cross_product_with_stable_distinct_keys():
    g = small(
        scenario={
            "prompt_tokens": (128, 512),
            "new_tokens": (64,),
            "context_tokens": (2048,),
            "batch": (1,),
            "kv_dtype": ("fp16", "int8"),
        }
    )
    pts = g.points()
    assert len(pts) == g.size == 2 * 2 * 1 * 2 * 2
    assert len({p.key for p in pts}) == len(pts)
    assert [p.key for p in g.points()] == [p.key for p in pts]  # same grid, same keys
    assert not any(p.error for p in pts)
    # kv_dtype reaches the config's dict form (int8 is not the default)
    assert {p.config.get("kv_dtype", "fp16") for p in pts} == {"fp16", "int8"}


def test_key_changes_with_parts_and_with_a_policy_files_contents(tmp_path):
    a = small().points()[0]
    b = small(parts=("predicted", "thermal")).points()[0]
    assert a.key != b.key and a.config == b.config
    pol = tmp_path / "mine.toml"
    pol.write_text('name = "mine"\ndefault = "int8"\n')
    k1 = small(policies=(str(pol),)).points()[0].key
    pol.write_text('name = "mine"\ndefault = "int4-g32"\n')
    k2 = small(policies=(str(pol),)).points()[0].key
    assert k1 != k2


def test_code_version_is_in_the_key_but_not_the_config_key(monkeypatch):
    from harmony_ref.sweep import grid as grid_mod

    before = small().points()[0]
    monkeypatch.setattr(grid_mod, "code_version", lambda: "another-version")
    after = small().points()[0]
    assert before.config_key == after.config_key and before.key != after.key


def test_an_invalid_combination_is_a_point_with_its_error():
    g = small(
        scenario={
            "prompt_tokens": (512, 2000),
            "new_tokens": (128,),
            "context_tokens": (2048,),
            "batch": (1,),
            "kv_dtype": ("fp16",),
        }
    )
    bad = [p for p in g.points() if p.error]
    assert len(bad) == 4 and all("exceeds context_tokens = 2048" in p.error for p in bad)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(models=("nope",)), "--models 'nope': unknown model 'nope'"),
        (dict(policies=("int3",)), "--policies 'int3'"),
        (dict(profiles=("harmony-moon",)), "--profiles 'harmony-moon'"),
        (dict(parts=("predicted", "speed")), "--parts 'speed': not a part"),
        (dict(models=()), "--models []: must list at least one"),
        (dict(policies=("int8", "int8")), "lists a value twice"),
        (dict(backend="command"), "--backend 'command'"),
        (
            dict(
                scenario={
                    "prompt_tokens": (0,),
                    "new_tokens": (1,),
                    "context_tokens": (8,),
                    "batch": (1,),
                    "kv_dtype": ("fp16",),
                }
            ),
            "--prompt 0: must be an integer >= 1",
        ),
        (
            dict(
                scenario={
                    "prompt_tokens": (1,),
                    "new_tokens": (1,),
                    "context_tokens": (8,),
                    "batch": (1,),
                    "kv_dtype": ("fp8",),
                }
            ),
            "--kv-dtype 'fp8'",
        ),
    ],
)
def test_bad_flags_name_the_flag_and_value(kw, message):
    with pytest.raises(ValueError, match=None) as e:
        small(**kw)
    assert message in str(e.value)


def test_toml_grid_and_its_errors(tmp_path):
    f = tmp_path / "grid.toml"
    f.write_text(
        'models = ["qwen2.5-0.5b"]\npolicies = ["int8", "int4-g32"]\n'
        'profiles = ["harmony-lowend"]\nparts = ["predicted", "coldstart"]\n'
        '[scenario]\nprompt_tokens = [128, 256]\nkv_dtype = "int8"\n'
    )
    g = grid_from_toml(f)
    assert g.size == 4 and g.parts == ("predicted", "coldstart")
    assert g.scenario["kv_dtype"] == ("int8",)
    f.write_text('models = ["qwen2.5-0.5b"]\npolicies = ["int8"]\nprofiles = ["x"]\n')
    with pytest.raises(ValueError, match=rf"{f}: field 'profiles' = 'x'"):
        grid_from_toml(f)
    f.write_text(
        'models = ["qwen2.5-0.5b"]\npolicies = ["int8"]\nprofiles = ["harmony-lowend"]'
        "\n[scenario]\nprompt = [1]\n"
    )
    with pytest.raises(ValueError, match=r"field 'scenario.prompt' .* not a scenario axis"):
        grid_from_toml(f)
    f.write_text('models = ["qwen2.5-0.5b"]\npolicies = ["int8"]\n')
    with pytest.raises(ValueError, match=r"field 'profiles' = None: missing"):
        grid_from_toml(f)
    f.write_text("models = [")
    with pytest.raises(ValueError, match="not valid TOML"):
        grid_from_toml(f)


def test_split_list():
    assert split_list("a, b,", "--x") == ("a", "b")
    assert split_list("1,2", "--prompt", int) == (1, 2)
    with pytest.raises(ValueError, match="--prompt '1,x': must be comma-separated integers"):
        split_list("1,x", "--prompt", int)
    with pytest.raises(ValueError, match="--x ''"):
        split_list("", "--x")


def test_a_checkpoint_is_a_model_with_its_spec_from_the_file(tmp_path):
    from tests.fixtures.decoder.tiny import tiny_config, write_tiny_gguf

    path = tmp_path / "g.gguf"
    write_tiny_gguf(path, tiny_config("gemma3", max_positions=4096))
    # int4-g128 does not fit the tiny model (K = 96): the grid would refuse it up front
    points = small(models=(str(path),), policies=("int4-g32", "int8")).points()
    assert points and not any(p.error for p in points)
    config = points[0].config
    assert config["model"] == str(path)
    assert (
        config["model_spec"]["activation"] == "gelu_tanh" and config["model_spec"]["n_layers"] == 3
    )


# --- the runtime axis -------------------------------------------------------------------------


def test_runtimes_are_an_axis_and_reach_each_points_config():
    g = small(
        profiles=("snapdragon-8-gen-3", "dimensity-9300"),
        runtimes=("llama.cpp-cpu", "executorch-xnnpack"),
    )
    pts = g.points()
    assert len(pts) == g.size == 2 * 2 * 2 * 2
    assert {(p.config["profile"], p.config["runtime"]) for p in pts} == {
        (s, r)
        for s in ("snapdragon-8-gen-3", "dimensity-9300")
        for r in ("llama.cpp-cpu", "executorch-xnnpack")
    }
    assert not any(p.error for p in pts) and len({p.key for p in pts}) == len(pts)
    assert g.to_dict()["runtimes"] == ["llama.cpp-cpu", "executorch-xnnpack"]
    # without the axis each profile runs its own runtime and the config does not name one
    assert all("runtime" not in p.config for p in small().points())
    assert "runtimes" not in small().to_dict()


def test_a_pair_whose_unit_the_soc_lacks_is_a_failed_point_never_predicted():
    g = small(profiles=("snapdragon-8-gen-3", "dimensity-9300"), runtimes=("qnn-npu",))
    by_phone = {p.config["profile"]: p for p in g.points()}
    assert by_phone["snapdragon-8-gen-3"].error == ""
    err = by_phone["dimensity-9300"].error
    assert err.startswith("bad config: runtime 'qnn-npu' runs on a Qualcomm Hexagon NPU only")
    assert "dimensity-9300 has a MediaTek APU" in err
    assert by_phone["dimensity-9300"].config["runtime"] == "qnn-npu"


@pytest.mark.parametrize(
    "runtimes, message",
    [
        (
            ("qnn-npu",),
            "--runtimes 'qnn-npu': runs on none of the grid's profiles: runtime "
            "'qnn-npu' runs on a Qualcomm Hexagon NPU only; dimensity-9300 has a MediaTek APU",
        ),
        (("llama.cpp-cpu", "llama.cpp-cpu"), "lists a value twice"),
        (("no-such-runtime",), "--runtimes 'no-such-runtime': unknown runtime profile"),
    ],
)
def test_bad_runtimes_are_refused_before_any_work(runtimes, message):
    with pytest.raises(ValueError, match=message.replace("(", "\\(").replace(")", "\\)")):
        small(profiles=("dimensity-9300",), runtimes=runtimes)


def test_runtimes_in_a_grid_file_and_as_a_flag(tmp_path, capsys):

    path = tmp_path / "g.toml"
    path.write_text(
        'models = ["llama-3.2-1b"]\npolicies = ["int4-g32"]\nprofiles = ["kirin-9000e"]\n'
        'runtimes = ["llama.cpp-cpu", "mslite-npu"]\n'
    )
    assert grid_from_toml(path).runtimes == ("llama.cpp-cpu", "mslite-npu")
    path.write_text(
        path.read_text().replace('"mslite-npu"', '"qnn-npu"').replace('["llama.cpp-cpu", ', "[")
    )
    with pytest.raises(ValueError, match=f"{path}: field 'runtimes' = 'qnn-npu': runs on none"):
        grid_from_toml(path)
    # mslite-npu on the Snapdragon: a failed point (exit 1), the rest run
    df = _sweep_rows(tmp_path, capsys, "snapdragon-8-gen-3,kirin-9000e", "mslite-npu,llama.cpp-cpu")
    df = df.set_index(["profile", "runtime"])
    assert df.loc[("snapdragon-8-gen-3", "mslite-npu"), "status"] == "failed"
    assert "Hexagon NPU" in df.loc[("snapdragon-8-gen-3", "mslite-npu"), "error"]
    ok = df[df["status"] == "ok"]
    assert sorted(ok.index) == [
        ("kirin-9000e", "llama.cpp-cpu"),
        ("kirin-9000e", "mslite-npu"),
        ("snapdragon-8-gen-3", "llama.cpp-cpu"),
    ]
    # the NPU prefills faster than the CPU on the same Kirin: the runtime reached the model
    assert (
        ok.loc[("kirin-9000e", "mslite-npu"), "prefill_tokens_per_s"]
        > 5 * ok.loc[("kirin-9000e", "llama.cpp-cpu"), "prefill_tokens_per_s"]
    )


def test_rows_name_the_profiles_own_runtime_without_the_axis(tmp_path, capsys):
    df = _sweep_rows(tmp_path, capsys, "dimensity-9300,harmony-flagship").set_index("profile")
    assert df.loc["dimensity-9300", "runtime"] == "llama.cpp-cpu"  # its default_runtime
    assert df.loc["harmony-flagship", "runtime"] == ""  # names none: its own fields


def _sweep_rows(tmp_path, capsys, profiles: str, runtimes: str | None = None):
    """The rows of an in-process sweep of llama-3.2-1b int4-g32 over `profiles` (and
    `runtimes`); exit 1 when some point failed, else 0."""
    from harmony_ref.cli import main
    from harmony_ref.sweep.store import SweepStore

    argv = ["sweep", "--name", "s", "--out-dir", str(tmp_path), "--models", "llama-3.2-1b"]
    argv += ["--policies", "int4-g32", "--profiles", profiles, "--workers", "0", "--json"]
    argv += ["--runtimes", runtimes] if runtimes else []
    rc = main(argv)
    capsys.readouterr()
    df = SweepStore("s", tmp_path).read()
    assert rc == (1 if (df["status"] == "failed").any() else 0)
    return df
