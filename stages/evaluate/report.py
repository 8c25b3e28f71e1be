"""`reports/eval.md`: the results table shaped like the papers' ReVOS table, and pictures (PNG, PIL only).

Pictures (in `<report stem>/` beside the markdown): for the best and worst scored expressions, the frames
the model saw with ground-truth boxes (green) and, on the chosen keyframe, the predicted boxes (red);
and a strip of frames across the video, ground-truth mask over predicted mask.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw
from pycocotools import mask as mask_utils

from stages.core import revos
from stages.core.io import atomic_write_text, markdown_table
from stages.core.rle import to_coco
from stages.evaluate.scorer import GroundTruth, read_mask_png

THUMB = 160  # longest side of a picture tile, pixels
STRIP_FRAMES = 6
GREEN, RED = (40, 220, 60), (235, 40, 40)


def results_table(metrics: dict[str, float], label: str) -> pd.DataFrame:
    """One row like the papers' ReVOS table: J, F, J&F per referring / reasoning / overall, then R."""
    row: dict[str, object] = {"method": label}
    for subset in ("referring", "reasoning", "overall"):
        for key, name in (("J", "J"), ("F", "F"), ("JF", "J&F")):
            row[f"{subset} {name}"] = round(metrics.get(f"{key}_{subset}", float("nan")), 1)
    row["R (VISA)"] = round(metrics.get("R_visa_overall", float("nan")), 1)
    row["R (binary)"] = round(metrics.get("R_binary_overall", float("nan")), 1)
    return pd.DataFrame([row])


def _thumb(image: Image.Image) -> tuple[Image.Image, float]:
    scale = THUMB / max(image.size)
    return image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale)))), scale


def _frame(root: Path, video: str, name: str) -> Image.Image:
    with Image.open(revos.frame_path(root, video, name)) as img:
        return img.convert("RGB")


def _gt_mask(gt: GroundTruth, annos: list[str], t: int, shape: tuple[int, int]) -> np.ndarray:
    mask = np.zeros(shape, dtype=bool)
    for a in annos:
        rle = gt.masks[a][t]
        if rle:
            mask |= mask_utils.decode(to_coco(rle)).astype(bool)
    return mask


def _overlay(image: Image.Image, mask: np.ndarray, colour: tuple[int, int, int]) -> Image.Image:
    pixels = np.asarray(image, dtype=np.float32).copy()
    pixels[mask] = 0.45 * pixels[mask] + 0.55 * np.asarray(colour, dtype=np.float32)
    return Image.fromarray(pixels.astype(np.uint8))


def _grid(tiles: list[list[Image.Image]]) -> Image.Image:
    width = sum(t.width for t in tiles[0]) + 2 * (len(tiles[0]) - 1)
    height = sum(row[0].height for row in tiles) + 2 * (len(tiles) - 1)
    canvas = Image.new("RGB", (width, height), (255, 255, 255))
    y = 0
    for row in tiles:
        x = 0
        for tile in row:
            canvas.paste(tile, (x, y))
            x += tile.width + 2
        y += row[0].height + 2
    return canvas


def boxes_picture(root: Path, gt: GroundTruth, answer: dict, annos: list[str]) -> Image.Image:
    """The frames shown, GT boxes in green; the chosen keyframe also carries the predicted boxes in red."""
    video = answer["video"]
    names = gt.videos[video]["frames"]
    key = answer["keyframe_idx"]
    tiles = []
    for t in answer["frame_indices"]:
        image, scale = _thumb(_frame(root, video, names[t]))
        draw = ImageDraw.Draw(image)
        for a in annos:
            rle = gt.masks[a][t]
            if rle:
                x, y, w, h = (float(v) * scale for v in mask_utils.toBbox(to_coco(rle)))
                draw.rectangle([x, y, x + w - 1, y + h - 1], outline=GREEN, width=2)
        if key is not None and not math.isnan(key) and int(key) == t:
            size = answer["frame_size"]
            full = _frame(root, video, names[t]).size
            sx, sy = full[0] / size * scale, full[1] / size * scale
            for x1, y1, x2, y2 in answer["boxes"]:
                draw.rectangle([x1 * sx, y1 * sy, max(x1 * sx, x2 * sx - 1), max(y1 * sy, y2 * sy - 1)],
                               outline=RED, width=2)
            draw.text((3, 2), f"key {t}s", fill=RED)
        else:
            draw.text((3, 2), f"{t}s", fill=(255, 255, 255))
        tiles.append(image)
    return _grid([tiles])


def masks_strip(root: Path, gt: GroundTruth, pred_dir: Path, video: str, exp_id: str, annos: list[str]) -> Image.Image:
    """Frames across the video: ground truth (green, top row) over prediction (red, bottom row)."""
    names = gt.videos[video]["frames"]
    picks = sorted({round(x) for x in np.linspace(0, len(names) - 1, min(STRIP_FRAMES, len(names)))})
    top, bottom = [], []
    for t in picks:
        image = _frame(root, video, names[t])
        shape = (image.height, image.width)
        path = pred_dir / video / exp_id / f"{names[t]}.png"
        pred = read_mask_png(path) > 0 if path.is_file() else np.zeros(shape, dtype=bool)
        if pred.shape != shape:
            pred = np.zeros(shape, dtype=bool)
        top.append(_thumb(_overlay(image, _gt_mask(gt, annos, t, shape), GREEN))[0])
        bottom.append(_thumb(_overlay(image, pred, RED))[0])
    return _grid([top, bottom])


def write_report(path: Path, metrics: dict[str, float], scores: pd.DataFrame, answers: pd.DataFrame, root: Path,
                 pred_dir: Path, gt: GroundTruth, n_examples: int, model_label: str) -> str:
    """Write the markdown report and its pictures; returns the markdown (also published by the flow)."""
    path = Path(path)
    pictures = path.parent / path.stem
    shutil.rmtree(pictures, ignore_errors=True)
    pictures.mkdir(parents=True)
    lines = [f"# Evaluation — {model_label}", "",
             "ReVOS protocol (VISA's evaluator): J, F, J&F in percent; R as VISA computes it on 0/255 PNGs "
             "(`R (VISA)`, comparable with published tables) and on binary masks (`R (binary)`).", "",
             markdown_table(results_table(metrics, model_label)), ""]
    counts = {k: v for k, v in sorted(metrics.items()) if k.split("_")[0] not in ("J", "F", "JF", "R")}
    lines += ["## Answers and keyframes", "", markdown_table(pd.DataFrame(
        [{"metric": k, "value": v} for k, v in counts.items()])), ""]
    scored = scores[scores["type_id"].isin([0, 1])].sort_values(["JF", "expression_id"], ascending=[False, True])
    picks = list(dict.fromkeys([*scored.head(n_examples)["expression_id"], *scored.tail(n_examples)["expression_id"]]))
    by_id = answers.set_index("expression_id", drop=False)
    for rank, expression_id in enumerate(picks):
        score = scored.set_index("expression_id").loc[expression_id]
        answer = by_id.loc[expression_id].to_dict()
        entry = gt.videos[answer["video"]]["expressions"][answer["exp_id"]]
        annos = [str(a) for a in entry.get("anno_id", [])]
        stem = f"{rank:02d}"
        boxes_picture(root, gt, answer, annos).save(pictures / f"{stem}_boxes.png")
        masks_strip(root, gt, pred_dir, answer["video"], answer["exp_id"], annos).save(pictures / f"{stem}_masks.png")
        lines += [f"## {'Best' if rank < n_examples else 'Worst'}: `{expression_id}` — \"{answer['text']}\"", "",
                  f"J&F {100 * score['JF']:.1f} (J {100 * score['J']:.1f}, F {100 * score['F']:.1f}); "
                  f"answer status `{answer['status']}`, keyframe {answer['keyframe_idx']}, "
                  f"{answer['n_rounds']} selection round(s).", "",
                  f"![frames shown, boxes]({pictures.name}/{stem}_boxes.png)", "",
                  f"![ground truth (top) vs prediction (bottom)]({pictures.name}/{stem}_masks.png)", ""]
    text = "\n".join(lines)
    atomic_write_text(path, text)
    return text
