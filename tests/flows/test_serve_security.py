"""The served pipeline is not a door: hostile run parameters are refused before DVC is called, a run changes
the experiment but never where secrets, data or requests go (the served-run policy), and `vrsflow serve`
refuses a Prefect API that strangers could use without credentials."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.flows.capture_server import capture_server
from tests.pipeline_repo import built_once, env_with_venv, make_repo, sh

AUTH = "vrsflow-admin:s3cret-for-tests"
FIXED = "fixed by the server, a run may not change it (edit params.yaml and serve again)"
OUTSIDE = ("(paths of a run stay inside the project; `vrsflow serve --allow-root DIR` allows a folder outside "
           "it)")


@pytest.fixture(scope="module")
def served_repo(tmp_path_factory: pytest.TempPathFactory, project_root: Path) -> Path:
    # scripts/mutation.sh: the repo's files are the same for every mutant (mutmut picks it at run time); no frozen
    # checkpoints: no run here reaches them, and `dvc exp run --temp` would recompress them (tests/pipeline_repo.py)
    return built_once("served-repo", tmp_path_factory.mktemp("hostile") / "repo",
                      lambda dest: make_repo(project_root, dest, frozen_checkpoints=False))


def _snapshot(repo: Path) -> tuple[bytes, str, str]:
    return ((repo / "params.yaml").read_bytes(), sh(["git", "status", "--porcelain", "--ignored"], repo),
            sh(["git", "for-each-ref", "refs/exps"], repo))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"targets": ["--run-all"]}, "target '--run-all' is not a stage of dvc.yaml"),
        ({"overrides": {"../../x": "1"}}, "'../../x': not a params key"),
        ({"overrides": {"data.root": "data/raw; touch owned.txt"}}, "data.root: refusing the character(s) ';'"),
        ({"overrides": {"teacher.model": "$(touch owned.txt)"}}, "refusing the character(s) '$'"),
        ({"overrides": {"sample.grpo_size": "abc"}}, "sample.grpo_size: expected an integer, got str 'abc'"),
        ({"experiment_name": "--force"}, "experiment name '--force'"),
    ],
)
def test_hostile_run_parameters_are_refused_before_dvc(
    prefect_api: str, served_repo: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict, message: str
) -> None:
    from flows import pipeline
    from flows.serve_request import SERVED_PROJECT_ENV

    calls: list = []
    monkeypatch.setattr(pipeline.dvc_cli, "run_dvc", lambda *a, **k: calls.append(a))
    monkeypatch.setenv(SERVED_PROJECT_ENV, str(served_repo))
    before = _snapshot(served_repo)
    state = pipeline.pipeline_flow(**kwargs, return_state=True)
    assert state.is_failed()
    assert state.message.startswith("refused: ") and message in state.message and "\n" not in state.message
    assert calls == []  # DVC never called
    assert _snapshot(served_repo) == before  # params.yaml bytes, git status (ignored files too), no experiment
    assert not list(served_repo.rglob("owned.txt"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # the served-run policy: every key below is well typed, and refused in one line naming it
        ({"teacher.backend": "openai", "teacher.base_url": "http://127.0.0.1:9/v1",
          "teacher.api_key_env": "PREFECT_API_AUTH_STRING"},
         "teacher.backend, teacher.base_url, teacher.api_key_env: fixed by the server, a run may not change them "
         "(edit params.yaml and serve again)"),
        ({"teacher.api_key_env": "VRSFLOW_OTHER_KEY"}, f"teacher.api_key_env: {FIXED}"),
        ({"remote.url": "s3://elsewhere/bucket"}, f"remote.url: {FIXED}"),
        ({"remote.url_env": "VRSFLOW_OTHER_REMOTE"}, f"remote.url_env: {FIXED}"),
        ({"runner.dask_address": "tcp://10.0.0.1:8786"}, f"runner.dask_address: {FIXED}"),
        ({"sft.processes": "64"}, f"sft.processes: {FIXED}"),
        # folders a stage removes that no DVC output guards: a run naming `data` would lose the data
        ({"sft.checkpoint_dir": "data"}, f"sft.checkpoint_dir: {FIXED}"),
        ({"grpo.checkpoint_dir": "data/raw"}, f"grpo.checkpoint_dir: {FIXED}"),
        ({"pretrain_sam2.checkpoint_dir": "data"}, f"pretrain_sam2.checkpoint_dir: {FIXED}"),
        ({"finetune_sam2.checkpoint_dir": "data"}, f"finetune_sam2.checkpoint_dir: {FIXED}"),
        ({"finetune_sam2.parallel": "64"}, f"finetune_sam2.parallel: {FIXED}"),
        ({"pretrain.checkpoint_dir": "data"}, f"pretrain.checkpoint_dir: {FIXED}"),
        ({"pretrain.loader_workers": "64"}, f"pretrain.loader_workers: {FIXED}"),
        ({"data.root": "/etc"}, f"data.root: '/etc' is outside the project {OUTSIDE}"),
        ({"model.path": "/root"}, f"model.path: '/root' is outside the project {OUTSIDE}"),
        ({"sam2.checkpoint": "models/../../../../etc/x.pt"},
         f"sam2.checkpoint: 'models/../../../../etc/x.pt' goes up with '..' {OUTSIDE}"),
        ({"benchmarks.roots": "{revos: /srv/revos}"},
         f"benchmarks.roots.revos: '/srv/revos' is outside the project {OUTSIDE}"),
        ({"data.sources": "[{name: a, root: data/a}, {name: b, root: /srv/b}]"},
         f"data.sources[1].root: '/srv/b' is outside the project {OUTSIDE}"),
    ],
)
def test_a_run_may_not_change_where_secrets_data_or_requests_go(
    served_repo: Path, capsys: pytest.CaptureFixture[str], overrides: dict, message: str
) -> None:
    """Each refused key in one line naming it and how to change it, from a served run's checks and from
    `vrsflow check --served` alike (the pipeline flow refuses what check_request refuses: see above and below)."""
    from flows.cli import main
    from flows.serve_request import RequestRefused, ServedPolicy, check_request

    with pytest.raises(RequestRefused) as err:
        check_request(served_repo, overrides, [], "x", ServedPolicy())
    assert str(err.value) == message
    args = [a for key, value in overrides.items() for a in ("-S", f"{key}={value}")]
    capsys.readouterr()
    assert main(["check", "--served", "--params", str(served_repo / "params.yaml"), *args]) == 2
    assert capsys.readouterr().err == f"error: {served_repo / 'params.yaml'}: {message}\n"
    # outside a served run (params.yaml, -S) only the env-var name rule applies
    assert main(["check", "--params", str(served_repo / "params.yaml"), *args]) == (
        2 if overrides.get("teacher.api_key_env") == "PREFECT_API_AUTH_STRING" else 0)


def test_checked_overrides_reach_dvc_as_typed(served_repo: Path) -> None:
    """The `-S` arguments built from checked overrides mean, to DVC's own parser, exactly the typed values."""
    from flows.serve_request import RequestRefused, check_request
    from stages.params import load_params

    overrides = {"sample.grpo_size": "32", "data.root": "raw data/ReVOS:v2", "cot.pools": "[sft, grpo]",
                 "grpo.learning_rate": "1e-5", "ingest.strict": "false", "teacher.model": "123"}
    request = check_request(served_repo, overrides, ["check"], "typed-1")
    assert request.set_args == ("sample.grpo_size=32", "data.root='raw data/ReVOS:v2'", "cot.pools=['sft','grpo']",
                                "grpo.learning_rate=1e-05", "ingest.strict=false", "teacher.model='123'")
    args = [a for item in request.set_args for a in ("-S", item)]
    sh([sys.executable, "-m", "dvc", "exp", "run", "--temp", "--name", "typed-1", *args, "check"], served_repo)
    [ref] = [r for r in sh(["git", "for-each-ref", "--format=%(refname)", "refs/exps"], served_repo).split()
             if r.endswith("/typed-1")]
    (served_repo / "exp-params.yaml").write_text(sh(["git", "show", f"{ref}:params.yaml"], served_repo))
    try:
        params = load_params(served_repo / "exp-params.yaml")
    finally:
        (served_repo / "exp-params.yaml").unlink()
    assert (params.sample.grpo_size, params.data.root, params.cot.pools) == (32, "raw data/ReVOS:v2", ("sft", "grpo"))
    assert (params.grpo.learning_rate, params.ingest.strict, params.teacher.model) == (1e-5, False, "123")
    for targets, name, message in [(["sampel"], "x", "did you mean 'sample'?"), (["-f"], "x", "'-f' is not a stage"),
                                   ([], "../x", "experiment name '../x'"), ([], "-n", "experiment name '-n'"),
                                   ([], "exp..1", "experiment name 'exp..1'")]:
        with pytest.raises(RequestRefused, match=message):
            check_request(served_repo, {}, targets, name)


def test_run_cannot_name_another_folder(prefect_api: str, served_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows import pipeline

    with pytest.raises(TypeError, match="project_dir"):
        pipeline.pipeline_flow(project_dir=str(served_repo))
    assert "project_dir" not in pipeline.pipeline_flow.parameters.properties
    monkeypatch.delenv("VRSFLOW_SERVED_PROJECT", raising=False)
    state = pipeline.pipeline_flow(return_state=True)  # not started by `vrsflow serve`: no project at all
    assert state.is_failed() and "no served project" in state.message


def test_serve_refuses_non_loopback_api_without_auth(served_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    from flows.cli import main
    from flows.serve_auth import ServeRefused, check_api, is_loopback

    assert is_loopback("http://127.0.0.1:4200/api") and is_loopback("http://localhost:4200/api")
    assert is_loopback("http://[::1]:4200/api") and not is_loopback("http://0.0.0.0:4200/api")
    assert not is_loopback("http://prefect.example.org/api")
    with pytest.raises(ServeRefused, match="no Prefect API to serve on"):
        check_api(None, None, None)  # a temporary API of the serving process: no UI, nobody can start runs
    check_api("http://127.0.0.1:1/api", None, None)
    with pytest.raises(ServeRefused, match="without Prefect basic auth"):
        check_api("http://10.255.255.1:4200/api", None, None)
    with temporary_settings(updates={PREFECT_API_URL: "http://10.255.255.1:4200/api", PREFECT_API_AUTH_STRING: None}):
        assert main(["serve", "--project", str(served_repo), "--name", "never"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: refusing to serve on http://10.255.255.1:4200/api") and "\n" not in err
    assert "PREFECT_SERVER_API_AUTH_STRING" in err


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `prefect server start` with basic auth (server.api.auth_string) on a free loopback port."""
    home = tmp_path_factory.mktemp("prefect-auth-home")
    port = _free_port()
    env = env_with_venv()
    for key in [k for k in env if k.startswith("PREFECT_")]:
        env.pop(key)
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_API_AUTH_STRING=AUTH, PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_UI_ENABLED="false")
    log = open(home / "server.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port",
                             str(port), "--no-services"], env=env, stdout=log, stderr=subprocess.STDOUT)
    api = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (home / "server.log").read_text()[-3000:]
            time.sleep(0.5)
        yield api
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_basic_auth_server_refuses_anonymous_runs(auth_server: str, prefect_api: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    from flows.pipeline import pipeline_flow
    from flows.serve_auth import accepts_anonymous, check_api

    assert accepts_anonymous(prefect_api)  # the test harness server: no auth configured
    assert not accepts_anonymous(auth_server)
    check_api(auth_server, AUTH, None)
    with temporary_settings(updates={PREFECT_API_URL: auth_server, PREFECT_API_AUTH_STRING: AUTH}):
        deployment_id = pipeline_flow.to_deployment(name="auth-test").apply()
        with get_client(sync_client=True) as client:
            run = client.create_flow_run_from_deployment(deployment_id, parameters={"targets": ["check"]})
            assert client.read_flow_run(run.id).state.is_scheduled()  # authenticated: the run is started
    anonymous = httpx.post(f"{auth_server}/deployments/{deployment_id}/create_flow_run", json={}, timeout=10)
    assert anonymous.status_code == 401
    wrong = base64.b64encode(b"vrsflow-admin:guess").decode()
    forged = httpx.post(f"{auth_server}/deployments/{deployment_id}/create_flow_run", json={}, timeout=10,
                        headers={"Authorization": f"Basic {wrong}"})
    assert forged.status_code == 401
    right = base64.b64encode(AUTH.encode()).decode()
    listed = httpx.post(f"{auth_server}/flow_runs/filter", json={}, timeout=10,
                        headers={"Authorization": f"Basic {right}"})
    assert listed.status_code == 200 and len(listed.json()) == 1  # the anonymous and forged requests made no run
    assert os.environ.get("PREFECT_API_URL") == prefect_api  # the session server is untouched


@pytest.mark.parametrize("key_env", ["AWS_SECRET_ACCESS_KEY", ""])
def test_a_refused_run_sends_nothing(prefect_api: str, served_repo: Path, monkeypatch: pytest.MonkeyPatch,
                                     key_env: str) -> None:
    """The issue's override, run for real (DVC is not stubbed): without the policy the cot stage would send
    `Authorization: Bearer <secret>` to the capture server. With it the run is refused and nothing arrives —
    neither with a foreign variable's name nor with the checked-in key name sent to a foreign host."""
    from flows import pipeline
    from flows.serve_request import SERVED_PROJECT_ENV

    monkeypatch.setenv(SERVED_PROJECT_ENV, str(served_repo))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "outside-secret")
    monkeypatch.setenv("VRSFLOW_TEACHER_API_KEY", "teacher-secret")
    before = _snapshot(served_repo)
    with capture_server() as (url, seen):
        overrides = {"teacher.backend": "openai", "teacher.base_url": url, "teacher.max_retries": "0"}
        if key_env:
            overrides["teacher.api_key_env"] = key_env
        state = pipeline.pipeline_flow(overrides=overrides, targets=["cot"], experiment_name=f"leak-{len(key_env)}",
                                       push=False, return_state=True)
        assert state.is_failed() and state.message.startswith("refused: teacher.backend, teacher.base_url")
        assert "\n" not in state.message
        time.sleep(0.5)  # anything in flight would have arrived
        assert seen == []  # no request, no header
    assert _snapshot(served_repo) == before  # nothing executed: no experiment, nothing written


def test_every_server_side_key_is_refused(served_repo: Path) -> None:
    """Whatever the value: every field marked Server / SecretEnv (all *_env, base_url, url, …) is refused from a
    run in one line naming it."""
    from flows.serve_request import ServedPolicy, check_overrides
    from stages.core.typed_config import leaf_fields, served_side
    from stages.params import Params, ParamsError

    sides = {key: served_side(tp) for key, tp in leaf_fields(Params)}
    server = [key for key, side in sides.items() if side is not None and side.side == "server"]
    assert {"teacher.api_key_env", "remote.url_env", "teacher.base_url", "remote.url"} <= set(server)
    for key in server:
        with pytest.raises(ParamsError) as err:
            check_overrides(served_repo / "params.yaml", {key: "x"}, ServedPolicy())
        assert str(err.value) == f"{key}: {FIXED}"
    assert check_overrides(served_repo / "params.yaml", {"seed": "3"}, ServedPolicy()) == {"seed": 3}


def test_paths_of_a_run_stay_in_the_project(tmp_path: Path) -> None:
    from flows.serve_request import path_problem

    project, outside, allowed = tmp_path / "project", tmp_path / "outside", tmp_path / "allowed"
    for folder in (project / "data", outside, allowed / "revos"):
        folder.mkdir(parents=True)
    (project / "data" / "out").symlink_to(outside)  # a symlink leading out of the project
    (project / "data" / "in").symlink_to(project / "data")  # one that stays inside
    (allowed / "escape").symlink_to(outside)  # one leading out of an allowed root
    for value in ("", "data/raw/synth", "data/in/x", "models/new/qwen", "~x/y"):
        assert path_problem(value, project) is None, value
    assert path_problem(str(allowed / "revos"), project, [str(allowed)]) is None
    refused = {
        "data/out/x": "leads outside the project through a symlink",
        "data/../data": "goes up with '..'",
        "../outside": "goes up with '..'",
        str(outside): "is outside the project",
        str(project / "data"): "is an absolute path into the project: give it relative to the project",
        str(allowed / "revos"): "is outside the project",  # no root allowed
    }
    for value, problem in refused.items():
        assert (path_problem(value, project) or "").startswith(problem), value
    assert path_problem(str(allowed / "escape" / "x"), project, [str(allowed)]).startswith("is outside the project")
    assert path_problem(str(allowed / ".." / "outside"), project, [str(allowed)]).startswith("goes up with '..'")


def test_server_values_are_fixed_when_serving_starts(tmp_path: Path, project_root: Path) -> None:
    """A run is refused when params.yaml's server-side values changed after `vrsflow serve` started, and
    `--allow-root` widens the paths a run may name (and nothing else)."""
    from flows.serve_request import SERVED_POLICY_ENV, ServedPolicy, check_overrides, serving_policy
    from stages.params import ParamsError

    project = tmp_path / "project"
    project.mkdir()
    params = project / "params.yaml"
    params.write_text((project_root / "params.yaml").read_text())
    data = tmp_path / "datasets"
    (data / "ReVOS").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="--allow-root .*: no such folder"):
        serving_policy(project, [tmp_path / "missing"])
    policy = serving_policy(project, [data])
    assert policy.server_values is not None and policy.server_values["teacher.base_url"].startswith("https://")
    assert ServedPolicy.from_env() == ServedPolicy()  # not served: project-only paths, nothing compared
    os.environ[SERVED_POLICY_ENV] = policy.to_env()
    try:
        assert ServedPolicy.from_env() == ServedPolicy(policy.allowed_roots, policy.server_values)
    finally:
        del os.environ[SERVED_POLICY_ENV]
    assert check_overrides(params, {"data.root": str(data / "ReVOS"), "sample.grpo_size": "8"}, policy) == {
        "data.root": str(data / "ReVOS"), "sample.grpo_size": 8}
    with pytest.raises(ParamsError, match=r"^data.root: '/etc' is outside the project"):
        check_overrides(params, {"data.root": "/etc"}, policy)
    with pytest.raises(ParamsError, match=r"^remote.url: fixed by the server"):  # roots widen paths only
        check_overrides(params, {"remote.url": str(data)}, policy)
    params.write_text(params.read_text().replace("base_url: https://", "base_url: http://127.0.0.1:9/x"))
    with pytest.raises(ParamsError) as err:
        check_overrides(params, {}, policy)
    assert str(err.value).startswith(f"{params}: teacher.base_url changed since `vrsflow serve` started ")
    assert str(err.value).endswith(": serve again to use it")
