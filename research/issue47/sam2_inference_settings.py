"""Can SAM2's own inference settings close the tiny SAM2's ceiling gap? The default evaluation's ceiling (the
evaluate stage's own code on the eval pool with the ground-truth answer as the policy, `bench_learning.ceiling`)
through one trained SAM2, once with its config as it is and once per setting: a Hydra override of SAM2's video
predictor config that acts only at inference (the weights are the same file), added after the config's own.

What each setting asks (sam2's `SAM2Base` / `SAM2VideoPredictor` options):
- `multimask_output_for_tracking=false`: keep the mask decoder's single mask on tracked frames instead of the one of
  three candidates its IoU head rates highest (the tiny SAM2 keeps the wrong candidate on more than half of them,
  `sam2-track-by-distance.json`);
- `non_overlap_masks=true`: the objects of one inference state may not share a pixel (the highest score wins);
- `memory_temporal_stride_for_eval=2`: the memory reads every second earlier frame instead of the last ones;
- `fill_hole_area=0`: SAM2's hole filling of the output masks off (8 pixels in its builder; it needs sam2's CUDA
  extension, and where that is missing — any CPU — SAM2 skips it with a warning, so on the CPU both are the same).

    python research/issue47/sam2_inference_settings.py --repo DIR \
        --setting one_mask=++model.multimask_output_for_tracking=false …
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.bench_learning import ceiling  # noqa: E402
from bench.results_io import write_result  # noqa: E402
from stages.params import load_params  # noqa: E402
from stages.sam2_wrapper import resolve_config  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"  # this study's results, beside it

DEFAULT_SETTINGS = (
    "one_mask=++model.multimask_output_for_tracking=false",
    "non_overlap=++model.non_overlap_masks=true",
    "memory_stride_2=++model.memory_temporal_stride_for_eval=2",
    "no_hole_filling=++model.fill_hole_area=0",
)


def config_with(config: Path, overrides: list[str], folder: Path) -> Path:
    """A vrsflow SAM2 config file in `folder`: `config`'s base and overrides, then `overrides`."""
    base, own = resolve_config(str(config))
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump({"base": base, "overrides": [*own, *overrides]}, sort_keys=False))
    return path


def training_record(folder: Path) -> dict | None:
    """What made a `pretrain_sam2` output folder, as it records it: every seed's held-out figures (`seeds.json`) and
    its lineage's device, steps, seeds and code version, so that a ceiling measured on a folder that is not committed
    keeps the figures it was chosen by. None for a checkpoint from elsewhere (a released SAM2)."""
    seeds, lineage = folder / "seeds.json", folder / "lineage.json"
    if not seeds.is_file():
        return None
    record = {"seeds": json.loads(seeds.read_text())}
    if lineage.is_file():
        written = json.loads(lineage.read_text())
        record["lineage"] = {"extra": written.get("extra"), "code_version": written.get("code_version")}
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True,
                        help="project copy where `dvc repro keyframes tiny_models` has run (its params name the SAM2)")
    parser.add_argument("--setting", action="append", default=[],
                        help=f"NAME=HYDRA_OVERRIDE (repeatable); default: {', '.join(DEFAULT_SETTINGS)}")
    parser.add_argument("--out", type=Path, help="results file; default results/sam2-inference-settings.json here")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    repo = args.repo.resolve()
    params = load_params(repo / "params.yaml")
    checkpoint, config = repo / params.sam2.checkpoint, repo / params.sam2.config
    settings = {"as configured": []}
    for item in args.setting or DEFAULT_SETTINGS:
        name, _, override = item.partition("=")
        if not name or not override.startswith("++model."):
            parser.error(f"--setting {item}: expected NAME=++model.KEY=VALUE")
        settings[name] = [override]
    figures: dict = {"sam2": {"checkpoint": params.sam2.checkpoint, "config": params.sam2.config,
                              "sha256": hashlib.sha256(checkpoint.read_bytes()).hexdigest(),
                              "training": training_record(checkpoint.parent)},
                     "ceiling": {}}
    with tempfile.TemporaryDirectory(prefix="sam2-inference-settings-") as tmp:
        for name, overrides in settings.items():
            folder = Path(tmp) / name
            folder.mkdir()
            sam2 = dataclasses.replace(params.sam2, checkpoint=str(checkpoint),
                                       config=str(config_with(config, overrides, folder)))
            figures["ceiling"][name] = {"overrides": overrides,
                                        **ceiling(dataclasses.replace(params, sam2=sam2), repo, "sam2", folder)}
            print(name, figures["ceiling"][name], flush=True)
    name = args.out.stem if args.out else "sam2-inference-settings"
    write_result(name, figures, "the SAM2 as configured (its own config, no override)",
                 out=args.out or RESULTS / f"{name}.json")


if __name__ == "__main__":
    main()
