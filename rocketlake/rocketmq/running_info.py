"""The body of a consumer's answer to GET_CONSUMER_RUNNING_INFO (``ConsumerRunningInfo``), as the Java client writes it.

``mqadmin consumerStatus`` and the RocketMQ Dashboard ask a group's clients for it through the broker, and decode
it with fastjson 1: fields in alphabetical order, nulls left out, every property a string, and ``mqTable`` keyed
by MessageQueue *objects*, written as bare JSON objects (``{{"brokerName":..,"queueId":..,"topic":..}:{..}}``),
which is not JSON Python's ``json`` can write; the maps are TreeMaps (queues by topic, broker, id; subscriptions
by ``topic@subString``). See ``remoting/.../protocol/body/ConsumerRunningInfo.java`` and ``ProcessQueueInfo.java``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from .filter import Subscription
from .message_queue import MessageQueue

#: Keys of ``ConsumerRunningInfo`` properties the Java client sets and mqadmin reads.
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"
PROP_CONSUMEORDERLY = "PROP_CONSUMEORDERLY"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"


@dataclass(frozen=True)
class ProcessQueueInfo:
    """A queue the consumer holds (``ProcessQueueInfo.java``); the cache figures are 0 for a consumer that caches
    nothing between its reads."""

    commit_offset: int
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mib: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    droped: bool = False
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0

    def as_json_dict(self) -> dict:
        return {
            "cachedMsgCount": self.cached_msg_count,
            "cachedMsgMaxOffset": self.cached_msg_max_offset,
            "cachedMsgMinOffset": self.cached_msg_min_offset,
            "cachedMsgSizeInMiB": self.cached_msg_size_in_mib,
            "commitOffset": self.commit_offset,
            "droped": self.droped,
            "lastConsumeTimestamp": self.last_consume_timestamp,
            "lastLockTimestamp": self.last_lock_timestamp,
            "lastPullTimestamp": self.last_pull_timestamp,
            "locked": self.locked,
            "transactionMsgCount": 0,
            "transactionMsgMaxOffset": 0,
            "transactionMsgMinOffset": 0,
            "tryUnlockTimes": self.try_unlock_times,
        }


@dataclass(frozen=True)
class ConsumeStatus:
    """One topic's rates (``ConsumeStatus.java``): per second, response times in ms."""

    pull_rt: float = 0.0
    pull_tps: float = 0.0
    consume_rt: float = 0.0
    consume_ok_tps: float = 0.0
    consume_failed_tps: float = 0.0
    consume_failed_msgs: int = 0

    def as_json_dict(self) -> dict:
        return {
            "consumeFailedMsgs": int(self.consume_failed_msgs),
            "consumeFailedTPS": float(self.consume_failed_tps),
            "consumeOKTPS": float(self.consume_ok_tps),
            "consumeRT": float(self.consume_rt),
            "pullRT": float(self.pull_rt),
            "pullTPS": float(self.pull_tps),
        }


def _json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _queue_key(mq: MessageQueue) -> str:
    return _json({"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic})


def encode_running_info(
    properties: Mapping[str, str],
    subscriptions: list[Subscription],
    queues: Mapping[MessageQueue, ProcessQueueInfo],
    status: Mapping[str, ConsumeStatus],
    user_info: Mapping[str, str] | None = None,
) -> bytes:
    """The ``ConsumerRunningInfo`` body, byte for byte in fastjson's form (no ``jstack``: nobody asked for one of a
    Python process). Property values must be strings: fastjson reads anything else as no value."""
    for key, value in properties.items():
        if not isinstance(value, str):
            raise TypeError(f"running-info property {key!r} must be a string, got {type(value).__name__}")
    ordered = sorted(queues.items(), key=lambda item: (item[0].topic, item[0].broker_name, item[0].queue_id))
    mq_table = "{" + ",".join(f"{_queue_key(mq)}:{_json(info.as_json_dict())}" for mq, info in ordered) + "}"
    seen: dict[str, Subscription] = {}
    for s in subscriptions:  # a TreeSet by topic@subString: one of each
        seen.setdefault(f"{s.topic}@{s.sub_string}", s)
    subscription_set = [seen[key].as_json_dict() for key in sorted(seen)]
    parts = [
        '"mqPopTable":{}',
        f'"mqTable":{mq_table}',
        f'"properties":{_json(dict(properties))}',
        f'"statusTable":{_json({topic: s.as_json_dict() for topic, s in sorted(status.items())})}',
        f'"subscriptionSet":{_json(subscription_set)}',
        f'"userConsumerInfo":{_json(dict(user_info or {}))}',
    ]
    return ("{" + ",".join(parts) + "}").encode("utf-8")
