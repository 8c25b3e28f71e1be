"""Drawing: backgrounds, textured shapes, and each object's *visible* mask per frame.

Vectorised numpy over pixel windows (no per-pixel Python loops): every object is drawn and measured
inside its own bounding window, so the cost scales with object size, not frame size, and the 720p
`large` preset stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stages.synth.scene import COLOURS, SimObject, SimVideo

Window = tuple[int, int, int, int]  # y0, y1, x0, x1 (exclusive ends)
DARK = 0.45  # brightness of the dark stripes / dots of a textured shape
STAR_INNER = 0.45  # inner/outer radius ratio of the five-pointed star


@dataclass(frozen=True)
class Visible:
    """What a viewer sees of one object in one frame: its visible pixels inside its window.

    Attributes:
        window: the pixel window holding the object (None when it is outside the frame).
        patch: bool mask of the visible pixels, window-sized (empty when absent).
        full_area: pixels the object would cover in the frame with nothing in front of it.
        hidden_by: the objects drawn in front of it that cover some of its pixels.
    """

    window: Window | None
    patch: np.ndarray
    full_area: int
    hidden_by: tuple[int, ...] = ()  # obj_ids of the objects in front that cover some of its pixels

    @property
    def area(self) -> int:
        """Visible pixel count."""
        return int(self.patch.sum())

    def centroid(self) -> tuple[float, float]:
        """Mean (x, y) pixel index of the visible pixels; NaN when nothing is visible."""
        if self.window is None or not self.patch.any():
            return float("nan"), float("nan")
        ys, xs = np.nonzero(self.patch)
        return float(xs.mean() + self.window[2]), float(ys.mean() + self.window[0])

    def box(self) -> tuple[int, int, int, int] | None:
        """(x1, y1, x2, y2) of the visible pixels in frame pixels, exclusive ends; None when nothing is visible."""
        if self.window is None or not self.patch.any():
            return None
        ys, xs = np.nonzero(self.patch)
        y0, x0 = self.window[0], self.window[2]
        return x0 + int(xs.min()), y0 + int(ys.min()), x0 + int(xs.max()) + 1, y0 + int(ys.max()) + 1


def background(video: SimVideo) -> np.ndarray:
    """The static background image (H, W, 3) uint8 of a video."""
    H, W = video.height, video.width
    base = np.array(video.background_colour, dtype=np.float32)
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    along = (xx * np.cos(video.background_angle) + yy * np.sin(video.background_angle))[..., None]
    if video.background == "plain":  # one flat colour (`synth.<size>.look: plain`)
        img = np.broadcast_to(base, (H, W, 3))
    elif video.background == "gradient":
        span = max(float(np.ptp(along)), 1.0)
        img = base * (0.6 + 0.8 * (along - along.min()) / span)
    elif video.background == "noise":
        # blocky noise plus a little pixel noise: textured, yet it keeps 720p JPEGs (and the `large`
        # preset on disk) small, which i.i.d. pixel noise does not
        rng = np.random.default_rng(video.noise_seed)
        cell = max(min(H, W) // 90, 2)
        coarse = rng.normal(0, 18, size=(H // cell + 1, W // cell + 1, 3)).repeat(cell, 0).repeat(cell, 1)
        img = base + coarse[:H, :W] + rng.normal(0, 3, size=(H, W, 3))
    elif video.background == "stripes":
        img = base * (1.0 + 0.35 * ((along // max(min(H, W) // 10, 2)) % 2))
    else:  # checker
        cell = max(min(H, W) // 8, 2)
        img = base * (1.0 + 0.35 * ((((yy // cell) + (xx // cell)) % 2)[..., None]))
    return np.clip(img, 0, 255).astype(np.uint8)


def _window(obj: SimObject, t: int, H: int, W: int) -> Window | None:
    """Pixel window that holds the object at frame t, or None when it is outside the frame."""
    cx, cy = obj.centres[t]
    r = obj.radius
    x0, x1 = max(int(np.floor(cx - r)) - 1, 0), min(int(np.ceil(cx + r)) + 2, W)
    y0, y1 = max(int(np.floor(cy - r)) - 1, 0), min(int(np.ceil(cy + r)) + 2, H)
    return None if x0 >= x1 or y0 >= y1 else (y0, y1, x0, x1)


def shape_inside(kind: str, radius: float, dx: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Which pixels (offsets dx, dy from the centre) a shape of `kind` and `radius` covers."""
    r = radius
    if kind == "circle":
        return dx * dx + dy * dy <= r * r
    if kind == "square":
        return (np.abs(dx) <= r * 0.85) & (np.abs(dy) <= r * 0.85)
    if kind == "diamond":
        return np.abs(dx) + np.abs(dy) <= r
    if kind == "star":
        # fold the angle onto one half-point of the star, then test against the tip→inner-vertex edge
        sector = 2 * np.pi / 5
        theta = np.mod(np.arctan2(dx, -dy), sector)
        theta = np.minimum(theta, sector - theta)
        rho = np.hypot(dx, dy)
        px, py = rho * np.cos(theta), rho * np.sin(theta)
        tip = np.array([r, 0.0])
        inner = STAR_INNER * r * np.array([np.cos(sector / 2), np.sin(sector / 2)])
        ex, ey = inner - tip
        return ex * (py - tip[1]) - ey * (px - tip[0]) >= 0  # same side of the edge as the centre
    return (dy <= r * 0.8) & (dy >= -r) & (np.abs(dx) <= (dy + r) * 0.55)  # triangle, apex up


def _offsets(obj: SimObject, t: int, window: Window) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre offsets from the object's centre: dx (1, w) and dy (h, 1), broadcastable."""
    y0, y1, x0, x1 = window
    cx, cy = obj.centres[t]
    dx = (np.arange(x0, x1, dtype=np.float32) + np.float32(0.5 - cx))[None, :]
    dy = (np.arange(y0, y1, dtype=np.float32) + np.float32(0.5 - cy))[:, None]
    return dx, dy


def _shape_in_window(obj: SimObject, t: int, window: Window) -> np.ndarray:
    dx, dy = _offsets(obj, t, window)
    inside = shape_inside(obj.kind, obj.radius, dx, dy)
    return np.broadcast_to(inside, (window[1] - window[0], window[3] - window[2]))


def full_shape_area(kind: str, radius: float) -> int:
    """Pixel area of a whole (uncut, unoccluded) shape, e.g. to compare sizes."""
    n = int(np.ceil(radius)) + 2
    yy, xx = np.mgrid[-n:n, -n:n].astype(np.float32)
    return int(shape_inside(kind, radius, xx + 0.5, yy + 0.5).sum())


def _texture_in_window(obj: SimObject, t: int, window: Window) -> np.ndarray:
    """The object's colour (h, w, 3) uint8 in its window, with its texture (stripes or dots move with it)."""
    y0, y1, x0, x1 = window
    colour = np.array(COLOURS[obj.colour], dtype=np.uint8)
    if obj.texture == "plain":
        return np.broadcast_to(colour, (y1 - y0, x1 - x0, 3))
    dx, dy = _offsets(obj, t, window)
    period = max(obj.radius / 2.5, 2.0)
    if obj.texture == "striped":
        dark = ((dx + dy) // period) % 2 == 0
    else:  # dotted
        fx = (dx % period) - period / 2
        fy = (dy % period) - period / 2
        dark = fx * fx + fy * fy < (period * 0.3) ** 2
    shaded = (colour * DARK).astype(np.uint8)
    return np.where(dark[..., None], shaded, colour)


def render_frame(video: SimVideo, bg: np.ndarray, t: int) -> tuple[np.ndarray, dict[int, Visible]]:
    """Compose frame `t`: the RGB image and what is visible of each object (front objects occlude).

    Objects are painted back to front (z order); visibility is resolved front to back with an
    occupancy map, so a pixel belongs to the front-most object covering it.
    """
    H, W = video.height, video.width
    image = bg.copy()
    shapes: dict[int, tuple[Window | None, np.ndarray]] = {}
    for obj in sorted(video.objects, key=lambda o: o.z):
        window = _window(obj, t, H, W)
        inside = np.zeros((0, 0), dtype=bool)
        if window is not None:
            y0, y1, x0, x1 = window
            inside = _shape_in_window(obj, t, window)
            patch = image[y0:y1, x0:x1]
            patch[inside] = _texture_in_window(obj, t, window)[inside]
        shapes[obj.obj_id] = (window, inside)
    owner = np.full((H, W), -1, dtype=np.int16)  # front-most object at each pixel so far
    visible: dict[int, Visible] = {}
    for obj in sorted(video.objects, key=lambda o: -o.z):
        window, inside = shapes[obj.obj_id]
        if window is None:
            visible[obj.obj_id] = Visible(None, inside, 0)
            continue
        y0, y1, x0, x1 = window
        region = owner[y0:y1, x0:x1]
        taken = region >= 0
        seen = inside & ~taken
        hidden_by = tuple(int(i) for i in np.unique(region[inside & taken]))
        region[seen] = obj.obj_id
        visible[obj.obj_id] = Visible(window, seen, int(inside.sum()), hidden_by)
    return image, visible
