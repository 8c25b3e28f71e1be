"""`data/index/masks.parquet`: the RLE of every (anno_id, frame) that ingest kept — the only place later
stages read ground-truth masks from, so that the (multi-GB on the real ReVOS) `mask_dict.json` is parsed
once per pipeline, by ingest.

One row per (anno_id, frame) of the anno_ids in `tracks.parquet` (the same rows, in mask_dict's order of
anno_ids, frames in order). `counts` is the COCO compressed RLE string exactly as mask_dict.json holds it,
null where mask_dict.json holds null (no mask on that frame — not the same as an empty RLE);
`height`/`width` are the RLE's `size`. The file is written and read in row groups
(`stages/core/mask_table.py`), never as one DataFrame, so this schema validates one row group at a time.
"""

from __future__ import annotations

import pandera.pandas as pa
import pyarrow as pa_arrow
from pandera.typing import Series

# the parquet columns and types (fixed, so that the bytes do not depend on what pandas infers)
ARROW_SCHEMA = pa_arrow.schema([
    ("anno_id", pa_arrow.int64()),
    ("frame_idx", pa_arrow.int32()),
    ("height", pa_arrow.int32()),
    ("width", pa_arrow.int32()),
    ("counts", pa_arrow.string()),
])


class MasksSchema(pa.DataFrameModel):
    """One row per (anno_id, frame): the frame's RLE (null: no mask in mask_dict.json)."""

    anno_id: Series[int]
    frame_idx: Series[int] = pa.Field(ge=0, description="position in the video's sorted frame list")
    height: Series[int] = pa.Field(gt=0, description="RLE size[0] (= the video's height)")
    width: Series[int] = pa.Field(gt=0, description="RLE size[1] (= the video's width)")
    counts: Series[str] = pa.Field(nullable=True, description="COCO compressed RLE counts; null = no mask")

    @pa.dataframe_check(name="unique_anno_frame")
    def _unique(cls, df) -> Series[bool]:
        return ~df.duplicated(["anno_id", "frame_idx"])

    class Config:
        strict = True
        coerce = True
