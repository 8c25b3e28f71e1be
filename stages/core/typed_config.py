"""Turn plain mappings (parsed YAML) into frozen, typed dataclasses — strictly.

Every key must be a field of the target dataclass and every value must have the field's type;
otherwise a `ParamsError` names the dotted key and what is wrong. Supported annotations: bool,
int, float (an int is accepted), str, `Literal[...]`, `X | None`, `list[X]`, `tuple[X, ...]`,
`dict[str, X]` and nested dataclasses. Lists are stored as tuples so params stay hashable and
immutable.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")


class ParamsError(ValueError):
    """A params value is unknown, missing or of the wrong type; the message names the key."""


def build(cls: type[T], mapping: Any, where: str = "") -> T:
    """Build dataclass `cls` from `mapping`, validating every key and value.

    Args:
        cls: a (frozen) dataclass type.
        mapping: the parsed YAML mapping for it.
        where: dotted path of this mapping, used in error messages.

    Raises:
        ParamsError: on an unknown key, a missing required key or a wrongly typed value.
    """
    if not isinstance(mapping, Mapping):
        raise ParamsError(f"{where or '<root>'}: expected a mapping, got {type(mapping).__name__}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(mapping) - set(fields))
    if unknown:
        names = ", ".join(_join(where, str(k)) for k in unknown)
        raise ParamsError(f"unknown key(s): {names} (known: {', '.join(sorted(fields))})")
    values = {}
    for name, field in fields.items():
        key = _join(where, name)
        if name in mapping:
            value = mapping[name]
            default = _default_of(field)
            if dataclasses.is_dataclass(hints[name]) and default is not None and isinstance(value, Mapping):
                # A partly given block keeps the rest of its *field's* default (e.g. a preset's own
                # values), not the bare class defaults.
                value = deep_merge(to_dict(default), value)
            values[name] = _convert(hints[name], value, key)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ParamsError(f"{key}: missing required key")
    return cls(**values)


def to_dict(obj: Any) -> Any:
    """Inverse of `build`: a dataclass (tree) as plain dicts and lists, for lineage records."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple | list):
        return [to_dict(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def _default_of(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def deep_merge(base: Mapping, override: Mapping) -> dict:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:120]


def _convert(tp: Any, value: Any, key: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise ParamsError(f"{key}: must not be null")
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, key)
            except ParamsError as err:
                errors.append(str(err))
        raise ParamsError(errors[0] if len(errors) == 1 else f"{key}: no allowed type matches {_describe(value)}")
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            raise ParamsError(f"{key}: expected one of {list(allowed)}, got {_describe(value)}")
        return value
    if origin in (list, tuple, typing.Sequence):
        if not isinstance(value, list | tuple):
            raise ParamsError(f"{key}: expected a list, got {_describe(value)}")
        args = get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise ParamsError(f"{key}: expected {len(args)} items, got {len(value)}")
            return tuple(_convert(a, v, f"{key}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
        item = args[0] if args else Any
        return tuple(_convert(item, v, f"{key}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ParamsError(f"{key}: expected a mapping, got {_describe(value)}")
        kt, vt = get_args(tp) or (Any, Any)
        return types.MappingProxyType(
            {_convert(kt, k, f"{key}.{k}"): _convert(vt, v, f"{key}.{k}") for k, v in value.items()}
        )
    if tp is bool:
        if not isinstance(value, bool):
            raise ParamsError(f"{key}: expected true/false, got {_describe(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParamsError(f"{key}: expected an integer, got {_describe(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ParamsError(f"{key}: expected a number, got {_describe(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ParamsError(f"{key}: expected a string, got {_describe(value)}")
        return value
    raise TypeError(f"{key}: unsupported annotation {tp!r} in params class")  # a bug in params.py
