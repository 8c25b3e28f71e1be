"""Drawing: backgrounds, textured shapes, and each object's *visible* mask per frame.

Vectorised numpy over a pixel grid (no per-pixel Python loops), so the 720p `large` preset stays fast.
"""

from __future__ import annotations

import numpy as np

from stages.synth.scene import COLOURS, SimObject, SimVideo


def background(video: SimVideo) -> np.ndarray:
    """The static background image (H, W, 3) uint8 of a video."""
    H, W = video.height, video.width
    base = np.array(video.background_colour, dtype=np.float32)
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    if video.background == "gradient":
        ramp = (xx / max(W - 1, 1))[..., None]
        img = base * (0.6 + 0.8 * ramp)
    elif video.background == "noise":
        rng = np.random.default_rng(video.noise_seed)
        img = base + rng.normal(0, 18, size=(H, W, 3))
    elif video.background == "stripes":
        img = base * (1.0 + 0.35 * (((yy // max(H // 12, 2)) % 2)[..., None]))
    else:  # checker
        cell = max(min(H, W) // 8, 2)
        img = base * (1.0 + 0.35 * ((((yy // cell) + (xx // cell)) % 2)[..., None]))
    return np.clip(img, 0, 255).astype(np.uint8)


def _bbox(obj: SimObject, t: int, H: int, W: int) -> tuple[int, int, int, int] | None:
    """Pixel window (y0, y1, x0, x1) that holds the object at frame t, or None when off-screen/absent."""
    if not obj.present[t]:
        return None
    cx, cy = obj.centres[t]
    r = obj.radius
    x0, x1 = max(int(cx - r) - 1, 0), min(int(cx + r) + 2, W)
    y0, y1 = max(int(cy - r) - 1, 0), min(int(cy + r) + 2, H)
    return None if x0 >= x1 or y0 >= y1 else (y0, y1, x0, x1)


def _shape_in_window(obj: SimObject, t: int, window: tuple[int, int, int, int]) -> np.ndarray:
    y0, y1, x0, x1 = window
    cx, cy = obj.centres[t]
    r = obj.radius
    yy, xx = np.mgrid[y0:y1, x0:x1].astype(np.float32)
    dx, dy = xx + 0.5 - cx, yy + 0.5 - cy
    if obj.kind == "circle":
        return dx * dx + dy * dy <= r * r
    if obj.kind == "square":
        return (np.abs(dx) <= r * 0.85) & (np.abs(dy) <= r * 0.85)
    if obj.kind == "diamond":
        return np.abs(dx) + np.abs(dy) <= r
    return (dy <= r * 0.8) & (dy >= -r) & (np.abs(dx) <= (dy + r) * 0.55)  # triangle, apex up


def shape_mask(obj: SimObject, t: int, H: int, W: int) -> np.ndarray:
    """Full (unoccluded) mask of `obj` at frame `t`, bool (H, W); empty when not present."""
    mask = np.zeros((H, W), dtype=bool)
    window = _bbox(obj, t, H, W)
    if window is not None:
        y0, y1, x0, x1 = window
        mask[y0:y1, x0:x1] = _shape_in_window(obj, t, window)
    return mask


def _texture_in_window(obj: SimObject, t: int, window: tuple[int, int, int, int]) -> np.ndarray:
    """The object's colour (h, w, 3) in its window, with its texture (stripes or dots move with it)."""
    y0, y1, x0, x1 = window
    colour = np.array(COLOURS[obj.colour], dtype=np.float32)
    if obj.texture == "plain":
        return np.broadcast_to(colour, (y1 - y0, x1 - x0, 3))
    cx, cy = obj.centres[t]
    yy, xx = np.mgrid[y0:y1, x0:x1].astype(np.float32)
    period = max(obj.radius / 2.5, 2.0)
    if obj.texture == "striped":
        dark = ((xx - cx + yy - cy) // period) % 2 == 0
    else:  # dotted
        fx = ((xx - cx) % period) - period / 2
        fy = ((yy - cy) % period) - period / 2
        dark = fx * fx + fy * fy < (period * 0.3) ** 2
    return np.where(dark[..., None], colour * 0.45, colour)


def render_frame(video: SimVideo, bg: np.ndarray, t: int) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Compose frame `t`; returns the RGB image and each object's visible mask (front objects occlude).

    Work is confined to each object's window, so the cost scales with object size, not frame size.
    """
    H, W = video.height, video.width
    image = bg.copy()
    full = {}
    for obj in sorted(video.objects, key=lambda o: o.z):
        mask = np.zeros((H, W), dtype=bool)
        window = _bbox(obj, t, H, W)
        if window is not None:
            y0, y1, x0, x1 = window
            inside = _shape_in_window(obj, t, window)
            mask[y0:y1, x0:x1] = inside
            patch = image[y0:y1, x0:x1]
            patch[inside] = np.clip(_texture_in_window(obj, t, window)[inside], 0, 255).astype(np.uint8)
        full[obj.obj_id] = mask
    visible = {}
    for obj in video.objects:
        m = full[obj.obj_id].copy()
        for other in video.objects:
            if other.z > obj.z:
                m &= ~full[other.obj_id]
        visible[obj.obj_id] = m
    return image, visible
