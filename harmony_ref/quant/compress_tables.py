"""The policy's [prune], [activations] and [quantize] tables read into their specs (quant/compress.py
holds the specs, the keys and what each key means): every bad key or value raises one
ValueError naming the file, the field and the value, before anything runs.

    spec = prune_from_dict(policy["prune"], "policy.toml")    # -> PruneSpec
"""

from __future__ import annotations

from harmony_ref.quant.compress import (
    ACTIVATION_KEYS,
    BLOCK_KEYS,
    CALIBRATIONS,
    DISTILL_PARAMS,
    GRANULARITIES,
    HEAD_UNITS,
    MAX_BLOCKS,
    MAX_DISTILL_EPOCHS,
    MAX_SAMPLE_TOKENS,
    MAX_SAMPLES,
    METHODS,
    PRUNE_KEYS,
    PRUNE_SAMPLE_KEYS,
    PRUNE_SCORES,
    QUANTIZE_KEYS,
    ActivationSpec,
    PruneSpec,
    QuantizeSpec,
)


def quantize_from_dict(data, source: str) -> QuantizeSpec:
    where = _table_where(data, source, "quantize", QUANTIZE_KEYS)
    d = QuantizeSpec()
    method = _choice(data.get("method", d.method), f"{where}.method'", METHODS)
    table = data.get("methods", {})
    if not isinstance(table, dict):
        raise ValueError(f"{where}.methods' must be a table, got {table!r}")
    methods = tuple(
        (str(k), _choice(v, f"{where}.methods.{k}'", METHODS)) for k, v in table.items()
    )
    act_order = data.get("act_order", d.act_order)
    if not isinstance(act_order, bool):
        raise ValueError(f"{where}.act_order' = {act_order!r}: must be true or false")
    damp = data.get("damp", d.damp)
    if isinstance(damp, bool) or not isinstance(damp, (int, float)) or not 0 < damp < 1:
        raise ValueError(f"{where}.damp' = {damp!r}: must be a number in (0, 1)")
    return QuantizeSpec(
        method=method,
        methods=methods,
        calibration=_choice(
            data.get("calibration", d.calibration), f"{where}.calibration'", CALIBRATIONS
        ),
        damp=float(damp),
        block_size=_int(data.get("block_size", d.block_size), f"{where}.block_size'", 1, 65536),
        act_order=act_order,
        grid=_int(data.get("grid", d.grid), f"{where}.grid'", 1, 1000),
        **_sampling(data, where, d),
    )


def _ratio(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{where} = {value!r}: must be a number in [0, 1)")
    return float(value)


def _int(value, where: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{where} = {value!r}: must be an integer in [{lo}, {hi}]")
    return value


def _choice(value, where: str, choices) -> str:
    if value not in choices:
        raise ValueError(f"{where} = {value!r}: must be one of {list(choices)}")
    return value


def _table_where(data, source: str, name: str, allowed) -> str:
    """The error prefix for the policy table `name` (`file: field 'name`), once `data` is
    checked to be a table of known fields."""
    where = f"{source}: field '{name}"
    if not isinstance(data, dict):
        raise ValueError(f"{where}' must be a table, got {data!r}")
    _no_unknown(data, allowed, where)
    return where


def _no_unknown(data: dict, allowed, where: str) -> None:
    """A ValueError for the first field of `data` not in `allowed`, with the closest name."""
    from harmony_ref._format import did_you_mean

    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ValueError(
            f"{where}': unknown field {unknown[0]!r}"
            f"{did_you_mean(unknown[0], sorted(allowed))}; allowed: {sorted(allowed)}"
        )


def _block_range(key: str, where: str) -> range:
    text = str(key).strip()
    lo, _, hi = text.partition("-")
    if not (lo.isdigit() and (not hi or hi.isdigit())):
        raise ValueError(f'{where}: key {key!r}: must be a block index ("3") or range ("0-3")')
    a, b = int(lo), int(hi or lo)
    if b < a:
        raise ValueError(f"{where}: key {key!r}: range end before its start")
    if b >= MAX_BLOCKS:
        raise ValueError(
            f"{where}: key {key!r}: block {b:,} is past the largest model a spec may "
            f"describe ({MAX_BLOCKS:,} blocks)"
        )
    return range(a, b + 1)


def prune_from_dict(data, source: str) -> PruneSpec:
    where = _table_where(data, source, "prune", PRUNE_KEYS)
    ffn = _ratio(data.get("ffn", 0.0), f"{where}.ffn'")
    heads = _ratio(data.get("heads", 0.0), f"{where}.heads'")
    unit = _choice(data.get("head_unit", "query"), f"{where}.head_unit'", HEAD_UNITS)
    table = data.get("blocks", {})
    if not isinstance(table, dict):
        raise ValueError(f"{where}.blocks' must be a table, got {table!r}")
    blocks = []
    for key, entry in table.items():
        at = f"{where}.blocks.{key}'"
        if not isinstance(entry, dict) or not entry or set(entry) - BLOCK_KEYS:
            raise ValueError(f"{at} = {entry!r}: must be a table with ffn and/or heads")
        f = _ratio(entry["ffn"], f"{at[:-1]}.ffn'") if "ffn" in entry else None
        h = _ratio(entry["heads"], f"{at[:-1]}.heads'") if "heads" in entry else None
        blocks += [(i, f, h) for i in _block_range(key, at)]
    score = _choice(data.get("score", "l1"), f"{where}.score'", PRUNE_SCORES)
    repair = data.get("repair", False)
    if not isinstance(repair, bool):
        raise ValueError(f"{where}.repair' = {repair!r}: must be true or false")
    ridge = data.get("repair_ridge", PruneSpec.repair_ridge)
    if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or not 0 < ridge < 1e6:
        raise ValueError(f"{where}.repair_ridge' = {ridge!r}: must be a number > 0")
    if score == "obs" and not repair:
        raise ValueError(
            f'{where}.score\' = "obs": chooses the channels the repair reconstructs best, '
            "so it needs repair = true"
        )
    if "repair_ridge" in data and not repair:
        raise ValueError(f"{where}.repair_ridge' = {ridge!r}: applies with repair = true only")
    epochs = _int(data.get("distill_epochs", 0), f"{where}.distill_epochs'", 0, MAX_DISTILL_EPOCHS)
    lr = data.get("distill_lr", PruneSpec.distill_lr)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < 1:
        raise ValueError(f"{where}.distill_lr' = {lr!r}: must be a number in (0, 1)")
    params = _choice(
        data.get("distill_params", PruneSpec.distill_params),
        f"{where}.distill_params'",
        DISTILL_PARAMS,
    )
    for key in ("distill_lr", "distill_params"):
        if key in data and not epochs:
            raise ValueError(
                f"{where}.{key}' = {data[key]!r}: applies with distill_epochs > 0 only"
            )
    given = [k for k in PRUNE_SAMPLE_KEYS if k in data]
    if score == "l1" and not repair and not epochs and given:
        raise ValueError(
            f"{where}.{given[0]}' = {data[given[0]]!r}: applies to "
            'score = "activation", repair = true or distill_epochs > 0 only (the L1 score '
            "reads no data)"
        )
    return PruneSpec(
        ffn,
        heads,
        unit,
        tuple(blocks),
        score,
        **_sampling(data, where, PruneSpec()),
        repair=repair,
        repair_ridge=float(ridge),
        calibration=_choice(
            data.get("calibration", PruneSpec.calibration), f"{where}.calibration'", CALIBRATIONS
        ),
        distill_epochs=epochs,
        distill_lr=float(lr),
        distill_params=params,
    )


def _sampling(data: dict, where: str, defaults) -> dict:
    """The calibration-window fields (samples, sample_tokens, seed) of a [prune] or
    [activations] table, validated, each defaulting to `defaults`' value."""
    return {
        "samples": _int(data.get("samples", defaults.samples), f"{where}.samples'", 1, MAX_SAMPLES),
        "sample_tokens": _int(
            data.get("sample_tokens", defaults.sample_tokens),
            f"{where}.sample_tokens'",
            2,
            MAX_SAMPLE_TOKENS,
        ),
        "seed": _int(data.get("seed", defaults.seed), f"{where}.seed'", 0, 2**32 - 1),
    }


def activations_from_dict(data, source: str) -> ActivationSpec:
    where = _table_where(data, source, "activations", ACTIVATION_KEYS)
    d = ActivationSpec()
    return ActivationSpec(
        granularity=_choice(
            data.get("granularity", d.granularity), f"{where}.granularity'", GRANULARITIES
        ),
        calibration=_choice(
            data.get("calibration", d.calibration), f"{where}.calibration'", CALIBRATIONS
        ),
        alpha=_unit(data.get("alpha", d.alpha), f"{where}.alpha'"),
        **_sampling(data, where, d),
    )


def _unit(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{where} = {value!r}: must be a number in [0, 1]")
    return float(value)
