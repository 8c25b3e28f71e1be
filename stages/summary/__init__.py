"""`summary` stage: the headline figures of a pipeline run in one small metrics file, `metrics/summary.json`,
headline first (evaluation J&F, then what GRPO and SFT achieved, then the data), so that experiments compare
on a dozen columns instead of hundreds:

    dvc exp show --drop '.*' --keep 'Experiment|Created|^summary\\.'
    dvc exp show --only-changed --keep '^summary\\.'     # plus the params that differ between experiments
    dvc metrics diff --targets metrics/summary.json

Keys are `summary.<name>`, copied from the metrics file of the stage that measured it (a missing file or key is
left out, e.g. before the first evaluation). No other metrics file has a key starting with `summary.`, so DVC
shows them without a file prefix and the regex above selects exactly them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from stages.core.io import atomic_write_text
from stages.core.report import StageReport

# (summary key, metrics file stem, key in that file), in the order they are shown
HEADLINE = (
    ("summary.JF", "eval", "JF_overall"),
    ("summary.ceiling_JF", "eval", "ceiling_JF_overall"),  # the ground-truth answers, same segmenter (reference)
    ("summary.empty_JF", "eval", "empty_JF_overall"),  # the empty answers: no boxes, empty masks (reference)
    ("summary.constant_JF", "eval", "constant_JF_overall"),  # the SFT traces' prior given to every query (reference)
    ("summary.swap_JF", "eval", "swap_JF_overall"),  # the model on swapped queries (evaluate.swap_query)
    ("summary.J", "eval", "J_overall"),
    ("summary.F", "eval", "F_overall"),
    ("summary.JF_referring", "eval", "JF_referring"),
    ("summary.JF_reasoning", "eval", "JF_reasoning"),
    ("summary.R", "eval", "R_visa_overall"),
    ("summary.expressions", "eval", "n_expressions"),
    ("summary.grpo_reward_first", "grpo", "reward_first"),
    ("summary.grpo_reward_last", "grpo", "reward_last"),
    ("summary.grpo_reward_gain", "grpo", "reward_gain"),
    ("summary.sft_format_rate_before", "sft", "format_rate_before"),
    ("summary.sft_format_rate_after", "sft", "format_rate_after"),
    ("summary.sft_final_loss", "sft", "final_loss"),
    ("summary.traces_accepted", "filter", "accepted"),
    ("summary.acceptance_rate", "filter", "acceptance_rate"),
)
METRICS_FILES = tuple(dict.fromkeys(stem for _, stem, _ in HEADLINE))


def headline(metrics_dir: Path) -> dict[str, float | int]:
    """The headline figures from `metrics_dir/<stage>.json`, in HEADLINE order; floats rounded to 4 digits."""
    loaded: dict[str, dict] = {}
    for stem in METRICS_FILES:
        path = Path(metrics_dir) / f"{stem}.json"
        try:
            loaded[stem] = json.loads(path.read_text()) if path.is_file() else {}
        except ValueError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from err
    out: dict[str, float | int] = {}
    for key, stem, source in HEADLINE:
        value = loaded[stem].get(source)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                continue
            value = round(value, 4)
        out[key] = value
    return out


def summarize(metrics_dir: Path, out_path: Path) -> StageReport:
    """Write `out_path` (metrics/summary.json, keys in HEADLINE order, not sorted) and return its report."""
    figures = headline(metrics_dir)
    atomic_write_text(Path(out_path), json.dumps(figures, indent=1) + "\n")
    table = pd.DataFrame([{"figure": k, "value": v} for k, v in figures.items()], columns=["figure", "value"])
    return StageReport("summary", metrics=figures, tables={"headline": table})
