"""What a stage function returns: a small summary the flow publishes (Prefect artifacts) and
that the stage has already written as DVC metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from stages.core.io import write_json


@dataclass
class StageReport:
    """Summary of one stage run.

    Attributes:
        stage: stage name.
        metrics: flat numbers, also written to `metrics/<stage>.json` for `dvc metrics`.
        tables: named tables to show as Prefect table artifacts (counts per stratum, reasons...).
        markdown: optional free-form markdown (links to reports, pictures).
    """

    stage: str
    metrics: dict[str, float | int] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    markdown: str = ""

    def write_metrics(self, path: Path) -> None:
        """Write `metrics` as sorted JSON (the file named in dvc.yaml `metrics:`)."""
        write_json(path, self.metrics)
