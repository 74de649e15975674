"""Where the lake lives: a local path, or S3 (``s3a://bucket/prefix``) through Hadoop's S3A connector for Spark and
object_store for delta-rs, with the same endpoint, region, path style and keys for both.

The keys are read from the environment variables the configuration names (``lake.s3.access_key_env``,
``lake.s3.secret_key_env``), as the ACL keys are, when a session or a reader needs them. Spark gets them in its
Hadoop configuration at run time, never in its Spark configuration (which its event log, its UI's environment page
and ``spark-submit`` arguments show) nor in data source options (which its plans show); delta-rs gets them in the
storage options of one reader. Nothing here logs or formats a key: errors name the variable, never its value.

A Spark Connect server (``spark.remote``) serves every run from one JVM that no run configures: it is started with
the bucket's settings (``spark.hadoop.fs.s3a.bucket.<bucket>.*``, no key among them) and with the keys in its
environment, as ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``, which the bucket's credentials provider reads
there. A run on it checks that the server has the lake's settings and refuses in one sentence when it has not.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rocketlake.engine.config import LakeConfig

S3_SCHEMES = ("s3a://",)
#: Schemes users write for S3 that Spark's Hadoop has no filesystem for: refused at load with the one that works.
OTHER_S3_SCHEMES = ("s3://", "s3n://")


class StorageKeysMissing(RuntimeError):
    """An environment variable the configuration names for the lake's keys is not set."""


def on_s3(root: str) -> bool:
    return root.startswith(S3_SCHEMES)


def _keys(lake: "LakeConfig", environ: Mapping[str, str]) -> tuple[str, str] | None:
    s3 = lake.s3
    if s3 is None or s3.access_key_env is None:
        return None  # the default credential chains (instance profile, AWS_* variables, web identity)
    missing = [name for name in (s3.access_key_env, s3.secret_key_env) if not environ.get(name)]
    if missing:
        raise StorageKeysMissing(
            f"the lake {lake.root} takes its S3 keys from ${s3.access_key_env} and ${s3.secret_key_env} "
            f"(lake.s3.access_key_env, lake.s3.secret_key_env); {' and '.join('$' + m for m in missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set in this process's environment"
        )
    return environ[s3.access_key_env], environ[s3.secret_key_env]


def bucket_of(root: str) -> str:
    return root[len("s3a://") :].split("/", 1)[0]


#: The keys of a run's own session: from its Hadoop configuration (``apply_lake``), and from nowhere else.
HADOOP_CONFIGURATION_PROVIDER = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
#: The keys of a Spark Connect server: from its environment (``server_keys``), AWS's variables, read by the AWS SDK
#: that Hadoop's S3A connector (3.4 and later) runs on.
ENVIRONMENT_CREDENTIALS_PROVIDER = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
#: Where a Spark Connect server's S3A settings go: Spark hands ``spark.hadoop.*`` settings to its Hadoop configuration.
SPARK_HADOOP_PREFIX = "spark.hadoop."


def hadoop_settings(lake: "LakeConfig", keys_from_environment: bool = False) -> dict[str, str]:
    """S3A's settings for the lake's bucket, without keys: endpoint, region, path style (none for a local lake).
    Per bucket (``fs.s3a.bucket.<bucket>.*``), so another bucket a user's code reads keeps its own. The keys come
    from the Hadoop configuration, or with ``keys_from_environment`` (a Spark Connect server) from the environment,
    and from nowhere else: no instance metadata probe."""
    if not on_s3(lake.root) or lake.s3 is None:
        return {}
    s3, prefix = lake.s3, f"fs.s3a.bucket.{bucket_of(lake.root)}."
    settings = {prefix + "endpoint.region": s3.region, prefix + "path.style.access": str(s3.path_style_access).lower()}
    if s3.endpoint:
        settings[prefix + "endpoint"] = s3.endpoint
        settings[prefix + "connection.ssl.enabled"] = str(s3.endpoint.startswith("https://")).lower()
    if s3.access_key_env:
        settings[prefix + "aws.credentials.provider"] = (
            ENVIRONMENT_CREDENTIALS_PROVIDER if keys_from_environment else HADOOP_CONFIGURATION_PROVIDER
        )
    return settings


def server_settings(lake: "LakeConfig") -> dict[str, str]:
    """The Spark settings a Spark Connect server for ``lake`` starts with (none for a local lake): the bucket's S3A
    settings, the keys read from the server's environment. No key: these are on its command line."""
    settings = hadoop_settings(lake, keys_from_environment=True)
    return {SPARK_HADOOP_PREFIX + key: value for key, value in settings.items()}


def server_keys(lake: "LakeConfig", environ: MutableMapping[str, str]) -> None:
    """Put the lake's keys, read from the variables the configuration names, in ``environ`` (a Spark Connect server's)
    as ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``, which its bucket's credentials provider reads; a
    session token there would be sent with them, for another account: it goes. Nothing for a local lake or for
    the default credential chains (no ``access_key_env``)."""
    if not on_s3(lake.root):
        return
    keys = _keys(lake, environ)
    if keys is not None:
        environ["AWS_ACCESS_KEY_ID"], environ["AWS_SECRET_ACCESS_KEY"] = keys
        environ.pop("AWS_SESSION_TOKEN", None)


class ServerWithoutLake(RuntimeError):
    """The Spark Connect server a run opens its session on was not started with the lake's S3 settings."""


def server_refusal(lake: "LakeConfig", server_setting: Callable[[str], str | None]) -> str | None:
    """Why a Spark Connect server whose settings ``server_setting`` reads cannot reach ``lake``, or None when it has
    the lake's settings (a local lake needs none)."""
    for key, wanted in server_settings(lake).items():
        has = server_setting(key)
        if has != wanted:
            return (
                f"the Spark Connect server (spark.remote) was not started with the S3 settings of the lake "
                f"{lake.root} ({key} is {'not set' if has is None else repr(has)} there, {wanted!r} in this "
                "configuration): start it with this configuration (rocketlake spark-server; the local runtime's: "
                "rocketlake local down, then local up) and run again"
            )
    return None


def apply_lake(spark: "SparkSession", lake: "LakeConfig", environ: Mapping[str, str] | None = None) -> None:
    """Put the lake's S3A settings and keys in the session's Hadoop configuration, which its jobs' tasks get: a run
    sets them on whatever session it is given (one a user's code started included), and Spark's configuration,
    which its event log and UI show, never holds the keys. A Spark Connect session's server holds its own since it
    started (``server_settings``, ``server_keys``): it is checked for them instead (``ServerWithoutLake``)."""
    if not on_s3(lake.root):
        return
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        refusal = server_refusal(lake, lambda key: spark.conf.get(key, None))
        if refusal is not None:
            raise ServerWithoutLake(refusal)
        return
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # no public PySpark API sets it
    for key, value in hadoop_settings(lake).items():
        hadoop.set(key, value)
    keys = _keys(lake, os.environ if environ is None else environ)
    if keys is not None:
        prefix = f"fs.s3a.bucket.{bucket_of(lake.root)}."
        hadoop.set(prefix + "access.key", keys[0])
        hadoop.set(prefix + "secret.key", keys[1])


def delta_rs_options(lake: "LakeConfig", environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """delta-rs (object_store) storage options for the lake's tables; None for a local lake."""
    if not on_s3(lake.root):
        return None
    options: dict[str, str] = {}
    s3 = lake.s3
    if s3 is not None:
        options["AWS_REGION"] = s3.region
        if s3.endpoint:
            options["AWS_ENDPOINT_URL"] = s3.endpoint
            options["AWS_ALLOW_HTTP"] = str(s3.endpoint.startswith("http://")).lower()
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = str(not s3.path_style_access).lower()
    keys = _keys(lake, os.environ if environ is None else environ)
    if keys is not None:
        options["AWS_ACCESS_KEY_ID"], options["AWS_SECRET_ACCESS_KEY"] = keys
    return options


#: Delta's setting naming the log store of s3a:// tables (delta-storage's S3SingleDriverLogStore when unset).
LOG_STORE_S3A = "spark.delta.logStore.s3a.impl"
#: Delta's log store that makes commits on S3 atomic across clusters (io.delta:delta-storage-s3-dynamodb).
DYNAMODB_LOG_STORE = "io.delta.storage.S3DynamoDBLogStore"


def several_writers_refusal(table_path: str, members: tuple[str, ...], log_store: str | None) -> str | None:
    """Why ``members`` (several deployments of one group) must not write ``table_path``, or None when they may.

    Delta on S3 commits version N by writing ``_delta_log/N.json``; its default S3 log store checks that the file
    is absent and then writes it, a check that holds within one Spark driver only (S3 had no put-if-absent when it
    was written, and delta-storage 4.4 still does not use S3's conditional writes). Two deployments each write
    version N, the second overwrites the first, and a window landed and recorded in the ledger is lost from the
    table. Within one deployment the group's pool (limit 1) keeps one writer; across deployments only a log store
    with its own mutual exclusion (DynamoDB's) is safe."""
    if len(members) < 2 or not on_s3(table_path) or log_store == DYNAMODB_LOG_STORE:
        return None
    return (
        f"the consumer group has {len(members)} members ({', '.join(members)}) and its table {table_path} is on "
        "S3, where Delta's default log store (S3SingleDriverLogStore) is safe with one writer only: two "
        "deployments' commits can overwrite each other and lose a landed window. Run this ingestion from one "
        f"deployment, or give every deployment Delta's DynamoDB log store ({LOG_STORE_S3A}: {DYNAMODB_LOG_STORE} "
        "and io.delta:delta-storage-s3-dynamodb on spark.jars; see the storage guide)"
    )
