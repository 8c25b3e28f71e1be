"""Params overrides become `dvc exp run -S` arguments exactly."""

from __future__ import annotations

import pytest

from stages.core.dvc_cli import format_overrides, remote_url


def test_overrides_are_sorted_yaml_scalars() -> None:
    args = format_overrides({"sample.grpo_size": 8, "cot.template_set": "veason", "ingest.strict": False})
    assert args == ["-S", "cot.template_set=veason", "-S", "ingest.strict=false", "-S", "sample.grpo_size=8"]


def test_environment_overrides_params_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("X_REMOTE", raising=False)
    assert remote_url("/params/url", "X_REMOTE") == "/params/url"
    monkeypatch.setenv("X_REMOTE", "s3://bucket/x")
    assert remote_url("/params/url", "X_REMOTE") == "s3://bucket/x"
