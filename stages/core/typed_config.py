"""Turn plain mappings (parsed YAML) into frozen, typed dataclasses — strictly.

Every key must be a field of the target dataclass (a near miss gets a "did you mean"), every value
must have the field's type and lie in the field's range, and a class's cross-field rules must hold;
otherwise a `ParamsError` names the dotted key and what is wrong, in one line. Supported annotations:
bool, int, float (an int is accepted; NaN and infinity are not), str, `Literal[...]`, `X | None`,
`list[X]`, `tuple[X, ...]`, `dict[str, X]`, nested dataclasses, and `Annotated[X, constraint, ...]`
with the `annotated_types` constraints (`Gt`, `Ge`, `Lt`, `Le`, `Interval`, `MinLen`) — the same
vocabulary pydantic reads. Lists are stored as tuples so params stay hashable and immutable.

A dataclass may define `_rules(self)`, yielding `(field, problem)` pairs for rules that span
fields (`min_frames` ≤ `max_frames`); the field is named relative to the class.

Served-run policy markers: every leaf field of a params class says, in its annotation, whether a run
started from the Prefect UI may change it — `Exp[T]` (an experiment choice), `ExpPath[T]` (an experiment
choice that is a path: it must stay inside the project or a root the server allows), or `Server[T]` (the
server's business, fixed at serve time from the checked-in params: env-var names, endpoints, folders outside
the project, settings that start processes or open ports). `served_side` reads the marker and `unmarked`
lists the fields that have none (a test keeps that list empty). `EnvName` is a constraint: the value names
an environment variable from a declared set (a prefix), checked wherever params are built.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import re
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import annotated_types as at

T = TypeVar("T")


class ParamsError(ValueError):
    """A params value is unknown, missing, of the wrong type or out of range; the message names the key."""


@dataclasses.dataclass(frozen=True)
class Served:
    """A field's side in the served-run policy (flows/serve_request.py enforces it)."""

    side: Literal["experiment", "server"]
    path: bool = False  # an experiment path: inside the project or a root `vrsflow serve --allow-root` names


EXPERIMENT = Served("experiment")
EXPERIMENT_PATH = Served("experiment", path=True)
SERVER = Served("server")
Exp = Annotated[T, EXPERIMENT]  # a UI run may change it: sizes, seeds, rates, weights, task choices, …
ExpPath = Annotated[T, EXPERIMENT_PATH]  # a UI run may change it within the project / allowed roots (paths)
Server = Annotated[T, SERVER]  # fixed at serve time: env-var names, endpoints, outside folders, processes, ports
HOW_TO_MARK = ("wrap its type in stages/params/<block>.py in Exp[...] (a UI run may change it: sizes, seeds, rates, "
               "choices), ExpPath[...] (a path a UI run may change inside the project) or Server[...] (fixed at "
               "serve time: env-var names — use SecretEnv —, endpoints, folders outside the project, settings "
               "that start processes or open ports); see docs/ui.md, threat model")


@dataclasses.dataclass(frozen=True)
class EnvName:
    """Constraint: the value is the NAME of an environment variable starting with one of `prefixes`.

    Params name the variables that hold secrets, never the secrets; only a declared set of names may be
    read, so no run (params.yaml, `-S`, a served run) can send the serving process's other variables
    (PREFECT_API_AUTH_STRING, AWS_SECRET_ACCESS_KEY, …) anywhere.
    """

    prefixes: tuple[str, ...]

    def problem(self, value: str) -> str | None:
        """Why `value` is refused, or None."""
        if re.fullmatch(r"[A-Z][A-Z0-9_]*", value) and value.startswith(self.prefixes):
            return None
        declared = " or ".join(f"{p}*" for p in self.prefixes)
        return (f"must name an environment variable {declared} (upper case), got {value!r}: export the secret "
                f"under such a name (e.g. {self.prefixes[0]}TEACHER_API_KEY=$OTHER_VAR) and name that")


def served_side(tp: Any) -> Served | None:
    """The served-run marker of a field's annotation (the outermost one), or None when it has none."""
    if get_origin(tp) is not Annotated:
        return None
    marks = [m for m in get_args(tp)[1:] if isinstance(m, Served)]
    return marks[-1] if marks else None


def leaf_fields(cls: type, where: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, annotation) of every value field below dataclass `cls` (blocks are walked, not listed)."""
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        key = _join(where, f.name)
        if is_block(hints[f.name]):
            yield from leaf_fields(_strip(hints[f.name]), key)
        else:
            yield key, hints[f.name]


def unmarked(cls: type) -> list[str]:
    """The value fields below `cls` on neither side of the served-run policy, including the fields of dataclasses
    held in lists or mappings (`data.sources[].root`)."""
    out = []
    for key, tp in leaf_fields(cls):
        if served_side(tp) is None:
            out.append(key)
        for item in _item_classes(tp):
            out += [f"{key}[].{sub}" for sub in unmarked(item)]
    return out


def _item_classes(tp: Any) -> list[type]:
    """Dataclasses a list / tuple / mapping / union annotation holds (at any depth)."""
    found: list[type] = []
    for arg in get_args(_strip(tp)):
        base = _strip(arg)
        if dataclasses.is_dataclass(base):
            found.append(base)  # type: ignore[arg-type]
        elif arg is not Ellipsis:
            found += _item_classes(arg)
    return found


def served_walk(tp: Any, value: Any, key: str, side: Served | None = None) -> Iterator[tuple[str, Served, Any]]:
    """(key, side, value) of every plain value inside `value` (of annotation `tp`), each with the innermost
    marker that covers it: a dataclass's fields by their own markers, list items and mapping values by their
    container's. Dataclass instances, lists and mappings are walked; everything else is yielded."""
    side = served_side(tp) or side
    base = _strip(tp)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        hints = _hints(type(value))
        for f in dataclasses.fields(value):
            yield from served_walk(hints[f.name], getattr(value, f.name), _join(key, f.name), side)
    elif isinstance(value, Mapping) and dataclasses.is_dataclass(base):  # a block as given, not yet built
        hints = _hints(base)
        for k, v in value.items():
            yield from served_walk(hints.get(k, Any), v, f"{key}.{k}", side)
    elif isinstance(value, Mapping):
        args = get_args(base)
        for k, v in value.items():
            yield from served_walk(args[1] if len(args) == 2 else Any, v, f"{key}.{k}", side)
    elif isinstance(value, list | tuple):
        args = [a for a in get_args(base) if a is not Ellipsis]
        for i, v in enumerate(value):
            yield from served_walk(args[0] if len(args) == 1 else (args[i] if i < len(args) else Any), v,
                                   f"{key}[{i}]", side)
    elif side is not None:
        yield key, side, value


def build(cls: type[T], mapping: Any, where: str = "") -> T:
    """Build dataclass `cls` from `mapping`, validating every key and value.

    Args:
        cls: a (frozen) dataclass type.
        mapping: the parsed YAML mapping for it.
        where: dotted path of this mapping, used in error messages.

    Raises:
        ParamsError: on an unknown key, a missing required key, a wrongly typed or out-of-range value,
            or a broken cross-field rule.
    """
    if not isinstance(mapping, Mapping):
        raise ParamsError(f"{where or '<root>'}: expected a mapping, got {_describe(mapping)}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in sorted(mapping, key=str):
        if key not in fields:
            raise ParamsError(unknown_key_message(_join(where, str(key)), str(key), fields))
    values = {}
    for name, field in fields.items():
        key = _join(where, name)
        if name in mapping:
            value = mapping[name]
            default = _default_of(field)
            if dataclasses.is_dataclass(_strip(hints[name])) and default is not None and isinstance(value, Mapping):
                # A partly given block keeps the rest of its *field's* default (e.g. a preset's own
                # values), not the bare class defaults.
                value = deep_merge(to_dict(default), value)
            values[name] = _convert(hints[name], value, key)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ParamsError(f"{key}: missing required key")
    obj = cls(**values)
    for name, problem in _rules_of(obj):
        raise ParamsError(f"{_join(where, name)}: {problem}")
    return obj


def unknown_key_message(dotted: str, key: str, known: typing.Iterable[str]) -> str:
    """`grpo.lerning_rate: unknown key (did you mean 'learning_rate'?)`, or the known keys when none is close."""
    known = sorted(known)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"{dotted}: unknown key (did you mean '{_join(dotted.rpartition('.')[0], close[0])}'?)"
    shown = ", ".join(known[:12]) + (", …" if len(known) > 12 else "")
    return f"{dotted}: unknown key (known here: {shown})"


def field_type(cls: type, dotted: str) -> Any:
    """The annotation of the field at `dotted` (e.g. "grpo.learning_rate") below dataclass `cls`.

    Raises:
        ParamsError: a part of the path is not a field (with "did you mean"), or the path goes
            through a value that is not a dataclass.
    """
    tp: Any = cls
    walked = ""
    for part in dotted.split("."):
        base = _strip(tp)
        if not dataclasses.is_dataclass(base):
            raise ParamsError(f"{dotted}: {walked} is a single value, it has no key '{part}'")
        names = [f.name for f in dataclasses.fields(base)]
        walked = _join(walked, part)
        if part not in names:
            raise ParamsError(unknown_key_message(walked, part, names))
        tp = _hints(base)[part]
    return tp


def is_block(tp: Any) -> bool:
    """Whether an annotation is a nested params block (a dataclass)."""
    return dataclasses.is_dataclass(_strip(tp))


def is_str_like(tp: Any) -> bool:
    """Whether values of this annotation are written as plain text (str or a Literal of strings)."""
    base = _strip(tp)
    if base is str:
        return True
    return get_origin(base) is Literal and all(isinstance(a, str) for a in get_args(base))


def to_dict(obj: Any) -> Any:
    """Inverse of `build`: a dataclass (tree) as plain dicts and lists, for lineage records."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple | list):
        return [to_dict(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def deep_merge(base: Mapping, override: Mapping) -> dict:
    """`base` with `override` laid over it, mappings merged key by key."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A dataclass's evaluated annotations, once per class (evaluating them is most of a params build)."""
    return get_type_hints(cls, include_extras=True)


def _rules_of(obj: Any) -> Iterator[tuple[str, str]]:
    rules = getattr(obj, "_rules", None)
    return iter(rules()) if rules is not None else iter(())


def _default_of(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _strip(tp: Any) -> Any:
    """`Annotated[X, …]` → X."""
    return get_args(tp)[0] if get_origin(tp) is Annotated else tp


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:120]


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _check_constraints(metadata: tuple, value: Any, key: str) -> None:
    for item in metadata:
        constraints = list(item) if isinstance(item, at.GroupedMetadata) else [item]
        for c in constraints:
            if isinstance(c, at.Gt) and not value > c.gt:
                raise ParamsError(f"{key}: must be > {_number(c.gt)}, got {_number(value)}")
            if isinstance(c, at.Ge) and not value >= c.ge:
                raise ParamsError(f"{key}: must be ≥ {_number(c.ge)}, got {_number(value)}")
            if isinstance(c, at.Lt) and not value < c.lt:
                raise ParamsError(f"{key}: must be < {_number(c.lt)}, got {_number(value)}")
            if isinstance(c, at.Le) and not value <= c.le:
                raise ParamsError(f"{key}: must be ≤ {_number(c.le)}, got {_number(value)}")
            if isinstance(c, EnvName) and (problem := c.problem(value)):
                raise ParamsError(f"{key}: {problem}")
            if isinstance(c, at.MinLen) and len(value) < c.min_length:
                what = "non-empty" if c.min_length == 1 else f"at least {c.min_length} long"
                raise ParamsError(f"{key}: must be {what}")


def _convert(tp: Any, value: Any, key: str) -> Any:
    origin = get_origin(tp)
    if origin is Annotated:
        base, *metadata = get_args(tp)
        converted = _convert(base, value, key)
        _check_constraints(tuple(metadata), converted, key)
        return converted
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
        # equal and of the same type: True is not 1, and 32.0 is not 32
        if not any(value == a and type(value) is type(a) for a in allowed):
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
        if not math.isfinite(value):
            raise ParamsError(f"{key}: expected a finite number, got {value}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ParamsError(f"{key}: expected a string, got {_describe(value)}")
        return value
    raise TypeError(f"{key}: unsupported annotation {tp!r} in params class")  # a bug in params.py
