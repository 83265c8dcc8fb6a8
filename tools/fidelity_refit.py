"""Rebuild everything the committed fidelity measurements determine, in order:

    python tools/fidelity_refit.py            # no timing: reads the fixtures only

1. the SoC profile of the fixtures' machine (harmony_ref/device/profiles/xeon-2core-kvm.toml) from
   the microbenchmarks in the host sessions (calibrate/host_runs.py host_soc_toml);
2. harmony-ref-host on the host set's fit runs, llama.cpp-host on the llama.cpp set's fit runs,
   and each phone runtime on its published calibration figures (`harmony-ref calibrate --set`);
3. the plot results/figures/fidelity.png and the README tables (`harmony-ref fidelity --markdown`,
   printed for pasting).
tests/calibrate/test_fidelity_sets.py checks that the shipped files are what steps 1-2 give.
"""

from __future__ import annotations

from pathlib import Path

from harmony_ref._io import write_text_atomic
from harmony_ref.calibrate.host_runs import host_soc_toml, load_host_manifest
from harmony_ref.cli import main

ROOT = Path(__file__).resolve().parents[1]
RUNTIMES = ROOT / "harmony_ref" / "device" / "runtimes"
PHONE_RUNTIMES = (
    "llama.cpp-cpu",
    "executorch-xnnpack",
    "qnn-npu",
    "mlc-gpu",
    "litert-lm-cpu",
    "litert-lm-gpu",
)


def refit() -> None:
    manifest = load_host_manifest()
    write_text_atomic(
        ROOT / "harmony_ref" / "device" / "profiles" / f"{manifest.profile}.toml",
        host_soc_toml(manifest),
    )
    from harmony_ref.device import runtime, soc

    soc._shipped_profile.cache_clear()
    for set_name, rt in [("host", "harmony-ref-host"), ("llama.cpp", "llama.cpp-host")] + [
        ("phones", r) for r in PHONE_RUNTIMES
    ]:
        assert (
            main(
                [
                    "calibrate",
                    "--set",
                    set_name,
                    "--runtime",
                    rt,
                    "--out",
                    str(RUNTIMES / f"{rt}.toml"),
                ]
            )
            == 0
        )
        runtime._shipped_runtime.cache_clear()
    assert main(["fidelity", "--plot", str(ROOT / "results" / "figures" / "fidelity.png")]) == 0
    assert main(["fidelity", "--markdown"]) == 0


if __name__ == "__main__":
    refit()
