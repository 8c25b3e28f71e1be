"""SAM2, shared by the consistency reward and evaluation: load, and propagate boxes over frames.

Configs: `sam2.config` is one of three forms (`config_form`):
- `package`: a config name inside the sam2 package (`configs/sam2.1/sam2.1_hiera_l.yaml`, for the official
  checkpoints), resolved by sam2's own Hydra search path — not a file of the project;
- `file`: a full SAM2 Hydra config file in the project (e.g. a copy of the package's), given to sam2 with
  its own folder as the Hydra search path;
- `vrsflow`: a vrsflow config file — YAML with `base` (a package config name) and `overrides` (Hydra
  overrides), which is how the tiny random SAM2 is described (stages/tiny_models/tiny_sam2.py).
`config_identity` names what a config resolves to (form + sha256 of the YAML sam2 reads), for lineage.

Two entry points:
- `propagate_boxes(predictor, frames, key_idx, boxes)`: one set of boxes at one keyframe, tracked forward
  and backward over every frame (evaluation over a whole video; frames as numpy arrays or a JPEG folder).
- `propagate_groups(predictor, frames, groups)`: many box sets over the SAME frames (the rollouts of one
  GRPO prompt differ only in keyframe and boxes). The image encoder runs once per frame, all frames in ONE
  batch (up to ENCODE_CHUNK; SAM2's own warm-up encoding of frame 0 in `init_state` is skipped), whatever
  keyframes the rollouts chose; every keyframe group is then tracked in one inference state built on those
  cached features;
  rollouts that chose the same keyframe are tracked together, all their boxes as ONE batch per
  frame (`_track_batched`: SAM2 1.1's own propagate_in_video runs objects one at a time).
  `propagate_groups(..., share_encoding=False)` is the released Veason-R1 reward's way (a fresh state
  that re-encodes the frames for every group) and exists as the benchmark baseline.

Long videos (`vrsflow segment`): `frames` may be any sequence that reads a frame when indexed (nothing is
held); SAM2's input is made per encoder batch, `propagate_groups(..., sink=…, spill_dir=…)` keeps the shared
encoding in a file instead of memory, gives each frame's masks to `sink` as they are tracked, and the memory
bank keeps only the frames SAM2's memory attention can still read. Masks are the same either way.

GPU-only options of `load_video_predictor`: `dtype` (auto: bf16 autocast on CUDA as SAM2's own demo runs it,
fp32 on the CPU; float32 turns autocast off on CUDA) and `vos_optimized` (SAM2.1's `SAM2VideoPredictorVOS`: the
image encoder, memory attention, memory encoder and SAM heads under `torch.compile`). On the CPU both paths'
masks are bit-equal; on CUDA they round differently (bench/bench_sam2_reward.py records by how much).
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml
from PIL import Image

_LOADER_LOCK = threading.Lock()
ENCODE_CHUNK = 8  # frames per image-encoder batch (bounds activation memory on long videos)


@dataclass(frozen=True)
class BoxGroup:
    """Boxes (x1, y1, x2, y2 in frame pixels) prompted on one keyframe; results are per box."""

    key_idx: int
    boxes: Sequence[Sequence[float]]
    # optional extra prompt points per box: ((x, y, label), …), label 1 positive, 0 negative (VideoSeg-R1)
    points: Sequence[Sequence[Sequence[float]]] = ()


def resolve_config(config: str) -> tuple[str, list[str]]:
    """(package config name, hydra overrides) for a package config name or a vrsflow config file."""
    path = Path(config)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        spec = yaml.safe_load(path.read_text()) or {}
        if "base" in spec:
            return str(spec["base"]), [str(o) for o in spec.get("overrides", [])]
    return config, []


def config_form(config: str) -> str:
    """`package`, `file` or `vrsflow` (see the module docstring).

    Raises:
        FileNotFoundError: neither a project file nor a config of the installed sam2 package (one line).
    """
    path = Path(config)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        spec = yaml.safe_load(path.read_text()) or {}
        return "vrsflow" if isinstance(spec, dict) and "base" in spec else "file"
    if _package_config(config) is None:
        raise FileNotFoundError(f"sam2.config {config}: neither a file in the project nor a config name in the "
                                f"installed sam2 package (e.g. configs/sam2.1/sam2.1_hiera_l.yaml)")
    return "package"


def _package_config(name: str) -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("sam2")
    if spec is None or spec.origin is None or Path(name).is_absolute():
        return None
    path = Path(spec.origin).parent / name
    return path if path.is_file() else None


def config_identity(config: str) -> dict[str, str]:
    """What `config` resolves to: {"form", "config", "sha256"} — sha256 of the YAML sam2 reads (for a vrsflow
    file: of the file and its base together). Recorded in lineage; a package name is no DVC dependency."""
    import hashlib

    form = config_form(config)
    digest = hashlib.sha256()
    if form in ("file", "vrsflow"):
        digest.update(Path(config).read_bytes())
    base = resolve_config(config)[0] if form != "file" else None
    if base is not None:
        package = _package_config(base)
        if package is None:
            raise FileNotFoundError(f"sam2.config {config}: base {base} is not a config of the installed sam2 package")
        digest.update(package.read_bytes())
    return {"form": form, "config": config, "sha256": digest.hexdigest()}


@contextlib.contextmanager
def _hydra_search_path(folder: Path | None) -> Iterator[None]:
    """sam2's global Hydra, or (folder given) Hydra searching `folder`, restored afterwards."""
    if folder is None:
        yield
        return
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    previous = GlobalHydra.instance().hydra if GlobalHydra.instance().is_initialized() else None
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(folder), version_base="1.2"):
            yield
    finally:
        GlobalHydra.instance().clear()
        if previous is not None:
            GlobalHydra.instance().initialize(previous)


def pick_device(dtype: str = "auto") -> tuple[str, torch.dtype]:
    """cuda + bf16 when available (auto), else cpu + fp32."""
    if torch.cuda.is_available():
        return "cuda", torch.float32 if dtype == "float32" else torch.bfloat16
    return "cpu", torch.float32


def load_video_predictor(checkpoint: str, config: str, device: str | None = None, dtype: str = "auto",
                         vos_optimized: bool = False, share_frame_self_attention: bool = False):
    """A SAM2 video predictor from a checkpoint file ({"model": state_dict}) and a config, built by sam2's own
    builder as vrsflow's subclass (`stages.sam2_wrapper.predictor`, named in the config it composes).

    Args:
        dtype: autocast of propagation: auto (bf16 on CUDA, fp32 on the CPU), bfloat16 (CUDA only) or float32.
        vos_optimized: SAM2.1's compiled predictor (`SAM2VideoPredictorVOS`); CUDA only (its first calls compile).
        share_frame_self_attention: memory attention's layers run their self-attention once for a batch of objects
            on one frame (`SharedFrameSelfAttentionLayer`; evaluation, which tracks many objects at once).

    Raises:
        FileNotFoundError: the checkpoint does not exist (names the path and how to make one).
        ValueError: a CUDA-only option on another device, or an unknown dtype (one line).
    """
    from sam2.build_sam import build_sam2_video_predictor

    folder = None
    if config_form(config) == "file":  # a full SAM2 config in the project: Hydra searches its folder
        folder, name, overrides = Path(config).resolve().parent, Path(config).name, []
    else:
        name, overrides = resolve_config(config)
    device = device or pick_device()[0]
    if dtype not in ("auto", "float32", "bfloat16"):
        raise ValueError(f"sam2 dtype: expected auto, float32 or bfloat16, got {dtype!r}")
    cuda = torch.device(device).type == "cuda"
    if not cuda and (vos_optimized or dtype == "bfloat16"):
        raise ValueError(f"sam2: {'vos_optimized' if vos_optimized else 'bf16 autocast'} is GPU-only (device {device})")
    if not Path(checkpoint).is_file():
        raise FileNotFoundError(f"SAM2 checkpoint {checkpoint} not found (build it with the tiny_models stage "
                                f"or point sam2.checkpoint at a real sam2.1_hiera_*.pt)")
    overrides = [*overrides, *vrsflow_overrides(vos_optimized, cuda and dtype != "float32", share_frame_self_attention)]
    with _LOADER_LOCK if folder is not None else contextlib.nullcontext(), _hydra_search_path(folder):
        return build_sam2_video_predictor(name, ckpt_path=checkpoint, device=device,
                                          hydra_overrides_extra=overrides, vos_optimized=vos_optimized)


def vrsflow_overrides(vos_optimized: bool, bf16_autocast: bool, share_frame_self_attention: bool) -> list[str]:
    """The Hydra overrides that make sam2's builder instantiate vrsflow's classes (`stages.sam2_wrapper.predictor`).
    sam2's builder puts its own `model._target_` first and these after it, so the config instantiates ours."""
    from stages.sam2_wrapper.predictor import SHARED_FRAME_LAYER, VIDEO_PREDICTOR, VIDEO_PREDICTOR_VOS

    overrides = [f"++model._target_={VIDEO_PREDICTOR_VOS if vos_optimized else VIDEO_PREDICTOR}",
                 f"++model.autocast_dtype={'bfloat16' if bf16_autocast else 'null'}"]
    if share_frame_self_attention:
        overrides.append(f"++model.memory_attention.layer._target_={SHARED_FRAME_LAYER}")
    return overrides


def load_frames(folder: str | Path) -> list[np.ndarray]:
    """RGB uint8 frames of a JPEG folder, in file-name order.

    Raises:
        FileNotFoundError: no .jpg/.jpeg file in the folder.
    """
    paths = sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    if not paths:
        raise FileNotFoundError(f"{folder}: no JPEG frames")
    frames = []
    for path in paths:
        with Image.open(path) as img:
            frames.append(np.asarray(img.convert("RGB")))
    return frames


def frames_tensor(frames: Sequence[np.ndarray], image_size: int,
                  mean: Sequence[float] = (0.485, 0.456, 0.406), std: Sequence[float] = (0.229, 0.224, 0.225)
                  ) -> torch.Tensor:
    """SAM2's input: frames resized to image_size², normalised, (T, 3, S, S) float32."""
    batch = torch.from_numpy(np.stack([np.asarray(f, dtype=np.uint8) for f in frames])).permute(0, 3, 1, 2)
    batch = torch.nn.functional.interpolate(batch.float() / 255.0, size=(image_size, image_size), mode="bilinear",
                                            align_corners=False, antialias=True)
    return (batch - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]


class FrameImages:
    """SAM2's input for a frame sequence, made when indexed (one frame or a list): `frames_tensor` of those
    frames. Holds nothing, so a long video's frames need not all be in memory."""

    def __init__(self, frames: Sequence[np.ndarray], image_size: int) -> None:
        self.frames, self.image_size = frames, image_size

    def __len__(self) -> int:
        return len(self.frames)

    def __getitem__(self, index: int | Sequence[int]) -> torch.Tensor:
        if isinstance(index, int | np.integer):
            return frames_tensor([self.frames[int(index)]], self.image_size)[0]
        return frames_tensor([self.frames[int(i)] for i in index], self.image_size)


class SpilledFeatures(dict):
    """SAM2's `cached_features` ({frame: (image, backbone_out)}) kept in a file: each frame's `backbone_fpn`
    is written once (its own dtype, exact) and read back when SAM2 asks for that frame; the position encodings
    (the same for every frame: they depend on the feature size only) are held once. Memory does not grow with
    the number of frames. The image is a placeholder (SAM2 passes it along unused)."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.path = Path(folder) / "sam2_features.bin"
        self._file = open(self.path, "w+b")  # noqa: SIM115 - closed by close()
        self._shapes: list[tuple[tuple[int, ...], torch.dtype]] = []
        self._offsets: dict[int, int] = {}
        self._pos: list[torch.Tensor] | None = None
        self._image: torch.Tensor | None = None

    def put(self, t: int, image: torch.Tensor, backbone_out: dict) -> None:
        fpn = [f.detach().cpu().contiguous() for f in backbone_out["backbone_fpn"]]
        pos = [p.detach() for p in backbone_out["vision_pos_enc"]]
        if self._pos is None:
            self._shapes, self._pos = [(tuple(f.shape), f.dtype) for f in fpn], [p.clone() for p in pos]
            self._image = torch.zeros((1, 1, 1, 1), dtype=image.dtype, device=image.device).expand(image.shape)
        elif not all(torch.equal(a, b) for a, b in zip(pos, self._pos, strict=True)):
            raise ValueError("SAM2 position encodings differ between frames; cannot spill features")
        self._file.seek(0, os.SEEK_END)
        self._offsets[t] = self._file.tell()
        for f in fpn:
            self._file.write(f.view(torch.uint8).numpy().tobytes())

    def get(self, t, default=None):  # noqa: ANN001 - dict's signature
        if t not in self._offsets:
            return default
        self._file.seek(self._offsets[t])
        fpn = []
        for shape, dtype in self._shapes:
            n = int(np.prod(shape)) * torch.empty((), dtype=dtype).element_size()
            data = torch.frombuffer(bytearray(self._file.read(n)), dtype=torch.uint8)
            fpn.append(data.view(dtype).reshape(shape).to(self._pos[0].device))
        return self._image, {"backbone_fpn": fpn, "vision_pos_enc": list(self._pos)}

    def __getitem__(self, t):  # noqa: ANN001
        out = self.get(t)
        if out is None:
            raise KeyError(t)
        return out

    def __contains__(self, t) -> bool:  # noqa: ANN001
        return t in self._offsets

    def __len__(self) -> int:
        return len(self._offsets)

    def close(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)


def _state(predictor, images: torch.Tensor | FrameImages, height: int, width: int, warm_up: bool = True) -> dict:
    """An inference state over in-memory frames (`VideoPredictor.init_state_from_frames`). `warm_up=False`
    skips the encoding of frame 0 that SAM2's `init_state` does (the shared path encodes every frame in one
    batch instead)."""
    with _quiet():
        return predictor.init_state_from_frames(images, height, width, warm_up=warm_up)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """SAM2 draws tqdm bars on stderr for every propagation; keep logs readable."""
    with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
        yield


def _autocast(predictor) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA unless the predictor was loaded with dtype float32 (`load_video_predictor`)."""
    dtype = predictor.autocast_dtype
    return torch.autocast("cuda", dtype=dtype) if dtype is not None else contextlib.nullcontext()


def encode_frames(predictor, state: dict, chunk: int = ENCODE_CHUNK, store: SpilledFeatures | None = None
                  ) -> dict[int, tuple]:
    """Image-encoder features of every frame of a state, computed in batches of `chunk` frames.

    Returns the `cached_features` layout SAM2 expects ({frame: (image (1,3,S,S), backbone_out)}), so a
    state whose cache holds them never runs the image encoder again. Frames already in the state's
    cache (SAM2's `init_state` encodes frame 0 to warm up) are taken from it, not encoded again.
    """
    features: dict[int, tuple] = {
        t: (image, {"backbone_fpn": out["backbone_fpn"], "vision_pos_enc": out["vision_pos_enc"]})
        for t, (image, out) in state["cached_features"].items()}
    todo = [t for t in range(state["num_frames"]) if t not in features]
    if store is not None:  # a long video: every frame's features go to the file, none stay in memory
        for t, (image, out) in features.items():
            store.put(t, image, out)
        features = store
    device = state["device"]
    for start in range(0, len(todo), chunk):
        frames = todo[start:start + chunk]
        images = state["images"][frames].to(device).float()
        out = predictor.forward_image(images)
        for i, t in enumerate(frames):
            one = (images[i:i + 1], {
                "backbone_fpn": [f[i:i + 1] for f in out["backbone_fpn"]],
                "vision_pos_enc": [p[i:i + 1] for p in out["vision_pos_enc"]],
            })
            if store is not None:
                store.put(t, *one)
            else:
                features[t] = one
    return features


def _track(predictor, state: dict, key_idx: int, boxes: Sequence[Sequence[float]], threshold: float,
           height: int, width: int, points: Sequence[Sequence[Sequence[float]]] = ()) -> np.ndarray:
    """(n_boxes, T, H, W) masks of boxes (and their extra points) prompted at key_idx, tracked forward then
    backward."""
    for obj, box in enumerate(boxes):
        extra = np.asarray(points[obj] if points else [], dtype=np.float32).reshape(-1, 3)
        predictor.add_new_points_or_box(state, frame_idx=key_idx, obj_id=obj, box=np.asarray(box, dtype=np.float32),
                                        points=extra[:, :2] if len(extra) else None,
                                        labels=extra[:, 2].astype(np.int32) if len(extra) else None)
    masks = np.zeros((len(boxes), state["num_frames"], height, width), dtype=bool)
    for reverse in (False, True):
        with _quiet():
            for t, obj_ids, logits in predictor.propagate_in_video(state, start_frame_idx=key_idx, reverse=reverse):
                masks[list(obj_ids), t] = (logits[:, 0] > threshold).cpu().numpy()
    return masks


def _track_batched(predictor, state: dict, key_idx: int, boxes: Sequence[Sequence[float]], threshold: float,
                   height: int, width: int, points: Sequence[Sequence[Sequence[float]]] = (),
                   sink: Callable[[int, np.ndarray], None] | None = None) -> np.ndarray | None:
    """`_track` with every box in ONE batch per frame (SAM2 1.1's propagate_in_video loops over objects).

    Same steps as SAM2's own video predictor — box prompt as corner points (labels 2, 3) on the
    keyframe as an initial conditioning frame, then frame-by-frame tracking forward and backward with
    the memory bank shared by both directions — but each step runs all boxes as one batch on the
    cached (expanded) image features. The keyframe's memory is encoded from the SAM head's own mask
    rather than a re-consolidated one, so masks can differ slightly from `_track`.

    With `sink`, each frame's masks (n_boxes, H, W) go to `sink(t, masks)` as they are tracked (forward from
    the keyframe, then backward) and nothing is returned; the memory bank then drops the frames memory
    attention can no longer read (beyond SAM2's memory and object-pointer windows), so memory stays flat.
    """
    n, frames = len(boxes), state["num_frames"]
    device = state["device"]
    # per object: the box corners (labels 2, 3), then its extra points (1 positive, 0 negative), padded with
    # label -1 (SAM2's "not a point") to the longest prompt of the batch
    width_pts = 2 + max((len(p) for p in points), default=0)
    coords = np.zeros((n, width_pts, 2), dtype=np.float32)
    labels = np.full((n, width_pts), -1, dtype=np.int32)
    for i, box in enumerate(boxes):
        coords[i, :2] = np.asarray(box, dtype=np.float32).reshape(2, 2)
        labels[i, :2] = (2, 3)
        for j, (x, y, label) in enumerate(points[i] if points else ()):
            coords[i, 2 + j], labels[i, 2 + j] = (x, y), int(label)
    scaled = torch.as_tensor(coords) / torch.tensor([width, height], dtype=torch.float32) * predictor.image_size
    point_inputs = {"point_coords": scaled.to(device), "point_labels": torch.as_tensor(labels, device=device)}
    memory: dict[str, dict] = {"cond_frame_outputs": {}, "non_cond_frame_outputs": {}}
    masks = None if sink is not None else np.zeros((n, frames, height, width), dtype=bool)
    # farthest frame memory attention reads: (num_maskmem - 1) strided memories, max_obj_ptrs_in_encoder pointers
    reach = max((predictor.num_maskmem + 1) * max(1, predictor.memory_temporal_stride_for_eval),
                predictor.max_obj_ptrs_in_encoder) + 1

    def step(t: int, reverse: bool, first: bool) -> None:
        out, low_res = predictor._run_single_frame_inference(
            inference_state=state, output_dict=memory, frame_idx=t, batch_size=n, is_init_cond_frame=first,
            point_inputs=point_inputs if first else None, mask_inputs=None, reverse=reverse, run_mem_encoder=True)
        memory["cond_frame_outputs" if first else "non_cond_frame_outputs"][t] = out
        _, video_res = predictor._get_orig_video_res_output(state, low_res)
        if sink is None:
            masks[:, t] = (video_res[:, 0] > threshold).cpu().numpy()
            return
        sink(t, (video_res[:, 0] > threshold).cpu().numpy())
        # no longer readable: forward, frames `reach` behind that the backward pass will not read either
        # (it reads the first `reach` frames after the keyframe); backward, frames `reach` behind
        old = t - reach if not reverse else t + reach
        if (not reverse and old > key_idx + reach) or (reverse and old < key_idx):
            memory["non_cond_frame_outputs"].pop(old, None)

    step(key_idx, False, True)
    for t in range(key_idx + 1, frames):
        step(t, False, False)
    for t in range(key_idx - 1, -1, -1):
        step(t, True, False)
    return masks


@torch.inference_mode()
def propagate_groups(predictor, frames: Sequence[np.ndarray], groups: Sequence[BoxGroup],
                     threshold: float = 0.0, share_encoding: bool = True,
                     sink: Callable[[int, int, np.ndarray], None] | None = None,
                     spill_dir: Path | None = None) -> list[np.ndarray] | None:
    """Masks (n_boxes, T, H, W bool) for every group, its boxes tracked forward and backward from its keyframe.

    Args:
        predictor: a SAM2 video predictor from `load_video_predictor` (frames from memory: `init_state_from_frames`).
        frames: T RGB uint8 frames (H, W, 3), all of one size.
        groups: box sets; groups with the same keyframe are tracked together as objects of one state.
        threshold: mask logit threshold (SAM2's own is 0).
        share_encoding: encode the frames once for all groups (False: re-encode per group, the baseline).
        sink: instead of returning arrays, give each group's masks of each frame, (n_boxes, H, W), to
            `sink(group, t, masks)` as they are tracked (groups without boxes are not called); shared
            encoding only.
        spill_dir: keep the shared encoding in a file in this folder instead of memory (long videos).

    Returns:
        One array per group, in order; a group without boxes gets an array with 0 boxes. None with `sink`.

    Raises:
        ValueError: a keyframe outside the frames, or frames of different sizes.
    """
    # without the CUDA extension SAM2 warns on every call that hole filling is skipped (harmless)
    warnings.filterwarnings("ignore", message="(?s).*(post-processing|fill_holes)")
    height, width = frames[0].shape[:2]
    if isinstance(frames, list | tuple) and any(f.shape[:2] != (height, width) for f in frames):
        raise ValueError(f"frames differ in size: {sorted({f.shape[:2] for f in frames})}")  # (a lazy source checks)
    for group in groups:
        if not 0 <= group.key_idx < len(frames):
            raise ValueError(f"keyframe {group.key_idx} outside {len(frames)} frames")
    if sink is not None and not share_encoding:
        raise ValueError("propagate_groups: a sink needs share_encoding")
    images = FrameImages(frames, predictor.image_size)
    out: list[np.ndarray] = [] if sink is not None else [
        np.zeros((0, len(frames), height, width), dtype=bool) for _ in groups]
    with _autocast(predictor):
        if not share_encoding:
            for g, group in enumerate(groups):
                if group.boxes:
                    state = _state(predictor, images, height, width)
                    out[g] = _track(predictor, state, group.key_idx, group.boxes, threshold, height, width,
                                    group.points)
            return out
        state = _state(predictor, images, height, width, warm_up=False)  # every frame in one encoder batch
        store = SpilledFeatures(spill_dir) if spill_dir is not None else None
        try:
            _track_groups(predictor, state, encode_frames(predictor, state, store=store), groups, threshold,
                          height, width, out, sink)
        finally:
            if store is not None:
                store.close()
    return None if sink is not None else out


def _track_groups(predictor, state: dict, features: dict, groups: Sequence[BoxGroup], threshold: float,
                  height: int, width: int, out: list[np.ndarray],
                  sink: Callable[[int, int, np.ndarray], None] | None) -> None:
    """Each keyframe's groups tracked together on the shared features (`propagate_groups`)."""
    by_key: dict[int, list[int]] = {}
    for g, group in enumerate(groups):
        if group.boxes:
            by_key.setdefault(group.key_idx, []).append(g)
    for key_idx, members in sorted(by_key.items()):
        predictor.reset_state(state)  # same frames, tracking starts afresh
        # shared encoding: no image-encoder pass below
        state["cached_features"] = features if isinstance(features, SpilledFeatures) else dict(features)
        boxes = [box for g in members for box in groups[g].boxes]
        points = [groups[g].points[i] if groups[g].points else () for g in members
                  for i in range(len(groups[g].boxes))]
        bounds, start = [], 0
        for g in members:
            bounds.append((g, start, start + len(groups[g].boxes)))
            start += len(groups[g].boxes)
        if sink is not None:
            def frame_sink(t: int, masks: np.ndarray, bounds: list = bounds) -> None:
                for g, first, last in bounds:
                    sink(g, t, masks[first:last])
            _track_batched(predictor, state, key_idx, boxes, threshold, height, width,
                           points if any(points) else (), sink=frame_sink)
            continue
        masks = _track_batched(predictor, state, key_idx, boxes, threshold, height, width,
                               points if any(points) else ())
        for g, first, last in bounds:
            out[g] = masks[first:last]


def propagate_boxes(predictor, frames: Sequence[np.ndarray] | str | Path, key_idx: int,
                    boxes: Sequence[Sequence[float]], threshold: float = 0.0) -> np.ndarray:
    """Masks per frame, (T, n_boxes, H, W) bool, of boxes given at frame `key_idx`, tracked both ways.

    Args:
        predictor: a SAM2 video predictor from `load_video_predictor`.
        frames: RGB uint8 arrays, or a folder of JPEG frames (read in file-name order).
        key_idx: position of the keyframe in `frames`.
        boxes: [x1, y1, x2, y2] in frame pixels; no boxes → (T, 0, H, W).

    Raises:
        ValueError: key_idx outside the frames. FileNotFoundError: an empty folder.
    """
    if isinstance(frames, str | Path):
        frames = load_frames(frames)
    # one group: SAM2's own lazy per-frame encoding, so a long video's features are never all held at once
    masks = propagate_groups(predictor, frames, [BoxGroup(key_idx, list(boxes))], threshold, share_encoding=False)[0]
    return masks.transpose(1, 0, 2, 3)
