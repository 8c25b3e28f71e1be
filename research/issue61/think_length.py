"""Study (issue 61): does a long thought before the answer cost a grounding model its boxes?

    python research/issue61/think_length.py BASE STATE.pt OUT.json

The pre-trained bases answer after one short sentence ("The target is clearest at 0s."); SFT teaches the template
teacher's three steps (~175 tokens) before the same answer. With the pre-training rope (theta 3) every offset
between an answer token and the image tokens it must read moves by the thought's length, so what the base learnt to
read may not survive a long thought. This loads a shapes-probe state (`probe_describe.py SCENE=shapes`: one frame
drawn plain at object scale 1.4, asked "the <colour> <kind>") and answers its 96 held-out samples greedily after a
thought forced into the assistant turn, with the answer up to its first number (so that what is scored is where
the box goes, not whether the format survives: without it no forced thought but its own sentence parses), scored
with the pretrain stage's `score_answer`:
- own: nothing forced (the model writes its own sentence);
- short: its own sentence forced ("The target is clearest at 0s.": equal to `own` when it writes that);
- template: the template teacher's three steps for the sample (`stages.teacher.template_teacher.write_trace` from its
  true box: the location words are true);
- filler: as many tokens as `template` of a sentence that says nothing of the frame;
- template-misplaced: the three steps written from the box mirrored left-right (location words wrong where the
  target is off the centre column);
- compact: three steps of a few words each, the last the target's place ("Step 3: the top left.");
- filler-16/32/64: that many tokens of the filler sentence.
Env VARIANTS: a comma-separated subset (all by default).
"""

import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

from research.issue61.probe_describe import SIZE, shape_sample
from stages.core.io import derive_seed
from stages.params import load_params
from stages.pretrain import fresh_model, score_answer
from stages.pretrain.stream import chat
from stages.teacher.template_teacher import location_phrase, write_trace

ALL = ("red", "green", "blue", "yellow", "orange", "white")
VARIANTS = os.environ.get("VARIANTS", "own,short,compact,filler-16,filler-32,filler-64,template,filler,"
                          "template-misplaced").split(",")
FILLER = "This sentence is written only to take up room before the answer and it says nothing of the frame. "


def template(sample, box) -> str:
    x1, y1, x2, y2 = box
    return write_trace({"expression": sample.expression, "timestamps": [0], "keyframe_timestamp": 0,
                        "boxes": [[box]], "union_areas": [(x2 - x1) * (y2 - y1)], "train_size": SIZE,
                        "n_instances": 1})


def mirrored(box) -> list[int]:
    return [SIZE - box[2], box[1], SIZE - box[0], box[3]]


def thoughts(sample, tokenizer) -> dict[str, str | None]:
    long = template(sample, sample.boxes[0])
    n = len(tokenizer(long)["input_ids"])
    filler = FILLER * 20
    ids = tokenizer(filler)["input_ids"][:n]
    place = location_phrase(sample.boxes[0], SIZE, SIZE)
    compact = f"Step 1: seen from 0s to 0s. Step 2: clearest at 0s. Step 3: {place}."
    out = {"own": None, "short": "The target is clearest at 0s.", "compact": compact, "template": long,
           "filler": tokenizer.decode(ids).strip(), "template-misplaced": template(sample, mirrored(sample.boxes[0]))}
    for k in (16, 32, 64):
        out[f"filler-{k}"] = tokenizer.decode(tokenizer(filler)["input_ids"][:k]).strip()
    return {name: out[name] for name in VARIANTS}


@torch.no_grad()
def answer(model, processor, sample, thought: str | None) -> str:
    text = processor.apply_chat_template(chat(sample, False), tokenize=False, add_generation_prompt=True)
    prefix = f'<think>{thought}</think><answer>{{"keyframe_timestamp": 0, "bbox_2d_list": [['
    if thought is not None:
        text += prefix
    inputs = processor(text=[text], images=[sample.images], return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=48, do_sample=False)
    written = processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)[0]
    return written if thought is None else prefix + written


def main() -> None:
    base, state_path, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    torch.set_num_threads(1)
    state = torch.load(state_path, weights_only=False)
    model, processor = fresh_model(dataclasses.replace(load_params("params.yaml").pretrain, base=base))
    model.load_state_dict(state["model"])
    model.eval()
    held = [shape_sample(np.random.default_rng(derive_seed(7, "describe", "check", i)), f"check/{i}", ALL)
            for i in range(96)]
    rows: dict[str, list] = {}
    tokens: dict[str, list] = {}
    for sample in held:
        for name, thought in thoughts(sample, processor.tokenizer).items():
            rows.setdefault(name, []).append(score_answer(answer(model, processor, sample, thought), sample))
            tokens.setdefault(name, []).append(len(processor.tokenizer(thought)["input_ids"]) if thought else 0)
    figures = {}
    for name, scores in rows.items():
        landed = [s["on_target"] for s in scores if s["on_target"] is not None]
        figures[name] = {"box_iou": round(float(np.mean([s["box_iou"] for s in scores])), 4),
                         "parse": round(float(np.mean([s["parsed"] for s in scores])), 4), "landed": len(landed),
                         "on_target": round(float(np.mean(landed)), 4) if landed else None,
                         "thought_tokens": round(float(np.mean(tokens[name])), 1)}
        print(name, figures[name], flush=True)
    command = "python research/issue61/think_length.py models/tiny/qwen25vl STATE.pt OUT.json"
    out.write_text(json.dumps({"what": __doc__.split("\n")[0], "state_step": state.get("step"), "command": command,
                               "figures": figures}, indent=1) + "\n")


if __name__ == "__main__":
    main()
