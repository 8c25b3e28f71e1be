"""Tiny GRPO inputs for tests: a ground truth with a moving square, frames, and GRPO shards."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import webdataset as wds
from PIL import Image

from stages.core import rle

SIZE = 56  # frames at train size (square)
TIMESTAMPS = [0, 2, 4, 6]


def square_masks(n: int = len(TIMESTAMPS), size: int = SIZE) -> list[np.ndarray]:
    """A square growing then shrinking while it moves right: largest at frame 1."""
    masks = []
    for i, side in enumerate([12, 20, 16, 0][:n]):
        m = np.zeros((size, size), dtype=bool)
        m[10:10 + side, 4 + 8 * i:4 + 8 * i + side] = True
        masks.append(m)
    return masks


def ground_truth(**overrides) -> dict:
    """GroundTruth JSON dict (docs/contracts.md) of `square_masks`, keyframe at t=2."""
    masks = square_masks()
    boxes, areas = [], []
    for m in masks:
        ys, xs = np.nonzero(m)
        box = [float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)] if len(xs) else None
        boxes.append([box])
        areas.append([float(m.sum())])
    gt = {"timestamps": TIMESTAMPS, "image_size": [SIZE, SIZE], "boxes": boxes, "areas": areas,
          "union_areas": [a[0] for a in areas], "masks": [rle.encode(m) for m in masks], "keyframe_timestamp": 2,
          "points": [[20.0, 20.0]], "aks_option": "A", "difficulty": 4.0, "token_budget": 20}
    gt.update(overrides)
    return gt


def frames(seed: int = 0) -> list[np.ndarray]:
    """RGB frames: noise background with the bright square of `square_masks`."""
    rng = np.random.default_rng(seed)
    out = []
    for m in square_masks():
        f = rng.integers(0, 60, (SIZE, SIZE, 3), dtype=np.uint8)
        f[m] = (230, 40, 40)
        out.append(f)
    return out


def answer(t: int = 2, boxes: list | None = None, think: str = "The square is largest at 2s.", **extra) -> str:
    """A well-formed completion."""
    payload = {"keyframe_timestamp": t, "bbox_2d_list": boxes if boxes is not None else [[12, 10, 32, 30]], **extra}
    return f"<think>{think}</think><answer>{json.dumps(payload)}</answer>"


def write_grpo_shards(folder: Path, n: int = 2) -> Path:
    """`folder/shard-000000.tar` with n samples in the shard stage's layout."""
    folder.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(folder / "shard-%06d.tar"), maxcount=100, verbose=0) as sink:
        for i in range(n):
            record = {"__key__": f"s{i:03d}"}
            for j, f in enumerate(frames(i)):
                buf = io.BytesIO()
                Image.fromarray(f).save(buf, format="JPEG", quality=95)
                record[f"frame_{j}.jpg"] = buf.getvalue()
            meta = {"sample_id": f"s{i:03d}", "pool": "grpo", "expression": "the red square", "type": "referring",
                    "timestamps": TIMESTAMPS, "ground_truth": ground_truth()}
            record["json"] = json.dumps(meta).encode()
            sink.write(record)
    return folder


def write_verl_checkpoint(model_dir: Path, job_dir: Path, step: int, lora_r: int = 0, seed: int = 0) -> dict:
    """A finished verl run's checkpoint, written by verl's OWN checkpoint code: the tiny model (with a random
    LoRA when lora_r > 0) wrapped in FSDP (gloo, world size 1, CPU) and saved by `FSDPCheckpointManager` to
    `job_dir/checkpoints/global_step_<step>/actor`, plus the tracker file verl's trainer writes after saving.

    Run it in a fresh process (it initialises torch.distributed). Returns, for the oracle, layer-0 q_proj
    tensors as saved: base weight W, and with LoRA the A, B matrices and the scaling (merged = W + s·B·A).
    """
    import socket

    import torch
    import torch.distributed as dist
    from omegaconf import OmegaConf
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    from verl.utils.fsdp_utils import get_fsdp_wrap_policy

    with socket.socket() as sock:  # a free port for the one-process gloo group
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True)
        oracle: dict = {}
        if lora_r > 0:
            from peft import LoraConfig, get_peft_model

            # init_lora_weights=False: B is random too, so the adapter changes the weights
            model = get_peft_model(model, LoraConfig(r=lora_r, lora_alpha=2 * lora_r, target_modules=["q_proj"],
                                                     init_lora_weights=False))
            layer = model.base_model.model.model.language_model.layers[0].self_attn.q_proj
            oracle = {"A": layer.lora_A["default"].weight.detach().clone(),
                      "B": layer.lora_B["default"].weight.detach().clone(), "scaling": layer.scaling["default"],
                      "W": layer.base_layer.weight.detach().clone()}
        else:
            with torch.no_grad():  # a visible "training" change of the full weights
                q = model.model.language_model.layers[0].self_attn.q_proj.weight
                q.add_(torch.randn_like(q) * 0.05)
            oracle = {"W": model.model.language_model.layers[0].self_attn.q_proj.weight.detach().clone()}
        mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
        # as verl's FSDP engine wraps the actor (FSDP1, its wrap policy); sync_module_states needs a GPU
        fsdp = FSDP(model, auto_wrap_policy=get_fsdp_wrap_policy(module=model, config=None, is_lora=lora_r > 0),
                    device_id=torch.device("cpu"), device_mesh=mesh, use_orig_params=False)
        optimizer = torch.optim.AdamW([p for p in fsdp.parameters() if p.requires_grad], lr=1e-6)
        contents = OmegaConf.create({"save_contents": ["model", "optimizer", "extra"],
                                     "load_contents": ["model", "optimizer", "extra"]})
        manager = FSDPCheckpointManager(model=fsdp, optimizer=optimizer, lr_scheduler=None,
                                        processing_class=AutoProcessor.from_pretrained(model_dir),
                                        checkpoint_config=contents)
        checkpoints = Path(job_dir) / "checkpoints"
        manager.save_checkpoint(str(checkpoints / f"global_step_{step}" / "actor"), global_step=step)
        (checkpoints / "latest_checkpointed_iteration.txt").write_text(str(step))  # as verl's trainer does
        return oracle
    finally:
        dist.destroy_process_group()


def _main() -> None:
    """`python -m tests.stages.grpo_factory MODEL ORACLE.pt JOB:STEP:LORA_R …` — one checkpoint per JOB spec."""
    import sys

    import torch

    model, oracle_path, *specs = sys.argv[1:]
    oracles = {}
    for spec in specs:
        job, step, lora_r = spec.rsplit(":", 2)
        oracles[job] = write_verl_checkpoint(Path(model), Path(job), int(step), int(lora_r))
    torch.save(oracles, oracle_path)


if __name__ == "__main__":
    _main()
