"""DVC over SSH against a real sshd (Debian's openssh-server) that the test starts on a loopback port with
throw-away host and user keys: push from one checkout, pull into a fresh clone, which is then up to date; an
unreachable host, a wrong key and a read-only remote each give one line naming the remote and what failed, and
leave the local cache as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipeline_repo import dvc, env_with_venv, make_repo, sh
from tests.team.servers import SSHD_MISSING, Sshd, free_port, sshd, sshd_binary

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sshd_binary() is None, reason=SSHD_MISSING)]

TARGET = "ingest"  # check → synth → ingest on the ci profile: real DVC outputs, tens of seconds


def _vrsflow(verb: str, repo: Path, url: str, key: Path) -> subprocess.CompletedProcess:
    env = {**env_with_venv(), "VRSFLOW_DVC_REMOTE": url, "VRSFLOW_DVC_SSH_KEY": str(key)}
    return subprocess.run([sys.executable, "-m", "flows.cli", verb, TARGET], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=600)


def _cache(repo: Path) -> dict[str, tuple[int, int]]:
    """Every file of the DVC cache: size and mtime (ns)."""
    root = repo / ".dvc" / "cache"
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()} if root.is_dir() else {}


def _remote_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def built(prefect_api: str, project_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ci-profile checkout with TARGET reproduced and dvc.lock committed."""
    repo = make_repo(project_root, tmp_path_factory.mktemp("ssh") / "repo", profile="ci")
    sh([sys.executable, "-m", "flows.cli", "repro", TARGET], repo)
    sh(["git", "add", "-A"], repo)
    sh(["git", "commit", "-qm", "ingest"], repo)
    return repo


def test_push_clone_pull_round_trip_over_ssh(built: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()
    with sshd(tmp_path / "sshd") as server:
        pushed = _vrsflow("push", built, server.url(remote), server.key)
        assert pushed.returncode == 0, pushed.stderr
        stored = _remote_files(remote)
        assert stored and all(p.startswith("files/md5/") for p in stored)
        clone = tmp_path / "clone"
        sh(["git", "clone", "-q", str(built), str(clone)], tmp_path)
        pulled = _vrsflow("pull", clone, server.url(remote), server.key)
        assert pulled.returncode == 0, pulled.stderr
    assert "up to date" in dvc(clone, "status", TARGET)
    dry = dvc(clone, "repro", "--dry", TARGET)
    assert "Running stage" not in dry and "didn't change, skipping" in dry, dry
    for out in ("data/index", "data/raw/synth"):
        assert sh(["git", "diff", "--no-index", "--stat", str(built / out), str(clone / out)], tmp_path) == "", out
    # the credentials stayed in the clone's git-ignored local config, never in git
    assert str(server.key) in (clone / ".dvc" / "config.local").read_text()
    assert str(server.key) not in sh(["git", "show", "HEAD:.dvc/config"], clone)


def test_unreachable_wrong_key_and_read_only_remote_fail_in_one_line(built: Path, tmp_path: Path) -> None:
    cache_before = _cache(built)
    assert cache_before
    remote = tmp_path / "remote"
    remote.mkdir()
    with sshd(tmp_path / "sshd") as server, sshd(tmp_path / "sshd-ro", read_only=True) as read_only:
        unreachable = Sshd(free_port(), server.user, server.key, server.wrong_key)  # nothing listens there
        cases = {
            "cannot reach the host": (unreachable.url(remote), server.key),
            "authentication refused (wrong key or password?)": (server.url(remote), server.wrong_key),
            "the remote refuses to write (read-only?)": (read_only.url(remote), read_only.key),
        }
        for what, (url, key) in cases.items():
            line = _one_line(_vrsflow("push", built, url, key))
            assert line.startswith(f"remote 'storage' ({url}): push failed: {what}: "), line
            assert _cache(built) == cache_before, what
            assert _remote_files(remote) == [], what
        # a pull that fails leaves a fresh clone's cache as it was (empty), no partial files
        clone = tmp_path / "clone"
        sh(["git", "clone", "-q", str(built), str(clone)], tmp_path)
        for what, (url, key) in list(cases.items())[:2]:
            line = _one_line(_vrsflow("pull", clone, url, key))
            assert line.startswith(f"remote 'storage' ({url}): pull failed: {what}: "), line
            assert _cache(clone) == {}, what
        # the read-only remote still serves pulls: fill it through the writable server, pull through the other
        assert _vrsflow("push", built, server.url(remote), server.key).returncode == 0
        pulled = _vrsflow("pull", clone, read_only.url(remote), read_only.key)
        assert pulled.returncode == 0, pulled.stderr
    assert "up to date" in dvc(clone, "status", TARGET)
    assert os.environ.get("VRSFLOW_DVC_SSH_KEY") is None  # nothing leaked into this process's environment
