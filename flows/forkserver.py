"""A warm process for the stages of one `vrsflow repro`: imports once, forks a child per stage.

Most of a small stage's wall time is not its work but starting Python and importing prefect, pandas,
torch and transformers again (2–8 s per stage on 2 cores). `vrsflow repro` starts this server, which imports
every stage flow once, and tells the stage commands where it listens (`VRSFLOW_FORKSERVER`, a Unix socket).
`vrsflow stage NAME` then sends its arguments, working directory, environment and stdin/stdout/stderr to the
server, which forks a child that runs the stage exactly as the command would have (same cwd, environment and
file descriptors). The command waits for the child's exit status and exits with it; a SIGTERM or Ctrl-C it
receives is passed to the child, so clean stops behave as without the server. When the server is not there
(a plain `dvc repro`), `vrsflow stage` runs the stage in its own process as before.

Killed the hard way, nothing is left either: a child dies with the server (parent-death signal), and stops when
its command dies — it watches the command's connection, which only closes when the command has ended
(`stages.core.lifeline.stop_when_closed`: SIGTERM, so the flow run is marked crashed, then SIGKILL). The server
itself dies with `vrsflow repro` (started through the lifeline).

The server stays single-threaded (forking a multi-threaded process is unsafe): one select loop accepts
requests, forks, and reaps children, answering each request with its child's exit status.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
from collections.abc import Callable

from stages.core import lifeline

ENV = "VRSFLOW_FORKSERVER"  # path of the server's Unix socket; unset = no server
FORKED_ENV = "VRSFLOW_FORKED"  # "1" in a stage forked by the server
_MAX_REQUEST = 1 << 20


def _send(sock: socket.socket, message: dict) -> None:
    data = json.dumps(message).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def _receive(sock: socket.socket) -> dict | None:
    header = _read_exactly(sock, 4)
    if header is None:
        return None
    (size,) = struct.unpack("!I", header)
    body = _read_exactly(sock, size) if size <= _MAX_REQUEST else None
    return json.loads(body) if body is not None else None


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# -- client: `vrsflow stage` ---------------------------------------------------------------------------------


def run_in_server(argv: list[str]) -> int | None:
    """Run `vrsflow ARGV` in a child of the server named by $VRSFLOW_FORKSERVER; its exit code, or None when
    there is no server to ask (the caller then runs the command itself)."""
    path = os.environ.get(ENV)
    if not path:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
        socket.send_fds(sock, [struct.pack("!I", len(request)) + request], [0, 1, 2])
        started = _receive(sock)
    except OSError:
        sock.close()
        return None
    if not started or "pid" not in started:
        sock.close()
        return None
    child = int(started["pid"])

    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        while True:
            try:
                done = _receive(sock)
                break
            except InterruptedError:
                continue
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    if done is None:  # the server went away: the child's fate is unknown
        return 1
    if done.get("signal"):
        signal.signal(done["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), done["signal"])  # die the way the child died (128 + N for the shell)
    return int(done.get("code", 1))


# -- server ---------------------------------------------------------------------------------------------------


# imported one at a time while the server waits for requests, in the order the pipeline needs them: the
# Prefect / pandas layer every stage uses, then the data stages, then torch and the model stages (a stage
# requested before its modules are in just imports the rest itself, as a fresh process would)
LIGHT_FIRST = [
    "flows.common", "pyarrow", "schemas",
    # what every stage otherwise imports on its first flow run and table check (measured: ≈0.8 s a stage)
    "flows.prefect_api", "flows.serve_link", "prefect.flow_engine", "prefect.task_engine", "prefect.engine",
    "prefect.concurrency", "pandera.strategies", "pandera.accessors", "encodings.idna", "graphviz",
    "rich._emoji_codes", "pydantic.color", "fastapi.encoders", "hypothesis.strategies",
    "pandera.backends.pandas.builtin_checks", "PIL.JpegImagePlugin", "PIL.PngImagePlugin",
]
HEAVY_LAST = ["torch", "transformers", "peft", "trl", "sam2.build_sam"]
SKIP = {"cli", "forkserver", "prefect_api", "pipeline"}


def warm_up_order() -> list[str]:
    """Modules to import, light stage flows before heavy libraries and the flows that need them."""
    import pkgutil

    import flows

    stage_flows = [f"flows.{m.name}" for m in pkgutil.iter_modules(flows.__path__)
                   if m.name not in SKIP and not m.name.startswith("serve")]
    heavy_flows = {"flows.tiny_models", "flows.shard", "flows.sft", "flows.evaluate", "flows.bench",
                   "flows.bench_table"}
    light = [m for m in stage_flows if m not in heavy_flows]
    heavy = [m for m in stage_flows if m in heavy_flows]
    return list(dict.fromkeys([*LIGHT_FIRST, *light, *HEAVY_LAST, *heavy]))


def _import_quietly(name: str) -> None:
    with contextlib.suppress(Exception):  # a broken stage module fails in its own stage, not here
        module = importlib.import_module(name)
        if name == "schemas":
            _build_table_schemas(module)


def _build_table_schemas(package) -> None:
    """Build every pandera table schema once: pandera builds a model's schema on first use and, doing so,
    imports dask.dataframe (≈0.8 s) — in every stage that reads or writes a table, without this."""
    import pkgutil

    from pandera.api.pandas.model import DataFrameModel

    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, DataFrameModel) and value is not DataFrameModel:
                with contextlib.suppress(Exception):
                    value.to_schema()


_ENTRY: list[Callable[[list[str]], int]] = []  # what a forked child runs (set by `serve`)


def _entry() -> Callable[[list[str]], int]:
    return _ENTRY[0]


def _child(conn: socket.socket, request: dict, fds: list[int], inherited: list[socket.socket], server: int) -> None:
    """In the forked child: become the stage command, run it, exit with its code."""
    try:
        lifeline.die_with_parent(parent=server)  # the server was SIGKILLed (with `vrsflow repro`): so is this
        for other in inherited:  # the listener and other clients' connections are the server's business
            other.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})  # forked while the server held it back
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        lifeline.stop_when_closed(conn)  # the command never writes again: a close means it was killed
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.pop(ENV, None)
        os.environ[FORKED_ENV] = "1"  # for the timings record (flows/common.py) and the tests
        sys.argv = ["vrsflow", *request["argv"]]
        code = _entry()(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:  # Ctrl-C: the flow run is already marked crashed; no traceback
        sys.stderr.write(f"vrsflow {' '.join(request['argv'])}: interrupted\n")
        code = 130
    except BaseException:  # noqa: BLE001 (report like the interpreter would — through sys.excepthook —, exit non-zero)
        sys.excepthook(*sys.exc_info())
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve(path: str, run_command: Callable[[list[str]], int]) -> None:
    """Listen on `path` until SIGTERM; fork one child per request, which runs `run_command(argv)`; never returns.

    Listens first and warms up between requests (one module per idle moment), so the first stages are
    forked as soon as the server exists instead of starting cold while it imports torch.
    """
    _ENTRY[:] = [run_command]
    to_import = warm_up_order()
    heavy = set(to_import[to_import.index(HEAVY_LAST[0]):])
    # torch & co. (≈10 s of CPU on 2 cores) only after a first stage has finished (until then they would slow
    # the start of the Prefect server and of the first stages, which need neither), and only while a stage runs
    finished = [0]
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the stages (their clients pass it on)
    waiting: dict[int, socket.socket] = {}  # child pid → the client's connection
    # a stage that ends while a warm-up import runs (seconds for torch) gets its answer at once: reaping is
    # done in the SIGCHLD handler, and SIGCHLD is held back while `waiting` changes
    def on_child(signum: int, frame: object) -> None:
        finished[0] += _reap(waiting)

    signal.signal(signal.SIGCHLD, on_child)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    while not stopping:
        # a heavy import (seconds) blocks accepting: start one only while a stage runs (dvc runs one at a
        # time, so no request is due before it ends), never while the next stage's request may be on its way
        importable = bool(to_import) and (to_import[0] not in heavy or (finished[0] > 0 and bool(waiting)))
        try:
            ready, _, _ = select.select([listener], [], [], 0.0 if importable else 0.1)
        except InterruptedError:
            continue
        if ready:
            with _sigchld_held():
                _accept(listener, waiting)
        elif importable:
            _import_quietly(to_import.pop(0))
        with _sigchld_held():
            finished[0] += _reap(waiting)
    listener.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    for pid in waiting:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the imported libraries' exit handlers take seconds and have nothing to clean up here


@contextlib.contextmanager
def _sigchld_held():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})


def _accept(listener: socket.socket, waiting: dict[int, socket.socket]) -> None:
    conn, _ = listener.accept()
    try:
        message, fds, _, _ = socket.recv_fds(conn, _MAX_REQUEST + 4, 3)
        (size,) = struct.unpack("!I", message[:4])
        body = message[4:]
        while len(body) < size:
            more = conn.recv(size - len(body))
            if not more:
                raise OSError("short request")
            body += more
        request = json.loads(body)
    except (OSError, ValueError, struct.error):
        conn.close()
        return
    if not _trusted(conn, request):
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    server = os.getpid()
    pid = os.fork()
    if pid == 0:
        _child(conn, request, list(fds), [listener, *waiting.values()], server)
    for fd in fds:
        os.close(fd)
    try:
        _send(conn, {"pid": pid})
    except OSError:
        conn.close()
        return
    waiting[pid] = conn


def _trusted(conn: socket.socket, request: dict) -> bool:
    """Only this user's `vrsflow stage …` commands: the socket lives in a private (0700) folder already; the
    peer's uid and the command are checked again so the server can never run anything but a stage."""
    uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1]
    argv = request.get("argv") if isinstance(request, dict) else None
    return (uid == os.getuid() and isinstance(argv, list) and len(argv) >= 2 and argv[0] == "stage"
            and all(isinstance(a, str) for a in argv) and isinstance(request.get("cwd"), str)
            and isinstance(request.get("env"), dict))


def _reap(waiting: dict[int, socket.socket]) -> int:
    """Answer every finished stage's client with its exit status; return how many were answered."""
    answered = 0
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return answered
        if pid == 0:
            return answered
        conn = waiting.pop(pid, None)
        if conn is None:
            continue
        answered += 1
        reply = ({"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status)
                 else {"code": os.WEXITSTATUS(status)})
        with contextlib.suppress(OSError):
            _send(conn, reply)
        conn.close()
    return answered


def main(argv: list[str] | None = None) -> int:
    """`python -m flows.forkserver SOCKET MODULE:FUNCTION` (started by `vrsflow repro` with `flows.cli:main`).

    The command the children run is named on the command line, not imported here: the command line (flows/cli.py)
    uses this server, never the reverse (docs/architecture.md, "One direction between cli, prefect_api and the
    fork server").
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[1].count(":") != 1:
        sys.stderr.write("usage: python -m flows.forkserver SOCKET MODULE:FUNCTION\n")
        return 2
    module, function = args[1].split(":")
    serve(args[0], getattr(importlib.import_module(module), function))
    return 0


if __name__ == "__main__":
    sys.exit(main())

