"""A throwaway PostgreSQL cluster: ``initdb`` + ``pg_ctl`` under a temp directory.

For the store's tests and ``fore bench store``: a real server, started from
the machine's PostgreSQL binaries (``pg_config --bindir``, else Debian's
``/usr/lib/postgresql/<version>/bin``, or ``$FORE_PG_BINDIR``), listening only
on a unix socket inside its own directory (no TCP port, so nothing clashes
with anything), and removed at :meth:`PgCluster.stop`.

PostgreSQL refuses to run as root; when this process is root the server runs
as the ``postgres`` system user if there is one (Debian's package creates it),
else as ``nobody``, and its directory is handed to that user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from fore.errors import PgClusterError

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["PgClusterError"]

BINDIR_ENV = "FORE_PG_BINDIR"


def find_bindir() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or ``None``."""
    candidates: list[Path] = []
    if os.environ.get(BINDIR_ENV):
        candidates.append(Path(os.environ[BINDIR_ENV]))
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=False
            )
            if done.returncode == 0 and done.stdout.strip():
                candidates.append(Path(done.stdout.strip()))
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(versions)
    for bindir in candidates:
        if all((bindir / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return bindir
    return None


def _server_user() -> pwd.struct_passwd | None:
    """The user to run the server as (``None``: this process's own user will do)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise PgClusterError("running as root and there is neither a postgres nor a nobody user")


class PgCluster:
    """One throwaway cluster; use as a context manager or call start/stop."""

    def __init__(self, *, durable: bool = False, superuser: str = "fore") -> None:
        bindir = find_bindir()
        if bindir is None:
            raise PgClusterError(
                "no PostgreSQL server binaries (initdb, pg_ctl) found; install Debian's "
                f"postgresql package or set {BINDIR_ENV}"
            )
        self.bindir = bindir
        self.durable = durable
        self.superuser = superuser
        self.root = Path(tempfile.mkdtemp(prefix="fore-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self._user = _server_user()
        self._started = False

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> PgCluster:
        try:
            self.socket_dir.mkdir()
            if self._user is not None:
                for path in (self.root, self.socket_dir):
                    os.chown(path, self._user.pw_uid, self._user.pw_gid)
            self._run(
                "initdb",
                "-D", str(self.data), "-U", self.superuser, "--auth=trust",
                "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions",
            )  # fmt: skip
            settings = {
                "listen_addresses": "''",
                "unix_socket_directories": f"'{self.socket_dir}'",
                "max_connections": "200",
                "shared_buffers": "'64MB'",
                "log_min_messages": "warning",
            }
            if not self.durable:
                settings.update(fsync="off", synchronous_commit="off", full_page_writes="off")
            with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
                conf.write("\n# fore throwaway cluster\n")
                conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
            self._run(
                "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"),
                "-w", "-t", "60", "start",
            )  # fmt: skip
            self._started = True
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory. Idempotent."""
        if self._started:
            self._started = False
            with contextlib.suppress(PgClusterError):
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PgCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- using it ----------------------------------------------------------------------------

    def url(self, database: str = "postgres") -> str:
        """A ``postgresql://`` URL of ``database`` over the cluster's unix socket."""
        return f"postgresql://{self.superuser}@/{database}?host={self.socket_dir}"

    def create_database(self, name: str) -> str:
        """Create an empty database (``name``: letters, digits, ``_``); its URL."""
        if not name.replace("_", "").isalnum():
            raise ValueError(f"not a plain database name: {name!r}")
        import psycopg

        with psycopg.connect(self.url(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return (self.root / "server.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _run(self, tool: str, *args: str) -> None:
        extra: dict[str, Any] = {}
        if self._user is not None:
            extra = {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}
        try:
            done = subprocess.run(
                [str(self.bindir / tool), *args],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                cwd=self.root,
                env={**os.environ, "LC_ALL": "C"},
                **extra,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise PgClusterError(f"{tool} could not run: {exc}") from exc
        if done.returncode != 0:
            output = (done.stderr or done.stdout).strip()[-1500:]
            raise PgClusterError(
                f"{tool} failed ({done.returncode}): {output}\n{self.log_tail(1500)}"
            )
