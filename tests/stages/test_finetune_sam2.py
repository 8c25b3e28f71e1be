"""finetune_sam2 stage: the skip rules (its own and pretrain_sam2's, which must still run for the SAM2 fine-tuned
from its output), a bad base named before anything is removed, and short runs — in this process and a process per
seed — whose published model is the base's weights trained under the base's config with one mask on tracked frames,
as sam2's own builder reads it, with lineage reaching the base."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml

import stages.finetune_sam2 as stage
import stages.pretrain_sam2 as pretrain
from stages.core.report import SKIPPED
from stages.params.finetune_sam2 import FinetuneSam2Params
from stages.params.pretrain_sam2 import PretrainSam2Params
from stages.params.sam2 import Sam2Params
from stages.sam2_wrapper import load_video_predictor
from stages.tiny_models.tiny_sam2 import build_tiny_sam2

ONE_MASK = "++model.multimask_output_for_tracking=false"


def _sam2(out: Path) -> Sam2Params:
    return Sam2Params(checkpoint=str(out / "model.pt"), config=str(out / "config.yaml"))


def test_another_sam2_checkpoint_skips_the_stage_and_leaves_its_base(tmp_path: Path) -> None:
    base, out = tmp_path / "base", tmp_path / "out"
    base.mkdir()
    (base / "model.pt").write_bytes(b"base weights")
    out.mkdir()
    (out / "stale").write_text("x")
    params = FinetuneSam2Params(base=str(base), out_dir=str(out))
    report = stage.finetune_sam2(params, _sam2(base), out, tmp_path / "metrics")
    assert report.metrics == {"skipped": 1}
    assert sorted(p.name for p in out.iterdir()) == [SKIPPED]
    assert (base / "model.pt").read_bytes() == b"base weights"
    assert (tmp_path / "metrics" / "finetune_sam2_curve.tsv").read_text().splitlines() == [
        "step\tloss\tfocal\tdice\tiou\tobject\tlr"]


def test_pretrain_sam2_runs_for_its_own_output_and_for_the_sam2_fine_tuned_from_it() -> None:
    first = PretrainSam2Params(out_dir="models/pretrain_sam2")
    finetune = FinetuneSam2Params(base="models/pretrain_sam2", out_dir="models/pretrain_sam2_finetuned")
    assert not pretrain.skipped(first, _sam2(Path("models/pretrain_sam2")), finetune)
    assert not pretrain.skipped(first, _sam2(Path("models/pretrain_sam2_finetuned")), finetune)
    assert not pretrain.skipped(first, _sam2(Path("models/pretrain_sam2")))
    assert pretrain.skipped(first, _sam2(Path("models/pretrain_sam2_finetuned")))  # no finetune block: another SAM2
    # fine-tuned from another SAM2, or a real checkpoint: pretrain_sam2's output is not used
    assert pretrain.skipped(first, _sam2(Path(finetune.out_dir)), replace(finetune, base="models/tiny/sam2"))
    assert pretrain.skipped(first, Sam2Params(checkpoint="/ckpt/sam2.1_hiera_large.pt"), finetune)


@pytest.mark.parametrize(("name", "run", "block"), [("pretrain_sam2", pretrain.pretrain_sam2, PretrainSam2Params),
                                                    ("finetune_sam2", stage.finetune_sam2, FinetuneSam2Params)])
def test_a_base_without_a_checkpoint_is_named_before_anything_is_removed(tmp_path: Path, name: str, run,  # noqa: ANN001
                                                                          block: type) -> None:
    """Both SAM2 training stages check their base before they touch their output folder."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.pt").write_bytes(b"earlier weights")
    params = block(base=str(tmp_path / "nowhere"), out_dir=str(out))
    with pytest.raises(FileNotFoundError, match=rf"^{name}.base .*nowhere: no model.pt") as error:
        run(params, _sam2(out), out, tmp_path / "metrics")
    assert "\n" not in str(error.value)
    assert (out / "model.pt").read_bytes() == b"earlier weights"


def test_the_override_is_a_fixed_one_chosen_by_a_switch() -> None:
    assert stage.architecture(FinetuneSam2Params()) == (ONE_MASK,)
    assert stage.architecture(FinetuneSam2Params(one_mask_tracking=False)) == ()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SAM2 folder with lineage, as pretrain_sam2 publishes one (here: the random tiny SAM2 and a stand-in record)."""
    folder = tmp_path_factory.mktemp("sam2") / "pretrain_sam2"
    build_tiny_sam2(folder, 128, 0)  # 128-pixel inputs: a third of the 256-pixel default's time, the same checks
    (folder / "lineage.json").write_text(json.dumps({"stage": "pretrain_sam2", "params": {}}))
    return folder


def _run(base: Path, root: Path, **changes: object) -> tuple[FinetuneSam2Params, dict]:
    settings = {"steps": 2, "warmup_steps": 1, "check_videos": 1, "save_every_steps": 1, "clips_per_step": 1,
                "clip_frames": 3, "correction_clicks": 1, **changes}
    params = FinetuneSam2Params(base=str(base), out_dir=str(root / "out"), checkpoint_dir=str(root / "state"),
                                **settings)
    report = stage.finetune_sam2(params, _sam2(root / "out"), root / "out", root / "metrics")
    return params, report.metrics


def test_a_short_run_publishes_the_base_trained_with_one_mask_on_tracked_frames(base: Path, tmp_path: Path) -> None:
    params, metrics = _run(base, tmp_path)
    out = Path(params.out_dir)
    config = yaml.safe_load((out / "config.yaml").read_text())
    base_config = yaml.safe_load((base / "config.yaml").read_text())
    assert config == {**base_config, "overrides": [*base_config["overrides"], ONE_MASK]}
    predictor = load_video_predictor(str(out / "model.pt"), str(out / "config.yaml"), "cpu")  # sam2's builder
    assert predictor.multimask_output_for_tracking is False
    assert load_video_predictor(str(base / "model.pt"), str(base / "config.yaml"), "cpu").multimask_output_for_tracking
    trained = torch.load(out / "model.pt", weights_only=True)["model"]
    assert {v.dtype for v in trained.values() if v.is_floating_point()} == {torch.bfloat16}
    assert trained.keys() == predictor.state_dict().keys()
    assert metrics["steps"] == 2 and metrics["chosen_seed"] == 10 and metrics["seeds"] == 1
    rows = (tmp_path / "metrics" / "finetune_sam2_curve.tsv").read_text().splitlines()
    assert [int(r.split("\t")[0]) for r in rows[1:]] == [1, 2]
    lineage = json.loads((out / "lineage.json").read_text())
    assert lineage["stage"] == "finetune_sam2" and lineage["params"]["finetune_sam2"]["one_mask_tracking"] is True
    recorded = lineage["inputs"]["base_sam2"]
    assert recorded["path"] == base.as_posix() and recorded["upstream"]["stage"] == "pretrain_sam2"
    assert lineage["extra"]["steps"] == 2 and lineage["extra"]["device"].startswith("cpu: ")
    assert "finetune_sam2" in (out / "README.md").read_text()
    assert not Path(params.checkpoint_dir).exists()


def test_without_one_mask_it_publishes_the_base_config_as_it_is(base: Path, tmp_path: Path) -> None:
    params, _ = _run(base, tmp_path, one_mask_tracking=False, steps=1)
    assert (Path(params.out_dir) / "config.yaml").read_bytes() == (base / "config.yaml").read_bytes()
    # the override changes what trains: a state saved with it is not resumed without it
    one_mask = replace(params, one_mask_tracking=True)
    assert pretrain._fingerprint(one_mask, 10, stage.architecture(one_mask)) != pretrain._fingerprint(params, 10)


def test_seeds_in_their_own_processes_train_with_one_mask_too(base: Path, tmp_path: Path) -> None:
    """`python -m stages.finetune_sam2 --job JOB` per seed: the seed's process adds the override itself (that a seed's
    process trains what this process would is pretrain_sam2's test: the loop is the same)."""
    params, metrics = _run(base, tmp_path, seeds=(10, 11), parallel=2, steps=1)
    assert metrics["parallel"] == 2 and sorted(json.loads((Path(params.out_dir) / "seeds.json").read_text())["seeds"]
                                               ) == ["10", "11"]
    config = yaml.safe_load((Path(params.out_dir) / "config.yaml").read_text())
    assert config["overrides"][-1] == ONE_MASK
