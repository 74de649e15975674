"""A SparkSession with Delta Lake, as a Dagster resource and as a plain function.

Delta's jars are resolved with Maven (see ``resources.jars``) and handed to Spark as files
(``spark.jars``) rather than ``spark.jars.packages``, so a session starts without Ivy and without
network once the cache is warm. Python workers must run this very interpreter, or they import
another environment's site-packages.
"""

from __future__ import annotations

import os
import sys
import threading

from dagster import ConfigurableResource
from pydantic import Field
from pyspark.sql import SparkSession

from rocketlake.resources import jars

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
    # default, sized for clusters; on a local master that first snapshot of a run took 20 s instead of 10.
    "spark.databricks.delta.snapshotPartitions": "1",
}


def spark_session(master: str = "local[*]", conf: dict[str, str] | None = None,
                  app_name: str = "rocketlake") -> SparkSession:
    """The process's SparkSession with Delta configured (created on first call, then reused).

    Spark allows one active session per JVM; asking again returns it, with ``conf`` applied where
    Spark allows runtime changes.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    with _lock:
        active = SparkSession.getActiveSession()
        if active is not None:
            return active
        delta_jars = jars.resolve(jars.delta_jar_set())
        builder = SparkSession.builder.master(master).appName(app_name)
        settings = {**(LOCAL_DEFAULTS if master.startswith("local") else {}), **DELTA_CONF, **(conf or {})}
        extra = settings.pop("spark.jars", "")
        settings["spark.jars"] = ",".join([*map(str, delta_jars), *filter(None, extra.split(","))])
        for key, value in settings.items():
            builder = builder.config(key, value)
        return builder.getOrCreate()


class SparkResource(ConfigurableResource):
    """Spark for rocketlake's jobs: ``local[*]`` by default, any master by configuration.

    Examples:
        .. code-block:: python

            defs = Definitions(assets=[...], resources={"spark": SparkResource(master="spark://host:7077",
                                                                              conf={"spark.executor.memory": "4g"})})
    """

    master: str = Field(default="local[*]", description="Spark master URL: local[N], spark://, k8s://, yarn.")
    app_name: str = Field(default="rocketlake", description="Application name shown in Spark's UI.")
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark configuration, applied last.")

    def session(self) -> SparkSession:
        return spark_session(self.master, self.conf, self.app_name)
