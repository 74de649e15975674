"""Consume traces, as RocketMQ's Java client writes them (``TraceDataEncoder``), for the messages a window landed.

With a cluster's ``trace: true``, each landing sends to the trace topic (``RMQ_SYS_TRACE_TOPIC`` unless the cluster
names another) a ``SubBefore`` and a ``SubAfter`` context per traced message, batched as the Java client's
``AsyncTraceDispatcher`` batches them: contexts joined into messages of at most 128,000 bytes, each message keyed by
the message ids and keys it traces, so ``mqadmin queryMsgTraceById`` and the dashboard find rocketlake's group as a
consumer of a message. A window of more than ``trace_max_per_window`` messages traces about that many, every n-th
offset of each queue (``SparkLake.landed_messages``, which reads them from the landing's files with delta-rs): about
300 bytes sent per traced message, 2.3-5.3% of a landing's time and CPU (``benchmarks/trace_cost.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

CONTENT = "\x01"  # TraceConstants.CONTENT_SPLITOR
FIELD = "\x02"  # TraceConstants.FIELD_SPLITOR
#: AsyncTraceDispatcher's maxMsgSize: a trace message holds contexts up to this many bytes.
MAX_TRACE_MESSAGE = 128_000
DEFAULT_REGION = "DefaultRegion"
#: ConsumeReturnType.SUCCESS's ordinal, the contextCode of a message consumed
SUCCESS = 0


@dataclass(frozen=True)
class Consumed:
    """A landed message, as a trace names it."""

    msg_id: str
    keys: str = ""  # the message's keys, space-separated as RocketMQ stores them
    reconsume_times: int = 0


@dataclass(frozen=True)
class TraceMessage:
    body: str
    keys: tuple[str, ...]  # the message ids and keys the contexts name: queryMsgTraceById looks them up


def encode(group: str, consumed: Consumed, request_id: str, timestamp_ms: int, cost_ms: int) -> str:
    """The ``SubBefore`` and ``SubAfter`` contexts of one consumed message (``TraceDataEncoder``)."""
    before = CONTENT.join(
        [
            "SubBefore",
            str(timestamp_ms),
            DEFAULT_REGION,
            group,
            request_id,
            consumed.msg_id,
            str(consumed.reconsume_times),
            consumed.keys,
        ]
    )
    after = CONTENT.join(
        [
            "SubAfter",
            request_id,
            consumed.msg_id,
            str(cost_ms),
            "true",
            consumed.keys,
            str(SUCCESS),
            str(timestamp_ms + cost_ms),
            group,
        ]
    )
    return before + FIELD + after + FIELD


def trace_messages(
    group: str, consumed: Iterable[Consumed], timestamp_ms: int, cost_ms: int, request_id: str | None = None
) -> Iterator[TraceMessage]:
    """The trace messages of ``consumed``, each at most ``MAX_TRACE_MESSAGE`` bytes of contexts (one context pair
    longer than that is a message of its own, as the Java dispatcher sends it)."""
    request_id = request_id or uuid.uuid4().hex.upper()
    body: list[str] = []
    size = 0
    keys: list[str] = []
    for c in consumed:
        contexts = encode(group, c, request_id, timestamp_ms, cost_ms)
        length = len(contexts.encode("utf-8"))
        if body and size + length > MAX_TRACE_MESSAGE:
            yield TraceMessage("".join(body), tuple(dict.fromkeys(keys)))
            body, size, keys = [], 0, []
        body.append(contexts)
        size += length
        keys.append(c.msg_id)
        keys.extend(k for k in c.keys.split(" ") if k)
    if body:
        yield TraceMessage("".join(body), tuple(dict.fromkeys(keys)))


def send_traces(client, topic: str, group: str, consumed: Sequence[Consumed], timestamp_ms: int, cost_ms: int) -> int:
    """Send the trace messages of ``consumed`` to ``topic`` with ``client`` (``RocketMQClient``); the messages sent."""
    from rocketlake.rocketmq.send import OutgoingMessage

    sent = 0
    for message in trace_messages(group, consumed, timestamp_ms, cost_ms):
        client.send(OutgoingMessage(topic=topic, body=message.body.encode("utf-8"), keys=message.keys))
        sent += 1
    return sent


def trace_landing(client, lake, entry, group: str, topic: str, most: int, started_ms: int) -> tuple[int, int]:
    """The consume traces of up to ``most`` messages ``entry`` landed (``lake.landed_messages``), sent to ``topic``:
    (messages traced, trace messages sent)."""
    import time

    consumed = lake.landed_messages(entry, most)
    now = int(time.time() * 1000)
    return len(consumed), send_traces(client, topic, group, consumed, started_ms, max(0, now - started_ms))
