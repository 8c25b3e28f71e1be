"""The no-silent-skips hooks (tests/skip_guard.py), run by a real pytest in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = '''
import pytest

def test_absent_dependency():
    pytest.importorskip("vrsflow_no_such_module")

def test_broken_dependency():
    pytest.importorskip("vrsflow_broken_pkg")

def test_reason_names_installed_package():
    pytest.skip("yaml (PyYAML) is not installed")

def test_reason_names_absent_package():
    pytest.skip("vrsflow-absent-wheel (some data) is not installed")

def test_unrelated_skip():
    pytest.skip("not on this platform")

def test_passes():
    assert True
'''

MODULE_SKIP = '''
import pytest

pytest.importorskip("vrsflow_broken_pkg")

def test_never_runs():
    assert True
'''

CONFTEST = "from tests.skip_guard import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401\n"


def test_skips_of_installed_dependencies_fail(tmp_path: Path, project_root: Path) -> None:
    broken = tmp_path / "site" / "vrsflow_broken_pkg"
    broken.mkdir(parents=True)
    # installed, but a dependency of its own is missing: importorskip would skip silently
    (broken / "__init__.py").write_text("import vrsflow_missing_transitive_dependency\n")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_cases.py").write_text(TESTS)
    (suite / "test_module_skip.py").write_text(MODULE_SKIP)
    env = {"PYTHONPATH": f"{tmp_path / 'site'}:{project_root}", "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-m", "pytest", str(suite), "-q", "-rA", "-p", "no:cacheprovider",
               "--rootdir", str(suite), "--continue-on-collection-errors"]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "test_broken_dependency" in _names(out, "FAILED"), out
    assert "test_reason_names_installed_package" in _names(out, "FAILED"), out
    assert "skipped although 'vrsflow_broken_pkg' is installed" in out
    assert "test_module_skip.py" in _names(out, "ERROR"), out  # the module-level skip fails its collection
    skipped = _names(out, "SKIPPED")
    assert {"test_absent_dependency", "test_reason_names_absent_package", "test_unrelated_skip"} <= skipped, out
    assert "2 failed, 1 passed, 3 skipped, 1 error" in out, out


def _names(output: str, outcome: str) -> set[str]:
    """Test names (or file names for collection errors) reported with `outcome` in pytest's -rA summary."""
    names = set()
    for line in output.splitlines():
        if not line.startswith(outcome + " "):
            continue
        target = line[len(outcome) + 1:].split(" - ")[0].strip()
        if target.startswith("["):  # SKIPPED [1] path:line: reason
            target = target.split("] ", 1)[1]
            names.add(_skipped_test(output, target))
            continue
        names.add(target.split("::")[-1] if "::" in target else Path(target).name)
    return names


def _skipped_test(output: str, location: str) -> str:
    """Map 'path:line: reason' of a skip to the test name defined just above that line in TESTS."""
    path, line_no = location.split(":")[:2]
    source = Path(path).read_text().splitlines()[: int(line_no)]
    return next(line.split("(")[0][4:] for line in reversed(source) if line.startswith("def "))
