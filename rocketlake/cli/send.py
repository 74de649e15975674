"""``rocketlake send``: test messages into a topic, to try an ingestion on a cluster (the tutorial's, the demo's).

They are sent as a producer sends them (SEND_MESSAGE_V2 through rocketlake's wire client, round robin over the
topic's writable queues), so what lands is what an application's messages would be. Not a producer for production
traffic: no retries on another broker, no batching.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.errors import TopicNotExist
from rocketlake.rocketmq.send import OutgoingMessage

#: What ``{i}`` in a body or a key becomes: the message's number in this command, from 0.
NUMBER = "{i}"
DEFAULT_BODY = '{"n": {i}}'
#: A window key of one-minute windows (``rocketlake backfill``'s FROM and TO), in UTC.
MINUTE_KEY = "%Y-%m-%d-%H:%M"


def numbered_messages(
    topic: str, count: int, body: str = DEFAULT_BODY, tags: str | None = None, keys: str | None = None
) -> Iterator[OutgoingMessage]:
    """``count`` messages whose body and keys have ``{i}`` replaced by their number (a plain replacement: the
    braces of a JSON body stay as they are)."""
    for i in range(count):
        yield OutgoingMessage(
            topic,
            body.replace(NUMBER, str(i)).encode(),
            tags=tags,
            keys=[keys.replace(NUMBER, str(i))] if keys else (),
        )


def ensure_topic(client: RocketMQClient, topic: str, queues: int) -> bool:
    """Create ``topic`` with ``queues`` queues on every broker unless the name server routes it; True if created."""
    try:
        client.route(topic, refresh=True)
        return False
    except TopicNotExist:
        client.create_topic(topic, queues)
        return True


def minute_key(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime(MINUTE_KEY)
