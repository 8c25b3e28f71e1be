"""Where does a tiny SAM2's tracking lose the object: drifting away over the frames, or at once, on the first frame
it tracks? Per object of the `pretrain_sam2` stage's held-out videos, prompted with its box where it is largest and
tracked over the whole video through the evaluation's SAM2 path (as the stage's tracking check does): the IoU on
each frame, grouped by the frame's distance from the prompted one, forward and backward.

The baseline is the object standing still: its true mask on the prompted frame copied to every other frame (what a
tracker that never moves the mask scores; any tracker worth its memory beats it on slow objects). Frames where the
object is absent count as in the evaluation's J (1 when the mask is empty too). IoU is `sam2_prompt_check.iou`,
written from its definition, not taken from the stage.

Where a tracked mask goes when it misses ("where tracked masks land", the tracked frames on which the object is
visible): empty; on the object (more than half of the mask's pixels on its true mask); on another object (more than
half on the other objects' true masks — the tracker swapped identities); or elsewhere (mostly background).

And whether the object was among SAM2's candidates ("candidates"): where SAM2 answers an unprompted frame with three
candidate masks and keeps the one its IoU head rates highest (`multimask_output_for_tracking`), the IoU of the kept
mask against the best of the three, read from the mask decoder's outputs by a forward hook (each object tracked
alone, so the decoder's calls follow the frames: the prompted one, forward, then backward).

    python research/issue47/sam2_track_by_distance.py --model committed=models/pretrain_sam2/model.pt \
        --out research/issue47/results/sam2-track-by-distance.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sam2_prompt_check import checkpoint_config, held_out_command, iou  # noqa: E402

from bench.results_io import portable_path, write_result  # noqa: E402
from stages.pretrain_sam2.clips import mask_box  # noqa: E402
from stages.sam2_wrapper import BoxGroup, load_video_predictor, propagate_groups  # noqa: E402

# distance from the prompted frame → group: the frame itself, the first three frames each side one by one, the rest
GROUPS = ("prompted", "1", "2", "3", "4+")


def group(distance: int) -> str:
    return "prompted" if distance == 0 else str(distance) if distance <= 3 else "4+"


def tracked_ious(predictor, videos) -> list[dict]:
    """Per frame of every tracked object: its signed distance from the prompted frame, the tracked mask's IoU and the
    standing-still baseline's, where the mask lands, and (tracked frames with the object visible) the IoU of the
    candidate SAM2 kept and of its best candidate.

    Each object is prompted alone with its box where it is largest and tracked over its video; a forward hook on the
    mask decoder records its outputs (candidate mask logits, IoU predictions), one call per frame in tracking order:
    the prompted frame, forward, then backward."""
    import torch

    calls: list = []
    hook = predictor.sam_mask_decoder.register_forward_hook(
        lambda _module, _inputs, output: calls.append((output[0].detach().float(), output[1].detach().float())))
    rows = []
    try:
        for frames, masks in videos:
            height, width = masks.shape[2:]
            areas = masks.reshape(masks.shape[0], masks.shape[1], -1).sum(-1)
            for o in (o for o in range(masks.shape[1]) if areas[:, o].any()):
                k = int(np.argmax(areas[:, o]))
                calls.clear()
                track = propagate_groups(predictor, list(frames), [BoxGroup(k, [mask_box(masks[k, o])])])[0][0]
                decoded = dict(zip([k, *range(k + 1, len(masks)), *range(k - 1, -1, -1)], calls, strict=True))
                others = np.delete(masks, o, axis=1).any(axis=1)  # (T, H, W): every other object's true mask
                for t in range(masks.shape[0]):
                    row = {"offset": t - k, "iou": iou(masks[t, o], track[t]), "still": iou(masks[t, o], masks[k, o]),
                           "present": bool(masks[t, o].any()), "lands": lands(track[t], masks[t, o], others[t])}
                    if t != k and row["present"]:
                        logits, scores = decoded[t]
                        candidates = torch.nn.functional.interpolate(logits, size=(height, width), mode="bilinear",
                                                                     align_corners=False)[0] > 0
                        ious = [iou(c.numpy(), masks[t, o]) for c in candidates]
                        row.update(candidates=len(ious), kept=ious[int(scores[0].argmax())], best=max(ious))
                    rows.append(row)
    finally:
        hook.remove()
    return rows


LANDINGS = ("empty", "on the object", "on another object", "elsewhere")


def lands(predicted: np.ndarray, target: np.ndarray, others: np.ndarray) -> str:
    """Where a predicted mask lies: "empty", or where more than half of its pixels are (the target's true mask,
    the other objects' true masks), else "elsewhere"."""
    area = int(np.count_nonzero(predicted))
    if area == 0:
        return "empty"
    if 2 * np.count_nonzero(predicted & target) > area:
        return "on the object"
    return "on another object" if 2 * np.count_nonzero(predicted & others) > area else "elsewhere"


def landings(rows: list[dict]) -> dict:
    """Share of the tracked frames with the object visible whose mask lands each way, and their mean IoU."""
    seen = [r for r in rows if r["offset"] != 0 and r["present"]]
    out = {"frames": len(seen)}
    for name in LANDINGS:
        chosen = [r for r in seen if r["lands"] == name]
        out[name] = {"share": round(len(chosen) / len(seen), 4) if seen else 0.0,
                     "mean_iou": round(float(np.mean([r["iou"] for r in chosen])), 4) if chosen else None}
    return out


def summary(rows: list[dict]) -> dict:
    """Mean IoU (tracked, standing still) and frame count per distance group, forward and backward."""
    out = {}
    for direction, keep in (("forward", lambda r: r["offset"] >= 0), ("backward", lambda r: r["offset"] <= 0)):
        for name in GROUPS:
            chosen = [r for r in rows if keep(r) and group(abs(r["offset"])) == name]
            if chosen and (name != "prompted" or direction == "forward"):
                out[name if name == "prompted" else f"{direction} {name}"] = {
                    "frames": len(chosen), "tracked_iou": round(float(np.mean([r["iou"] for r in chosen])), 4),
                    "standing_still_iou": round(float(np.mean([r["still"] for r in chosen])), 4)}
    tracked = [r for r in rows if r["offset"] != 0]
    out["every tracked frame"] = {"frames": len(tracked),
                                  "tracked_iou": round(float(np.mean([r["iou"] for r in tracked])), 4),
                                  "standing_still_iou": round(float(np.mean([r["still"] for r in tracked])), 4)}
    out["where tracked masks land"] = landings(rows)
    return out


def candidate_ious(rows: list[dict]) -> dict:
    """On tracked frames with the object visible: mean IoU of the mask SAM2 kept and of its best candidate, and
    how often the kept one misses (IoU < 0.2) while a candidate has the object (IoU > 0.5)."""
    seen = [r for r in rows if "kept" in r]
    misses = [r for r in seen if r["kept"] < 0.2]
    return {"frames": len(seen), "candidates_per_frame": sorted({r["candidates"] for r in seen}),
            "kept_mask_iou": round(float(np.mean([r["kept"] for r in seen])), 4),
            "best_candidate_iou": round(float(np.mean([r["best"] for r in seen])), 4),
            "kept_misses": len(misses),
            "kept_misses_with_the_object_among_candidates": sum(r["best"] > 0.5 for r in misses)}


def main() -> None:
    args, videos = held_out_command(__doc__.splitlines()[0])
    figures = {"videos": args.videos, "frames_per_video": [int(m.shape[0]) for _, m in videos], "models": {}}
    for item in args.model:
        name, path = item.split("=", 1)
        config = checkpoint_config(path, args.config)
        predictor = load_video_predictor(path, config, "cpu")
        figures["models"][name] = {"checkpoint": portable_path(str(Path(path).resolve())),
                                   "config": portable_path(str(Path(config).resolve())),
                                   **summary(rows := tracked_ious(predictor, videos)),
                                   "candidates": candidate_ious(rows)}
        print(name, figures["models"][name], flush=True)
    write_result(args.out.stem, figures, "the object standing still: its prompted frame's true mask on every frame",
                 out=args.out)


if __name__ == "__main__":
    main()
