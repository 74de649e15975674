"""HEART_BEAT (34) body: who this client is and which groups it consumes for (sans I/O).

``HeartbeatData`` JSON (reference 2.9): ``clientID``, ``consumerDataSet`` (one ``ConsumerData``
per group: ``groupName``, ``consumeType``, ``messageModel``, ``consumeFromWhere``,
``subscriptionDataSet``, ``unitMode``), ``producerDataSet`` (``[{"groupName"}]``). The 5.x-only
keys ``heartbeatFingerprint``/``withoutSub`` are left out: their defaults (0 / false) select the
classic heartbeat that 4.9.x also speaks.

A heartbeat registers the client's connection with each group; it also makes the broker create
the group (``autoCreateSubscriptionGroup``) and its ``%RETRY%<group>`` topic. Until it has, a
5.3 broker refuses UPDATE_CONSUMER_OFFSET for the group with SUBSCRIPTION_GROUP_NOT_EXIST (26).
"""

from __future__ import annotations

import enum
import itertools
import json
import os
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .errors import InvalidArgument
from .filter import Subscription
from .validators import check_consumer_group, check_group

__all__ = [
    "ConsumeFromWhere",
    "ConsumeType",
    "ConsumerData",
    "MessageModel",
    "encode_heartbeat",
    "new_client_id",
]


class MessageModel(str, enum.Enum):
    """``MessageModel.java``."""

    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeType(str, enum.Enum):
    """``ConsumeType.java``: ACTIVELY = pull / lite pull, PASSIVELY = push (``CONSUME_POP`` 5.x only)."""

    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"
    CONSUME_POP = "CONSUME_POP"


class ConsumeFromWhere(str, enum.Enum):
    """``ConsumeFromWhere.java`` (the three deprecated names included: older clients send them)."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"


@dataclass(frozen=True, slots=True)
class ConsumerData:
    """One consumer group as announced in a heartbeat (``ConsumerData.java``).

    ``subscriptions`` maps each subscribed topic to its :class:`~.filter.Subscription`; build it
    with :meth:`of` from ``{topic: expression}``.
    """

    group: str
    subscriptions: tuple[Subscription, ...] = ()
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_type: ConsumeType = ConsumeType.CONSUME_ACTIVELY
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    unit_mode: bool = False

    def __post_init__(self) -> None:
        check_consumer_group(self.group)
        topics = [s.topic for s in self.subscriptions]
        if len(set(topics)) != len(topics):
            raise InvalidArgument(f"group {self.group!r} subscribes a topic twice: {sorted(topics)}")

    @classmethod
    def of(
        cls,
        group: str,
        subscriptions: dict[str, str | None] | Iterable[Subscription],
        **options: object,
    ) -> ConsumerData:
        """``ConsumerData.of("g", {"T": "TagA || TagB"}, message_model=MessageModel.BROADCASTING)``."""
        if isinstance(subscriptions, dict):
            subs = tuple(Subscription.parse(topic, expr) for topic, expr in subscriptions.items())
        else:
            subs = tuple(subscriptions)
        return cls(group, subs, **options)  # type: ignore[arg-type]

    def as_json_dict(self) -> dict[str, object]:
        return {
            "consumeFromWhere": self.consume_from_where.value,
            "consumeType": self.consume_type.value,
            "groupName": self.group,
            "messageModel": self.message_model.value,
            "subscriptionDataSet": [s.as_json_dict() for s in self.subscriptions],
            "unitMode": self.unit_mode,
        }


def encode_heartbeat(
    client_id: str,
    consumers: Sequence[ConsumerData] = (),
    producer_groups: Sequence[str] = (),
) -> bytes:
    """The HeartbeatData body, UTF-8 JSON with sorted keys like fastjson."""
    if not client_id or not client_id.strip():
        raise InvalidArgument("a heartbeat needs a non-blank client id")
    for group in producer_groups:
        check_group(group)
    data = {
        "clientID": client_id,
        "consumerDataSet": [c.as_json_dict() for c in consumers],
        "producerDataSet": [{"groupName": g} for g in producer_groups],
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


_client_counter = itertools.count()


def new_client_id(ip: str | None = None) -> str:
    """A client id shaped like Java's ``ClientConfig#buildMQClientId``: ``ip@pid#nanotime``.

    Unique per call (a counter is appended), so two clients in one process are two members.
    """
    if ip is None:
        from .unique_key import local_ip_bytes

        ip = socket.inet_ntoa(local_ip_bytes())
    return f"{ip}@{os.getpid()}#{time.time_ns()}#{next(_client_counter)}"
