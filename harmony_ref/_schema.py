"""Turn a TOML table into a frozen dataclass, with errors that name file, field and value.

Device profiles and model specs are data written by people; a typo must fail loudly and precisely
("profiles/x.toml: field 'compute.cube_int8_tops' = -3.0: must be >= 0"), never be ignored.

Field types understood: float, int, bool, str, tuple[T, ...] (a TOML list), a nested dataclass (a
TOML table), `Dataclass | None` (an optional table) and tuple[Dataclass, ...] (an array of tables,
`[[section.name]]`; an item's errors name it `section.name[i]`). Every float is finite (TOML
spells `inf` and `nan`; no field of a phone, model or policy is either). Field metadata
{"min": x} / {"max": x} bound numbers (inclusive), {"choices": (...)} restricts values (of a list:
each item, no repeats); fields with defaults are optional. An unknown field names the closest
known one.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing


def _type_ok(value, tp) -> bool:
    origin = typing.get_origin(tp)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is bool:
        return isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin is tuple:
        (inner, *_rest) = typing.get_args(tp)
        return isinstance(value, (list, tuple)) and all(_type_ok(v, inner) for v in value)
    return True


def _optional_dataclass(tp):
    """The dataclass of an `X | None` annotation, else None."""
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return None
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(args) == 1 and dataclasses.is_dataclass(args[0]) and len(typing.get_args(tp)) == 2:
        return args[0]
    return None


def _table_array(tp):
    """The dataclass of a `tuple[Dataclass, ...]` annotation, else None."""
    if typing.get_origin(tp) is tuple:
        inner = typing.get_args(tp)[0]
        if dataclasses.is_dataclass(inner):
            return inner
    return None


def _type_name(tp) -> str:
    if typing.get_origin(tp) is tuple:
        return f"list of {typing.get_args(tp)[0].__name__}"
    return getattr(tp, "__name__", str(tp))


def from_table(cls, table, source: str, section: str = ""):
    """Build dataclass `cls` from dict `table` (see the module docstring for what is checked)."""
    prefix = f"{section}." if section else ""
    if not isinstance(table, dict):
        raise ValueError(f"{source}: section '{section}' must be a table, got {table!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(table) - set(fields))
    if unknown:
        from harmony_ref._format import did_you_mean

        raise ValueError(
            f"{source}: unknown field '{prefix}{unknown[0]}' = {table[unknown[0]]!r}"
            f"{did_you_mean(unknown[0], sorted(fields))}; "
            f"allowed in [{section or 'top level'}]: {sorted(fields)}"
        )
    kwargs = {}
    for name, f in fields.items():
        tp = hints[name]
        if name not in table:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{source}: missing field '{prefix}{name}' ({_type_name(tp)})")
            continue
        value = table[name]
        nested = tp if dataclasses.is_dataclass(tp) else _optional_dataclass(tp)
        if nested is not None:
            kwargs[name] = from_table(nested, value, source, f"{prefix}{name}")
            continue
        items = _table_array(tp)
        if items is not None:
            if not isinstance(value, (list, tuple)) or not value:
                raise ValueError(
                    f"{source}: field '{prefix}{name}' = {value!r}: expected a "
                    f"non-empty array of tables ([[{prefix}{name}]])"
                )
            kwargs[name] = tuple(
                from_table(items, v, source, f"{prefix}{name}[{i}]") for i, v in enumerate(value)
            )
            continue
        if not _type_ok(value, tp):
            raise ValueError(
                f"{source}: field '{prefix}{name}' = {value!r}: expected {_type_name(tp)}"
            )
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in values):
            raise ValueError(
                f"{source}: field '{prefix}{name}' = {value!r}: must be a finite number"
            )
        lo = f.metadata.get("min")
        if lo is not None and any(v < lo for v in values):
            raise ValueError(f"{source}: field '{prefix}{name}' = {value!r}: must be >= {lo}")
        hi = f.metadata.get("max")
        if hi is not None and any(v > hi for v in values):
            raise ValueError(f"{source}: field '{prefix}{name}' = {value!r}: must be <= {hi}")
        choices = f.metadata.get("choices")
        if choices is not None and isinstance(value, (list, tuple)):
            bad = [v for v in values if v not in choices]
            if bad:
                raise ValueError(
                    f"{source}: field '{prefix}{name}' has {bad[0]!r}: each item must "
                    f"be one of {list(choices)}"
                )
            if len(set(values)) != len(values):
                dup = next(v for v in values if values.count(v) > 1)
                raise ValueError(f"{source}: field '{prefix}{name}' lists {dup!r} twice")
        elif choices is not None and value not in choices:
            raise ValueError(
                f"{source}: field '{prefix}{name}' = {value!r}: must be one of {list(choices)}"
            )
        if typing.get_origin(tp) is tuple:
            value = tuple(float(v) if typing.get_args(tp)[0] is float else v for v in value)
        elif tp is float:
            value = float(value)
        kwargs[name] = value
    return cls(**kwargs)


def nonneg(**extra):
    """Field metadata: a number that must be >= 0."""
    return dataclasses.field(metadata={"min": 0, **extra})


def section_class(cls, path: str):
    """The dataclass a TOML section of schema `cls` is read into: "" is `cls` itself, "memory" a
    nested (or optional) table's, "cpu.clusters" an array of tables' item. ValueError when
    `path` names no table of the schema."""
    for i, part in enumerate(p for p in path.split(".") if p):
        hints = typing.get_type_hints(cls)
        tp = hints.get(part)
        inner = (
            None
            if tp is None
            else tp
            if dataclasses.is_dataclass(tp)
            else _optional_dataclass(tp) or _table_array(tp)
        )
        if inner is None:
            where = ".".join(path.split(".")[:i]) or "top level"
            raise ValueError(
                f"[{path}]: {part!r} is not a table of {cls.__name__} ({where}); "
                f"its tables: {sorted(n for n, t in hints.items() if _is_table(t))}"
            )
        cls = inner
    return cls


def _is_table(tp) -> bool:
    return bool(dataclasses.is_dataclass(tp) or _optional_dataclass(tp) or _table_array(tp))


def fraction(default=None):
    """Field metadata: a share in (0, 1] (an efficiency); optional with a default."""
    meta = {"min": 1e-6, "max": 1.0}
    return (
        dataclasses.field(metadata=meta)
        if default is None
        else dataclasses.field(default=default, metadata=meta)
    )
