"""Tables of the `evaluate` stage: per-expression scores and per-expression inference records."""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

SCORE_STATUSES = ("ok", "missing_video", "missing_frame", "unreadable_frame", "bad_shape", "missing_anno")
# an answer's status (`stages.evaluate.select_prompt`): "no_boxes" = it parsed and holds no box; "degenerate_boxes" =
# it holds boxes but none covers any area inside the frame (inverted corners, zero width or height, outside it)
ANSWER_STATUSES = ("ok", "parse_failure", "no_boxes", "degenerate_boxes", "keyframe_not_shown")


class ExpressionScoresSchema(pa.DataFrameModel):
    """One row per scored expression (`data/evaluate/scores.parquet`); metrics are fractions (0–1)."""

    video: Series[str]
    exp_id: Series[str]
    expression_id: Series[str] = pa.Field(unique=True)
    type_id: Series[int] = pa.Field(isin=[0, 1, 2])
    text: Series[str]
    n_frames: Series[int] = pa.Field(ge=0)
    status: Series[str] = pa.Field(isin=SCORE_STATUSES, description="not ok: scored 0, as VISA does")
    J: Series[float] = pa.Field(ge=0, le=1)
    F: Series[float] = pa.Field(ge=0, le=1)
    R_visa: Series[float] = pa.Field(ge=0, le=1)
    R_binary: Series[float] = pa.Field(ge=0, le=1)
    JF: Series[float] = pa.Field(ge=0, le=1)

    class Config:
        strict = True
        coerce = True


class InferenceSchema(pa.DataFrameModel):
    """One row per evaluated expression (`data/evaluate/answers.parquet`): what the model saw and said.

    Lists: frame_indices / timestamps (N, frames shown), boxes (the parsed boxes at the shown frame size,
    [] when none), rounds (RCoT-Seg: keyframe timestamps tried, in order).
    """

    sample_id: Series[str] = pa.Field(unique=True)
    expression_id: Series[str] = pa.Field(unique=True)
    video: Series[str]
    exp_id: Series[str]
    type_id: Series[int] = pa.Field(isin=[0, 1, 2])
    text: Series[str]
    n_video_frames: Series[int] = pa.Field(gt=0)
    frame_indices: Series[object]
    timestamps: Series[object]
    frame_size: Series[int] = pa.Field(gt=0, description="square side the frames were shown at")
    response: Series[str]
    status: Series[str] = pa.Field(isin=ANSWER_STATUSES)
    keyframe_timestamp: Series[float] = pa.Field(nullable=True, description="answered (snapped to a shown frame)")
    keyframe_idx: Series[float] = pa.Field(nullable=True, description="video frame index prompted to SAM2")
    boxes: Series[object]
    n_rounds: Series[int] = pa.Field(ge=1, description="keyframe selections (RCoT-Seg: up to max_rounds)")
    rounds: Series[object]
    keyframe_area_ratio: Series[float] = pa.Field(nullable=True, ge=0, le=1)
    keyframe_box_iou: Series[float] = pa.Field(nullable=True, ge=0, le=1)

    @pa.dataframe_check(name="no_boxes_without_boxes_and_degenerate_boxes_with_boxes")
    def _box_statuses(cls, df: pd.DataFrame) -> Series[bool]:
        # a table written before the two were told apart labels degenerate boxes "no_boxes": refused here
        # (`stages.evaluate.read_answers` relabels such a table)
        n_boxes = df["boxes"].map(len)
        return ~(((df["status"] == "no_boxes") & (n_boxes > 0))
                 | ((df["status"] == "degenerate_boxes") & (n_boxes == 0)))

    class Config:
        strict = True
        coerce = True
