"""`reports/eval.md`: the results table shaped like the papers' ReVOS table, an optional comparison of several
models (base / SFT / GRPO), and pictures (PNG, PIL only).

Pictures (in `<report stem>/` beside the markdown), for the best and worst scored expressions that have a
target (ranked among those whose target is visible in at least one frame; the best only among those whose
answered boxes made a non-empty mask on the answered keyframe, so that no best example scores only from
target-absent frames):

- the frames the model saw, ground-truth boxes on every frame and, on the chosen keyframe, the predicted
  boxes;
- a strip of frames across the video, ground-truth mask (top row) over predicted mask (bottom row).

Colours: ground truth cyan, prediction magenta — neither is a colour of the synthetic shapes (red, green,
blue, yellow, orange, white), so outlines never vanish into the object they mark. Every picture carries the
legend; boxes are `BOX_WIDTH` px wide at the picture's scale; tiles are `THUMB` px on their longest side.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw, ImageFont
from pycocotools import mask as mask_utils

from stages.core import revos
from stages.core.io import atomic_write_text, markdown_table
from stages.core.pixel_box import outline_rect
from stages.core.report import embed_images, is_timing
from stages.core.rle import to_coco
from stages.evaluate.scorer import GroundTruth, read_mask_png

THUMB = 320  # longest side of a picture tile, pixels (small frames are enlarged, pixel-exact)
STRIP_FRAMES = 6
BOX_WIDTH = 3  # box outline width at the tile's scale, pixels
GT_COLOUR, PRED_COLOUR = (0, 229, 255), (255, 0, 200)  # cyan, magenta
KEY_COLOUR = (255, 255, 255)
GAP = 4  # pixels between tiles
FONT_SIZE = 14
LEGEND_MD = ("Colours: **cyan** = ground truth, **magenta** = prediction (the synthetic shapes are red, green, "
             "blue, yellow, orange or white, never cyan or magenta). Boxes picture: the frames the model saw, "
             "ground-truth boxes on each, predicted boxes on the keyframe it chose (`KEY`). Masks picture: frames "
             "across the whole video, ground truth (top row) over the predicted masks (bottom row).")
SEGMENTERS = {  # evaluate.segmenter → what made the predicted masks (stated in the report)
    "sam2": "SAM2 (`sam2.checkpoint`) prompted with the answered boxes at the answered keyframe, tracked both ways "
            "over every frame",
    "box": "the box segmenter: the answered keyframe's boxes filled as the mask on every frame (no tracking)",
}
EXAMPLES_MD = ("Best examples are chosen among expressions whose answered boxes made a non-empty mask on the answered "
               "keyframe (worst: among all with a visible target), so that no best example scores only from frames "
               "where the target is absent.")
NO_BEST_MD = ("No best example: no answer's boxes made a mask on its keyframe (every answer failed to parse, held no "
              "box, or held only degenerate boxes), so any score above 0 comes from frames where the target is absent.")
STATUSES_MD = ("Answer statuses: `no_boxes` = the answer parsed but holds no box; `degenerate_boxes` = it holds boxes, "
               "but every one covers no area inside the frame (inverted corners, zero width or height, outside the "
               "frame); `parse_failure` = it does not parse; `keyframe_not_shown` = its keyframe was not a frame shown "
               "(moved to the nearest). The first three make an empty mask.")
NO_MASK_STATUSES = ("parse_failure", "no_boxes", "degenerate_boxes")  # answers whose prediction is empty
CEILING_LABEL = "ground-truth answers (the ceiling)"
CEILING_MD = ("The ceiling row is the same evaluation with the ground-truth answer as the policy (the keyframe where "
              "the target is largest, its boxes there, read by the same parser) and the same segmenter: what a "
              "perfect answer scores with these masks. It is not a bound on every answer: where the target is absent "
              "from many frames, an empty answer can score more, since a segmenter that marks the keyframe's boxes "
              "on every frame (or a poor SAM2) marks frames the ground truth leaves empty.")
EMPTY_LABEL = "empty answer (no boxes: empty masks)"
CONSTANT_LABEL = "constant answer (the training prior)"
CONSTANT_MD = ("The constant-answer row is the same evaluation with one fixed answer given to every query whatever the "
               "video: the SFT traces' mean box or their most common box (the stronger of the two), each at the "
               "traces' most common keyframe position among the frames shown. A model that writes the traces' usual "
               "numbers without looking scores about this much; only above it has it looked at something.")
SWAP_LABEL = "this model, each query swapped for another expression's of the same video"
SWAP_MD = ("The swapped row is this model answering, for each expression, the query of another expression of the "
           "same video that names other targets (a fixed, seeded pairing), scored against the expression's own ground "
           "truth. A model that reads the query drops here; one that answers the video alone does not.")
EMPTY_MD = ("The empty-answer row is the same evaluation with an answer that holds no box (the first frame shown, "
            "read by the same parser): empty masks on every frame, what answering nothing scores — J is 1 on each "
            "frame where the target is absent (F also where it fills the frame), so a model that found anything "
            "scores above it.")
EMPTY_MATCH_MD = {  # answer status → why its mask is empty, for an example that scores anyway
    "parse_failure": "**The answer did not parse**",
    "no_boxes": "**No boxes answered**",
    "degenerate_boxes": "**Degenerate boxes answered** (they cover no area inside the frame, so the mask is empty)",
}
EMPTY_MATCH_TAIL = (": this score comes only from frames where the target is absent (an empty prediction matches an "
                    "empty ground truth), not from finding the target.")


def results_table(metrics: dict[str, float], label: str) -> pd.DataFrame:
    """One row like the papers' ReVOS table: J, F, J&F per referring / reasoning / overall, then R."""
    row: dict[str, object] = {"method": label}
    for subset in ("referring", "reasoning", "overall"):
        for key, name in (("J", "J"), ("F", "F"), ("JF", "J&F")):
            row[f"{subset} {name}"] = round(metrics.get(f"{key}_{subset}", float("nan")), 1)
    row["R (VISA)"] = round(metrics.get("R_visa_overall", float("nan")), 1)
    row["R (binary)"] = round(metrics.get("R_binary_overall", float("nan")), 1)
    return pd.DataFrame([row])


def _font(size: int = FONT_SIZE) -> ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _thumb(image: Image.Image) -> tuple[Image.Image, float]:
    scale = THUMB / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    resample = Image.Resampling.NEAREST if scale >= 1 else Image.Resampling.BILINEAR
    return image.resize(size, resample), scale


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
    pixels[mask] = 0.4 * pixels[mask] + 0.6 * np.asarray(colour, dtype=np.float32)
    return Image.fromarray(pixels.astype(np.uint8))


def _label(draw: ImageDraw.ImageDraw, text: str, colour: tuple[int, int, int]) -> None:
    font = _font()
    x1, y1, x2, y2 = draw.textbbox((4, 3), text, font=font)
    draw.rectangle([x1 - 3, y1 - 2, x2 + 3, y2 + 2], fill=(0, 0, 0))
    draw.text((4, 3), text, fill=colour, font=font)


def _box(image: Image.Image, box: list[float], scale: tuple[float, float], colour: tuple[int, int, int]) -> None:
    """Outline of `box` × `scale` on the tile, BOX_WIDTH px drawn inside it (at least one pixel, in the tile)."""
    ImageDraw.Draw(image).rectangle(outline_rect(box, scale, image.width, image.height), outline=colour,
                                    width=BOX_WIDTH)


def legend_strip(width: int) -> Image.Image:
    """A white band with the colour key, `width` px wide."""
    font = _font()
    strip = Image.new("RGB", (max(width, 300), FONT_SIZE + 14), (255, 255, 255))
    draw = ImageDraw.Draw(strip)
    x = 6
    for colour, text in ((GT_COLOUR, "ground truth"), (PRED_COLOUR, "prediction")):
        draw.rectangle([x, 5, x + 22, 5 + FONT_SIZE], outline=colour, width=BOX_WIDTH)
        x += 28
        draw.text((x, 5), text, fill=(0, 0, 0), font=font)
        x += int(draw.textlength(text, font=font)) + 18
    return strip


def _grid(tiles: list[list[Image.Image]]) -> Image.Image:
    width = sum(t.width for t in tiles[0]) + GAP * (len(tiles[0]) - 1)
    height = sum(row[0].height for row in tiles) + GAP * (len(tiles) - 1)
    legend = legend_strip(width)
    canvas = Image.new("RGB", (max(width, legend.width), height + GAP + legend.height), (255, 255, 255))
    y = 0
    for row in tiles:
        x = 0
        for tile in row:
            canvas.paste(tile, (x, y))
            x += tile.width + GAP
        y += row[0].height + GAP
    canvas.paste(legend, (0, y))
    return canvas


def boxes_picture(root: Path, gt: GroundTruth, answer: dict, annos: list[str]) -> Image.Image:
    """The frames shown, ground-truth boxes on each; the chosen keyframe also carries the predicted boxes."""
    video = answer["video"]
    names = gt.videos[video]["frames"]
    key = answer["keyframe_idx"]
    tiles = []
    for t in answer["frame_indices"]:
        full = _frame(root, video, names[t])
        image, scale = _thumb(full)
        draw = ImageDraw.Draw(image)
        for a in annos:
            rle = gt.masks[a][t]
            if rle:
                x, y, w, h = (float(v) for v in mask_utils.toBbox(to_coco(rle)))
                _box(image, [x, y, x + w, y + h], (scale, scale), GT_COLOUR)
        if key is not None and not math.isnan(key) and int(key) == t:
            size = answer["frame_size"]
            for box in answer["boxes"]:
                _box(image, box, (full.width / size * scale, full.height / size * scale), PRED_COLOUR)
            _label(draw, f"KEY frame {t}", KEY_COLOUR)
        else:
            _label(draw, f"frame {t}", (200, 200, 200))
        tiles.append(image)
    return _grid([tiles])


def masks_strip(root: Path, gt: GroundTruth, pred_dir: Path, video: str, exp_id: str, annos: list[str]) -> Image.Image:
    """Frames across the video: ground truth (top row) over prediction (bottom row)."""
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
        gt_tile = _thumb(_overlay(image, _gt_mask(gt, annos, t, shape), GT_COLOUR))[0]
        _label(ImageDraw.Draw(gt_tile), f"frame {t}", (200, 200, 200))
        top.append(gt_tile)
        bottom.append(_thumb(_overlay(image, pred, PRED_COLOUR))[0])
    return _grid([top, bottom])


def keyframe_mask_nonempty(pred_dir: Path, gt: GroundTruth, answer: dict) -> bool:
    """Whether the prediction written for `answer` has any pixel on its answered keyframe."""
    key = answer.get("keyframe_idx")
    if answer.get("status") in NO_MASK_STATUSES or key is None or math.isnan(key):
        return False
    names = gt.videos[answer["video"]]["frames"]
    path = Path(pred_dir) / answer["video"] / str(answer["exp_id"]) / f"{names[int(key)]}.png"
    return path.is_file() and bool((read_mask_png(path) > 0).any())


def pick_examples(scores: pd.DataFrame, answers: pd.DataFrame, gt: GroundTruth, n: int, pred_dir: Path
                  ) -> tuple[list[str], list[str]]:
    """The `n` best and `n` worst expression ids by J&F among expressions with a target (referring or reasoning,
    target visible in at least one frame). The best only among those whose prediction (`pred_dir`) is non-empty
    on the answered keyframe — none when no answer made such a mask; ties broken by expression id. A worst
    already shown as best is skipped."""
    by_id = answers.set_index("expression_id", drop=False)
    entries = {(v, e): entry for v, video in gt.videos.items() for e, entry in video["expressions"].items()}

    def visible(row: pd.Series) -> bool:
        annos = [str(a) for a in entries.get((row["video"], row["exp_id"]), {}).get("anno_id", [])]
        return any(any(gt.masks.get(a, [])) for a in annos)

    candidates = scores[scores["type_id"].isin([0, 1])]
    candidates = candidates[candidates.apply(visible, axis=1)] if len(candidates) else candidates
    ranked = candidates.sort_values(["JF", "expression_id"], ascending=[False, True])
    best: list[str] = []
    for expression_id in ranked["expression_id"]:  # best first: the masks are read only until n are found
        if len(best) == n:
            break
        if expression_id in by_id.index and keyframe_mask_nonempty(pred_dir, gt, by_id.loc[expression_id].to_dict()):
            best.append(expression_id)
    worst = [i for i in ranked.sort_values(["JF", "expression_id"])["expression_id"] if i not in best][:n]
    return best, worst


def write_report(path: Path, metrics: dict[str, float], scores: pd.DataFrame, answers: pd.DataFrame, root: Path,
                 pred_dir: Path, gt: GroundTruth, n_examples: int, model_label: str,
                 comparison: pd.DataFrame | None = None, segmenter: str = "sam2") -> str:
    """Write the markdown report and its pictures.

    Args:
        comparison: optional table of several models (one row each, e.g. base / SFT / GRPO), shown first.
        segmenter: `evaluate.segmenter`, stated in the report (what made the masks).

    Returns:
        The markdown with its pictures embedded as data URIs (what the flow publishes as a Prefect artifact;
        the file itself links the PNGs beside it).
    """
    path = Path(path)
    pictures = path.parent / path.stem
    shutil.rmtree(pictures, ignore_errors=True)
    pictures.mkdir(parents=True)
    lines = [f"# Evaluation — {model_label}", "",
             "ReVOS protocol (VISA's evaluator): J, F, J&F in percent; R as VISA computes it on 0/255 PNGs "
             "(`R (VISA)`, comparable with published tables) and on binary masks (`R (binary)`).", "",
             f"Masks: {SEGMENTERS.get(segmenter, segmenter)}.", ""]
    if comparison is not None and len(comparison):
        lines += ["## Models compared", "", markdown_table(comparison), ""]
    results = results_table(metrics, model_label)
    ceiling = {k.removeprefix("ceiling_"): v for k, v in metrics.items() if k.startswith("ceiling_")}
    empty = {k.removeprefix("empty_"): v for k, v in metrics.items() if k.startswith("empty_")}
    constant = {k.removeprefix("constant_"): v for k, v in metrics.items() if k.startswith("constant_")}
    swap = {k.removeprefix("swap_"): v for k, v in metrics.items() if k.startswith("swap_")}
    # evaluate.reference: the same evaluation with the ground-truth answers, the empty answers and the training prior;
    # evaluate.swap_query: this model on the swapped queries
    for label, reference in ((CEILING_LABEL, ceiling), (EMPTY_LABEL, empty), (CONSTANT_LABEL, constant),
                             (SWAP_LABEL, swap)):
        if "JF_overall" in reference:
            results = pd.concat([results, results_table(reference, label)], ignore_index=True)
    lines += ["## This model", "", markdown_table(results), "", *([CEILING_MD, ""] if ceiling else []),
              *([EMPTY_MD, ""] if empty else []), *([CONSTANT_MD, ""] if "JF_overall" in constant else []),
              *([SWAP_MD + f" Swapped: {int(swap['n_expressions'])} expressions; this model on the same ones scores "
                 f"{swap['own_JF_overall']:.1f} J&F.", ""] if "JF_overall" in swap else []),
              "Base, SFT and GRPO models side by side on every benchmark: [benchmarks.md](benchmarks.md) "
              "(stage `bench_table`; `dvc repro bench_table`).", ""]
    # timings stay in metrics/eval.json: the report is a DVC output (identical runs, identical bytes)
    counts = {k: v for k, v in sorted(metrics.items())
              if k.split("_")[0] not in ("J", "F", "JF", "R", "ceiling", "empty", "swap")
              and not k.startswith("constant_") and not is_timing(k)}
    lines += ["## Answers and keyframes", "", markdown_table(pd.DataFrame(
        [{"metric": k, "value": v} for k, v in counts.items()])), "", STATUSES_MD, ""]
    best, worst = pick_examples(scores, answers, gt, n_examples, pred_dir)
    if best or worst:
        lines += ["## Examples", "", LEGEND_MD, "", EXAMPLES_MD, "", *([] if best else [NO_BEST_MD, ""])]
    by_id = answers.set_index("expression_id", drop=False)
    scored = scores.set_index("expression_id")
    for rank, (kind, expression_id) in enumerate([*(("Best", i) for i in best), *(("Worst", i) for i in worst)]):
        score = scored.loc[expression_id]
        answer = by_id.loc[expression_id].to_dict()
        entry = gt.videos[answer["video"]]["expressions"][answer["exp_id"]]
        annos = [str(a) for a in entry.get("anno_id", [])]
        stem = f"{rank:02d}"
        boxes_picture(root, gt, answer, annos).save(pictures / f"{stem}_boxes.png")
        masks_strip(root, gt, pred_dir, answer["video"], answer["exp_id"], annos).save(pictures / f"{stem}_masks.png")
        lines += [f"### {kind}: `{expression_id}` — \"{answer['text']}\"", "",
                  f"J&F {100 * score['JF']:.1f} (J {100 * score['J']:.1f}, F {100 * score['F']:.1f}); "
                  f"answer status `{answer['status']}`, {len(answer['boxes'])} box(es), keyframe "
                  f"{answer['keyframe_idx']}, {answer['n_rounds']} selection round(s).", "",
                  *([EMPTY_MATCH_MD[answer["status"]] + EMPTY_MATCH_TAIL, ""]
                    if answer["status"] in EMPTY_MATCH_MD and score["JF"] > 0 else []),
                  f"![frames shown: ground truth cyan, prediction magenta]({pictures.name}/{stem}_boxes.png)", "",
                  f"![ground truth (top, cyan) vs prediction (bottom, magenta)]({pictures.name}/{stem}_masks.png)", ""]
    text = "\n".join(lines)
    atomic_write_text(path, text)
    return embed_images(text, path.parent)
