"""One table per topic: an ingestion whose ``table`` and ``consumer_group`` name ``{topic}`` lands each topic of its
``topic_pattern`` (or ``topics``) in a table of its own, as Iceberg's Kafka Connect sink routes topics to tables.

Each topic becomes an ingestion of its own, made from the configured one: its table (``raw_{topic}`` ->
``raw_orders_eu``), its group (``lake_{topic}`` -> ``lake_orders-eu``), hence its own ledger, offsets, retry and
dead-letter topics, checks, schedule and lineage node. Nothing else changes: below this module a table per topic is
an ordinary one-topic ingestion.

Which topics there are is the name server's answer when the definitions load (``dagster.topic_tables`` keeps it
for the runs the code location launches); a topic created later gets its table when they load again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from rocketlake.engine.config import IngestionConfig, RocketLakeConfig
from rocketlake.engine.config.common import TABLE_NAME, TOPIC_FIELD
from rocketlake.engine.topics import subscribed_topics
from rocketlake.rocketmq.errors import InvalidName, TopicNotExist
from rocketlake.rocketmq.validators import check_consumer_group


def per_topic(cfg: IngestionConfig) -> bool:
    """Whether ``cfg`` lands each of its topics in a table of its own."""
    return TOPIC_FIELD in cfg.table


def table_of(template: str, topic: str) -> str:
    """The table of ``topic`` (as users name it): ``{topic}`` replaced by the topic, every character but letters,
    digits and ``_`` made ``_`` (RocketMQ allows ``-``, ``|`` and ``%`` in names; tables and asset keys do not)."""
    return template.replace(TOPIC_FIELD, re.sub(r"[^A-Za-z0-9_]", "_", topic))


def topics_now(cfg: IngestionConfig, client) -> list[str]:
    """The topics ``cfg`` names, or those of the name server's list its pattern matches now, as users name them
    (without the cluster's namespace); none when a pattern matches none yet."""
    try:
        return [cfg.plain(t) for t in subscribed_topics(cfg, client)]
    except TopicNotExist:
        return []


def expand(config: RocketLakeConfig, topics: Mapping[str, Sequence[str]]) -> RocketLakeConfig:
    """``config`` with each ingestion that lands a table per topic replaced by one ingestion per topic of
    ``topics[name]`` (users' names), named after its table; ValueError naming both sides of a clash (two topics
    that make one table name, or a table another ingestion has)."""
    if not any(per_topic(ing) for ing in config.ingestions.values()):
        return config
    out: dict[str, IngestionConfig] = {}
    made_by: dict[str, str] = {}  # each table, and each ingestion name, -> what made it, for a clash's sentence

    def add(key: str, table: str, ing: IngestionConfig, why: str) -> None:
        for taken in (f"table {table!r}", f"ingestion name {key!r}"):
            if taken in made_by:
                raise ValueError(f"ingestions: {why} and {made_by[taken]} both make {taken}")
            made_by[taken] = why
        out[key] = ing

    for name, ing in config.ingestions.items():
        if not per_topic(ing):
            add(name, ing.table, ing, f"ingestion {name!r}")
    for name, ing in config.ingestions.items():
        if per_topic(ing):
            for topic in sorted(set(topics.get(name, ()))):
                table = table_of(ing.table, topic)
                add(table.replace(".", "__"), table, one_topic(ing, topic, table), f"topic {topic!r} of {name!r}")
    return config.model_copy(update={"ingestions": out})


def one_topic(cfg: IngestionConfig, topic: str, table: str) -> IngestionConfig:
    """``cfg``, a table per topic, as the ingestion of ``topic`` (a user's name) into ``table``; ValueError when the
    names the rule makes from the topic are not valid (a table must start with a letter or ``_``; a group has
    RocketMQ's length and characters)."""
    group = cfg.consumer_group.replace(TOPIC_FIELD, topic)
    if not re.fullmatch(TABLE_NAME, table):
        raise ValueError(
            f"topic {topic!r} makes table {table!r}, which is not a name or database.name of [A-Za-z_][A-Za-z0-9_]*: "
            f"put a prefix before {{topic}} in table {cfg.table!r}"
        )
    try:
        check_consumer_group(group)
    except InvalidName as e:
        raise ValueError(f"topic {topic!r} makes consumer group {group!r}: {e}") from None
    wrapped = f"{cfg.namespace}%{topic}" if cfg.namespace else topic
    queues = [q.split("/", 1)[1] for q in cfg.allocate_message_queue_list or [] if q.split("/", 1)[0] == topic]
    return cfg.model_copy(
        update={
            "topic": wrapped,
            "topics": [],
            "topic_pattern": None,
            "table": table,
            "consumer_group": group,
            "allocate_message_queue_list": queues if cfg.allocate_message_queue_list is not None else None,
        }
    )
