"""Admin-side bodies and headers: topics, subscription groups, queue locks, consume stats (sans I/O).

* UPDATE_AND_CREATE_TOPIC (17): ``CreateTopicRequestHeader`` (reference 2.14).
* UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): body = ``SubscriptionGroupConfig`` JSON, no header
  (``MQClientAPIImpl#createSubscriptionGroup``); fields common to 4.9.x and 5.x only.
* LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42): ``LockBatchRequestBody`` / ``UnlockBatchRequestBody``,
  answer ``LockBatchResponseBody{lockOKMQSet}`` (reference 2.12).
* GET_CONSUME_STATS (208): body ``ConsumeStats``, a map keyed by MessageQueue *objects* in
  fastjson's dialect (reference 2.15), read with :mod:`.fastjson`. The broker reports a
  missing consumer offset as 0 there (``consumerOffset < 0 -> 0``).
* GET_BROKER_RUNTIME_INFO (28): no header; body ``KVTable`` JSON, ``{"table":{"name":"value",..}}``, every value
  a string (``mqadmin brokerStatus`` prints it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .codes import RequestCode
from .errors import InvalidArgument, ProtocolError
from .fastjson import FrozenObject, loads
from .frame import RemotingCommand
from .message_queue import MessageQueue
from .validators import check_group, check_topic

__all__ = [
    "PERM_READ",
    "PERM_WRITE",
    "ConsumeStats",
    "OffsetWrapper",
    "SubscriptionGroupConfig",
    "build_create_topic_request",
    "encode_lock_body",
    "parse_consume_stats",
    "parse_kv_table",
    "parse_lock_response",
]

PERM_READ = 4
PERM_WRITE = 2
_TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def build_create_topic_request(
    topic: str,
    *,
    read_queue_nums: int,
    write_queue_nums: int,
    perm: int = PERM_READ | PERM_WRITE,
    topic_filter_type: str = "SINGLE_TAG",
    topic_sys_flag: int = 0,
    order: bool = False,
    attributes: dict[str, str] | None = None,
) -> RemotingCommand:
    """UPDATE_AND_CREATE_TOPIC for one broker; idempotent on the broker for an identical config."""
    check_topic(topic)
    if read_queue_nums < 0 or write_queue_nums < 0:
        raise InvalidArgument(f"queue counts must be >= 0, got read={read_queue_nums} write={write_queue_nums}")
    if topic_filter_type not in _TOPIC_FILTER_TYPES:
        raise InvalidArgument(f"topic_filter_type must be one of {_TOPIC_FILTER_TYPES}, got {topic_filter_type!r}")
    attrs = "".join(f"+{k}={v}," for k, v in (attributes or {}).items()).rstrip(",")
    return RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": read_queue_nums,
            "writeQueueNums": write_queue_nums,
            "perm": perm,
            "topicFilterType": topic_filter_type,
            "topicSysFlag": topic_sys_flag,
            "order": order,
            "attributes": attrs or None,
        },
    )


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """``SubscriptionGroupConfig.java``: the fields 4.9.x and 5.x share, with Java's defaults."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def __post_init__(self) -> None:
        check_group(self.group_name)

    def encode(self) -> bytes:
        return _dumps(
            {
                "brokerId": self.broker_id,
                "consumeBroadcastEnable": self.consume_broadcast_enable,
                "consumeEnable": self.consume_enable,
                "consumeFromMinEnable": self.consume_from_min_enable,
                "groupName": self.group_name,
                "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
                "retryMaxTimes": self.retry_max_times,
                "retryQueueNums": self.retry_queue_nums,
                "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
            }
        )


def encode_lock_body(
    group: str, client_id: str, queues: Iterable[MessageQueue], *, only_this_broker: bool = False
) -> bytes:
    """``LockBatchRequestBody`` / ``UnlockBatchRequestBody`` (same fields)."""
    return _dumps(
        {
            "clientId": client_id,
            "consumerGroup": group,
            "mqSet": [mq.as_json_dict() for mq in sorted(set(queues))],
            "onlyThisBroker": only_this_broker,
        }
    )


def parse_lock_response(body: bytes) -> set[MessageQueue]:
    """``LockBatchResponseBody``: the queues this client now holds."""
    obj = loads(body) if body else {}
    if not isinstance(obj, dict):
        raise ProtocolError(f"lock answer is {obj!r}, expected an object")
    items = obj.get("lockOKMQSet") or []
    if not isinstance(items, list):
        raise ProtocolError(f"lockOKMQSet is {items!r}, expected a list")
    return {MessageQueue.from_json_dict(item) for item in items}


@dataclass(frozen=True, slots=True)
class OffsetWrapper:
    """``OffsetWrapper.java``: per queue, max offset, committed offset (0 when none), pull offset."""

    broker_offset: int
    consumer_offset: int
    pull_offset: int = 0
    last_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class ConsumeStats:
    """``ConsumeStats.java``: the group's progress on each queue, and its consume TPS."""

    offsets: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    def merged(self, other: ConsumeStats) -> ConsumeStats:
        """Both brokers' tables in one (queues never collide: the broker name is in the key)."""
        return ConsumeStats({**self.offsets, **other.offsets}, self.consume_tps + other.consume_tps)


def _int(obj: dict[str, Any], key: str) -> int:
    value = obj.get(key, 0)
    if type(value) is not int:
        raise ProtocolError(f"ConsumeStats offset {key} is {value!r}, expected an integer")
    return value


def parse_consume_stats(body: bytes) -> ConsumeStats:
    """Parse a GET_CONSUME_STATS body (object-keyed map, fastjson dialect)."""
    obj = loads(body) if body else {}
    if not isinstance(obj, dict):
        raise ProtocolError(f"ConsumeStats is {obj!r}, expected an object")
    table = obj.get("offsetTable") or {}
    if not isinstance(table, dict):
        raise ProtocolError(f"ConsumeStats.offsetTable is {table!r}, expected an object")
    offsets: dict[MessageQueue, OffsetWrapper] = {}
    for key, value in table.items():
        if not isinstance(key, FrozenObject) or not isinstance(value, dict):
            raise ProtocolError(f"ConsumeStats.offsetTable entry {key!r}: {value!r} is not queue -> offsets")
        offsets[MessageQueue.from_json_dict(key.as_dict())] = OffsetWrapper(
            broker_offset=_int(value, "brokerOffset"),
            consumer_offset=_int(value, "consumerOffset"),
            pull_offset=_int(value, "pullOffset"),
            last_timestamp=_int(value, "lastTimestamp"),
        )
    tps = obj.get("consumeTps", 0.0)
    if not isinstance(tps, (int, float)) or isinstance(tps, bool):
        raise ProtocolError(f"ConsumeStats.consumeTps is {tps!r}, expected a number")
    return ConsumeStats(offsets, float(tps))


def parse_kv_table(body: bytes) -> dict[str, str]:
    """A ``KVTable`` body (GET_BROKER_RUNTIME_INFO): name -> value, both strings."""
    obj = loads(body) if body else {}
    table = obj.get("table") if isinstance(obj, dict) else None
    if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in table.items()):
        raise ProtocolError(f'KVTable is {bytes(body)[:200]!r}, expected {{"table": {{name: value, ..}}}}')
    return dict(table)
