"""Study (issue 61): does a base trained with the compact thought box what its own place words say, not what it sees?

    OBJ=3 python research/issue61/think_shortcut.py WORKTREE SEED OUT.json

A phase's `think: compact` puts the target's place in words ("Step 3: It is near the top right.") before the box. In
training those words are the ground truth's (teacher forcing), so the box tokens can learn to follow the words, an
easy text-to-number map, and leave the looking to the place words alone, a nine-way guess with a much weaker signal.
This loads a pretrain stage seed's saved state (`WORKTREE/<pretrain.checkpoint_dir>/seed-SEED/state.pt`, as
`check_state.saved_seed`) and answers 96 held-out one-frame shape scenes (OBJ shapes each, all six colours; the shapes
probe's held-out seed stream) greedily three ways:
- own: the model writes its thought and box; reported: box IoU, how often its place words are the target's, how
  often its box lies where its own words say (`location_phrase` of the box), and where the target is;
- forced true: the true compact thought is written for it, the answer continues from `<answer>`;
- forced mirrored: the same with the place words of the target's box mirrored left-right (differing from the true
  ones on the samples off the centre column, which the figures for this variant are limited to, with forced true's
  on the same samples beside them).
If the box follows the words, forced true scores far above own and forced mirrored far below it.
"""

import dataclasses
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import torch

from research.issue61.check_state import saved_seed
from schemas.answer import parse_answer
from stages.core.io import derive_seed
from stages.params.pretrain import PLAIN_COLOURS
from stages.pretrain import score_answer
from stages.pretrain.scenes import shape_sample
from stages.pretrain.stream import chat
from stages.teacher.template_teacher import compact_trace, location_phrase

PLACE = re.compile(r"near (the [a-z ]+)\.")


@torch.no_grad()
def answers(model, processor, samples, prefixes: list[str], max_new_tokens: int = 96) -> list[str]:
    """Greedy completions of each sample's prompt continued by its prefix (the prefix included in the text)."""
    processor.tokenizer.padding_side = "left"
    out = []
    for i in range(0, len(samples), 16):
        batch, heads = samples[i:i + 16], prefixes[i:i + 16]
        texts = [processor.apply_chat_template(chat(s, False), tokenize=False, add_generation_prompt=True) + head
                 for s, head in zip(batch, heads, strict=True)]
        inputs = processor(text=texts, images=[s.images for s in batch], padding=True, return_tensors="pt")
        generated = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        tails = processor.batch_decode(generated[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        out += [head + tail for head, tail in zip(heads, tails, strict=True)]
    return out


def mirrored(box: list[int], size: int) -> list[int]:
    return [size - box[2], box[1], size - box[0], box[3]]


def main() -> None:
    worktree, seed, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    torch.set_num_threads(1)
    objects = int(os.environ.get("OBJ", "3"))
    params, step, model, processor = saved_seed(worktree, seed)
    size, scale = params.keyframes.train_size, params.synth.scale
    model.eval()
    samples = [dataclasses.replace(shape_sample(np.random.default_rng(derive_seed(7, "describe", "check", i)),
                                                f"check/{i}/shapes", 1, size, scale, (objects,), PLAIN_COLOURS),
                                   think="compact") for i in range(96)]
    truth = [location_phrase(s.boxes[0], size, size) for s in samples]

    def thought(s, box) -> str:
        return f"<think>{compact_trace(s.timestamps, s.keyframe, [box], size, 1)}</think><answer>"

    own = answers(model, processor, samples, [""] * len(samples))
    stated = [m.group(1) if (m := PLACE.search(text)) else None for text in own]
    boxed = []
    for text in own:
        answer = parse_answer(text)
        boxed.append(location_phrase(answer.boxes[0], size, size) if answer is not None and answer.boxes else None)
    scores = [score_answer(text, s) for text, s in zip(own, samples, strict=True)]
    rows = {"own": {"box_iou": round(float(np.mean([r["box_iou"] for r in scores])), 4),
                    "place_words_true": round(float(np.mean([a == b for a, b in zip(stated, truth, strict=True)])), 4),
                    "box_where_its_words_say": round(float(np.mean([a is not None and a == b for a, b in
                                                                    zip(boxed, stated, strict=True)])), 4),
                    "box_where_the_target_is": round(float(np.mean([a == b for a, b in
                                                                    zip(boxed, truth, strict=True)])), 4)}}
    off_centre = [i for i, s in enumerate(samples)
                  if location_phrase(mirrored(s.boxes[0], size), size, size) != truth[i]]
    variants = (("forced true", lambda s: s.boxes[0]), ("forced mirrored", lambda s: mirrored(s.boxes[0], size)))
    for name, box_of in variants:
        texts = answers(model, processor, samples, [thought(s, box_of(s)) for s in samples], max_new_tokens=48)
        part = [score_answer(texts[i], samples[i])["box_iou"] for i in off_centre]
        every = [score_answer(t, s)["box_iou"] for t, s in zip(texts, samples, strict=True)]
        rows[name] = {"box_iou": round(float(np.mean(every)), 4), "box_iou_off_centre": round(float(np.mean(part)), 4)}
    rows["own"]["box_iou_off_centre"] = round(float(np.mean([scores[i]["box_iou"] for i in off_centre])), 4)
    result = {"what": __doc__.split("\n")[0], "worktree_branch": os.environ.get("BRANCH", ""), "seed": seed,
              "step": step, "objects": objects, "samples": len(samples), "off_centre": len(off_centre),
              "command": f"OBJ={objects} python research/issue61/think_shortcut.py WORKTREE {seed} OUT.json",
              "rows": rows, "example_own": own[-1]}
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
