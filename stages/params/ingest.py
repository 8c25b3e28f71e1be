"""`ingest`: how deeply the dataset's frames and masks are checked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from stages.core.params import Fraction
from stages.core.typed_config import Exp


@dataclass(frozen=True)
class IngestParams:
    strict: Exp[bool] = True  # false: bad items go to the quarantine table and the rest proceeds
    check_jpeg: Exp[Literal["header", "decode"]] = "header"  # how deeply frames are checked
    foreground_tolerance: Exp[Fraction] = 0.0  # allowed fraction of pixels where foreground != union of masks
