"""The profiles calibration writes, as TOML that loads back through the device profile schema
(device/soc.py): a host profile from a fit of this CPU (`host_profile_toml`), its
[calibration] section with the held-out error (`calibration_toml`), and a phone profile whose
efficiencies and launch overhead were fitted to measured phase times (`profile_with_efficiencies`).
Every number in them says whether it was measured, fitted or is an assumption.
"""

from __future__ import annotations

import dataclasses

from harmony_ref._schema import section_class
from harmony_ref._toml import read_toml
from harmony_ref.calibrate.fit import BASIC_CLASSES, HostFit, PhaseFit
from harmony_ref.device.soc import (
    HOST_WEIGHT_ONLY_COMPUTE,
    PROFILES_FOLDER,
    DeviceProfile,
    profile_from_dict,
)
from harmony_ref.units import GB, GIGA, KIB, MEGA, US_PER_S

THERMAL_TEMPLATE = "harmony-midrange"  # the host's thermal behaviour is not calibrated: borrowed


def nominal_host_peaks(freq_mhz: float, cores: int, flags: set[str]) -> dict[str, float]:
    """Nominal SIMD peaks of this CPU (ops/s). Assumption: 2 FMA pipes per core; fp32 lanes from
    the widest vector ISA (AVX-512: 16, AVX2: 8, else 4); int8 dot products (VNNI) do 4 MACs per
    32-bit lane (else 2, via pmaddubsw); int4 runs at the int8 rate (nibbles unpacked to int8)."""
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    hz = freq_mhz * MEGA * cores
    fp32 = 2 * 2 * lanes * hz  # 2 pipes x FMA (2 ops) x lanes
    int8 = 2 * 2 * lanes * (4 if ("avx512_vnni" in flags or "avx_vnni" in flags) else 2) * hz
    return {"fp16": fp32, "int8": int8, "int4": int8, "vector": fp32}


def toml_value(v, digits: int | None = None) -> str:
    """One TOML value as every profile calibration writes spells it: a float by its repr (with
    `digits`, rounded to that many significant digits first), an int, a bool, a list, a string
    quoted and escaped."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(float(f"{v:.{digits}g}")) if digits else repr(float(v))
    if isinstance(v, int):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x, digits) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def toml_table(name: str, rows: list[tuple[str, object, str]], schema=DeviceProfile) -> str:
    """One section of a profile: `[name]` (none for the top level; "[cpu.clusters]" for an item
    of an array of tables) and its rows (key, value, comment), in the order given. Every key
    must be a field of the section's dataclass in `schema` (device/soc.py's DeviceProfile,
    or a runtime profile's RuntimeProfile): a field the loader would refuse is never written."""
    cls = section_class(schema, name.strip("[]"))
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    lines = [f"[{name}]"] if name else []
    for key, value, comment in rows:
        if key not in known:
            raise ValueError(
                f"[{name or 'top level'}] {key} = {value!r}: not a field of {cls.__name__} "
                f"({sorted(known)})"
            )
        lines.append(f"{key} = {toml_value(value)}" + (f"  # {comment}" if comment else ""))
    return "\n".join(lines)


def host_profile_toml(
    f: HostFit,
    stream_gbps: float,
    nominal: dict[str, float],
    onchip_bytes: int,
    ram_bytes: float,
    description: str,
    name: str = "host",
) -> str:
    """A device profile (harmony_ref.device.soc schema) for this host from a fit.

    The cost model multiplies a class's peak by `compute_efficiency`; the fit gives the products
    (achieved rates). compute_efficiency is the INT4 matmul's achieved / nominal peak, and each
    class's peak field is its achieved rate / compute_efficiency, so peak x efficiency = fitted."""
    ce = min(1.0, f.rates["int4"] / nominal["int4"])
    eff = {c: f.rates[c] / nominal[c] for c in BASIC_CLASSES}
    bw = f.bandwidth_bytes_per_s
    dram = max(stream_gbps * GB, bw)
    thermal = read_toml("profile", PROFILES_FOLDER, THERMAL_TEMPLATE)[0]["thermal"]
    fitted = lambda c: "fitted" if c in f.fitted else "NOT fitted (seed)"  # noqa: E731
    head = "\n".join(
        [
            f"# Host profile written by `harmony-ref calibrate`: {description}",
            "# Fitted by NNLS per regime on relative error (harmony_ref/calibrate/fit.py); every number",
            "# says whether it was measured, fitted or is an assumption.",
            toml_table(
                "",
                [
                    ("name", name, ""),
                    ("description", description, ""),
                    (
                        "soc",
                        "this host CPU (no NPU: every matmul runs at the CPU rate of its dtype)",
                        "",
                    ),
                ],
            ),
        ]
    )
    compute = toml_table(
        "compute",
        [
            ("cube_fp16_tops", 0.0, "no NPU on the host"),
            ("cube_int8_tops", 0.0, "no NPU on the host"),
            ("cube_int4_tops", 0.0, "no NPU on the host"),
            (
                "vector_fp16_gflops",
                f.rates["vector"] / ce / GIGA,
                f"{fitted('vector')}: achieved {f.rates['vector'] / GIGA:.3g} GFLOP/s / compute_efficiency",
            ),
            (
                "cpu_fp16_gflops",
                f.rates["fp16"] / ce / GIGA,
                f"{fitted('fp16')}: achieved {f.rates['fp16'] / GIGA:.3g} (float32 NumPy) / compute_efficiency; "
                f"efficiency vs nominal {eff['fp16']:.2f}",
            ),
            (
                "cpu_int8_gops",
                f.rates["int8"] / ce / GIGA,
                f"{fitted('int8')}: achieved {f.rates['int8'] / GIGA:.3g} / compute_efficiency; efficiency vs nominal {eff['int8']:.2f}",
            ),
            (
                "cpu_int4_gops",
                nominal["int4"] / GIGA,
                "assumption: nominal SIMD peak (nominal_host_peaks)",
            ),
            (
                "compute_efficiency",
                ce,
                f"{fitted('int4')}: achieved INT4 {f.rates['int4'] / GIGA:.3g} GOP/s / nominal",
            ),
            (
                "weight_only_compute",
                HOST_WEIGHT_ONLY_COMPUTE,
                "our kernels (matmul_w8/w4) quantize activations to int8 per 32-block: a weight-only "
                "matmul computes in its weight dtype, as W8A8 does",
            ),
        ],
    )
    memory = toml_table(
        "memory",
        [
            ("dram_type", "host DRAM", ""),
            (
                "dram_bandwidth_gbps",
                dram / GB,
                "measured: single-thread streaming read of 64 MiB"
                + (
                    ""
                    if dram == stream_gbps * GB
                    else " (raised to the fitted bandwidth, which exceeded it)"
                ),
            ),
            (
                "memory_efficiency",
                min(1.0, bw / dram),
                f"{fitted('bandwidth')}: achieved {bw / GB:.3g} GB/s / dram_bandwidth",
            ),
            ("onchip_buffer_kib", onchip_bytes / KIB, "measured: L2 size of cpu0 (sysfs)"),
            ("ram_gb", ram_bytes / GB, "measured: psutil total memory"),
            ("app_memory_share", 0.5, "assumption"),
            (
                "runtime_workspace_mb",
                0.0,
                "assumption: NumPy/Numba scratch is counted in the measured RSS",
            ),
        ],
    )
    runtime = toml_table(
        "runtime",
        [
            ("launch_overhead_us", f.launch_s * US_PER_S, f"{fitted('launch')}: per kernel call"),
            ("storage_read_gbps", 1.0, "assumption: not calibrated"),
            ("npu_init_ms", 0.0, "no NPU"),
            ("graph_parse_ms_per_mb", 0.0, "assumption: no graph compile on the host"),
        ],
    )
    thermal_t = toml_table("thermal", [(k, v, "") for k, v in thermal.items()])
    return (
        "\n\n".join(
            [
                head,
                compute,
                memory,
                runtime,
                f"# not calibrated: copied from {THERMAL_TEMPLATE}\n" + thermal_t,
            ]
        )
        + "\n"
    )


def calibration_toml(result) -> str:
    """The profile's [calibration] section (harmony_ref.device.soc.CalibrationInfo): the
    held-out error of the model this profile is, so a SimulatedDevice on it can report it."""
    import datetime

    rows = [
        (
            "held_out_per_op_mape_pct",
            float(result.per_op_mape_pct),
            "measured: held-out microbenchmark ops",
        ),
        ("n_fit", sum(not o.holdout for o in result.ops), "ops fitted on"),
        ("n_held_out", sum(o.holdout for o in result.ops), "ops held out"),
        (
            "fitted_at",
            datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "",
        ),
    ]
    e2e = result.e2e_mape_pct
    if e2e is not None:
        n = len({r["workload"] for r in result.e2e if r["metric"] == "e2e_ms" and not r["fused"]})
        rows += [
            ("held_out_e2e_mape_pct", float(e2e), "measured: held-out whole-model runs, unfused"),
            ("n_held_out_e2e", n, "whole-model runs scored"),
        ]
    return "# the model's error on host measurements it was not fitted on\n" + toml_table(
        "calibration", rows
    )


def profile_with_efficiencies(
    base: str, f: PhaseFit, name: str, description: str
) -> tuple[str, list[str]]:
    """The TOML of the base profile (a shipped name or a path, as `load_profile` takes it) with the
    three fitted numbers replaced, and notes on any fitted efficiency above 1 (measurements faster
    than the profile's peak: implausible, capped at 1)."""
    data, source = read_toml("profile", PROFILES_FOLDER, base)
    profile = profile_from_dict(data, source)  # the same checks load_profile makes
    notes = []
    ce, me = f.compute_efficiency, f.memory_efficiency
    for label, v in (("compute_efficiency", ce), ("memory_efficiency", me)):
        if v > 1.0:
            notes.append(
                f"implausible: fitted {label} = {v:.3f} > 1 (faster than {profile.name}'s peak); capped at 1"
            )
    fitted = {
        ("compute", "compute_efficiency"): min(ce, 1.0),
        ("memory", "memory_efficiency"): min(me, 1.0),
        ("runtime", "launch_overhead_us"): f.launch_s * US_PER_S,
    }
    data["name"], data["description"] = name, description
    head = [
        f"# Profile written by `harmony-ref calibrate --backend command` from {profile.name}: the three",
        "# numbers marked `fitted` come from measured phase times; the rest is the base profile's.",
    ]
    head.append(toml_table("", [(k, v, "") for k, v in data.items() if not isinstance(v, dict)]))
    tables = []
    for sec, table in data.items():
        if isinstance(table, dict):
            # arrays of tables ([[cpu.clusters]]) follow their section's plain keys
            arrays = {
                k: v
                for k, v in table.items()
                if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)
            }
            text = toml_table(
                sec,
                [
                    (k, fitted.get((sec, k), v), "fitted" if (sec, k) in fitted else "")
                    for k, v in table.items()
                    if k not in arrays
                ],
            )
            for k, items in arrays.items():
                text += "".join(
                    "\n\n" + toml_table(f"[{sec}.{k}]", [(kk, vv, "") for kk, vv in item.items()])
                    for item in items
                )
            tables.append(text)
    return "\n".join(head) + "\n\n" + "\n\n".join(tables) + "\n", notes
