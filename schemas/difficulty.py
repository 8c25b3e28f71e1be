"""Table of the `difficulty` stage (`data/difficulty/scores.parquet`)."""

from __future__ import annotations

import pandera.pandas as pa
from pandera.typing import Series

from schemas.sample import POOLS

LEVELS = ("easy", "medium", "hard")


class DifficultySchema(pa.DataFrameModel):
    """VideoSeg-R1's five ratings, their mean D, the level and the reasoning-token budget L(D)."""

    sample_id: Series[str] = pa.Field(unique=True)
    pool: Series[str] = pa.Field(isin=POOLS)
    expression_id: Series[str]
    scene_complexity: Series[int] = pa.Field(ge=1, le=10)
    segmentation_challenge: Series[int] = pa.Field(ge=1, le=10)
    temporal_ambiguity: Series[int] = pa.Field(ge=1, le=10)
    motion_complexity: Series[int] = pa.Field(ge=1, le=10)
    linguistic_ambiguity: Series[int] = pa.Field(ge=1, le=10)
    difficulty: Series[float] = pa.Field(ge=1, le=10)
    level: Series[str] = pa.Field(isin=LEVELS)
    token_budget: Series[int] = pa.Field(gt=0)
    backend: Series[str] = pa.Field(isin=["heuristic", "mllm"])

    class Config:
        strict = True
        coerce = True
