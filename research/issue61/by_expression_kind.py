"""Study (issue 61): where does a base's grounding of the synth frames fail — which kinds of expression, and do its
boxes land on any object at all?

    python research/issue61/by_expression_kind.py MODEL N OUT.json [LOOK [OBJECT_SCALE [FRAMES [PHRASE]]]]

Draws N held-out synth samples as the pretrain stage draws them (`stages.pretrain.scenes.synth_sample`, FRAMES (6)
frames at 112, the synth default preset with LOOK (textured) and OBJECT_SCALE (1.0); their own seed stream, apart from
every training stream), answers them greedily with the Qwen2.5-VL folder MODEL (fp32, one core) and scores each
answer with the stage's `score_answer`. Groups: expressions that name a colour or not, one target or several,
referring or reasoning. Per group: box IoU, the share of first boxes that land on some object (IoU > 0.3), of
those the share on the asked target, keyframe hits; the IoU of the best fixed box on an 8-pixel grid is the bar a
model that does not look reaches. PHRASE `rectangle` asks every one-target expression that names a colour as "the
<colour> rectangle" (the words of the base's plain scenes) instead of its own words (`as-is`, the default): does a
base's binding hang on the pixels or on the words it was trained with?
"""

import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from stages.core.io import derive_seed
from stages.models import load_vlm
from stages.params.synth import SynthScale
from stages.pretrain import score_answer
from stages.pretrain.scenes import synth_sample
from stages.pretrain.stream import chat
from stages.synth.expressions import REASONING, REFERRING
from stages.synth.scene import COLOURS

SIZE, BATCH = 112, 16


def best_fixed_box_iou(boxes: list[list[int]], size: int = SIZE, step: int = 8) -> float:
    """The highest mean IoU one box on a grid of `step` pixels reaches over `boxes` (first targets)."""
    grid = np.arange(0, size + 1, step)
    t = np.array(boxes, dtype=float)
    area = (t[:, 2] - t[:, 0]) * (t[:, 3] - t[:, 1])
    best = 0.0
    for x1 in grid:
        for x2 in grid[grid > x1]:
            w = np.clip(np.minimum(x2, t[:, 2]) - np.maximum(x1, t[:, 0]), 0, None)
            for y1 in grid:
                for y2 in grid[grid > y1]:
                    inter = w * np.clip(np.minimum(y2, t[:, 3]) - np.maximum(y1, t[:, 1]), 0, None)
                    best = max(best, float(np.mean(inter / ((x2 - x1) * (y2 - y1) + area - inter))))
    return round(best, 4)


def rephrased(sample):
    """The sample asked as "the <colour> rectangle" when it has one target and its expression names a colour."""
    colour = next((word for word in sample.expression.split() if word in COLOURS), None)
    if colour is None or len(sample.boxes) != 1:
        return sample
    return dataclasses.replace(sample, expression=f"the {colour} rectangle")


def group(rows: list[dict]) -> dict:
    landed = [r["on_target"] for r in rows if r["on_target"] is not None]
    return {"n": len(rows), "box_iou": round(float(np.mean([r["box_iou"] for r in rows])), 4),
            "landed": round(len(landed) / len(rows), 4), "on_target_of_landed": round(float(np.mean(landed)), 4)
            if landed else None, "keyframe_hit": round(float(np.mean([r["keyframe_hit"] for r in rows])), 4),
            "best_fixed_box_iou": best_fixed_box_iou([r["box"] for r in rows])}


def main() -> None:
    model, n, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    look = sys.argv[4] if len(sys.argv) > 4 else "textured"
    scale = SynthScale(look=look, object_scale=float(sys.argv[5]) if len(sys.argv) > 5 else 1.0)
    frames = int(sys.argv[6]) if len(sys.argv) > 6 else 6
    phrase = sys.argv[7] if len(sys.argv) > 7 else "as-is"
    torch.set_num_threads(1)
    samples = [synth_sample(np.random.default_rng(derive_seed(7, "probe", "check", i)), f"check/{i}/synth", frames,
                            SIZE, scale) for i in range(n)]
    if phrase == "rectangle":
        samples = [rephrased(s) for s in samples]
    vlm, processor = load_vlm(model, "float32", "cpu")
    vlm.eval()
    processor.tokenizer.padding_side = "left"
    rows, started = [], time.time()
    with torch.no_grad():
        for i in range(0, n, BATCH):
            batch = samples[i:i + BATCH]
            texts = [processor.apply_chat_template(chat(s, False), tokenize=False, add_generation_prompt=True)
                     for s in batch]
            inputs = processor(text=texts, images=[s.images for s in batch], padding=True, return_tensors="pt")
            generated = vlm.generate(**inputs, max_new_tokens=48, do_sample=False)
            answers = processor.batch_decode(generated[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
            for sample, text in zip(batch, answers, strict=True):
                rows.append({**score_answer(text, sample), "box": sample.boxes[0], "type": sample.type_id,
                             "colour": any(word in COLOURS for word in sample.expression.split()),
                             "multi": len(sample.boxes) > 1})
    groups = {"all": rows, "names a colour": [r for r in rows if r["colour"]],
              "names no colour": [r for r in rows if not r["colour"]],
              "one target": [r for r in rows if not r["multi"]], "several targets": [r for r in rows if r["multi"]],
              "referring": [r for r in rows if r["type"] == REFERRING],
              "reasoning": [r for r in rows if r["type"] == REASONING]}
    result = {"what": "held-out synth samples answered by a base; box IoU, landing and keyframe hits by expression "
                      "kind, beside the best fixed box", "command": " ".join(["python", *sys.argv]),
              "model": model, "samples": n, "frames": frames, "phrase": phrase, "look": look,
              "object_scale": scale.object_scale,
              "seconds": round(time.time() - started, 1),
              "groups": {name: group(members) for name, members in groups.items() if members}}
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["groups"], indent=1))


if __name__ == "__main__":
    main()
