"""Tables of the `cot` and `filter` stages (the difficulty table lives in `schemas.difficulty`)."""

from __future__ import annotations

import pandera.pandas as pa
from pandera.typing import Series

from schemas.difficulty import LEVELS, DifficultySchema
from schemas.sample import POOLS

__all__ = ["LEVELS", "AcceptedSchema", "DifficultySchema", "GenerationsSchema", "RejectedSchema"]


class GenerationsSchema(pa.DataFrameModel):
    """One row per teacher request (`data/cot/generations.parquet`)."""

    request_key: Series[str] = pa.Field(unique=True, str_length={"min_value": 64, "max_value": 64})
    sample_id: Series[str]
    pool: Series[str] = pa.Field(isin=POOLS)
    trace_index: Series[int] = pa.Field(ge=0)
    task: Series[str] = pa.Field(description="the task (stages/tasks) the trace is written for")
    template_set: Series[str]
    template_id: Series[str]
    teacher: Series[str] = pa.Field(description="model name, or template-teacher-v1 for the offline backend")
    backend: Series[str] = pa.Field(isin=["template", "openai"])
    keyframe_timestamp: Series[int] = pa.Field(ge=0)
    text: Series[str]
    finish_reason: Series[str]
    prompt_tokens: Series[int] = pa.Field(ge=0)
    completion_tokens: Series[int] = pa.Field(ge=0, description="every output token, reasoning included")
    reasoning_tokens: Series[int] = pa.Field(ge=0, description="hidden reasoning tokens (usage "
                                             "completion_tokens_details.reasoning_tokens; 0 when not reported)")
    latency_s: Series[float] = pa.Field(ge=0)
    attempts: Series[int] = pa.Field(ge=0)
    error: Series[str]

    class Config:
        strict = True
        coerce = True


class AcceptedSchema(GenerationsSchema):
    """A trace that passed every filter rule, with the training response built from it."""

    response: Series[str] = pa.Field(str_startswith="<think>")


class RejectedSchema(GenerationsSchema):
    """A trace that failed a filter rule (the first that failed)."""

    reason: Series[str] = pa.Field(str_length={"min_value": 1})
