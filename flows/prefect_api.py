"""One Prefect API for a whole `dvc repro`, found or started by the first stage that needs one.

Every stage process (`vrsflow stage NAME`, what dvc.yaml calls) and `vrsflow repro` enter `prefect_api()`:

- `PREFECT_API_URL` set (environment or the active Prefect profile): that server is used, nothing started.
- otherwise the local server recorded in `$PREFECT_HOME/vrsflow-api.json` is reused when it answers, or one is
  started (under a file lock, so concurrent stages start one server, not two).

Each process holds a *lease* (a file named by its pid) while it runs. The server runs under a small keeper
process (`python -m flows.prefect_api keep`) in its own session, so a SIGTERM or Ctrl-C sent to the
pipeline's process group does not reach it: an interrupted stage can still record its crashed run. The keeper
stops the server once no live process has held a lease for `VRSFLOW_PREFECT_LINGER_S` seconds (default 30),
which spans the gaps between stages of one `dvc repro` (DVC hashing outputs), and lets the next repro reuse it.
`VRSFLOW_SHARED_PREFECT_API=0` turns this off (Prefect's own temporary server in each stage process, as before;
bench/bench_orchestration.py compares the two).

Without this, Prefect starts a temporary server in every stage process (≈5 s each, ≈12 s the first time).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from stages.core import lifeline

RUNS_DIR = "vrsflow-runs"  # one record per running stage flow run: its id, process and API (mark_killed_runs)
STATE_FILE = "vrsflow-api.json"
LOCK_FILE = "vrsflow-api.lock"
LEASES_DIR = "vrsflow-api-leases"
LOG_FILE = "vrsflow-api.log"
LINGER_ENV = "VRSFLOW_PREFECT_LINGER_S"
WARM_ENV = "VRSFLOW_WARM_STAGES"  # "0": `vrsflow repro` runs each stage in a fresh process (no fork server)
REPRO_PID_ENV = "VRSFLOW_REPRO_PID"  # set for dvc by `vrsflow repro`: the process its stages live no longer than
SHARED_ENV = "VRSFLOW_SHARED_PREFECT_API"  # "0": no shared server (Prefect starts one per stage process)
DEFAULT_LINGER_S = 30.0
STARTUP_TIMEOUT_S = 90.0


def _healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as response:  # noqa: S310 (local URL)
            return response.status == 200
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    home.mkdir(parents=True, exist_ok=True)
    with open(home / LOCK_FILE, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_state(home: Path) -> dict | None:
    try:
        return json.loads((home / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None


def _live_leases(home: Path) -> list[int]:
    live = []
    leases = home / LEASES_DIR
    for lease in leases.glob("*") if leases.is_dir() else []:
        pid = int(lease.name) if lease.name.isdigit() else -1
        if pid > 0 and lifeline.alive(pid):
            live.append(pid)
        else:
            lease.unlink(missing_ok=True)  # a process that died without releasing (SIGKILL)
    return live


def _start_keeper(home: Path, linger_s: float) -> str:
    """Start the keeper (and through it the server) in a new session; wait until the API answers."""
    import prefect

    log = open(home / LOG_FILE, "ab")  # noqa: SIM115 (handed to the child)
    # the keeper gets the server's environment and Prefect's location from here (where prefect is imported
    # already), so that it starts the server without importing prefect itself (≈1 s on the first stage's path)
    keeper = subprocess.Popen(
        [sys.executable, "-m", "flows.prefect_api", "keep", "--home", str(home), "--linger", str(linger_s),
         "--app-dir", str(prefect.__module_path__.parent)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=_server_env(),
        cwd=str(Path(__file__).resolve().parents[1]),
    )
    log.close()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        state = _read_state(home)
        if state and state.get("keeper_pid") == keeper.pid and _healthy(state["url"], timeout=1.0):
            return state["url"]
        if keeper.poll() is not None:
            break
        time.sleep(0.1)
    keeper.kill()
    tail = (home / LOG_FILE).read_text(errors="replace")[-2000:]
    raise RuntimeError(f"the local Prefect server did not start within {STARTUP_TIMEOUT_S:.0f} s; "
                       f"log {home / LOG_FILE}:\n{tail}")


def _configured_api() -> tuple[str | None, Path]:
    """PREFECT_API_URL from the environment or the active Prefect profile, and PREFECT_HOME."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    return settings.api.url, Path(settings.home).expanduser()


def _linger_s() -> float:
    raw = os.environ.get(LINGER_ENV, "")
    try:
        return float(raw) if raw else DEFAULT_LINGER_S
    except ValueError:
        raise SystemExit(f"{LINGER_ENV}: expected seconds, got {raw!r}") from None


@contextlib.contextmanager
def prefect_api() -> Iterator[str]:
    """Run the body against one Prefect API shared by the whole pipeline run; yield its URL.

    Sets PREFECT_API_URL for the body (Prefect settings and the environment, so child processes share it).
    """
    url, home = _configured_api()
    if url or os.environ.get(SHARED_ENV, "1") == "0":  # 0: Prefect's own temporary server in this process
        if url:
            mark_killed_runs(home, url)
        yield url or ""
        return
    lease = home / LEASES_DIR / str(os.getpid())
    with _locked(home):
        state = _read_state(home)
        if state and lifeline.alive(state.get("keeper_pid", -1)) and _healthy(state["url"]):
            url = state["url"]
        else:
            url = _start_keeper(home, _linger_s())
        lease.parent.mkdir(parents=True, exist_ok=True)
        lease.write_text("")
    from prefect.settings import PREFECT_API_URL, temporary_settings

    previous = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = url
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            mark_killed_runs(home, EMBEDDED)  # at the latest now, runs of killed stages show as Crashed
            yield url
    finally:
        lease.unlink(missing_ok=True)
        if previous is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = previous


# -- runs of killed stages ----------------------------------------------------------------------------------

EMBEDDED = "embedded"  # the API a run record names when it ran on the local server (its port changes per start)


def _api_name(url: str) -> str:
    """What a run record calls the API `url`: EMBEDDED for the local server this module started, else the URL."""
    try:
        home = Path(get_prefect_home())
    except Exception:  # noqa: BLE001 (no Prefect settings: a plain URL)
        return url
    state = _read_state(home)
    return EMBEDDED if state and state.get("url") == url else url


def api_unreachable(err: BaseException) -> str | None:
    """One line for an error that is the Prefect API not answering (after Prefect's own client retries,
    `PREFECT_CLIENT_MAX_RETRIES`), naming the API; None for any other error."""
    import httpx

    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, httpx.TransportError):
            try:
                url = str(seen.request.url)
            except RuntimeError:  # no request attached
                url = os.environ.get("PREFECT_API_URL", "the Prefect API")
            retries = os.environ.get("PREFECT_CLIENT_MAX_RETRIES", "5")
            return (f"the Prefect API did not answer {url} ({type(seen).__name__}: {seen or 'no detail'}), "
                    f"retried up to {retries} times (PREFECT_CLIENT_MAX_RETRIES); is the server up?")
        seen = seen.__cause__ or seen.__context__
    return None


def get_prefect_home() -> str:
    from prefect.settings import get_current_settings

    return str(Path(get_current_settings().home).expanduser())


@contextlib.contextmanager
def run_record(flow_run_id: str | None) -> Iterator[None]:
    """Record, for the body's duration, that flow run `flow_run_id` is run by this process (pid and start time)
    against the current API; a later stage finds the record of a process that is gone and marks the run crashed."""
    import psutil

    url = os.environ.get("PREFECT_API_URL", "")
    if not url or not flow_run_id:  # Prefect's temporary per-process server: gone with the process, nothing to mark
        yield
        return
    record = Path(get_prefect_home()) / RUNS_DIR / f"{flow_run_id}.json"
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"flow_run_id": flow_run_id, "pid": os.getpid(), "api": _api_name(url),
                                      "started": psutil.Process().create_time()}))
    except OSError:
        pass
    try:
        yield
    finally:
        record.unlink(missing_ok=True)


def _process_gone(pid: int, started: float) -> bool:
    import psutil

    try:
        return abs(psutil.Process(pid).create_time() - started) > 1.0  # the pid was reused by another process
    except psutil.NoSuchProcess:
        return True


def mark_killed_runs(home: Path, api: str) -> list[str]:
    """Set Crashed on the flow runs (and their running task runs) whose recorded process is gone — a stage
    killed with SIGKILL could not report its end; remove killed stages' job folders. Returns the runs marked.

    `api` is the API now in use (EMBEDDED or a URL): only its runs are looked at. Never fails the caller: a
    run that cannot be marked now keeps its record for the next stage.
    """
    from stages.core.job_folders import remove_leftover_job_folders

    remove_leftover_job_folders()
    records = []
    for path in sorted((home / RUNS_DIR).glob("*.json")) if (home / RUNS_DIR).is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("api") == api and _process_gone(int(record.get("pid", 0)), float(record.get("started", 0))):
            records.append((path, record))
    if not records:
        return []
    marked = []
    try:
        from prefect import get_client
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
        from prefect.states import Crashed

        with get_client(sync_client=True) as client:
            for path, record in records:
                run_id = record["flow_run_id"]
                message = f"the stage process (pid {record['pid']}) was killed; marked by a later stage"
                run = client.read_flow_run(run_id)
                if run.state is not None and not run.state.is_final():
                    only_this = FlowRunFilter(id=FlowRunFilterId(any_=[run.id]))
                    for task_run in client.read_task_runs(flow_run_filter=only_this):
                        if task_run.state is not None and not task_run.state.is_final():
                            client.set_task_run_state(task_run.id, Crashed(message=message), force=True)
                    client.set_flow_run_state(run_id, Crashed(message=message), force=True)
                    marked.append(run_id)
                path.unlink(missing_ok=True)
    except Exception as err:  # noqa: BLE001 (the stage must run whether or not old runs can be marked now)
        sys.stderr.write(f"vrsflow: could not mark the runs of killed stages crashed yet: {err}\n")
    if marked:
        sys.stderr.write(f"vrsflow: marked {len(marked)} run(s) of killed stages Crashed\n")
    return marked


@contextlib.contextmanager
def _forkserver(warm: bool) -> Iterator[dict[str, str]]:
    """Extra environment for dvc: with `warm`, a fork server (flows/forkserver.py) runs the stages."""
    if not warm:
        yield {}
        return
    import tempfile

    from flows.forkserver import ENV
    from stages.core.job_folders import JOB_PREFIX

    # named by this pid: when a kill leaves it behind, the next stage removes it (remove_leftover_job_folders)
    with tempfile.TemporaryDirectory(prefix=f"{JOB_PREFIX}forkserver-{os.getpid()}-") as folder:
        path = str(Path(folder) / "stages.sock")
        # dies with this process, whatever kills it (its stage children die with it: flows/forkserver.py)
        server = lifeline.popen([sys.executable, "-m", "flows.forkserver", path, "flows.cli:main"],
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            yield {ENV: path}
        finally:  # it holds nothing to clean up (its children are stages, stopped through their commands)
            server.kill()
            server.wait()


@contextlib.contextmanager
def _api_in_background() -> Iterator[None]:
    """Hold a `prefect_api()` lease in a thread for the body's duration; the server starts beside the body."""
    import threading

    done = threading.Event()
    failure: list[BaseException] = []

    def hold() -> None:
        try:
            with prefect_api() as url:
                sys.stderr.write(f"vrsflow repro: Prefect API {url or '(per stage)'}\n")
                done.wait()
        except BaseException as exc:  # noqa: BLE001 (reported by the body's end; the stages report their own)
            failure.append(exc)

    thread = threading.Thread(target=hold, name="vrsflow-prefect-api", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)
        if failure:
            sys.stderr.write(f"vrsflow repro: the shared Prefect API did not start: {failure[0]}\n")


def repro(dvc_args: list[str], grace_s: float = 10.0, warm: bool | None = None) -> int:
    """`dvc repro DVC_ARGS…` with one Prefect API for all its stages; return dvc's exit code.

    With `warm`, the stages run as children of one process that has imported the stage code once
    (flows/forkserver.py); a stage that starts before it is ready runs in its own process. `warm` defaults
    to $VRSFLOW_WARM_STAGES != "0".

    dvc runs in its own process group; a SIGTERM or SIGINT (Ctrl-C) to this process is passed to that group
    (dvc and the running stage, whose flow run is then marked crashed). Either way this waits up to `grace_s`
    seconds for dvc to finish before returning.
    """
    if warm is None:
        warm = os.environ.get(WARM_ENV, "1") != "0"
    # the fork server, the Prefect API and dvc all start at once: dvc's start-up, the `check` stage and the
    # fork server's first imports overlap the server's start (≈12 s with a new database); the first stage
    # that needs the API waits for it on the lock that `prefect_api()` holds while it starts the server
    with _forkserver(warm) as extra_env, _api_in_background():
        # dvc dies with this process (parent-death signal), and a stage dvc runs in a process of its own watches
        # this one (REPRO_PID_ENV, flows/cli.py): a `kill -9` of `vrsflow repro` leaves no stage running
        proc = lifeline.popen([sys.executable, "-m", "dvc", "repro", *dvc_args], process_group=0,
                              env={**os.environ, **extra_env, REPRO_PID_ENV: str(os.getpid())})

        def forward(signum: int, frame: object) -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signum)

        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            code = proc.wait()
            return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell reports it
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if proc.poll() is None:
                try:
                    proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


# -- the keeper process -------------------------------------------------------------------------------------


def _server_command(port: int, app_dir: str) -> list[str]:
    # the same command Prefect's own temporary server runs (prefect.server.api.server.SubprocessASGIServer)
    return [sys.executable, "-m", "uvicorn", "--app-dir", app_dir, "--factory",
            "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "error", "--lifespan", "on"]


def _server_env() -> dict[str, str]:
    from prefect.settings import get_current_settings

    return {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
            **get_current_settings().to_environment_variables(exclude_unset=True)}


def keep(home: Path, linger_s: float, app_dir: str) -> int:
    """Run the server until no lease has been live for `linger_s` seconds (or SIGTERM); return its exit code.

    The server runs in this process's environment (`_server_env()`, set by `_start_keeper`); `app_dir` is
    where the prefect package lives.
    """
    stopping = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the pipeline, not to its server
    server = None
    for _ in range(3):  # a port taken between choosing and binding: try another
        port = _free_port()
        url = f"http://127.0.0.1:{port}/api"
        server = subprocess.Popen(_server_command(port, app_dir), stdin=subprocess.DEVNULL)
        while server.poll() is None and not _healthy(url, timeout=1.0) and not stopping:
            time.sleep(0.1)
        if server.poll() is None:
            break
    if server is None or server.poll() is not None or stopping:
        if server is not None and server.poll() is None:
            server.terminate()
        return 1
    (home / STATE_FILE).write_text(json.dumps({"url": url, "keeper_pid": os.getpid(), "server_pid": server.pid}))
    idle_since = time.monotonic()
    while not stopping and server.poll() is None:
        time.sleep(0.5)
        if _live_leases(home):
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since >= linger_s:
            with _locked(home):  # no client can take a lease while we decide
                if not _live_leases(home):
                    state = _read_state(home)
                    if state and state.get("keeper_pid") == os.getpid():
                        (home / STATE_FILE).unlink(missing_ok=True)
                    break
            idle_since = time.monotonic()
    with _locked(home):
        state = _read_state(home)
        if state and state.get("keeper_pid") == os.getpid():
            (home / STATE_FILE).unlink(missing_ok=True)
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
    return 0


def init_database() -> str:
    """Create the local Prefect database when it does not exist yet; return what was done, in words.

    A server on a new database first runs Prefect's ~100 migrations (≈8 s on 2 cores, most of the first
    server start); scripts/setup.sh does that once at install time, so the first `vrsflow repro` does not
    wait for it. A remote API (PREFECT_API_URL) or a non-SQLite database is left alone.
    """
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url:
        return f"PREFECT_API_URL is set ({settings.api.url}): no local database"
    url = settings.server.database.connection_url.get_secret_value() if settings.server.database.connection_url \
        else ""
    if not url.startswith("sqlite"):
        return "the local Prefect database is not SQLite: left alone"
    path = Path(url.split(":///", 1)[-1])
    if path.is_file() and path.stat().st_size > 0:
        return f"the local Prefect database exists ({path})"
    subprocess.run([sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"], check=True,
                   stdout=subprocess.DEVNULL)
    return f"created the local Prefect database ({path})"


ZOMBIE_AUTOMATION = "vrsflow: crash zombie flow runs"


def zombie_automation(within_s: int = 90):
    """Prefect's "detect zombie flows" automation: a flow run that sent a heartbeat and then, within `within_s`
    seconds, neither another heartbeat nor a final state is set Crashed (its process died unannounced)."""
    from datetime import timedelta

    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture

    final = {f"prefect.flow-run.{name}" for name in ("Completed", "Failed", "Cancelled", "Crashed")}
    return Automation(
        name=ZOMBIE_AUTOMATION,
        trigger=EventTrigger(after={"prefect.flow-run.heartbeat"}, expect={"prefect.flow-run.heartbeat", *final},
                             match={"prefect.resource.id": ["prefect.flow-run.*"]}, for_each={"prefect.resource.id"},
                             posture=Posture.Proactive, threshold=1, within=timedelta(seconds=within_s)),
        actions=[ChangeFlowRunState(state=StateType.CRASHED,
                                    message=f"no heartbeat for {within_s} s: the flow run's process died")])


def ensure_zombie_automation() -> str:
    """Create the zombie-run automation on the configured API unless it exists; say what was done."""
    from prefect.automations import Automation

    try:
        existing = Automation.read(name=ZOMBIE_AUTOMATION)
    except ValueError:
        existing = None
    if existing:
        return f"automation '{ZOMBIE_AUTOMATION}' exists"
    zombie_automation().create()
    return f"created automation '{ZOMBIE_AUTOMATION}' (set PREFECT_FLOWS_HEARTBEAT_FREQUENCY for the stages)"


def main(argv: list[str] | None = None) -> int:
    """`python -m flows.prefect_api keep --home DIR --linger S` (started by `prefect_api()`);
    `python -m flows.prefect_api init-db` (scripts/setup.sh); `… zombie-automation` (a served server, once)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m flows.prefect_api")
    sub = parser.add_subparsers(dest="command", required=True)
    keeper = sub.add_parser("keep", help="run the shared local Prefect server until it has been idle")
    keeper.add_argument("--home", required=True)
    keeper.add_argument("--linger", type=float, default=DEFAULT_LINGER_S)
    keeper.add_argument("--app-dir", required=True, help="the folder holding the prefect package")
    sub.add_parser("init-db", help="create the local Prefect database if it does not exist (install time)")
    sub.add_parser("zombie-automation", help="create Prefect's zombie-run automation on PREFECT_API_URL's server")
    args = parser.parse_args(argv)
    if args.command == "init-db":
        print(init_database())
        return 0
    if args.command == "zombie-automation":
        print(ensure_zombie_automation())
        return 0
    return keep(Path(args.home), args.linger, args.app_dir)


if __name__ == "__main__":
    sys.exit(main())
