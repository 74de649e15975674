"""`rocketlake local up --postgres`: a real PostgreSQL on 127.0.0.1 for Dagster's storage, no system service.

It is Debian's PostgreSQL (``apt-get install postgresql``) run by hand: ``initdb`` once into a data
directory of our own, then the ``postgres`` server in the foreground of its own session, recorded and
stopped by pid like the other local processes. TCP on loopback only (no Unix socket), password
authentication for a role ``rocketlake`` that owns the database ``dagster``.

PostgreSQL refuses to run as root. As root (CI, containers) the server runs as the ``postgres`` account
the package created, through ``setpriv`` (which execs, so the pid we record is the server's), and its data
directory lives where that account can reach it: under ``/var/tmp/rocketlake-postgres/``, named by the state
directory, instead of inside a root-only tree.

The password is ``$ROCKETLAKE_POSTGRES_PASSWORD``, or one generated at the first ``up`` and kept in
``<state>/postgres/password`` (mode 0600); it is never printed. ``dagster_env()`` gives the
``DAGSTER_PG_*`` variables that ``deploy/dagster.yaml`` reads.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rocketlake.local.process import (
    LocalClusterError,
    ManagedProcess,
    accepts_connections,
    kept_secret,
    port_in_use,
    stop_all,
    wait_for,
)

LOOPBACK = "127.0.0.1"
ROLE = "rocketlake"
DATABASE = "dagster"
PASSWORD_ENV = "ROCKETLAKE_POSTGRES_PASSWORD"
START_TIMEOUT_S = 60.0
# A laptop's share: Dagster's storage is a few tables of small rows.
SERVER_SETTINGS = {
    "listen_addresses": LOOPBACK,
    "unix_socket_directories": "",
    "shared_buffers": "32MB",
    "max_connections": "100",
    "fsync": "on",
}


def server_binaries() -> Path:
    """The newest installed PostgreSQL's bin directory (Debian keeps them under /usr/lib/postgresql/N/bin)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name))
    if found:
        return found[-1].parent
    on_path = shutil.which("postgres")
    if on_path:
        return Path(on_path).parent
    raise LocalClusterError(
        "no PostgreSQL server is installed; install it with `apt-get install postgresql` "
        "(only its programs are used: rocketlake starts its own server, not the system service)"
    )


class StalePassword(LocalClusterError):
    """The data directory's role has a password other than the one this state directory keeps."""


@dataclass(frozen=True)
class LocalPostgres:
    state_dir: Path  # <state>/postgres: pid file, log, password
    port: int = 5432

    @property
    def process(self) -> ManagedProcess:
        return ManagedProcess("postgres", self.state_dir)

    @property
    def run_as(self) -> str | None:
        """The account the server runs as when we are root, else None (it runs as us)."""
        return "postgres" if os.geteuid() == 0 else None

    @property
    def data_dir(self) -> Path:
        if self.run_as is None:
            return self.state_dir / "data"
        digest = hashlib.sha1(str(self.state_dir.resolve()).encode()).hexdigest()[:12]
        return Path("/var/tmp/rocketlake-postgres") / digest

    def password(self) -> str:
        return kept_secret(PASSWORD_ENV, self.state_dir / "password", length=18)

    def dagster_env(self) -> dict[str, str]:
        """What ``deploy/dagster.yaml`` reads from the environment."""
        return {
            "DAGSTER_PG_HOST": LOOPBACK,
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_USERNAME": ROLE,
            "DAGSTER_PG_PASSWORD": self.password(),
            "DAGSTER_PG_DB": DATABASE,
        }

    def _as_server_user(self, cmd: list[str]) -> list[str]:
        if self.run_as is None:
            return cmd
        return ["setpriv", f"--reuid={self.run_as}", f"--regid={self.run_as}", "--init-groups", "--", *cmd]

    def _initdb(self) -> None:
        data = self.data_dir
        if (data / "PG_VERSION").exists():
            return
        data.mkdir(parents=True, exist_ok=True)
        pwfile = data.parent / f".{data.name}.pw"
        pwfile.write_text(self.password() + "\n")
        try:
            if self.run_as is not None:
                account = pwd.getpwnam(self.run_as)
                os.chown(data.parent, account.pw_uid, account.pw_gid)
                for path in (data, pwfile):
                    os.chown(path, account.pw_uid, account.pw_gid)
            data.chmod(0o700)
            pwfile.chmod(0o600)
            result = subprocess.run(
                self._as_server_user(
                    [
                        str(server_binaries() / "initdb"),
                        "-D",
                        str(data),
                        "-U",
                        ROLE,
                        "-E",
                        "UTF8",
                        "--auth-host=scram-sha-256",
                        "--auth-local=reject",
                        f"--pwfile={pwfile}",
                        "--no-instructions",
                    ]
                ),
                capture_output=True,
                text=True,
                timeout=120,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise LocalClusterError(
                f"initdb into {data} failed (exit {result.returncode}):\n{(result.stdout + result.stderr)[-2000:]}"
            )

    def up(self, timeout: float = START_TIMEOUT_S, progress: Callable[[str], None] | None = None) -> None:
        report = progress or (lambda line: None)
        started = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._initdb()
        if self.process.pid() is None:
            if port_in_use(self.port):
                raise LocalClusterError(
                    f"cannot start PostgreSQL: port {self.port} on {LOOPBACK} is in use by another "
                    "process; stop it, or choose another port (--postgres-port)"
                )
            settings = [arg for key, value in SERVER_SETTINGS.items() for arg in ("-c", f"{key}={value}")]
            self.process.start(
                self._as_server_user(
                    [str(server_binaries() / "postgres"), "-D", str(self.data_dir), "-p", str(self.port), *settings]
                ),
                dict(os.environ),
            )
        try:
            wait_for(
                lambda: accepts_connections(self.port) and self._database_ready(),
                time.monotonic() + timeout,
                [self.process],
                f"PostgreSQL on {LOOPBACK}:{self.port}",
                interval=0.3,
            )
        except StalePassword:
            stop_all([self.process], sig=signal.SIGINT)  # started for nothing: nobody can log in to it
            raise
        report(
            f"  postgresql listening on {LOOPBACK}:{self.port}, database {DATABASE!r} owned by {ROLE!r} "
            f"({time.monotonic() - started:.0f}s)"
        )

    def _database_ready(self) -> bool:
        """Connects, and creates the database on the first start."""
        import psycopg2

        try:
            connection = psycopg2.connect(
                host=LOOPBACK, port=self.port, user=ROLE, password=self.password(), dbname="postgres", connect_timeout=2
            )
        except psycopg2.OperationalError as e:
            if "password authentication failed" in str(e):
                # Run as root, the data outlives a state directory deleted by hand, and with it the password it
                # was made with: waiting cannot help.
                raise StalePassword(
                    f"PostgreSQL's data in {self.data_dir} was made with another password than "
                    f"{self.state_dir / 'password'} (or ${PASSWORD_ENV}) holds: the state directory was deleted, or "
                    f"the variable changed. Run `rocketlake local down --postgres --wipe` with the same --state-dir "
                    f"to delete that data (Dagster's runs and events in it), or set ${PASSWORD_ENV} to the password "
                    "it was made with"
                ) from None
            return False  # still starting (or recovering)
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
                if cursor.fetchone() is None:
                    cursor.execute(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")
        finally:
            connection.close()
        return True

    def status(self) -> str:
        pid = self.process.pid()
        return f"postgresql {LOOPBACK}:{self.port}: {'up' if pid else 'down'} (pid {pid or '-'}, data {self.data_dir})"

    def down(self, wipe: bool = False) -> list[str]:
        # SIGINT is PostgreSQL's fast shutdown: a SIGTERM (smart) waits for every client, daemons included.
        stopped = stop_all([self.process], sig=signal.SIGINT)
        if wipe:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        return stopped
