"""Probe (issue 24): can the tiny Qwen2.5-VL learn WHERE a named shape is, at its simplest?

One synth frame at 112 px, "Box the <colour> <texture> <kind>." → "[x1, y1, x2, y2]" (train-size pixels), full
fine-tuning from a random tiny model (stages.tiny_models.tiny_qwen), AdamW with warm-up and cosine decay; greedy box IoU
on held-out frames (another seed stream) against the constant mean-box baseline. Variants by environment variable:
ORDER=img_first|text_first (the image before or after the words), NL (layers), HID (hidden size), THETA (the
language model's rope theta), CUE=1 (a fixed left→right / top→bottom colour ramp blended into every frame,
TASK=plain's too: an absolute-position cue in the pixels, so that an image token's value carries its place),
ECHO=1 (the answer repeats the asked-for name before its box, so the colour word sits a few tokens
before each number), MROPE=t,h,w (the language model's mrope_section: how many rotary frequency
pairs go to time, rows and columns), VIS (the vision tower's width; MLP twice that), DIGITS=1 (the tiny tokenizer
with Qwen2's pre-tokenizer, numbers digit by digit: stages.tiny_models.tiny_qwen's build_tiny_qwen(digits=True)), STEPS,
BS, LR, NV (training videos), TAG, WORK (scratch folder), EVERY (steps between evaluations). TASK=plain asks the
same question of the easiest possible frame: flat-coloured rectangles on a plain background, the question naming
one by its colour (ASK=red,blue: only those colours are asked for, one per frame; GROW=400: ASK's first colour
only at first, one more every 400 steps; FIXED=red: always the red
one, so that the words never change and finding the target among several needs no binding of a word; N training
frames; NOBJ rectangles per frame, default 1: no binding of words to what is seen, only where it is; NOBJ=1,3
alternates the counts in training and holds out frames with the
last), so that what is left is reading a position out of the image.
Logs the mean loss per 100 steps and an evaluation every 500; research/issue24/results/grounding_probe.json holds
the figures of the runs made. Usage: TAG=A ORDER=img_first THETA=10 python research/issue24/probe_grounding.py
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from stages.models import load_vlm  # noqa: E402
from stages.models.batches import PadCollator, assistant_labels  # noqa: E402
from stages.params.synth import SynthScale  # noqa: E402
from stages.params.tiny_models import TinyModelsParams  # noqa: E402
from stages.synth.render import background, render_frame  # noqa: E402
from stages.synth.scene import simulate_video  # noqa: E402
from stages.tiny_models.tiny_qwen import build_tiny_qwen  # noqa: E402

SIZE = int(os.environ.get("SIZE", "112"))
ORDER = os.environ.get("ORDER", "img_first")
TAG = os.environ.get("TAG", "x")
FIXED = os.environ.get("FIXED", "")  # TASK=plain: one colour always asked for (finding it needs no word binding)
ASK = [c for c in os.environ.get("ASK", "").split(",") if c]  # TASK=plain: the colours that may be asked for
# the order of the training batches and, with THETA or VIS (the model re-made), its initialisation; the tokenizer
# stays the one of seed 0
SEED = int(os.environ.get("SEED", "0"))
GROW = int(os.environ.get("GROW", "0"))  # TASK=plain with ASK: steps between adding the next asked-for colour
ECHO = bool(os.environ.get("ECHO"))  # the answer names its target before the box: "the red: [x1, y1, x2, y2]"
TASK = os.environ.get("TASK", "box")  # box: "Box the <name>." → box; colour: "Colour of the <kind>?" → colour name
# plain: "Box the <colour> square." on one flat rectangle over a plain background → box
PLAIN_COLOURS = {"red": (220, 40, 40), "green": (40, 200, 60), "blue": (40, 80, 230), "yellow": (230, 220, 40),
                 "white": (240, 240, 240)}


def iou(a, b) -> float:
    ix = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy
    return ix * iy / union if union > 0 else 0.0


def position_cue(img: np.ndarray) -> np.ndarray:
    height, width = img.shape[:2]
    ramp = np.zeros_like(img, dtype=np.float32)
    ramp[..., 0] = np.linspace(0, 255, width)[None, :]
    ramp[..., 1] = np.linspace(0, 255, height)[:, None]
    return (img.astype(np.float32) * 0.6 + ramp * 0.4).astype(np.uint8)


def samples(seed: int, n_videos: int, per_video: int = 3) -> list[dict]:
    out = []
    for v in range(n_videos):
        rng = np.random.default_rng([seed, v])
        video = simulate_video(rng, SynthScale())
        bg = background(video)
        for t in rng.choice(video.n_frames, size=min(per_video, video.n_frames), replace=False):
            img, visible = render_frame(video, bg, int(t))
            if os.environ.get("CUE"):
                img = position_cue(img)
            image = Image.fromarray(img).resize((SIZE, SIZE), Image.Resampling.BICUBIC)
            sx, sy = SIZE / video.width, SIZE / video.height
            for obj in video.objects:
                seen = visible[obj.obj_id]
                if seen.area < 30:
                    continue
                ys, xs = np.nonzero(seen.patch)
                y0, x0 = seen.window[0], seen.window[2]
                box = [round((xs.min() + x0) * sx), round((ys.min() + y0) * sy),
                       round((xs.max() + 1 + x0) * sx), round((ys.max() + 1 + y0) * sy)]
                if TASK == "colour":  # what colour is the <kind>: content only, no position (kinds unique here)
                    if sum(o.kind == obj.kind for o in video.objects if visible[o.obj_id].area >= 30) == 1:
                        out.append({"text": f"the {obj.kind}", "image": image, "box": box, "answer": obj.colour})
                    continue
                out.append({"text": f"the {obj.name}", "image": image, "box": box, "name": obj.colour})
    return out


def plain_samples(seed: int, n: int, counts: list[int]) -> list[dict]:
    """TASK=plain: flat rectangles (14-39 px a side, not overlapping) of distinct named colours on a plain dark
    background, at SIZE, frame i with counts[i % len(counts)] of them; the question names one by its colour."""
    rng, out = np.random.default_rng(seed), []
    for i in range(n):
        n_objects = counts[i % len(counts)]
        image = Image.new("RGB", (SIZE, SIZE), tuple(int(v) for v in rng.integers(20, 100, 3)))
        draw, names, boxes = ImageDraw.Draw(image), list(PLAIN_COLOURS), []
        rng.shuffle(names)
        if FIXED:  # FIXED=red: that colour is in every frame and always the target (the words never change)
            names.remove(FIXED)
            names.insert(int(rng.integers(n_objects)), FIXED)
        elif ASK:  # ASK=red,blue: one of these colours, drawn per frame, is in the frame and is the target
            asked = ASK[int(rng.integers(len(ASK)))]
            names.remove(asked)
            names.insert(int(rng.integers(n_objects)), asked)
        for k in range(n_objects):
            for _ in range(50):  # a few tries at a free spot; the last one is kept either way
                w, h = rng.integers(14, 40, 2)
                x, y = rng.integers(0, SIZE - w), rng.integers(0, SIZE - h)
                box = [int(x), int(y), int(x + w), int(y + h)]
                if all(box[2] <= o[0] or o[2] <= box[0] or box[3] <= o[1] or o[3] <= box[1] for o in boxes):
                    break
            boxes.append(box)
            draw.rectangle([box[0], box[1], box[2] - 1, box[3] - 1], fill=PLAIN_COLOURS[names[k]])
        target = names.index(FIXED) if FIXED else names.index(asked) if ASK else int(rng.integers(n_objects))
        if os.environ.get("CUE"):  # the position ramp (CUE=1) on the plain frames too: absolute place in the pixels
            image = Image.fromarray(position_cue(np.asarray(image)))
        out.append({"text": f"the {names[target]} square", "image": image, "box": boxes[target],
                    "name": names[target], "boxes": boxes, "target": target})
    return out


def chat(sample: dict, answer: bool = True) -> list[dict]:
    words = f"Colour of {sample['text']}?" if TASK == "colour" else f"Box {sample['text']}."
    parts = [{"type": "image"}, {"type": "text", "text": words}]
    if ORDER == "text_first":
        parts = parts[::-1]
    messages = [{"role": "user", "content": parts}]
    if answer:
        reply = sample["answer"] if TASK == "colour" else json.dumps(sample["box"])
        if ECHO and TASK != "colour":  # the colour word a few tokens before every number of the box
            reply = f"the {sample['name']}: {reply}" if TASK == "plain" else f"{sample['text']}: {reply}"
        messages.append({"role": "assistant", "content": [{"type": "text", "text": reply}]})
    return messages


@torch.no_grad()
def evaluate(model, processor, held_out: list[dict]) -> tuple[float, str]:
    model.eval()
    processor.tokenizer.padding_side = "left"
    ious, landed, text = [], [], ""
    for i in range(0, len(held_out), 32):
        batch = held_out[i:i + 32]
        x = processor(text=[processor.apply_chat_template(chat(s, False), tokenize=False, add_generation_prompt=True)
                            for s in batch], images=[[s["image"]] for s in batch], padding=True, return_tensors="pt")
        out = model.generate(**x, max_new_tokens=20, do_sample=False)
        for s, text in zip(batch, processor.batch_decode(out[:, x["input_ids"].shape[1]:], skip_special_tokens=True),
                           strict=True):
            if TASK == "colour":
                ious.append(float(text.strip() == s["answer"]))
                continue
            try:
                box = json.loads(text[text.index("["):] if ECHO else text)
                ious.append(iou(box, s["box"]))
                # which rectangle the box lands on (IoU > 0.3 with it): the asked one or another
                overlaps = [iou(box, other) for other in s.get("boxes", [])]
                if overlaps and max(overlaps) > 0.3:
                    landed.append(int(np.argmax(overlaps)) == s["target"])
            except (ValueError, TypeError, IndexError, KeyError):
                ious.append(0.0)
    processor.tokenizer.padding_side = "right"
    model.train()
    if landed:  # of the boxes that land on a rectangle, the share on the asked one (1/NOBJ by chance)
        text = f"{text} | on a rectangle {len(landed)}/{len(ious)}, the asked one {np.mean(landed):.2f}"
    return round(float(np.mean(ious)), 4), text


def main() -> None:
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    if GROW and not ASK:
        sys.exit("GROW needs ASK: the colours asked for, in the order the curriculum adds them (ASK=red,blue,...)")
    if TASK == "plain":
        # NOBJ=1,3: training frames alternate between the counts (a salient single object keeps teaching where, the
        # others which); the held-out frames have the last count
        counts = [int(v) for v in os.environ.get("NOBJ", "1").split(",")]
        train, held_out = plain_samples(1, int(os.environ.get("N", "4000")), counts), plain_samples(2, 96, counts[-1:])
    else:
        train, held_out = samples(1000, int(os.environ.get("NV", "400"))), samples(2000, 25)
    if TASK == "colour":
        answers = [s["answer"] for s in train]
        majority = max(set(answers), key=answers.count)
        baseline = round(float(np.mean([s["answer"] == majority for s in held_out])), 4)
        print(TAG, "samples", len(train), len(held_out), "majority-colour accuracy", baseline, flush=True)
    else:
        mean_box = np.mean([s["box"] for s in train], axis=0).round().tolist()
        baseline = round(float(np.mean([iou(mean_box, s["box"]) for s in held_out])), 4)
        print(TAG, "samples", len(train), len(held_out), "mean-box IoU", baseline, flush=True)
    folder = Path(os.environ.get("WORK", "/tmp")) / f"probe_tiny_{TAG}"
    # DIGITS=1: Qwen2's pre-tokenizer, numbers written digit by digit (runs D1-D6)
    build_tiny_qwen(TinyModelsParams(hidden_size=int(os.environ.get("HID", "256")),
                                     num_layers=int(os.environ.get("NL", "2")), max_image_side=SIZE), folder,
                    digits=bool(os.environ.get("DIGITS")))
    if os.environ.get("THETA") or os.environ.get("VIS"):
        from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

        config = json.loads((folder / "config.json").read_text())
        if os.environ.get("VIS"):  # the vision tower's width (tiny model: 64 channels, MLP 128)
            config["vision_config"].update(hidden_size=int(os.environ["VIS"]),
                                           intermediate_size=2 * int(os.environ["VIS"]))
        for block in (config, config.get("text_config", {})):
            if block.get("rope_parameters") and os.environ.get("THETA"):
                block["rope_parameters"]["rope_theta"] = float(os.environ["THETA"])
                if os.environ.get("MROPE"):
                    block["rope_parameters"]["mrope_section"] = [int(v) for v in os.environ["MROPE"].split(",")]
        (folder / "config.json").write_text(json.dumps(config))
        torch.manual_seed(SEED)
        Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig.from_pretrained(folder)).save_pretrained(folder)
    model, processor = load_vlm(str(folder), "float32")
    processor.tokenizer.padding_side = "right"
    encoded = []
    for s in train:
        x = dict(processor(text=[processor.apply_chat_template(chat(s), tokenize=False)], images=[[s["image"]]],
                           return_tensors="pt"))
        x["labels"] = assistant_labels(x["input_ids"], processor.tokenizer)
        encoded.append(x)
    collate = PadCollator(processor.tokenizer.pad_token_id)
    batch_size, steps = int(os.environ.get("BS", "16")), int(os.environ.get("STEPS", "1500"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(os.environ.get("LR", "1e-3")), weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: min(1, (k + 1) / 50) * 0.5 * (1 + math.cos(math.pi * k / steps)))
    # GROW: a curriculum over the colours asked for, ASK's first, then one more every GROW steps (phase k draws
    # from the samples asking for one of ASK's first k + 1 colours); built once, not per step
    phases = [[i for i, s in enumerate(train) if s["name"] in ASK[:k + 1]] for k in range(len(ASK))] if GROW else []
    rng, started, losses = np.random.default_rng(SEED), time.time(), []
    model.train()
    for step in range(1, steps + 1):
        pool = phases[min((step - 1) // GROW, len(phases) - 1)] if GROW else range(len(encoded))
        batch = collate([encoded[i] for i in rng.choice(pool, batch_size, replace=False)])
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if step % 100 == 0:
            print(TAG, step, round(float(np.mean(losses[-100:])), 4), round(time.time() - started), flush=True)
        if step % int(os.environ.get("EVERY", "500")) == 0:
            print(TAG, "eval", step, evaluate(model, processor, held_out[:96]), flush=True)
    print(TAG, "final", evaluate(model, processor, held_out), round(time.time() - started), flush=True)


if __name__ == "__main__":
    main()
