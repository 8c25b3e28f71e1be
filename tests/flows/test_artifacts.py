"""What a stage publishes reaches Prefect readable: pictures embedded in the markdown artifact (the UI cannot
reach files on the machine that ran the stage), curves as pictures, one short log line."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
from PIL import Image

from stages.core.report import StageReport, curve_markdown, image_markdown


def test_published_markdown_carries_the_pictures(prefect_api: str, tmp_path: Path) -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.common import publish_report

    Image.fromarray(np.full((30, 40, 3), 200, dtype=np.uint8)).save(tmp_path / "distribution.png")
    (tmp_path / "curve.csv").write_text("step,reward\n1,0.1\n2,0.4\n3,0.5\n")
    markdown = image_markdown(tmp_path / "distribution.png", "sampling distribution") + "\n\n" + curve_markdown(
        tmp_path / "curve.csv", "step", ["reward"], "reward per step", "reward")
    report = StageReport("artifact-probe", metrics={"a": 1}, markdown=markdown)

    @flow(name="artifact-probe")
    def probe() -> None:
        publish_report(report)

    probe()
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["artifact-probe-report"])))
    assert artifacts and artifacts[0].type == "markdown"
    uris = re.findall(r"!\[([^\]]*)\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", artifacts[0].data)
    assert [alt for alt, _ in uris] == ["sampling distribution", "reward per step"]
    assert base64.b64decode(uris[0][1]) == (tmp_path / "distribution.png").read_bytes()


def test_a_running_stage_shows_its_curves_so_far(prefect_api: str, tmp_path: Path) -> None:
    """What a training stage hands `stages.core.progress.publish_markdown` while it runs is in its report artifact
    before the stage returns (the Prefect UI shows the curve during the run); the final report follows it."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.common import run_stage
    from stages.core import progress

    def report_artifacts() -> list[str]:
        with get_client(sync_client=True) as client:
            return [a.data for a in client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["running-probe-report"])))]

    (tmp_path / "curve.csv").write_text("step,loss\n1,2.0\n2,1.5\n")
    during: list[list[str]] = []

    def stage() -> StageReport:
        progress.publish_markdown(curve_markdown(tmp_path / "curve.csv", "step", ["loss"], "loss so far", "loss"))
        during.append(report_artifacts())  # the stage is still running
        return StageReport("running-probe", markdown="### final curves")

    @flow(name="running-probe")
    def probe() -> None:
        run_stage("running-probe", stage)

    probe()
    assert len(during[0]) == 1 and "### loss so far" in during[0][0] and "base64," in during[0][0]
    assert sorted(report_artifacts()) == sorted([during[0][0], "### final curves"])
    assert not progress.wants_markdown()  # the flow's listener is gone with the stage
