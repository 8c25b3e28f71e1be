"""What a stage function returns: a small summary the flow publishes (Prefect artifacts) and
that the stage has already written as DVC metrics; and the helpers that make such summaries readable
where they are shown (pictures embedded in markdown, curves drawn as pictures, short log lines)."""

from __future__ import annotations

import base64
import csv
import io
import logging
import math
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from stages.core.io import write_json

SUMMARY_CHARS = 160  # longest one-line stage summary in the log
SKIPPED = "skipped.json"  # what a stage that trains only tiny models writes instead of weights (skipped_report)
# metric names that are timings (wall_s, samples_per_s, seconds_per_video, train_runtime): they differ between
# identical runs, so they stay in metrics/<stage>.json and out of any output file DVC hashes
_TIMING = re.compile(r"(_s|runtime)$|seconds")
EMBED_MAX_SIDE = 1600  # pictures embedded in markdown are shrunk to this longest side
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


@dataclass
class StageReport:
    """Summary of one stage run.

    Attributes:
        stage: stage name.
        metrics: flat numbers, also written to `metrics/<stage>.json` for `dvc metrics`.
        tables: named tables to show as Prefect table artifacts (counts per stratum, reasons...).
        markdown: optional free-form markdown (pictures embedded with `image_markdown` / `embed_images`).
    """

    stage: str
    metrics: dict[str, float | int] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    markdown: str = ""

    def write_metrics(self, path: Path) -> None:
        """Write `metrics` as sorted JSON (the file named in dvc.yaml `metrics:`)."""
        write_json(path, self.metrics)

    def summary_line(self, limit: int = SUMMARY_CHARS) -> str:
        """`<stage> done: k=v, …` cut to `limit` characters, naming how many metrics were left out and where
        all of them are (`metrics/<stage>.json`)."""
        return summary_line(f"{self.stage} done", self.metrics, limit, where=f"metrics/{self.stage}.json")


def skipped_report(stage: str, out_dir: Path, reason: str) -> StageReport:
    """A stage that had nothing to do: `out_dir` (its DVC output) holds only `SKIPPED` with the reason, the log says
    why in one line, and the metrics say {"skipped": 1}."""
    out_dir = Path(out_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    write_json(out_dir / SKIPPED, {"skipped": True, "reason": reason})
    logging.getLogger(f"stages.{stage}").info("%s: skipped (%s)", stage, reason)
    return StageReport(stage, metrics={"skipped": 1})


def is_timing(name: str) -> bool:
    """Whether a metric name is a timing (see _TIMING); the last dotted part is checked (`sft.wall_s`)."""
    return bool(_TIMING.search(name.rsplit(".", 1)[-1]))


def _number(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value)


def summary_line(head: str, values: dict, limit: int = SUMMARY_CHARS, where: str = "") -> str:
    """`head: k=v, k=v … (+n more in where)`, at most `limit` characters (the head and one item always shown)."""
    items = [f"{k}={_number(v)}" for k, v in values.items()]

    def line(shown: int) -> str:
        text = f"{head}:" + (" " + ", ".join(items[:shown]) if shown else "")
        if shown < len(items):
            text += f" (+{len(items) - shown} more" + (f" in {where})" if where else ")")
        return text

    shown = len(items)
    while shown > 1 and len(line(shown)) > limit:
        shown -= 1
    return line(shown)


def image_markdown(path: Path, alt: str = "") -> str:
    """`![alt](data:image/png;base64,…)` for a picture file: shows in a Prefect markdown artifact (which cannot
    reach files on the machine that ran the stage). Large pictures are shrunk to EMBED_MAX_SIDE."""
    from PIL import Image

    path = Path(path)
    with Image.open(path) as image:
        if max(image.size) <= EMBED_MAX_SIDE and image.format == "PNG":
            data = path.read_bytes()
        else:
            image = image.convert("RGB")
            image.thumbnail((EMBED_MAX_SIDE, EMBED_MAX_SIDE))
            buffer = io.BytesIO()
            image.save(buffer, format="PNG", optimize=True)
            data = buffer.getvalue()
    return f"![{alt}](data:image/png;base64,{base64.b64encode(data).decode('ascii')})"


def embed_images(markdown: str, base_dir: Path) -> str:
    """The markdown with every `![alt](relative/path.png)` whose file exists under `base_dir` replaced by the
    picture itself (a data URI); other links are left as they are."""
    def replace(match: re.Match[str]) -> str:
        target = match.group(2)
        if target.startswith(("data:", "http://", "https://")):
            return match.group(0)
        file = Path(base_dir) / target
        return image_markdown(file, match.group(1)) if file.is_file() else match.group(0)

    return _IMAGE.sub(replace, markdown)


def read_curve_table(path: Path) -> list[dict[str, str]]:
    """Rows of a CSV or TSV curve file (as `dvc plots` reads it)."""
    path = Path(path)
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t" if path.suffix == ".tsv" else ","))


def curve_picture(path: Path, x: str, columns: Sequence[str], title: str, ylabel: str) -> bytes:
    """A line chart (PNG bytes) of `columns` against `x` from a CSV/TSV curve file: one colour per series,
    named axes, a legend. Columns missing from the file are skipped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_curve_table(path)
    figure, axes = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    try:
        for i, column in enumerate(c for c in columns if rows and c in rows[0]):
            points = [(float(r[x]), float(r[column])) for r in rows if r.get(column) not in ("", None)]
            axes.plot([p[0] for p in points], [p[1] for p in points], label=column, color=f"C{i}", linewidth=1.5)
        axes.set_xlabel(x)
        axes.set_ylabel(ylabel)
        axes.set_title(title)
        axes.grid(alpha=0.3)
        if len(columns) > 1:
            axes.legend(fontsize=8)
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", metadata={"Software": None})
    finally:
        plt.close(figure)
    return buffer.getvalue()


def curve_markdown(path: Path, x: str, columns: Sequence[str], title: str, ylabel: str) -> str:
    """`curve_picture` as an embedded markdown image, under a `### title` heading."""
    data = base64.b64encode(curve_picture(path, x, columns, title, ylabel)).decode("ascii")
    return f"### {title}\n\n![{title}](data:image/png;base64,{data})\n"


def curves_markdown(path: Path, x: str, charts: Sequence[tuple[Sequence[str], str, str]]) -> str:
    """Several `curve_markdown` charts of one curve file, each (columns, title, y label); "" when the file
    is missing or empty (a stage that wrote no curve)."""
    path = Path(path)
    if not path.is_file() or not read_curve_table(path):
        return ""
    return "\n".join(curve_markdown(path, x, columns, title, ylabel) for columns, title, ylabel in charts)
