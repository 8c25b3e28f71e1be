"""Benchmark: ingest → shard on a synthetic union of the training sets at the real sets' counts (issue 26).

A union of three synthetic roots in their published layouts, small frames, at `--scale` × the counts of
the real training splits as the issue gives them: MeViS ≈ 28K expressions, Ref-YouTube-VOS ≈ 12.9K
expressions over ≈ 3.5K videos, plus ReVOS (train: 626 videos here, all the expressions `synth` writes for
them). `synth` writes the videos (MeViS: as many as its ~13 expressions a video need to reach the count);
the meta files of MeViS and Ref-YouTube-VOS are then cut to the exact expression count (the first
expressions of each video, spread evenly). Untimed.

Timed, each stage in its own process (peak RSS = that stage's own, VmHWM), serial runner: ingest
(data.sources = the three roots), sample, keyframes, cot (template teacher, offline), filter, difficulty,
shard. The pools have a fixed size at every scale (`--sft-size`, `--grpo-size`, `--eval-size`), so what
grows with the scale is the union the stages read, not the samples they process. Run it at two scales to
see whether memory grows with the union:

    nice -n 10 python bench/bench_mixture_scale.py --scale 0.05 0.2 [--work /tmp/mixture-scale]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import write_result  # noqa: E402

# the real training splits' counts (issue 26); ReVOS: its train videos, the expressions synth gives them
FULL = {"mevis": {"expressions": 28_000}, "refytvos": {"expressions": 12_900, "videos": 3_500},
        "revos": {"videos": 626}}
SYNTH_EXPRESSIONS_PER_VIDEO = 12  # what synth writes per video at this size (measured: ~13); MeViS videos = count / it
STAGES = ("ingest", "sample", "keyframes", "cot", "filter", "difficulty", "shard")
META = {"mevis": "train/meta_expressions.json", "refytvos": "meta_expressions/train/meta_expressions.json"}


def targets(scale: float) -> dict[str, dict[str, int]]:
    mevis = round(FULL["mevis"]["expressions"] * scale)
    return {"mevis": {"expressions": mevis, "videos": math.ceil(mevis / SYNTH_EXPRESSIONS_PER_VIDEO)},
            "refytvos": {"expressions": round(FULL["refytvos"]["expressions"] * scale),
                         "videos": round(FULL["refytvos"]["videos"] * scale)},
            "revos": {"videos": round(FULL["revos"]["videos"] * scale)}}


def build(base: Path, scale: float) -> dict:
    """The three roots under `base`; returns their counts as written."""
    from stages.params.synth import SynthParams, SynthScale
    from stages.synth import generate_synthetic

    want = targets(scale)
    counts = {}
    for name, layout, source in (("revos", "revos", "RV"), ("mevis", "mevis", "MV"), ("refytvos", "refytvos", "YT")):
        size = SynthScale(n_videos_train=want[name]["videos"], n_videos_valid=4 if name == "revos" else 1,
                          min_frames=4, max_frames=6, height=32, width=48, max_objects=3)
        generate_synthetic(SynthParams(seed=7, source=source, layout=layout, default=size), base / name)
        if name in META:
            counts[name] = cut(base / name / META[name], want[name]["expressions"])
        else:
            videos = json.loads((base / name / "meta_expressions_train_.json").read_text())["videos"]
            counts[name] = {"videos": len(videos), "expressions": sum(len(v["expressions"]) for v in videos.values())}
    return counts


def cut(path: Path, n: int) -> dict:
    """Keep exactly `n` expressions: the first of each video, spread evenly (a video keeps ≥ 1 when it can)."""
    data = json.loads(path.read_text())
    videos = data["videos"]
    have = sum(len(v["expressions"]) for v in videos.values())
    if have < n:
        raise SystemExit(f"{path}: synth wrote {have} expressions, fewer than the {n} asked (raise "
                         "SYNTH_EXPRESSIONS_PER_VIDEO's divisor)")
    keep = {k: 0 for k in videos}
    left = n
    while left:  # round robin over the videos with expressions left
        for key, v in videos.items():
            if left and keep[key] < len(v["expressions"]):
                keep[key] += 1
                left -= 1
    for key, v in videos.items():
        items = sorted(v["expressions"].items(), key=lambda kv: int(kv[0]))[:keep[key]]
        v["expressions"] = dict(items)
    data["videos"] = {k: v for k, v in videos.items() if v["expressions"]}
    path.write_text(json.dumps(data))
    return {"videos": len(data["videos"]), "expressions": n}


def params_for(base: Path, args: argparse.Namespace):
    from stages.core.params import DataParams, SourceParams
    from stages.params.sample import SampleParams

    data = DataParams(root=str(base / "revos"), index_dir=str(base / "index"), frames_dir=str(base / "frames"),
                      sources=(SourceParams(name="revos", layout="revos", root=str(base / "revos"), share=2.0),
                               SourceParams(name="mevis", layout="mevis", root=str(base / "mevis"), share=1.0),
                               SourceParams(name="refytvos", layout="refytvos", root=str(base / "refytvos"),
                                            share=1.0)))
    sample = SampleParams(sft_first_k=2, sft_size=args.sft_size, grpo_size=args.grpo_size, eval_size=args.eval_size)
    return data, sample


def peak_rss_mib() -> float:
    """This process's own peak RSS: VmHWM of its address space (`ru_maxrss` would not do: on Linux it keeps,
    across exec, the peak of the process that spawned it — here the driver, which built the data)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_stage(stage: str, base: Path, args: argparse.Namespace) -> dict:
    """One stage in this process (the child): its wall time and this process's peak RSS."""
    from stages.core.frames_root import frames_root
    from stages.core.runner import RunnerParams
    from stages.params.cot import CotParams
    from stages.params.difficulty import DifficultyParams
    from stages.params.filter import FilterParams
    from stages.params.ingest import IngestParams
    from stages.params.keyframes import KeyframesParams
    from stages.params.shard import ShardParams
    from stages.params.teacher import TeacherParams

    data, sample = params_for(base, args)
    serial = RunnerParams(kind="serial")
    teacher = TeacherParams()
    rss_before = peak_rss_mib()
    start = time.perf_counter()
    if stage == "ingest":
        from stages.ingest.sources import ingest_data

        report = ingest_data(IngestParams(), data, serial)
    elif stage == "sample":
        from stages.sample import sample_pools

        report = sample_pools(sample, 0, base / "index", base / "sample")
    elif stage == "keyframes":
        from stages.keyframes import select_keyframes

        report = select_keyframes(KeyframesParams(train_size=56), 0, frames_root(data), base / "index",
                                  base / "sample", base / "keyframes", serial)
    elif stage == "cot":
        from stages.cot import generate_cot

        report = generate_cot(teacher, CotParams(cache_dir=str(base / "cot_cache")), 0, frames_root(data),
                              base / "keyframes", base / "cot")
    elif stage == "filter":
        from stages.filter import filter_traces

        report = filter_traces(FilterParams(), base / "cot", base / "keyframes", base / "filter")
    elif stage == "difficulty":
        from stages.difficulty import score_difficulty

        report = score_difficulty(DifficultyParams(cache_dir=str(base / "difficulty_cache")), teacher,
                                  frames_root(data), base / "index", base / "keyframes", base / "difficulty")
    else:
        from stages.shard import write_shards

        report = write_shards(ShardParams(), frames_root(data), base / "keyframes", base / "filter",
                              base / "difficulty", base / "shards", serial, tuple(s.name for s in data.sources))
    wall = time.perf_counter() - start
    keep = {k: v for k, v in report.metrics.items() if isinstance(v, int | float) and (
        k in ("videos", "expressions", "tracks", "quarantined") or ".source." in k or k.startswith("source.")
        or k.endswith(".total") or k.endswith(".samples"))}
    return {"wall_s": round(wall, 2), "peak_rss_mib": round(peak_rss_mib(), 1),
            "rss_before_stage_mib": round(rss_before, 1), "metrics": keep}


def one_scale(scale: float, work: Path, args: argparse.Namespace) -> dict:
    base = work / f"scale-{scale:g}"
    built = base / "built.json"
    start = time.perf_counter()
    reused = bool(args.reuse and built.is_file())
    if reused:  # the roots of an earlier run at this scale (same code, same seed)
        written = json.loads(built.read_text())
        for name in ("index", "frames", "sample", "keyframes", "cot", "cot_cache", "filter", "difficulty",
                     "difficulty_cache", "shards"):
            shutil.rmtree(base / name, ignore_errors=True)
    else:
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        written = build(base, scale)
        built.write_text(json.dumps(written))
    figures: dict = {"scale": scale, "targets": targets(scale), "written": written,
                     "union_expressions": sum(c["expressions"] for c in written.values()),
                     "union_videos": sum(c["videos"] for c in written.values()),
                     "build_s": round(time.perf_counter() - start, 1), "roots_reused": reused,
                     "raw_bytes": {name: sum(p.stat().st_size for p in (base / name).rglob("*") if p.is_file())
                                   for name in written},
                     "stages": {}}
    for stage in STAGES:
        cmd = [sys.executable, __file__, "--child", stage, "--base", str(base), "--sft-size", str(args.sft_size),
               "--grpo-size", str(args.grpo_size), "--eval-size", str(args.eval_size)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{stage} at scale {scale} failed:\n{proc.stderr[-3000:]}")
        figures["stages"][stage] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(scale, stage, figures["stages"][stage]["wall_s"], "s", figures["stages"][stage]["peak_rss_mib"], "MiB",
              file=sys.stderr, flush=True)
    figures["mask_table_bytes"] = (base / "index" / "masks.parquet").stat().st_size
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, nargs="+", default=[0.05, 0.2],
                        help="fractions of the real counts, one run each (1 = the full union)")
    parser.add_argument("--work", default="/tmp/vrsflow-mixture-scale")
    parser.add_argument("--sft-size", type=int, default=120)
    parser.add_argument("--grpo-size", type=int, default=120)
    parser.add_argument("--eval-size", type=int, default=20)
    parser.add_argument("--reuse", action="store_true", help="keep the synthetic roots of an earlier run")
    parser.add_argument("--out", default=None, help="results file (default bench/results/mixture_scale.json)")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--base", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.stdout.write(json.dumps(run_stage(args.child, Path(args.base), args)) + "\n")
        return
    runs = [one_scale(s, Path(args.work), args) for s in sorted(args.scale)]
    small, large = runs[0], runs[-1]
    figures = {
        "what": "ingest → shard on a synthetic union of MeViS-, Ref-YouTube-VOS- and ReVOS-layout training roots "
                "at `scale` × the real training splits' counts (issue 26); small frames (32×48, 4-6 a video); "
                "pools of a fixed size at every scale; each stage in its own process (peak RSS its own)",
        "full_counts": FULL, "runs": runs,
        "pools": {"sft_size": args.sft_size, "grpo_size": args.grpo_size, "eval_size": args.eval_size},
        "union_ratio": round(large["union_expressions"] / small["union_expressions"], 2),
        "peak_rss_ratio": {stage: round(large["stages"][stage]["peak_rss_mib"] / small["stages"][stage]["peak_rss_mib"],
                                        3) for stage in STAGES},
        "stage_rss_growth_mib": {stage: round(large["stages"][stage]["peak_rss_mib"]
                                              - small["stages"][stage]["peak_rss_mib"], 1) for stage in STAGES},
    }
    write_result("mixture_scale", figures, "the same bench at the smallest scale of the run (memory growth from it "
                 "to the largest is what the union costs)", out=Path(args.out) if args.out else None)


if __name__ == "__main__":
    main()
