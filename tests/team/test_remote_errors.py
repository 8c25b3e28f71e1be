"""What `vrsflow push` / `vrsflow pull` say when the remote fails: one line from dvc's output (the outputs below are
dvc 3.67 + dvc-ssh 4.3's, recorded against a real sshd; tests/team/test_dvc_ssh.py produces them live)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import build_parser, stage_names
from stages.core.dvc_cli import configure_remote, remote_failure

HELP = "\nHaving any troubles? Hit us up at https://dvc.org/support, we are always happy to help!\n"


@pytest.mark.parametrize(("output", "expected"), [
    ("ERROR: unexpected error - [Errno 111] Connect call failed ('127.0.0.1', 52229)\n" + HELP,
     "cannot reach the host: [Errno 111] Connect call failed ('127.0.0.1', 52229)"),
    ("ERROR: unexpected error - Permission denied for user root on host 127.0.0.1: Permission denied for user root "
     "on host 127.0.0.1\n" + HELP,
     "authentication refused (wrong key or password?): Permission denied for user root on host 127.0.0.1: "
     "Permission denied for user root on host 127.0.0.1"),
    ("ERROR: unexpected error - Permission denied\n" + HELP,
     "the remote refuses to write (read-only?): Permission denied"),
    ("WARNING: No file hash info found for 'data/x'. It won't be created.\n"
     "ERROR: failed to pull data from the cloud - Checkout failed for following targets:\ndata/a\nmodels/b\ndata/c\n"
     "reports/d\nIs your cache up to date?\n<https://error.dvc.org/missing-files>\n",
     "failed to pull data from the cloud - Checkout failed for following targets: data/a, models/b, data/c and 1 more"),
    ("ERROR: something new\n", "something new"),
    ("no error line at all\n", "no error line at all"),
])
def test_remote_failure_names_what_failed(output: str, expected: str) -> None:
    assert remote_failure(output) == expected


def test_a_password_in_the_remote_url_is_refused_before_dvc_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^remote 'storage': the URL holds a password; use a key"):
        configure_remote(tmp_path, "storage", "ssh://alice:hunter2@127.0.0.1/srv/dvc")
    assert not (tmp_path / ".dvc").exists()


def test_worker_command_and_transfer_commands_parse() -> None:
    args = build_parser().parse_args(["worker", "--project", "repo"])
    assert (args.project, args.pool, args.name, args.allow_root) == ("repo", "vrsflow", "vrsflow-pool", [])
    push = build_parser().parse_args(["push", "ingest", "-j", "4"])
    assert (push.command, push.targets, push.jobs) == ("push", ["ingest"], 4)
    assert "serve_worker" not in stage_names()


def test_a_run_sets_neither_the_command_nor_the_environment_of_its_process():
    """Job variables of a run (or a deployment) cannot name what the worker executes or its environment: the
    pool's locked template is all that shapes the run's process (Prefect's default template takes both)."""
    import asyncio

    from prefect.workers.process import ProcessJobConfiguration, ProcessWorker

    from flows.serve_worker import LOCKED_JOB_TEMPLATE, locked_worker_class

    attack = {"command": "touch /tmp/vrsflow-pwned", "env": {"LD_PRELOAD": "/tmp/evil.so", "PATH": "/tmp"},
              "working_dir": "/"}
    default = asyncio.run(ProcessJobConfiguration.from_template_and_values(
        ProcessWorker.get_default_base_job_template(), attack))
    assert default.command == attack["command"]  # what an unlocked pool would run
    configuration = locked_worker_class().job_configuration
    for template in (LOCKED_JOB_TEMPLATE, ProcessWorker.get_default_base_job_template()):
        locked = asyncio.run(configuration.from_template_and_values(template, attack))
        assert locked.command in (None, "{{ command }}", "") or locked.command != attack["command"]
        assert "LD_PRELOAD" not in (locked.env or {}) and (locked.env or {}).get("PATH") != "/tmp"
        assert str(locked.working_dir or "") != "/"
    assert LOCKED_JOB_TEMPLATE["variables"]["properties"] == {}
