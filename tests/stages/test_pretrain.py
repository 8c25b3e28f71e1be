"""pretrain stage: streamed scenes true by construction (plain rectangles checked against their pixels), the
curriculum and its colour growth, batches that depend on (seed, step) only and stay apart from the check stream,
exact resume, the best seed's choice, and a bf16 output that SFT and evaluation load in fp32 with the recorded
figures measured from it; a real model.path skips the stage; bad params are one line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from schemas.answer import parse_answer
from stages.core.report import SKIPPED
from stages.models import load_vlm
from stages.params import ParamsError, apply_overrides, read_params_file
from stages.params.model import ModelParams
from stages.params.pretrain import PLAIN_COLOURS, PretrainParams, PretrainPhase, PretrainScreen
from stages.params.synth import SynthScale
from stages.params.tiny_models import TinyModelsParams
from stages.pretrain import box_iou, choose, grounding_check, pretrain, score_answer, train_seed
from stages.pretrain.plain import plain_sample
from stages.pretrain.scenes import shape_sample, synth_sample
from stages.pretrain.stream import check_samples, colours_at, phase_at, screen_samples, step_samples
from stages.synth.scene import COLOURS
from stages.tiny_models.tiny_qwen import build_tiny_qwen

SIZE = 56
SCALE = SynthScale()  # the synth default preset: the frames the pipeline shows
PARAMS_YAML = Path(__file__).resolve().parents[2] / "params.yaml"


def _pixels(sample) -> list[bytes]:
    return [np.asarray(image).tobytes() for image in sample.images]


def _key(sample) -> tuple:
    return (sample.expression, sample.keyframe, sample.boxes, sample.distractors, _pixels(sample))


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("tiny") / "qwen25vl"
    build_tiny_qwen(TinyModelsParams(vocab_size=512, hidden_size=64, num_layers=1, max_image_side=SIZE), base)
    return base


def _tiny_params(base: Path, tmp: Path, **changes) -> PretrainParams:
    """A run of seconds: 4 steps of 2 one-frame samples, a 4-sample check (head_dim 16: 8 rotary pairs)."""
    settings = {"base": str(base), "out_dir": str(tmp / "pretrain"), "checkpoint_dir": str(tmp / "checkpoints"),
                "seeds": (0,), "steps": 4, "curriculum": (PretrainPhase(steps=4, frames=1, objects=(2,)),),
                "batch_size": 2, "warmup_steps": 1, "learning_rate": 5e-3, "check_samples": 4, "max_new_tokens": 12,
                "save_every_steps": 2, "parallel": 1, "mrope_section": (2, 3, 3)}
    return replace(PretrainParams(), **{**settings, **changes})


@pytest.mark.parametrize(("step", "phase", "within", "colours"), [
    (0, 0, 0, ("red",)), (599, 0, 599, ("red",)), (600, 0, 600, ("red", "green")), (1799, 0, 1799, ("red", "green",
     "blue")), (3000, 0, 3000, PLAIN_COLOURS), (4199, 0, 4199, PLAIN_COLOURS), (4200, 1, 0, PLAIN_COLOURS),
    (5999, 1, 1799, PLAIN_COLOURS)])
def test_the_default_curriculum_grows_the_colours_asked(step: int, phase: int, within: int,
                                                         colours: tuple[str, ...]) -> None:
    curriculum = PretrainParams().curriculum
    found, at = phase_at(curriculum, step)
    assert (found, at) == (curriculum[phase], within)
    assert colours_at(found, at) == colours


def test_a_step_asks_only_the_colours_grown_so_far() -> None:
    params = replace(PretrainParams(), batch_size=24)
    for step, allowed in ((10, {"red"}), (650, {"red", "green"}), (3500, set(PLAIN_COLOURS))):
        asked = {s.expression.split()[1] for s in step_samples(params, 0, step, SIZE, SCALE)}
        assert asked <= allowed and (len(allowed) > 2 or asked == allowed)
    late = step_samples(params, 0, 5000, SIZE, SCALE)  # the last phase: 6 frames, synth frames among the plain ones
    assert {s.video.rsplit("/", 1)[1] for s in late} == {"plain", "synth"}
    assert all(len(s.images) == 6 for s in late)


def test_batches_depend_on_seed_and_step_only_and_never_repeat_or_meet_the_check() -> None:
    params = replace(PretrainParams(), batch_size=4)
    a, again = step_samples(params, 0, 7, SIZE, SCALE), step_samples(params, 0, 7, SIZE, SCALE)
    assert [_key(s) for s in a] == [_key(s) for s in again]
    seen = {tuple(_pixels(s)) for s in a}
    for other in (step_samples(params, 0, 8, SIZE, SCALE), step_samples(params, 1, 7, SIZE, SCALE)):
        assert not seen & {tuple(_pixels(s)) for s in other}
    check = check_samples(replace(params, check_samples=8), SIZE, SCALE)
    assert not seen & {tuple(_pixels(s)) for s in check}
    # the check stream is one fixed set, whatever the training seeds
    assert [_key(s) for s in check] == [_key(s) for s in check_samples(replace(params, check_samples=8, seeds=(5,)),
                                                                       SIZE, SCALE)]


@pytest.mark.parametrize("move", [0, 3])
def test_plain_boxes_are_the_target_pixels_bounding_box_at_the_keyframe(move: int) -> None:
    """Oracle from the definition: the answer's box is the bounding box of the pixels of the asked colour in the
    keyframe, the keyframe is the shown frame with most of them (the first of equal), and every other rectangle's
    box is its colour's pixels' bounding box."""
    assert PLAIN_COLOURS == tuple(COLOURS)  # the plain scenes ask the synth palette's colours
    for i in range(40):
        rng = np.random.default_rng(i)
        sample = plain_sample(rng, f"t{i}", 6, SIZE, (1, 3, 4), ("red", "blue"), move)
        asked = sample.expression.split()[1]
        assert sample.expression == f"the {asked} rectangle" and asked in ("red", "blue")
        frames = [np.asarray(image) for image in sample.images]
        counts = [int(np.all(f == COLOURS[asked], axis=-1).sum()) for f in frames]
        assert sample.keyframe == sample.timestamps[counts.index(max(counts))]
        key = frames[sample.timestamps.index(sample.keyframe)]

        def colour_box(rgb, key=key):
            ys, xs = np.nonzero(np.all(key == rgb, axis=-1))
            return [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1] if len(xs) else None

        assert sample.boxes == [colour_box(COLOURS[asked])]
        others = [box for name, rgb in COLOURS.items() if name != asked and (box := colour_box(rgb))]
        assert sorted(sample.distractors) == sorted(others)
        answer = parse_answer(sample.response)
        assert answer.keyframe_timestamp == sample.keyframe
        assert [list(map(int, b)) for b in answer.boxes] == sample.boxes
        if move == 0:
            assert all(np.array_equal(frames[0], f) for f in frames)


def test_synth_samples_box_the_target_inside_the_frame() -> None:
    for i in range(4):
        s = synth_sample(np.random.default_rng(i), f"s{i}", 6, SIZE, SynthScale())
        assert s.keyframe in s.timestamps and len(s.images) == len(s.timestamps) <= 6
        assert all(img.size == (SIZE, SIZE) for img in s.images)
        answer = parse_answer(s.response)
        assert answer is not None and [list(map(int, box)) for box in answer.boxes] == s.boxes
        for x1, y1, x2, y2 in s.boxes + s.distractors:
            assert 0 <= x1 < x2 <= SIZE and 0 <= y1 < y2 <= SIZE


def test_shape_scenes_name_one_shape_by_colour_and_kind_and_box_its_pixels() -> None:
    """Oracle from the definition, read off the frames: the expression names a shape of an allowed colour by colour
    and kind, and at the keyframe the answer's box holds the asked colour's pixels (a shape fills at least a quarter
    of its box: a triangle half, a star less), inside the frame, with one box per other visible shape."""
    scale = SynthScale(look="plain", object_scale=1.4)
    size = 112
    for i in range(12):
        frames = 6 if i % 2 else 1
        sample = shape_sample(np.random.default_rng(i), f"s{i}", frames, size, scale, (2, 3), ("red", "blue"))
        words = sample.expression.split()
        assert len(words) == 3 and words[0] == "the" and words[1] in ("red", "blue")
        assert words[2] in ("circle", "square", "triangle", "diamond", "star")
        assert len(sample.images) == len(sample.timestamps) == frames  # clips have 8-14 frames
        assert sample.keyframe in sample.timestamps and len(sample.boxes) == 1 and len(sample.distractors) <= 2
        (x1, y1, x2, y2), = sample.boxes
        assert 0 <= x1 < x2 <= size and 0 <= y1 < y2 <= size
        key = np.asarray(sample.images[sample.timestamps.index(sample.keyframe)], dtype=float)[y1:y2, x1:x2]
        near = np.linalg.norm(key - np.array(COLOURS[words[1]], dtype=float), axis=-1) < 40
        assert near.mean() >= 0.25, (sample.expression, near.mean())
        answer = parse_answer(sample.response)
        assert answer.keyframe_timestamp == sample.keyframe
        assert [list(map(int, b)) for b in answer.boxes] == sample.boxes
    again = shape_sample(np.random.default_rng(3), "s3", 6, size, scale, (2, 3), ("red", "blue"))
    first = shape_sample(np.random.default_rng(3), "s3", 6, size, scale, (2, 3), ("red", "blue"))
    assert _key(again) == _key(first)


def test_a_shapes_phase_draws_shape_scenes_beside_synth_frames() -> None:
    params = replace(PretrainParams(), batch_size=12, steps=10, curriculum=(
        PretrainPhase(steps=10, frames=2, synth_share=0.5, scene="shapes", objects=(3,), grow_every=5),))
    kinds = [s.video.rsplit("/", 1)[1] for s in step_samples(params, 0, 1, SIZE, SCALE)]
    assert set(kinds) == {"shapes", "synth"}
    shapes = [s for s in step_samples(params, 0, 2, SIZE, SCALE) if s.video.endswith("shapes")]
    assert shapes and {s.expression.split()[1] for s in shapes} == {"red"}  # the colours grow as for rectangles


def test_a_compact_think_answers_after_the_template_teachers_three_steps() -> None:
    """A phase's think compact: every training sample of that phase and every check sample (the last phase's) has
    the template teacher's compact trace of its shown frames, keyframe and boxes as its thought (what the default's
    SFT traces then say), before the same answer; a phase with think sentence keeps the one sentence."""
    from stages.teacher.template_teacher import compact_trace

    first, last = PretrainParams().curriculum
    params = replace(PretrainParams(), batch_size=6, curriculum=(first, replace(last, think="compact")))
    for sample in [*step_samples(params, 0, 5000, SIZE, SCALE), *check_samples(replace(params, check_samples=4),
                                                                               SIZE, SCALE)]:
        thought = sample.response.split("<think>")[1].split("</think>")[0]
        assert thought == compact_trace(sample.timestamps, sample.keyframe, sample.boxes, SIZE, len(sample.boxes))
        assert thought.startswith(f"Step 1: {len(sample.timestamps)} frames")
        assert [list(map(int, b)) for b in parse_answer(sample.response).boxes] == sample.boxes
    for default in (step_samples(params, 0, 0, SIZE, SCALE)[0], step_samples(PretrainParams(), 0, 5000, SIZE,
                                                                                SCALE)[0]):
        assert default.response.startswith(f"<think>The target is clearest at {default.keyframe}s.</think>")


def test_box_iou_and_where_an_answer_lands() -> None:
    assert box_iou([0, 0, 10, 10], [0, 0, 10, 10]) == 1.0
    assert box_iou([0, 0, 10, 10], [5, 0, 15, 10]) == pytest.approx(50 / 150)
    assert box_iou([0, 0, 10, 10], [10, 10, 20, 20]) == 0.0
    sample = plain_sample(np.random.default_rng(0), "x", 1, SIZE, (3,), ("red",), 0)
    target, other = sample.boxes[0], sample.distractors[0]

    def answer(box):
        return f'<think>t</think><answer>{{"keyframe_timestamp": 0, "bbox_2d_list": [{box}]}}</answer>'

    assert score_answer(answer(target), sample) == {"parsed": True, "keyframe_hit": True, "box_iou": 1.0,
                                                    "on_target": True}
    on_other = score_answer(answer(other), sample)
    assert on_other["on_target"] is False and on_other["box_iou"] == pytest.approx(box_iou(other, target))
    assert score_answer(answer([0, 0, 1, 1]), sample)["on_target"] is None  # lands on nothing
    assert score_answer("no answer", sample) == {"parsed": False, "keyframe_hit": False, "box_iou": 0.0,
                                                 "on_target": None}


def test_an_answer_is_scored_at_the_shown_frame_its_keyframe_names() -> None:
    """Six moving rectangles' frames: an answer naming another shown frame is scored against the boxes there (the
    evaluation's rule: a frame not shown moves to the nearest shown one, the earlier on a tie), and its box drawn
    from the rendered pixels there scores 1.0; the keyframe's boxes are the frame boxes at the keyframe."""
    def pixel_box(image, rgb) -> list[int]:  # oracle: the rectangle's pixels in the rendered frame
        ys, xs = np.nonzero(np.all(np.asarray(image) == rgb, axis=-1))
        return [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]

    checked = 0
    for i in range(40):
        sample = plain_sample(np.random.default_rng(i), "x", 6, SIZE, (1,), ("red",), 4)
        at_key = sample.timestamps.index(sample.keyframe)
        assert sample.frame_boxes[at_key] == (sample.boxes, sample.distractors)
        for k, t in enumerate(sample.timestamps):
            if k == at_key or not sample.frame_boxes[k][0]:
                continue
            truth = pixel_box(sample.images[k], COLOURS["red"])
            if truth == sample.boxes[0]:
                continue  # a frame where it has not moved says nothing
            checked += 1
            named = f'<answer>{{"keyframe_timestamp": {t}, "bbox_2d_list": [{truth}]}}</answer>'
            assert score_answer(named, sample)["box_iou"] == 1.0
            assert score_answer(named, sample)["keyframe_hit"] is False
            at_key_named = f'<answer>{{"keyframe_timestamp": {sample.keyframe}, "bbox_2d_list": [{truth}]}}</answer>'
            assert score_answer(at_key_named, sample)["box_iou"] == pytest.approx(box_iou(truth, sample.boxes[0]))
            for u in (t - 1, t + 1):  # a frame not shown: moved to the nearest shown one, the earlier on a tie
                if u in sample.timestamps:
                    continue
                gaps = sorted((abs(v - u), v) for v in sample.timestamps)
                targets_there = sample.frame_boxes[sample.timestamps.index(gaps[0][1])][0]
                expected = box_iou(truth, targets_there[0]) if targets_there else 0.0
                moved = f'<answer>{{"keyframe_timestamp": {u}, "bbox_2d_list": [{truth}]}}</answer>'
                assert score_answer(moved, sample)["box_iou"] == pytest.approx(expected)
    assert checked >= 20


def test_the_best_seed_is_the_best_box_iou_then_the_share_on_target() -> None:
    results = {0: {"box_iou": 0.2, "on_target": 0.4}, 1: {"box_iou": 0.2, "on_target": 0.9},
               2: {"box_iou": 0.1, "on_target": 1.0}}
    assert choose(results) == 1
    assert choose({3: {"box_iou": 0.2, "on_target": 0.5}, 1: {"box_iou": 0.2, "on_target": 0.5}}) == 1


def test_a_real_model_path_skips_the_stage(tmp_path: Path) -> None:
    params = PretrainParams(out_dir=str(tmp_path / "pretrain"), base=str(tmp_path / "absent"))
    report = pretrain(params, ModelParams(path="/ckpt/Qwen2.5-VL-3B-Instruct"), SIZE, SCALE, tmp_path / "pretrain",
                      tmp_path)
    assert report.metrics == {"skipped": 1}
    assert json.loads((tmp_path / "pretrain" / SKIPPED).read_text())["skipped"] is True
    assert not (tmp_path / "pretrain" / "config.json").exists()
    assert (tmp_path / "pretrain_curve.tsv").read_text() == "step\tloss\tlr\n"


@pytest.mark.parametrize("select_every", [0, 2])  # with selection, the step-2 pick outlives the kill
def test_a_resumed_seed_or_one_fed_by_loader_workers_ends_byte_identical(tiny_base: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    select_every: int) -> None:
    import stages.pretrain as stage

    torch.set_num_threads(1)

    def params_of(base, tmp, **changes):  # the tiny run, with selection as parametrised, and a screen it clears
        return _tiny_params(base, tmp, select_every_steps=select_every, select_samples=2, screen_samples=2,
                            screen=(PretrainScreen(step=2, min_box_iou=0.0),), **changes)

    whole = params_of(tiny_base, tmp_path / "whole")
    figures = train_seed(whole, 0, SIZE, SCALE)
    assert figures["resumed_from_step"] == 0

    class Stop(Exception):
        pass

    save = stage._save_state

    def save_then_stop(*args, **kwargs):  # the run is killed right after its first saved state (step 2 of 4)
        save(*args, **kwargs)
        raise Stop

    stopped = params_of(tiny_base, tmp_path / "stopped")
    monkeypatch.setattr(stage, "_save_state", save_then_stop)
    with pytest.raises(Stop):
        train_seed(stopped, 0, SIZE, SCALE)
    earlier_s = torch.load(next((tmp_path / "stopped").rglob(stage.STATE)), weights_only=True)["elapsed_s"]
    monkeypatch.setattr(stage, "_save_state", save)
    resumed = train_seed(stopped, 0, SIZE, SCALE)
    assert resumed["resumed_from_step"] == 2
    assert [row["step"] for row in resumed["screens"]] == [2]  # the screen passed before the kill, not asked again
    # the training time counts the stopped sitting (its saved seconds) and the one that finished
    sitting = 2 * stopped.batch_size / resumed["samples_per_s"]
    assert earlier_s > 0 and resumed["train_s"] == pytest.approx(earlier_s + sitting, abs=0.1 + 0.02 * sitting)
    for name in ("model/model.safetensors", "pretrain_curve.tsv"):
        assert (tmp_path / "stopped/checkpoints/seed-0" / name).read_bytes() == \
            (tmp_path / "whole/checkpoints/seed-0" / name).read_bytes()
    assert {k: v for k, v in resumed.items() if k not in ("resumed_from_step", "train_s", "samples_per_s")} == \
        {k: v for k, v in figures.items() if k not in ("resumed_from_step", "train_s", "samples_per_s")}
    # batches rendered ahead by loader processes are the same batches
    workers = params_of(tiny_base, tmp_path / "workers", loader_workers=2)
    train_seed(workers, 0, SIZE, SCALE)
    assert (tmp_path / "workers/checkpoints/seed-0/model/model.safetensors").read_bytes() == \
        (tmp_path / "whole/checkpoints/seed-0/model/model.safetensors").read_bytes()
    # a finished seed is not trained again
    monkeypatch.setattr(stage, "train_step", lambda *a: pytest.fail("a finished seed was trained again"))
    assert train_seed(stopped, 0, SIZE, SCALE) == resumed


def test_a_seed_keeps_its_best_selection_steps_weights_and_a_tie_keeps_the_later(
        tiny_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """select_every_steps: the selection samples' figures at steps 2 and 4 (scripted here: the tiny run scores 0
    everywhere) decide which weights the seed ends with; the check still scores the kept weights; only the last
    phase's steps are offered; a rerun resumed after the last saved state keeps a selection record up to it and
    drops one from beyond it."""
    import stages.pretrain as stage

    torch.set_num_threads(1)
    real = stage.grounding_check
    scripted: list[float] = []
    seen: dict[int, dict[str, torch.Tensor]] = {}

    def check(vlm, processor, samples, max_new_tokens, batch_size=16):
        if not samples[0].video.startswith("select/"):
            return real(vlm, processor, samples, max_new_tokens, batch_size)
        seen[len(seen)] = {k: v.detach().to(torch.bfloat16).clone() for k, v in vlm.state_dict().items()}
        return {"box_iou": scripted.pop(0), "on_target": 0.5}

    monkeypatch.setattr(stage, "grounding_check", check)
    for scores, kept in (([0.5, 0.1], 2), ([0.3, 0.3], 4)):
        scripted[:], seen_before = scores, len(seen)
        params = _tiny_params(tiny_base, tmp_path / str(kept), select_every_steps=2, select_samples=2)
        figures = train_seed(params, 0, SIZE, SCALE)
        assert figures["kept_step"] == kept and not scripted
        vlm, _ = load_vlm(tmp_path / str(kept) / "checkpoints/seed-0/model", "float32", "cpu")
        weights = {k: v.to(torch.bfloat16) for k, v in vlm.state_dict().items()}
        expected = seen[seen_before + kept // 2 - 1]
        assert set(weights) == set(expected)
        assert all(torch.equal(weights[k], expected[k]) for k in weights)
        other = seen[seen_before + (1 if kept == 2 else 0)]  # the step not kept: other weights
        assert not all(torch.equal(weights[k], other[k]) for k in weights)
        assert not (tmp_path / str(kept) / "checkpoints/seed-0" / stage.BEST).exists()
    # two phases: only the last one's steps are offered (steps 3 and 4 here, with a selection every step)
    scripted[:], seen_before = [0.2, 0.1], len(seen)
    phased = _tiny_params(tiny_base, tmp_path / "phased", select_every_steps=1, select_samples=2,
                          curriculum=(PretrainPhase(steps=2, frames=1, objects=(2,)),
                                      PretrainPhase(steps=2, frames=1, objects=(2,))))
    assert train_seed(phased, 0, SIZE, SCALE)["kept_step"] == 3 and len(seen) - seen_before == 2 and not scripted
    folder = tmp_path / "record" / stage.BEST
    folder.mkdir(parents=True)
    (folder / "selection.json").write_text(json.dumps({"step": 4, "box_iou": 0.9, "on_target": 1.0}))
    assert stage.Selection(folder, 4, [object()], 12).best["step"] == 4
    assert stage.Selection(folder, 2, [object()], 12).best is None and not folder.exists()


def test_a_screen_asks_the_phase_its_step_ends_with_the_colours_asked_so_far() -> None:
    params = replace(PretrainParams(), screen_samples=8, curriculum=(
        PretrainPhase(steps=1000, frames=1, scene="shapes", objects=(1,)),
        PretrainPhase(steps=3200, frames=1, scene="shapes", objects=(2, 3), grow_every=500),
        PretrainPhase(steps=1800, frames=6, synth_share=0.5, scene="shapes")))
    first = screen_samples(params, 1000, SIZE, SCALE)  # step 1,000 is the first phase's last
    assert len(first) == 8 and all(len(s.images) == 1 and not s.distractors for s in first)
    assert {s.expression.split()[1] for s in first} > {"red"}  # that phase asks every colour
    early = screen_samples(params, 1800, SIZE, SCALE)  # 800 steps into the second phase: red and green so far
    assert {s.expression.split()[1] for s in early} <= {"red", "green"}
    assert all(len(s.images) == 1 for s in early) and any(s.distractors for s in early)  # two or three shapes
    assert [s.expression for s in screen_samples(params, 1000, SIZE, SCALE)] == [s.expression for s in first]
    assert {s.video.split("/")[0] for s in first} == {"screen-1000"}  # a stream apart from the check's


def test_a_seed_missing_its_screen_stops_there_and_the_stage_keeps_one_that_cleared_it(
        tiny_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pretrain.screen: the screen's figures (scripted here: the tiny run scores 0 everywhere) stop seed 0 after
    step 2 of 4 and let seed 1 go on; seed 1 is published; with every seed stopped the stage fails in one line
    before anything is removed, and a rerun with one more seed trains only that one."""
    import stages.pretrain as stage

    torch.set_num_threads(1)
    real_check, real_step = stage.grounding_check, stage.train_step
    scripted: list[float] = []
    trained: list[int] = []

    def check(vlm, processor, samples, max_new_tokens, batch_size=16):
        if not samples[0].video.startswith("screen-2/"):
            return real_check(vlm, processor, samples, max_new_tokens, batch_size)
        return {**real_check(vlm, processor, samples, max_new_tokens, batch_size), "box_iou": scripted.pop(0)}

    def step(*args):
        trained.append(1)
        return real_step(*args)

    monkeypatch.setattr(stage, "grounding_check", check)
    monkeypatch.setattr(stage, "train_step", step)
    params = _tiny_params(tiny_base, tmp_path, seeds=(0, 1), screen=(PretrainScreen(step=2, min_box_iou=0.3),),
                          screen_samples=2)
    out = Path(params.out_dir)
    scripted[:] = [0.1, 0.3]  # seed 0 misses the bar, seed 1 meets it
    report = pretrain(params, ModelParams(path=str(out)), SIZE, SCALE, out, tmp_path / "metrics")
    assert not scripted and len(trained) == 2 + 4
    seeds = json.loads((out / "seeds.json").read_text())
    stopped, kept = seeds["seeds"]["0"], seeds["seeds"]["1"]
    assert seeds["chosen_seed"] == report.metrics["chosen_seed"] == 1
    assert stopped["screened_out_at"] == 2 and "box_iou" not in stopped
    assert stopped["screens"] == [{"step": 2, "min_box_iou": 0.3, "passed": False, "box_iou": 0.1,
                                   "landed": stopped["screens"][0]["landed"], "on_target": 0.0,
                                   "mean_box_iou": stopped["screens"][0]["mean_box_iou"]}]
    assert [row["passed"] for row in kept["screens"]] == [True] and "screened_out_at" not in kept
    assert report.metrics["screened_out"] == 1 and "box_iou_seed0" not in report.metrics
    assert report.metrics["box_iou_seed1"] == kept["box_iou"]
    assert not Path(params.checkpoint_dir).exists()  # every seed's folder went, and then the emptied folder
    # every seed stopped: one line naming the setting, the published folder and the seeds' outcomes left as they were
    everyone = replace(params, checkpoint_dir=str(tmp_path / "all"), screen=(PretrainScreen(step=2, min_box_iou=0.9),))
    published = (out / "model.safetensors").read_bytes()
    scripted[:], trained[:] = [0.1, 0.2], []
    with pytest.raises(stage.NoSeedPassed, match=r"^pretrain: every seed \(0, 1\) stopped at a pretrain\.screen bar "
                       r"\(best: box IoU 0\.2 at step 2, bar 0\.9\); add seeds to pretrain\.seeds"):
        pretrain(everyone, ModelParams(path=str(out)), SIZE, SCALE, out, tmp_path / "metrics")
    assert (out / "model.safetensors").read_bytes() == published and len(trained) == 4
    assert sorted(p.parent.name for p in (tmp_path / "all").glob("seed-*/result.json")) == ["seed-0", "seed-1"]
    scripted[:], trained[:] = [0.95], []  # seed 2 clears it; seeds 0 and 1 are not trained again
    report = pretrain(replace(everyone, seeds=(0, 1, 2)), ModelParams(path=str(out)), SIZE, SCALE, out,
                      tmp_path / "metrics")
    assert report.metrics["chosen_seed"] == 2 and len(trained) == 4 and not scripted


def test_the_stage_keeps_the_best_seed_in_bf16_with_figures_from_the_saved_weights(tiny_base: Path,
                                                                                    tmp_path: Path) -> None:
    torch.set_num_threads(1)
    params = _tiny_params(tiny_base, tmp_path, seeds=(0, 1))
    out = Path(params.out_dir)
    unlisted = Path(params.checkpoint_dir) / "seed-7" / "state.pt"  # another run's seed, dropped from the list
    unlisted.parent.mkdir(parents=True)
    unlisted.write_bytes(b"a resumable state")
    report = pretrain(params, ModelParams(path=str(out)), SIZE, SCALE, out, tmp_path / "metrics")
    seeds = json.loads((out / "seeds.json").read_text())
    results = {int(k): v for k, v in seeds["seeds"].items()}
    assert sorted(results) == [0, 1] and seeds["chosen_seed"] == choose(results) == report.metrics["chosen_seed"]
    config = json.loads((out / "config.json").read_text())
    assert config["dtype"] == "bfloat16"
    assert config["text_config"]["rope_parameters"]["mrope_section"] == [2, 3, 3]
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as weights:
        assert {weights.get_tensor(k).dtype for k in weights.keys()} == {torch.bfloat16}  # noqa: SIM118
    model, processor = load_vlm(out, "float32", "cpu")  # as SFT and evaluation load model.path
    assert next(model.parameters()).dtype == torch.float32
    measured = grounding_check(model, processor, check_samples(params, SIZE, SCALE), params.max_new_tokens)
    assert {k: results[seeds["chosen_seed"]][k] for k in measured} == measured
    lineage = json.loads((out / "lineage.json").read_text())
    assert lineage["stage"] == "pretrain"
    assert {"device", "steps", "seeds", "dtype", "chosen_seed"} <= set(json.dumps(lineage).replace('"', " ").split())
    assert report.metrics["samples_per_s"] > 0 and report.metrics["device"].startswith("cpu")
    curve = (tmp_path / "metrics" / "pretrain_curve.tsv").read_text().splitlines()
    assert len(curve) == params.steps + 1
    # the listed seeds' folders go; a seed not listed keeps its state for when it is listed again
    assert [p.name for p in Path(params.checkpoint_dir).iterdir()] == ["seed-7"]
    assert unlisted.read_bytes() == b"a resumable state"


@pytest.mark.slow  # two seed processes, each importing torch and transformers: ~30 s on 2 loaded cores
def test_seeds_run_in_processes_of_their_own(tiny_base: Path, tmp_path: Path) -> None:
    params = _tiny_params(tiny_base, tmp_path, seeds=(0, 1), parallel=2)
    out = Path(params.out_dir)
    report = pretrain(params, ModelParams(path=str(out)), SIZE, SCALE, out, tmp_path / "metrics")
    assert report.metrics["parallel"] == 2 and report.metrics["seeds"] == 2
    alone = train_seed(replace(params, checkpoint_dir=str(tmp_path / "alone")), 1, SIZE, SCALE)
    seeds = json.loads((out / "seeds.json").read_text())["seeds"]
    assert {k: v for k, v in seeds["1"].items() if k not in ("train_s", "samples_per_s")} == \
        {k: v for k, v in alone.items() if k not in ("train_s", "samples_per_s")}


def test_the_pretrained_base_gets_the_grounding_rope_and_a_bad_section_is_named(tiny_base: Path,
                                                                                tmp_path: Path) -> None:
    """Rope has no weights: the base's config changes, and the language model's rotary frequencies with it."""
    model, _ = load_vlm(tiny_base, "float32", "cpu", rope_parameters={"rope_theta": 3.0, "mrope_section": [2, 3, 3]})
    rotary = model.model.language_model.rotary_emb
    assert rotary.mrope_section == [2, 3, 3]
    # head_dim 16: 8 frequency pairs theta^(-2k/16), k = 0..7 (the RoPE definition)
    assert torch.allclose(rotary.inv_freq, torch.tensor([3.0 ** (-2 * k / 16) for k in range(8)]))
    out = tmp_path / "pretrain"
    params = _tiny_params(tiny_base, tmp_path, mrope_section=(2, 15, 15))
    out.mkdir()
    (out / "kept").write_text("an earlier output")
    with pytest.raises(ValueError, match=r"^pretrain\.mrope_section \[2, 15, 15\] must sum to 8 \(head_dim / 2"):
        pretrain(params, ModelParams(path=str(out)), SIZE, SCALE, out, tmp_path / "metrics")
    assert (out / "kept").read_text() == "an earlier output"  # nothing deleted before the check
    with pytest.raises(FileNotFoundError, match=r"^pretrain\.base .*absent is not a model folder"):
        pretrain(replace(params, base=str(tmp_path / "absent")), ModelParams(path=str(out)), SIZE, SCALE, out, tmp_path)
    assert (out / "kept").exists()


@pytest.mark.parametrize(("overrides", "message"), [
    ({"pretrain.mrope_section": "[16, 16]"}, r"pretrain\.mrope_section: must be 3 counts \(time, rows, columns\)"),
    ({"pretrain.steps": "5000"}, r"pretrain\.curriculum: phases cover 6000 steps, pretrain\.steps is 5000"),
    ({"pretrain.curriculum": "[{steps: 6000, colours: [red, purple]}]"},
     r"pretrain\.curriculum\[0\]\.colours: unknown colour\(s\) \['purple'\]"),
    ({"pretrain.curriculum": "[{steps: 6000, synth_share: 1.5}]"}, r"pretrain\.curriculum\[0\]\.synth_share"),
    ({"pretrain.seeds": "[0, 0]"}, r"pretrain\.seeds: must not repeat a seed"),
    ({"pretrain.seeds": str(list(range(65)))}, r"pretrain\.seeds: at most 64 seeds, got 65"),
    ({"pretrain.micro_batches": "5"}, r"pretrain\.micro_batches: must divide batch_size \(32\)"),
    ({"pretrain.select_samples": "100000"}, r"pretrain\.select_samples: at most 1024 held-out samples, got 100000"),
    ({"pretrain.screen_samples": "2000"}, r"pretrain\.screen_samples: at most 1024 held-out samples, got 2000"),
    ({"pretrain.screen": "[{step: 2000}, {step: 1000}]"},
     r"pretrain\.screen: steps must rise, each below pretrain\.steps \(6000\), got \[2000, 1000\]"),
    ({"pretrain.screen": "[{step: 6000}]"}, r"pretrain\.screen: steps must rise, each below pretrain\.steps"),
    ({"pretrain.screen": "[{step: 1000, min_box_iou: 1.5}]"}, r"pretrain\.screen\[0\]\.min_box_iou"),
])
def test_bad_params_are_one_line(overrides: dict, message: str) -> None:
    raw = read_params_file(PARAMS_YAML)
    with pytest.raises(ParamsError, match=message) as caught:
        apply_overrides(raw, overrides)
    assert "\n" not in str(caught.value)


def test_params_yaml_holds_the_default_curriculum() -> None:
    """params.yaml's block is the designed default, except its seeds: those of the committed base (seed 0 alone,
    trained on the CPU; test_committed_models holds them to its lineage)."""
    params, _ = apply_overrides(read_params_file(PARAMS_YAML), {})
    assert replace(params.pretrain, seeds=PretrainParams().seeds) == PretrainParams()
    assert set(params.pretrain.seeds) <= set(PretrainParams().seeds)
