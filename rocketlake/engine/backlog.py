"""How far behind a group is on its retry topic and its dead-letter queue: messages waiting, and the oldest one's age.

Waiting = per queue, the broker's max offset minus the group's committed offset (its min offset when the group has
none): what ``mqadmin consumerProgress`` calls Diff. The age is the store time of the first waiting message of each
queue, read from the broker. For ``%DLQ%<group>`` the committed offsets are those of the ``<table>_dlq`` asset.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketlake.rocketmq.errors import TopicNotExist
from rocketlake.rocketmq.message_queue import MessageQueue


@dataclass(frozen=True)
class Backlog:
    topic: str
    waiting: int  # messages not consumed (retry) or not landed (dead letters) yet
    oldest_store_ms: int | None  # store time of the oldest of them (None: nothing waiting)
    total: int  # messages the topic holds (min to max offset)

    def age_seconds(self, now_ms: int) -> float | None:
        return None if self.oldest_store_ms is None else max(0.0, (now_ms - self.oldest_store_ms) / 1000)

    def describe(self, now_ms: int) -> str:
        if not self.waiting:
            return f"{self.topic}: nothing waiting ({self.total} held)"
        return (
            f"{self.topic}: {self.waiting} waiting, the oldest for {self.age_seconds(now_ms):.0f}s ({self.total} held)"
        )


def backlog_of(client, group: str, topic: str) -> Backlog:
    """The group's backlog on ``topic`` (a topic that does not exist yet has none)."""
    try:
        queues: list[MessageQueue] = client.queues(topic)
    except TopicNotExist:
        return Backlog(topic, 0, None, 0)
    waiting, total, oldest = 0, 0, None
    for mq in queues:
        lowest, highest = client.get_min_offset(mq), client.get_max_offset(mq)
        committed = client.query_consumer_offset(group, mq)
        position = max(lowest, committed if committed is not None else lowest)
        total += highest - lowest
        if position < highest:
            waiting += highest - position
            first = client.pull(mq, position, 1, consumer_group=group).messages
            if first:
                oldest = first[0].store_timestamp if oldest is None else min(oldest, first[0].store_timestamp)
    return Backlog(topic, waiting, oldest, total)
