"""`grpo` stage: GRPO with the verifiable reward (stages/rewards), engine `trl` (one machine, CPU default)
or `verl` (GPU cluster: validated config, parquet, launch script; docs/grpo_verl.md).

Outputs (both engines): `models/grpo/{adapter,merged}` (adapter only with LoRA) + lineage + model card,
the live curves `metrics/live/grpo` (DVCLive's files and TensorBoard's, per step: reward total and per component,
response length, KL, …; written while TRL trains, and from verl's logs while and after verl runs) and
`metrics/grpo.json` (first/last-window mean reward). With verl, the final actor checkpoint of the run is
merged with verl's own merger (`stages.grpo.verl_engine`).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pandas as pd

from stages.core.lineage import write_lineage
from stages.core.live import TENSORBOARD_DIR, live_markdown, write_live
from stages.core.model_card import write_model_card
from stages.core.output_lock import hold_outputs
from stages.core.report import StageReport
from stages.grpo.curves import (
    curve_from_trl,
    curves_markdown,
    source_summary,
    summary_window,
    window_summary,
)
from stages.params import default_params
from stages.params.grpo import GrpoParams
from stages.params.reward import RewardParams
from stages.params.sam2 import Sam2Params
from stages.rewards import check_params

log = logging.getLogger(__name__)


def run_grpo(grpo: GrpoParams, reward: RewardParams, sam2: Sam2Params, live_dir: Path,
             params_path: Path = Path("params.yaml")) -> StageReport:
    """Train with the configured engine and write the checkpoint, the per-step curves and the summary.

    Args:
        grpo, reward, sam2: params blocks.
        live_dir: the live curves' folder (`metrics/live/grpo`, `stages.core.live`).
        params_path: params.yaml (verl's reward workers read the reward block from it).

    Raises:
        ValueError: bad reward params. FileNotFoundError: missing shards / model / parquet.
        RuntimeError: engine verl on a machine without GPUs (after writing the validated job).
        OutputLocked: another live run writes the output or checkpoint folders (held for the whole run).
    """
    folders = [grpo.out_dir, grpo.checkpoint_dir] + ([grpo.verl.out_dir] if grpo.engine == "verl" else [])
    with hold_outputs("grpo", folders):
        return _run_grpo(grpo, reward, sam2, Path(live_dir), params_path)


def _run_grpo(grpo: GrpoParams, reward: RewardParams, sam2: Sam2Params, live_dir: Path,
              params_path: Path) -> StageReport:
    check_params(reward)
    if grpo.engine == "verl":
        return _run_verl(grpo, reward, sam2, live_dir, params_path)
    from stages.grpo.data import build_dataset, read_grpo_shards
    from stages.grpo.trl_engine import train_trl

    samples = read_grpo_shards(Path(grpo.shards_dir))
    if not samples:
        raise ValueError(f"{grpo.shards_dir}: the GRPO pool is empty")
    out_dir = Path(grpo.out_dir)
    if grpo.processes > 1 and "WORLD_SIZE" not in os.environ:  # this process starts the group and waits
        from stages.core.typed_config import to_dict
        from stages.models.launch import run_launched

        result = run_launched("grpo", grpo.processes, grpo.accelerate_config, "stages.grpo.trl_engine",
                              {"grpo": to_dict(grpo), "reward": to_dict(reward), "sam2": to_dict(sam2),
                               "live_dir": str(live_dir)})
    else:
        result = train_trl(grpo, reward, sam2, build_dataset(samples), out_dir, Path(grpo.checkpoint_dir),
                           live_dir=live_dir)
    rows = curve_from_trl(result["log_history"])  # the summary's; the curves are DVCLive's, written as it trained
    summary = window_summary(rows, summary_window(grpo.window, len(samples), grpo.batch_size))
    summary.update({"samples": len(samples), "wall_s": round(result["wall_s"], 3),
                    "reward_s": round(result["reward_s"], 3), **source_summary(rows)})
    write_lineage(out_dir, "grpo", {"grpo": grpo, "reward": reward, "sam2": sam2}, seed=grpo.seed,
                  inputs={"shards": Path(grpo.shards_dir), "model": Path(grpo.model_path),
                          **({"sam2": Path(sam2.checkpoint)} if "consistency" in reward.components else {})},
                  counts={"samples": len(samples), "steps": result["global_step"]},
                  code_modules=["stages.grpo", "stages.rewards", "stages.sam2_wrapper", "schemas.answer"])
    write_model_card(out_dir, "vrsflow GRPO checkpoint (Qwen2.5-VL, verifiable reward)", default_params(),
                     metrics={"grpo": summary})
    log.info("grpo: reward %.3f → %.3f over %d steps", summary.get("reward_first", float("nan")),
             summary.get("reward_last", float("nan")), summary["steps"])
    return StageReport("grpo", metrics=summary, tables={"curve": pd.DataFrame(rows)},
                       markdown=live_markdown(live_dir, curves_markdown))


def _run_verl(grpo: GrpoParams, reward: RewardParams, sam2: Sam2Params, live_dir: Path,
              params_path: Path) -> StageReport:
    """Write the validated job; run it when this machine has GPUs and the job has not finished yet; then bring
    the final checkpoint back (verl's merger → `models/grpo`), with the curve, lineage and model card.

    A job run elsewhere (launch.sh on the cluster, same params) is collected as it is: `finish` recorded the
    overrides it ran with, and a job for other params is never taken for this one.
    """
    import subprocess
    import tempfile

    import pyarrow.parquet as pq

    from stages.grpo.curves import curve_from_verl, following_verl
    from stages.grpo.verl_engine import cuda_available, finished_run, merge_in_job_venv, prepare_job, write_models
    from stages.models.trainable import lora_targets
    from stages.sam2_wrapper import config_identity

    job = prepare_job(grpo, reward, sam2, params_path)
    job_dir = Path(grpo.verl.out_dir)
    record = finished_run(job_dir)
    versions = {}
    if record is None and grpo.verl.device == "cpu":  # the CPU rehearsal: verl's own trainer, here
        from stages.grpo.verl_cpu import run_rehearsal

        with following_verl(job_dir, live_dir):
            versions = run_rehearsal(Path.cwd(), Path(job["launch"]), job_dir,
                                     grpo.verl.n_gpus_per_node * grpo.verl.nnodes, Path(grpo.model_path))
        record = finished_run(job_dir)
        if record is None:
            raise RuntimeError(f"{job['launch']} ended without marking the job finished in {job_dir}")
    if record is None:
        if not cuda_available():
            raise RuntimeError(f"engine verl needs GPUs and a vLLM/SGLang rollout server; the validated job is in "
                               f"{job_dir} — run {job['launch']} on the cluster, then this stage again to bring "
                               f"the checkpoint back (docs/grpo_verl.md; `python -m stages.grpo.verl_engine "
                               f"prepare` writes the job and exits 0)")
        with following_verl(job_dir, live_dir):
            subprocess.run(["bash", job["launch"]], check=True)
        record = finished_run(job_dir)
        if record is None:
            raise RuntimeError(f"{job['launch']} ended without marking the job finished in {job_dir}")
    out_dir = Path(grpo.out_dir)
    with tempfile.TemporaryDirectory(prefix="verl-merge-") as tmp:
        # the checkpoint unpickles only under the torch that wrote it: the job's own venv, on GPU nodes as on CPU
        hf = merge_in_job_venv(Path.cwd(), record, job_dir, grpo.verl.device, Path(tmp) / "hf")
        written = write_models(hf, out_dir,
                               base_model=grpo.model_path,
                               target_rule=lora_targets(grpo.target_modules, grpo.train_vision))
    rows = curve_from_verl(job_dir)
    write_live(rows, live_dir)
    (live_dir / TENSORBOARD_DIR).mkdir(parents=True, exist_ok=True)  # a declared output, even for an older job
    if (job_dir / TENSORBOARD_DIR).is_dir():  # verl's own TensorBoard logger (trainer.logger), beside TRL's
        shutil.copytree(job_dir / TENSORBOARD_DIR, live_dir / TENSORBOARD_DIR, dirs_exist_ok=True)
    pool_size = pq.ParquetFile(grpo.verl_parquet).metadata.num_rows  # footer only
    summary = {**window_summary(rows, summary_window(grpo.window, pool_size, grpo.batch_size)), "engine_verl": 1,
               "samples": pool_size}
    write_lineage(out_dir, "grpo", {"grpo": grpo, "reward": reward, "sam2": sam2}, seed=grpo.seed,
                  inputs={"parquet": Path(grpo.verl_parquet), "model": Path(grpo.model_path)},
                  counts={"samples": pool_size, "steps": int(record["step"])},
                  code_modules=["stages.grpo", "stages.rewards", "stages.sam2_wrapper", "schemas.answer"],
                  extra={"engine": "verl", "verl_device": grpo.verl.device,
                         "verl_versions": record.get("versions") or versions,
                         "verl_checkpoint": record["actor"], "lora_adapter": written["adapter"],
                         **({"sam2_config": config_identity(sam2.config)} if "consistency" in reward.components
                            else {})})
    write_model_card(out_dir, "vrsflow GRPO checkpoint (Qwen2.5-VL, verifiable reward, verl)", default_params(),
                     metrics={"grpo": summary})
    log.info("grpo (verl): step %d checkpoint merged into %s", record["step"], out_dir)
    return StageReport("grpo", metrics=summary, tables={"curve": pd.DataFrame(rows)},
                       markdown=live_markdown(live_dir, curves_markdown))
