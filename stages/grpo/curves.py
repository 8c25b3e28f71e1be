"""Per-step GRPO curves (reward total and per component, response length, KL, …) under one set of names for both
engines (DVCLive's files in `metrics/live/grpo`, `stages.core.live`), and the first/last-window summary that
shows whether the reward rises.

Both engines end here: TRL's log entries (`trl_row`, as it trains), or verl's file log (`verl_log.jsonl`: score
mean, response length, KL loss per step) joined with our reward log (`reward_log/*.jsonl`, one line per scored
rollout) and verl's rollout dumps (`rollouts/<step>.jsonl`), which say which rollouts belong to which step.
"""

from __future__ import annotations

import argparse
import csv
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from stages.core.io import atomic_write_text

CURVE_COLUMNS = ("step", "reward", "reward_std", "kl", "response_length")
TRL_KEYS = {"reward": "reward", "reward_std": "reward_std", "kl": "kl", "response_length": "completions/mean_length"}
# curves beside the reward, under the names both engines log them with (TRL's key; verl's in VERL_KEYS)
TRL_EXTRA = {"zero_std_share": "frac_reward_zero_std", "learning_rate": "learning_rate", "grad_norm": "grad_norm"}
VERL_KEYS = {"reward": "critic/score/mean", "kl": "actor/kl_loss", "response_length": "response_length/mean",
             "learning_rate": "actor/lr", "grad_norm": "actor/grad_norm", "step_s": "timing_s/step"}


def trl_row(entry: dict, component_prefix: str = "reward_components/",
            source_prefix: str = "reward_source/") -> dict[str, float]:
    """One TRL log entry → the GRPO curves (names shared with verl's, `curve_from_verl`); {} for an entry that is
    no training step (the final train summary, evaluation)."""
    if "reward" not in entry:
        return {}
    row = {column: float(entry.get(key, float("nan"))) for column, key in TRL_KEYS.items()}
    row.update({column: float(entry[key]) for column, key in TRL_EXTRA.items() if key in entry})
    for key, value in entry.items():
        if key.startswith(component_prefix):
            row[f"reward_{key[len(component_prefix):]}"] = float(value)
        elif key.startswith(source_prefix):
            row[f"source.{key[len(source_prefix):]}.reward"] = float(value)
    return row


def curve_from_trl(log_history: Sequence[dict], component_prefix: str = "reward_components/",
                   source_prefix: str = "reward_source/") -> list[dict]:
    """One row per logged training step from TRL's `trainer.state.log_history`; with several training sources a
    `source.<name>.reward` column each (the mean score of that source's rollouts in the step, empty when the
    step drew none of it)."""
    rows = [{"step": int(entry["step"]), **row} for entry in log_history
            if "step" in entry and (row := trl_row(entry, component_prefix, source_prefix))]
    rows.sort(key=lambda r: r["step"])
    return rows


def curve_from_verl(verl_dir: Path) -> list[dict]:
    """One row per step from a verl run directory written by the generated launch script."""
    from stages.rewards.verl_entry import rollout_key

    verl_dir = Path(verl_dir)
    scored: dict[str, dict] = {}
    for path in sorted((verl_dir / "reward_log").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            entry.pop("reward_s", None)  # the call's time, not a reward component
            scored[entry.pop("key")] = entry
    per_step: dict[int, dict] = {}
    # a resumed run's log holds only the steps since the resume; launch.sh kept the earlier ones (a step logged
    # twice — after its checkpoint, before a kill — takes the later line)
    lines = []
    for name in ("verl_log.before_resume.jsonl", "verl_log.jsonl"):
        log_path = verl_dir / name
        lines += log_path.read_text().splitlines() if log_path.is_file() else []
    for line in lines:
        entry = json.loads(line)
        data = entry["data"]
        row = {"step": int(entry["step"]), "reward_std": float("nan")}
        for column, key in VERL_KEYS.items():  # step_s: verl's own timer of the whole step (rollout … save)
            if key in data or column in CURVE_COLUMNS:
                row[column] = float(data.get(key, float("nan")))
        per_step[row["step"]] = row
    for path in sorted((verl_dir / "rollouts").glob("*.jsonl")):
        step = int(path.stem)
        results = []
        for line in path.read_text().splitlines():
            rollout = json.loads(line)
            result = scored.get(rollout_key(rollout["output"], rollout["gts"]))
            if result is not None:
                results.append(result)
        row = per_step.setdefault(step, {"step": step, "reward": float("nan"), "reward_std": float("nan"),
                                         "kl": float("nan"), "response_length": float("nan")})
        if results:
            row["reward_std"] = float(np.std([r["score"] for r in results]))
            for key in results[0]:
                if key != "score":
                    row[f"reward_{key}"] = float(np.mean([r[key] for r in results]))
    return [per_step[s] for s in sorted(per_step)]


@contextmanager
def following_verl(verl_dir: Path, live_dir: Path, every_s: float = 30.0) -> Iterator[None]:
    """Inside: verl's logs in `verl_dir` read into DVCLive's files in `live_dir` every `every_s` seconds, and the
    curve pictures handed to the flow (`stages.core.progress.publish_markdown`), while verl runs beside."""
    from stages.core.live import live_markdown, write_live
    from stages.core.progress import publish_markdown, wants_markdown

    stop = threading.Event()

    def follow() -> None:
        seen: list[dict] = []
        while not stop.wait(every_s):
            try:
                rows = curve_from_verl(verl_dir)
            except json.JSONDecodeError:  # a line verl is writing right now: read it at the next look
                continue
            if rows and rows != seen:
                write_live(rows, live_dir)
                seen = rows
                if wants_markdown():
                    publish_markdown(live_markdown(live_dir, curves_markdown))

    thread = threading.Thread(target=follow, name="verl-curves", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def write_curve(rows: Sequence[dict], path: Path) -> None:
    """CSV with a fixed column order (dvc plots reads it); rewritten whole."""
    columns = list(CURVE_COLUMNS) + sorted({k for r in rows for k in r} - set(CURVE_COLUMNS))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [",".join(columns)]
    for row in rows:
        lines.append(",".join(_fmt(row.get(c, float("nan"))) for c in columns))
    atomic_write_text(path, "\n".join(lines) + "\n")


def read_curve(path: Path) -> list[dict]:
    """The rows of a curve CSV that `write_curve` wrote (launch.sh's grpo_curve.csv; floats, step as int)."""
    with open(path) as handle:
        rows = list(csv.DictReader(handle))
    return [{k: (int(float(v)) if k == "step" else float(v)) for k, v in row.items()} for row in rows]


def _fmt(value: float) -> str:
    return str(int(value)) if isinstance(value, int) else f"{float(value):.6g}"


def curves_markdown(path: Path) -> str:
    """The curves as pictures for the stage's Prefect artifact: reward (total and per component), response
    length and KL against the step."""
    from stages.core.report import curve_markdown, read_curve_table
    from stages.rewards.score import ANSWER_FLAGS

    rows = read_curve_table(path) if Path(path).is_file() else []
    columns = list(rows[0]) if rows else []
    flags = [f"reward_{k}" for k in ANSWER_FLAGS if f"reward_{k}" in columns]  # shares of answers, not rewards
    rewards = ["reward"] + sorted(c for c in columns if c.startswith("reward_") and c != "reward_std"
                                  and c not in flags)
    sources = sorted(c for c in columns if c.startswith("source.") and c.endswith(".reward"))
    return "\n".join([
        curve_markdown(path, "step", rewards, "GRPO reward per step", "reward (mean over the step's rollouts)"),
        *([curve_markdown(path, "step", flags, "GRPO answers per step: parsed, no boxes, degenerate boxes",
                          "share of the step's rollouts")] if flags else []),
        *([curve_markdown(path, "step", sources, "GRPO reward per training source",
                          "reward (mean over the step's rollouts of the source)")] if sources else []),
        curve_markdown(path, "step", ["response_length"], "GRPO response length", "tokens (mean)"),
        curve_markdown(path, "step", ["kl"], "GRPO KL to the reference model", "KL"),
    ]) if columns else ""


def summary_window(window: int, pool_size: int, batch_size: int) -> int:
    """`window` steps, or when 0 the steps of one pass over the GRPO pool, so that the first and the
    last window score the same prompts and prompt difficulty cancels out of their difference."""
    return window or max(1, -(-pool_size // max(1, batch_size)))


def source_summary(rows: Sequence[dict]) -> dict[str, float]:
    """Per training source: the mean of its per-step reward over the steps that drew it, and how many did."""
    out: dict[str, float] = {}
    for column in sorted({k for r in rows for k in r if k.startswith("source.") and k.endswith(".reward")}):
        values = [r[column] for r in rows if column in r and not np.isnan(r[column])]
        name = column[len("source."):-len(".reward")]
        out[f"source.{name}.reward_mean"] = float(np.mean(values)) if values else float("nan")
        out[f"source.{name}.steps"] = len(values)
    return out


def window_summary(rows: Sequence[dict], window: int) -> dict[str, float]:
    """Mean reward over the first and last `window` steps, their difference, and per-component means of both
    windows (at most half the run each, so they never overlap)."""
    if not rows:
        return {"steps": 0}
    rewards = [r["reward"] for r in rows]
    w = max(1, min(window, len(rows) // 2 or 1))
    summary = {"steps": len(rows), "window": w, "reward_first": float(np.mean(rewards[:w])),
               "reward_last": float(np.mean(rewards[-w:]))}
    summary["reward_gain"] = summary["reward_last"] - summary["reward_first"]
    for key in sorted(k for k in rows[-1] if k.startswith("reward_") and k not in ("reward_std",)):
        summary[f"{key}_first"] = float(np.mean([r.get(key, float("nan")) for r in rows[:w]]))
        summary[f"{key}_last"] = float(np.mean([r.get(key, float("nan")) for r in rows[-w:]]))
    summary["response_length_last"] = float(np.mean([r["response_length"] for r in rows[-w:]]))
    summary["kl_last"] = float(np.mean([r["kl"] for r in rows[-w:]]))
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m stages.grpo.curves --verl-dir DIR --out DIR/grpo_curve.csv` (end of launch.sh: the job folder's
    own table, in the GPU-node environment; the stage reads the same logs into `metrics/live/grpo`)."""
    parser = argparse.ArgumentParser(description="per-step GRPO curves from a verl run")
    parser.add_argument("--verl-dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    write_curve(curve_from_verl(Path(args.verl_dir)), Path(args.out))


if __name__ == "__main__":
    main()
