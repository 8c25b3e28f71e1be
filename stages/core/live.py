"""Training curves while a run goes: DVCLive's files (what `dvc exp show` and `dvc plots` read) and TensorBoard
event files beside them, one folder per training stage (`metrics/live/<stage>`).

Layout of a live folder (DVCLive's own): `metrics.json` (the latest value of every curve, and `step`),
`plots/metrics/<name>.tsv` (one file per curve: timestamp, step, value), and `tensorboard/` (event files;
`tensorboard --logdir metrics/live`). The step is the trainer's optimizer step (TRL: its global step; verl: its
training step), so a resumed run continues its curve: the rows after the checkpoint it resumes from are dropped
first, and TensorBoard is told the same (`purge_step`).

Only the main process writes. `live_callbacks` attaches DVCLive (transformers' `DVCLiveCallback`, subclassed)
and TensorBoard (transformers' `TensorBoardCallback` with its writer in the live folder) to a Trainer; about
`ARTIFACT_UPDATES` times a run (every step of a short one) it also hands the curve pictures to
`stages.core.progress.publish_markdown` (the flow's Prefect artifact).
"""

from __future__ import annotations

import csv
import json
import logging
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stages.core import progress

log = logging.getLogger(__name__)
METRICS_DIR = Path("plots") / "metrics"  # DVCLive's per-curve TSV files, under the live folder
TENSORBOARD_DIR = "tensorboard"
# the running stage's curve pictures are redrawn about this many times over a run (each a new version of the
# Prefect artifact, ~30 KB a picture: every step of a 10 000-step run would fill the Prefect database)
ARTIFACT_UPDATES = 40

Values = Callable[[dict], dict[str, float]]  # one Trainer log entry → curve name → value ({} for a non-step entry)
Render = Callable[[Path], str]  # a joined curve table (CSV) → markdown pictures


def live_dir(metrics_dir: Path, stage: str) -> Path:
    """The live folder of `stage` under the metrics folder: `metrics/live/<stage>`."""
    return Path(metrics_dir) / "live" / stage


def open_live(folder: Path, resume_step: int = 0):
    """A `dvclive.Live` on `folder` that continues at `resume_step` + 1 (rows after it dropped) or, at 0, starts
    a fresh curve (DVCLive clears its files). No DVC experiment, dvc.yaml or report of its own: the project's
    dvc.yaml declares the files."""
    from dvclive import Live

    folder = Path(folder)
    if resume_step > 0:
        truncate(folder, resume_step)
    live = Live(str(folder), resume=resume_step > 0, report=None, save_dvc_exp=False, dvcyaml=None)
    return live


def truncate(folder: Path, last_step: int) -> None:
    """Drop the rows after `last_step` from every curve of `folder`: steps logged after the checkpoint a rerun
    resumes from (a kill -9 between two checkpoints) are logged again by the rerun."""
    for path in sorted((Path(folder) / METRICS_DIR).rglob("*.tsv")):
        lines = path.read_text().splitlines()
        kept = lines[:1] + [line for line in lines[1:] if int(float(_field(lines[0], line, "step"))) <= last_step]
        if len(kept) != len(lines):
            path.write_text("\n".join(kept) + "\n")


def _field(header: str, line: str, name: str) -> str:
    return line.split("\t")[header.split("\t").index(name)]


def log_row(live, step: int, values: dict[str, float]) -> None:
    """One step of curves into `live` (its summary written too, so `dvc exp show` sees the step at once)."""
    live.step = step
    for name, value in values.items():
        if isinstance(value, int | float) and not math.isnan(float(value)):
            live.log_metric(name, float(value))
    live.next_step()


def write_live(rows: Sequence[dict], folder: Path) -> None:
    """`rows` (each with a `step`) as a whole new curve in `folder`: for logs read back after, or while, a run
    that has its own logger (verl)."""
    live = open_live(folder)
    for row in rows:
        log_row(live, int(row["step"]), {k: v for k, v in row.items() if k != "step"})
    live.end()


def read_live(folder: Path) -> list[dict]:
    """The curves of `folder` joined on the step: one dict per step (step as int, the others float; a curve
    without a value at that step is absent from its dict)."""
    rows: dict[int, dict] = {}
    base = Path(folder) / METRICS_DIR
    for path in sorted(base.rglob("*.tsv")) if base.is_dir() else []:
        name = path.relative_to(base).with_suffix("").as_posix()
        with open(path, newline="") as handle:
            for entry in csv.DictReader(handle, delimiter="\t"):
                step = int(float(entry["step"]))
                rows.setdefault(step, {"step": step})[name] = float(entry[path.stem])
    return [rows[s] for s in sorted(rows)]


def live_markdown(folder: Path, render: Render) -> str:
    """`render` on the curves of `folder` joined into one table; "" when there is no curve yet."""
    rows = read_live(folder)
    if not rows:
        return ""
    columns = ["step"] + sorted({k for r in rows for k in r} - {"step"})
    with tempfile.TemporaryDirectory(prefix="vrsflow-live-") as tmp:
        path = Path(tmp) / "curve.csv"
        with open(path, "w", newline="") as handle:
            writer = csv.DictWriter(handle, columns, restval="")
            writer.writeheader()
            writer.writerows(rows)
        return render(path)


def latest(folder: Path) -> dict[str, Any]:
    """DVCLive's summary of `folder` (`metrics.json`: the latest value of every curve and `step`); {} if none yet.

    DVCLive rewrites the file in place while a run logs, so a reader following the run can find it empty or half
    written: that reads as no summary yet (the next poll sees the whole file)."""
    path = Path(folder) / "metrics.json"
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def checkpoint_step(checkpoint: str | Path | None) -> int:
    """The optimizer step a Trainer checkpoint was saved at (0 for none: a fresh start)."""
    if not checkpoint:
        return 0
    return int(json.loads((Path(checkpoint) / "trainer_state.json").read_text())["global_step"])


def live_callbacks(trainer: Any, folder: Path, values: Values, render: Render, resume_step: int = 0,
                   updates: int = ARTIFACT_UPDATES) -> None:
    """Log `trainer`'s steps to DVCLive and TensorBoard in `folder` (main process only) while it trains.

    `values` maps a log entry to the curves (names shared by every engine of the stage); `render` draws the
    curve pictures, published about `updates` times over the run while a flow listens. `resume_step` is the step of the
    checkpoint the run resumes from (0: a fresh run, whose earlier curve is cleared).
    """
    from transformers.integrations import DVCLiveCallback, TensorBoardCallback

    class LiveCurve(DVCLiveCallback):
        """DVCLive at the trainer's own step, with our names, resumed at the checkpoint's step."""

        def setup(self, args, state, model) -> None:
            self._initialized = True
            if state.is_world_process_zero:
                self.live = open_live(folder, int(state.global_step))
                self._tokens, self._clock = int(getattr(state, "num_input_tokens_seen", 0) or 0), time.perf_counter()

        def on_log(self, args, state, control, model=None, logs=None, **kwargs) -> None:
            if not self._initialized:
                self.setup(args, state, model)
            if not state.is_world_process_zero or not logs:
                return
            row = values(logs)
            if not row:
                return
            row.update(self._throughput(state))
            log_row(self.live, int(state.global_step), row)
            step, interval = int(state.global_step), max(1, -(-int(state.max_steps) // updates))
            if progress.wants_markdown() and (step % interval == 0 or step == state.max_steps):
                progress.publish_markdown(live_markdown(folder, render))

        def _throughput(self, state) -> dict[str, float]:
            """Tokens per second since the last logged step (transformers counts them when asked to)."""
            tokens, clock = int(getattr(state, "num_input_tokens_seen", 0) or 0), time.perf_counter()
            rate = (tokens - self._tokens) / (clock - self._clock) if tokens > self._tokens else float("nan")
            self._tokens, self._clock = tokens, clock
            return {"tokens_per_s": rate} if not math.isnan(rate) else {}

    trainer.add_callback(LiveCurve(log_model=False))  # checkpoints are the stage's business, not DVCLive's
    trainer.remove_callback(TensorBoardCallback)  # report_to's, writing under the checkpoint folder
    if trainer.args.distributed_state.is_main_process:
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: TensorBoard hides the events a killed run wrote after the checkpoint the rerun resumes from
        writer = SummaryWriter(str(Path(folder) / TENSORBOARD_DIR), purge_step=resume_step + 1 if resume_step else None)
        trainer.add_callback(TensorBoardCallback(writer))
