"""What a member process tells the broker when an operator asks (``mqadmin consumerStatus``, the Dashboard).

The broker forwards GET_CONSUMER_RUNNING_INFO to the client's heartbeat connection; a Java push consumer answers
with its configuration, its subscriptions, the queues it holds (with their committed offsets) and its rates. A
rocketlake member answers the same for its ingestion: the queues that are its share now (as its runs compute
it), each with the offset the group has committed on the broker and, in ``userConsumerInfo``, the end of what
the table's ledger says was landed. It caches nothing between runs, so every cache figure is 0 and ``mqadmin
consumerStatus``'s blocked-queue check has nothing to warn about; its rates are in the Dagster observations.
"""

from __future__ import annotations

import time
from dataclasses import replace

from rocketlake.pipelines.config import IngestionConfig, MessageModel
from rocketlake.resources.rocketmq.filter import Subscription
from rocketlake.resources.rocketmq.message import retry_topic
from rocketlake.resources.rocketmq.message_queue import MessageQueue
from rocketlake.resources.rocketmq.running_info import (
    PROP_CLIENT_VERSION,
    PROP_CONSUME_TYPE,
    PROP_CONSUMEORDERLY,
    PROP_CONSUMER_START_TIMESTAMP,
    PROP_NAMESERVER_ADDR,
    PROP_THREADPOOL_CORE_SIZE,
    ConsumeStatus,
    ProcessQueueInfo,
    encode_running_info,
)

#: DefaultMQPushConsumer settings a member reports under their Java names (``MixAll.object2Properties``).
REPORTED_SETTINGS = ("consumer_group", "message_model", "consume_from_where", "consume_timestamp", "pull_batch_size",
                     "pull_threshold_for_queue", "pull_threshold_size_for_queue", "pull_threshold_for_topic",
                     "pull_threshold_size_for_topic", "consume_message_batch_max_size", "consume_thread_min",
                     "consume_thread_max", "max_reconsume_times", "consume_timeout",
                     "suspend_current_queue_time_millis", "allocate_message_queue_strategy", "instance_name",
                     "client_ip", "consume_orderly")

#: Landed offsets in ``userConsumerInfo``: ``landedOffset@<topic>/<broker>/<queue id>`` -> the end of the ranges
#: the table's ledger holds for that queue.
LANDED_PREFIX = "landedOffset@"
#: In ``userConsumerInfo``: what became of the last RESET_CONSUMER_CLIENT_OFFSET (oneway: nothing else answers it).
LAST_RESET = "rocketlake.lastReset"


def _java_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _text(value) -> str:
    value = getattr(value, "value", value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def properties(cfg: IngestionConfig, namesrv: str, started_ms: int, version: str) -> dict[str, str]:
    """The ``properties`` a Java push consumer reports, for this ingestion (every value a string)."""
    found = {_java_name(name): _text(getattr(cfg, name)) for name in REPORTED_SETTINGS
             if getattr(cfg, name, None) is not None}
    found.update({
        "namesrvAddr": namesrv, "language": "PYTHON", "unitMode": "false",
        "rocketlake.table": cfg.table, "rocketlake.topics": cfg.topic_label, "rocketlake.window": cfg.window.cron,
        PROP_CONSUMEORDERLY: _text(cfg.consume_orderly),
        PROP_THREADPOOL_CORE_SIZE: str(cfg.consume_thread_min),
        PROP_CONSUMER_START_TIMESTAMP: str(started_ms),
        PROP_CONSUME_TYPE: "CONSUME_PASSIVELY",
        PROP_NAMESERVER_ADDR: "".join(address + ";" for address in namesrv.split(";") if address),
        PROP_CLIENT_VERSION: version,
    })
    return found


def subscriptions(cfg: IngestionConfig, topics: list[str], started_ms: int) -> list[Subscription]:
    subs = [replace(Subscription.parse(topic, cfg.subscription), sub_version=started_ms) for topic in topics]
    if cfg.message_model is MessageModel.CLUSTERING:  # as DefaultMQPushConsumerImpl.copySubscription
        subs.append(replace(Subscription.parse(retry_topic(cfg.consumer_group), "*"), sub_version=started_ms))
    return subs


def running_info(cfg: IngestionConfig, topics: list[str], held: dict[MessageQueue, int | None],
                 landed: dict[MessageQueue, int], namesrv: str, started_ms: int, version: str,
                 extra: dict[str, str] | None = None) -> bytes:
    """The body of the answer: ``held`` maps each queue of the member's share to the group's committed offset
    (None: none yet, reported as -1 as the Java offset store does); ``landed``, queues to the ledger's end."""
    subs = subscriptions(cfg, topics, started_ms)
    queues = {mq: ProcessQueueInfo(commit_offset=-1 if offset is None else offset) for mq, offset in held.items()}
    user = {f"{LANDED_PREFIX}{mq.topic}/{mq.broker_name}/{mq.queue_id}": str(end)
            for mq, end in sorted(landed.items()) if mq in held}
    user.update(extra or {})
    return encode_running_info(properties(cfg, namesrv, started_ms, version), subs, queues,
                               {s.topic: ConsumeStatus() for s in subs}, user)


def now_ms() -> int:
    return int(time.time() * 1000)
