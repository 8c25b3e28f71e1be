"""Side by side with the official loaders and scorers (issue 26): writes bench/results/reader_check.json.

    python bench/bench_reader_check.py --mevis-repo PATH --videolisa-repo PATH --referformer-repo PATH \\
        [--skimage-path DIR] [--scratch DIR]

The official code is read from checkouts of its published repositories (henghuiding/MeViS, showlab/VideoLISA,
wjn922/ReferFormer), copied into a scratch folder OUTSIDE the project and run there; nothing of it is part of
vrsflow. The few changes needed to run it here are made in the scratch copy and listed in the results (`how`):
NUM_WOEKERS 64 -> 2 in the eval scripts, an import stub for detectron2 (MeViS' `load_mevis_json` only uses
`BoxMode.XYXY_ABS` as a constant), ReferFormer's `datasets/__init__.py` emptied (it imports every dataset and
their heavy dependencies; `datasets/ytvos.py` is used as published). The ReasonVOS and MeViS scorers import
scikit-image (`skimage.morphology.disk`): pass `--skimage-path` for a folder holding it
(`pip install --target DIR scikit-image`) when the project's environment lacks it.

1. MeViS train reader: `load_mevis_json` vs vrsflow's mevis source (per expression: text after the loader's
   clean-up, frame files, per frame the multiset of non-null RLEs of its anno_ids).
2. Ref-YouTube-VOS train reader: ReferFormer's `YTVOSDataset` (num_frames=1, identity transform) vs vrsflow's
   refytvos source (per (expression, frame) meta: frames; the mask where the loader keeps the frame; empty
   where it resamples because the object is absent).
3. MeViS scoring with one of four prediction videos missing: the authors' tools/eval_mevis.py, VideoLISA's
   copy, and `vrsflow evaluate --missing authors|skip`.
4. ReasonVOS with a missing prediction folder: its authors' script (VideoLISA evaluation/reason_vos) vs
   `vrsflow evaluate --missing authors|zero`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from pycocotools import mask as mask_utils

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

from results_io import write_result  # noqa: E402

from stages.core import mask_table  # noqa: E402
from stages.core.params import DataParams, SourceParams  # noqa: E402
from stages.ingest.benchmarks import read_benchmark  # noqa: E402
from stages.ingest.sources import ingest_data  # noqa: E402
from stages.params.ingest import IngestParams  # noqa: E402
from stages.params.synth import SynthParams, SynthScale  # noqa: E402
from stages.synth import generate_synthetic  # noqa: E402
from stages.synth.layouts import write_layout  # noqa: E402

# repository → [(file in the repo, where it goes in the scratch copy)]
OFFICIAL = {
    "mevis": [("tools/eval_mevis.py", "mevis_authors/eval_mevis.py"), ("tools/metrics.py", "mevis_authors/metrics.py"),
              ("lmpm/data/datasets/mevis.py", "mevis_loader/mevis.py")],
    "videolisa": [("evaluation/mevis_val_u/eval_mevis.py", "mevis_videolisa/eval_mevis.py"),
                  ("evaluation/mevis_val_u/metrics.py", "mevis_videolisa/metrics.py"),
                  ("evaluation/reason_vos/eval_reason_vos.py", "reasonvos/eval_reason_vos.py"),
                  ("evaluation/reason_vos/metrics.py", "reasonvos/metrics.py")],
    "referformer": [("datasets/ytvos.py", "referformer/datasets/ytvos.py"),
                    ("datasets/transforms_video.py", "referformer/datasets/transforms_video.py"),
                    ("datasets/categories.py", "referformer/datasets/categories.py"), ("util", "referformer/util")],
}
DETECTRON2_STUB = {  # names mevis.py imports; only BoxMode.XYXY_ABS is used (as a constant)
    "__init__.py": "",
    "data.py": "class DatasetCatalog: pass\nclass MetadataCatalog: pass\n",
    "structures.py": "class BoxMode:\n    XYXY_ABS = 0\nclass Boxes: pass\nclass PolygonMasks: pass\n",
}


def prepare_official(repos: dict[str, Path], folder: Path) -> dict[str, str]:
    """Copy the official files into `folder` (outside the project) with the run-here changes; their commits."""
    shutil.rmtree(folder, ignore_errors=True)
    commits = {}
    for repo, files in OFFICIAL.items():
        root = repos[repo]
        for src, dst in files:
            if not (root / src).exists():
                sys.exit(f"--{repo}-repo {root}: {src} missing (expected a checkout of the published repository)")
            (folder / dst).parent.mkdir(parents=True, exist_ok=True)
            if (root / src).is_dir():
                shutil.copytree(root / src, folder / dst)
            else:
                shutil.copyfile(root / src, folder / dst)
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
        commits[repo] = sha.stdout.strip() or "unknown"
    for script in ("mevis_authors/eval_mevis.py", "mevis_videolisa/eval_mevis.py", "reasonvos/eval_reason_vos.py"):
        path = folder / script
        path.write_text(path.read_text().replace("NUM_WOEKERS = 64", "NUM_WOEKERS = 2"))
    (folder / "referformer/datasets/__init__.py").write_text("")
    for name, text in DETECTRON2_STUB.items():
        (folder / "mevis_loader/detectron2").mkdir(parents=True, exist_ok=True)
        (folder / "mevis_loader/detectron2" / name).write_text(text)
    return commits


def decode(rle: dict) -> np.ndarray:
    counts = rle["counts"].encode() if isinstance(rle["counts"], str) else rle["counts"]
    return mask_utils.decode({"size": rle["size"], "counts": counts}).astype(bool)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mevis-repo", required=True, type=Path, help="checkout of henghuiding/MeViS")
    parser.add_argument("--videolisa-repo", required=True, type=Path, help="checkout of showlab/VideoLISA")
    parser.add_argument("--referformer-repo", required=True, type=Path, help="checkout of wjn922/ReferFormer")
    parser.add_argument("--skimage-path", default="", help="folder holding scikit-image for the official scorers")
    parser.add_argument("--scratch", default="/tmp/vrsflow-reader-check", type=Path,
                        help="scratch folder outside the project (rewritten)")
    parser.add_argument("--out", default=None, help="results file (default bench/results/reader_check.json)")
    args = parser.parse_args()
    scratch = args.scratch.resolve()
    if scratch == PROJECT or PROJECT in scratch.parents:
        sys.exit(f"--scratch {scratch}: must lie outside the project (the official code is not copied into it)")
    official = scratch / "official"
    commits = prepare_official({"mevis": args.mevis_repo, "videolisa": args.videolisa_repo,
                                "referformer": args.referformer_repo}, official)
    work = scratch / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    results = reader_checks(official, work)
    results.update(scorer_checks(official, work, args.skimage_path))
    figures = {
        "compared": {
            "mevis_train_reader": "per expression: text (after the loader's lower-case/whitespace clean-up), frame "
                                  "files, and per frame the multiset of non-null RLEs (exact JSON) of the "
                                  "expression's anno_ids",
            "refytvos_train_reader": "per (expression, frame) meta of YTVOSDataset (num_frames=1): frames list; "
                                     "where __getitem__ keeps the frame (object present) its mask (palette == obj_id) "
                                     "equals ours pixel for pixel; where it resamples (object absent) ours is empty "
                                     "there too"},
        "headline": headline(results),
        "how": "The official files were copied from checkouts of the published repositories (commits in "
               "`official_commits`) into a scratch folder outside the repository and run there unchanged except: "
               "NUM_WOEKERS 64 -> 2, detectron2 replaced by an import stub (load_mevis_json only uses "
               "BoxMode.XYXY_ABS as a constant), ReferFormer's datasets/__init__.py emptied, scikit-image beside "
               "them for `disk`. Data: synthetic roots from `synth` (6 train + 4 valid videos, 6-9 frames, 48x64) in "
               "the MeViS and Ref-YouTube-VOS layouts; the Ref-YouTube-VOS meta.json categories set to 'person' "
               "(ReferFormer maps categories through its list). vrsflow side: `ingest_data` with data.sources = "
               "[mevis (train), refytvos (train)], masks from masks.parquet; `vrsflow evaluate --benchmark "
               "mevis|reasonvos --missing authors|zero|skip`. Command: bench/bench_reader_check.py "
               "(docs/benchmarks.md).",
        "official_commits": commits,
        **results,
    }
    write_result("reader_check", figures, "the official loaders and evaluation scripts, run from a scratch folder "
                 "on the same files in the same run", code=("stages/ingest", "stages/evaluate", "schemas"),
                 out=Path(args.out) if args.out else None)


def reader_checks(official: Path, work: Path) -> dict:
    scale = SynthScale(n_videos_train=6, n_videos_valid=4, min_frames=6, max_frames=9, height=48, width=64,
                       max_objects=3)
    generate_synthetic(SynthParams(seed=0, default=scale), work / "synth")
    generate_synthetic(SynthParams(seed=21, source="MV", layout="mevis", default=scale), work / "mevis")
    generate_synthetic(SynthParams(seed=22, source="YT", layout="refytvos", default=scale), work / "refytvos")
    # ReferFormer's loader maps the category through Ref-YouTube-VOS's category list: give the objects one
    meta = json.loads((work / "refytvos/train/meta.json").read_text())
    for v in meta["videos"].values():
        for o in v["objects"].values():
            o["category"] = "person"
    (work / "refytvos/train/meta.json").write_text(json.dumps(meta))
    data = DataParams(root=str(work / "synth"), index_dir=str(work / "index"), frames_dir=str(work / "frames"),
                      sources=(SourceParams(name="mevis", layout="mevis", root=str(work / "mevis")),
                               SourceParams(name="refytvos", layout="refytvos", root=str(work / "refytvos"))))
    ingest_data(IngestParams(), data)
    expr = pd.read_parquet(work / "index/expressions.parquet")
    vids = pd.read_parquet(work / "index/videos.parquet").set_index("video")
    masks = mask_table.read_masks(work / "index" / mask_table.FILE, {a for ids in expr["anno_ids"] for a in ids})

    def ours(source: str) -> dict:
        out = {}
        for r in expr[expr["source"] == source].itertuples():
            video = r.video.split("/", 1)[1]
            out[(video, r.exp_id)] = {"exp": r.text, "frames": list(vids.loc[r.video, "frames"]),
                                      "masks": [masks[int(a)] for a in r.anno_ids]}
        return out

    results = {}
    # 1. MeViS train
    sys.path.insert(0, str(official / "mevis_loader"))
    from mevis import load_mevis_json

    records = load_mevis_json(str(work / "mevis/train"), str(work / "mevis/train/meta_expressions.json"))
    mine = ours("mevis")
    mismatch: list[str] = []
    frames_compared = 0
    for rec in records:
        key = (rec["video_name"], rec["exp_id"])
        m = mine.get(key)
        if m is None:
            mismatch.append(f"{key}: not in vrsflow's index")
            continue
        if " ".join(m["exp"].lower().split()) != rec["sentence"]:
            mismatch.append(f"{key}: text")
        if [f"{work}/mevis/train/JPEGImages/{key[0]}/{f}.jpg" for f in m["frames"]] != rec["file_names"]:
            mismatch.append(f"{key}: frames")
        for t, objs in enumerate(rec["annotations"]):
            frames_compared += 1
            theirs = sorted(json.dumps(o["segmentation"], sort_keys=True) for o in objs)
            mine_t = sorted(json.dumps(track[t], sort_keys=True) for track in m["masks"] if track[t] is not None)
            if theirs != mine_t:
                mismatch.append(f"{key} frame {t}: RLEs differ")
    results["mevis_train_reader"] = {
        "official": "henghuiding/MeViS lmpm/data/datasets/mevis.py load_mevis_json (detectron2 import stubbed)",
        "records_official": len(records), "expressions_vrsflow": len(mine), "frames_compared": frames_compared,
        "mismatches": mismatch[:10], "n_mismatches": len(mismatch), "equal": not mismatch and len(records) == len(mine)}
    print(results["mevis_train_reader"], flush=True)

    # 2. Ref-YouTube-VOS train
    sys.path.insert(0, str(official / "referformer"))
    import torch
    from datasets.ytvos import YTVOSDataset

    ds = YTVOSDataset(work / "refytvos/train", work / "refytvos/meta_expressions/train/meta_expressions.json",
                      transforms=lambda imgs, t: ([torch.from_numpy(np.asarray(i)) for i in imgs], t),
                      return_masks=True, num_frames=1, max_skip=1)
    mine = ours("refytvos")
    exps = json.loads((work / "refytvos/meta_expressions/train/meta_expressions.json").read_text())["videos"]
    mismatch, compared, absent = [], 0, 0
    for idx, meta in enumerate(ds.metas):
        exp_id = next(k for k, e in exps[meta["video"]]["expressions"].items()
                      if e["exp"] == meta["exp"] and int(e["obj_id"]) == meta["obj_id"])
        m = mine.get((meta["video"], exp_id))
        if m is None:
            mismatch.append(f"{meta['video']}#{exp_id}: not in vrsflow's index")
            continue
        if m["frames"] != meta["frames"]:
            mismatch.append(f"{meta['video']}#{exp_id}: frames")
        t = meta["frame_id"]
        ours_mask = decode(m["masks"][0][t]) if m["masks"][0][t] is not None else None
        random.seed(idx)
        _, target = ds[idx]
        same_item = target["caption"] == " ".join(meta["exp"].lower().split()) and target["frames_idx"].tolist() == [t]
        if same_item:  # the official loader found the object in this frame
            compared += 1
            theirs = target["masks"][0].numpy() > 0
            if ours_mask is None or not np.array_equal(theirs, ours_mask):
                mismatch.append(f"{meta['video']}#{exp_id} frame {t}: mask differs")
        else:  # it resampled: the object is absent there (valid == 0)
            absent += 1
            if ours_mask is not None and ours_mask.any():
                mismatch.append(f"{meta['video']}#{exp_id} frame {t}: official absent, vrsflow present")
    results["refytvos_train_reader"] = {
        "official": "wjn922/ReferFormer datasets/ytvos.py YTVOSDataset (num_frames=1, identity transform)",
        "metas_official": len(ds.metas), "expressions_vrsflow": len(mine), "frames_with_object_compared": compared,
        "frames_absent_compared": absent, "mismatches": mismatch[:10], "n_mismatches": len(mismatch),
        "equal": not mismatch and len(ds.metas) == sum(len(v["frames"]) for v in mine.values())}
    print(results["refytvos_train_reader"], flush=True)
    return results


def scorer_checks(official: Path, work: Path, skimage_path: str) -> dict:
    import cv2

    def run_official(folder: Path, script: str, script_args: list[str]) -> tuple[dict, str]:
        path = os.pathsep.join([str(folder), *([skimage_path] if skimage_path else [])])
        env = {**os.environ, "PYTHONPATH": path}
        out = subprocess.run([sys.executable, script, *script_args], cwd=folder, env=env, capture_output=True,
                             text=True, timeout=600)
        if out.returncode != 0:
            sys.exit(f"{folder / script} failed:\n{out.stderr[-2000:]}")
        return {k: float(v) for k, v in re.findall(r"^(J|F|J&F): ([0-9.na]+)$", out.stdout, re.M)}, out.stdout

    def vrs(benchmark: str, pred: Path, root: Path, missing: str, split: str = "") -> dict:
        out = work / f"vrs_{benchmark}_{missing}_{pred.name}.json"
        cmd = [sys.executable, "-m", "flows.cli", "evaluate", "--benchmark", benchmark, "--pred", str(pred), "--data",
               str(root), "--missing", missing, "--out", str(out)] + (["--split", split] if split else [])
        r = subprocess.run(cmd, cwd=PROJECT, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
        s = json.loads(out.read_text())
        return {"J": s["J"], "F": s["F"], "J&F": s["JF"], "n_scored": s["n_scored"], "n_skipped": s["n_skipped"]}

    results = {}
    # 3. MeViS scoring, one of four prediction videos missing
    mv = write_layout("mevis", work / "synth", work / "mevis_valid_u", "valid_u")
    bench = read_benchmark("mevis", mv, "valid_u")
    pred = work / "pred_mevis"
    rng = np.random.default_rng(0)
    for video, v in sorted(bench.videos.items()):
        for exp_id in v.expressions:
            folder = pred / video / exp_id
            folder.mkdir(parents=True)
            for frame, m in zip(v.frames, bench.track(video, exp_id), strict=True):
                m = np.roll(m, int(rng.integers(-3, 4)), axis=1) if rng.random() < 0.7 else m
                if rng.random() < 0.15:
                    m = np.zeros_like(m)
                cv2.imwrite(str(folder / f"{frame}.png"), m.astype(np.uint8) * 255)
    full = work / "pred_mevis_full"
    shutil.copytree(pred, full)
    gone = sorted(bench.videos)[1]
    shutil.rmtree(pred / gone)
    rows = {}
    for name, p in (("one of four videos missing", pred), ("complete", full)):
        script_args = ["--mevis_exp_path", str(mv / "valid_u/meta_expressions.json"), "--mevis_mask_path",
                       str(mv / "valid_u/mask_dict.json"), "--mevis_pred_path", str(p), "--save_name",
                       str(work / f"authors_{p.name}.json")]
        authors, _ = run_official(official / "mevis_authors", "eval_mevis.py", script_args)
        script_args[-1] = str(work / f"videolisa_{p.name}.json")
        videolisa, _ = run_official(official / "mevis_videolisa", "eval_mevis.py", script_args)
        rows[name] = {"authors eval_mevis.py (henghuiding/MeViS)": authors, "VideoLISA copy": videolisa,
                      "vrsflow --missing authors": vrs("mevis", p, mv, "authors", "valid_u"),
                      "vrsflow --missing skip": vrs("mevis", p, mv, "skip", "valid_u")}
    results["mevis_missing_rule"] = {
        "fixture": f"synthetic MeViS valid_u, {len(bench.videos)} videos, predictions shifted/emptied at random; "
                   f"video {gone} removed", **rows}
    print(json.dumps(results["mevis_missing_rule"], indent=1), flush=True)

    # 4. ReasonVOS: its authors' script with a missing prediction folder
    rv = write_layout("reasonvos", work / "synth", work / "reasonvos", "valid")
    bench = read_benchmark("reasonvos", rv)
    pred = work / "pred_reasonvos"
    for video, v in sorted(bench.videos.items()):
        for exp_id in v.expressions:
            folder = pred / video / exp_id
            folder.mkdir(parents=True)
            for frame, m in zip(v.frames, bench.track(video, exp_id), strict=True):
                if m is None:
                    continue
                m = np.roll(m, int(rng.integers(-3, 4)), axis=0)
                cv2.imwrite(str(folder / f"{frame}.png"), m.astype(np.uint8) * 255)
    gone = sorted(bench.videos)[0]
    shutil.rmtree(pred / gone)
    script_args = ["--meta_exp_path", str(rv / "meta_expressions.json"), "--mask_path", str(rv / "Annotations"),
                   "--pred_path", str(pred), "--save_name", str(work / "reasonvos_official.json")]
    official_rv, stdout = run_official(official / "reasonvos", "eval_reason_vos.py", script_args)
    results["reasonvos_missing_rule"] = {
        "fixture": f"synthetic ReasonVOS, {len(bench.videos)} prediction folders, rows shifted; {gone} removed",
        "authors eval_reason_vos.py (showlab/VideoLISA)": official_rv,
        "vrsflow --missing authors": vrs("reasonvos", pred, rv, "authors"),
        "vrsflow --missing zero": vrs("reasonvos", pred, rv, "zero"),
        # the run folder named, not spelt: no path of this machine (not even one below a placeholder)
        "official_stdout_tail": stdout.replace(str(work), "<work>")[-300:]}
    print(json.dumps(results["reasonvos_missing_rule"], indent=1), flush=True)
    return results


def headline(results: dict) -> dict:
    mevis, rv = results["mevis_missing_rule"], results["reasonvos_missing_rule"]
    partial, complete = mevis["one of four videos missing"], mevis["complete"]
    return {
        "mevis_train_equal": results["mevis_train_reader"]["equal"],
        "mevis_train_expressions": results["mevis_train_reader"]["expressions_vrsflow"],
        "mevis_train_frames": results["mevis_train_reader"]["frames_compared"],
        "refytvos_train_equal": results["refytvos_train_reader"]["equal"],
        "refytvos_train_expressions": results["refytvos_train_reader"]["expressions_vrsflow"],
        "refytvos_train_frames": results["refytvos_train_reader"]["frames_with_object_compared"]
        + results["refytvos_train_reader"]["frames_absent_compared"],
        "mevis_complete_jf": complete["vrsflow --missing authors"]["J&F"],
        "mevis_partial_authors_jf": partial["authors eval_mevis.py (henghuiding/MeViS)"].get("J&F"),
        "mevis_partial_videolisa_jf": partial["VideoLISA copy"].get("J&F"),
        "mevis_partial_vrsflow_default_jf": partial["vrsflow --missing authors"]["J&F"],
        "mevis_partial_vrsflow_skip_jf": partial["vrsflow --missing skip"]["J&F"],
        "reasonvos_authors_jf": rv["authors eval_reason_vos.py (showlab/VideoLISA)"].get("J&F"),
        "reasonvos_vrsflow_default_jf": rv["vrsflow --missing authors"]["J&F"],
    }


if __name__ == "__main__":
    main()
