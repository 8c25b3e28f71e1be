"""The typed-config machinery every params block uses: the value types, reading params.yaml, and `-S` overrides.

The blocks themselves live in stages/params/<block>.py (one file per params.yaml block, named after it) and the
root that composes them, `stages.params.Params`, in stages/params/__init__.py: the core cannot import the stages
(docs/decisions/params-with-their-stages.md). Here: the constrained types the blocks' fields use, the served-run
policy's secret-name rule, the `data` block (shared: the core's frames_root reads it), the YAML reader, and the
two ways a root is built, from a file (`load_root`) and from a file's mapping plus overrides (`override_root`).

An unknown key, a wrongly typed or out-of-range value, or a broken cross-field rule is a `ParamsError` naming
the dotted key, in one line. Ranges are `annotated_types` constraints on the fields; rules spanning fields are
a class's `_rules`. The same validation serves every way of starting a run: `vrsflow check`, the first thing
`vrsflow stage` does, the `check` stage at the head of dvc.yaml, and the served pipeline's overrides, which are
checked before DVC is called.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from annotated_types import Ge, Gt, Le, MinLen

from stages.core.typed_config import (
    SERVER,
    EnvName,
    Exp,
    ExpPath,
    ParamsError,
    build,
    deep_merge,
    field_type,
    is_block,
    is_str_like,
)

__all__ = ["ParamsError", "cli_overrides", "load_root", "override_root", "read_params_file"]

T = TypeVar("T")
PosInt = Annotated[int, Ge(1)]
NonNegInt = Annotated[int, Ge(0)]
Seed = Annotated[int, Ge(0)]  # numpy and torch take non-negative seeds
PosFloat = Annotated[float, Gt(0)]
NonNegFloat = Annotated[float, Ge(0)]
Fraction = Annotated[float, Ge(0), Le(1)]
# objects in one generated scene: each is a distinct (colour, kind) of the synth simulator's 30, and a scene of
# more than 16 in a 160×120 frame is occlusion, not a scene (tests/stages/test_synth.py holds the bound to the
# simulator's combinations); a larger value is refused when params are read, not deep in a stage
SceneObjects = Annotated[int, Ge(1), Le(16)]
JpegQuality = Annotated[int, Ge(1), Le(100)]
NonPosFloat = Annotated[float, Le(0)]
NonEmptyStr = Annotated[str, MinLen(1)]
NonEmptyNames = Annotated[tuple[str, ...], MinLen(1)]
NonEmptyWeights = Annotated[tuple[Annotated[float, Gt(0)], ...], MinLen(1)]

# Served-run policy (stages/core/typed_config.py, docs/ui.md): every value field is Exp[...] (a run from the UI
# may change it), ExpPath[...] (a path it may change inside the project) or Server[...] (fixed when `vrsflow serve`
# starts); a field naming an environment variable is SecretEnv (server side, names from SECRET_ENV_PREFIXES only).
SECRET_ENV_PREFIXES = ("VRSFLOW_",)
SecretEnv = Annotated[str, SERVER, EnvName(SECRET_ENV_PREFIXES)]


# The `data` block lives here, not in stages/params: the core's frames_root reads it.
SOURCE_LAYOUTS = ("revos", "mevis", "refytvos", "refdavis")  # training-source layouts (stages/ingest/sources.py)


@dataclass(frozen=True)
class SourceParams:
    """One training source: a dataset root in its published layout (docs/sampling.md, "Training sources")."""

    name: Exp[str] = ""  # prefix of its video keys and ids (`<name>/<video>`): letters, digits, - and _
    layout: Exp[Literal["revos", "mevis", "refytvos", "refdavis"]] = "revos"
    root: ExpPath[str] = ""  # the dataset folder as published
    split: Exp[str] = "train"  # the published split read (its masks must be public)
    share: Exp[NonNegFloat] = 1.0  # relative share of the SFT and GRPO pools (normalised over the sources)

    def _rules(self) -> Iterator[tuple[str, str]]:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", self.name):
            yield "name", f"must be letters, digits, '-' or '_' (it prefixes video keys), got {self.name!r}"
        if not self.root:
            yield "root", "must name the source's dataset folder"
        splits = {"revos": ("train", "valid"), "mevis": ("train", "valid_u"), "refytvos": ("train",),
                  "refdavis": ("train", "valid")}[self.layout]
        if self.split not in splits:
            yield "split", f"{self.layout} has no public-mask split {self.split!r} (one of {', '.join(splits)})"


@dataclass(frozen=True)
class DataParams:
    root: ExpPath[str] = "data/raw/synth"  # ReVOS-layout root that ingest reads (the synthetic one by default)
    index_dir: ExpPath[str] = "data/index"
    # training sources; () = data.root alone (both splits). Given: the sources are the training split, data.root
    # gives only the evaluation (valid) split
    sources: ExpPath[tuple[SourceParams, ...]] = ()
    frames_dir: ExpPath[str] = "data/frames"  # with sources: links to every source's frames (rebuilt from params)
    # shares: the SFT / GRPO pools split by the sources' `share`; union: by their sizes (a uniform draw from the
    # union of the sources, what a paper that pools datasets without a ratio does)
    mix: Exp[Literal["shares", "union"]] = "shares"

    def _rules(self) -> Iterator[tuple[str, str]]:
        names = [s.name for s in self.sources]
        for name in sorted({n for n in names if names.count(n) > 1}):
            yield "sources", f"source name {name!r} used twice"
        if self.sources and not sum(s.share for s in self.sources) > 0:
            yield "sources", "at least one source needs a share > 0"


class _ParamsLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading floats as YAML 1.2 does.

    PyYAML follows YAML 1.1, where `1e-05` (no dot) is a string; DVC writes `-S` floats that way
    (ruamel, YAML 1.2), so `dvc exp run -S grpo.learning_rate=1e-5` must still load as a number.
    """


_ParamsLoader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_ParamsLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_params_file(path: str | Path = "params.yaml") -> dict:
    """The raw mapping of a params file (no validation of its keys yet).

    Raises:
        ParamsError: a missing file, malformed YAML, or a top level that is not a mapping.
    """
    path = Path(path)
    try:
        raw = yaml.load(path.read_text(), Loader=_ParamsLoader)  # noqa: S506 (a SafeLoader)
    except FileNotFoundError as err:
        raise ParamsError(f"{path}: no such file") from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ParamsError(f"{path}: malformed YAML{where}: {problem}") from err
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ParamsError(f"{path}: expected a mapping of params blocks, got {type(raw).__name__}")
    return raw


def load_root(root: type[T], path: str | Path = "params.yaml") -> T:
    """Read and validate a params file as `root` (`stages.params.load_params` reads params.yaml as the root).

    Raises:
        ParamsError: unknown key, wrong type, out-of-range value, broken rule, or malformed YAML
            (one line naming the file and the dotted key).
    """
    raw = read_params_file(path)
    try:
        return build(root, raw)
    except ParamsError as err:
        raise ParamsError(f"{path}: {err}") from err


# Characters refused in override values: they mean something to a shell or to the override grammar
# DVC's `-S` parses (Hydra: quotes, `$` interpolation), and no params value needs them.
FORBIDDEN_IN_OVERRIDES = frozenset(";&|$`<>\"'\\")
KEY_PATTERN = r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*"


def cli_overrides(items: Iterable[str], error: type[Exception] = ValueError) -> dict[str, str]:
    """`-S key=value` command-line items as `{"key": "value"}` for `override_root` (the last of a repeated key
    wins, as in `dvc exp run -S`); an item without "=" raises `error` (the caller's usage-error type) naming it."""
    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise error(f"-S {item!r}: expected key=value")
        overrides[key] = value
    return overrides


def override_root(root: type[T], raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> tuple[T, dict[str, Any]]:
    """Lay `{"dotted.key": value}` overrides over a params mapping and validate the result as `root`.

    A string value is read as `dvc exp run -S` reads it (a YAML scalar or list: "32" → 32, "[a, b]" → a
    list), except for text params, which take the string as it is.

    Args:
        root: the root params class (`stages.params.Params`).
        raw: the params file's mapping (`read_params_file`).
        overrides: dotted params keys → values (strings as typed in the UI, or typed values).

    Returns:
        The validated params, and the overrides as typed values (same keys).

    Raises:
        ParamsError: a key that is not a params value (with "did you mean"), a value of the wrong
            type or range, a refused character, or a rule the merged params break.
    """
    typed: dict[str, Any] = {}
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        if not isinstance(key, str) or not re.fullmatch(KEY_PATTERN, key):
            raise ParamsError(f"{str(key)[:80]!r}: not a params key (dotted lower-case names, e.g. sample.grpo_size)")
        tp = field_type(root, key)
        if is_block(tp):
            raise ParamsError(f"{key}: is a block of params; override one of its keys (e.g. {key}.<name>)")
        typed[key] = _override_value(tp, value, key)
        node = nested
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = typed[key]
    return build(root, deep_merge(raw, nested)), typed


def _override_value(tp: Any, value: Any, key: str) -> Any:
    for text in value if isinstance(value, list | tuple) else [value]:
        if isinstance(text, str):
            bad = sorted({c for c in text if c in FORBIDDEN_IN_OVERRIDES or ord(c) < 32})
            if bad:
                raise ParamsError(f"{key}: refusing the character(s) {' '.join(map(repr, bad))} in an override value")
    if not isinstance(value, str) or is_str_like(tp):
        return value
    if "{" in value:  # a mapping ({name:mevis,share:1.0}): read with the grammar DVC's -S uses (Hydra), not YAML
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.errors import HydraException

        try:
            return OverridesParser.create().parse_overrides([f"value={value}"])[0].value()
        except HydraException as err:
            raise ParamsError(f"{key}: cannot read {value!r} as a value") from err
    try:
        return yaml.load(value, Loader=_ParamsLoader) if value.strip() else value  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as err:
        raise ParamsError(f"{key}: cannot read {value!r} as a value") from err
