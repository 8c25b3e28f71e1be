"""`vrsflow segment`: the evaluate stage's inference on any video (stages/segment_video).

One path (same masks and responses as the evaluate stage), a PyAV-written mp4 scored by `vrsflow evaluate
--pred`, streamed SAM2 masks equal to held ones, batch (one decode per video, resumable), and bad input:
one line, non-zero exit, nothing written. `vrsflow demo`: the page, its upload limit and binding (fast,
in-process), and a slow test that drives it in Debian's headless chromium: upload a video, type a query,
submit, the masked video appears.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from schemas.answer import parse_answer
from stages.params import Params
from stages.params.evaluate import EvaluateParams
from stages.params.sam2 import Sam2Params
from tests.revos_factory import VideoSpec, rect_mask, write_root

av = pytest.importorskip("av")

H, W, SIZE = 48, 64, 112  # clip size, the frame side shown to the model
N_FRAMES = 8
N_LONG = 24


def moving_clip(key: str = "SRC/valid/clip", n: int = N_FRAMES) -> VideoSpec:
    """A rectangle moving right and a still one; two expressions with known masks."""
    return VideoSpec(key=key, split="valid", height=H, width=W, n_frames=n,
                     objects={11: [(4 + 2 * t, 8, 20 + 2 * t, 28) for t in range(n)],
                              12: [(40, 30, 58, 44)] * n},
                     expressions=[{"exp": "the box that moves", "obj_id": [0], "anno_id": [11], "type_id": 1},
                                  {"exp": "the box that stays", "obj_id": [1], "anno_id": [12], "type_id": 0}])


CLIP = moving_clip()
TARGETS = {e["exp"]: e["anno_id"] for e in CLIP.expressions}


def oracle(queries):
    """The ground-truth box of the target at the middle shown frame, at the shown size (from the rectangles
    above, no project code)."""
    from stages.evaluate.infer import Reply

    out = []
    for q in queries:
        t = q.timestamps[len(q.timestamps) // 2]
        side = q.images[0].width
        boxes = [[round(v * side / s) for v, s in zip(CLIP.objects[a][t], (W, H, W, H), strict=True)]
                 for a in TARGETS[q.text]]
        answer = f'{{"keyframe_timestamp": {t}, "bbox_2d_list": {boxes}}}'
        text = f"<think>the target at {t}</think><answer>{answer}</answer>"
        out.append(Reply(text, parse_answer(text), [t]))
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    from stages.params.tiny_models import TinyModelsParams
    from stages.tiny_models.tiny_qwen import build_tiny_qwen
    from stages.tiny_models.tiny_sam2 import build_tiny_sam2

    torch.set_num_threads(1)  # two threads wait on each other beside the other worker (tests/conftest.py)
    base = tmp_path_factory.mktemp("models")
    build_tiny_qwen(TinyModelsParams(vocab_size=512, hidden_size=64, num_layers=1, max_image_side=56), base / "qwen")
    checkpoint, config = build_tiny_sam2(base / "sam2", 128, 0)
    return base / "qwen", checkpoint, config


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_root(tmp_path_factory.mktemp("clip") / "root", [CLIP])


def frames_dir(root: Path) -> Path:
    return root / "JPEGImages" / CLIP.key


def params_for(tiny, **evaluate) -> Params:
    _, checkpoint, config = tiny
    return Params(evaluate=EvaluateParams(n_frames=4, frame_size=SIZE, max_new_tokens=12, **evaluate),
                  sam2=Sam2Params(checkpoint=str(checkpoint), config=str(config)))


def cli_args(tiny, *extra: str) -> list[str]:
    qwen, checkpoint, config = tiny
    return ["segment", "--model", str(qwen), "--params", "/nonexistent/params.yaml",
            "-S", f"sam2.checkpoint={checkpoint}", "-S", f"sam2.config={config}", "-S", "evaluate.n_frames=4",
            "-S", f"evaluate.frame_size={SIZE}", "-S", "evaluate.max_new_tokens=12", *extra]


def write_mp4(frames: list[np.ndarray], path: Path, fps: int = 5) -> Path:
    """An H.264 mp4 of the frames, written with PyAV (the test's own writer)."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        stream.options = {"crf": "10"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def clip_frames(root: Path) -> list[np.ndarray]:
    return [np.asarray(Image.open(p).convert("RGB")) for p in sorted(frames_dir(root).glob("*.jpg"))]


def masks_of(folder: Path) -> dict[str, np.ndarray]:
    return {p.stem: np.asarray(Image.open(p)) for p in sorted(Path(folder).glob("*.png"))}


# --- one path -------------------------------------------------------------------------------------------------


def test_segment_cli_gives_the_evaluate_stages_response_and_masks(root: Path, tiny, tmp_path: Path) -> None:
    """The tiny Qwen2.5-VL through `vrsflow segment` and through the evaluate stage (its per-video function, with
    the stage's own model policy and SAM2 segmenter): the same response text and the same mask PNGs."""
    from flows.cli import main
    from stages.evaluate import evaluate_video, model_policy, segmenter
    from stages.evaluate.scorer import load_ground_truth

    qwen = tiny[0]
    params = params_for(tiny)
    query = CLIP.expressions[0]["exp"]
    assert main(cli_args(tiny, "--video", str(frames_dir(root)), "--query", query, "--out",
                         str(tmp_path / "seg"))) == 0
    answer = json.loads((tmp_path / "seg" / "answer.json").read_text())

    gt = load_ground_truth(root, "valid", [f"{CLIP.key}#0"])
    ev = params.evaluate
    rows = evaluate_video(ev, SIZE, model_policy(ev, qwen, "float32"), segmenter(ev, params.sam2), root, gt,
                          CLIP.key, [{"sample_id": "s0", "expression_id": f"{CLIP.key}#0", "exp_id": "0",
                                      "text": query}], tmp_path / "pred")
    assert answer["response"] == rows[0]["response"] and answer["status"] == rows[0]["status"]
    assert [f["index"] for f in answer["frames_shown"]] == rows[0]["frame_indices"]
    ours, theirs = masks_of(tmp_path / "seg" / "masks"), masks_of(tmp_path / "pred" / CLIP.key / "0")
    assert list(ours) == list(theirs) == CLIP.frame_names()
    assert all(np.array_equal(ours[k], theirs[k]) for k in ours)
    assert answer["mask_area"] == [int((m > 0).sum()) for m in ours.values()]
    assert (tmp_path / "seg" / "overlay.mp4").stat().st_size > 0 and (tmp_path / "seg" / "strip.png").is_file()


def test_segment_and_evaluate_stage_masks_equal_with_sam2_tracking(root: Path, tiny, tmp_path: Path) -> None:
    """A policy that answers (the oracle): non-empty SAM2 masks, identical through `run_video` (what `vrsflow
    segment` runs) and the evaluate stage's `evaluate_video`, for both expressions of the clip at once."""
    from stages.evaluate import evaluate_video, segmenter
    from stages.evaluate.scorer import load_ground_truth
    from stages.segment_video import Engine, Request, run_video

    params = params_for(tiny)
    engine = Engine(params, tiny[0], policy=oracle)
    texts = [e["exp"] for e in CLIP.expressions]
    records = run_video(engine, frames_dir(root), [Request(frames_dir(root), t, tmp_path / f"seg{i}")
                                                   for i, t in enumerate(texts)])
    gt = load_ground_truth(root, "valid", [f"{CLIP.key}#{i}" for i in range(2)])
    rows = [{"sample_id": t, "expression_id": f"{CLIP.key}#{i}", "exp_id": str(i), "text": t}
            for i, t in enumerate(texts)]
    answers = evaluate_video(params.evaluate, SIZE, oracle, segmenter(params.evaluate, params.sam2), root, gt,
                             CLIP.key, rows, tmp_path / "pred")
    for i in range(2):
        ours, theirs = masks_of(tmp_path / f"seg{i}" / "masks"), masks_of(tmp_path / "pred" / CLIP.key / str(i))
        assert all(np.array_equal(ours[k], theirs[k]) for k in ours) and len(ours) == N_FRAMES
        assert sum(int((m > 0).sum()) for m in ours.values()) > 0  # SAM2 tracked something
        assert records[i]["status"] == answers[i]["status"] == "ok"
        assert records[i]["keyframe"]["index"] == answers[i]["keyframe_timestamp"]
        assert records[i]["answer_boxes"] == answers[i]["boxes"] and records[i]["boxes"]


def test_streamed_masks_equal_held_masks_on_a_clip_longer_than_sams_memory(tiny, tmp_path: Path) -> None:
    """A clip longer than twice SAM2's memory reach: masks given to a sink as they are tracked, the encoding in a
    file and the memory bank pruned, equal the masks `predict_masks` holds, frame for frame."""
    from stages.evaluate import predict_masks
    from stages.sam2_wrapper import load_video_predictor

    predictor = load_video_predictor(str(tiny[1]), str(tiny[2]), device="cpu")
    predictor.max_obj_ptrs_in_encoder = 6  # memory reach 7 frames (SAM2.1: 16): a short clip shows the pruning
    rng = np.random.default_rng(0)
    frames = []
    for t in range(N_LONG):
        frame = rng.integers(0, 50, (40, 56, 3), dtype=np.uint8)
        frame[rect_mask((4 + t // 2, 6, 20 + t // 2, 22), 40, 56)] = (220, 60, 60)
        frames.append(frame)
    # keyframe 17: the backward pass drops frames < 10; keyframe 2: the forward pass drops frames > 16
    prompts = [(17, [[12.0, 6.0, 28.0, 22.0]]), (2, [[5.0, 6.0, 21.0, 22.0], [30.0, 20.0, 50.0, 38.0]]), (12, [])]
    bank: list[int] = []  # memory-bank sizes SAM2 sees, step by step
    step = predictor._run_single_frame_inference

    def spy(**kwargs):
        bank.append(len(kwargs["output_dict"]["non_cond_frame_outputs"]))
        return step(**kwargs)

    predictor._run_single_frame_inference = spy
    held = predict_masks(predictor, frames, prompts)
    held_bank, bank[:] = max(bank), []
    streamed = [np.zeros_like(m) for m in held]
    calls = []

    def sink(i: int, t: int, mask: np.ndarray) -> None:
        streamed[i][t] = mask
        calls.append((i, t))

    assert predict_masks(predictor, frames, prompts, sink=sink, spill_dir=tmp_path) is None
    assert held_bank == N_LONG - 2 and max(bank) <= 2 * 7 + 1  # every frame held vs SAM2's reach kept
    assert sorted(calls) == sorted((i, t) for i in range(3) for t in range(N_LONG))  # every frame once
    for a, b in zip(held, streamed, strict=True):
        assert np.array_equal(a, b)
    assert any(m.any() for m in held[:2]) and not held[2].any()
    assert list(tmp_path.iterdir()) == []  # the spilled encoding is removed


# --- a video file ---------------------------------------------------------------------------------------------


def test_an_mp4_segmented_and_scored_by_vrsflow_evaluate(root: Path, tiny, tmp_path: Path, capsys) -> None:
    """A clip with known masks written as an mp4 (PyAV), segmented (the oracle's answer, the box segmenter:
    SAM2's path is the one the tests above compare with evaluate's), the masks scored by `vrsflow evaluate
    --pred` — equal to J computed here from the PNGs."""
    from flows.cli import main
    from stages.evaluate import box_masks
    from stages.segment_video import Engine, Request, run_video

    video = write_mp4(clip_frames(root), tmp_path / "clip.mp4")
    params = params_for(tiny)
    query = CLIP.expressions[0]["exp"]
    scores = {}
    for name, segment in (("box", box_masks),):
        engine = Engine(params, tiny[0], policy=oracle, segment=segment)
        out = tmp_path / name
        record = run_video(engine, video, [Request(video, query, out)])[0]
        assert record["video_info"]["kind"] == "video" and record["video_info"]["n_frames"] == N_FRAMES
        assert record["video_info"]["fps"] == pytest.approx(5.0)
        assert record["keyframe"]["time_s"] == pytest.approx(record["keyframe"]["index"] / 5.0)
        # VISA's layout: <video>/<exp_id>/<frame>.png, the decoded frames named as the clip's frames
        pred = tmp_path / f"pred_{name}" / CLIP.key / "0"
        pred.mkdir(parents=True)
        pngs = sorted((out / "masks").glob("*.png"))
        assert len(pngs) == N_FRAMES
        for png, frame in zip(pngs, CLIP.frame_names(), strict=True):
            shutil.copy(png, pred / f"{frame}.png")
        capsys.readouterr()
        assert main(["evaluate", "--pred", str(tmp_path / f"pred_{name}"), "--data", str(root),
                     "--table", str(tmp_path / f"{name}.csv")]) == 0
        import pandas as pd

        table = pd.read_csv(tmp_path / f"{name}.csv").set_index("expression_id")
        ious = []
        for t, png in enumerate(pngs):
            mask, truth = np.asarray(Image.open(png)) > 127, rect_mask(CLIP.objects[11][t], H, W)
            ious.append((mask & truth).sum() / (mask | truth).sum())
        assert table.loc[f"{CLIP.key}#0", "J"] == pytest.approx(float(np.mean(ious)), abs=1e-6)
        scores[name] = float(np.mean(ious))
    # the oracle's box filled on every frame: exact at the keyframe, the moving box drifts away from it
    assert 0.5 < scores["box"] < 1.0


# --- batch ------------------------------------------------------------------------------------------------------


def test_batch_decodes_each_video_once_and_a_rerun_skips_what_is_done(root: Path, tiny, tmp_path: Path,
                                                                      monkeypatch) -> None:
    import stages.segment_video as sv
    from stages.evaluate import box_masks

    write_mp4(clip_frames(root), tmp_path / "clip.mp4")
    lines = [{"video": "clip.mp4", "query": CLIP.expressions[0]["exp"]},
             {"video": str(frames_dir(root)), "query": CLIP.expressions[1]["exp"]},
             {"video": "clip.mp4", "query": CLIP.expressions[1]["exp"]}]
    batch = tmp_path / "batch.jsonl"
    batch.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    decoded = []
    original = sv.open_frames
    monkeypatch.setattr(sv, "open_frames", lambda path, *a, **k: decoded.append(Path(path).name) or original(
        path, *a, **k))
    engine = sv.Engine(params_for(tiny), tiny[0], policy=oracle, segment=box_masks)
    requests = sv.read_batch(batch, tmp_path / "out")
    assert sv.run_batch(engine, requests) == {"requests": 3, "done_before": 0, "written": 3, "videos_decoded": 2}
    assert sorted(decoded) == ["clip", "clip.mp4"]
    for request in requests:
        answer = json.loads((request.out / "answer.json").read_text())
        assert answer["query"] == request.query and len(list((request.out / "masks").glob("*.png"))) == N_FRAMES
    shutil.rmtree(requests[2].out)  # one result lost: only it is made again (its video decoded once more)
    decoded.clear()
    assert sv.run_batch(engine, requests) == {"requests": 3, "done_before": 2, "written": 1, "videos_decoded": 1}
    assert decoded == ["clip.mp4"]
    assert not list(tmp_path.glob("out/**/.*partial*"))


# --- bad input --------------------------------------------------------------------------------------------------


def _bad_inputs(tmp: Path, root: Path, tiny) -> dict[str, tuple[list[str], str]]:
    good = write_mp4(clip_frames(root), tmp / "good.mp4")
    garbage = tmp / "garbage.mp4"
    garbage.write_bytes(b"\x00\x01 not a video " * 200)
    truncated = tmp / "truncated.mp4"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    audio = tmp / "audio.wav"
    with av.open(str(audio), "w") as container:
        stream = container.add_stream("pcm_s16le", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 800), dtype=np.int16), format="s16", layout="mono")
        frame.sample_rate = 8000
        for packet in [*stream.encode(frame), *stream.encode()]:
            container.mux(packet)
    empty_video = tmp / "empty.mkv"
    with av.open(str(empty_video), "w") as container:
        stream = container.add_stream("mpeg4", rate=5)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        container.start_encoding()  # the header, then no frame
    no_frames = tmp / "no_frames"
    no_frames.mkdir()
    (no_frames / "notes.txt").write_text("no pictures here")
    mixed = tmp / "mixed"
    shutil.copytree(frames_dir(root), mixed)
    first = sorted(mixed.glob("*.jpg"))[2]
    Image.open(first).resize((W // 2, H // 2)).save(first)
    not_qwen = tmp / "bert"
    not_qwen.mkdir()
    (not_qwen / "config.json").write_text(json.dumps({"model_type": "bert"}))
    taken = tmp / "taken"
    taken.mkdir()
    (taken / "answer.json").write_text(json.dumps({"run": {"video": "/elsewhere.mp4", "query": "x", "model": "m"}}))
    video = ["--video", str(good), "--query", "the box"]
    return {
        "unreadable": (["--video", str(garbage), "--query", "q"], "not a readable video file"),
        "truncated": (["--video", str(truncated), "--query", "q"], "truncated"),
        "no video stream": (["--video", str(audio), "--query", "q"], "no video stream"),
        "zero frames": (["--video", str(empty_video), "--query", "q"], "no frames"),
        "empty folder": (["--video", str(no_frames), "--query", "q"], "no frames"),
        "different sizes": (["--video", str(mixed), "--query", "q"], "different sizes"),
        "empty query": (["--video", str(good), "--query", "  "], "query is empty"),
        "not qwen": ([*video, "--model", str(not_qwen)], "not a Qwen2.5-VL checkpoint"),
        "out holds another run": ([*video, "--out", str(taken)], "holds another run"),
        "missing video": (["--video", str(tmp / "nope.mp4"), "--query", "q"], "no such file"),
    }


def test_bad_input_is_one_line_a_nonzero_exit_and_nothing_written(root: Path, tiny, tmp_path: Path,
                                                                   capsys) -> None:
    from flows.cli import main

    cases = _bad_inputs(tmp_path, root, tiny)
    for name, (args, expected) in cases.items():
        out = tmp_path / "results" / name.replace(" ", "_")
        has_out = "--out" in args
        capsys.readouterr()
        code = main(cli_args(tiny, *args) if has_out else cli_args(tiny, *args, "--out", str(out)))
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2, name
        assert len(err) == 1 and err[0].startswith("error: ") and expected in err[0], (name, err)
        assert not out.exists(), name
    assert not list(tmp_path.glob("results/.*")) and not list(tmp_path.glob(".*partial*"))
    assert json.loads((tmp_path / "taken" / "answer.json").read_text())["run"]["query"] == "x"  # left alone


def test_truncated_video_found_while_decoding_leaves_nothing(root: Path, tiny, tmp_path: Path) -> None:
    """A file whose first frames decode but whose end is cut off: refused after decoding, nothing written."""
    from stages.evaluate import box_masks
    from stages.segment_video import Engine, InputError, Request, run_video

    frames = clip_frames(root) * 8  # 64 frames, several GOPs' worth of data
    good = write_mp4(frames, tmp_path / "long.mp4")
    cut = tmp_path / "cut.mp4"
    data = good.read_bytes()
    cut.write_bytes(data[: int(len(data) * 0.6)])
    engine = Engine(params_for(tiny), tiny[0], policy=oracle, segment=box_masks)
    with pytest.raises(InputError, match="cut.mp4"):
        run_video(engine, cut, [Request(cut, "the box that moves", tmp_path / "out")])
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_checkpoint_mode_and_lineage_come_from_the_model_card(tiny, tmp_path: Path) -> None:
    from stages.segment_video import Engine, checkpoint_info, mode_of_tasks

    assert [mode_of_tasks(t) for t in (["veason"], ["rcot_aks", "rcot_ktg"], ["videoseg"])] == [
        "veason", "rcot", "videoseg"]
    model = tmp_path / "grpo" / "merged"
    shutil.copytree(tiny[0], model)
    lineage = {"stage": "grpo", "code_version": {"git": "abc123", "sha256": "00"}, "seed": 3, "params": {},
               "counts": {"steps": 4}, "inputs": {"shards": {"path": "data/shards", "sha256": "11", "upstream": {
                   "stage": "shard", "lineage": {"stage": "shard", "params": {"sample": {
                       "grpo_tasks": ["rcot_aks", "rcot_ktg"], "sft_tasks": ["veason"]}}, "inputs": {}}}}}}
    (tmp_path / "grpo" / "lineage.json").write_text(json.dumps(lineage))
    (tmp_path / "grpo" / "README.md").write_text("# vrsflow GRPO checkpoint\n")
    info = checkpoint_info(model)
    assert info["stage"] == "grpo" and info["code_version"]["git"] == "abc123" and info["seed"] == 3
    assert info["tasks"] == ["rcot_aks", "rcot_ktg"] and info["mode"] == "rcot"
    assert info["model_card"]["title"] == "vrsflow GRPO checkpoint"
    engine = Engine(Params(), model, policy=oracle, segment=lambda f, p: [])
    assert (engine.mode, engine.mode_source, engine.params.mode) == ("rcot", "checkpoint lineage", "rcot")
    engine = Engine(Params(), model, "videoseg", policy=oracle, segment=lambda f, p: [])
    assert (engine.mode, engine.params.mode) == ("videoseg", "htfs")
    assert checkpoint_info(tiny[0])["made_by_vrsflow"] is False


def test_default_model_is_grpo_then_sft_else_a_clear_message(tmp_path: Path) -> None:
    from stages.segment_video import InputError, default_model

    with pytest.raises(InputError, match="no trained model.*scripts/run.sh"):
        default_model(Params(), tmp_path)
    (tmp_path / "models" / "sft" / "merged").mkdir(parents=True)
    assert default_model(Params(), tmp_path) == tmp_path / "models" / "sft" / "merged"
    (tmp_path / "models" / "grpo" / "merged").mkdir(parents=True)
    assert default_model(Params(), tmp_path) == tmp_path / "models" / "grpo" / "merged"


# --- the demo page ---------------------------------------------------------------------------------------------


@pytest.fixture()
def demo(root: Path, tiny, tmp_path: Path):
    from stages.evaluate import box_masks
    from stages.segment_video import Engine
    from stages.segment_video.demo import Demo

    engine = Engine(params_for(tiny), tiny[0], policy=oracle, segment=box_masks)
    return Demo(params_for(tiny), tiny[0], None, max_mb=0.05, examples=root, work=tmp_path / "work", engine=engine)


def test_page_upload_limit_and_a_run(demo, root: Path, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from stages.segment_video.demo import create_app

    client = TestClient(create_app(demo))
    page = client.get("/")
    assert page.status_code == 200 and 'id="file"' in page.text and "up to 0.05 MB" in page.text
    assert demo.examples and CLIP.key.replace("/", "_") in page.text
    # over the limit: refused with the sizes named, nothing stored
    big = client.post("/api/upload", content=b"\0" * 60_000, headers={"X-Filename": "big.mp4"})
    assert big.status_code == 413 and "0.1 MB; this demo accepts up to 0.05 MB" in big.json()["error"]
    assert list((demo.work / "uploads").iterdir()) == []
    assert client.post("/api/upload", content=b"x", headers={"X-Filename": "notes.txt"}).status_code == 400
    video = write_mp4(clip_frames(root), tmp_path / "clip.mp4")
    up = client.post("/api/upload", content=video.read_bytes(), headers={"X-Filename": "clip.mp4"})
    assert up.status_code == 200, up.text
    out = client.post("/api/segment", json={"upload": up.json()["upload"], "query": "the box that moves"}).json()
    assert out["status"] == "ok" and out["reasoning"].startswith("the target at") and out["n_frames"] == 8
    assert out["frames_with_mask"] == 8  # the box segmenter: the oracle's box on every frame
    overlay = client.get(out["overlay_url"])
    assert overlay.status_code == 200 and overlay.headers["content-type"] == "video/mp4"
    assert overlay.content[4:8] == b"ftyp"
    assert client.get(out["keyframe_url"]).headers["content-type"] == "image/png"
    # an example, an empty query, an unknown upload, a path outside the runs
    example = next(iter(demo.examples))
    again = client.post("/api/segment", json={"example": example, "query": "the box that stays"})
    assert again.json()["status"] == "ok"
    empty = client.post("/api/segment", json={"example": example, "query": " "})
    assert empty.status_code == 400 and "query is empty" in empty.json()["error"]
    assert client.post("/api/segment", json={"upload": "../../etc/passwd", "query": "q"}).status_code == 400
    assert client.get("/runs/../answer.json").status_code == 404


@pytest.mark.parametrize("kind", ["box", "sam2"])
def test_page_and_answer_json_name_the_segmenter_that_made_the_masks(kind: str, root: Path, tiny,
                                                                     tmp_path: Path) -> None:
    """The page's sentence and answer.json follow `evaluate.segmenter`: SAM2 with its checkpoint, or the box
    segmenter with none (the default run's, whose tiny SAM2 is random)."""
    from fastapi.testclient import TestClient

    from stages.segment_video import Engine
    from stages.segment_video.demo import Demo, create_app

    params = params_for(tiny, segmenter=kind)
    engine = Engine(params, tiny[0], policy=oracle)  # the segmenter built from params, as `vrsflow demo` builds it
    demo = Demo(params, tiny[0], None, max_mb=1, examples=root, work=tmp_path / "work", engine=engine)
    client = TestClient(create_app(demo))
    page = client.get("/").text
    checkpoint = str(Path(tiny[1]).resolve())
    if kind == "sam2":
        assert "SAM2 (checkpoint <code>" + checkpoint + "</code>) tracks it" in page and "box segmenter" not in page
    else:
        assert "the box segmenter" in page and "SAM2 (checkpoint" not in page and checkpoint not in page
    out = client.post("/api/segment", json={"example": next(iter(demo.examples)), "query": "the box that moves"}).json()
    assert out["segmenter"] == (f"sam2 {checkpoint}" if kind == "sam2" else "box")
    record = json.loads(client.get(out["answer_url"]).content)
    assert record["format"] == 2 and record["segmenter"]["name"] == kind and "sam2" not in record
    assert record["segmenter"]["checkpoint"] == (checkpoint if kind == "sam2" else None)


def test_an_older_answer_json_of_the_same_run_is_made_again(root: Path, tiny, tmp_path: Path) -> None:
    from stages.evaluate import box_masks
    from stages.segment_video import Engine, Request, done, run_video

    engine = Engine(params_for(tiny), tiny[0], policy=oracle, segment=box_masks)
    request = Request(frames_dir(root), "the box that stays", tmp_path / "out")
    run_video(engine, request.video, [request])
    assert done(request, engine.model)
    record = json.loads((request.out / "answer.json").read_text())
    record.pop("format")  # as written before answer.json had a format (status "no_boxes" for degenerate boxes)
    (request.out / "answer.json").write_text(json.dumps(record))
    assert not done(request, engine.model)
    assert run_video(engine, request.video, [request])[0]["format"] == 2


def test_demo_binds_to_loopback_unless_told() -> None:
    from flows.cli import build_parser

    args = build_parser().parse_args(["demo"])
    assert (args.host, args.port, args.max_mb) == ("127.0.0.1", 7860, 200.0)
    assert build_parser().parse_args(["demo", "--host", "0.0.0.0"]).host == "0.0.0.0"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.mark.slow
def test_browser_upload_submit_and_the_masked_video_appears(root: Path, tiny, tmp_path: Path) -> None:
    """`vrsflow demo` (the tiny models) in a subprocess, Debian's chromium driven by selenium."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    qwen, checkpoint, config = tiny
    port = _free_port()
    log = open(tmp_path / "demo.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "demo", "--model", str(qwen), "--params", "/nonexistent/params.yaml",
         "-S", f"sam2.checkpoint={checkpoint}", "-S", f"sam2.config={config}", "-S", "evaluate.n_frames=4",
         "-S", "evaluate.frame_size=112", "-S", "evaluate.max_new_tokens=12", "--port", str(port),
         "--examples", str(root), "--work", str(tmp_path / "work")],
        stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2])
    browser = None
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "demo.log").read_text()[-2000:]
                time.sleep(1)
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
            options.add_argument(flag)
        browser = webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver), options=options)
        browser.get(f"http://127.0.0.1:{port}/")
        assert "vrsflow" in browser.title
        video = write_mp4(clip_frames(root), tmp_path / "upload.mp4")
        browser.find_element(By.ID, "file").send_keys(str(video))
        browser.find_element(By.ID, "query").send_keys("the box that moves")
        browser.find_element(By.ID, "submit").click()
        WebDriverWait(browser, 300).until(
            lambda b: b.find_element(By.ID, "status").text == "done" or b.find_element(By.ID, "error").text)
        assert browser.find_element(By.ID, "error").text == ""
        overlay = browser.find_element(By.ID, "overlay")
        assert overlay.get_attribute("src").endswith("/overlay.mp4") and overlay.is_displayed()
        # the browser loads the masked video: its size is the overlay's (metadata read by chromium)
        WebDriverWait(browser, 60).until(lambda b: b.execute_script("return arguments[0].readyState", overlay) >= 1)
        assert browser.execute_script("return arguments[0].videoWidth", overlay) == 64
        assert browser.find_element(By.ID, "reasoning").text != ""
        runs = list((tmp_path / "work" / "runs").iterdir())
        assert len(runs) == 1 and json.loads((runs[0] / "answer.json").read_text())["query"] == "the box that moves"
    finally:
        if browser is not None:
            browser.quit()
        server.terminate()
        server.wait(timeout=30)
        log.close()

