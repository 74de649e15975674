"""Spark for rocketlake's Dagster jobs: a ``ConfigurableResource`` over ``rocketlake.spark.session``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr
from pyspark.sql import SparkSession

from rocketlake.delta import storage
from rocketlake.spark.session import connect_session, spark_session

if TYPE_CHECKING:
    from rocketlake.engine.config import LakeConfig, SparkConfig


class SparkResource(ConfigurableResource):
    """Spark for rocketlake's jobs: ``local[*]`` by default, any master by configuration.

    Examples:
        .. code-block:: python

            defs = Definitions(assets=[...], resources={"spark": SparkResource(master="spark://host:7077",
                                                                              conf={"spark.executor.memory": "4g"})})
    """

    master: str = Field(default="local[*]", description="Spark master URL: local[N], spark://, k8s://, yarn.")
    app_name: str = Field(default="rocketlake", description="Application name shown in Spark's UI.")
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="Extra Spark configuration, applied last. When a "
        "SparkSession is already running in the process, SQL settings are applied to it "
        "and a different master, name or static setting is refused.",
    )

    s3a: bool = Field(
        default=False,
        description="Put Hadoop's S3A connector (hadoop-aws and the AWS SDK it needs) "
        "on the class path, for a lake on s3a://.",
    )
    remote: str | None = Field(
        default=None,
        description="A Spark Connect server (sc://host:port) to open sessions on "
        "instead of starting Spark in the process; master and static settings are the "
        "server's (rocketlake spark-server).",
    )

    # The Spark Connect sessions this step opened: the server keeps a session (its analyzed plans, its local
    # checkpoints) for an hour after its last use unless the client releases it, so a run a minute leaving its own
    # filled the server's heap (see teardown_after_execution).
    _connect_sessions: list[SparkSession] = PrivateAttr(default_factory=list)

    @classmethod
    def of_config(cls, spark: SparkConfig, lake: LakeConfig) -> SparkResource:
        """The resource a configuration's ``spark`` block asks for, with S3A's jars for a lake on ``s3a://`` (its
        settings and keys reach a session when a run starts: ``delta.storage.apply_lake``)."""
        return cls(master=spark.master, s3a=storage.on_s3(lake.root), conf=spark.conf, remote=spark.remote)

    def session(self) -> SparkSession:
        if self.remote is not None:
            before = process_connect_session()
            session = connect_session(self.remote, self.conf)
            # PySpark hands the process's Connect session to whoever asks: one the process had (a notebook's, or this
            # step's from an earlier call) is not opened again here.
            if session is not before:
                self._connect_sessions.append(session)
            return session
        return spark_session(self.master, self.conf, self.app_name, s3a=self.s3a)

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        """Release the step's Spark Connect sessions on the server (``SparkSession.stop``: the server drops the
        session's state; the server itself runs on). A classic session is the process's, and ends with it."""
        while self._connect_sessions:
            self._connect_sessions.pop().stop()


def process_connect_session() -> SparkSession | None:
    """The Spark Connect session this process has open (its active or default one), or None."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    try:
        return ConnectSession.active()
    except PySparkRuntimeError:
        return None
