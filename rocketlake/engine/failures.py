"""Messages a run did not consume: what is kept of them, and where they go.

In CLUSTERING a failed message is sent back (CONSUMER_SEND_MSG_BACK) once the window's Delta commit is
made and before the materialization and the offsets: the broker parks it in ``%RETRY%<group>`` with the
delay level of its attempt, or moves it to ``%DLQ%<group>`` when ``reconsume_times`` has reached
``max_reconsume_times``. When the broker that stores it does not take that (down, paused, an error answer), the
run produces it into ``%RETRY%<group>`` on another broker instead, as Java's push consumer does
(:func:`retry_message`). In BROADCASTING nothing is sent back (as in RocketMQ). Either way every failure
of a window is a row of the failures table ``<table>_failures`` (replaced with the window, like the table's
own slice), with its error: what the dead-letter table's ``last_error`` and a person read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rocketlake.rocketmq.message import (
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    retry_topic,
)
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.send import RetryMessage

SENT_BACK = "sent_back"
DEAD_LETTERED = "dead_lettered"
FAILED = "failed"  # BROADCASTING: kept, not sent back


@dataclass(frozen=True)
class FailedMessage:
    """What a send-back needs of a message (and what the log says of it)."""

    queue: MessageQueue
    queue_offset: int
    offset_msg_id: str
    msg_id: str
    origin_topic: str
    reconsume_times: int
    outcome: str
    error: str

    @property
    def commit_log_offset(self) -> int:
        return commit_log_offset_of(self.offset_msg_id)

    @property
    def original_topic(self) -> str:  # the name ``BrokerClient.consumer_send_msg_back`` reads
        return self.origin_topic


@dataclass(frozen=True)
class FailedContent:
    """A failed message as the run read it: what producing it into the retry topic takes, when the broker that
    stores it does not take the send-back (``ingest.send_back``)."""

    body: bytes
    tags: str | None
    keys: str | None  # the ``keys`` column: the keys joined by a space
    origin_offset_msg_id: str  # the ``origin_offset_msg_id`` column: the stored message it is or came from
    properties: Mapping[str, str] | None = None  # every property, when the run read them (``properties`` column)


#: Java's ``delayLevelWhenNextConsume`` default: the broker's (and the fallback's) level is 3 + reconsume times.
FIRST_DELAY_LEVEL = 3
_INT_MAX = 2**31 - 1


def retry_message(group: str, failure: FailedMessage, content: FailedContent, max_reconsume_times: int) -> RetryMessage:
    """``failure`` as Java's push consumer produces a message into ``%RETRY%<group>`` when the broker that stores it
    does not take CONSUMER_SEND_MSG_BACK (``DefaultMQPushConsumerImpl#sendMessageBackAsNormalMessage``): the body
    and properties read, ``RETRY_TOPIC`` the original topic, ``ORIGIN_MESSAGE_ID`` the original's offset id (as
    the broker sets it on CONSUMER_SEND_MSG_BACK; Java's fallback puts the msgId, which two messages a producer's
    retry stored share, and the copy must name the one it came from), ``RECONSUME_TIME`` one more,
    ``MAX_RECONSUME_TIMES``, no ``TRAN_MSG``, delay level 3 + reconsume times.

    The broker stores it in the retry topic, or in ``%DLQ%<group>`` when its reconsume times are over the maximum
    (``SendMessageProcessor#handleRetryAndDLQ``). A dead letter is one already (its attempts are over): an orderly
    queue's message, whose attempts its suspension counted and not its reconsume times, is produced with one more
    than the maximum, as Java's ``ConsumeMessageOrderlyService#sendMessageBack`` produces its own.

    Properties the run did not read (no ``properties`` column) are rebuilt from the columns it has: ``TAGS``, ``KEYS``
    and ``UNIQ_KEY`` (the msgId, unless it is the broker's offset id); the user's own are then not carried, nor is
    the message's flag (the source has no such column), which Java copies.
    """
    if content.properties is not None:
        props = dict(content.properties)
    else:
        props = {name: value for name, value in ((PROPERTY_TAGS, content.tags), (PROPERTY_KEYS, content.keys)) if value}
        if failure.msg_id != failure.offset_msg_id:
            props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = failure.msg_id
    origin = content.origin_offset_msg_id or failure.offset_msg_id
    props.pop(PROPERTY_TRANSACTION_PREPARED, None)
    reconsume = failure.reconsume_times + 1
    if failure.outcome == DEAD_LETTERED:
        reconsume = min(max(reconsume, max_reconsume_times + 1), _INT_MAX)
    props |= {
        PROPERTY_ORIGIN_MESSAGE_ID: origin,
        PROPERTY_RETRY_TOPIC: failure.origin_topic,
        "RECONSUME_TIME": str(reconsume),
        "MAX_RECONSUME_TIMES": str(max_reconsume_times),
        "DELAY": str(FIRST_DELAY_LEVEL + failure.reconsume_times),
    }
    return RetryMessage(retry_topic(group), content.body, props, reconsume, max_reconsume_times)


def commit_log_offset_of(offset_msg_id: str) -> int:
    """The commit-log offset inside an offset message id (``MessageDecoder#decodeMessageId``): the 8 bytes after
    the store host's address (4 bytes for IPv4, 32 hex chars in all; 16 for IPv6) and port."""
    text = offset_msg_id.strip()
    if len(text) == 32:
        return int(text[16:32], 16)
    if len(text) == 56:
        return int(text[40:56], 16)
    raise ValueError(f"{offset_msg_id!r} is not an offset message id (32 or 56 hex characters)")


def failures_table(table: str) -> str:
    return f"{table}_failures"
