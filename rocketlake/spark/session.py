"""A SparkSession with Delta Lake: in the process, or on a Spark Connect server started with the same settings.

Delta's jars are resolved with Maven (see ``jars``) and handed to Spark as files
(``spark.jars``) rather than ``spark.jars.packages``, so a session starts without Ivy and without
network once the cache is warm. Python workers must run this very interpreter, or they import
another environment's site-packages.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
import zipfile
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pyspark
from pyspark.sql import SparkSession

from rocketlake import jars
from rocketlake.delta import storage

if TYPE_CHECKING:
    from rocketlake.engine.config import LakeConfig

_lock = threading.Lock()

DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

LOCAL_DEFAULTS = {
    # Keep a local session on loopback: it never needs another interface.
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.showConsoleProgress": "false",
    "spark.log.level": "WARN",
    # A laptop-sized shuffle; a cluster master gets Spark's own default.
    "spark.sql.shuffle.partitions": "8",
    # Delta rebuilds a table's snapshot (the log since its last checkpoint, a few files) with 50 tasks by
    # default, sized for clusters; on a local master scheduling them costs more than reading the files.
    "spark.databricks.delta.snapshotPartitions": "1",
    # VACUUM lists the table's files in as many tasks as this (10,000 by default, sized for clusters): on a local
    # master a VACUUM of a few files would spend its time scheduling empty tasks.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "8",
    # A local master's executor lives in the driver's JVM: it cannot be lost without the driver. After the machine
    # stood still for longer than Spark's timeout (a laptop's lid, a paused VM: 120 s), the driver would remove it
    # for its late heartbeat, and since SPARK-41360 it cannot register again on a local master: 60 failed heartbeats
    # later (10 minutes) it exits the JVM. A long-lived server must outlive its machine's sleep.
    "spark.storage.blockManagerHeartbeatTimeoutMs": "36500d",
}


#: glibc's malloc gives threads arenas of their own (up to 8 per core) and keeps in each what its threads free, so
#: the JVM's native memory grows with a backlog's size and is not handed back; two arenas, as Hadoop caps its
#: containers, keep it near a window's needs at the same speed (the figures: benchmarks/README.md).
MALLOC_ARENA_MAX = "2"


def cap_malloc_arenas(settings: dict[str, str], environ: MutableMapping[str, str]) -> None:
    """``MALLOC_ARENA_MAX`` for the JVM started from ``environ`` (and its Python workers, its children) and, through
    ``spark.executorEnv``, for executors elsewhere; a value the user set, in either place, is kept."""
    arenas = environ.setdefault("MALLOC_ARENA_MAX", MALLOC_ARENA_MAX)
    settings.setdefault("spark.executorEnv.MALLOC_ARENA_MAX", arenas)


#: Put first on the PYTHONPATH of the Python processes Spark starts: its ``sitecustomize`` has them import PySpark
#: from the installed, byte-compiled package rather than from the zip Spark puts first (compiled from source at every
#: import: 1 CPU-second a daemon, four daemons an application; worker_site/sitecustomize.py).
WORKER_SITE = str(Path(__file__).resolve().parent / "worker_site")


def put_worker_site(environ: MutableMapping[str, str]) -> None:
    """:data:`WORKER_SITE` first on ``environ``'s PYTHONPATH (once), before what the user put there."""
    entries = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if WORKER_SITE not in entries:
        environ["PYTHONPATH"] = os.pathsep.join([WORKER_SITE, *entries])


def session_settings(master: str, conf: dict[str, str] | None, environ: MutableMapping[str, str]) -> dict[str, str]:
    """The settings a rocketlake session starts with, wherever it starts (a run's own JVM or the Spark Connect
    server): the local defaults on a local master, Delta's configuration, then ``conf``; and, in ``environ``, the
    Python interpreter of the workers, the malloc cap and the workers' site (:func:`put_worker_site`)."""
    settings = {**(LOCAL_DEFAULTS if master.startswith("local") else {}), **DELTA_CONF, **(conf or {})}
    # PySpark reads the executors' interpreter from PYSPARK_PYTHON when the context starts (spark-submit turns
    # spark.pyspark.python into it); by default the executors run this very interpreter, which suits one image
    # for driver and executors. A cluster whose executors keep Python elsewhere names it in spark.pyspark.python.
    environ["PYSPARK_PYTHON"] = settings.pop("spark.pyspark.python", sys.executable)
    environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    cap_malloc_arenas(settings, environ)
    put_worker_site(environ)
    return settings


def jar_files(settings: dict[str, str], needed: list[Path]) -> str:
    """``spark.jars`` (taken out of ``settings``) after the jars rocketlake needs, as one comma-separated list."""
    extra = settings.pop("spark.jars", "")
    return ",".join([*map(str, needed), *filter(None, extra.split(","))])


def spark_session(
    master: str = "local[*]", conf: dict[str, str] | None = None, app_name: str = "rocketlake", s3a: bool = False
) -> SparkSession:
    """The process's SparkSession with Delta configured (created on first call, then reused).

    Spark allows one active session per JVM; asking again returns it, with ``conf`` applied where Spark
    allows runtime changes (SQL settings). A master, application name or static setting that differs from
    the active session's cannot apply and is refused (``SparkSessionConflict``), never silently dropped.
    ``s3a`` puts Hadoop's S3A connector on the class path (a lake on ``s3a://``).
    """
    asked = dict(conf or {})
    settings = session_settings(master, conf, os.environ)
    with _lock:
        active = SparkSession.getActiveSession()
        if active is not None:
            if s3a:  # the running session must have S3A's jars: they cannot be added to it
                asked["spark.jars"] = jar_files(asked, jars.resolve(jars.s3a_jar_set()))
            apply_to_active(active, master, app_name, asked)
            return active
        # Named, not shown: a Spark Connect URL may carry a token (sc://host/;token=...).
        client = [name for name in CONNECT_MODE_VARIABLES if name in os.environ]
        if client:
            raise SparkSessionConflict(
                f"SparkResource: remote is unset, so this run starts Spark of its own (master={master!r}), but "
                f"{' and '.join(client)} set in this process's environment makes PySpark open a Spark Connect client "
                "instead: unset it, or give spark.remote in the configuration to land through a Spark Connect server."
            )
        delta_jars = session_jars()
        if s3a:
            delta_jars = [*delta_jars, *jars.resolve(jars.s3a_jar_set())]
        builder = SparkSession.builder.master(master).appName(app_name)
        settings["spark.jars"] = jar_files(settings, delta_jars)
        for key, value in settings.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        if not master.startswith("local"):
            # Executors elsewhere have rocketlake's dependencies but not necessarily rocketlake, and never the
            # driver's working directory: the reader and its client travel with the application.
            session.sparkContext.addPyFile(str(package_zip()))
        return session


def session_jars() -> list[Path]:
    """What every session rocketlake starts gets: Delta's jars, and spark-avro's for Avro bodies."""
    return [*jars.resolve(jars.delta_jar_set()), *jars.beside_spark(jars.resolve(jars.spark_avro_jar_set()))]


#: The server's driver program: Spark Connect's service on a SparkSession whose sessions share class loaders and
#: Python workers (see its docstring for why not Spark's own ``SparkConnectServer`` class).
CONNECT_SERVER_PROGRAM = Path(__file__).with_name("connect_server.py")
CONNECT_DEFAULT_PORT = 15002
#: Each run's session on the server compiling Spark's generated classes and starting Python workers anew costs more
#: than the run's own work; rocketlake's runs add no classes or jars of their own.
CONNECT_SHARES_SESSIONS = {"spark.sql.artifact.isolation.enabled": "false"}

#: A server lives for days and runs the same few jobs every window, a minute apart; the JVM's and Spark's defaults suit
#: a process that runs one job. Measured in ``benchmarks/steady_state.py`` (benchmarks/README.md), 20 to 30 minutes in:
#: Spark keeps 100 generated classes, fewer than a window's distinct plans (the landing, Delta's log replay and
#: statistics, the followers' jobs), so each window generated, compiled (Janino), loaded and JIT-compiled about 220
#: classes again and unloaded as many: with 1000 kept, about 45 new ones a window and none unloaded. The JIT's profiled
#: code heap (120 MB of the default 240) had filled, and HotSpot's sweeper, whose threshold rises as the heap fills, had
#: flushed 70,000 methods that the next windows compiled again; with 512 MB it stays below half full. A value the
#: configuration gives is kept.
CONNECT_KEEPS_COMPILED_CODE = {"spark.sql.codegen.cache.maxEntries": "1000"}
CODE_CACHE_OPTION, CODE_CACHE = "-XX:ReservedCodeCacheSize", "512m"

#: A run killed while the server works for it (SIGKILL, an OOM, a lost machine) must not land later on its own. With
#: Spark's defaults the server keeps a dead client's operation for 120 s + 300 s, time enough to finish and commit
#: while the next run may already be landing the same window. With these settings a dead client's stream ends within
#: 5 s and its operation is reaped 5 s later (checked every 2 s); a live client reattaches every 5 s, which it does on
#: its own (PySpark's default reattachable execution). test_spark_server.py checks that a killed run's write stops.
CONNECT_REAPS_DEAD_CLIENTS = {
    "spark.connect.execute.reattachable.senderMaxStreamDuration": "5s",
    "spark.connect.execute.manager.detachedTimeout": "5s",
    "spark.connect.execute.manager.maintenanceInterval": "2s",
}


#: What makes PySpark's ``SparkSession.builder`` open a Spark Connect client instead of starting a driver: exported by
#: a shell for its PySpark clients (SPARK_REMOTE, SPARK_API_MODE, as PySpark documents them), or inherited from a
#: process where a Connect session was opened (PySpark sets the other two in ``os.environ``). The server's driver
#: program would otherwise connect to that URL instead of serving its own.
CONNECT_CLIENT_VARIABLES = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "SPARK_API_MODE")
#: Those of them that alone make PySpark's builder open a Connect client, whatever master it is given.
CONNECT_MODE_VARIABLES = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")


def connect_endpoint(remote: str) -> tuple[str, int]:
    """The host and port of a Spark Connect URL (``sc://host[:port][/;params]``; Spark's default port 15002)."""
    parts = urlsplit(remote)
    return parts.hostname or "localhost", parts.port or CONNECT_DEFAULT_PORT


def connect_server_command(
    remote: str,
    master: str = "local[*]",
    conf: dict[str, str] | None = None,
    app_name: str = "rocketlake",
    lake: LakeConfig | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The command and environment of a Spark Connect server for ``remote``, configured as :func:`spark_session`
    configures a run's own session (Delta, its jars as files, the local defaults, this interpreter for the Python
    workers, the malloc cap), bound to the URL's host and port.

    A ``lake`` on ``s3a://`` adds S3A's jars and its bucket's settings (``storage.server_settings``), and puts its
    keys, read from the variables the configuration names in ``environ`` (this process's environment by default),
    in the server's environment (``storage.server_keys``): never in the command, which ``ps`` shows to everyone."""
    host, port = connect_endpoint(remote)
    env = dict(os.environ if environ is None else environ, SPARK_HOME=str(Path(pyspark.__file__).resolve().parent))
    on_s3 = lake is not None and storage.on_s3(lake.root)
    settings = {
        **CONNECT_REAPS_DEAD_CLIENTS,
        **CONNECT_SHARES_SESSIONS,
        **CONNECT_KEEPS_COMPILED_CODE,
        **session_settings(master, conf, env),
        **(storage.server_settings(lake) if on_s3 else {}),  # the lake's, whatever spark.conf says: runs check
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
    }
    java_options = settings.get("spark.driver.extraJavaOptions", "")
    if CODE_CACHE_OPTION not in java_options:
        settings["spark.driver.extraJavaOptions"] = f"{CODE_CACHE_OPTION}={CODE_CACHE} {java_options}".strip()
    if on_s3:
        storage.server_keys(lake, env)
    needed = [*session_jars(), *(jars.resolve(jars.s3a_jar_set()) if on_s3 else [])]
    cmd = [
        str(Path(env["SPARK_HOME"]) / "bin" / "spark-submit"),
        "--master",
        master,
        "--name",
        app_name,
        "--jars",
        jar_files(settings, needed),
    ]
    if not master.startswith("local"):
        cmd += ["--py-files", str(package_zip())]  # as spark_session's addPyFile: executors elsewhere get rocketlake
    for key, value in settings.items():
        cmd += ["--conf", f"{key}={value}"]
    # The driver program runs in this environment, as itself (not, say, under a notebook a user's shell names).
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env.pop("PYSPARK_DRIVER_PYTHON_OPTS", None)
    for name in CONNECT_CLIENT_VARIABLES:  # the server is a Spark driver, whatever the shell's PySpark clients use
        env.pop(name, None)
    return [*cmd, str(CONNECT_SERVER_PROGRAM)], env


def connect_session(remote: str, conf: dict[str, str] | None = None) -> SparkSession:
    """A session on the Spark Connect server at ``remote``, with ``conf``'s SQL settings set on it; a static
    setting the server was started with otherwise is refused (``SparkSessionConflict``), naming both values.

    PySpark allows Connect or classic sessions in a process, not both: its functions pick their implementation from
    the process's mode. A run's process is its own; a process that already runs a classic session is refused."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        raise SparkSessionConflict(
            f"SparkResource: remote={remote!r} asks for a Spark Connect session, but this process already runs a "
            "classic SparkSession (PySpark keeps one kind per process): stop it first, or leave remote unset."
        )
    session = SparkSession.builder.remote(remote).getOrCreate()
    if not session.conf.get("spark.master", "local").startswith("local"):
        # A server on a cluster runs the session's Python functions (the reader, a listener) with the interpreter
        # of its PYSPARK_PYTHON, on the driver (the reader's planning) and on the executors, and adds to their path
        # only the session's Python artifacts, not the server's --py-files: rocketlake travels with the session, as
        # addPyFile makes it travel with a classic application. (The artifacts are per session, so that Python
        # workers are not shared between sessions: only where the master is not local.)
        session.addArtifacts(str(package_zip()), pyfile=True)
    wrong = []
    for key, value in (conf or {}).items():
        if key in ("spark.pyspark.python", "spark.jars"):
            continue  # the server's, fixed when `rocketlake spark-server` started it from the same configuration
        if session.conf.isModifiable(key):
            session.conf.set(key, value)
        elif session.conf.get(key, None) != value:
            wrong.append((key, value, session.conf.get(key, None)))
    if wrong:
        listed = "; ".join(f"{key}={want!r} (the server has {have!r})" for key, want, have in wrong)
        raise SparkSessionConflict(
            f"SparkResource: the Spark Connect server at {remote} cannot take {listed}: these are fixed when the server "
            "starts. Restart it on this configuration (rocketlake spark-server)."
        )
    return session


class SparkSessionConflict(RuntimeError):
    """A setting asked of the process's SparkSession that the session already running cannot take."""


def apply_to_active(active: SparkSession, master: str, app_name: str, conf: dict[str, str]) -> None:
    """Apply ``conf`` to the session already running: runtime (SQL) settings are set; a master, name or static
    setting it already has is fine; one it has otherwise is refused, naming the key and both values."""
    started = active.sparkContext.getConf()
    wrong = []
    if active.sparkContext.master != master:
        wrong.append(("master", master, active.sparkContext.master))
    if active.sparkContext.appName != app_name:
        wrong.append(("app_name", app_name, active.sparkContext.appName))
    for key, value in conf.items():
        if key == "spark.pyspark.python":
            continue  # read from the environment when the context started: see spark_session
        if key == "spark.jars":
            missing = [j for j in filter(None, value.split(",")) if j not in started.get("spark.jars", "").split(",")]
            if missing:
                wrong.append((key, ",".join(missing), started.get("spark.jars", "")))
        elif active.conf.isModifiable(key):
            active.conf.set(key, value)
        elif started.get(key, None) != value:
            wrong.append((key, value, started.get(key, None)))
    if wrong:
        listed = "; ".join(f"{key}={want!r} (the running session has {have!r})" for key, want, have in wrong)
        raise SparkSessionConflict(
            f"SparkResource: a SparkSession is already running in this process and cannot take {listed}: these are "
            "fixed when a session starts. Give the resource the running session's values, or stop that session "
            "(spark.stop()) before the run starts its own."
        )


def package_zip(cache_dir: Path | None = None) -> Path:
    """The ``rocketlake`` package as a zip for ``addPyFile``: every module of it and of its subpackages, named by a
    digest of their contents so a changed checkout never reuses a stale zip."""
    # Where the package is installed, read from the import system without importing the layers above this one.
    root = Path(importlib.util.find_spec("rocketlake").origin).resolve().parent
    files = [(f"rocketlake/{path.relative_to(root).as_posix()}", path) for path in sorted(root.rglob("*.py"))]
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0" + path.read_bytes())
    folder = cache_dir or jars.cache_dir() / "pyfiles"
    target = folder / f"rocketlake-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, path in files:
                archive.write(path, name)
        partial.replace(target)
    return target
