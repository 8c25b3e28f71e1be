"""Make docs/img/segment_strip.png: the picture strip `vrsflow segment` writes (`run_video`, the code the command
runs), on a clip the synth stage renders.

The default models are random (the tiny Qwen2.5-VL does not write the answer format), so the answer is the
clip's ground truth: the shown frame where the target is largest and its box there, at the shown size. The
masks are the `box` segmenter's (evaluate.segmenter=box: the keyframe's box on every frame), so the strip
shows how far the target moves away from it.

    python docs/img/segment_strip.py [--out docs/img/segment_strip.png]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(Path(__file__).with_suffix(".png")))
    args = parser.parse_args()

    from schemas.answer import parse_answer
    from stages.core.runner import RunnerParams
    from stages.evaluate import box_masks, target_areas, target_boxes
    from stages.evaluate.infer import Reply
    from stages.evaluate.scorer import load_ground_truth
    from stages.params import Params
    from stages.params.evaluate import EvaluateParams
    from stages.params.synth import SynthParams, SynthScale
    from stages.segment_video import Engine, Request, run_video
    from stages.synth.writer import generate_synthetic

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "synth"
        generate_synthetic(SynthParams(seed=3, default=SynthScale(n_videos_train=1, n_videos_valid=1, min_frames=24,
                                                                  max_frames=24, height=240, width=320,
                                                                  frame_gap_prob=0.0)),
                           root, RunnerParams(kind="serial"))
        import json

        meta = json.loads((root / "meta_expressions_valid_.json").read_text())["videos"]
        video, entry = next(iter(meta.items()))
        exp_id, expression = next((k, e) for k, e in entry["expressions"].items() if len(e["anno_id"]) == 1)
        gt = load_ground_truth(root, "valid", [f"{video}#{exp_id}"])
        annos = [str(a) for a in expression["anno_id"]]

        def policy(queries):
            out = []
            for q in queries:
                areas = target_areas(gt, annos, q.timestamps)
                key = q.timestamps[max(range(len(areas)), key=areas.__getitem__)]
                side = q.images[0].width
                boxes = [[round(x1 * side / entry["width"]), round(y1 * side / entry["height"]),
                          round(x2 * side / entry["width"]), round(y2 * side / entry["height"])]
                         for x1, y1, x2, y2 in target_boxes(gt, annos, key)]
                answer = f'{{"keyframe_timestamp": {key}, "bbox_2d_list": {boxes}}}'
                text = f"<think>ground truth</think><answer>{answer}</answer>"
                out.append(Reply(text, parse_answer(text), [key]))
            return out

        params = Params(evaluate=EvaluateParams(n_frames=6, segmenter="box"))
        engine = Engine(params, Path(tmp), policy=policy, segment=box_masks)
        folder = root / "JPEGImages" / video
        run_video(engine, folder, [Request(folder, expression["exp"], Path(tmp) / "out")])
        shutil.copy(Path(tmp) / "out" / "strip.png", args.out)
        print(f"{args.out}: {video}, \"{expression['exp']}\"")


if __name__ == "__main__":
    main()
