"""The figures table of bench/README.md, generated from bench/results/*.json (nothing else).

    python bench/summary.py            # print the table
    python bench/summary.py --write    # replace the table between the markers in bench/README.md
    python bench/summary.py --write --tracked-only   # only results files already committed

tests/test_bench_readme.py checks that every row of the README's table is a row this prints, so every
figure the README quotes is one a committed results file holds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
README = BENCH / "README.md"
BEGIN, END = "<!-- figures:begin (bench/summary.py --write) -->", "<!-- figures:end -->"

# name → (script, target as the issue states it); GPU figures come from bench/gpu.sh
KNOWN = {
    "metrics": ("bench_metrics.py", "J+F+R ≥ 2× the published per-frame path, values identical"),
    "shard": ("bench_shard.py", "≥ 4× at 720p sources, bounded memory, same outputs"),
    "sam2_reward": ("bench_sam2_reward.py", "≥ 4× over re-encoding per rollout (hiera_t, CPU), masks equal"),
    "keyframes": ("bench_keyframes.py", "faster than decoding every mask, same frames"),
    "evaluate": ("bench_evaluate.py", "≥ 3× seconds per video over per-expression evaluation (CPU, tiny models), "
                 "masks and scores identical"),
    "orchestration": ("bench_orchestration.py --profile ci",
                      "per-stage overhead down: one Prefect API per repro, imports off each stage's start"),
    "orchestration-default": ("bench_orchestration.py --profile default",
                              "orchestration ≤ 5 % of the default run; default run ≤ 6 min on 2 cores"),
    "gpu-sam2_reward": ("gpu.sh → bench_sam2_reward.py", "SAM2.1-large: ≥ 4× (H100, published 4.95 s → 1.45 s)"),
    "gpu-sft": ("gpu.sh → bench_sft.py --gpu", "3B-shaped LoRA step: MFU, memory"),
    "gpu-evaluate": ("gpu.sh → bench_metrics.py --gpu", "≤ 5 s per 100-frame video (published 31–36 s, L20)"),
}


def _x(value: float) -> str:
    return f"{value:.2f}×"


def measured(name: str, figures: dict) -> str:
    """The headline of one results file, every number taken from it."""
    if name == "metrics":
        s = figures["seconds"]
        return (f"J+F+R {_x(figures['speedup_jfr'])} ({s['published_jfr']} s → {s['ours_jfr']} s), F alone "
                f"{_x(figures['speedup_f'])}; {figures['frames']} frames at {figures['width']}×{figures['height']}; "
                f"values identical: {figures['values_identical']}")
    if name == "shard":
        parts = []
        for key in sorted(k for k in figures if k.startswith("train_size_")):
            entry = figures[key]
            ours, base = entry["ours"], entry["per_sample"]
            parts.append(f"{key.removeprefix('train_size_')} px: {_x(entry['speedup'])} serial, "
                         f"{_x(entry['speedup_threads'])} threads ({base['seconds']} s → {ours['seconds']} s, "
                         f"{ours['samples']} samples; peak RSS {base['peak_rss_mib']} → {ours['peak_rss_mib']} MiB; "
                         f"tars identical: {entry['checks']['ours']['tars_identical']})")
        return "; ".join(parts)
    if name.endswith("sam2_reward"):
        sweep = ", ".join(f"{r['distinct_keyframes']} keyframe{'s' if r['distinct_keyframes'] > 1 else ''}: "
                          f"{_x(r['speedup'])} ({r['per_rollout_s']} s → {r['shared_s']} s)" for r in figures["sweep"])
        equal = all(r["masks_equal"] for r in figures["sweep"])
        return (f"{figures['model']} at {figures['image_size']} px, {figures['rollouts']} rollouts × "
                f"{figures['frames']} frames: {sweep}; masks equal (asserted): {equal}")
    if name == "keyframes":
        return (f"{_x(figures['speedup'])} ({figures['baseline_s']} s → {figures['ours_s']} s, "
                f"{figures['samples']} samples, {', '.join(figures['frame_size'])}); "
                f"same frames asserted: {figures['same_frames_asserted']}")
    if name == "evaluate":
        return (f"{_x(figures['speedup'])} per video ({figures['per_expression_s_per_video']} s → "
                f"{figures['per_video_s_per_video']} s), {figures['videos']} videos, {figures['expressions']} "
                f"expressions, {figures['max_new_tokens']} new tokens, batch {figures['batch_size']}; masks equal "
                f"(asserted): {figures['masks_equal']}, scores equal: {figures['scores_equal']}"
                + "".join(f"; {part} alone {_x(inside[f'per_expression_{part}_s'] / inside[f'per_video_{part}_s'])}"
                          for inside in [figures.get("inside_all_repeats_s", {})] for part in ("sam2", "generate")
                          if inside.get(f"per_video_{part}_s")))
    if name.startswith("orchestration"):
        labels = {"before": "temporary server per stage", "shared": "one shared server",
                  "after": "shared server + warm forks (vrsflow repro)"}
        modes = figures["modes"]
        parts = [f"{labels[m]}: {v['total_s']} s total, {v['orchestration_s']} s orchestration "
                 f"({100 * v['orchestration_share']:.0f} %, {v['orchestration_per_stage_mean_s']} s per stage; "
                 f"load {v['load_avg_1m_start_end'][0]}→{v['load_avg_1m_start_end'][1]})"
                 for m, v in modes.items()]
        ratio = figures.get("orchestration_before_over_after")
        return (f"whole DAG, {len(next(iter(modes.values()))['stages'])} flow stages: " + "; ".join(parts)
                + (f"; orchestration {_x(ratio)} less" if ratio else ""))
    flat = {k: v for k, v in figures.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    keys = [k for k in flat if any(w in k for w in ("speedup", "ratio", "mfu", "_s", "per_s"))][:6]
    return ", ".join(f"{k} {flat[k]}" for k in keys) or "see the file"


def _tracked() -> set[str]:
    """Stems of the results files git tracks (a results file not committed yet is left out of the README)."""
    out = subprocess.run(["git", "ls-files", "bench/results"], cwd=BENCH.parent, capture_output=True, text=True,
                         check=True).stdout
    return {Path(line).stem for line in out.splitlines() if line.endswith(".json")}


def table(tracked_only: bool = False) -> str:
    rows = ["| results file | script | baseline (same run) | target | measured | machine, commit |",
            "|---|---|---|---|---|---|"]
    present = {p.stem for p in RESULTS.glob("*.json")}
    if tracked_only:
        present &= _tracked()
    for name in sorted(present | set(KNOWN)):
        path = RESULTS / f"{name}.json"
        script, target = KNOWN.get(name, ("", ""))
        if name not in present:
            why = "not measured: no GPU was available" if name.startswith("gpu-") else "no results file"
            rows.append(f"| `{name}.json` | {script} | — | {target} | {why} | — |")
            continue
        record = json.loads(path.read_text())
        machine = record.get("machine", {})
        if isinstance(machine, dict):
            where = machine.get("gpu") or f"{machine.get('cpus', '?')} CPUs, load {machine.get('load_avg_1m', '?')}"
        else:
            where = str(machine)
        commit = record.get("commit", {})
        if not isinstance(commit, dict):  # a file written by another script: {"commit": sha, "dirty": …}
            commit = {"sha": commit, "dirty": record.get("dirty")}
        sha = str(commit.get("sha", "?"))[:8] + (" (modified)" if commit.get("dirty") else "")
        figures = record.get("figures", record)
        rows.append(f"| `{name}.json` | {script or record.get('command', '')} | {record.get('baseline', '')} | "
                    f"{target} | {measured(name, figures)} | {where}, {sha} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="replace the table in bench/README.md")
    parser.add_argument("--tracked-only", action="store_true", help="only results files git already tracks")
    args = parser.parse_args()
    text = table(args.tracked_only)
    if not args.write:
        sys.stdout.write(text + "\n")
        return
    readme = README.read_text()
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


if __name__ == "__main__":
    main()
