"""No silent skips: a test skipped for a missing dependency fails when that dependency is installed.

`pytest.importorskip("verl")` skips when `import verl` raises, whether verl is absent (a fair skip) or
installed but broken (a bug the skip would hide). These hooks (registered by tests/conftest.py) turn the
second case into a failure, for skips raised in a test and for whole modules skipped at collection. A skip
reason of the form "could not import 'X'" (importorskip) or "X is not installed" names the dependency X.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re

import pytest

_IMPORTORSKIP = re.compile(r"could not import '([\w.\-]+)'")
_NOT_INSTALLED = re.compile(r"(?:Skipped: )?([A-Za-z_][\w.\-]*)\b[^\n]*\bis not installed")


def _dependency(reason: str) -> str | None:
    if match := _IMPORTORSKIP.search(reason) or _NOT_INSTALLED.match(reason):
        return match.group(1)
    return None


def installed(name: str) -> bool:
    """Whether the distribution's top-level module (dashes read as underscores) can be found."""
    top = name.replace("-", "_").split(".")[0]
    if importlib.machinery.PathFinder.find_spec(top) is not None:  # on sys.path, whatever sys.modules holds
        return True
    try:
        return importlib.util.find_spec(top) is not None  # also editable installs (meta-path finders)
    except (ImportError, ValueError):
        return False


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr or "")


def silent_skip(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    """The failure message when `report` is a skip whose named dependency is installed, else None."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    reason = _skip_reason(report)
    name = _dependency(reason)
    if name is None or not installed(name):
        return None
    return (f"skipped although '{name}' is installed (it fails to import or the skip is wrong): {reason}\n"
            f"fix the import, or make the test not depend on it; silent skips hide broken paths")


def _fail(report: pytest.TestReport | pytest.CollectReport, message: str) -> None:
    report.outcome = "failed"
    report.longrepr = message


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # noqa: ARG001
    """Fail a test whose skip names an installed dependency."""
    outcome = yield
    report = outcome.get_result()
    if message := silent_skip(report):
        _fail(report, message)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):  # noqa: ARG001
    """Fail the collection of a module skipped (module-level importorskip) for an installed dependency."""
    outcome = yield
    report = outcome.get_result()
    if message := silent_skip(report):
        _fail(report, message)
