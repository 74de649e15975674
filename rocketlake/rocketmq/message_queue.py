"""MessageQueue: the key of everything in rocketlake -- (topic, brokerName, queueId).

Queue ids repeat on every broker, so a queue id alone never identifies a queue. The order is
the Java one (``common/.../message/MessageQueue.java#compareTo``): topic, then broker name,
both by ``String.compareTo`` (UTF-16 code units), then the queue id as a number. Allocation
strategies sort queues before handing them out, so this order must be Java's exactly; for the
ASCII names RocketMQ allows it equals Python's ``str`` order, and non-ASCII names (brokers are
not validated) are compared by UTF-16 code units like Java.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import ProtocolError

__all__ = ["MessageQueue", "OffsetRange"]


def _java_order(text: str) -> bytes:
    # UTF-16-BE bytes sort like Java's code-unit comparison. Always bytes: an ASCII str key beside
    # a non-ASCII bytes key (brokers "a" and "é" of one topic) would not compare at all.
    return text.encode("utf-16-be", "surrogatepass")


@dataclass(frozen=True, slots=True, order=False)
class MessageQueue:
    """One queue of one topic on one broker (``MessageQueue.java``). Frozen, hashable, sortable."""

    topic: str
    broker_name: str
    queue_id: int

    def _key(self) -> tuple[bytes, bytes, int]:
        return (_java_order(self.topic), _java_order(self.broker_name), self.queue_id)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, MessageQueue):
            return NotImplemented
        return self._key() < other._key()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, MessageQueue):
            return NotImplemented
        return self._key() <= other._key()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, MessageQueue):
            return NotImplemented
        return self._key() > other._key()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, MessageQueue):
            return NotImplemented
        return self._key() >= other._key()

    def __str__(self) -> str:
        # MessageQueue#toString, also the key the consistent-hash strategy hashes.
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"

    @property
    def key(self) -> str:
        """``topic/broker/queueId``: the queue as a JSON object key (the ledger's origins and gaps).

        Topic names cannot contain ``/`` (``validators``) and the queue id is the last field, so
        :meth:`from_key` splits it back unambiguously even if a broker name has a ``/``.
        """
        return f"{self.topic}/{self.broker_name}/{self.queue_id}"

    @classmethod
    def from_key(cls, key: str) -> MessageQueue:
        topic, rest = key.split("/", 1)
        broker, queue_id = rest.rsplit("/", 1)
        return cls(topic, broker, int(queue_id))

    def as_json_dict(self) -> dict[str, Any]:
        """The fastjson form used in lock bodies and stats: ``{"brokerName","queueId","topic"}``."""
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json_dict(cls, obj: Any) -> MessageQueue:
        """Inverse of :meth:`as_json_dict`; raises ProtocolError on a malformed object."""
        if not isinstance(obj, dict):
            raise ProtocolError(f"message queue is {obj!r}, expected an object")
        topic, broker, queue_id = obj.get("topic"), obj.get("brokerName"), obj.get("queueId")
        if not isinstance(topic, str) or not isinstance(broker, str) or type(queue_id) is not int:
            raise ProtocolError(f"message queue {obj!r} lacks a string topic/brokerName or an int queueId")
        return cls(topic, broker, queue_id)


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """The offsets ``[start, end)`` of one queue: what a window covers, a Spark task reads, the ledger
    records and the commit advances over. One type from planning to the broker commit."""

    queue: MessageQueue
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"an offset range cannot end before it starts: {self}")

    @property
    def size(self) -> int:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        """The one serialized form (the ledger in Delta's commitInfo, the plan handed to Spark)."""
        q = self.queue
        return {
            "topic": q.topic,
            "broker_name": q.broker_name,
            "queue_id": q.queue_id,
            "start": self.start,
            "end": self.end,
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> OffsetRange:
        return cls(
            MessageQueue(obj["topic"], obj["broker_name"], int(obj["queue_id"])), int(obj["start"]), int(obj["end"])
        )
