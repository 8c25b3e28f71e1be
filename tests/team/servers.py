"""Real servers for the lab-setup tests, started by the test and stopped by it: Debian's `sshd` (openssh-server) and
PostgreSQL + a Prefect server through scripts/prefect_postgres.sh, each on a free loopback port, each dying with the
test process however it ends (stages/core/lifeline.py)."""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from stages.core import lifeline

ROOT = Path(__file__).resolve().parents[2]
SSHD_MISSING = "no sshd binary: apt-get install openssh-server (docs/team.md)"
POSTGRES_MISSING = "no PostgreSQL server binaries: apt-get install postgresql (docs/team.md)"


def sshd_binary() -> str | None:
    """Debian's sshd (it lives in /usr/sbin, often not on a user's PATH)."""
    return shutil.which("sshd") or next((p for p in ("/usr/sbin/sshd",) if os.access(p, os.X_OK)), None)


def postgres_bin() -> Path | None:
    """The newest /usr/lib/postgresql/<version>/bin holding `postgres` (what the script picks)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parts[-3])
                   if p.parts[-3].isdigit() else 0)
    return found[-1].parent if found else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM what the test started, SIGKILL if it does not end."""
    lifeline.terminate(proc, timeout)


@dataclass(frozen=True)
class Sshd:
    port: int
    user: str
    key: Path  # the user key sshd accepts
    wrong_key: Path  # a key it does not know

    def url(self, path: Path) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{path}"


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vrsflow-test", "-f", str(path)], check=True)
    return path


@contextlib.contextmanager
def sshd(folder: Path, read_only: bool = False) -> Iterator[Sshd]:
    """An sshd on a free loopback port with throw-away host and user keys, accepting this user by key only;
    `read_only`: its SFTP server refuses every write (`internal-sftp -R`)."""
    folder.mkdir(parents=True, exist_ok=True)
    host_key, key, wrong = _keygen(folder / "host_key"), _keygen(folder / "user_key"), _keygen(folder / "wrong_key")
    (folder / "authorized_keys").write_text(key.with_suffix(".pub").read_text())
    (folder / "authorized_keys").chmod(0o600)
    port = free_port()
    config = folder / "sshd_config"
    config.write_text("\n".join([
        "ListenAddress 127.0.0.1", f"Port {port}", f"HostKey {host_key}",
        f"AuthorizedKeysFile {folder}/authorized_keys",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "PidFile none",
        "StrictModes no",  # the keys live under /tmp, which is world-writable: sshd would refuse them
        f"Subsystem sftp internal-sftp{' -R' if read_only else ''}", ""]))
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation folder, needed as root
    log = folder / "sshd.log"
    with open(log, "w") as out:
        proc = lifeline.popen([sshd_binary() or "sshd", "-D", "-e", "-f", str(config)], stdout=out,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc, 30, log)
        yield Sshd(port, getpass.getuser(), key, wrong)
    finally:
        stop(proc)


@dataclass(frozen=True)
class PrefectOnPostgres:
    api_url: str
    proc: subprocess.Popen
    log: Path


def _healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def prefect_on_postgres(password: str = "throw-away: not a secret") -> Iterator[PrefectOnPostgres]:
    """scripts/prefect_postgres.sh on free loopback ports, its database in a new folder (one the `postgres` user
    can reach when this runs as root); the server's home is a new folder too."""
    work = Path(tempfile.mkdtemp(prefix="vrsflow-pg-"))
    work.chmod(0o755)
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "VRSFLOW_PG_PASSWORD": password, "VRSFLOW_PYTHON": sys.executable,
           "PREFECT_HOME": str(work / "server-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_API_URL": url, "PREFECT_UI_ENABLED": "false"}
    log = work / "server.log"
    with open(log, "w") as out:
        proc = lifeline.popen([str(ROOT / "scripts" / "prefect_postgres.sh"), "--data", str(work / "pg"),
                               "--pg-port", str(free_port()), "--port", str(port)],
                              env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the Prefect server on PostgreSQL did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield PrefectOnPostgres(url, proc, log)
    finally:
        stop(proc)
        shutil.rmtree(work, ignore_errors=True)
