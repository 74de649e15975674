"""Which topics an ingestion lands now: those it names, or those of the name server's list its pattern matches.

Kept out of the configuration, which is only a contract: a ``topic_pattern`` is resolved by asking the name server,
at each run and each member's heartbeat, so a topic created later joins at the next window.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from rocketlake.rocketmq.errors import TopicNotExist
from rocketlake.rocketmq.validators import is_system_topic

if TYPE_CHECKING:
    from rocketlake.engine.config import IngestionConfig


#: Topics RocketMQ names ``RMQ_SYS_...`` are its own (transactions, traces, offsets), beyond ``TopicValidator``'s set.
_SYSTEM_PREFIX = "RMQ_SYS_"
#: Each broker makes ``<cluster>_REPLY_TOPIC`` for request-reply messages (``MixAll.REPLY_TOPIC_POSTFIX`` after "_").
_REPLY_SUFFIX = "_REPLY_TOPIC"


def matching_topics(pattern: str, names: Iterable[str], own: Collection[str] = ()) -> list[str]:
    """The topics of ``names`` that ``pattern`` matches whole, sorted; never a retry or dead-letter topic (``%...``)
    nor one of RocketMQ's own (``TopicValidator``'s system topics, ``RMQ_SYS_...``, and ``own``: the cluster's, see
    :func:`cluster_topics`)."""
    compiled = re.compile(pattern)
    return sorted(
        t
        for t in names
        if compiled.fullmatch(t) and not t.startswith(("%", _SYSTEM_PREFIX)) and not is_system_topic(t) and t not in own
    )


def cluster_topics(client) -> set[str]:
    """The topics brokers make for their cluster's own use and register with the name server (``TopicConfigManager``):
    one named after each cluster and each broker (``clusterTopicEnable``, ``brokerTopicEnable``: what the name server
    lists as system topics), and each cluster's reply topic. Asked afresh: a broker that joins brings its own."""
    info = client.cluster_info(refresh=True)
    return {*info.cluster_addr_table, *info.broker_addr_table} | {c + _REPLY_SUFFIX for c in info.cluster_addr_table}


def pattern_topics(pattern: str, client) -> list[str]:
    """The topics of the cluster's name server that ``pattern`` matches, RocketMQ's own left out (see above)."""
    return matching_topics(pattern, client.topics(), cluster_topics(client))


def subscribed_topics(cfg: IngestionConfig, client) -> list[str]:
    """The topics landed now: those named, or those of the name server's list the pattern matches (never a retry
    or dead-letter topic, nor one of RocketMQ's own); TopicNotExist when a pattern matches none."""
    if cfg.topic_pattern is None:
        return list(cfg.topic_names)
    if cfg.namespace is not None:  # the pattern matches the namespace's topics, by their names without it
        prefix = f"{cfg.namespace}%"
        inside = [n[len(prefix) :] for n in client.topics() if n.startswith(prefix)]
        found = [prefix + n for n in matching_topics(cfg.topic_pattern, inside)]
    else:
        found = pattern_topics(cfg.topic_pattern, client)
    if not found:
        raise TopicNotExist(f"no topic on cluster {cfg.cluster!r} matches topic_pattern {cfg.topic_pattern!r}")
    return found


def membership_topic_of(cfg: IngestionConfig, client) -> str:
    """The topic whose brokers list the group's members: the configured one, or the first a pattern matches now."""
    return cfg.membership_topic or subscribed_topics(cfg.members_config, client)[0]
