"""The one place params.yaml is read: `Params`, the root that composes every block, and its loaders.

Each block class mirrors a block of params.yaml (same names, same order) and lives in stages/params/<block>.py,
named after its block; `data` and `runner`, which the core reads, are stages/core/params.py and
stages/core/runner.py. The blocks are off the core and light to import: reading them runs no stage package
(docs/decisions/params-with-their-stages.md). Defaults are the embedded synthetic default, and params.yaml
documents every value. Stage functions receive these objects, never raw dicts. The machinery (types,
validation, overrides) is stages/core/params.py and stages/core/typed_config.py.

Adding a block: a file here, a line in `Params`, the block in params.yaml, and the stage's params list in dvc.yaml.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.core.params import (
    DataParams,
    ParamsError,
    Seed,
    cli_overrides,
    load_root,
    override_root,
    read_params_file,
)
from stages.core.runner import RunnerParams
from stages.core.typed_config import Exp, to_dict
from stages.params.benchmarks import BenchmarksParams
from stages.params.cot import CotParams
from stages.params.difficulty import DifficultyParams
from stages.params.evaluate import EvaluateParams
from stages.params.filter import FilterParams
from stages.params.finetune_sam2 import FinetuneSam2Params
from stages.params.grpo import GrpoParams
from stages.params.ingest import IngestParams
from stages.params.keyframes import KeyframesParams
from stages.params.model import ModelParams
from stages.params.pretrain import PretrainParams
from stages.params.pretrain_sam2 import PretrainSam2Params
from stages.params.remote import RemoteParams
from stages.params.reward import RewardParams
from stages.params.sam2 import Sam2Params
from stages.params.sample import SampleParams
from stages.params.sft import SftParams
from stages.params.shard import ShardParams
from stages.params.synth import SynthParams
from stages.params.teacher import TeacherParams
from stages.params.tiny_models import TinyModelsParams

__all__ = ["Params", "ParamsError", "apply_overrides", "cli_overrides", "default_params", "load_params",
           "read_params_file"]


@dataclass(frozen=True)
class Params:
    """All of params.yaml. Blocks for later stages are added as their stages arrive."""

    seed: Exp[Seed] = 0  # global seed; every stage derives its own (seed, stage, sample id) seeds from it
    data: DataParams = field(default_factory=DataParams)
    synth: SynthParams = field(default_factory=SynthParams)
    ingest: IngestParams = field(default_factory=IngestParams)
    runner: RunnerParams = field(default_factory=RunnerParams)
    remote: RemoteParams = field(default_factory=RemoteParams)
    sample: SampleParams = field(default_factory=SampleParams)
    keyframes: KeyframesParams = field(default_factory=KeyframesParams)
    teacher: TeacherParams = field(default_factory=TeacherParams)
    cot: CotParams = field(default_factory=CotParams)
    filter: FilterParams = field(default_factory=FilterParams)
    difficulty: DifficultyParams = field(default_factory=DifficultyParams)
    tiny_models: TinyModelsParams = field(default_factory=TinyModelsParams)
    pretrain: PretrainParams = field(default_factory=PretrainParams)
    pretrain_sam2: PretrainSam2Params = field(default_factory=PretrainSam2Params)
    finetune_sam2: FinetuneSam2Params = field(default_factory=FinetuneSam2Params)
    model: ModelParams = field(default_factory=ModelParams)
    sam2: Sam2Params = field(default_factory=Sam2Params)
    shard: ShardParams = field(default_factory=ShardParams)
    sft: SftParams = field(default_factory=SftParams)
    evaluate: EvaluateParams = field(default_factory=EvaluateParams)
    benchmarks: BenchmarksParams = field(default_factory=BenchmarksParams)
    reward: RewardParams = field(default_factory=RewardParams)
    grpo: GrpoParams = field(default_factory=GrpoParams)
    # -- later stages add their block field above this line (one line each) --


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate params.yaml.

    Raises:
        ParamsError: unknown key, wrong type, out-of-range value, broken rule, or malformed YAML
            (one line naming the file and the dotted key).
    """
    return load_root(Params, path)


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> tuple[Params, dict[str, Any]]:
    """`dotted.key` overrides laid over a params file's mapping, validated (`stages.core.params.override_root`).

    Raises:
        ParamsError: a key that is not a params value (with "did you mean"), a value of the wrong
            type or range, a refused character, or a rule the merged params break.
    """
    return override_root(Params, raw, overrides)


def default_params() -> dict[str, Any]:
    """The defaults of every params block (`Params()`), as plain dicts (model cards list differences from them)."""
    return to_dict(Params())
