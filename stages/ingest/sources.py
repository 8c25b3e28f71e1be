"""Several training sources in one index (`data.sources`; docs/sampling.md, "Training sources").

Each source is a dataset root in its published layout, read by its own reader:

| layout | split read | reader | expression type |
|---|---|---|---|
| revos | `meta_expressions_<split>_.json` | `stages.ingest.ingest` as for `data.root` | annotated (`type_id` 0/1/2) |
| mevis | `<split>/meta_expressions.json` + `<split>/mask_dict.json` | `benchmarks._read_mevis` | referring |
| refytvos | `meta_expressions/<split>/…`, palette PNGs `<split>/Annotations/` | `_read_palette` | referring |
| refdavis | the same (ReferFormer's conversion: 4 annotator expressions per object) | as refytvos | referring |

MeViS, Ref-YouTube-VOS and Ref-DAVIS17 carry no referring / reasoning type: their expressions are referring
expressions by the datasets' own definition, so they enter the index as `referring` with `type_source` =
"layout" (ReVOS rows: "annotation"); the sample stage reports it per source, never silently.

A non-ReVOS source is read by its reader, written as a ReVOS-layout root in a scratch folder (frames linked,
not copied) and indexed by the same `ingest` code, so the same validation and quarantine rules apply to every
source. The per-source tables are then merged with source-qualified keys: video `<name>/<video>`, expression
`<name>/<video>#<exp_id>`, anno_id `<position> × ANNO_STRIDE + anno_id` (two datasets may both have a video
`0001` or an anno_id 7). Every source row is in the `train` split; `data.root` contributes its `valid` split
only (the evaluation pool) under its own keys, so `evaluate` reads it unchanged.

Later stages read the frames of a qualified key through `frames_root`: a folder of symbolic links
(`<frames_dir>/JPEGImages/<name>` → the source's frame folder, plus `data.root`'s top-level frame folders),
rebuilt from params by every stage that opens frames, so `revos.frame_path(frames_root, video, frame)` works for
every video of the index.

A missing or malformed source stops ingest with one line naming the source (`data.sources[i] (<name>): …`);
bad items inside a source follow `ingest.strict` as for ReVOS.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from schemas.index import ExpressionsSchema, QuarantineSchema, SourcesSchema, TracksSchema, VideosSchema
from stages.core import mask_table
from stages.core.frames_root import ROOT_SOURCE, frames_dir_of, frames_root  # noqa: F401 (re-exported)
from stages.core.ids import expression_id
from stages.core.io import write_table
from stages.core.lineage import write_lineage
from stages.core.params import DataParams, SourceParams
from stages.core.report import StageReport, summary_line
from stages.core.revos import RevosFormatError
from stages.core.runner import RunnerParams
from stages.ingest.benchmarks import read_benchmark, to_revos
from stages.ingest.checks import IngestError, Problems
from stages.params.ingest import IngestParams

log = logging.getLogger(__name__)
ANNO_STRIDE = 10**9  # source i's anno_ids are i · ANNO_STRIDE + the published anno_id (data.root keeps its own)
TYPE_SOURCE = {"revos": "annotation", "mevis": "layout", "refytvos": "layout", "refdavis": "layout"}


def ingest_data(params: IngestParams, data: DataParams, runner: RunnerParams | None = None) -> StageReport:
    """The ingest stage: `data.root` alone (`stages.ingest.ingest`), or `data.root`'s valid split plus every
    source's training split in one index at `data.index_dir`."""
    from stages.ingest import ingest

    if not data.sources:
        (Path(data.index_dir) / "sources.parquet").unlink(missing_ok=True)  # left by an earlier mixture run
        return ingest(params, Path(data.root), Path(data.index_dir), runner)
    out_dir = Path(data.index_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for i, source in enumerate(data.sources):
        if not Path(source.root).is_dir():
            raise IngestError(f"data.sources[{i}] ({source.name}): root {source.root} is not a folder")
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=f".{out_dir.name}-sources-") as scratch:
        scratch_dir = Path(scratch)
        indexed: dict[Path, Path] = {}  # a ReVOS root listed twice (data.root and a source) is indexed once
        root = Path(data.root)
        indexed[root.resolve()] = _ingest_revos(ingest, params, root, scratch_dir / "_root", runner, "data.root")
        parts = [_Part(ROOT_SOURCE, "revos", root, "valid", 0, indexed[root.resolve()])]
        for i, source in enumerate(data.sources, start=1):
            where = f"data.sources[{i - 1}] ({source.name})"
            if source.layout == "revos":
                resolved = Path(source.root).resolve()
                if resolved not in indexed:
                    indexed[resolved] = _ingest_revos(ingest, params, Path(source.root), scratch_dir / source.name,
                                                      runner, where)
                index = indexed[resolved]
            else:
                index = _ingest_layout(ingest, params, source, scratch_dir, runner, where)
            parts.append(_Part(source.name, source.layout, Path(source.root),
                               "train" if source.split == "train" else "valid", i, index))
        return _merge(params, data, parts, out_dir)


class _Part:
    """One source's own index (in a scratch folder) and how it joins the merged one."""

    def __init__(self, name: str, layout: str, root: Path, split: str, position: int, index: Path) -> None:
        self.name, self.layout, self.root, self.split, self.position, self.index = (
            name, layout, root, split, position, index)

    def key(self, video: str) -> str:
        return video if self.name == ROOT_SOURCE else f"{self.name}/{video}"

    def anno(self, anno: int) -> int:
        return self.position * ANNO_STRIDE + int(anno)


def _ingest_revos(ingest, params: IngestParams, root: Path, out: Path, runner: RunnerParams | None,
                  where: str) -> Path:
    try:
        ingest(params, root, out, runner)
    except IngestError as err:
        raise IngestError(f"{where}: {err}") from err
    return out


def _ingest_layout(ingest, params: IngestParams, source: SourceParams, scratch: Path,
                   runner: RunnerParams | None, where: str) -> Path:
    """Read a non-ReVOS source with its layout's reader, write it as a ReVOS root (frames linked) and index it."""
    problems = Problems(strict=params.strict, root=Path(source.root))
    try:
        bench = read_benchmark(source.layout, Path(source.root), source.split, problems)
        revos_root = to_revos(bench, scratch / f"{source.name}.revos", link_frames=True)
        ingest(params, revos_root, scratch / source.name, runner)
    except (RevosFormatError, IngestError) as err:
        raise IngestError(f"{where}: {err}") from err
    if problems.rows:  # the reader's own quarantine rows join the index's
        path = scratch / source.name / "quarantine.parquet"
        quarantine = pd.read_parquet(path)
        extra = pd.DataFrame(problems.rows, columns=list(quarantine.columns))
        write_table(pd.concat([extra, quarantine], ignore_index=True), QuarantineSchema, path)
    return scratch / source.name


def _merge(params: IngestParams, data: DataParams, parts: list[_Part], out_dir: Path) -> StageReport:
    videos, expressions, tracks, quarantine = [], [], [], []
    kept_annos: dict[int, set[int]] = {}
    for part in parts:
        # the parts were validated when ingest wrote them a moment ago (the merged tables are, again, below)
        v = pd.read_parquet(part.index / "videos.parquet")
        e = pd.read_parquet(part.index / "expressions.parquet")
        t = pd.read_parquet(part.index / "tracks.parquet")
        q = pd.read_parquet(part.index / "quarantine.parquet")
        v, e = v[v["split"] == part.split], e[e["split"] == part.split]
        annos = {int(a) for ids in e["anno_ids"] for a in ids}
        t = t[t["anno_id"].isin(annos)]
        kept_annos[part.position] = annos
        v = v.assign(video=v["video"].map(part.key), split="train" if part.name != ROOT_SOURCE else part.split,
                     source=part.name)
        e = e.assign(video=e["video"].map(part.key), split="train" if part.name != ROOT_SOURCE else part.split,
                     anno_ids=e["anno_ids"].map(lambda ids, p=part: [p.anno(a) for a in ids]),
                     source=part.name, type_source=TYPE_SOURCE[part.layout])
        e["expression_id"] = [expression_id(video, exp) for video, exp in zip(e["video"], e["exp_id"], strict=True)]
        t = t.assign(anno_id=t["anno_id"].map(part.anno), video=t["video"].map(part.key))
        if part.name != ROOT_SOURCE:
            q = q.assign(item=q["item"].map(lambda item, p=part: f"{p.name}/{item}"),
                         file=q["file"].map(lambda f, p=part: (p.root / f).as_posix()))
        quarantine.append(q.assign(source=part.name))
        videos.append(v)
        expressions.append(e)
        tracks.append(t)
    videos_df = pd.concat(videos, ignore_index=True).sort_values("video").reset_index(drop=True)
    expressions_df = pd.concat(expressions, ignore_index=True).sort_values(
        ["video", "exp_id"], key=lambda col: col.map(_natural) if col.name == "exp_id" else col).reset_index(drop=True)
    tracks_df = pd.concat(tracks, ignore_index=True).sort_values(["anno_id", "frame_idx"]).reset_index(drop=True)
    quarantine_df = pd.concat(quarantine, ignore_index=True)
    write_table(videos_df, VideosSchema, out_dir / "videos.parquet")
    write_table(expressions_df, ExpressionsSchema, out_dir / "expressions.parquet")
    write_table(tracks_df, TracksSchema, out_dir / "tracks.parquet")
    write_table(quarantine_df, QuarantineSchema, out_dir / "quarantine.parquet")
    mask_rows = _merge_masks(parts, kept_annos, out_dir / mask_table.FILE)
    if mask_rows != len(tracks_df):
        raise AssertionError(f"ingest: {mask_rows} mask rows but {len(tracks_df)} track rows")
    return _report(params, data, parts, out_dir, videos_df, expressions_df, tracks_df, quarantine_df)


def _natural(exp_id: str) -> tuple[int, str]:
    return (int(exp_id), exp_id) if str(exp_id).isdigit() else (1 << 62, str(exp_id))


def _merge_masks(parts: list[_Part], kept: dict[int, set[int]], path: Path) -> int:
    """Every part's mask table, one row group at a time, with source-qualified anno_ids (ascending: parts are
    in position order and each part's table is sorted by its own anno_id)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with mask_table.MaskTableWriter(tmp) as writer:
        for part in parts:
            wanted = pa.array(sorted(kept[part.position]), type=pa.int64())
            source = pq.ParquetFile(part.index / mask_table.FILE)
            with source:
                for i in range(source.num_row_groups):
                    group = source.read_row_group(i)
                    group = group.filter(pc.is_in(group["anno_id"], value_set=wanted))
                    if group.num_rows:
                        shifted = pc.add(group["anno_id"], pa.scalar(part.position * ANNO_STRIDE, pa.int64()))
                        writer.add_rows(group.set_column(0, "anno_id", shifted))
    os.replace(tmp, path)
    return pq.ParquetFile(path).metadata.num_rows


def _share(data: DataParams, source: SourceParams | None, expressions: pd.DataFrame) -> float:
    """The share a source asks for: its `share`, or with `data.mix: union` its size (training expressions with a
    target); 0 for data.root's valid split."""
    if source is None:
        return 0.0
    if data.mix == "union":
        return float(((expressions["source"] == source.name) & (expressions["n_instances"] > 0)).sum())
    return source.share


def _report(params: IngestParams, data: DataParams, parts: list[_Part], out_dir: Path, videos: pd.DataFrame,
            expressions: pd.DataFrame, tracks: pd.DataFrame, quarantine: pd.DataFrame) -> StageReport:
    from stages.ingest import _strata

    counts = {"videos": len(videos), "expressions": len(expressions), "tracks": len(tracks),
              "quarantined": len(quarantine)}
    given = {s.name: s for s in data.sources}
    per_source = pd.DataFrame([
        {"source": p.name, "layout": p.layout, "root": p.root.as_posix(),
         "split": "valid" if p.name == ROOT_SOURCE else "train",
         "published_split": given[p.name].split if p.name in given else "valid",
         "share": _share(data, given.get(p.name), expressions), "type_source": TYPE_SOURCE[p.layout],
         "videos": int((videos["source"] == p.name).sum()),
         "expressions": int((expressions["source"] == p.name).sum()),
         "quarantined": int((quarantine["source"] == p.name).sum())} for p in parts])
    write_table(per_source, SourcesSchema, out_dir / "sources.parquet")
    sources = per_source[["source", "layout", "root", "published_split", "share"]].to_dict("records")
    inputs = {f"source:{p.name}": p.root for p in parts}
    write_lineage(out_dir, "ingest", {"ingest": params, "data": data}, inputs=inputs, counts=counts,
                  code_modules=["stages.ingest", "stages.core.revos", "stages.core.rle", "stages.core.mask_table",
                                "schemas.index", "schemas.masks"],
                  extra={"sources": sources})
    metrics: dict[str, float | int] = dict(counts)
    for row in per_source.itertuples(index=False):
        metrics[f"source.{row.source}.videos"] = row.videos
        metrics[f"source.{row.source}.expressions"] = row.expressions
        metrics[f"source.{row.source}.quarantined"] = row.quarantined
    for row in _strata(expressions).itertuples(index=False):
        metrics[f"{row.split}.{row.type}.{row.instances}"] = int(row.expressions)
    for kind, n in Counter(quarantine["kind"]).items():
        metrics[f"quarantined.{kind}"] = n
    reasons = (quarantine.groupby(["source", "kind", "reason"]).size().rename("items").reset_index()
               if len(quarantine) else pd.DataFrame(columns=["source", "kind", "reason", "items"]))
    log.info(summary_line("ingest", counts))
    return StageReport("ingest", metrics=dict(sorted(metrics.items())),
                       tables={"expressions per source": per_source, "expressions per stratum": _strata(expressions),
                               "quarantine reasons": reasons})

