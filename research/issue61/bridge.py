"""Study (issue 61): does the committed base's colour binding carry over to the default's frames drawn plain and
larger, when it keeps training on them beside the rectangles it binds?

    STEPS=1500 python research/issue61/bridge.py BASE OUT.json

The committed base boxes the asked rectangle on its plain six-frame scenes (box IoU 0.54, 96 % of landed boxes on the
asked one) and no object of the synth frames, even drawn plain and larger. Asked "the red rectangle" instead of "the
red star" on the same plain synth frames, its first box lands on an object 24 % of the time instead of 3 %
(`results/rephrase-*.json`): the binding is keyed to the words it was trained on, not only to the pixels. This study
continues training BASE (its weights, fp32) on the pre-training's own stream (`stages.pretrain.stream.draw_sample`)
under one phase: six frames, a share SHARE (0.5) of synth frames drawn plain at OBJECT_SCALE (2.0) with MAX_OBJECTS (3),
every kind of expression, the rest the base's moving rectangles with all six colours. AdamW LR (3e-4), warm-up 50,
cosine to STEPS, batch BS (16), one core. Every EVERY (250) steps it answers 96 held-out plain synth samples (their
own seed stream) greedily and scores them with the stage's `score_answer`: box IoU, first boxes landed on an object,
share of those on the asked target, for all and for the expressions that name a colour. KINDS=colour keeps only the
synth samples with one target named by its colour ("the red star", "the red shape"). Resumable from OUT.state.pt.
"""

import os
import sys
from pathlib import Path

import numpy as np
import torch

from research.issue61.resumable import train
from stages.core.io import derive_seed
from stages.models import load_vlm
from stages.models.batches import PadCollator
from stages.params.pretrain import PretrainPhase
from stages.params.synth import SynthScale
from stages.pretrain import score_answer
from stages.pretrain.scenes import synth_sample
from stages.pretrain.stream import chat, draw_sample, encode
from stages.synth.scene import COLOURS

STEPS, BS = int(os.environ.get("STEPS", "1500")), int(os.environ.get("BS", "16"))
LR, EVERY = float(os.environ.get("LR", "3e-4")), int(os.environ.get("EVERY", "250"))
SHARE, SEED = float(os.environ.get("SHARE", "0.5")), int(os.environ.get("SEED", "0"))
KINDS = os.environ.get("KINDS", "all")  # all | colour: synth samples drawn again until one target is named by colour
OBJECT_SCALE, MAX_OBJECTS = float(os.environ.get("OBJECT_SCALE", "2.0")), int(os.environ.get("MAX_OBJECTS", "3"))
FRAMES, SIZE, WARMUP, CHECK = 6, 112, 50, 96
SCALE = SynthScale(look="plain", object_scale=OBJECT_SCALE, max_objects=MAX_OBJECTS)
PHASE = PretrainPhase(steps=STEPS, frames=FRAMES, synth_share=SHARE, objects=(3,), move=2)


@torch.no_grad()
def check(model, processor, held: list) -> dict:
    model.eval()
    processor.tokenizer.padding_side = "left"
    rows = []
    for i in range(0, len(held), 16):
        batch = held[i:i + 16]
        texts = [processor.apply_chat_template(chat(s, False), tokenize=False, add_generation_prompt=True)
                 for s in batch]
        inputs = processor(text=texts, images=[s.images for s in batch], padding=True, return_tensors="pt")
        out = model.generate(**inputs, max_new_tokens=48, do_sample=False)
        answers = processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        rows += [{**score_answer(a, s), "colour": any(w in COLOURS for w in s.expression.split())}
                 for s, a in zip(batch, answers, strict=True)]
    processor.tokenizer.padding_side = "right"
    model.train()

    def figures(group: list[dict]) -> dict:
        landed = [r["on_target"] for r in group if r["on_target"] is not None]
        return {"n": len(group), "box_iou": round(float(np.mean([r["box_iou"] for r in group])), 4),
                "landed": len(landed), "on_target": round(float(np.mean(landed)), 4) if landed else None,
                "keyframe_hit": round(float(np.mean([r["keyframe_hit"] for r in group])), 4)}
    return {"all": figures(rows), "names a colour": figures([r for r in rows if r["colour"]]),
            "parse": round(float(np.mean([r["parsed"] for r in rows])), 4), "last_answer": answers[-1][-120:]}


def names_a_colour(sample) -> bool:
    return len(sample.boxes) == 1 and any(word in COLOURS for word in sample.expression.split())


def train_sample(rng: np.random.Generator, name: str):
    """One sample of the phase; with KINDS=colour a synth sample is drawn again (same generator) until its expression
    has one target and names its colour."""
    while True:
        s = draw_sample(rng, name, PHASE, PHASE.colours, SIZE, SCALE)
        if KINDS == "all" or s.video.endswith("/plain") or names_a_colour(s):
            return s


def main() -> None:
    base, out = sys.argv[1], Path(sys.argv[2])
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    model, processor = load_vlm(base, "float32", "cpu")
    model.train()
    collate = PadCollator(processor.tokenizer.pad_token_id)
    held = [synth_sample(np.random.default_rng(derive_seed(7, "bridge", "check", i)), f"check/{i}/synth", FRAMES,
                         SIZE, SCALE) for i in range(CHECK)]
    settings = {"base": base, "steps": STEPS, "bs": BS, "lr": LR, "seed": SEED, "share": SHARE,
                "object_scale": OBJECT_SCALE, "max_objects": MAX_OBJECTS}
    if KINDS != "all":  # only when set, so that the states of earlier runs still resume
        settings["kinds"] = KINDS

    def step_loss(step: int) -> torch.Tensor:
        return model(**collate([encode(processor, train_sample(
            np.random.default_rng(derive_seed(SEED, "bridge", "train", step, i)), f"train/{step}/{i}"))
            for i in range(BS)])).loss

    train(model, LR, WARMUP, STEPS, EVERY, settings, out, __doc__.split("\n")[0], step_loss,
          lambda: check(model, processor, held), check_first=True)


if __name__ == "__main__":
    main()
