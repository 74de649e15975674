"""Spark driver JVMs that start in seconds, for the test suite.

A cold Spark driver (every `dagster asset materialize` the crash tests kill, every run a daemon launches) spends
most of its first half-minute loading and compiling Spark's and Delta's classes, on two cores. The suite gives
every driver JVM it starts three options through ``SPARK_SUBMIT_OPTS`` (read by ``spark-submit``, which PySpark
runs to start its JVM, and inherited by every process the tests start):

* ``-XX:SharedArchiveFile``: a class-data archive (JDK's AppCDS) of the classes a landing loads, made once per
  JDK and PySpark by a short landing with ``-XX:ArchiveClassesAtExit`` and cached in ``~/.cache/rocketlake/cds``.
  A JVM that cannot use it (another JDK, another class path) runs without it: it is an optimisation only.
* ``-XX:TieredStopAtLevel=1``: the quick compiler only; the runs of a test land tens of messages, never long
  enough for the optimising compiler to pay for the CPU it takes from the run. With the quick compiler alone the
  JVM also shrinks its code cache to 48 MB (its "client" defaults), which a Spark Connect server serving a test
  file's every query fills ("Out of space in CodeCache for adapters" fails the query running then), so the
  option comes with the tiered default's 240 MB back.
* ``-Dspark.ui.enabled=false``: no driver web UI.

Production drivers keep the JVM's defaults: these options suit short test runs, not long landings.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path

from rocketlake import jars

QUICK_COMPILER = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
#: No web UI for the drivers the tests start: nobody looks at it, and its Jetty server costs every driver a second of
#: CPU to start (Spark reads ``spark.*`` system properties into its configuration).
NO_SPARK_UI = "-Dspark.ui.enabled=false"

# A landing's classes: a Delta table written, read back and replaced, as an ingestion run does.
_TRAINING_RUN = """
import sys, tempfile
from rocketlake.spark.session import spark_session
session = spark_session("local[2]", {"spark.ui.enabled": "false"})
path = tempfile.mkdtemp()
session.range(100).selectExpr("id", "cast(id as string) as body").write.format("delta").save(path)
session.range(10).selectExpr("id", "cast(id as string) as body").write.format("delta").mode("overwrite") \\
    .option("replaceWhere", "id < 10").save(path)
session.read.format("delta").load(path).groupBy("body").count().collect()
jvm = session.sparkContext._gateway.proc
session.stop()
jvm.stdin.close()  # PySpark's JVM exits when its stdin closes, and writes the archive as it exits
sys.exit(jvm.wait())
"""


def archive_path() -> Path:
    """Where the archive of this JDK and this PySpark lives (a new JDK or PySpark gets a new one)."""
    import pyspark

    java = jars.require_tool("java", "run Spark")
    version = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    key = hashlib.sha256(f"{java}\n{version}\n{pyspark.__version__}\n{pyspark.__file__}".encode()).hexdigest()[:16]
    return jars.cache_dir() / "cds" / f"spark-driver-{key}.jsa"


def build_archive(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    env = dict(os.environ, SPARK_SUBMIT_OPTS=f"-XX:ArchiveClassesAtExit={partial} {QUICK_COMPILER}")
    proc = subprocess.run([sys.executable, "-c", _TRAINING_RUN], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        raise RuntimeError(
            f"building the Spark class-data archive failed (exit {proc.returncode}):\n"
            f"{(proc.stdout + proc.stderr)[-3000:]}"
        )
    partial.replace(path)  # whole or not at all: a JVM never maps a half-written archive


class SparkJvmOptions:
    """Builds the archive in the background (once, if it is not cached) and then sets ``SPARK_SUBMIT_OPTS``."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._path: Path | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._build, name="spark-cds", daemon=True)
            self._thread.start()

    def _build(self) -> None:
        import fcntl

        try:
            path = archive_path()
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path.with_name(path.name + ".lock"), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # one build, whatever the number of pytest-xdist workers
                if not path.exists():
                    build_archive(path)
            self._path = path
        except BaseException as e:  # noqa: BLE001 - reported by apply()
            self._error = e

    def apply(self) -> str:
        """Wait for the archive, put the options in this process's environment (children inherit them)."""
        self.start()
        self._thread.join()
        if self._error is not None:
            raise RuntimeError("the Spark class-data archive for the tests could not be built") from self._error
        options = f"-XX:SharedArchiveFile={self._path} {QUICK_COMPILER} {NO_SPARK_UI}"
        current = os.environ.get("SPARK_SUBMIT_OPTS", "")
        if options not in current:
            os.environ["SPARK_SUBMIT_OPTS"] = f"{current} {options}".strip()
        return options
