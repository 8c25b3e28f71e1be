"""tests/file_order.py: the longest test files are handed out first — by pytest-xdist itself, in a run shaped like
scripts/test.sh's — tests keep their order within a file, and a recording run writes each file's seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import tests.file_order as file_order


def _items(*nodeids: str) -> list[SimpleNamespace]:
    return [SimpleNamespace(nodeid=nodeid) for nodeid in nodeids]


def test_files_go_longest_first_and_tests_keep_their_order_within_a_file() -> None:
    items = _items("t/a.py::x", "t/b.py::x", "t/a.py::y", "t/new.py::x", "t/c.py::x[1]", "t/c.py::x[0]",
                   "t/other_new.py::x")
    file_order.longest_files_first(items, {"t/a.py": 5.0, "t/b.py": 0.0, "t/c.py": 60.0})
    assert [i.nodeid for i in items] == ["t/c.py::x[1]", "t/c.py::x[0]", "t/a.py::x", "t/a.py::y", "t/b.py::x",
                                         "t/new.py::x", "t/other_new.py::x"]


def test_a_recording_run_sums_each_files_phases_and_writes_them_only_when_it_passed(tmp_path: Path) -> None:
    recorder = file_order.FileSecondsRecorder(tmp_path / "seconds.json")
    for nodeid, duration in [("t/a.py::x", 1.25), ("t/a.py::x", 0.5), ("t/b.py::y[2]", 3.0), ("t/a.py::z", 0.3)]:
        recorder.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, duration=duration))
    recorder.pytest_sessionfinish(None, 1)
    assert not (tmp_path / "seconds.json").exists()
    recorder.pytest_sessionfinish(None, 0)
    written = (tmp_path / "seconds.json").read_text()
    assert json.loads(written) == {"t/b.py": 3.0, "t/a.py": 2.0} and written.index("b.py") < written.index("a.py")


def test_the_committed_seconds_name_test_files_that_exist(project_root: Path) -> None:
    seconds = file_order.recorded_seconds()
    assert "tests/test_pipeline.py" in seconds and all(v >= 0 for v in seconds.values())
    assert all((project_root / name).is_file() for name in seconds), sorted(
        name for name in seconds if not (project_root / name).is_file())


def test_xdist_hands_the_files_out_in_that_order(project_root: Path, tmp_path: Path) -> None:
    """A throwaway suite of three files (the one with most tests is the shortest) through one xdist worker, as
    scripts/test.sh runs: the files run longest first; xdist's own reorder would have run the fullest first."""
    suite = tmp_path / "suite"
    suite.mkdir()
    log = tmp_path / "order.log"
    body = "import os\n\ndef test_{k}():\n    open(os.environ['ORDER_LOG'], 'a').write(__name__ + '\\n')\n"
    for name, count in (("test_short", 5), ("test_long", 1), ("test_middle", 2)):
        (suite / f"{name}.py").write_text("\n".join(body.format(k=k) for k in range(count)))
    seconds = tmp_path / "seconds.json"
    seconds.write_text(json.dumps({"test_long.py": 300.0, "test_middle.py": 20.0, "test_short.py": 1.0}))
    (suite / "conftest.py").write_text(
        "from pathlib import Path\n\nimport tests.file_order as file_order\n\n\n"
        "def pytest_collection_modifyitems(config, items):\n"
        f"    file_order.longest_files_first(items, file_order.recorded_seconds(Path({str(seconds)!r})))\n")

    def run(*options: str) -> list[str]:
        log.unlink(missing_ok=True)
        env = {**os.environ, "ORDER_LOG": str(log), "PYTHONPATH": str(project_root)}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1", "--dist",
                               "loadfile", *options, "--rootdir", str(suite), str(suite)], cwd=suite, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return list(dict.fromkeys(log.read_text().split()))

    assert run("--no-loadscope-reorder") == ["test_long", "test_middle", "test_short"]
    assert run() == ["test_short", "test_middle", "test_long"]  # why scripts/test.sh turns xdist's reorder off
