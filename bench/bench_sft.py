"""Benchmark: the SFT stage's data path and step throughput, against today's loop (the code before the
Trainer rewrite: `read_shards` decoded every frame of the pool up front and the processor ran on every step).

CPU (default), three parts, each a ratio measured in this run:

- reader: peak memory (RSS, fresh process) and seconds to make the pool ready, at `--size` px (paper:
  560) for `--samples` and twice as many: the baseline decodes every frame up front (WebDataset
  `.decode("pil")`); ours indexes the tars (`index_shards`) and streams the frames of one sample at a
  time. Reports bytes per sample, so the paper pool (5.8K samples) can be extrapolated.
- epochs: seconds of data loading + processor for `--epochs` passes over the pool at the default
  `keyframes.train_size` with the default tiny model's processor: baseline re-encodes every step;
  ours (`SftDataset`) encodes once and serves later epochs from the cache.
- steps: LoRA forward + backward on the tiny default model, with and without gradient checkpointing
  (its cost; the stage leaves it off on CPU); and TRL GRPO rounds at the default shapes with and
  without it (TRL turns it on by default; `grpo.gradient_checkpointing: false` turns it off).

`--stage PIPELINE_DIR`: the whole `train_sft` of the current code and of `--baseline-commit`
(extracted with `git archive`), each in a fresh process on the same pipeline copy's data/shards.

GPU (`--gpu`): a randomly initialised model with Qwen2.5-VL-3B's shapes, 6 frames at 560 × 560, bf16,
LoRA r=8 on every linear layer of the language model (vision tower frozen, as the stage). Reports step time,
tokens/s, the FLOPs actually executed (torch's FlopCounterMode over one step) and model FLOPs utilisation
against the device's dense bf16 peak, and peak memory. A variant is a micro-batch size with flags: `c` gradient
checkpointing, `p` the stage's packed rows (`PackCollator`) instead of padded ones (`PadCollator`), `l` Liger's
kernels (transformers' `apply_liger_kernel`, as `sft.liger` does; they stay applied, so `l` variants come last).
`--lengths` gives the samples' response lengths in turn (one length: every sample alike, no padding), `--attention`
the attention implementation (sdpa; flex_attention reads the packed rows' block mask sparsely). The figures name
the micro-batch to train with: the largest that fits without checkpointing, else the smallest with it.

    python bench/bench_sft.py [--samples 32] [--size 560] [--epochs 3]      # → bench/results/sft.json
    python bench/bench_sft.py --stage /path/to/pipeline-copy --baseline-commit SHA   # → sft-stage.json
    python bench/bench_sft.py --gpu [--steps 10] [--variants 1 2 4c 2p 4p 2l 2pl] [--lengths 400 150 600 300]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.results_io import write_result  # noqa: E402
from stages.models.batches import PackCollator, PadCollator, assistant_labels  # noqa: E402
from stages.models.kernels import liger_missing  # noqa: E402
from stages.models.qwen_shapes import (  # noqa: E402
    IMAGE_TOKEN,
    QWEN25VL_3B_TEXT,
    VISION_END,
    VISION_START,
)
from stages.models.trainable import lora_targets  # noqa: E402
from stages.params.keyframes import KeyframesParams  # noqa: E402
from stages.params.sft import SftParams  # noqa: E402
from stages.params.tiny_models import TinyModelsParams  # noqa: E402
from stages.sft.data import SftDataset, index_shards, messages  # noqa: E402
from stages.teacher.template_teacher import write_trace  # noqa: E402

# dense bf16 peak (TFLOP/s, no sparsity) by device-name fragment: NVIDIA datasheets
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100 PCIe": 756.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 70.0}



def synthetic_samples(n: int, n_frames: int, size: int) -> list[dict]:
    """SFT samples like the shard stage's: random frames, 1 FPS timestamps, a template-teacher response."""
    rng = np.random.default_rng(0)
    samples = []
    for i in range(n):
        timestamps = sorted(int(t) for t in rng.choice(30, size=n_frames, replace=False))
        key = timestamps[n_frames // 2]
        boxes = [[[10.0, 12.0, 40.0 + i % 7, 50.0]] for _ in timestamps]
        trace = write_trace({"expression": "the red striped square", "timestamps": timestamps,
                             "keyframe_timestamp": key, "train_size": size, "boxes": boxes,
                             "union_areas": [900.0] * n_frames, "n_instances": 1})
        response = (f"<think>{trace}</think><answer>{{\"keyframe_timestamp\": {key}, "
                    f"\"bbox_2d_list\": [[10, 12, {40 + i % 7}, 50]]}}</answer>")
        frames = [Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)) for _ in timestamps]
        samples.append({"meta": {"expression": "the red striped square", "timestamps": timestamps,
                                 "response": response}, "frames": frames})
    return samples


def lora_model(model, params: SftParams, gradient_checkpointing: bool):
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=params.lora_r, lora_alpha=params.lora_alpha, lora_dropout=params.lora_dropout,
                        target_modules=lora_targets(params.target_modules, params.train_vision), task_type="CAUSAL_LM")
    model = get_peft_model(model, config)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    return model


def train_step(model, device: str, autocast: bool):
    """One forward + backward + AdamW step of `model`'s trainable parameters, as a function of the batch."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)

    def step(batch: dict) -> None:
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=autocast):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def time_steps(model, batches: list[dict], device: str, autocast: bool) -> tuple[float, int]:
    """Seconds and tokens for forward + backward + optimizer step over `batches` (after one warm-up step)."""
    step = train_step(model, device, autocast)

    step(batches[0])
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for batch in batches:
        step(batch)
    if device == "cuda":
        torch.cuda.synchronize()
    # a packed row has no attention mask and no padding: all its tokens count
    return time.perf_counter() - started, sum(int(b["attention_mask"].sum()) if "attention_mask" in b
                                              else b["input_ids"].numel() for b in batches)


def profile_step(model, batch: dict, device: str, top: int = 25) -> dict:
    """Where one forward + backward + optimizer step of `batch` spends its time (torch.profiler, after a warm-up
    step): the `top` operators by their own device time (CPU time on the CPU), each with its share of the step's
    total, and the step's wall time."""
    from torch.profiler import ProfilerActivity, profile

    step = train_step(model, device, autocast=False)
    step(batch)  # warm-up (and the optimizer's state) outside the trace
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    started = time.perf_counter()
    with profile(activities=activities) as prof:
        step(batch)
        if device == "cuda":
            torch.cuda.synchronize()
    wall = time.perf_counter() - started
    attribute = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, attribute, 0) > 0]
    total = sum(getattr(e, attribute) for e in events) or 1
    rows = sorted(events, key=lambda e: getattr(e, attribute), reverse=True)[:top]
    return {"step_wall_s": round(wall, 4), "device_busy_s": round(total / 1e6, 4),
            "device_busy_share_of_wall": round(total / 1e6 / wall, 4) if wall > 0 else None,
            "top_by_self_time": [{"name": e.key[:120], "calls": e.count,
                                  "self_s": round(getattr(e, attribute) / 1e6, 4),
                                  "share": round(getattr(e, attribute) / total, 4)} for e in rows]}


def write_shards(folder: Path, samples: list[dict]) -> None:
    """The shard stage's layout: `<key>.frame_<i>.jpg` (quality 95, as shard.jpeg_quality) + `<key>.json`."""
    import webdataset as wds

    folder.mkdir(parents=True, exist_ok=True)
    with wds.TarWriter(str(folder / "shard-000000.tar"), mtime=0.0) as sink:
        for i, sample in enumerate(samples):
            record = {"__key__": f"S_{i:05d}", "json": json.dumps(sample["meta"]).encode()}
            for j, frame in enumerate(sample["frames"]):
                buffer = io.BytesIO()
                frame.save(buffer, format="JPEG", quality=95)
                record[f"frame_{j}.jpg"] = buffer.getvalue()
            sink.write(record)


def baseline_read_shards(folder: Path) -> list[dict]:
    """Today's reader (before the rewrite): every sample decoded, in key order."""
    import webdataset as wds

    urls = sorted(str(p) for p in Path(folder).glob("shard-*.tar"))
    samples = []
    for sample in wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode("pil"):
        frames = [sample[k] for k in sorted(k for k in sample if k.startswith("frame_"))]
        samples.append({"key": sample["__key__"], "meta": sample["json"], "frames": frames})
    return sorted(samples, key=lambda s: s["key"])


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def _reader_child(kind: str, folder: str) -> None:
    """In a fresh process: make the pool ready, then walk it once as training would; print peak RSS and seconds.

    Peak RSS is the kernel's VmHWM of this process (ru_maxrss would carry over the parent's peak across exec).
    """
    before = _peak_rss_mb()
    started = time.perf_counter()
    if kind == "baseline":
        pool = baseline_read_shards(Path(folder))
        ready = time.perf_counter() - started
        pixels = sum(np.asarray(f).size for s in pool for f in s["frames"])
    else:
        pool = index_shards(Path(folder))
        ready = time.perf_counter() - started
        pixels = sum(np.asarray(f).size for s in pool for f in s.load_frames())  # one sample's frames at a time
    walked = time.perf_counter() - started
    peak = _peak_rss_mb()
    figures = {"ready_s": round(ready, 3), "ready_and_walk_s": round(walked, 3), "peak_rss_mb": round(peak, 1),
               "rss_growth_mb": round(peak - before, 1), "pixels": int(pixels)}
    sys.stdout.write(json.dumps(figures) + "\n")


def bench_reader(samples: int, size: int, n_frames: int) -> dict:
    """Peak memory of each reader for `samples` and 2 × `samples` (fresh processes, same shards)."""
    out: dict = {"size": size, "frames_per_sample": n_frames}
    for n in (samples, 2 * samples):
        with tempfile.TemporaryDirectory(prefix="vrsflow-bench-sft-") as tmp:
            write_shards(Path(tmp), synthetic_samples(n, n_frames, size))
            row = {}
            for kind in ("baseline", "ours"):
                code = f"import sys; sys.path.insert(0, {str(REPO)!r}); from bench.bench_sft import _reader_child; " \
                       f"_reader_child({kind!r}, {tmp!r})"
                proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                row[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
            assert row["baseline"]["pixels"] == row["ours"]["pixels"]  # the same frames were read
            out[f"samples_{n}"] = row
    small, large = out[f"samples_{samples}"], out[f"samples_{2 * samples}"]
    for kind in ("baseline", "ours"):
        growth = (large[kind]["rss_growth_mb"] - small[kind]["rss_growth_mb"]) / samples  # MB per extra sample
        out[f"{kind}_mb_per_sample"] = round(growth, 3)
        out[f"{kind}_paper_pool_gb"] = round(max(growth, 0.0) * 5800 / 1024, 2)  # ReVOS SFT pool: ~5.8K samples
    return out


def bench_epochs(samples: int, epochs: int, processor, size: int, n_frames: int) -> dict:
    """Data path over `epochs` passes: baseline = decode all up front, encode every step; ours = index + cache."""
    with tempfile.TemporaryDirectory(prefix="vrsflow-bench-sft-") as tmp:
        write_shards(Path(tmp), synthetic_samples(samples, n_frames, size))
        started = time.perf_counter()
        pool = baseline_read_shards(Path(tmp))
        baseline_items = [encode(processor, s) for _ in range(epochs) for s in pool]
        baseline = time.perf_counter() - started
        started = time.perf_counter()
        dataset = SftDataset(index_shards(Path(tmp)), processor, cache_bytes=2**30)
        ours_items = [dataset[i] for _ in range(epochs) for i in range(len(dataset))]
        ours = time.perf_counter() - started
    same = all(torch.equal(a[k], b[k]) for a, b in zip(baseline_items, ours_items, strict=True) for k in a)
    return {"samples": samples, "epochs": epochs, "size": size, "baseline_s": round(baseline, 3),
            "ours_s": round(ours, 3), "speedup": round(baseline / ours, 2), "processor_calls_baseline":
            samples * epochs, "processor_calls_ours": dataset.encodes, "inputs_identical": same}


def bench_steps(steps: int, model_dir: Path, processor) -> dict:
    from stages.models import load_vlm

    size = KeyframesParams().train_size
    results: dict = {"train_size": size, "steps": steps}
    batches = [encode(processor, s) for s in synthetic_samples(steps, KeyframesParams().n_frames, size)]
    for checkpointing in (False, True):
        model, _ = load_vlm(model_dir, "float32", "cpu")
        model = lora_model(model, replace_modules(SftParams(), model), checkpointing)
        model.train()
        seconds, tokens = time_steps(model, batches, "cpu", autocast=False)
        key = "checkpointing" if checkpointing else "plain"
        results[key] = {"samples_per_s": round(steps / seconds, 3), "tokens_per_s": round(tokens / seconds, 1),
                        "s_per_step": round(seconds / steps, 4), "tokens_per_sample": tokens // steps}
    results["checkpointing_slowdown"] = round(results["plain"]["samples_per_s"]
                                              / results["checkpointing"]["samples_per_s"], 3)
    return results


def bench_grpo_checkpointing(rounds: int, model_dir: Path) -> dict:
    """TRL GRPO rounds at the default shapes (tiny model, 2 prompts × 8 rollouts, 256-token responses), with
    and without gradient checkpointing (TRL's default is on; the stage's `grpo.gradient_checkpointing` off)."""
    from dataclasses import replace

    from stages.grpo.data import build_dataset, read_grpo_shards
    from stages.grpo.trl_engine import train_trl
    from stages.params.grpo import GrpoParams
    from stages.params.reward import RewardParams
    from stages.params.sam2 import Sam2Params
    from tests.stages.grpo_factory import write_grpo_shards

    out: dict = {"rounds": rounds}
    with tempfile.TemporaryDirectory(prefix="vrsflow-bench-grpo-") as tmp:
        dataset = build_dataset(read_grpo_shards(write_grpo_shards(Path(tmp) / "shards", 4)))
        runs: dict[str, list[float]] = {"plain": [], "checkpointing": []}
        for _ in range(2):  # alternating, best of two: the machine is shared
            for key in runs:
                params = replace(GrpoParams(), model_path=str(model_dir), max_steps=rounds, save_every_steps=10**6,
                                 gradient_checkpointing=key == "checkpointing")
                result = train_trl(params, RewardParams(components=("format", "keyframe", "spatial")), Sam2Params(),
                                   dataset, Path(tmp) / "out", Path(tmp) / "ckpt")
                runs[key].append(round(result["wall_s"] / rounds, 3))
    for key, seconds in runs.items():
        out[key] = {"s_per_round": min(seconds), "runs": seconds}
    out["checkpointing_slowdown"] = round(out["checkpointing"]["s_per_round"] / out["plain"]["s_per_round"], 3)
    return out


def bench_cpu(args: argparse.Namespace) -> dict:
    from stages.models import load_vlm
    from stages.tiny_models import build_tiny_models

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="vrsflow-bench-sft-"))
    build_tiny_models(TinyModelsParams(), work)
    _, processor = load_vlm(work / "qwen25vl", "float32", "cpu")
    n_frames = KeyframesParams().n_frames
    return {"threads": args.threads,
            "reader": bench_reader(args.samples, args.size, n_frames),
            "epochs": bench_epochs(args.samples, args.epochs, processor, KeyframesParams().train_size, n_frames),
            "steps": bench_steps(args.steps, work / "qwen25vl", processor),
            "grpo_rounds": bench_grpo_checkpointing(args.grpo_rounds, work / "qwen25vl")}


STAGE_SNIPPET = """
import json, sys, time
from pathlib import Path
from stages.params.model import ModelParams
from stages.params.sft import SftParams
from stages.sft import train_sft
out = Path(sys.argv[1])
started = time.perf_counter()
report = train_sft(SftParams(), ModelParams(), Path("data/shards"), out / "sft", out / "ckpt", out / "metrics")
import stages.sft
print(json.dumps({"wall_s": round(time.perf_counter() - started, 2), "module": stages.sft.__file__, **report.metrics}))
"""


def bench_stage(pipeline: Path, baseline_commit: str, repeats: int) -> dict:
    """`train_sft` of the current tree and of `baseline_commit`, alternating, each in a fresh process, with each
    tree's default `sft` and `model` params (the default pipeline's) on the pipeline copy's shards and tiny model."""
    with tempfile.TemporaryDirectory(prefix="vrsflow-bench-sft-stage-") as tmp:
        trees = {"ours": REPO, "baseline": Path(tmp) / "baseline"}
        trees["baseline"].mkdir()
        archive = subprocess.run(["git", "archive", baseline_commit, "stages", "schemas"], cwd=REPO,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(trees["baseline"])], input=archive, check=True)
        # a script file, not `-c`: `-c` would put the pipeline folder (cwd) first on sys.path
        script = Path(tmp) / "run_sft.py"
        script.write_text(STAGE_SNIPPET)
        runs: dict[str, list[dict]] = {"baseline": [], "ours": []}
        for repeat in range(repeats):
            for kind, tree in trees.items():
                env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
                proc = subprocess.run([sys.executable, str(script), str(Path(tmp) / f"{kind}{repeat}")],
                                      cwd=pipeline, env=env, capture_output=True, text=True, check=True)
                run = json.loads(proc.stdout.strip().splitlines()[-1])
                # which tree ran, without the machine's paths
                run["module"] = f"{kind}:{Path(run['module']).relative_to(tree).as_posix()}"
                runs[kind].append(run)
    best = {k: min(r["wall_s"] for r in v) for k, v in runs.items()}
    return {"baseline_commit": baseline_commit, "repeats": repeats, "runs": runs, "best_wall_s": best,
            "speedup": round(best["baseline"] / best["ours"], 3)}


def replace_modules(params: SftParams, model) -> SftParams:
    """The SFT params with only the target modules that the model has."""
    from dataclasses import replace

    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    return replace(params, target_modules=tuple(m for m in params.target_modules if m in names))


def encode(processor, sample: dict) -> dict:
    """Today's per-step encoding (the stage's `encode_example`)."""
    text = processor.apply_chat_template(messages(sample["meta"], sample["meta"]["response"]), tokenize=False)
    inputs = dict(processor(text=[text], images=[sample["frames"]], return_tensors="pt"))
    inputs["labels"] = assistant_labels(inputs["input_ids"], processor.tokenizer)
    return inputs


def gpu_batch(n_frames: int, size: int, text_tokens: int, response_tokens: int, device: str) -> dict:
    """Model inputs of one 3B-shaped sample built directly (random token ids; grid as the processor makes it)."""
    patches = (size // 14) ** 2  # 14-px patches per frame, before the 2 × 2 merge
    per_image = patches // 4
    rng = np.random.default_rng(0)
    ids: list[int] = []
    for _ in range(n_frames):
        ids += [int(t) for t in rng.integers(0, 151000, 4)] + [VISION_START] + [IMAGE_TOKEN] * per_image + [VISION_END]
    ids += [int(t) for t in rng.integers(0, 151000, text_tokens + response_tokens)]
    input_ids = torch.tensor([ids], device=device)
    labels = torch.full_like(input_ids, -100)
    labels[0, -response_tokens:] = input_ids[0, -response_tokens:]
    grid = torch.tensor([[1, size // 14, size // 14]] * n_frames, device=device)
    pixels = torch.randn(n_frames * patches, 3 * 2 * 14 * 14, device=device, dtype=torch.bfloat16)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels,
            "mm_token_type_ids": (input_ids == IMAGE_TOKEN).long(), "pixel_values": pixels, "image_grid_thw": grid}


class Variant(NamedTuple):
    batch: int
    checkpointing: bool = False
    packed: bool = False
    liger: bool = False


def parse_variant(text: str) -> Variant:
    """`4` → micro-batch 4, padded rows; `8c` with gradient checkpointing; `4p` packed; `4pl` packed with Liger."""
    match = re.fullmatch(r"(\d+)(c?)(p?)(l?)", text)
    if match is None:
        raise SystemExit(f"--variants: '{text}' is not a batch size with optional flags c, p, l in that order "
                         "(e.g. 1, 2, 8c, 4p, 4pl)")
    if int(match.group(1)) < 1:
        raise SystemExit(f"--variants: '{text}': the batch size must be at least 1")
    return Variant(int(match.group(1)), *(bool(match.group(i)) for i in (2, 3, 4)))


def check_order(variants: list[Variant]) -> None:
    """Liger's kernels cannot be taken off a model: every `l` variant after every other."""
    seen_liger = False
    for variant in variants:
        if seen_liger and not variant.liger:
            raise SystemExit("--variants: Liger variants (l) must come after all others (its kernels stay applied)")
        seen_liger = seen_liger or variant.liger


def micro_batch_choice(rows: list[dict]) -> dict | None:
    """The micro-batch to train with (padded or packed alike): the largest that ran without checkpointing, else the
    smallest that ran with it (checkpointing recomputes the forward pass: a cost to pay only where memory needs it)."""
    ran = [r for r in rows if "error" not in r]
    plain = [r for r in ran if not r["gradient_checkpointing"]]
    if plain:
        best = max(plain, key=lambda r: (r["batch"], r.get("mfu") or 0.0))
        return {"variant": best["variant"], "batch": best["batch"], "gradient_checkpointing": False}
    if ran:
        least = min(ran, key=lambda r: r["batch"])
        return {"variant": least["variant"], "batch": least["batch"], "gradient_checkpointing": True}
    return None


def make_batch(samples: list[dict], packed: bool, rope_index) -> dict:
    """The micro-batch of `samples` as the stage makes it: one packed row, or right-padded rows."""
    batch = (PackCollator(rope_index)(samples) if packed
             else PadCollator(QWEN25VL_3B_TEXT["pad_token_id"])(samples))
    device = samples[0]["input_ids"].device  # the collators build some tensors on the CPU, as for a DataLoader
    return {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in batch.items()}


def count_flops(model, sample: dict, attention: str = "sdpa") -> int:
    """FLOPs of one forward + backward, counted with eager attention: torch's counter cannot read the grouped-query
    shapes (16 query heads, 2 key/value heads) that sdpa receives on CUDA, while eager attention's matrix products
    are the same arithmetic in plain matmuls. The model is back on sdpa afterwards."""
    from torch.utils.flop_counter import FlopCounterMode

    model.set_attn_implementation("eager")
    try:
        with FlopCounterMode(display=False) as counter:
            model(**sample).loss.backward()
    finally:
        model.set_attn_implementation(attention)
        model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def bench_gpu(steps: int, variants: list[str], peak_tflops: float | None, smoke: bool = False, profile: bool = False,
              progress=None, lengths: tuple[int, ...] = (400,), attention: str = "sdpa") -> dict:
    """3B-shaped LoRA steps on CUDA, one model, one row per variant (`parse_variant`); `smoke` runs the same code on
    CPU with shrunken shapes (a check, no figures). `progress(result)` is called after every variant with the
    figures so far (a run stopped during a later variant keeps the earlier ones). Sample i of a micro-batch has
    `lengths[i % len(lengths)]` response tokens.

    MFU counts the model's FLOPs (one forward + backward of each sample alone, as torch's FlopCounterMode measures it
    without checkpointing, with eager attention: `count_flops`), so padding and the recomputed forward of a
    checkpointed variant are cost, not credit."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    from stages.models.qwen_shapes import qwen25vl_3b_config

    parsed = [parse_variant(v) for v in variants]
    check_order(parsed)
    config, size, device = qwen25vl_3b_config(), 560, "cuda"
    if smoke:
        text, vision = config.text_config, config.vision_config
        text.hidden_size, text.intermediate_size, text.num_hidden_layers = 64, 128, 2
        text.num_attention_heads, text.num_key_value_heads, text.head_dim = 4, 2, 16
        text.rope_parameters = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 2, 2]}
        vision.depth, vision.hidden_size, vision.intermediate_size, vision.num_heads = 2, 32, 64, 2
        vision.out_hidden_size, vision.fullatt_block_indexes = 64, [1]
        size, device = 112, "cpu"
    elif not torch.cuda.is_available():
        raise SystemExit("--gpu needs a CUDA device")
    config._attn_implementation = attention
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke)"
    peak = peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # build in bf16 directly: no fp32 copy of 3.8B parameters
    try:
        with torch.device(device):
            model = Qwen2_5_VLForConditionalGeneration(config)
    finally:
        torch.set_default_dtype(default_dtype)
    n_params = sum(p.numel() for p in model.parameters())
    rope_index = model.model.get_rope_index
    model = lora_model(model, SftParams(lora_dropout=0.0), gradient_checkpointing=False)
    model.train()
    samples = {n: gpu_batch(6, size, 200, n, device) for n in dict.fromkeys(lengths)}
    flops = {n: count_flops(model, sample, attention) for n, sample in samples.items()}
    tokens = {n: int(sample["attention_mask"].sum()) for n, sample in samples.items()}
    rows: list[dict] = []

    def gpu_figures(rows: list[dict]) -> dict:
        measured = [r for r in rows if r.get("mfu") is not None]
        return {"device": name, "parameters": n_params, "tokens_per_sample": tokens, "frames": 6, "frame_size": size,
                "attention": attention, "lora": "r=8 on every linear layer of the language model, vision tower frozen",
                "response_lengths": list(lengths),
                "tflops_per_sample": {n: round(f / 1e12, 3) for n, f in flops.items()},
                "flops_counted": "each sample alone, forward + backward, eager attention (FlopCounterMode)",
                "peak_tflops_bf16": peak, "steps": steps, "variants": list(rows),
                "best": max(measured, key=lambda r: r["mfu"]) if measured else None,
                "micro_batch_choice": micro_batch_choice(rows), "variants_asked": list(variants)}

    liger_applied = False
    for text_variant, variant in zip(variants, parsed, strict=True):
        if variant.liger and not liger_applied and (missing := liger_missing()):
            # what sft.liger: auto does: no Liger where it cannot run (liger-kernel 0.8.5 does not import its
            # Qwen2.5-VL kernels with transformers 5.24); the row says why instead of the run ending there
            rows.append({"variant": text_variant, "batch": variant.batch, "liger": True,
                         "error": f"Liger unavailable: needs {', '.join(missing)}"})
            print(f"bench_sft: variant {text_variant}: {rows[-1]['error']}", flush=True)
            continue
        if variant.liger and not liger_applied:
            from transformers.integrations.liger import apply_liger_kernel

            apply_liger_kernel(model, None)  # what the Trainer does with use_liger_kernel (sft.liger)
            liger_applied = True
        if variant.checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.enable_input_require_grads()
        else:
            model.gradient_checkpointing_disable()
        members = [lengths[i % len(lengths)] for i in range(variant.batch)]
        batch = make_batch([samples[n] for n in members], variant.packed, rope_index)
        row = {"variant": text_variant, "batch": variant.batch, "gradient_checkpointing": variant.checkpointing,
               "packed": variant.packed, "liger": variant.liger,
               "padding_share": round(1 - sum(tokens[n] for n in members) / batch["input_ids"].numel(), 4)}
        if device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            seconds, _ = time_steps(model, [batch] * steps, device, autocast=False)
        except torch.OutOfMemoryError:
            model.zero_grad(set_to_none=True)
            rows.append({**row, "error": "CUDA out of memory"})
            print(f"bench_sft: variant {text_variant}: CUDA out of memory", flush=True)
            if progress is not None:
                progress(gpu_figures(rows))
            continue
        per_step = seconds / steps
        achieved = sum(flops[n] for n in members) / per_step / 1e12
        rows.append({**row, "s_per_step": round(per_step, 4),
                     "tokens_per_s": round(sum(tokens[n] for n in members) / per_step, 1),
                     "achieved_tflops": round(achieved, 2), "mfu": None if peak is None else round(achieved / peak, 4),
                     "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)
                     if device == "cuda" else None})
        print(f"bench_sft: {rows[-1]}", flush=True)
        if progress is not None:
            progress(gpu_figures(rows))
    figures = gpu_figures(rows)
    measured = [row for row in rows if "error" not in row]
    if profile and measured:  # the last variant that ran, on a batch made again (a later row may have made another)
        last = measured[-1]
        members = [lengths[i % len(lengths)] for i in range(last["batch"])]
        batch = make_batch([samples[n] for n in members], last["packed"], rope_index)
        figures["profile"] = {"variant": last["variant"], **profile_step(model, batch, device)}
        print(f"bench_sft: profile {json.dumps(figures['profile'])[:2000]}", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", action="store_true", help="3B-shaped model on CUDA instead of the tiny one on CPU")
    parser.add_argument("--steps", type=int, default=8, help="timed steps (one more is run as warm-up)")
    parser.add_argument("--samples", type=int, default=32, help="CPU: pool size for the reader and epoch parts")
    parser.add_argument("--size", type=int, default=560, help="CPU reader part: frame side, px (paper: 560)")
    parser.add_argument("--epochs", type=int, default=3, help="CPU epoch part: passes over the pool")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (sft.cpu_threads default: 1)")
    parser.add_argument("--grpo-rounds", type=int, default=4, help="CPU: timed TRL GRPO rounds per setting")
    parser.add_argument("--stage", type=Path, default=None, help="pipeline copy with data/shards: time train_sft")
    parser.add_argument("--baseline-commit", default="", help="--stage: the commit whose train_sft is the baseline")
    parser.add_argument("--repeats", type=int, default=2, help="--stage: runs of each (best is reported)")
    parser.add_argument("--variants", nargs="+", default=["1"],
                        help="GPU mode: micro-batch sizes, flags c (checkpointing) p (packed) l (Liger): 1 2 4c 2pl")
    parser.add_argument("--lengths", type=int, nargs="+", default=[400],
                        help="GPU mode: response tokens of the micro-batch's samples in turn (one value: no padding)")
    parser.add_argument("--attention", default="sdpa", choices=["sdpa", "flex_attention", "flash_attention_2", "eager"],
                        help="GPU mode: attention implementation")
    parser.add_argument("--peak-tflops", type=float, default=None, help="GPU mode: dense bf16 peak override")
    parser.add_argument("--smoke", action="store_true", help="GPU mode's code on CPU with tiny shapes (a check)")
    parser.add_argument("--profile", action="store_true",
                        help="GPU mode: then one step of the last variant under torch.profiler (top operators)")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: bench/results/<name>.json)")
    args = parser.parse_args()
    if args.gpu or args.smoke:
        name = args.out.stem if args.out else "gpu-sft"  # the record names the file it is in
        baseline = "none (absolute figures; MFU against the device's dense bf16 peak)"
        result = bench_gpu(args.steps, args.variants, args.peak_tflops, smoke=args.smoke, profile=args.profile,
                           progress=lambda figures: write_result(name, figures, baseline, out=args.out),
                           lengths=tuple(args.lengths), attention=args.attention)
    elif args.stage is not None:
        if not args.baseline_commit:
            raise SystemExit("--stage needs --baseline-commit (the code to compare against)")
        result = bench_stage(args.stage, args.baseline_commit, args.repeats)
        name = args.out.stem if args.out else "sft-stage"  # the record names the file it is in
        baseline = f"train_sft at {args.baseline_commit}, same data"
    else:
        result = bench_cpu(args)
        name, baseline = "sft", "today's loop: read_shards decodes the pool up front, processor on every step"
    write_result(name, result, baseline, out=args.out)


if __name__ == "__main__":
    main()
