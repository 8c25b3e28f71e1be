"""`filter` stage: keep only good reasoning traces, with a reason for every rejection.

Each trace is judged by the rules its task declares (`stages.tasks`, `Task.rules`), in order; the first
failing rule is the recorded reason (`stages.filter.rules`). A request that failed is rejected first: a thinking
teacher whose reasoning spent the whole budget (empty content at `finish_reason` length) under its own reason,
`reasoning_budget_exhausted`, any other failure as `request_error`. Only the reply's content is ever judged or
trained on; the hidden reasoning stays in the teacher's cache. An accepted trace becomes the training
response `<think>trace</think><answer>{json}</answer>`, the JSON being the task's ground-truth answer at
the task's view (Veason-R1: keyframe + boxes at train size; KTG: boxes + points on the keyframe at the
keyframe size; AKS: the option; VDG: the description), integer pixels, objects absent there left out.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from schemas.cot import AcceptedSchema, GenerationsSchema, RejectedSchema
from schemas.sample import KeyframesSchema
from stages.core.io import read_table, write_table
from stages.core.lineage import write_lineage
from stages.core.pixel_box import answer_box
from stages.core.report import StageReport, summary_line
from stages.filter import rules
from stages.params.filter import FilterParams
from stages.tasks import answer_text, get_task, integer_payload
from stages.tasks.views import task_ground_truth
from stages.teacher.client import REASONING_BUDGET_EXHAUSTED

log = logging.getLogger(__name__)


def answer_json(keyframe_timestamp: int, boxes: list, points: list | None = None) -> str:
    """A Veason-R1 answer JSON (boxes and points rounded to integer pixels; absent objects left out)."""
    present = [answer_box(box) for box in boxes if box is not None]
    answer: dict = {"keyframe_timestamp": int(keyframe_timestamp), "bbox_2d_list": present}
    if points is not None:
        answer["point_2d_list"] = [[int(round(v)) for v in p] for p in points if p is not None]
    return json.dumps(answer)


def build_response(trace: str, keyframe_timestamp: int, boxes: list, points: list | None = None) -> str:
    """`<think>trace</think><answer>{"keyframe_timestamp": t, "bbox_2d_list": [[x1, y1, x2, y2], …]}</answer>`."""
    return f"<think>{trace.strip()}</think><answer>{answer_json(keyframe_timestamp, boxes, points)}</answer>"


def response_for(task_name: str, trace: str, sample: dict) -> str:
    """The training response of an accepted trace: the trace as the thinking (the task's fixed thinking when it
    declares one) and the task's ground-truth answer at the task's view, in integer pixels."""
    task = get_task(task_name)
    description = trace.strip() if task.schema.required == frozenset({"description"}) else None
    payload = task.render_answer(task_ground_truth(sample, task, description=description))
    return answer_text(task.response_think or trace, integer_payload(payload))


def judge(row: dict, sample: dict, accepted_texts: list[str], params: FilterParams) -> str | None:
    """The first rule of the trace's task (`Task.rules`) that the trace fails, or None when it passes all.

    Order: request error (`reasoning_budget_exhausted` when the teacher's reasoning spent the budget, else
    `request_error`), then the task's rules — length, refusal, three steps, the task's own (keyframe
    named and no other, AKS option, step-3 location vs the ground-truth box), no markings, near-duplicate of
    an accepted trace.
    """
    text = row["text"]
    if row["error"].startswith(REASONING_BUDGET_EXHAUSTED):
        return (f"reasoning_budget_exhausted: {int(row.get('reasoning_tokens', 0))} reasoning tokens, "
                f"finish_reason={row.get('finish_reason', 'length')}, no content")
    if row["error"]:
        return f"request_error: {row['error'][:80]}"
    checks = {
        "length": lambda: rules.length_within(text, params.min_chars, params.max_chars),
        "refusal": lambda: rules.no_refusal(text),
        "three_steps": lambda: rules.three_steps(text),
        "keyframe_named": lambda: rules.keyframe_named(text, int(sample["keyframe_timestamp"]),
                                                        [int(t) for t in sample["timestamps"]]),
        "no_markings": lambda: rules.no_markings(text),
        "aks_option": lambda: rules.aks_option_matches(text, sample["aks_option"]),
        "location": lambda: rules.location_faithful(text, _key_boxes(sample), float(sample["train_size"]))
        if params.check_faithfulness else None,
        "near_duplicate": lambda: rules.not_near_duplicate(text, accepted_texts, params.near_duplicate_ratio),
    }
    for name in get_task(row["task"]).rules:
        reason = checks[name]()
        if reason:
            return reason
    return None


def _key_boxes(sample: dict) -> list:
    position = int(sample["keyframe_pos"])
    return [None if b is None else [float(v) for v in b] for b in sample["boxes"][position]]


def filter_traces(params: FilterParams, cot_dir: Path, keyframes_dir: Path, out_dir: Path) -> StageReport:
    """Split `cot_dir/generations.parquet` into `out_dir/{accepted,rejected}.parquet`.

    Args:
        params: the `filter` block.
        cot_dir: the cot stage's folder.
        keyframes_dir: keyframes tables (ground truth: keyframe, timestamps, boxes, AKS option).
        out_dir: where accepted/rejected tables and lineage go (`data/filter`).
    """
    generations = read_table(Path(cot_dir) / "generations.parquet", GenerationsSchema)
    pools = sorted(set(generations["pool"]))
    samples = pd.concat([read_table(Path(keyframes_dir) / f"{p}.parquet", KeyframesSchema) for p in pools])
    by_id = {row["sample_id"]: row for row in samples.to_dict("records")}
    accepted, rejected = [], []
    kept_texts: dict[tuple[str, str], list[str]] = {}
    for row in generations.sort_values(["sample_id", "trace_index"]).to_dict("records"):
        sample = by_id[row["sample_id"]]
        # near-duplicates are judged among the traces of the same sample AND task (RCoT-Seg's KFG and KTG
        # traces of one sample share their first steps by design)
        reason = judge(row, sample, kept_texts.get((row["sample_id"], row["task"]), []), params)
        if reason:
            rejected.append({**row, "reason": reason})
            continue
        kept_texts.setdefault((row["sample_id"], row["task"]), []).append(row["text"])
        accepted.append({**row, "response": response_for(row["task"], row["text"], sample)})
    out_dir = Path(out_dir)
    accepted_df = pd.DataFrame(accepted, columns=list(AcceptedSchema.to_schema().columns))
    rejected_df = pd.DataFrame(rejected, columns=list(RejectedSchema.to_schema().columns))
    write_table(accepted_df, AcceptedSchema, out_dir / "accepted.parquet")
    write_table(rejected_df, RejectedSchema, out_dir / "rejected.parquet")
    reasons = (rejected_df.assign(rule=rejected_df["reason"].str.split(":").str[0]).groupby("rule").size()
               .rename("traces").reset_index()) if len(rejected_df) else pd.DataFrame(columns=["rule", "traces"])
    metrics: dict[str, float | int] = {"accepted": len(accepted_df), "rejected": len(rejected_df),
                                       "acceptance_rate": round(len(accepted_df) / max(len(generations), 1), 4)}
    metrics.update({f"rejected.{r.rule}": int(r.traces) for r in reasons.itertuples(index=False)})
    # the generations table, not the cot folder: that holds the response cache (large, and not an input)
    write_lineage(out_dir, "filter", params,
                  inputs={"generations": Path(cot_dir) / "generations.parquet", "keyframes": Path(keyframes_dir)},
                  counts={"accepted": len(accepted_df), "rejected": len(rejected_df)},
                  code_modules=["stages.filter"],
                  extra={"accepted_per_template": dict(accepted_df["template_id"].value_counts().sort_index())})
    log.info(summary_line("filter", metrics))  # one short line; all values in the metrics file
    return StageReport("filter", metrics=dict(sorted(metrics.items())), tables={"rejections per rule": reasons})


__all__ = ["answer_json", "build_response", "filter_traces", "judge", "response_for"]
