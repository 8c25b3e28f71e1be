"""The whole DAG end to end through real DVC and a real Prefect server, in throwaway git repositories.

With the `ci` params profile (profiles/ci.yaml) every stage runs through `dvc repro` and its Prefect flow, on
three training sources of three layouts (ReVOS, MeViS, Ref-YouTube-VOS, all synthetic); the outputs hold the
values the params and the raw data determine (per source: index, pools, keyframes, shards, SFT and GRPO); data
and checkpoints go to a local-folder DVC remote, and a fresh clone that pulls is up to date. Under `-m slow`
(each names its fast twin in the default run): a second build from scratch with the serial runner (and shard
once more with Dask) gives byte-identical tables and shards; forced SFT and GRPO reruns give the same
checkpoints; a SIGTERM stops a stage within seconds, marks its Prefect run crashed and the rerun resumes.

The tests of this module share repositories and run in file order.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import tarfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
import yaml

from stages.core.live import read_live
from tests.pipeline_repo import dvc, env_with_venv, make_repo, profile_overrides, sh

# the stages of dvc.yaml, and those that run a Prefect flow (`vrsflow stage NAME`)
DVC_STAGES = yaml.safe_load((Path(__file__).resolve().parents[1] / "dvc.yaml").read_text())["stages"]
COMMANDS = [stage.get("cmd") or stage["do"]["cmd"] for stage in DVC_STAGES.values()]  # `do:` of foreach stages
FLOW_STAGES = [cmd.split()[2] for cmd in COMMANDS if cmd.startswith("vrsflow stage ")]
# what a user commits after `dvc repro` so that a fresh clone + `dvc pull` is up to date (README)
COMMITTED = ("dvc.lock", "metrics/")


def file_hashes(root: Path, skip_lineage: bool = False) -> dict[str, str]:
    """sha256 of every file under `root`, by relative path (written here: shares no code with stages/)."""
    hashes = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if skip_lineage and path.name == "lineage.json":
            continue
        hashes[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes


def lock_outs(repo: Path) -> dict[str, str]:
    """Output path → hash as recorded by DVC in dvc.lock."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    return {out["path"]: out.get("md5", "") for stage in lock["stages"].values() for out in stage.get("outs", [])}


def flow_runs_since(since: datetime) -> list[tuple[str, str]]:
    """(flow name, state type) of every flow run the session's Prefect API saw start after `since`."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterStartTime

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(start_time=FlowRunFilterStartTime(after_=since)),
                                     limit=200)
        names = {flow.id: flow.name for flow in client.read_flows(limit=200)}
    return [(names[run.flow_id], run.state_type.value) for run in runs]


@pytest.fixture(scope="module")
def ci(project_root: Path) -> dict[str, object]:
    return profile_overrides(project_root, "ci")


@pytest.fixture(scope="module")
def started() -> datetime:
    return datetime.now(UTC)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, project_root: Path, prefect_api: str, started: datetime) -> Path:
    """A fresh git + DVC copy of the project (ci profile) with the whole DAG reproduced by `vrsflow repro`
    (what scripts/run.sh runs: stages forked from one warm process)."""
    dest = make_repo(project_root, tmp_path_factory.mktemp("pipeline") / "repo", profile="ci")
    timings = dest.parent / "timings.jsonl"
    _run([sys.executable, "-m", "flows.cli", "repro"], dest, {"VRSFLOW_TIMINGS": str(timings)}, timeout=1200)
    return dest


def test_stages_ran_in_the_warm_process(repo: Path) -> None:
    lines = [json.loads(line) for line in (repo.parent / "timings.jsonl").read_text().splitlines()]
    records = [r for r in lines if "stage" in r]  # the stage processes' records (the commands write their own)
    assert len([r for r in lines if r.get("command") == "stage"]) == len(records)  # one command per stage run
    assert {"synth", "ingest", "shard", "sft", "grpo", "evaluate"} <= {r["stage"] for r in records}
    # the fork server is ready after its imports; from then on every stage is forked from it
    assert [r["stage"] for r in records if r["forked"]][-3:] == [r["stage"] for r in records][-3:]


def test_every_stage_ran_as_a_prefect_flow(repo: Path, started: datetime) -> None:
    runs = flow_runs_since(started)
    assert {"synth", "tiny_models", "shard", "sft", "grpo", "evaluate"} <= set(FLOW_STAGES)
    frozen = {name for name, stage in yaml.safe_load((repo / "dvc.yaml").read_text())["stages"].items()
              if stage.get("frozen")}  # trained once and committed (pretrain_sam2): dvc does not run them
    assert "pretrain_sam2" in frozen
    for stage in FLOW_STAGES:
        state = "COMPLETED" if stage not in frozen else None
        assert (state is None) == all(name != f"dvc-{stage}" for name, _ in runs), (stage, runs)
        assert state is None or (f"dvc-{stage}", state) in runs, (stage, runs)


# the published meta file of each training-source layout, relative to its root (oracle: read with json only)
META = {"revos": "meta_expressions_{split}_.json", "mevis": "{split}/meta_expressions.json",
        "refytvos": "meta_expressions/{split}/meta_expressions.json"}


def raw_targets(repo: Path, layout: str, root: str, split: str) -> dict[str, list[int]]:
    """Oracle: video → the number of targets of each expression, in published order, from the raw meta file
    (a Ref-YouTube-VOS expression names one object; the others list their anno_ids)."""
    videos = json.loads((repo / root / META[layout].format(split=split)).read_text())["videos"]
    return {video: [1 if layout == "refytvos" else len(e["anno_id"])
                    for _, e in sorted(entry["expressions"].items(), key=lambda kv: int(kv[0]))]
            for video, entry in videos.items()}


def exact_shares(size: int, shares: dict[str, float]) -> dict[str, int]:
    """Oracle: a pool split by the shares; the ci profile's sizes split exactly (no rounding to re-derive)."""
    total = sum(shares.values())
    exact = {name: size * share / total for name, share in shares.items()}
    assert all(float(q).is_integer() for q in exact.values()), exact
    return {name: int(q) for name, q in exact.items()}


def source_of_key(key: str, names: list[str]) -> str:
    """Oracle: a source's video keys, sample ids and shard keys start with its name, data.root's do not."""
    head = key.replace("/", "_").split("_", 1)[0]
    return head if head in names else "root"


def count_by_source(keys, names: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for key in keys:
        out[source_of_key(key, names)] = out.get(source_of_key(key, names), 0) + 1
    return out


def test_outputs_hold_the_values_params_and_data_determine(repo: Path, ci: dict[str, object]) -> None:
    metrics = {p.stem: json.loads(p.read_text()) for p in (repo / "metrics").glob("*.json")}
    sources = ci["data.sources"]
    names = [s["name"] for s in sources]
    assert len(sources) == 3 and len({s["layout"] for s in sources}) == 3  # a three-source, three-layout mixture
    raw = {s["name"]: raw_targets(repo, s["layout"], s["root"], s["split"]) for s in sources}
    raw["root"] = raw_targets(repo, "revos", "data/raw/synth", "valid")  # data.root: the evaluation videos
    assert len(raw["revos"]) == ci["synth.default.n_videos_train"] and len(raw["root"]) == 2
    # the index: every source's videos and expressions, under its own name
    expected_index = {name: (len(videos), sum(len(e) for e in videos.values())) for name, videos in raw.items()}
    index_videos = pd.read_parquet(repo / "data/index/videos.parquet")
    index_expressions = pd.read_parquet(repo / "data/index/expressions.parquet")
    assert {name: (int((index_videos["source"] == name).sum()), int((index_expressions["source"] == name).sum()))
            for name in raw} == expected_index
    assert metrics["ingest"]["videos"] == sum(v for v, _ in expected_index.values())
    assert metrics["ingest"]["expressions"] == sum(e for _, e in expected_index.values())
    assert (index_videos["video"].map(lambda v: source_of_key(v, names)) == index_videos["source"]).all()

    # pools: SFT = of the first k targeted expressions of each training video, sft_size split 2 : 1 : 1; GRPO
    # = grpo_size split so from the rest; eval = data.root's valid split
    k = ci["sample.sft_first_k"]
    shares = {s["name"]: s["share"] for s in sources}
    first_k = {name: sum(min(k, sum(n > 0 for n in exps)) for exps in raw[name].values()) for name in names}
    targeted = {name: sum(n > 0 for exps in raw[name].values() for n in exps) for name in names}
    expected = {"sft": exact_shares(ci["sample.sft_size"], shares),
                "grpo": exact_shares(ci["sample.grpo_size"], shares), "eval": {"root": ci["sample.eval_size"]}}
    for name in names:  # every quota can be met, so the counts are exactly the quotas
        assert first_k[name] >= expected["sft"][name]
        assert targeted[name] - expected["sft"][name] >= expected["grpo"][name]
    sft_expected = ci["sample.sft_size"]
    pools = {name: pd.read_parquet(repo / f"data/sample/{name}.parquet") for name in ("sft", "grpo", "eval")}
    keyframes = {name: pd.read_parquet(repo / f"data/keyframes/{name}.parquet") for name in pools}
    for name, pool in pools.items():
        assert count_by_source(pool["video"], names) == expected[name], name
        assert sorted(keyframes[name]["sample_id"]) == sorted(pool["sample_id"])  # carried unchanged
        if name != "eval":
            assert {kk: v for kk, v in metrics["sample"].items() if kk.startswith(f"{name}.source.")} == {
                f"{name}.source.{s}": n for s, n in expected[name].items()}
    ids = [set(zip(pool["video"], pool["exp_id"], strict=True)) for pool in pools.values()]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])

    # one teacher trace per SFT sample; every trace accepted or rejected; every pooled sample rated
    generations = pd.read_parquet(repo / "data/cot/generations.parquet")
    assert len(generations) == sft_expected and metrics["cot"]["requests"] == sft_expected
    accepted = pd.read_parquet(repo / "data/filter/accepted.parquet")
    rejected = pd.read_parquet(repo / "data/filter/rejected.parquet")
    assert len(accepted) + len(rejected) == sft_expected
    assert metrics["filter"]["accepted"] == len(accepted) > 0
    assert len(pd.read_parquet(repo / "data/difficulty/scores.parquet")) == sum(
        ci[f"sample.{pool}_size"] for pool in ("sft", "grpo", "eval"))

    # shards: counts per pool, and the manifest's checksums are the tar files' own
    manifest = json.loads((repo / "data/shards/manifest.json").read_text())
    assert {pool: manifest[pool]["count"] for pool in ("sft", "grpo", "eval")} == {
        "sft": len(accepted), "grpo": ci["sample.grpo_size"], "eval": ci["sample.eval_size"]}
    # per source: the accepted SFT traces, and the GRPO and eval pools, as drawn
    expected["sft"] = count_by_source(accepted["sample_id"], names)
    for pool in ("sft", "grpo", "eval"):
        assert manifest[pool]["sources"] == dict(sorted(expected[pool].items())), pool
        assert {kk: v for kk, v in metrics["shard"].items() if kk.startswith(f"{pool}.source.")} == {
            f"{pool}.source.{s}": n for s, n in expected[pool].items()}
        keys_by_source: dict[str, int] = {}
        for shard in manifest[pool]["shards"]:
            tar = repo / "data/shards" / pool / shard["name"]
            assert hashlib.sha256(tar.read_bytes()).hexdigest() == shard["sha256"]
            with tarfile.open(tar) as members:
                keys = {name.split(".")[0] for name in members.getnames()}
                for member in members.getmembers():
                    if member.name.endswith(".json"):  # the source each sample's meta names
                        source = json.loads(members.extractfile(member).read())["source"]
                        assert source == source_of_key(member.name, names)
                        keys_by_source[source] = keys_by_source.get(source, 0) + 1
            assert len(keys) == shard["count"]
        assert keys_by_source == expected[pool], pool

    # training curves (DVCLive's files, written as the stages trained): one row per optimizer step
    sft_steps = math.ceil(len(accepted) * ci["sft.epochs"] / 1)
    assert len(pd.read_csv(repo / "metrics/live/sft/plots/metrics/loss.tsv", sep="\t")) == sft_steps
    assert len(pd.DataFrame(read_live(repo / "metrics/live/grpo"))) == ci["grpo.max_steps"]
    assert json.loads((repo / "metrics/live/sft/metrics.json").read_text())["step"] == sft_steps  # `dvc exp show`
    # from DVCLive's files; its pictures written outside the repo (a `dvc_plots/` folder there is no output)
    drawn_charts = json.loads(dvc(repo, "plots", "show", "--json", "-o", str(repo.parent / "dvc_plots")))["data"]
    for chart, series in {"sft_loss": "loss", "grpo_reward": "reward", "grpo_kl": "kl"}.items():
        values = drawn_charts[chart][0]["content"]["data"]["values"]
        assert len([v for v in values if series in v]) == (sft_steps if chart == "sft_loss" else ci["grpo.max_steps"])
    # per source: SFT's loss before / after on its samples; GRPO's reward per step of the source it drew
    for name, n in expected["sft"].items():
        assert metrics["sft"][f"source.{name}.samples"] == n
        assert metrics["sft"][f"source.{name}.loss_samples"] == min(n, 32)
        assert 0 < metrics["sft"][f"source.{name}.loss_before"] < 100
        assert 0 < metrics["sft"][f"source.{name}.loss_after"] < 100
    grpo_curve = pd.DataFrame(read_live(repo / "metrics/live/grpo"))
    drawn = grpo_curve[[c for c in grpo_curve.columns if c.startswith("source.")]]
    assert ci["grpo.batch_size"] == 1 and (drawn.notna().sum(axis=1) == 1).all()  # one prompt, one source a step
    assert (drawn.max(axis=1) - grpo_curve["reward"]).abs().max() < 1e-4  # that step's reward is its source's
    assert sum(v for kk, v in metrics["grpo"].items() if kk.endswith(".steps")) == ci["grpo.max_steps"]
    for folder in ("models/sft/merged", "models/grpo/merged"):
        assert (repo / folder / "model.safetensors").stat().st_size > 0
    # evaluation: every expression of the eval pool answered and scored
    assert len(pd.read_parquet(repo / "data/evaluate/scores.parquet")) == 3
    assert len(pd.read_parquet(repo / "data/evaluate/answers.parquet")) == 3
    assert metrics["eval"]["n_expressions"] == 3
    # and the ground-truth answers through the same segmenter: the ceiling beside the model's scores
    assert 0 <= metrics["eval"]["ceiling_JF_overall"] <= 100 and "ceiling_R_visa_overall" in metrics["eval"]
    # and the empty answers (no boxes: empty masks on every frame): what answering nothing scores
    assert 0 <= metrics["eval"]["empty_JF_overall"] <= 100 and "empty_R_visa_overall" in metrics["eval"]
    # and the SFT traces' constant answer, and the model on swapped queries
    assert 0 <= metrics["eval"]["constant_JF_overall"] <= 100 and metrics["eval"]["constant_kind"] in (0, 1)
    assert "swap_n_expressions" in metrics["eval"]
    # the benchmark table: every model of benchmarks.models, then the ground-truth answers' row (the ceiling), the
    # empty answers' row and the constant answer's
    for name in ci["benchmarks.names"]:
        rows = {key.partition(".")[0] for key in json.loads((repo / f"metrics/bench/{name}.json").read_text())}
        assert rows == {"base", "sft", "grpo", "ground_truth", "empty_answer", "constant_answer"}, name
    table = (repo / "reports/benchmarks.md").read_text()
    assert (table.index("| grpo |") < table.index("| ground_truth |") < table.index("| empty_answer |")
            < table.index("| constant_answer |"))


def test_nothing_left_to_redo(repo: Path) -> None:
    assert "Data and pipelines are up to date." in dvc(repo, "status")
    output = dvc(repo, "repro")
    assert "Running stage" not in output, output
    for stage in ("check", "synth", "sft", "grpo", "evaluate"):
        assert f"Stage '{stage}' didn't change, skipping" in output


def test_lineage_cli_reaches_raw_data(repo: Path) -> None:
    out = sh([sys.executable, "-m", "flows.cli", "lineage", "data/index/tracks.parquet"], repo)
    assert out.index("ingest") < out.index("synth")
    out = sh([sys.executable, "-m", "flows.cli", "lineage", "models/grpo"], repo)
    assert all(stage in out for stage in ("grpo", "sft", "shard", "synth"))
    assert all(f"source:{name}" in out for name in ("root", "revos", "mevis", "refytvos"))  # every training source


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("remote")


@pytest.fixture(scope="module")
def clone(repo: Path, remote: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Commit what the README says, push data and checkpoints, `git clone` + `dvc pull` elsewhere."""
    env = {**os.environ, "VRSFLOW_DVC_REMOTE": str(remote)}
    changed = {line[3:] for line in sh(["git", "status", "--porcelain", "--untracked-files=all"], repo).splitlines()}
    assert changed and all(path.startswith(COMMITTED) or path.endswith(".gitignore") for path in changed), changed
    sh(["git", "add", *COMMITTED, *[p for p in changed if p.endswith(".gitignore")]], repo)
    sh(["git", "commit", "-qm", "results"], repo)
    _run([sys.executable, "-m", "flows.cli", "remote"], repo, env)
    dvc(repo, "push")
    dest = tmp_path_factory.mktemp("clone") / "repo"
    sh(["git", "clone", "-q", str(repo), str(dest)], dest.parent)
    _run([sys.executable, "-m", "flows.cli", "remote"], dest, env)
    dvc(dest, "pull")
    return dest


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> str:
    proc = subprocess.run(args, cwd=cwd, env={**env_with_venv(), **env}, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_checkpoints_are_in_the_remote(repo: Path, remote: Path, clone: Path) -> None:
    outs = lock_outs(repo)
    for out in ("models/tiny", "models/sft", "models/grpo", "data/shards", "data/evaluate"):
        digest = outs[out]
        assert digest.endswith(".dir")
        assert (remote / "files" / "md5" / digest[:2] / digest[2:]).is_file(), out
    assert "in sync" in dvc(repo, "status", "--cloud")


def test_fresh_clone_is_up_to_date(repo: Path, clone: Path) -> None:
    assert "Data and pipelines are up to date." in dvc(clone, "status")
    output = dvc(clone, "repro")
    assert "Running stage" not in output, output
    for folder in ("data/shards", "models/sft", "models/grpo", "data/evaluate"):
        assert file_hashes(clone / folder) == file_hashes(repo / folder), folder
    assert (clone / "metrics/eval.json").read_text() == (repo / "metrics/eval.json").read_text()


@pytest.mark.slow  # two forced training reruns through dvc (about 70 s of a loaded 2-core run)
def test_training_is_reproducible(clone: Path) -> None:
    """Same seed, same thread count (sft.cpu_threads, grpo.cpu_threads): forced reruns give the same bytes. Fast
    twins in the default run: tests/stages/test_sft.py::test_same_seed_and_threads_give_an_identical_checkpoint
    (adapter, merged weights and curves byte for byte) and
    tests/stages/test_grpo.py::test_trl_same_seed_and_threads_give_the_same_weights (GRPO's, likewise)."""
    folders = ("models/sft", "models/grpo")
    before = {out: (weights(clone / out), code_version(clone / out), file_hashes(clone / out)) for out in folders}
    dvc(clone, "repro", "--force", "--single-item", "sft", timeout=900)
    dvc(clone, "repro", "--force", "--single-item", "grpo", timeout=900)
    for out in folders:
        assert len(before[out][0]) == 2 and weights(clone / out) == before[out][0], out  # adapter and merged
        # the published adapter names its base by absolute path (PEFT's AutoPeftModel loads it from anywhere):
        # this checkout's base, where the pulled one named the repo's — the one difference a rerun here makes
        config = json.loads((clone / out / "adapter" / "adapter_config.json").read_text())
        model_path = yaml.safe_load((clone / "params.yaml").read_text())["model"]["path"]
        base = model_path if out == "models/sft" else "models/sft/merged"  # model.path, grpo.model_path
        assert config["base_model_name_or_path"] == str((clone / base).resolve()), out
        # the whole folder (lineage, model card, trainer state too), for the same code: a checkout whose code
        # changed in between records another code version there, as it should
        if code_version(clone / out) == before[out][1]:
            assert {k: v for k, v in file_hashes(clone / out).items() if k != "adapter/adapter_config.json"} == \
                   {k: v for k, v in before[out][2].items() if k != "adapter/adapter_config.json"}, out


def weights(folder: Path) -> dict[str, str]:
    """sha256 of the checkpoint's weight files."""
    return {path: digest for path, digest in file_hashes(folder).items() if path.endswith(".safetensors")}


def code_version(folder: Path) -> dict:
    return json.loads((folder / "lineage.json").read_text())["code_version"]


@pytest.fixture(scope="module")
def serial(repo: Path, project_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second build from scratch up to the shards, with the serial runner."""
    dest = make_repo(project_root, tmp_path_factory.mktemp("serial") / "repo", profile="ci",
                     params_overrides={"runner.kind": "serial"})
    dvc(dest, "repro", "shard", timeout=900)
    return dest


DATA = ["data/raw/synth", "data/index", "data/sample", "data/keyframes", "data/cot/generations.parquet",
        "data/filter", "data/difficulty/scores.parquet", "data/shards"]


@pytest.mark.slow  # a second build up to the shards (about 60 s of a loaded 2-core run)
def test_serial_and_threads_runners_build_identical_data(repo: Path, serial: Path) -> None:
    """Fast twins in the default run: tests/stages/test_shard.py::
    test_threads_and_serial_give_identical_bytes_and_each_frame_is_decoded_once and
    tests/stages/test_keyframes.py::test_stage_is_seeded_and_deterministic_across_runners (the two stages that
    fan work out over the runner's pool), tests/stages/core/test_runner.py (the runners' own order)."""
    for path in DATA:
        a, b = repo / path, serial / path
        if a.is_file():
            assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest(), path
        else:
            assert file_hashes(a, skip_lineage=True) == file_hashes(b, skip_lineage=True), path


@pytest.mark.slow  # the serial build above, then shard again on a Dask cluster
def test_dask_runner_builds_identical_shards(repo: Path, serial: Path) -> None:
    """Fast twin in the default run: tests/stages/core/test_runner.py::test_dask_local_cluster_matches_serial (a
    Dask local cluster maps in the serial order, which is what makes the shards the same bytes)."""
    params = yaml.safe_load((serial / "params.yaml").read_text())
    params["runner"].update(kind="dask", workers=2)
    (serial / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    dvc(serial, "repro", "--force", "--single-item", "shard", timeout=600)
    assert file_hashes(serial / "data/shards", skip_lineage=True) == file_hashes(repo / "data/shards",
                                                                               skip_lineage=True)
    params["runner"].update(kind="serial")
    (serial / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


@pytest.mark.slow  # needs the serial build; an SFT run stopped and resumed through dvc (about 55 s loaded)
def test_sigterm_stops_a_stage_cleanly_and_the_rerun_resumes(serial: Path, started: datetime) -> None:
    """What `timeout`, a scheduler or Ctrl-C does: signal the process group. The stage ends within 5 s, its
    Prefect run is marked crashed, the checkpoints stay, and the rerun resumes from them. Fast twins in the
    default run: tests/stages/test_lifeline.py (a stage's watch sends SIGTERM first, then SIGKILL),
    tests/stages/test_launch.py::test_sigterm_to_the_stage_stops_every_worker (SIGTERM stops the stage's
    workers), tests/flows/test_killed_runs.py::test_the_next_stage_marks_a_killed_stages_run_crashed (the run
    marked crashed) and tests/stages/test_sft.py::test_resume_after_interruption_matches_an_uninterrupted_run (the
    rerun resumes from the checkpoints to the uninterrupted run's weights)."""
    params = yaml.safe_load((serial / "params.yaml").read_text())
    params["sft"].update(epochs=4, save_every_steps=2)  # long enough to be stopped mid-way
    (serial / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    dvc(serial, "repro", "tiny_models", timeout=600)
    checkpoints = serial / params["sft"]["checkpoint_dir"]
    log = serial / "sft-stopped.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dvc", "repro", "sft"], cwd=serial, env=env_with_venv(),
                                stdout=out, stderr=subprocess.STDOUT, process_group=0)
    try:
        deadline = time.monotonic() + 600
        while not list(checkpoints.glob("checkpoint-*")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, f"sft ended before its first checkpoint:\n{log.read_text()[-3000:]}"
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGTERM)
        sent = time.monotonic()
        while _group_alive(proc.pid) and time.monotonic() - sent < 30:  # dvc, the shell, the stage process
            time.sleep(0.05)
            proc.poll()
        stopped_in = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert stopped_in < 5.0, f"{stopped_in:.1f} s"
    assert ("dvc-sft", "CRASHED") in flow_runs_since(started)
    assert list(checkpoints.glob("checkpoint-*")), "the checkpoints a rerun resumes from are gone"
    output = dvc(serial, "repro", "sft", timeout=900)
    assert "resuming from" in output, output[-3000:]
    steps = pd.read_csv(serial / "metrics/live/sft/plots/metrics/loss.tsv", sep="\t")["step"].tolist()
    assert steps == list(range(1, len(steps) + 1)) and len(steps) == 4 * len(
        pd.read_parquet(serial / "data/filter/accepted.parquet"))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_experiment_reruns_exactly_downstream(repo: Path) -> None:
    output = dvc(repo, "exp", "run", "-S", "ingest.check_jpeg=decode", "ingest")
    assert "Stage 'synth' didn't change, skipping" in output
    assert "Running stage 'ingest'" in output
    shown = dvc(repo, "exp", "show", "--json")
    assert "check_jpeg" in shown
    diff = dvc(repo, "params", "diff", "--all")
    assert "ingest.check_jpeg" in diff
