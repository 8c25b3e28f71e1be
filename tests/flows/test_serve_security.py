"""The served pipeline is not a door: hostile run parameters are refused before DVC is called, and
`vrsflow serve` refuses a Prefect API that strangers could use without credentials."""

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

from tests.pipeline_repo import env_with_venv, make_repo, sh

AUTH = "vrsflow-admin:s3cret-for-tests"


@pytest.fixture(scope="module")
def served_repo(tmp_path_factory: pytest.TempPathFactory, project_root: Path) -> Path:
    return make_repo(project_root, tmp_path_factory.mktemp("hostile") / "repo")


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


def test_checked_overrides_reach_dvc_as_typed(served_repo: Path) -> None:
    """The `-S` arguments built from checked overrides mean, to DVC's own parser, exactly the typed values."""
    from flows.serve_request import RequestRefused, check_request
    from stages.core.params import load_params

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
                                   ([], "../x", "experiment name '../x'"), ([], "-n", "experiment name '-n'")]:
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
