"""verl's own trainer on this machine's CPU: the grpo stage with `grpo.verl.device: cpu` (profiles/verl-cpu.yaml),
measured — steps, seconds per step split as verl's own timers split them (rollout from the vLLM server, reward,
actor update, weight sync, checkpoint), reward and KL per step, the peak memory of the stage's whole process
tree, and the versions that trained.

The repo is a project copy where everything before grpo has run (`vrsflow repro -- sft` with the profile's
params, e.g. `tests/pipeline_repo.make_repo(..., profile="ci")` + `dvc exp run` of verl-cpu); the stage runs
there as `vrsflow stage grpo`, the command `dvc repro grpo` runs.

    python bench/bench_verl_cpu.py --repo /tmp/copy            → bench/results/verl-cpu.json
    python bench/bench_verl_cpu.py --repo /tmp/copy --repeat --kill-at-step 4 --kill-delay-s 20 --kill-seed 0
        reproducibility (issue 62): a second uninterrupted run, and a run SIGKILLed at a random moment up to 20 s
        after its step-4 checkpoint and rerun; adapter and merged hashes of all three, per-step rewards, and where
        two runs' rollouts first differ (`first_divergence`) when they do; `--changed-lr 0.002` then a run with
        another learning rate: its one line, and that verl starts again from step 1
    A copy without a rehearsal venv of its own: VRSFLOW_VERL_CPU_VENV=/path/to/.venv-verl-cpu
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import portable_figures, write_result  # noqa: E402

# verl's per-step timers (trainer metrics, `timing_s/<phase>`) and what each one covers
PHASES = {"gen": "rollout (vLLM CPU server, all rollouts of the step; verl scores each rollout inside this phase: "
                 "reward_within_gen_s is our reward's share of it)",
          "old_log_prob": "actor log-probs of the rollouts", "ref": "reference log-probs (LoRA: adapter off)",
          "adv": "GRPO advantages", "update_actor": "actor update (FSDP2, gloo)",
          "update_weights": "weights to the vLLM server (shared memory)", "save_checkpoint": "verl checkpoint",
          "step": "the whole step"}


def tree_rss(pid: int) -> int:
    """Resident memory of `pid` and all its descendants (bytes)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def run_stage(repo: Path, kill_at_step: int = 0, kill_delay_s: float = 0.0, env: dict | None = None,
              stop_when=None) -> dict:
    """`vrsflow stage grpo` in `repo`, with the peak memory of its process tree sampled every second; `env` is
    laid over this process's environment (e.g. VRSFLOW_VERL_CPU_VENV for a copy without its own rehearsal venv).

    `kill_at_step` > 0: SIGKILL the stage `kill_delay_s` after verl has recorded a checkpoint of that step (at
    once if the run ends first), and report which of the processes it had started are still alive 10 s later;
    `stop_when` (a callable): the same, as soon as it returns True."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    kind = "kill" if kill_at_step or stop_when is not None else "run"
    log = open(repo / f"bench-verl-cpu-{kind}-{int(time.time())}.log", "w")  # noqa: SIM115
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "stage", "grpo"], cwd=repo, env=env,
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    peak, seen = [0], {}
    tracker = repo / "data/grpo/verl/checkpoints/latest_checkpointed_iteration.txt"

    def sample() -> None:
        import psutil

        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss(proc.pid))
            with contextlib.suppress(psutil.NoSuchProcess):
                for child in psutil.Process(proc.pid).children(recursive=True):
                    seen.setdefault(child.pid, " ".join(child.cmdline())[:120])
            time.sleep(1.0)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    if kill_at_step or stop_when is not None:
        def reached() -> bool:
            if stop_when is not None:
                return bool(stop_when())
            return tracker.is_file() and int(tracker.read_text() or 0) >= kill_at_step

        while proc.poll() is None and not reached():
            time.sleep(0.5)
        deadline = time.monotonic() + kill_delay_s
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.kill()
        proc.wait()
        killed_at = time.monotonic()
        time.sleep(10.0)
        alive = [f"{pid}: {cmd}" for pid, cmd in sorted(seen.items()) if _alive(pid)]
        watcher.join()
        log.close()
        return {"log": log.name, "killed_after_s": round(killed_at - started, 1),
                "killed_at_step": int(tracker.read_text()) if tracker.is_file() else 0,
                "kill_delay_s": round(kill_delay_s, 2), "finished_before_kill": proc.returncode == 0,
                "processes_started": len(seen), "alive_10s_after_kill": alive}
    proc.wait()
    watcher.join()
    log.close()
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"vrsflow stage grpo failed ({proc.returncode}): see {log.name}")
    return {"wall_s": round(wall, 1), "peak_rss_gib": round(peak[0] / 2**30, 2), "processes_started": len(seen)}


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def weights_sha256(folder: Path) -> str:
    """One hash over the safetensors files of a model folder (names and bytes)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.safetensors")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def run_hashes(repo: Path, grpo: dict) -> dict[str, str]:
    """sha256 of the adapter's and the merged model's weights of the last run (`models/grpo`)."""
    out = repo / grpo["out_dir"]
    return {"adapter": weights_sha256(out / "adapter"), "merged": weights_sha256(out / "merged")}


def read_rollouts(folder: Path) -> dict[int, dict[str, list[str]]]:
    """verl's rollout dumps (`rollouts/<step>.jsonl`) as step → prompt (input text) → its outputs, sorted: verl
    orders a dump by its uids, which are random per run (`uuid.uuid4()` in the v1 trainer)."""
    steps: dict[int, dict[str, list[str]]] = {}
    for path in sorted(folder.glob("*.jsonl"), key=lambda p: int(p.stem)):
        groups: dict[str, list[str]] = {}
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                groups.setdefault(row["input"], []).append(row["output"])
        steps[int(path.stem)] = {k: sorted(v) for k, v in groups.items()}
    return steps


def first_divergence(a: dict[int, dict[str, list[str]]], b: dict[int, dict[str, list[str]]]) -> dict | None:
    """Where two runs' rollouts first differ: the step, the prompt (its last 80 characters), the rollout (its
    rank among the prompt's sorted outputs) and the first differing character. None when they are the same."""
    for step in sorted(set(a) | set(b)):
        if step not in a or step not in b:
            return {"step": step, "what": "a step only one run dumped"}
        for prompt in sorted(set(a[step]) | set(b[step])):
            outs_a, outs_b = a[step].get(prompt), b[step].get(prompt)
            if outs_a is None or outs_b is None:
                return {"step": step, "prompt": prompt[-80:], "what": "a prompt only one run drew"}
            for rank, (x, y) in enumerate(zip(outs_a, outs_b, strict=False)):
                if x != y:
                    char = next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))
                    return {"step": step, "prompt": prompt[-80:], "rollout": rank, "char": char,
                            "a": x[max(0, char - 20):char + 40], "b": y[max(0, char - 20):char + 40]}
            if len(outs_a) != len(outs_b):
                return {"step": step, "prompt": prompt[-80:], "what": "another number of rollouts"}
    return None


def changed_lr_run(repo: Path, grpo: dict, learning_rate: float, env: dict | None = None) -> dict:
    """Run the stage again with `grpo.learning_rate` changed (params.yaml edited, then restored) over a job folder
    that holds a finished run, stop it once verl has logged its first step, and report the stage's line about the
    folder, the steps verl logged and what was set aside."""
    params_path = repo / "params.yaml"
    original = params_path.read_text()
    import yaml

    params = yaml.safe_load(original)
    params["grpo"]["learning_rate"] = learning_rate
    job_dir = repo / grpo["verl"]["out_dir"]
    log_path = job_dir / "verl_log.jsonl"
    try:
        params_path.write_text(yaml.safe_dump(params, sort_keys=False))
        # the finished run's log is set aside before verl starts: stop once the new run has logged a step
        run = run_stage(repo, env=env, stop_when=lambda: (job_dir / "set_aside").is_dir() and log_path.is_file()
                        and log_path.read_text().strip() != "")
    finally:
        params_path.write_text(original)
    lines = [line.strip() for line in Path(run["log"]).read_text().splitlines() if "was run for other params" in line]
    steps = [json.loads(line)["step"] for line in log_path.read_text().splitlines() if line.strip()]
    return {"learning_rate": learning_rate, "from": grpo["learning_rate"], "line": lines[-1] if lines else None,
            "steps_logged": steps, "set_aside": sorted(p.name for p in (job_dir / "set_aside").glob("*")),
            "run": run}


def fresh_job(repo: Path, grpo: dict) -> None:
    """Remove the verl job (checkpoints included) and the grpo outputs, so the next run starts from step 0."""
    import shutil

    for folder in (repo / grpo["verl"]["out_dir"], repo / grpo["out_dir"]):
        shutil.rmtree(folder, ignore_errors=True)


def reward_seconds(job_dir: Path) -> dict[int, float]:
    """Seconds our reward took per step (`reward_s` of each rollout's reward-log line, summed over the step's
    rollouts: verl scores them inside its rollout phase, one reward worker here, so they add up)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from stages.rewards.verl_entry import rollout_key

    seconds = {}
    for path in (job_dir / "reward_log").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if "reward_s" in entry:
                seconds[entry["key"]] = entry["reward_s"]
    per_step = {}
    for path in (job_dir / "rollouts").glob("*.jsonl"):
        rollouts = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        found = [seconds.get(rollout_key(r["output"], r["gts"])) for r in rollouts]
        if found and all(s is not None for s in found):
            per_step[int(path.stem)] = round(sum(found), 3)
    return per_step


def per_step(job_dir: Path) -> list[dict]:
    """verl's file log, one row per step: reward, KL, response length and the phase timers."""
    rewards_s = reward_seconds(job_dir)
    rows = []
    for line in (job_dir / "verl_log.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        data = entry["data"]
        row = {"step": int(entry["step"]), "reward": data.get("critic/score/mean"),
               "kl": data.get("actor/kl_loss"), "response_length": data.get("response_length/mean"),
               "actor_peak_rss_gib": data.get("actor/perf/max_memory_allocated_gb")}
        row.update({f"{phase}_s": round(float(data[f"timing_s/{phase}"]), 3) for phase in PHASES
                    if f"timing_s/{phase}" in data})
        if row["step"] in rewards_s:
            row["reward_within_gen_s"] = rewards_s[row["step"]]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="project copy with everything before grpo run")
    parser.add_argument("--out", type=Path, default=None, help="results file (default bench/results/verl-cpu.json)")
    parser.add_argument("--kill-at-step", type=int, default=0,
                        help="then run again, SIGKILL the stage once verl has checkpointed this step, and resume")
    parser.add_argument("--kill-delay-s", type=float, default=0.0,
                        help="kill at a random moment up to this many seconds after that checkpoint")
    parser.add_argument("--kill-seed", type=int, default=0, help="seed of that random moment")
    parser.add_argument("--repeat", action="store_true",
                        help="a second uninterrupted run: are its weights and rewards the first one's?")
    parser.add_argument("--changed-lr", type=float, default=None,
                        help="last, a run with grpo.learning_rate set to this: its one line on the job folder set "
                             "aside, and verl's first logged step (the run is stopped after it; params restored)")
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    import yaml

    params = yaml.safe_load((repo / "params.yaml").read_text())
    grpo = params["grpo"]
    if grpo["engine"] != "verl" or grpo["verl"]["device"] != "cpu":
        raise SystemExit(f"{repo / 'params.yaml'}: grpo.engine verl with grpo.verl.device cpu expected "
                         "(profiles/verl-cpu.yaml)")
    fresh_job(repo, grpo)
    stage = run_stage(repo)
    job_dir = repo / grpo["verl"]["out_dir"]
    steps = per_step(job_dir)
    merged = weights_sha256(repo / grpo["out_dir"] / "merged")
    hashes = run_hashes(repo, grpo)
    import random
    import shutil

    first_rollouts = repo / "bench-verl-cpu-first-rollouts"  # the first run's dumps, for first_divergence
    shutil.rmtree(first_rollouts, ignore_errors=True)
    shutil.copytree(job_dir / "rollouts", first_rollouts)
    repeat = {}
    if args.repeat:
        fresh_job(repo, grpo)
        second = run_stage(repo)
        again = per_step(job_dir)
        repeat = {"run": second, "hashes": run_hashes(repo, grpo),
                  "rewards": [r["reward"] for r in again], "rewards_first": [r["reward"] for r in steps],
                  "first_divergence": first_divergence(read_rollouts(first_rollouts),
                                                       read_rollouts(job_dir / "rollouts"))}
        repeat["weights_equal_first_run"] = repeat["hashes"] == hashes
        repeat["rewards_equal_first_run"] = repeat["rewards"] == repeat["rewards_first"]
    resume, rerun = {}, None
    if args.kill_at_step:
        fresh_job(repo, grpo)
        delay = random.Random(args.kill_seed).uniform(0.0, args.kill_delay_s)
        resume = run_stage(repo, kill_at_step=args.kill_at_step, kill_delay_s=delay)
        try:
            rerun = run_stage(repo)
        except SystemExit as failed:  # the figures of the run above are kept, with why the resume failed
            resume["rerun_failed"] = str(failed)
            rerun = None
    if rerun is not None:
        resumed_log = per_step(job_dir)
        resume.update({"rerun": rerun, "steps_logged_after_resume": [r["step"] for r in resumed_log],
                       "final_weights_equal_uninterrupted": weights_sha256(repo / grpo["out_dir"] / "merged") == merged,
                       "hashes": run_hashes(repo, grpo),
                       "first_divergence": first_divergence(read_rollouts(first_rollouts),
                                                            read_rollouts(job_dir / "rollouts")),
                       "rewards_after_resume": [r["reward"] for r in resumed_log],
                       "rewards_uninterrupted": [r["reward"] for r in steps]})
    lineage = json.loads((repo / grpo["out_dir"] / "lineage.json").read_text())
    changed = changed_lr_run(repo, grpo, args.changed_lr) if args.changed_lr is not None else {}
    phases = {f"{phase}_s_mean": round(sum(r[f"{phase}_s"] for r in steps) / len(steps), 3)
              for phase in [*PHASES, "reward_within_gen"] if all(f"{phase}_s" in r for r in steps)}
    # the first step carries the start-up (the first weight sync, warm-up): the mean of the others as well
    later = steps[1:]
    phases.update({f"{phase}_s_mean_after_first": round(sum(r[f"{phase}_s"] for r in later) / len(later), 3)
                   for phase in ("gen", "update_actor", "step") if later and all(f"{phase}_s" in r for r in later)})
    figures = {
        "steps": len(steps), "stage": stage, "per_step": steps, "phase_means": phases, "phases": PHASES,
        "merged_weights_sha256": merged, "hashes": hashes, "repeat": repeat, "kill_and_resume": resume,
        "changed_learning_rate": changed,
        "versions": lineage["extra"]["verl_versions"], "device": lineage["extra"]["verl_device"],
        "sizes": {"prompts_per_step": grpo["batch_size"], "rollouts_per_prompt": grpo["num_generations"],
                  "max_response_length": grpo["max_response_length"], "lora_r": grpo["lora_r"],
                  "fsdp_ranks": grpo["verl"]["n_gpus_per_node"] * grpo["verl"]["nnodes"],
                  "reward_components": params["reward"]["components"],
                  "save_every_steps": grpo["save_every_steps"]},
    }
    # process lines and the stage's line name this machine's folders; a results file is read on others
    figures = portable_figures(figures, {str(repo): "<repo>"})
    write_result("verl-cpu", figures, baseline="none: the first verl training steps on this machine; the phases "
                 "split verl's own step timer", out=args.out)


if __name__ == "__main__":
    main()
