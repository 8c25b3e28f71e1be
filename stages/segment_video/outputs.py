"""Pictures of a `vrsflow segment` result: the masked video (`overlay.mp4`), the keyframe with its boxes
(`keyframe.png`) and a small picture strip (`strip.png`) — drawn from the frames on disk and the mask PNGs
already written, one frame at a time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from stages.core.pixel_box import outline_rect

MASK_COLOUR = np.array([255, 40, 40], dtype=np.float32)
BOX_COLOUR = (40, 255, 80)
OVERLAY_SIDE = 640  # the overlay video's longer side at most (a preview; masks/ is at the video's size)
STRIP_HEIGHT = 96
STRIP_FRAMES = 6


def blend(frame: np.ndarray, mask: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """The frame with the mask's pixels tinted red."""
    out = frame.astype(np.float32)
    out[mask] = (1 - alpha) * out[mask] + alpha * MASK_COLOUR
    return out.astype(np.uint8)


def read_mask(path: Path) -> np.ndarray:
    with Image.open(path) as img:
        return np.asarray(img.convert("L")) > 127


def _draw_boxes(image: Image.Image, boxes: Sequence[Sequence[float]], scale: float, label: str = "") -> Image.Image:
    draw = ImageDraw.Draw(image)
    width = max(1, round(2 * scale * max(image.size) / 320))
    for box in boxes:
        draw.rectangle(outline_rect(box, scale, image.width, image.height), outline=BOX_COLOUR, width=width)
    if label:
        draw.rectangle([0, 0, 7 * len(label) + 6, 14], fill=(0, 0, 0))
        draw.text((3, 2), label, fill=BOX_COLOUR)
    return image


def _even(n: float) -> int:
    return max(2, int(round(n / 2)) * 2)


def write_overlay(path: Path, frames: Sequence[np.ndarray], mask_paths: Sequence[Path], fps: float | None,
                  key: int | None, boxes: Sequence[Sequence[float]]) -> None:
    """H.264 mp4 of the frames with their masks tinted, the keyframe's boxes drawn on the keyframe (held for
    half a second so it can be seen), at most OVERLAY_SIDE pixels on the longer side."""
    import av

    height, width = frames[0].shape[:2]
    scale = min(1.0, OVERLAY_SIDE / max(height, width))
    out_w, out_h = _even(width * scale), _even(height * scale)
    rate = max(1, min(60, round(fps or 10)))
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=rate)
        stream.width, stream.height, stream.pix_fmt = out_w, out_h, "yuv420p"
        stream.options = {"preset": "veryfast", "crf": "23"}
        for t, mask_path in enumerate(mask_paths):
            image = Image.fromarray(blend(frames[t], read_mask(mask_path))).resize((out_w, out_h),
                                                                                   Image.Resampling.BILINEAR)
            repeats = 1
            if t == key:
                image = _draw_boxes(image, boxes, out_w / width, f"keyframe {t}")
                repeats = max(1, rate // 2)
            for _ in range(repeats):
                for packet in stream.encode(av.VideoFrame.from_image(image)):
                    container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def keyframe_picture(frame: np.ndarray, mask: np.ndarray | None, boxes: Sequence[Sequence[float]],
                     label: str) -> Image.Image:
    """The keyframe with its mask tinted and the model's boxes drawn (at most OVERLAY_SIDE wide)."""
    height, width = frame.shape[:2]
    scale = min(1.0, OVERLAY_SIDE / max(height, width))
    image = Image.fromarray(blend(frame, mask) if mask is not None else frame)
    image = image.resize((max(1, round(width * scale)), max(1, round(height * scale))), Image.Resampling.BILINEAR)
    return _draw_boxes(image, boxes, scale, label)


def write_strip(path: Path, frames: Sequence[np.ndarray], mask_paths: Sequence[Path], shown: Sequence[int],
                key: int | None, boxes: Sequence[Sequence[float]], labels: Sequence[str]) -> None:
    """One row of small pictures (the frames shown to the model, at most STRIP_FRAMES, the keyframe
    included), masks tinted, the keyframe's boxes drawn."""
    picks = list(shown)
    if len(picks) > STRIP_FRAMES:
        picks = [picks[round(i * (len(picks) - 1) / (STRIP_FRAMES - 1))] for i in range(STRIP_FRAMES)]
    if key is not None and key not in picks:
        picks = sorted(picks[1:] + [key]) if len(picks) >= STRIP_FRAMES else sorted(picks + [key])
    height, width = frames[0].shape[:2]
    scale = STRIP_HEIGHT / height
    tile_w = max(1, round(width * scale))
    strip = Image.new("RGB", (len(picks) * (tile_w + 2) - 2, STRIP_HEIGHT), (255, 255, 255))
    for i, t in enumerate(picks):
        tile = Image.fromarray(blend(frames[t], read_mask(mask_paths[t]))).resize((tile_w, STRIP_HEIGHT),
                                                                                 Image.Resampling.BILINEAR)
        _draw_boxes(tile, boxes if t == key else [], scale, labels[t] + (" key" if t == key else ""))
        strip.paste(tile, (i * (tile_w + 2), 0))
    strip.save(path, optimize=True)
