"""Study (issue 61): does a background that shows where a place is make finding a shape reliable?

    LIT=xy SEED=1 SCENE=shapes OBJ=1 GROW=0 STEPS=1000 python research/issue61/probe_lit.py BASE OUT.json

Qwen2.5-VL has no absolute position embedding: rope turns queries and keys, never values, so on a flat background
every background patch carries the same value and an object's token says *what* it is, not *where*: where must be
built from attention patterns (the lottery of decision 021). This runs the shapes probe (`probe_describe.py`, its
settings from the same environment) with the plain look's flat background replaced by one whose colour changes
with the place, so that a patch's pixels say where it is. Only the background differs: the scenes, objects, boxes,
initialisation and batches are the plain probe's, sample for sample (the background draws nothing from the
generator). LIT: xy (the flat colour at 60 %, plus 70 × x / W on red and 70 × y / H on green) | x (brightness
0.55 → 1.45 from left to right) | flat (the plain look itself: the control).
"""

import os

import numpy as np

LIT = os.environ.get("LIT", "xy")
import research.issue61.probe_describe as pd  # noqa: E402
from stages.synth.render import background as flat_background  # noqa: E402


def lit_background(video) -> np.ndarray:
    """The plain look's background with the place in its colour (LIT), else the flat one."""
    if video.background != "plain" or LIT == "flat":
        return flat_background(video)
    H, W = video.height, video.width
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    x, y = (xx / (W - 1))[..., None], (yy / (H - 1))[..., None]
    base = np.array(video.background_colour, dtype=np.float32)
    if LIT == "x":
        img = base * (0.55 + 0.9 * x)
    else:
        img = 0.6 * base + np.concatenate([70 * x, 70 * y, np.zeros_like(x)], axis=-1)
    return np.clip(img, 0, 255).astype(np.uint8)


if __name__ == "__main__":
    pd.background = lit_background
    pd.__doc__ = f"{__doc__.splitlines()[0]} (LIT={LIT})"  # the probe writes its first line to OUT.json
    pd.main()
