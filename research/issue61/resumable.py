"""The issue-61 studies' training loop: AdamW with linear warm-up then cosine to zero, gradient clip 1, a held-out
check every `every` steps written to OUT.json, and the whole state (model, AdamW, schedule, checks) saved beside it
as OUT.state.pt, so that a rerun with the same settings resumes where the last check left it (each study draws the
batch of a step from (seed, step) alone)."""

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch


def train(model, lr: float, warmup: int, steps: int, every: int, settings: dict, out: Path, what: str,
          step_loss: Callable[[int], torch.Tensor], check: Callable[[], dict], check_first: bool = False) -> None:
    """Train `model` to `steps`, `step_loss(step)` giving each step's loss; `check()` a held-out row every `every`
    steps (and at step 0 with `check_first`). A saved state is resumed only when its settings equal `settings`."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + np.cos(np.pi * min(s, steps) / steps)))
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
    if check_first and first == 0:
        log.append({"step": 0, "seconds": 0, **check()})
        print(json.dumps(log[-1]), flush=True)
    for step in range(first, steps):
        loss = step_loss(step)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(), sched.step(), opt.zero_grad()
        losses.append(loss.item())
        if (step + 1) % every == 0:
            log.append({"step": step + 1, "loss": round(float(np.mean(losses[-every:])), 4),
                        "seconds": round(time.time() - started), **check()})
            print(json.dumps(log[-1]), flush=True)
            out.write_text(json.dumps({"what": what, **settings, "command": " ".join(["python", *sys.argv]),
                                       "checks": log}, indent=1) + "\n")
            torch.save({"settings": settings, "step": step + 1, "seconds": time.time() - started, "log": log,
                        "model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}, state_path)
