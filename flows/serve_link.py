"""Stage flow runs started by a served pipeline run appear as its subflows and carry their params.

The pipeline run calls `dvc exp run`, which starts each stage as `vrsflow stage NAME` in its own
process. The pipeline's `dvc-exp-run` task passes its ids down in the environment; a stage that
finds them creates its flow run as a child of that task (Prefect shows it as a subflow), tagged
with the pipeline run and the experiment, and attaches the params it read (the blocks dvc.yaml
lists for it) as a table artifact. Without them (a plain `dvc repro`) the stage flow runs as is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import yaml

from stages.core.typed_config import to_dict
from stages.params import load_params

PARENT_TASK_ENV = "VRSFLOW_PARENT_TASK_RUN_ID"
PARENT_FLOW_ENV = "VRSFLOW_PARENT_FLOW_RUN_ID"
EXPERIMENT_ENV = "VRSFLOW_EXPERIMENT"


def parent_env(flow_run_id: str, task_run_id: str, experiment: str) -> dict[str, str]:
    """The environment a pipeline run gives `dvc exp run` so its stages link back to it."""
    return {PARENT_FLOW_ENV: flow_run_id, PARENT_TASK_ENV: task_run_id, EXPERIMENT_ENV: experiment}


def stage_params(stage: str, params_path: str | Path, dvc_yaml: str | Path = "dvc.yaml") -> list[dict[str, Any]]:
    """The params a stage reads, as rows {"param": dotted key, "value": …}: the keys dvc.yaml lists for it."""
    spec = yaml.safe_load(Path(dvc_yaml).read_text()) or {}
    listed = (spec.get("stages") or {}).get(stage, {}).get("params") or []
    values = to_dict(load_params(params_path))
    rows: list[dict[str, Any]] = []
    for key in (entry for entry in listed if isinstance(entry, str)):  # mappings name other params files
        node: Any = values
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        rows.extend(_flatten(key, node))
    return rows


def run_stage_flow(flow: Callable[..., Any], stage: str, params_path: str) -> Any:
    """Run a stage's flow; as a subflow of the served pipeline run when one started it."""
    from prefect import Flow

    parent_task = os.environ.get(PARENT_TASK_ENV, "")
    if not parent_task or not isinstance(flow, Flow):
        return flow(params_path=params_path)
    from prefect import get_client
    from prefect.client.schemas.actions import ArtifactCreate
    from prefect.flow_engine import run_flow

    tags = [f"vrsflow-run:{os.environ.get(PARENT_FLOW_ENV, '')}", f"experiment:{os.environ.get(EXPERIMENT_ENV, '')}"]
    parameters = {"params_path": params_path}
    with get_client(sync_client=True) as client:
        flow_run = client.create_flow_run(flow, parameters=parameters, parent_task_run_id=UUID(parent_task),
                                          tags=tags)
        client.create_artifact(ArtifactCreate(
            key=f"{stage.replace('_', '-')}-params", type="table", flow_run_id=flow_run.id,
            data=json.dumps(stage_params(stage, params_path)), description=f"{stage}: the params this run read",
        ))
    return run_flow(flow, flow_run=flow_run, parameters=parameters)


def _flatten(prefix: str, value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        return [row for key, sub in value.items() for row in _flatten(f"{prefix}.{key}", sub)]
    return [{"param": prefix, "value": json.dumps(value) if isinstance(value, list) else value}]
