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
(16), LR (1e-3), EVERY (250), SEED (0), OBJ (3), NUMINIT (0: 1 gives number tokens Fourier-coded rows), SMOOTH (0:
sigma in pixels of a Gaussian target over nearby numbers), AUX (0: the weight of a loss that names, at every image
token an object covers, that object's colour word through lm_head), SCENE (rectangles | shapes: one synth frame drawn
plain at object scale 1.4 with OBJ objects, asked "the <colour> <kind>"; DESCRIBE and AUX stay 0 with it), THINK
(sentence | compact: with SCENE=shapes, the pretrain stage's compact thought, whose last step names the target's place),
HEADS (the language model's attention heads: `wide_model`), INIT (the initialisation's torch seed, default SEED).
"""

import dataclasses
import os
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from research.issue61.resumable import train
from stages.core.io import derive_seed
from stages.models.batches import PadCollator, assistant_labels
from stages.params import load_params
from stages.params.synth import SynthScale
from stages.pretrain import fresh_model, score_answer
from stages.pretrain.plain import plain_sample
from stages.pretrain.scenes import GroundingSample
from stages.pretrain.stream import chat
from stages.synth.render import background, render_frame
from stages.synth.scene import COLOURS, simulate_video
from stages.tasks import answer_text
from stages.teacher.template_teacher import compact_trace

DESCRIBE = os.environ.get("DESCRIBE", "0") == "1"
STEPS, BS = int(os.environ.get("STEPS", "3000")), int(os.environ.get("BS", "16"))
LR, EVERY = float(os.environ.get("LR", "1e-3")), int(os.environ.get("EVERY", "250"))
SEED, OBJ = int(os.environ.get("SEED", "0")), int(os.environ.get("OBJ", "3"))
GROW = int(os.environ.get("GROW", "0"))
NUMINIT = os.environ.get("NUMINIT", "0") == "1"  # number tokens' embedding and output rows: Fourier codes of the value
AUX = float(os.environ.get("AUX", "0"))  # > 0: weight of a loss naming, at each image token, the colour seen there
SMOOTH = float(os.environ.get("SMOOTH", "0"))  # > 0: a number label's target spread over nearby numbers (Gaussian, px)
SCENE = os.environ.get("SCENE", "rectangles")  # rectangles | shapes: one synth frame drawn plain, "the red star" asked
# > 0: the language model's attention heads (the base has 4: head size 64); the head size is hidden / HEADS, the M-RoPE
# sections scaled to its pairs (time 2, the rest split between rows and columns), the rope theta the stage's
HEADS = int(os.environ.get("HEADS", "0"))
# the torch seed of the initialisation (default: SEED, as the stage), apart from the stream's SEED
INIT = int(os.environ.get("INIT", os.environ.get("SEED", "0")))
THINK = os.environ.get("THINK", "sentence")  # sentence | compact (shapes only: the pretrain stage's `think: compact`)
SIZE, WARMUP, CHECK = 112, 50, 96
ALL = ("red", "green", "blue", "yellow", "orange", "white")
PALETTE = {name: np.array(rgb, dtype=float) for name, rgb in COLOURS.items()}


def colour_at(image, box) -> str:
    pixel = np.asarray(image, dtype=float)[(box[1] + box[3] - 1) // 2, (box[0] + box[2] - 1) // 2]
    return min(PALETTE, key=lambda name: float(np.sum((PALETTE[name] - pixel) ** 2)))


def cell_colours(s, grid: int = 4) -> list[str | None]:
    """Per merged image token (row-major over the 4 x 4 grid of 28-pixel cells at 112), the colour of the rectangle
    covering most of the cell when it covers at least 30 % of it, else None (background: no label)."""
    cell = SIZE // grid
    objects = [(b, colour_at(s.images[0], b)) for b in [*s.boxes, *s.distractors]]
    out = []
    for row in range(grid):
        for col in range(grid):
            x1, y1 = col * cell, row * cell
            cover = [(max(0, min(x1 + cell, b[2]) - max(x1, b[0])) * max(0, min(y1 + cell, b[3]) - max(y1, b[1])), c)
                     for b, c in objects]
            area, colour = max(cover, default=(0, None))
            out.append(colour if area >= 0.3 * cell * cell else None)
    return out


SHAPES = SynthScale(look="plain", object_scale=1.4, min_objects=OBJ, max_objects=OBJ)


def shape_sample(rng: np.random.Generator, name: str, asked_from: tuple[str, ...]):
    """The first frame of a synth clip drawn plain (object scale 1.4, OBJ objects; the synth stage's own simulator and
    renderer), asked by colour and kind ("the red star": unique in a clip by construction), the colour one of
    `asked_from` and at least half the target in view: clips are drawn again from the same generator until so. Only
    that frame is rendered (an appearance needs no motion facts)."""
    while True:
        video = simulate_video(rng, SHAPES)
        image, visible = render_frame(video, background(video), 0)
        sx, sy = SIZE / video.width, SIZE / video.height
        boxes = {o.obj_id: [round(x1 * sx), round(y1 * sy), round(x2 * sx), round(y2 * sy)]
                 for o in video.objects if (box := visible[o.obj_id].box()) is not None
                 for x1, y1, x2, y2 in [box]}
        askable = [o for o in video.objects if o.colour in asked_from and o.obj_id in boxes
                   and visible[o.obj_id].area >= 0.5 * visible[o.obj_id].full_area]
        if askable:
            target = askable[int(rng.integers(len(askable)))]
            frame = Image.fromarray(image).resize((SIZE, SIZE), Image.Resampling.BICUBIC)
            return GroundingSample(name, f"the {target.colour} {target.kind}", 0, [0], [frame], 0,
                                   [boxes[target.obj_id]], [b for k, b in sorted(boxes.items()) if k != target.obj_id])


def sample(rng: np.random.Generator, name: str, step: int | None = None):
    """A plain scene and its response; `step` (training) limits the asked colours under GROW, None (held out): all."""
    asked_from = ALL if GROW == 0 or step is None else ALL[:1 + step // GROW]
    if SCENE == "shapes":
        s = shape_sample(rng, name, asked_from)
        think = (compact_trace(s.timestamps, s.keyframe, s.boxes, SIZE, 1) if THINK == "compact"
                 else f"The target is clearest at {s.keyframe}s.")
        return s, answer_text(think, {"keyframe_timestamp": s.keyframe, "bbox_2d_list": s.boxes})
    s = plain_sample(rng, name, 1, SIZE, (OBJ,), asked_from, 0)
    asked = next(w for w in s.expression.split() if w in COLOURS)
    if DESCRIBE:
        objects = sorted([(b, asked) for b in s.boxes] + [(b, colour_at(s.images[0], b)) for b in s.distractors])
        think = "; ".join(f"{c} {b}" for b, c in objects) + f". The {asked} one."
    else:
        think = f"The target is clearest at {s.keyframe}s."
    return s, answer_text(think, {"keyframe_timestamp": s.keyframe, "bbox_2d_list": s.boxes})


def wide_model(params):
    """`fresh_model` with HEADS attention heads in the language model (key/value heads: half of them)."""
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    config = AutoConfig.from_pretrained(params.base, local_files_only=True)
    text = config.text_config
    pairs = text.hidden_size // HEADS // 2
    text.num_attention_heads, text.num_key_value_heads = HEADS, max(1, HEADS // 2)
    text.rope_parameters = {**text.rope_parameters, "rope_theta": params.rope_theta,
                            "mrope_section": [2, (pairs - 2) // 2, pairs - 2 - (pairs - 2) // 2]}
    processor = AutoProcessor.from_pretrained(params.base, local_files_only=True)
    return AutoModelForImageTextToText.from_config(config, dtype=torch.float32), processor


def encode(processor, s, response: str) -> dict:
    messages = chat(s, False) + [{"role": "assistant", "content": [{"type": "text", "text": response}]}]
    text = processor.apply_chat_template(messages, tokenize=False)
    item = dict(processor(text=[text], images=[s.images], return_tensors="pt"))
    item["labels"] = assistant_labels(item["input_ids"], processor.tokenizer)
    return item


def number_tokens(tokenizer) -> dict[int, tuple[int, bool]]:
    """token id -> (the whole number it writes, whether it has a leading space): "7" and " 7" are two tokens."""
    out = {}
    for token, token_id in tokenizer.get_vocab().items():
        spaced = token.startswith("\u0120")
        digits = token[1:] if spaced else token
        if digits.isascii() and digits.isdigit() and (digits == "0" or not digits.startswith("0")):
            out[token_id] = (int(digits), spaced)
    return out


def fourier(value: float, dims: int) -> torch.Tensor:
    """cos / sin of the value at geometric periods from 3 to 600 pixels: nearby numbers get nearby vectors."""
    periods = torch.logspace(np.log10(3.0), np.log10(600.0), dims // 2, dtype=torch.float64)
    angles = 2 * np.pi * value / periods
    return torch.cat([torch.cos(angles), torch.sin(angles)]).float()


@torch.no_grad()
def init_numbers(model, numbers: dict[int, tuple[int, bool]]) -> None:
    """Give every number token's input embedding and output row the Fourier code of its value through one fixed
    random projection (the spaced and unspaced tokens of a value share it), at the rows' initial norm."""
    gen = torch.Generator().manual_seed(SEED)
    hidden = model.get_input_embeddings().weight.shape[1]
    projection = torch.linalg.qr(torch.randn(hidden, 32, generator=gen))[0].T  # 32 x hidden, orthonormal rows
    for weight in (model.get_input_embeddings().weight, model.lm_head.weight):
        norm = weight.norm(dim=1).mean()
        for token_id, (value, _) in numbers.items():
            code = fourier(value, 32) @ projection
            weight[token_id] = code / code.norm() * norm


def soft_targets(vocab: int, numbers: dict[int, tuple[int, bool]]) -> torch.Tensor:
    """(vocab, vocab): row t is the target distribution for label t: one-hot, or for a number a Gaussian of width
    SMOOTH over the numbers written the same way (same leading space)."""
    targets = torch.eye(vocab)
    ids = list(numbers)
    for token_id, (value, spaced) in numbers.items():
        same = [i for i in ids if numbers[i][1] == spaced]
        weights = torch.tensor([np.exp(-((numbers[i][0] - value) ** 2) / (2 * SMOOTH ** 2)) for i in same])
        targets[token_id] = 0
        targets[token_id, same] = (weights / weights.sum()).float()
    return targets


def aux_loss(model, batch: dict, cells: list[list[str | None]], colour_ids: dict[str, int],
             image_token: int) -> torch.Tensor:
    """The answer's loss plus AUX x the cross-entropy of the colour word read out (through lm_head) at each image
    token whose cell an object covers: a dense signal tying what a token sees to the word that names it."""
    out = model(**batch)
    targets = torch.full_like(batch["input_ids"], -100)
    for row, colours in enumerate(cells):
        positions = (batch["input_ids"][row] == image_token).nonzero().flatten()
        assert len(positions) == len(colours), (len(positions), len(colours))
        for position, colour in zip(positions.tolist(), colours, strict=True):
            if colour is not None:
                targets[row, position] = colour_ids[colour]
    keep = targets != -100
    aux = torch.nn.functional.cross_entropy(out.logits[keep].float(), targets[keep])
    return out.loss + AUX * aux


def smooth_loss(model, batch: dict, targets: torch.Tensor) -> torch.Tensor:
    labels = batch.pop("labels")
    logits = model(**batch).logits[:, :-1].float()
    labels = labels[:, 1:]
    keep = labels != -100
    log_probs = torch.log_softmax(logits[keep], dim=-1)
    return -(targets[labels[keep]] * log_probs).sum(-1).mean()


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
        out = model.generate(**inputs, max_new_tokens=96 if DESCRIBE or THINK == "compact" else 48, do_sample=False)
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
    torch.manual_seed(INIT)
    model, processor = wide_model(params) if HEADS else fresh_model(params)
    model.train()
    numbers = number_tokens(processor.tokenizer)
    if NUMINIT:
        init_numbers(model, numbers)
    targets = soft_targets(model.lm_head.weight.shape[0], numbers) if SMOOTH > 0 else None
    colour_ids = {c: processor.tokenizer.convert_tokens_to_ids("\u0120" + c) for c in ALL}
    image_token = model.config.image_token_id
    collate = PadCollator(processor.tokenizer.pad_token_id)
    held = [sample(np.random.default_rng(derive_seed(7, "describe", "check", i)), f"check/{i}") for i in range(CHECK)]
    settings = {"describe": DESCRIBE, "grow": GROW, "steps": STEPS, "bs": BS, "lr": LR, "seed": SEED, "objects": OBJ}
    if NUMINIT or SMOOTH:  # only when set, so that the states of runs without them still resume
        settings.update({"numinit": NUMINIT, "smooth": SMOOTH})
    if AUX:
        settings["aux"] = AUX
    if SCENE != "rectangles":
        settings["scene"] = SCENE
    if THINK != "sentence":
        settings["think"] = THINK
    if HEADS:
        settings["heads"] = HEADS
    if INIT != SEED:
        settings["init"] = INIT

    def step_loss(step: int) -> torch.Tensor:
        drawn = [sample(np.random.default_rng(derive_seed(SEED, "describe", "train", step, i)), f"train/{step}/{i}",
                        step) for i in range(BS)]
        batch = collate([encode(processor, *d) for d in drawn])
        if AUX:
            return aux_loss(model, batch, [cell_colours(s) for s, _ in drawn], colour_ids, image_token)
        if targets is not None:
            return smooth_loss(model, batch, targets)
        return model(**batch).loss

    train(model, LR, WARMUP, STEPS, EVERY, settings, out, __doc__.split("\n")[0], step_loss,
          lambda: check(model, processor, held))


if __name__ == "__main__":
    main()
