"""Study (issue 61): does the committed base bind the synth expressions when fine-tuned on plain-look synth frames?

    python research/issue61/finetune_plain.py STEPS LR SYNTH_SHARE OBJECT_SCALE OUT.json [LOOK [CHECK_EVERY]]

Fine-tunes models/pretrain (fp32, one core, batch 16, AdamW, 20 warm-up steps) on samples drawn as the pretrain
stage draws them (`stages.pretrain.scenes.synth_sample` with `SynthScale(look, object_scale)`, else its plain
rectangles), and every CHECK_EVERY steps runs the stage's own grounding check on 48 held-out synth samples of that
look (their own seed stream), appending the figures to OUT.json.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from stages.core.io import derive_seed
from stages.models import load_vlm
from stages.models.batches import PadCollator
from stages.params.synth import SynthScale
from stages.pretrain import grounding_check, train_step
from stages.pretrain.plain import plain_sample
from stages.pretrain.scenes import synth_sample
from stages.pretrain.stream import encode

ROOT = Path(__file__).resolve().parents[2]
COLOURS = ("red", "green", "blue", "yellow", "orange", "white")
BATCH, SIZE, FRAMES = 16, 112, 6


def main() -> None:
    steps, lr, share, object_scale, out = (int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]),
                                           float(sys.argv[4]), Path(sys.argv[5]))
    look = sys.argv[6] if len(sys.argv) > 6 else "plain"
    every = int(sys.argv[7]) if len(sys.argv) > 7 else 100
    torch.set_num_threads(1)
    torch.manual_seed(0)
    scale = SynthScale(look=look, object_scale=object_scale)

    def sample(rng: np.random.Generator, name: str):
        if rng.random() < share:
            return synth_sample(rng, name + "/synth", FRAMES, SIZE, scale)
        return plain_sample(rng, name + "/plain", FRAMES, SIZE, (3,), COLOURS, 2)

    model, processor = load_vlm(str(ROOT / "models/pretrain"), "float32", "cpu")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20))
    collate = PadCollator(processor.tokenizer.pad_token_id)
    check = [synth_sample(np.random.default_rng(derive_seed(7, "probe", "check", i)), f"check/{i}/synth", FRAMES,
                          SIZE, scale) for i in range(48)]
    log: list[dict] = []

    def checkpoint(step: int) -> None:
        figures = grounding_check(model, processor, check, 48)
        model.train()
        log.append({"step": step, **{k: figures[k] for k in ("parse_rate", "keyframe_hit_rate", "box_iou", "landed",
                                                             "on_target", "mean_box_iou", "check_loss")}})
        print(json.dumps(log[-1]), flush=True)
        out.write_text(json.dumps(log, indent=1))

    checkpoint(0)
    started = time.time()
    for step in range(steps):
        batch = [encode(processor, sample(np.random.default_rng(derive_seed(0, "probe", step, i)), f"t/{step}/{i}"))
                 for i in range(BATCH)]
        loss = train_step(model, [collate(batch)], "cpu")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if (step + 1) % 20 == 0:
            print(f"step {step + 1} loss {loss:.3f} {time.time() - started:.0f} s", flush=True)
        if (step + 1) % every == 0:
            checkpoint(step + 1)


if __name__ == "__main__":
    main()
