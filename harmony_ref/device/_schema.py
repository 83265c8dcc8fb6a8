"""Turn a TOML table into a frozen dataclass, with errors that name file, field and value.

Device profiles are data written by people; a typo must fail loudly and precisely
("profiles/x.toml: field 'compute.cube_int8_tops' = -3.0: must be >= 0"), never be ignored.
"""

from __future__ import annotations

import dataclasses
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


def _type_name(tp) -> str:
    if typing.get_origin(tp) is tuple:
        return f"list of {typing.get_args(tp)[0].__name__}"
    return getattr(tp, "__name__", str(tp))


def from_table(cls, table, source: str, section: str = ""):
    """Build dataclass `cls` from dict `table`. Fields with metadata {"min": x} are range-checked
    (min inclusive), {"choices": (...)} restrict strings; fields with defaults are optional."""
    prefix = f"{section}." if section else ""
    if not isinstance(table, dict):
        raise ValueError(f"{source}: section '{section}' must be a table, got {table!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise ValueError(
            f"{source}: unknown field '{prefix}{unknown[0]}' = {table[unknown[0]]!r}; "
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
        if dataclasses.is_dataclass(tp):
            kwargs[name] = from_table(tp, value, source, f"{prefix}{name}")
            continue
        if not _type_ok(value, tp):
            raise ValueError(
                f"{source}: field '{prefix}{name}' = {value!r}: expected {_type_name(tp)}"
            )
        lo = f.metadata.get("min")
        values = value if isinstance(value, (list, tuple)) else [value]
        if lo is not None and any(v < lo for v in values):
            raise ValueError(f"{source}: field '{prefix}{name}' = {value!r}: must be >= {lo}")
        hi = f.metadata.get("max")
        if hi is not None and any(v > hi for v in values):
            raise ValueError(f"{source}: field '{prefix}{name}' = {value!r}: must be <= {hi}")
        choices = f.metadata.get("choices")
        if choices is not None and value not in choices:
            raise ValueError(f"{source}: field '{prefix}{name}' = {value!r}: must be one of {list(choices)}")
        if typing.get_origin(tp) is tuple:
            value = tuple(float(v) if typing.get_args(tp)[0] is float else v for v in value)
        elif tp is float:
            value = float(value)
        kwargs[name] = value
    return cls(**kwargs)


def nonneg(**extra):
    """Field metadata: a number that must be >= 0."""
    return dataclasses.field(metadata={"min": 0, **extra})
