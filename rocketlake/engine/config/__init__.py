"""``rocketlake.yaml``: the public configuration contract, validated before any run.

Every ``DefaultMQPushConsumer`` setting is accepted under its snake_case name with RocketMQ's
default and the range ``DefaultMQPushConsumerImpl.checkConfig`` enforces. A wrong file fails at
load with one line per problem naming the ingestion, the key, the value and what is allowed;
an unknown key is an error too, because a misspelt threshold silently left at its default is the
worst kind of configuration bug.

The contract in parts: ``common``, ``clusters``, ``lake``, ``landing``, ``ingestion``, ``loading`` (one module each)."""

from rocketlake.engine.config.clusters import (
    ClusterConfig,
    TlsConfig,
)
from rocketlake.engine.config.common import (
    CONFIG_ENV,
    DEFAULT_CONFIG,
    TABLE_NAME,
    AllocateStrategy,
    ConfigError,
    MetadataColumn,
)
from rocketlake.engine.config.ingestion import (
    NOT_SUPPORTED_VALUES,
    NOT_SUPPORTED_YET,
    PUSH_CONSUMER_RANGES,
    REFUSED_TABLE_PROPERTIES,
    SPARK_RESERVED_PROPERTIES,
    IngestionConfig,
    RunRetryConfig,
    dead_letter_config,
    in_namespace,
)
from rocketlake.engine.config.lake import (
    DEFAULT_LAKE_ROOT,
    LakeConfig,
    S3Config,
    SparkConfig,
)
from rocketlake.engine.config.landing import (
    CRON_PROBLEM,
    CRON_SHAPE,
    LAYOUT_REFUSED,
    MAX_CLUSTERING_COLUMNS,
    BodyConfig,
    LayoutConfig,
    WindowConfig,
)
from rocketlake.engine.config.loading import (
    RocketLakeConfig,
    config_path,
    load_config,
    parse_config,
)
from rocketlake.rocketmq.heartbeat import ConsumeFromWhere, MessageModel
from rocketlake.rocketmq.message import DLQ_GROUP_TOPIC_PREFIX

__all__ = [
    "AllocateStrategy",
    "BodyConfig",
    "CONFIG_ENV",
    "CRON_PROBLEM",
    "CRON_SHAPE",
    "ClusterConfig",
    "ConfigError",
    "ConsumeFromWhere",
    "DEFAULT_CONFIG",
    "DEFAULT_LAKE_ROOT",
    "DLQ_GROUP_TOPIC_PREFIX",
    "IngestionConfig",
    "LAYOUT_REFUSED",
    "LakeConfig",
    "LayoutConfig",
    "MAX_CLUSTERING_COLUMNS",
    "MessageModel",
    "MetadataColumn",
    "NOT_SUPPORTED_VALUES",
    "NOT_SUPPORTED_YET",
    "PUSH_CONSUMER_RANGES",
    "REFUSED_TABLE_PROPERTIES",
    "RocketLakeConfig",
    "RunRetryConfig",
    "S3Config",
    "SPARK_RESERVED_PROPERTIES",
    "SparkConfig",
    "TABLE_NAME",
    "TlsConfig",
    "WindowConfig",
    "config_path",
    "dead_letter_config",
    "in_namespace",
    "load_config",
    "parse_config",
]
