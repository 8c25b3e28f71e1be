"""`dvc plots show` on the project's dvc.yaml, through DVC itself: each chart once, one colour per series,
named axes, and an HTML page that loads nothing from the network."""

from __future__ import annotations

import configparser
import json
import re
import shutil
from pathlib import Path

import pytest
from PIL import Image

from stages.core.live import live_dir, write_live
from stages.core.plots_page import write_page_template
from tests.pipeline_repo import dvc, sh

REWARDS = ["reward", "reward_format", "reward_keyframe", "reward_spatial", "reward_consistency"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, project_root: Path) -> Path:
    """A git + DVC repo with the project's dvc.yaml, params.yaml, plot template and DVC plots config, and small
    curves in DVCLive's files where the stages write them."""
    dest = tmp_path_factory.mktemp("plots")
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(project_root / name, dest / name)
    sh(["git", "init", "-q", "-b", "main"], dest)
    dvc(dest, "init", "-q")
    shutil.copytree(project_root / ".dvc" / "plots", dest / ".dvc" / "plots", dirs_exist_ok=True)
    config = configparser.ConfigParser()
    config.read(project_root / ".dvc" / "config")
    template = config.get("plots", "html_template")
    dvc(dest, "config", "plots.html_template", template)
    write_page_template(dest / ".dvc" / template)  # what scripts/setup.sh does
    # DVCLive's own files, where the stages' live curves go (stages/core/live.py)
    write_live([{"step": s, "loss": 3 - s / 4, "learning_rate": 0.005} for s in range(1, 6)],
               live_dir(dest / "metrics", "sft"))
    header = ["reward", "reward_std", "kl", "response_length"] + REWARDS[1:]
    write_live([{"step": s, **{c: round(0.1 * s + 0.01 * i, 3) for i, c in enumerate(header)}} for s in range(1, 6)],
               live_dir(dest / "metrics", "grpo"))
    (dest / "data" / "sample").mkdir(parents=True)
    Image.new("RGB", (20, 10)).save(dest / "data" / "sample" / "distribution.png")
    return dest


def test_each_chart_once_one_colour_per_series_named_axes(repo: Path) -> None:
    plots = json.loads(dvc(repo, "plots", "show", "--json"))["data"]
    assert sorted(plots) == sorted(["sft_loss", "sft_learning_rate", "grpo_reward", "grpo_response_length", "grpo_kl",
                                    "data/sample/distribution.png"])
    reward = plots["grpo_reward"][0]["content"]
    assert reward["encoding"]["color"]["field"] == "series"  # colour by series (not by revision)
    # one DVCLive file per curve: DVC names each row's series `<file>::<metric>`
    assert sorted({row["filename::field"] for row in reward["data"]["values"]}) == sorted(
        f"{name}.tsv::{name}" for name in REWARDS)
    assert reward["encoding"]["strokeDash"]["field"] == "rev"
    for name, (x_label, y_label) in {"grpo_reward": ("rollout round", "reward (mean over the round's rollouts)"),
                                     "sft_loss": ("optimizer step", "cross-entropy loss"),
                                     "grpo_kl": ("rollout round", "KL (k3 estimate)")}.items():
        encoding = plots[name][0]["content"]["encoding"]
        assert (encoding["x"]["title"], encoding["y"]["title"]) == (x_label, y_label)
    assert plots["grpo_reward"][0]["content"]["title"]["text"] == "GRPO reward per step (total and per component)"
    # rendered by Vega itself (vl-convert): five lines in five colours
    import vl_convert

    svg = vl_convert.vegalite_to_svg(reward)
    assert len(set(re.findall(r'<path[^>]*stroke="(#[0-9a-f]{6})"', svg))) == 5
    assert set(REWARDS) <= set(re.findall(r"<text[^>]*>([a-z_]+)</text>", svg))  # the legend names the metrics


def test_page_loads_nothing_from_the_network(repo: Path) -> None:
    dvc(repo, "plots", "show", "-o", "page")
    html = (repo / "page" / "index.html").read_text()
    assert re.findall(r"<script[^>]*\bsrc=", html) == []  # no external script at all (DVC's default: a CDN)
    assert "cdn.jsdelivr" not in html
    assert "window.vegaEmbed=" in html.replace(" ", "")
    assert len(re.findall(r"vegaEmbed\('#", html)) == 5  # the five curves; the chart PNG is an <img>


def test_setup_says_what_it_does_and_writes_the_offline_page(tmp_path: Path, project_root: Path) -> None:
    """scripts/setup.sh on an installed environment: says so, and writes the plots page when it is missing."""
    import hashlib
    import os
    import subprocess
    import sys

    setup = (project_root / "scripts" / "setup.sh").read_text()
    stamped = re.search(r"want=\$\(cat ([^|]+)\|", setup).group(1).split()  # the files the install stamp hashes
    for name in stamped:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(project_root / name, tmp_path / name)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    python = tmp_path / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    stamp = b"".join((tmp_path / n).read_bytes() for n in stamped)
    (tmp_path / ".venv" / ".vrsflow-installed").write_text(hashlib.sha256(stamp).hexdigest() + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # a new user: no server configured
    home = tmp_path / "prefect-home"
    env.update(PYTHONPATH=str(project_root), PREFECT_HOME=str(home))
    out = subprocess.run(["bash", "scripts/setup.sh"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=env, check=True).stdout
    assert out.splitlines() == ["vrsflow setup: writing the offline dvc plots page (.dvc/tmp/plots_offline.html)",
                                f"vrsflow setup: created the local Prefect database ({home / 'prefect.db'})",
                                "vrsflow setup: environment up to date (.venv)"]
    assert (home / "prefect.db").stat().st_size > 0  # made once at install: the first repro's server starts at once
    again = subprocess.run(["bash", "scripts/setup.sh"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                           env=env, check=True).stdout
    assert f"vrsflow setup: the local Prefect database exists ({home / 'prefect.db'})" in again.splitlines()
    assert "window.vegaEmbed=" in (tmp_path / ".dvc" / "tmp" / "plots_offline.html").read_text().replace(" ", "")
