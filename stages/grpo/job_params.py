"""A verl job folder belongs to the params it was made for: what determines the weights is recorded in it
(`job_params.json`), and a rerun for other params never resumes that folder's checkpoints — they are set aside
(moved, never deleted) with one log line naming the changed keys, and the run starts from step 0.

"What determines the weights" is the grpo, reward and sam2 blocks with their paths replaced by the content they
name (the SFT model, the verl parquet, the SAM2 checkpoint and config files), less what only says where files
go, how many processes or GPUs run it, how often it checkpoints, and the TRL engine's runtime keys
(`NOT_WEIGHTS`). Hashing the content means a retrained SFT model under the same path is another job too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stages.core.typed_config import to_dict
from stages.params.grpo import GrpoParams
from stages.params.reward import RewardParams
from stages.params.sam2 import Sam2Params

log = logging.getLogger(__name__)

RECORD = "job_params.json"
SET_ASIDE = "set_aside"  # runs made for other params, one folder each
# params keys that change where or how fast a run goes, not the weights it ends with
NOT_WEIGHTS = frozenset({
    "grpo.out_dir", "grpo.checkpoint_dir", "grpo.shards_dir", "grpo.processes", "grpo.accelerate_config",
    "grpo.cpu_threads", "grpo.window", "grpo.save_every_steps", "grpo.engine",
    "grpo.verl.out_dir", "grpo.verl.n_gpus_per_node", "grpo.verl.nnodes", "grpo.verl.gpu_memory_utilization",
    "grpo.verl.sam2_service", "grpo.verl.sam2_placement", "grpo.verl.sam2_gpus", "grpo.verl.sam2_memory_fraction",
})
# params keys that name files: the record holds their content's sha256 instead of the path
CONTENT_KEYS = ("grpo.model_path", "grpo.verl_parquet", "sam2.checkpoint", "sam2.config")
_CHUNK = 1 << 20


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}", inner, out)
    else:
        out[prefix] = value


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def content_hash(path: Path, known: dict[str, list] | None = None) -> tuple[str, dict[str, list]]:
    """sha256 over the files under `path` (a file or a folder; "absent" when there is none) and the per-file
    table [size, mtime_ns, sha256] that computed it. A file whose size and mtime are in `known` is not read
    again (a 7B model is ~16 GB; reruns of the same job then hash nothing)."""
    path = Path(path)
    if not path.exists():
        return "absent", {}
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    known = known or {}
    table: dict[str, list] = {}
    digest = hashlib.sha256()
    for file in files:
        name = "." if file == path else file.relative_to(path).as_posix()
        stat = file.stat()
        seen = known.get(name)
        sha = seen[2] if seen and seen[:2] == [stat.st_size, stat.st_mtime_ns] else _file_sha256(file)
        table[name] = [stat.st_size, stat.st_mtime_ns, sha]
        digest.update(f"{name}\0{sha}\n".encode())
    return digest.hexdigest(), table


def weight_params(grpo: GrpoParams, reward: RewardParams, sam2: Sam2Params,
                  known_files: dict[str, dict[str, list]] | None = None) -> tuple[dict[str, Any], dict]:
    """(the flat `block.key → value` map of what determines the weights, the per-file hash tables).

    Paths in `CONTENT_KEYS` are replaced by the sha256 of what they name; a sam2 package config name (not a
    file) stays as it is."""
    flat: dict[str, Any] = {}
    for name, block in (("grpo", grpo), ("reward", reward), ("sam2", sam2)):
        _flatten(name, to_dict(block), flat)
    files: dict[str, dict[str, list]] = {}
    for key in CONTENT_KEYS:
        path = Path(str(flat[key]))
        if key == "sam2.config" and not path.exists():
            continue  # a sam2 package config name: the name is the identity
        flat[key], files[key] = content_hash(path, (known_files or {}).get(key))
    params = {k: v for k, v in sorted(flat.items()) if k not in NOT_WEIGHTS}
    return params, files


def changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`key: old → new` for every key whose value differs ("(none)" for a key one side lacks)."""
    def show(key: str, values: dict[str, Any]) -> str:
        if key not in values:
            return "(none)"
        value = values[key]
        return f"sha256 {value[:12]}" if key in CONTENT_KEYS and isinstance(value, str) and len(value) == 64 \
            else json.dumps(value) if not isinstance(value, str) else value

    return [f"{key}: {show(key, old)} → {show(key, new)}" for key in sorted(set(old) | set(new))
            if old.get(key, object()) != new.get(key, object())]


def read_record(job_dir: Path) -> dict | None:
    path = Path(job_dir) / RECORD
    return json.loads(path.read_text()) if path.is_file() else None


def claim_job(job_dir: Path, params: dict[str, Any], files: dict, run_outputs: Iterable[str]) -> Path | None:
    """Make `job_dir` the folder of a run for `params`: when it holds a run's outputs (`run_outputs`, names in the
    folder) made for other params, or for params it has no record of, move them to `job_dir/set_aside/<time>/`
    and log one line naming the changed keys. Then record `params`. Returns the set-aside folder, or None."""
    job_dir = Path(job_dir)
    record = read_record(job_dir)
    present = [name for name in run_outputs if (job_dir / name).exists()]
    moved_to = None
    if present and (record is None or record.get("params") != params):
        why = "; ".join(changed_keys(record["params"], params)) if record else "no record of the params it ran with"
        moved_to = job_dir / SET_ASIDE / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        suffix = 1
        while moved_to.exists():
            moved_to = moved_to.with_name(f"{moved_to.name.split('.')[0]}.{suffix}")
            suffix += 1
        moved_to.mkdir(parents=True)
        for name in present:
            shutil.move(str(job_dir / name), str(moved_to / name))
        log.warning("grpo: %s was run for other params (%s); its checkpoints are set aside in %s and training "
                    "starts from step 0", job_dir, why, moved_to)
    job_dir.mkdir(parents=True, exist_ok=True)
    tmp = job_dir / f".{RECORD}.tmp"
    tmp.write_text(json.dumps({"params": params, "files": files}, sort_keys=True, indent=1) + "\n")
    os.replace(tmp, job_dir / RECORD)
    return moved_to
