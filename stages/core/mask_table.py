"""ingest's mask table (`<index_dir>/masks.parquet`, schemas/masks.py): the ground-truth RLEs that later
stages read instead of parsing `mask_dict.json` again.

Written while ingest streams mask_dict.json, one anno_id at a time, in row groups of bounded size
(`MaskTableWriter`); read one row group at a time keeping only the anno_ids asked for (`read_masks`), so
neither side holds more than one row group plus what it keeps. A frame without a mask (null in
mask_dict.json) is a null `counts`; the RLEs come back as mask_dict.json holds them:
`{"size": [h, w], "counts": "<COCO compressed string>"}` or None.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from schemas.masks import ARROW_SCHEMA, MasksSchema

FILE = "masks.parquet"
ROW_GROUP_ROWS = 65_536  # rows per row group, at most …
ROW_GROUP_CHARS = 32 << 20  # … and RLE characters per row group (a 720p frame's RLE is ~1-3 KB)
# lz4: the counts strings decode ~2x faster than with zstd for a file ~2x larger (~1/3 of mask_dict.json's
# size); every read decodes the whole counts column, so decoding speed is what later stages wait on
COMPRESSION = "lz4"
DICTIONARY = ["anno_id", "frame_idx", "height", "width"]  # counts strings are unique: no dictionary

class MaskTableWriter:
    """Append anno_ids' per-frame RLEs to a new parquet file, flushing a row group whenever it is full.

    Use as a context manager: the file is complete after a clean exit, and removed after an exception.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(self.path, ARROW_SCHEMA, compression=COMPRESSION, use_dictionary=DICTIONARY)
        self._columns: dict[str, list] = {name: [] for name in ARROW_SCHEMA.names}
        self._chars = 0
        self.anno_ids: list[int] = []  # in the order written

    def add(self, anno_id: int, masks: list[dict | None], height: int, width: int) -> None:
        """One anno_id's masks, one per frame (None = no mask). Sizes must already be checked = (height, width)."""
        columns, n = self._columns, len(masks)
        counts = [None if m is None else m["counts"] for m in masks]
        columns["anno_id"] += [anno_id] * n
        columns["frame_idx"] += range(n)
        columns["height"] += [height] * n
        columns["width"] += [width] * n
        columns["counts"] += counts
        self._chars += sum(len(c) for c in counts if c is not None)
        self.anno_ids.append(anno_id)
        if len(columns["anno_id"]) >= ROW_GROUP_ROWS or self._chars >= ROW_GROUP_CHARS:
            self._flush()

    def add_rows(self, table: pa.Table) -> None:
        """Rows of an existing mask table (whole anno_ids), appended as they are."""
        for name in ARROW_SCHEMA.names:
            self._columns[name] += table[name].to_pylist()
        self._chars += int(pc.sum(pc.utf8_length(table["counts"])).as_py() or 0)
        annos = table["anno_id"].to_pylist()
        self.anno_ids += [a for i, a in enumerate(annos) if i == 0 or annos[i - 1] != a]
        if len(self._columns["anno_id"]) >= ROW_GROUP_ROWS or self._chars >= ROW_GROUP_CHARS:
            self._flush()

    def _flush(self) -> None:
        if not self._columns["anno_id"]:
            return
        table = pa.table(self._columns, schema=ARROW_SCHEMA)
        MasksSchema.validate(table.to_pandas(), lazy=True)  # one row group at a time (strings not copied again)
        self._writer.write_table(table)
        self._columns = {name: [] for name in ARROW_SCHEMA.names}
        self._chars = 0

    def close(self) -> None:
        self._flush()
        self._writer.close()

    def __enter__(self) -> MaskTableWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        self._writer.close()
        self.path.unlink(missing_ok=True)


def finish(tmp: Path, path: Path, keep: set[int]) -> int:
    """Move the table written at `tmp` to `path`, keeping only the anno_ids in `keep` (another streaming pass
    only when some must go). Returns the number of rows written."""
    tmp, path = Path(tmp), Path(path)
    source = pq.ParquetFile(tmp)
    annos = pc.unique(source.read(columns=["anno_id"])["anno_id"]).to_pylist()
    if set(annos) <= keep:
        rows = source.metadata.num_rows
        source.close()
        os.replace(tmp, path)
        return rows
    wanted = pa.array(sorted(keep), type=pa.int64())
    with MaskTableWriter(path) as writer:
        for i in range(source.num_row_groups):
            group = source.read_row_group(i)
            writer.add_rows(group.filter(pc.is_in(group["anno_id"], value_set=wanted)))
    source.close()
    tmp.unlink()
    return pq.ParquetFile(path).metadata.num_rows


def read_masks(path: Path, wanted: Iterable[int]) -> dict[int, list[dict | None]]:
    """The per-frame RLEs (None = no mask) of the `wanted` anno_ids found in the table at `path`; anno_ids
    not in the table are absent from the result (the caller decides whether that is an error).

    Raises:
        ValueError: the table is missing, unreadable, not a mask table, or an anno_id's frames are not
            0, 1, …, T-1 in order (the message names the file).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: mask table missing (written by the ingest stage: re-run ingest)")
    try:
        source = pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as err:
        raise ValueError(f"{path}: unreadable mask table: {err}") from err
    if not source.schema_arrow.equals(ARROW_SCHEMA):
        raise ValueError(f"{path}: not a mask table (columns {source.schema_arrow.names}, expected "
                         f"{ARROW_SCHEMA.names}); re-run ingest")
    ids = np.unique(np.fromiter((int(a) for a in wanted), dtype=np.int64))
    found: dict[int, list[dict | None]] = {}
    with source:
        for i in range(source.num_row_groups):
            stats = source.metadata.row_group(i).column(0).statistics
            if stats is not None and stats.has_min_max:  # no wanted anno_id within [min, max]: not read
                if np.searchsorted(ids, stats.min, side="left") >= np.searchsorted(ids, stats.max, side="right"):
                    continue
            annos = source.read_row_group(i, columns=["anno_id"])["anno_id"].to_numpy()
            keep = np.isin(annos, ids)
            if keep.any():
                _collect(path, source.read_row_group(i, columns=ARROW_SCHEMA.names[1:]), annos, keep, found)
    return found


def _collect(path: Path, group: pa.Table, annos: np.ndarray, keep: np.ndarray,
             found: dict[int, list[dict | None]]) -> None:
    """Append the kept rows of a row group (whole or partial anno_ids, frames in order) to `found`; only
    their counts strings become Python objects."""
    frames, heights, widths = (group[name].to_numpy() for name in ("frame_idx", "height", "width"))
    counts_column = group["counts"].combine_chunks()
    starts = np.flatnonzero(np.r_[True, annos[1:] != annos[:-1]])
    for start, end in zip(starts, np.r_[starts[1:], len(annos)], strict=True):
        if not keep[start]:
            continue
        anno = int(annos[start])
        counts = counts_column.slice(start, end - start).to_pylist()
        masks = found.setdefault(anno, [])
        got, expected = frames[start:end], np.arange(len(masks), len(masks) + end - start)
        if not np.array_equal(got, expected):
            k = int(np.argmax(got != expected))
            raise ValueError(f"{path}: anno_id {anno}: frame {int(got[k])} where frame {int(expected[k])} was "
                             "expected (a damaged table: re-run ingest)")
        sizes = zip(heights[start:end].tolist(), widths[start:end].tolist(), strict=True)
        masks.extend(None if c is None else {"size": [h, w], "counts": c} for c, (h, w) in zip(counts, sizes,
                                                                                                strict=True))
