"""SAM2 as a GPU service for verl's CPU-only reward workers (docs/grpo_verl.md).

verl scores one rollout at a time in reward workers that see no GPU. The consistency reward therefore
asks a named Ray actor (`vrsflow-sam2` by default, on the Ray cluster verl already runs) for masks.
The actor batches by prompt: requests for the same sample that arrive within `max_wait_s` (or until
`group_size` = rollout.n of them are in) are answered by ONE `propagate_groups` call — the frames are
encoded once and rollouts with the same keyframe are tracked as objects of one SAM2 state.

Frames come from the verl parquet (`images` bytes, `extra_info.sample_id`), so requests carry only
(sample id, keyframe position, boxes). `GroupBatcher` is the engine-free batching core (asyncio);
`Sam2Server` wraps it with a predictor and a frame source; `start_service` launches it on Ray.

One service per job: `fingerprint` hashes the checkpoint, the config (`stages.sam2_wrapper.config_identity`) and
the parquet files; the job's service name ends with it (`service_name`), the actor reports it, and
`start_service` refuses (one line) an actor of that name serving other files. `stop_service` ends it
(`python -m stages.grpo.verl_engine finish` does, at the end of launch.sh).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

Request = tuple  # (keyframe position, boxes, point prompts per box: ((x, y, label), …) or ())
# The actor lives in this fixed Ray namespace: a detached actor is only found by name from the namespace it
# was created in, and verl's driver and reward workers run in their own (anonymous) namespace.
NAMESPACE = "vrsflow"


@dataclass
class _Pending:
    requests: list[Request] = field(default_factory=list)
    futures: list[asyncio.Future] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class GroupBatcher:
    """Collect mask requests per sample and answer each sample's batch with one compute call.

    Args:
        compute: (sample id, requests) → one (T, H, W) union mask per request (runs in a thread).
        group_size: flush a sample as soon as this many requests are waiting (verl's rollout.n).
        max_wait_s: flush a sample this long after its first waiting request at the latest.
    """

    def __init__(self, compute: Callable[[str, Sequence[Request]], list[np.ndarray]], group_size: int = 8,
                 max_wait_s: float = 0.05) -> None:
        self.compute = compute
        self.group_size = group_size
        self.max_wait_s = max_wait_s
        self.pending: dict[str, _Pending] = {}
        self.batches: list[tuple[str, int]] = []  # (sample id, requests answered together), for metrics

    async def masks(self, sample_id: str, position: int, boxes: Sequence[Sequence[float]],
                    prompts: Sequence = ()) -> np.ndarray:
        """The union mask per shown frame of `boxes` (with their point prompts, VideoSeg-R1) propagated from
        frame `position` of `sample_id`."""
        loop = asyncio.get_running_loop()
        entry = self.pending.setdefault(sample_id, _Pending())
        future: asyncio.Future = loop.create_future()
        points = tuple(tuple((float(x), float(y), int(label)) for x, y, label in p) for p in prompts)
        entry.requests.append((int(position), tuple(tuple(float(v) for v in b) for b in boxes), points))
        entry.futures.append(future)
        if len(entry.requests) >= self.group_size:
            self._flush(sample_id)
        elif entry.timer is None:
            entry.timer = loop.call_later(self.max_wait_s, self._flush, sample_id)
        return await future

    def _flush(self, sample_id: str) -> Awaitable | None:
        entry = self.pending.pop(sample_id, None)
        if entry is None:
            return None
        if entry.timer is not None:
            entry.timer.cancel()
        self.batches.append((sample_id, len(entry.requests)))
        return asyncio.ensure_future(self._run(sample_id, entry))

    async def _run(self, sample_id: str, entry: _Pending) -> None:
        try:
            results = await asyncio.to_thread(self.compute, sample_id, entry.requests)
        except Exception as err:  # noqa: BLE001 - handed to every waiting caller, who re-raises it
            for future in entry.futures:
                future.set_exception(err)
            return
        for future, result in zip(entry.futures, results, strict=True):
            future.set_result(result)


class ParquetFrames:
    """Shown frames per sample id from a verl parquet (`images` bytes + `extra_info.sample_id`)."""

    def __init__(self, paths: Sequence[str]) -> None:
        import pyarrow.parquet as pq

        self.rows: dict[str, list[bytes]] = {}
        for path in paths:
            table = pq.read_table(path, columns=["images", "extra_info"]).to_pylist()
            for row in table:
                self.rows[row["extra_info"]["sample_id"]] = [image["bytes"] for image in row["images"]]
        self.frames = lru_cache(maxsize=256)(self._decode)

    def _decode(self, sample_id: str) -> tuple[np.ndarray, ...]:
        from PIL import Image

        if sample_id not in self.rows:
            raise KeyError(f"sample {sample_id} is not in the SAM2 service's parquet files")
        return tuple(np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in self.rows[sample_id])


def _file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(checkpoint: str, config: str, parquet: Sequence[str], resources: str = "") -> str:
    """sha256 over the SAM2 checkpoint, the config sam2 reads, the parquet files the frames come from and the
    actor's resources (`resources_key`: an actor keeps the GPUs it was created with).

    Raises:
        FileNotFoundError: a missing file or an unresolvable config, in one line.
    """
    from stages.sam2_wrapper import config_identity

    for path in [checkpoint, *parquet]:
        if not Path(path).is_file():
            raise FileNotFoundError(f"SAM2 service: {path} not found")
    identity = config_identity(config)
    parts = [_file_sha256(checkpoint), identity["form"], identity["sha256"], *(_file_sha256(p) for p in parquet),
             resources]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def resources_key(num_gpus: float, memory_fraction: float) -> str:
    """The part of the fingerprint that names the actor's resources."""
    return f"gpus={num_gpus:g} memory_fraction={memory_fraction:g}"


def service_name(prefix: str, files_hash: str) -> str:
    """The job's actor name: `<grpo.verl.sam2_service>-<first 12 hex digits of the fingerprint>`."""
    return f"{prefix}-{files_hash[:12]}"


class Sam2Server:
    """The actor body: a SAM2 predictor, a frame source and a GroupBatcher.

    `memory_fraction` > 0 (colocated placement) caps this process's share of its GPU's memory.
    """

    def __init__(self, checkpoint: str, config: str, parquet: Sequence[str], group_size: int = 8,
                 max_wait_s: float = 0.05, threshold: float = 0.0, files_hash: str = "",
                 memory_fraction: float = 0.0) -> None:
        import torch

        from stages.sam2_wrapper import load_video_predictor

        if memory_fraction > 0 and torch.cuda.is_available():
            torch.cuda.set_per_process_memory_fraction(memory_fraction, 0)
        self.files_hash = files_hash
        self.predictor = load_video_predictor(checkpoint, config)
        self.frames = ParquetFrames(parquet)
        self.threshold = threshold
        self.batcher = GroupBatcher(self._compute, group_size, max_wait_s)

    def _compute(self, sample_id: str, requests: Sequence[Request]) -> list[np.ndarray]:
        from stages.sam2_wrapper import BoxGroup, propagate_groups

        frames = list(self.frames.frames(sample_id))
        unique = sorted(set(requests))
        groups = [BoxGroup(k, list(b), [list(p) for p in prompts]) for k, b, prompts in unique]
        masks = propagate_groups(self.predictor, frames, groups, self.threshold)
        table = {req: m.any(axis=0) for req, m in zip(unique, masks, strict=True)}
        return [table[r] for r in requests]

    async def masks(self, sample_id: str, position: int, boxes: list[list[float]],
                    prompts: Sequence = ()) -> np.ndarray:
        """See GroupBatcher.masks."""
        return await self.batcher.masks(sample_id, position, boxes, prompts)

    def fingerprint(self) -> str:
        """The fingerprint of the files this actor serves (see `fingerprint`)."""
        return self.files_hash

    def stats(self) -> dict[str, float]:
        """Batches served and the mean number of requests answered per SAM2 call."""
        n = len(self.batcher.batches)
        return {"batches": n, "mean_batch": float(np.mean([b for _, b in self.batcher.batches])) if n else 0.0}


def start_service(name: str, checkpoint: str, config: str, parquet: Sequence[str], num_gpus: float = 1.0,
                  group_size: int = 8, max_wait_s: float = 0.05, memory_fraction: float = 0.0):
    """Start (or find) the named, detached SAM2 actor on the current Ray cluster; returns its handle.

    Raises:
        RuntimeError: an actor of that name already serves other files (other fingerprint), in one line.
    """
    import ray

    files_hash = fingerprint(checkpoint, config, parquet, resources_key(num_gpus, memory_fraction))
    ray.init(address="auto", namespace=NAMESPACE, ignore_reinit_error=True, logging_level="ERROR")
    actor_cls = ray.remote(num_gpus=num_gpus, max_concurrency=1024)(Sam2Server)
    placement = {}
    if num_gpus == 0 and memory_fraction > 0:  # colocated: on a node that has GPUs (not a CPU-only head)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        gpu_nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("GPU", 0) > 0]
        if gpu_nodes:
            placement = {"scheduling_strategy": NodeAffinitySchedulingStrategy(gpu_nodes[0], soft=True)}
    handle = actor_cls.options(name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
                               **placement).remote(
        checkpoint, config, list(parquet), group_size, max_wait_s, 0.0, files_hash, memory_fraction)
    running = ray.get(handle.fingerprint.remote())
    if running != files_hash:
        raise RuntimeError(f"SAM2 service {name} already runs for other files (fingerprint {running[:12]}, these "
                           f"are {files_hash[:12]}): stop it (python -m stages.rewards.sam2_service --stop --name "
                           f"{name}) or use another name")
    return handle


def stop_service(name: str) -> bool:
    """Kill the named SAM2 actor if it runs on the Ray cluster this process is connected to; True if it did."""
    import ray

    try:
        actor = ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return False
    ray.kill(actor, no_restart=True)
    return True


def ray_masks_for(name: str, sample_id: str):
    """A `masks_for` callable for the consistency reward that asks the named actor."""
    import ray

    actor = ray.get_actor(name, namespace=NAMESPACE)

    def masks_for(position: int, boxes: tuple[tuple[float, ...], ...], prompts: Sequence = ()) -> np.ndarray:
        return ray.get(actor.masks.remote(sample_id, position, [list(b) for b in boxes],
                                          [[list(p) for p in box] for box in prompts]))

    return masks_for


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m stages.rewards.sam2_service --name … --checkpoint … --config … --parquet …` (launch.sh);
    `--stop --name …` ends that actor."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--stop", action="store_true", help="stop the named service and exit")
    parser.add_argument("--checkpoint")
    parser.add_argument("--config")
    parser.add_argument("--parquet", nargs="+")
    parser.add_argument("--num-gpus", type=float, default=1.0, help="GPUs declared to Ray (0 = colocated)")
    parser.add_argument("--memory-fraction", type=float, default=0.0, help="cap on the GPU's memory (colocated)")
    parser.add_argument("--group-size", type=int, default=8)
    args = parser.parse_args(argv)
    import ray

    if args.stop:
        ray.init(address="auto", namespace=NAMESPACE, ignore_reinit_error=True, logging_level="ERROR")
        print(f"SAM2 service {args.name}: {'stopped' if stop_service(args.name) else 'not running'}")
        return
    missing = [f"--{k}" for k in ("checkpoint", "config", "parquet") if not getattr(args, k)]
    if missing:
        parser.error(f"{', '.join(missing)} required")
    try:
        handle = start_service(args.name, args.checkpoint, args.config, args.parquet, args.num_gpus,
                               args.group_size, memory_fraction=args.memory_fraction)
        ray.get(handle.stats.remote())  # waits until the actor (and its predictor) is up
    except (FileNotFoundError, RuntimeError) as err:
        sys.exit(f"error: {err}")
    print(f"SAM2 service {args.name} is up")


if __name__ == "__main__":
    main()
