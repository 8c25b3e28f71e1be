"""Errors whose message is all a user needs: the stage's command prints the one line and exits non-zero, and the
Prefect run logs it without a traceback (flows/common.py). A full disk (`stages.core.disk.DiskFull`) is one; a
machine that lacks what a stage needs to start (the verl CPU rehearsal's venv, a port, Ray) is another."""

from __future__ import annotations


class OneLineError(Exception):
    """An error whose `str()` is the one line to show: what failed, where, and the command that fixes it."""


class SetupError(OneLineError, RuntimeError):
    """What a stage needs on this machine is missing or broken (an environment, a port, a service); nothing of
    the stage's outputs has been replaced."""


class EmptyInput(OneLineError, ValueError):
    """A stage's input holds nothing to work on; the line names the stage that produced it (and where to look
    why), so the cause is found where it happened, not three stages later."""
