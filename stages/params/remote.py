"""`remote`: the DVC remote outputs are pushed to (server side)."""

from __future__ import annotations

from dataclasses import dataclass

from stages.core.params import NonEmptyStr, SecretEnv
from stages.core.typed_config import Server


@dataclass(frozen=True)
class RemoteParams:
    name: Server[NonEmptyStr] = "storage"  # DVC remote name
    url: Server[str] = ""  # s3://bucket/path, gs://…, ssh://host/path or a local folder; empty = no remote
    url_env: SecretEnv = "VRSFLOW_DVC_REMOTE"  # environment variable that, when set, overrides `url`
