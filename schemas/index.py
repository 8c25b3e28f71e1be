"""Tables written by `ingest` into `data/index/` (the contract every later stage reads).

Geometry convention (used everywhere in vrsflow): boxes are `[x1, y1, x2, y2]` in pixels of the
frame they belong to, with exclusive right/bottom edges (`x2 = x1 + width`, as pycocotools'
`toBbox` [x, y, w, h] gives), so a one-pixel object at column 3 spans x1=3, x2=4. A box of an
absent object is NaN in all four coordinates and its area is 0.
"""

from __future__ import annotations

from typing import Optional

import pandas as pd
import pandera.pandas as pa
from pandera.typing import Series

EXPRESSION_TYPES = ("referring", "reasoning", "no_target")  # ReVOS type_id 0, 1, 2
SPLITS = ("train", "valid")


def _is_int_list(series: pd.Series) -> pd.Series:
    def ok(v) -> bool:
        return hasattr(v, "__len__") and not isinstance(v, str) and all(int(x) == x for x in v)

    return series.map(ok)


class VideosSchema(pa.DataFrameModel):
    """One row per video."""

    video: Series[str] = pa.Field(unique=True, description="video key, a path: <SOURCE>/<split>/<id>")
    vid_id: Series[str]
    split: Series[str] = pa.Field(isin=SPLITS)
    height: Series[int] = pa.Field(gt=0)
    width: Series[int] = pa.Field(gt=0)
    n_frames: Series[int] = pa.Field(gt=0)
    frames: Series[object] = pa.Field(description="sorted 5-digit frame names, without extension")
    # with data.sources: the training source ("root" = data.root's valid split); absent with data.root alone
    source: Optional[Series[str]] = pa.Field(str_length={"min_value": 1})  # noqa: UP045 (pandera needs Optional)

    @pa.check("frames", name="frames_are_sorted_unique_strings")
    def _frames_sorted(cls, frames: Series[object]) -> Series[bool]:
        return frames.map(lambda f: all(isinstance(x, str) for x in f) and list(f) == sorted(set(f)) and len(f) > 0)

    @pa.dataframe_check(name="n_frames_matches_frames")
    def _n_frames(cls, df: pd.DataFrame) -> Series[bool]:
        return df["frames"].map(len) == df["n_frames"]

    class Config:
        strict = True
        coerce = True


class ExpressionsSchema(pa.DataFrameModel):
    """One row per (video, expression)."""

    expression_id: Series[str] = pa.Field(unique=True, description="'<video>#<exp_id>', unique over splits")
    video: Series[str]
    exp_id: Series[str]
    split: Series[str] = pa.Field(isin=SPLITS)
    text: Series[str] = pa.Field(str_length={"min_value": 1})
    type: Series[str] = pa.Field(isin=EXPRESSION_TYPES)
    type_id: Series[int] = pa.Field(isin=[0, 1, 2])
    obj_ids: Series[object]
    anno_ids: Series[object]
    n_instances: Series[int] = pa.Field(ge=0)
    source: Optional[Series[str]] = pa.Field(str_length={"min_value": 1})  # noqa: UP045 (as in VideosSchema)
    # where `type` comes from: "annotation" (ReVOS type_id) or "layout" (the dataset defines every expression
    # as referring: MeViS, Ref-YouTube-VOS, Ref-DAVIS17); absent with data.root alone (annotation)
    type_source: Optional[Series[str]] = pa.Field(isin=["annotation", "layout"])  # noqa: UP045

    @pa.check("obj_ids", "anno_ids", name="integer_lists")
    def _int_lists(cls, series: Series[object]) -> Series[bool]:
        return _is_int_list(series)

    @pa.dataframe_check(name="n_instances_is_len_anno_ids")
    def _n_instances(cls, df: pd.DataFrame) -> Series[bool]:
        return df["anno_ids"].map(len) == df["n_instances"]

    @pa.dataframe_check(name="no_target_has_no_instances")
    def _no_target(cls, df: pd.DataFrame) -> Series[bool]:
        return (df["type"] == "no_target") == (df["n_instances"] == 0)

    class Config:
        strict = True
        coerce = True


class TracksSchema(pa.DataFrameModel):
    """One row per (anno_id, frame): the object's area and box, computed from the RLE without decoding."""

    anno_id: Series[int]
    video: Series[str]
    frame_idx: Series[int] = pa.Field(ge=0, description="position in the video's sorted frame list")
    frame: Series[str]
    area: Series[int] = pa.Field(ge=0)
    x1: Series[float] = pa.Field(nullable=True)
    y1: Series[float] = pa.Field(nullable=True)
    x2: Series[float] = pa.Field(nullable=True)
    y2: Series[float] = pa.Field(nullable=True)

    @pa.dataframe_check(name="box_iff_area")
    def _box_iff_area(cls, df: pd.DataFrame) -> Series[bool]:
        has_box = df[["x1", "y1", "x2", "y2"]].notna().all(axis=1)
        ordered = (df["x2"] > df["x1"]) & (df["y2"] > df["y1"])
        return (has_box == (df["area"] > 0)) & (~has_box | ordered)

    @pa.dataframe_check(name="unique_anno_frame")
    def _unique(cls, df: pd.DataFrame) -> Series[bool]:
        return ~df.duplicated(["anno_id", "frame_idx"])

    class Config:
        strict = True
        coerce = True


class QuarantineSchema(pa.DataFrameModel):
    """Items set aside (with `strict: false`) with the reason; the rest of the data proceeds."""

    stage: Series[str]
    kind: Series[str] = pa.Field(isin=["file", "video", "expression", "frame", "anno", "sample"])
    item: Series[str] = pa.Field(description="video key, '<video>#<exp_id>', '<video>/<frame>' or anno id")
    file: Series[str] = pa.Field(description="the file the problem was found in")
    reason: Series[str] = pa.Field(str_length={"min_value": 1})
    source: Optional[Series[str]] = pa.Field(str_length={"min_value": 1})  # noqa: UP045 (with data.sources)

    class Config:
        strict = True
        coerce = True


class SourcesSchema(pa.DataFrameModel):
    """With data.sources: one row per source of the index (`sources.parquet`; "root" = data.root's valid split)."""

    source: Series[str] = pa.Field(unique=True, str_length={"min_value": 1})
    layout: Series[str] = pa.Field(isin=["revos", "mevis", "refytvos", "refdavis"])
    root: Series[str]
    split: Series[str] = pa.Field(isin=SPLITS, description="the index split its rows are in")
    published_split: Series[str] = pa.Field(description="the split folder / file read, as published")
    share: Series[float] = pa.Field(ge=0, description="asked share of the SFT and GRPO pools (unnormalised)")
    type_source: Series[str] = pa.Field(isin=["annotation", "layout"])
    videos: Series[int] = pa.Field(ge=0)
    expressions: Series[int] = pa.Field(ge=0)
    quarantined: Series[int] = pa.Field(ge=0)

    class Config:
        strict = True
        coerce = True
