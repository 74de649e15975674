"""The long-lived Spark Connect server the local runtime's runs open their sessions on (``spark.remote``).

A run that starts Spark of its own pays a JVM start and a first Delta commit (15 to 60 s on two cores) for every
window, and four runs of a window on a small machine mean four JVMs at once. One server, started once, serves them
all: a run's session on it costs a gRPC connection. It is the installed pyspark's Connect server (under rocketlake's
driver program, ``rocketlake/spark/connect_server.py``, so that sessions share classes and Python workers), configured as
a run's own session would be (``spark.session.connect_server_command``: Delta and its jars, this environment's
Python for the workers; an S3 lake's bucket settings, and its keys in the server's environment), recorded and
stopped by pid like the brokers (``process.ManagedProcess``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rocketlake.delta.storage import bucket_of, on_s3, server_refusal, server_settings
from rocketlake.local.process import (
    LocalClusterError,
    ManagedProcess,
    accepts_connections,
    port_in_use,
    stop_all,
    wait_for,
)
from rocketlake.spark.session import (
    CONNECT_DEFAULT_PORT,
    connect_endpoint,
    connect_server_command,
)

if TYPE_CHECKING:
    from rocketlake.engine.config import LakeConfig

LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 180.0
ROLE = "spark-connect"
#: where, under a local state directory (the cluster's), the server keeps its pid file and log
STATE_SUBDIR = "spark-connect"
#: where, under the server's state directory, its metastore keeps the catalog (``metastore=True``)
METASTORE_SUBDIR = "metastore"


@dataclass(frozen=True)
class LocalSparkServer:
    """A Spark Connect server on ``127.0.0.1:port``, on ``master``, started with ``conf`` and, for a ``lake`` on S3,
    its bucket's settings and keys (``connect_server_command``)."""

    state_dir: Path
    port: int = CONNECT_DEFAULT_PORT
    master: str = "local[2]"
    conf: Mapping[str, str] = field(default_factory=dict)
    #: Added to the server's environment, which its Python workers inherit: e.g. a PYTHONPATH where listeners live.
    env: Mapping[str, str] = field(default_factory=dict)
    lake: LakeConfig | None = None
    #: Keep a metastore (Hive's, on Derby, under ``state_dir``) for tables named in the catalog (``database.name``):
    #: their names outlive the server. Off, the server's catalog lives in memory.
    metastore: bool = False

    @property
    def url(self) -> str:
        return f"sc://{LOOPBACK}:{self.port}"

    @property
    def process(self) -> ManagedProcess:
        return ManagedProcess(ROLE, self.state_dir)

    @property
    def lake_file(self) -> Path:
        """The S3 bucket settings the recorded server was started with (no key among them), beside its pid file."""
        return self.state_dir / "lake-settings.json"

    def lake_refusal(self) -> str | None:
        """Why the running server cannot serve this server's ``lake`` (started without its bucket's settings), or
        None: it can, or none runs. A server started before its settings were recorded had none."""
        pid = self.process.pid()
        if pid is None or self.lake is None:
            return None
        try:
            started_with = json.loads(self.lake_file.read_text())
        except (FileNotFoundError, ValueError):
            started_with = {}
        if server_refusal(self.lake, started_with.get) is None:
            return None
        return (
            f"the Spark Connect server running on {self.url} (pid {pid}) was started without the S3 settings of "
            f"the lake {self.lake.root}, and its runs would fail: stop it (rocketlake local down) and start it "
            "again on this configuration"
        )

    def up(
        self,
        timeout: float = START_TIMEOUT_S,
        progress: Callable[[str], None] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """Start the server unless the recorded one runs; return once it accepts connections. An S3 lake's keys are
        read, under the names the configuration gives, from ``environ`` (this process's environment by default) with
        ``env`` added: passed here, a key is in no field of this server's (nor in its repr)."""
        report = progress or (lambda line: None)
        began = time.monotonic()
        refusal = self.lake_refusal()
        if refusal is not None:
            raise LocalClusterError(refusal)
        if self.process.pid() is None:
            if port_in_use(self.port):
                raise LocalClusterError(
                    f"cannot start the Spark Connect server: port {self.port} on {LOOPBACK} is in "
                    "use; stop that process, or give spark.remote in rocketlake.yaml another port "
                    f"(sc://{LOOPBACK}:<port>)"
                )
            base = {**(os.environ if environ is None else environ), **self.env}
            cmd, env = connect_server_command(self.url, self.master, self.settings(), lake=self.lake, environ=base)
            self.process.start(cmd, env)  # base's (self.env's included), as the session's settings made it
            self.lake_file.write_text(json.dumps(server_settings(self.lake) if self.lake is not None else {}))
        wait_for(
            lambda: accepts_connections(self.port),
            time.monotonic() + timeout,
            [self.process],
            f"the Spark Connect server on {self.url}",
        )
        s3 = f", the S3 bucket {bucket_of(self.lake.root)}" if self.lake is not None and on_s3(self.lake.root) else ""
        report(
            f"  Spark Connect server on {self.url} (master {self.master}, Delta{s3}) ({time.monotonic() - began:.0f}s)"
        )

    def settings(self) -> dict[str, str]:
        """The server's ``conf``, with the metastore's settings when it keeps one."""
        conf = dict(self.conf)
        if self.metastore:
            conf.update(metastore_settings(self.state_dir / METASTORE_SUBDIR, conf))
        return conf

    def status(self) -> str:
        pid = self.process.pid()
        return f"spark-connect: {'running' if pid else 'down'} (pid {pid or '-'}) on {self.url}"

    def down(self) -> list[str]:
        return stop_all([self.process])


def metastore_settings(folder: Path, conf: Mapping[str, str]) -> dict[str, str]:
    """Spark's settings for a Hive metastore on embedded Derby in ``folder`` (the database, Derby's log, and the
    warehouse of managed tables: none is left in the working directory); the JVM options of ``conf`` are kept."""
    derby_home = f"-Dderby.system.home={folder}"
    options = conf.get("spark.driver.extraJavaOptions", "")
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(folder / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={folder / 'metastore_db'};create=true",
        "spark.driver.extraJavaOptions": f"{options} {derby_home}".strip(),
    }


def server_for(
    spark, state_dir: Path, lake: LakeConfig | None = None, metastore: bool = False
) -> LocalSparkServer | None:
    """The local server a configuration's ``spark`` block (``SparkConfig``) asks for: its ``remote`` on this machine,
    on its master and settings, with its ``lake``'s (an S3 bucket's settings and keys), kept under ``state_dir``;
    None when its runs start Spark of their own or open their sessions on a server elsewhere (a server elsewhere is
    its operator's to run: ``rocketlake spark-server``). ``metastore``: the server keeps a metastore (the
    configuration names catalog tables)."""
    if spark.remote is None:
        return None
    host, port = connect_endpoint(spark.remote)
    if host not in (LOOPBACK, "localhost"):
        return None
    return LocalSparkServer(
        state_dir / STATE_SUBDIR, port=port, master=spark.master, conf=dict(spark.conf), lake=lake, metastore=metastore
    )
