"""Messages a run did not consume: what is kept of them, and where they go.

In CLUSTERING a failed message is sent back (CONSUMER_SEND_MSG_BACK) once the window's Delta commit is
made and before the materialization and the offsets: the broker parks it in ``%RETRY%<group>`` with the
delay level of its attempt, or moves it to ``%DLQ%<group>`` when ``reconsume_times`` has reached
``max_reconsume_times``. In BROADCASTING nothing is sent back (as in RocketMQ). Either way every failure
of a window is a row of the failures table ``<table>_failures`` (replaced with the window, like the table's
own slice), with its error: what the dead-letter table's ``last_error`` and a person read.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketlake.resources.rocketmq.message_queue import MessageQueue

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
