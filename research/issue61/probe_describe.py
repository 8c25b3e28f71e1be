"""Study (issue 61): does a thought that lists what is seen make the colour word bind?

    DESCRIBE=1 STEPS=3000 python research/issue61/probe_describe.py BASE OUT.json

Trains a fresh tiny Qwen2.5-VL (the pretrain stage's `fresh_model`: the base's config and processor, the
pre-training rope) on plain scenes (`stages.pretrain.plain.plain_sample`: 3 flat rectangles, 1 frame at 112, any of
the six colours asked from the first step — decision 006's control U0, which stayed at the mean box). DESCRIBE=1
changes only the thought: instead of one fixed sentence it lists every rectangle left to right, its colour and
box, then names the asked colour ("red [9, 12, 40, 50]; blue [...]; white [...]. The red one."), so the answer's box
can be copied from the model's own text: what is left to learn is naming the colour of a place (a classification
with a loss on every object) and copying, not matching a word to pixels. Colours of the other rectangles are read
from the frame (the pixel at the box's centre, the nearest palette colour). Held-out: 96 samples of the same kind
from their own seed stream, greedy, scored by the stage's `score_answer` (box IoU, landed, on target) every EVERY
steps. GROW=k asks only red at first and one more colour every k steps (decision 006's U1 curriculum; 0: all six
from the first step). The model, AdamW and the checks so far are saved as OUT.state.pt every EVERY steps: a rerun
with the same settings resumes there (every batch depends on (SEED, step) only). Env: DESCRIBE, GROW (0), STEPS, BS
(16), LR (1e-3), EVERY (250), SEED (0), OBJ (3).
"""

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from stages.core.io import derive_seed
from stages.models.batches import PadCollator, assistant_labels
from stages.params import load_params
from stages.pretrain import fresh_model, score_answer
from stages.pretrain.plain import plain_sample
from stages.pretrain.stream import chat
from stages.synth.scene import COLOURS
from stages.tasks import answer_text

DESCRIBE = os.environ.get("DESCRIBE", "0") == "1"
STEPS, BS = int(os.environ.get("STEPS", "3000")), int(os.environ.get("BS", "16"))
LR, EVERY = float(os.environ.get("LR", "1e-3")), int(os.environ.get("EVERY", "250"))
SEED, OBJ = int(os.environ.get("SEED", "0")), int(os.environ.get("OBJ", "3"))
GROW = int(os.environ.get("GROW", "0"))
SIZE, WARMUP, CHECK = 112, 50, 96
ALL = ("red", "green", "blue", "yellow", "orange", "white")
PALETTE = {name: np.array(rgb, dtype=float) for name, rgb in COLOURS.items()}


def colour_at(image, box) -> str:
    pixel = np.asarray(image, dtype=float)[(box[1] + box[3] - 1) // 2, (box[0] + box[2] - 1) // 2]
    return min(PALETTE, key=lambda name: float(np.sum((PALETTE[name] - pixel) ** 2)))


def sample(rng: np.random.Generator, name: str, step: int | None = None):
    """A plain scene and its response; `step` (training) limits the asked colours under GROW, None (held out): all."""
    asked_from = ALL if GROW == 0 or step is None else ALL[:1 + step // GROW]
    s = plain_sample(rng, name, 1, SIZE, (OBJ,), asked_from, 0)
    asked = next(w for w in s.expression.split() if w in COLOURS)
    if DESCRIBE:
        objects = sorted([(b, asked) for b in s.boxes] + [(b, colour_at(s.images[0], b)) for b in s.distractors])
        think = "; ".join(f"{c} {b}" for b, c in objects) + f". The {asked} one."
    else:
        think = f"The target is clearest at {s.keyframe}s."
    return s, answer_text(think, {"keyframe_timestamp": s.keyframe, "bbox_2d_list": s.boxes})


def encode(processor, s, response: str) -> dict:
    messages = chat(s, False) + [{"role": "assistant", "content": [{"type": "text", "text": response}]}]
    text = processor.apply_chat_template(messages, tokenize=False)
    item = dict(processor(text=[text], images=[s.images], return_tensors="pt"))
    item["labels"] = assistant_labels(item["input_ids"], processor.tokenizer)
    return item


@torch.no_grad()
def check(model, processor, held: list) -> dict:
    model.eval()
    processor.tokenizer.padding_side = "left"
    scores = []
    for i in range(0, len(held), 16):
        batch = [s for s, _ in held[i:i + 16]]
        texts = [processor.apply_chat_template(chat(s, False), tokenize=False, add_generation_prompt=True)
                 for s in batch]
        inputs = processor(text=texts, images=[s.images for s in batch], padding=True, return_tensors="pt")
        out = model.generate(**inputs, max_new_tokens=96 if DESCRIBE else 48, do_sample=False)
        answers = processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        scores += [score_answer(a, s) for s, a in zip(batch, answers, strict=True)]
    processor.tokenizer.padding_side = "right"
    model.train()
    landed = [s["on_target"] for s in scores if s["on_target"] is not None]
    return {"box_iou": round(float(np.mean([s["box_iou"] for s in scores])), 4),
            "parse": round(float(np.mean([s["parsed"] for s in scores])), 4), "landed": len(landed),
            "on_target": round(float(np.mean(landed)), 4) if landed else None, "last_answer": answers[-1][-160:]}


def main() -> None:
    base, out = sys.argv[1], Path(sys.argv[2])
    torch.set_num_threads(1)
    params = load_params("params.yaml").pretrain
    params = dataclasses.replace(params, base=base)
    torch.manual_seed(SEED)
    model, processor = fresh_model(params)
    model.train()
    collate = PadCollator(processor.tokenizer.pad_token_id)
    held = [sample(np.random.default_rng(derive_seed(7, "describe", "check", i)), f"check/{i}") for i in range(CHECK)]
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / WARMUP) * 0.5 * (1 + np.cos(np.pi * min(s, STEPS) / STEPS)))
    settings = {"describe": DESCRIBE, "grow": GROW, "steps": STEPS, "bs": BS, "lr": LR, "seed": SEED, "objects": OBJ}
    log, losses, started, first = [], [], time.time(), 0
    state_path = out.with_suffix(".state.pt")
    if state_path.is_file():
        state = torch.load(state_path, weights_only=False)
        if state["settings"] == settings:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            sched.load_state_dict(state["sched"])
            log, first = state["log"], state["step"]
            started -= state["seconds"]
            print(f"resumed at step {first}", flush=True)
    for step in range(first, STEPS):
        batch = [encode(processor, *sample(np.random.default_rng(derive_seed(SEED, "describe", "train", step, i)),
                                           f"train/{step}/{i}", step)) for i in range(BS)]
        loss = model(**collate(batch)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(), sched.step(), opt.zero_grad()
        losses.append(loss.item())
        if (step + 1) % EVERY == 0:
            row = {"step": step + 1, "loss": round(float(np.mean(losses[-EVERY:])), 4),
                   "seconds": round(time.time() - started), **check(model, processor, held)}
            log.append(row)
            print(json.dumps(row), flush=True)
            out.write_text(json.dumps({"what": __doc__.split("\n")[0], **settings,
                                       "command": " ".join(["python", *sys.argv]), "checks": log}, indent=1) + "\n")
            torch.save({"settings": settings, "step": step + 1, "seconds": time.time() - started, "log": log,
                        "model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}, state_path)


if __name__ == "__main__":
    main()
