"""Readable stage summaries: one short log line, pictures embedded in the Prefect markdown, curves as pictures."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import numpy as np
from PIL import Image

from stages.core.report import StageReport, curve_picture, embed_images, image_markdown, is_timing, summary_line

URI = re.compile(r"!\[([^\]]*)\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)")


def test_summary_line_is_short_and_says_where_the_rest_is() -> None:
    metrics = {f"train.reasoning.metric_{i:02d}": i * 1.123456 for i in range(40)}
    line = StageReport("synth", metrics=metrics).summary_line()
    assert line.startswith("synth done: train.reasoning.metric_00=0, train.reasoning.metric_01=1.123, ")
    assert line.endswith(" more in metrics/synth.json)") and len(line) <= 160
    shown = line.count("=")
    assert f"(+{40 - shown} more" in line
    assert summary_line("x", {"a": 1, "b": float("nan")}) == "x: a=1, b=nan"


def test_image_markdown_embeds_the_file(tmp_path: Path) -> None:
    Image.fromarray(np.full((10, 20, 3), 7, dtype=np.uint8)).save(tmp_path / "p.png")
    alt, data = URI.fullmatch(image_markdown(tmp_path / "p.png", "a chart")).groups()
    assert alt == "a chart" and base64.b64decode(data) == (tmp_path / "p.png").read_bytes()
    Image.fromarray(np.zeros((2000, 100, 3), dtype=np.uint8)).save(tmp_path / "big.jpg")
    with Image.open(io.BytesIO(base64.b64decode(URI.fullmatch(image_markdown(tmp_path / "big.jpg")).group(2)))) as im:
        assert (im.format, im.size) == ("PNG", (80, 1600))


def test_embed_images_replaces_only_local_pictures(tmp_path: Path) -> None:
    (tmp_path / "eval").mkdir()
    Image.fromarray(np.zeros((4, 4, 3), dtype=np.uint8)).save(tmp_path / "eval" / "00.png")
    text = "a ![x](eval/00.png) b ![y](eval/missing.png) ![z](https://example.org/p.png)"
    out = embed_images(text, tmp_path)
    assert out.startswith("a ![x](data:image/png;base64,")
    assert out.endswith(" b ![y](eval/missing.png) ![z](https://example.org/p.png)")


def test_curve_picture_draws_one_colour_per_series(tmp_path: Path) -> None:
    path = tmp_path / "curve.csv"
    path.write_text("step,reward,reward_format\n" + "".join(f"{s},{s / 10},{1 - s / 10}\n" for s in range(10)))
    with Image.open(io.BytesIO(curve_picture(path, "step", ["reward", "reward_format", "absent"], "t", "y"))) as im:
        pixels = np.asarray(im.convert("RGB")).reshape(-1, 3)
    # matplotlib's first two cycle colours (C0 #1f77b4, C1 #ff7f0e) both drawn
    for colour in ((0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E)):
        assert (np.abs(pixels.astype(int) - colour).sum(axis=1) < 30).sum() > 100


def test_sample_report_embeds_the_distribution_chart(tmp_path: Path) -> None:
    from stages.params.sample import SampleParams
    from stages.sample import sample_pools
    from tests.revos_factory import simple_video
    from tests.stages.test_sample import write_index

    write_index(tmp_path / "index", [simple_video("S/train/a"), simple_video("S/valid/b", split="valid")])
    report = sample_pools(SampleParams(sft_first_k=1, grpo_size=1), 0, tmp_path / "index", tmp_path / "sample")
    alt, data = URI.fullmatch(report.markdown).groups()
    assert alt == "sampling distribution"
    assert base64.b64decode(data) == (tmp_path / "sample" / "distribution.png").read_bytes()


def test_grpo_curves_as_pictures(tmp_path: Path) -> None:
    from stages.grpo.curves import curves_markdown, write_curve

    rows = [{"step": s, "reward": s / 4, "reward_std": 0.1, "kl": 0.01 * s, "response_length": 100.0 + s,
             "reward_format": 0.5, "reward_spatial": s / 8} for s in range(1, 5)]
    write_curve(rows, tmp_path / "grpo_curve.csv")
    text = curves_markdown(tmp_path / "grpo_curve.csv")
    assert [alt for alt, _ in URI.findall(text)] == ["GRPO reward per step", "GRPO response length",
                                                    "GRPO KL to the reference model"]
    assert curves_markdown(tmp_path / "absent.csv") == ""


def test_stage_log_lines_are_short(tmp_path: Path, caplog) -> None:
    """synth (the widest metrics: one per split × type × instances) logs one line of ≤ 160 characters."""
    import logging
    from dataclasses import replace

    from stages.params.synth import SynthParams, SynthScale
    from stages.synth import generate_synthetic

    small = replace(SynthScale(), n_videos_train=2, n_videos_valid=1, min_frames=3, max_frames=3, height=24, width=32)
    with caplog.at_level(logging.INFO, logger="stages.synth"):
        report = generate_synthetic(SynthParams(default=small), tmp_path / "synth")
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("stages.synth")]
    assert len(report.metrics) > 10 and lines and all(len(line) <= 160 for line in lines)
    assert lines[-1].startswith("synth: expressions=") and lines[-1].endswith(" more)")


def test_sft_curves_as_pictures(tmp_path: Path) -> None:
    from stages.core.live import live_dir, write_live
    from stages.sft import _curves

    write_live([{"step": s, "loss": 3 - s / 4, "learning_rate": 0.005} for s in range(6)], live_dir(tmp_path, "sft"))
    assert [alt for alt, _ in URI.findall(_curves(tmp_path))] == ["SFT training loss", "SFT learning rate"]
    assert _curves(tmp_path / "absent") == ""


def test_timings_are_recognised() -> None:
    timings = ["wall_s", "reward_s", "samples_per_s", "tokens_per_s", "seconds_per_video", "sft.wall_s",
               "train_runtime"]
    others = ["steps", "format_rate_after", "reward_last", "JF_overall", "n_expressions", "kl_last", "accepted"]
    assert [k for k in timings + others if is_timing(k)] == timings
