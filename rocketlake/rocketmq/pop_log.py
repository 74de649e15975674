"""What a broker's POP bookkeeping says about POP consumption: which groups popped or acknowledged which topics.

A 5.x broker records every POP it serves for its revive service, in a system topic of its cluster,
``rmq_sys_REVIVE_LOG_<cluster>`` (``PopAckConstants.buildClusterReviveTopic``, ``reviveQueueNum`` queues, 8 by
default): a checkpoint (tag ``ck``, ``PopMessageProcessor.buildCkMsg``) for each batch popped, an ack (tag ``ack``) or
batch ack (``bAck``) for each acknowledgement, each a JSON body naming the group (``c``) and the topic (``t``). Each is
due at the batch's revive time (``setDeliverTimeMs``): with the timer wheel on (5.x's default), it waits in the timer
topic ``rmq_sys_wheel_timer`` (its ``REAL_TOPIC`` property the revive log) until the batch's invisible time has
passed, then goes into the revive log. So a POP shows in the timer topic at once and in the revive log from its
invisible time on.

It is the one trace a gRPC consumer leaves on the brokers: a cluster-mode proxy keeps gRPC clients' heartbeats to
itself, so the brokers' consumer lists never show them, but their receives are POPs. Remoting POP consumers are found
by their heartbeats (``consume_type``); this finds the others. Not seen here: FIFO (orderly) pops, which write no
checkpoint, and a broker with ``popConsumerKVServiceEnable``, which keeps checkpoints in RocksDB instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from .message import PROPERTY_REAL_TOPIC, Message

#: ``PopAckConstants.REVIVE_TOPIC``
REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
#: ``TimerMessageStore.TIMER_TOPIC``: where a revive-log entry waits until it is due
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: ``PopAckConstants.CK_TAG``, ``ACK_TAG``, ``BATCH_ACK_TAG``
POP_TAGS = frozenset({"ck", "ack", "bAck"})
#: How many of the newest entries of each queue of those topics are read: one pull of a stock broker. A group popping
#: now adds an entry at every receive and every acknowledgement.
NEWEST_ENTRIES = 32


def revive_topic(cluster_name: str) -> str:
    return REVIVE_TOPIC_PREFIX + cluster_name


def popped_topics(entries: Iterable[Message], group: str) -> set[str]:
    """The topics ``group`` popped or acknowledged by POP, among ``entries`` of a revive log or of the timer topic;
    entries that are no revive-log entry (another tag, a user's timer message, a body that is not such JSON) are
    passed over."""
    topics: set[str] = set()
    for entry in entries:
        if entry.tags not in POP_TAGS:
            continue
        if not (entry.topic.startswith(REVIVE_TOPIC_PREFIX) or _due_in_revive_log(entry)):
            continue
        try:
            trace = json.loads(entry.body)
        except ValueError:
            continue
        if isinstance(trace, dict) and trace.get("c") == group and isinstance(trace.get("t"), str):
            topics.add(trace["t"])
    return topics


def _due_in_revive_log(entry: Message) -> bool:
    return entry.properties.get(PROPERTY_REAL_TOPIC, "").startswith(REVIVE_TOPIC_PREFIX)
