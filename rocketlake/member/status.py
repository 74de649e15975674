"""What a member process tells the broker when an operator asks (``mqadmin consumerStatus``, the Dashboard).

The broker forwards GET_CONSUMER_RUNNING_INFO to the client's heartbeat connection; a Java push consumer answers
with its configuration, its subscriptions, the queues it holds (with their committed offsets) and its rates. A
rocketlake member answers the same for its ingestion: the queues that are its share now (as its runs compute
it), each with the offset the group has committed on the broker and, in ``userConsumerInfo``, the end of what
the table's ledger says was landed. It caches nothing between runs, so every cache figure is 0 and ``mqadmin
consumerStatus``'s blocked-queue check has nothing to warn about. Its rates (``#Consumer RT&TPS#``) are those of
the ingestion's runs, with Java's spans (``ConsumerStatsManager``): per second over the last minute, and the
failed messages of the last hour (:func:`consume_status`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace

from rocketlake.engine.config import IngestionConfig, MessageModel
from rocketlake.rocketmq.filter import Subscription
from rocketlake.rocketmq.message import retry_topic
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.running_info import (
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
REPORTED_SETTINGS = (
    "consumer_group",
    "message_model",
    "consume_from_where",
    "consume_timestamp",
    "pull_batch_size",
    "pull_threshold_for_queue",
    "pull_threshold_size_for_queue",
    "pull_threshold_for_topic",
    "pull_threshold_size_for_topic",
    "consume_message_batch_max_size",
    "consume_thread_min",
    "consume_thread_max",
    "max_reconsume_times",
    "consume_timeout",
    "suspend_current_queue_time_millis",
    "allocate_message_queue_strategy",
    "instance_name",
    "client_ip",
    "consume_orderly",
)

#: Landed offsets in ``userConsumerInfo``: ``landedOffset@<topic>/<broker>/<queue id>`` -> the end of the ranges
#: the table's ledger holds for that queue.
LANDED_PREFIX = "landedOffset@"
#: In ``userConsumerInfo``: what became of the last RESET_CONSUMER_CLIENT_OFFSET (oneway: nothing else answers it).
LAST_RESET = "rocketlake.lastReset"
#: In ``userConsumerInfo``, for an ingestion of several topics: its rates, as ``statusTable`` would hold a topic's.
CONSUME_STATUS = "rocketlake.consumeStatus"


def _java_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _text(value) -> str:
    value = getattr(value, "value", value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def properties(cfg: IngestionConfig, namesrv: str, started_ms: int, version: str) -> dict[str, str]:
    """The ``properties`` a Java push consumer reports, for this ingestion (every value a string)."""
    found = {
        _java_name(name): _text(getattr(cfg, name))
        for name in REPORTED_SETTINGS
        if getattr(cfg, name, None) is not None
    }
    found.update(
        {
            "namesrvAddr": namesrv,
            "language": "PYTHON",
            "unitMode": "false",
            "rocketlake.table": cfg.table,
            "rocketlake.topics": cfg.topic_label,
            "rocketlake.window": cfg.window.cron,
            PROP_CONSUMEORDERLY: _text(cfg.consume_orderly),
            PROP_THREADPOOL_CORE_SIZE: str(cfg.consume_thread_min),
            PROP_CONSUMER_START_TIMESTAMP: str(started_ms),
            PROP_CONSUME_TYPE: "CONSUME_PASSIVELY",
            PROP_NAMESERVER_ADDR: "".join(address + ";" for address in namesrv.split(";") if address),
            PROP_CLIENT_VERSION: version,
        }
    )
    return found


def subscriptions(cfg: IngestionConfig, topics: list[str], started_ms: int) -> list[Subscription]:
    subs = [replace(Subscription.parse(topic, cfg.subscription), sub_version=started_ms) for topic in topics]
    if cfg.message_model is MessageModel.CLUSTERING:  # as DefaultMQPushConsumerImpl.copySubscription
        subs.append(replace(Subscription.parse(retry_topic(cfg.consumer_group), "*"), sub_version=started_ms))
    return subs


@dataclass(frozen=True)
class LandedWindow:
    """One window a run landed: when (its materialization's timestamp) and what became of its messages."""

    at_s: float
    rows: int
    failed: int  # sent back to %RETRY%<group>, or kept in the failures table (BROADCASTING)


@dataclass(frozen=True)
class EndedRun:
    end_s: float
    seconds: float


MINUTE_S, HOUR_S = 60.0, 3600.0


def consume_status(windows: list[LandedWindow], runs: list[EndedRun], now_s: float) -> ConsumeStatus:
    """The ingestion's rates as a Java push consumer reports its own (``ConsumerStatsManager.consumeStatus``):
    messages per second over the last minute, pulled (every message read) and consumed (landed, or failed); the
    response time of a consumption, here a run, averaged over the runs that ended in the last minute; the failed
    messages of the last hour. A pull's response time is not measured (the pulls are Spark's tasks): 0."""
    minute = [w for w in windows if now_s - MINUTE_S <= w.at_s <= now_s]
    ended = [r.seconds for r in runs if now_s - MINUTE_S <= r.end_s <= now_s]
    ok, failed = sum(w.rows for w in minute), sum(w.failed for w in minute)
    return ConsumeStatus(
        pull_tps=(ok + failed) / MINUTE_S,
        consume_rt=1000.0 * sum(ended) / len(ended) if ended else 0.0,
        consume_ok_tps=ok / MINUTE_S,
        consume_failed_tps=failed / MINUTE_S,
        consume_failed_msgs=sum(w.failed for w in windows if now_s - HOUR_S <= w.at_s <= now_s),
    )


def running_info(
    cfg: IngestionConfig,
    topics: list[str],
    held: dict[MessageQueue, int | None],
    landed: dict[MessageQueue, int],
    namesrv: str,
    started_ms: int,
    version: str,
    extra: dict[str, str] | None = None,
    rates: ConsumeStatus | None = None,
) -> bytes:
    """The body of the answer: ``held`` maps each queue of the member's share to the group's committed offset
    (None: none yet, reported as -1 as the Java offset store does); ``landed``, queues to the ledger's end;
    ``rates``, the ingestion's (:func:`consume_status`). A run's figures are not split by topic: they are its
    topic's, and with several topics they go to ``userConsumerInfo`` (``rocketlake.consumeStatus``) instead."""
    subs = subscriptions(cfg, topics, started_ms)
    queues = {mq: ProcessQueueInfo(commit_offset=-1 if offset is None else offset) for mq, offset in held.items()}
    user = {
        f"{LANDED_PREFIX}{mq.topic}/{mq.broker_name}/{mq.queue_id}": str(end)
        for mq, end in sorted(landed.items())
        if mq in held
    }
    user.update(extra or {})
    status = {s.topic: ConsumeStatus() for s in subs}
    if rates is not None and len(topics) == 1:
        status[topics[0]] = rates
    elif rates is not None:
        user[CONSUME_STATUS] = json.dumps(rates.as_json_dict(), sort_keys=True)
    return encode_running_info(properties(cfg, namesrv, started_ms, version), subs, queues, status, user)


def now_ms() -> int:
    return int(time.time() * 1000)
