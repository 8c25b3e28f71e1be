"""`live.latest` read while DVCLive rewrites metrics.json in place: a missing, empty or half-written file is "no
summary yet" (the live-curve poller's next look sees the whole file), a whole one is its content."""

from __future__ import annotations

from pathlib import Path

from stages.core.live import latest


def test_latest_reads_a_file_being_written_as_no_summary_yet(tmp_path: Path) -> None:
    assert latest(tmp_path) == {}
    path = tmp_path / "metrics.json"
    for partial in ("", '{"step": 2, "reward": 0.'):
        path.write_text(partial)
        assert latest(tmp_path) == {}
    path.write_text('{"step": 2, "reward": 0.5}')
    assert latest(tmp_path) == {"step": 2, "reward": 0.5}
