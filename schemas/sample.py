"""Tables of the `sample` and `keyframes` stages."""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

from schemas.index import EXPRESSION_TYPES, SPLITS

POOLS = ("sft", "grpo", "eval")


class SampleSchema(pa.DataFrameModel):
    """One row per sampled expression of a pool (`data/sample/<pool>.parquet`)."""

    sample_id: Series[str] = pa.Field(unique=True, str_matches=r"^[A-Za-z0-9_-]+$")
    pool: Series[str] = pa.Field(isin=POOLS)
    expression_id: Series[str] = pa.Field(unique=True)
    video: Series[str]
    exp_id: Series[str]
    split: Series[str] = pa.Field(isin=SPLITS)
    text: Series[str] = pa.Field(str_length={"min_value": 1})
    type: Series[str] = pa.Field(isin=EXPRESSION_TYPES)
    n_instances: Series[int] = pa.Field(ge=0)
    anno_ids: Series[object]
    stratum: Series[str] = pa.Field(description="type/instances[/motion][/level]")
    motion: Series[float] = pa.Field(ge=0, description="max box-centre travel of a target ÷ frame diagonal")
    level: Series[str] = pa.Field(nullable=True, description="difficulty level when difficulty strata are on")
    tasks: Series[object] = pa.Field(description="task names (stages/tasks) this sample is trained / scored on")

    class Config:
        strict = True
        coerce = True


class DistributionSchema(pa.DataFrameModel):
    """Counts per stratum in the source and in each pool."""

    group: Series[str] = pa.Field(description="source:<split> or a pool name")
    stratum: Series[str]
    count: Series[int] = pa.Field(ge=0)
    fraction: Series[float] = pa.Field(ge=0, le=1)

    class Config:
        strict = True
        coerce = True


class MixtureSchema(pa.DataFrameModel):
    """With data.sources: per pool and source, the asked share and the achieved count (`mixture.parquet`)."""

    pool: Series[str] = pa.Field(isin=POOLS)
    source: Series[str]
    share: Series[float] = pa.Field(ge=0, le=1, description="asked share, normalised over the pool's sources")
    count: Series[int] = pa.Field(ge=0)
    fraction: Series[float] = pa.Field(ge=0, le=1, description="achieved share of the pool")

    class Config:
        strict = True
        coerce = True


class KeyframesSchema(SampleSchema):
    """Per sample: keyframe, sampled frames and geometry at train resolution (`data/keyframes/<pool>.parquet`).

    List columns: frame_indices, frame_names, timestamps (N); topk_indices; boxes (N × K × 4, null when
    the object is absent), areas (N × K), union_areas (N), union_masks (N COCO RLE JSON strings of the
    union target mask at the ORIGINAL resolution), ktg_points (K × 2, null when absent at the keyframe),
    aks_valid, aks_invalid (frame indices).
    """

    height: Series[int] = pa.Field(gt=0)
    width: Series[int] = pa.Field(gt=0)
    n_video_frames: Series[int] = pa.Field(gt=0)
    frame_indices: Series[object]
    frame_names: Series[object]
    timestamps: Series[object]
    keyframe_pos: Series[int] = pa.Field(ge=0)
    keyframe_idx: Series[int] = pa.Field(ge=0)
    keyframe_timestamp: Series[int] = pa.Field(ge=0)
    keyframe_mode: Series[str] = pa.Field(isin=["topk_random", "max_area"])
    frame_spread: Series[str] = pa.Field(isin=["anchor", "uniform"], description="keyframes.frames: anchor (N frames "
                                         "around the keyframe) | uniform (the evaluation's spread over the video)")
    topk_indices: Series[object]
    boxes: Series[object]
    areas: Series[object]
    union_areas: Series[object]
    union_masks: Series[object]
    ktg_points: Series[object]
    aks_valid: Series[object]
    aks_invalid: Series[object]
    aks_option: Series[str] = pa.Field(isin=["A", "B"], description="A: aks_frame_idx is a valid keyframe "
                                       "(in aks_valid); B: a zero-area frame (in aks_invalid); 1:1 per pool over "
                                       "samples that have both")
    aks_frame_idx: Series[int] = pa.Field(ge=0)
    aks_frame_name: Series[str] = pa.Field(description="the candidate frame's file, from ingest's frame list")
    aks_boxes: Series[object] = pa.Field(description="per object box at the candidate frame (train size), null absent")
    aks_areas: Series[object] = pa.Field(description="per object area at the candidate frame (train size)")
    aks_union_mask: Series[str] = pa.Field(description="COCO RLE JSON of the union target at the candidate frame")
    keyframe_size: Series[int] = pa.Field(gt=0, description="side of single-frame task views (AKS, KTG)")
    video_union_areas: Series[object] = pa.Field(description="union target area per video frame, original pixels")
    train_size: Series[int] = pa.Field(gt=0)
    seed: Series[int]

    @pa.dataframe_check(name="sampled_frames_valid_and_contain_keyframe")
    def _frames(cls, df: pd.DataFrame) -> Series[bool]:
        def ok(row: pd.Series) -> bool:
            idx = list(row["frame_indices"])
            increasing = all(a < b for a, b in zip(idx, idx[1:], strict=False))
            in_range = all(0 <= i < row["n_video_frames"] for i in idx)
            return (increasing and in_range and idx[row["keyframe_pos"]] == row["keyframe_idx"]
                    and list(row["timestamps"])[row["keyframe_pos"]] == row["keyframe_timestamp"])

        return df.apply(ok, axis=1) if len(df) else pd.Series([], dtype=bool)

    @pa.dataframe_check(name="keyframe_and_aks_frame_among_their_candidates")
    def _candidates(cls, df: pd.DataFrame) -> Series[bool]:
        def ok(row: pd.Series) -> bool:
            aks = list(row["aks_valid"] if row["aks_option"] == "A" else row["aks_invalid"])
            keyframe_ok = row["n_instances"] == 0 or row["keyframe_idx"] in list(row["topk_indices"])
            return keyframe_ok and row["aks_frame_idx"] in aks

        return df.apply(ok, axis=1) if len(df) else pd.Series([], dtype=bool)
