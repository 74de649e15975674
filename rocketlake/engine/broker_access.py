"""The pipeline's only door to the broker: bounds, store times, and exact-range pulls.

Everything here is keyed by ``MessageQueue`` (topic, broker name, queue id) and goes through the
pure-Python client in ``rocketmq``. Pulls ask the broker for every message (``*``) and
re-check the subscription's tags here, so every offset of a planned range is accounted for: a row
(matched or filtered) per offset, and an error if the broker skips or lacks one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from rocketlake.engine.identity import client_id, offset_store_path
from rocketlake.engine.offset_store import LocalOffsetStore
from rocketlake.engine.options import SourceOptionError, SourceOptions
from rocketlake.engine.topics import subscribed_topics
from rocketlake.engine.windows import first_offset_at_or_after
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.columnar import RawRecords
from rocketlake.rocketmq.errors import (
    ConnectionFailed,
    RangeUnreadable,
    RequestTimeout,
    SubscriptionGroupNotExist,
    TopicNotExist,
)
from rocketlake.rocketmq.filter import Subscription
from rocketlake.rocketmq.message import Message, is_retry_topic, retry_topic
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange
from rocketlake.rocketmq.range_reader import read_ranges

if TYPE_CHECKING:  # the configuration (pydantic, YAML) is not imported where Spark tasks only read: each worker pays it
    from rocketlake.engine.config import IngestionConfig

__all__ = [
    "BrokerStoreTimes",
    "GroupBroker",
    "LiveGroup",
    "MemberBroker",
    "RangeUnreadable",
    "group_broker",
    "make_client",
    "pull_chunks",
    "range_subscription",
    "resolve_ranges",
]


_clients: dict[tuple, RocketMQClient] = {}


def make_client(opts: SourceOptions) -> RocketMQClient:
    """The Spark tasks' client: one per settings and worker process.

    Executors cannot reach Dagster resources, so the driver hands the resource's settings over as
    source options (``RocketMQResource.source_options``: name server, ACL keys, the same timeout as
    the driver's client) and each worker builds its client from them once: Spark reuses its Python
    workers across tasks, and a fresh client per task would refetch routes and reopen connections.
    """
    credentials = _credentials(opts)
    key = (os.getpid(), opts.namesrv, credentials, opts.timeout_ms, opts.tls, opts.namespace_v2)
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = RocketMQClient(
            opts.namesrv,
            credentials=credentials,
            timeout=opts.timeout_ms / 1000,
            tls=opts.tls,
            namespace_v2=opts.namespace_v2,
        )
    return client


def _credentials(opts: SourceOptions):
    """The ACL keys: given in the options, or read from this worker's environment by the variables' names."""
    from rocketlake.rocketmq.acl import Credentials, KeysNotSet, credentials_from_environment

    if opts.access_key_env or opts.secret_key_env:
        try:
            return credentials_from_environment(opts.access_key_env, opts.secret_key_env)
        except KeysNotSet as e:
            names = (opts.access_key_env, opts.secret_key_env)
            raise SourceOptionError(
                f"the RocketMQ ACL keys are read from the environment variables {' and '.join(map(str, names))}, "
                f"and {' and '.join(e.names)} is not set in this Spark worker (pid {os.getpid()}): set it "
                "where the executors start (spark-env.sh, the worker's service), or in local mode in the process "
                "before its Spark session starts"
            ) from None
    if opts.access_key and opts.secret_key:
        return Credentials(opts.access_key, opts.secret_key)
    return None


class TopicRefused(ValueError):
    """A topic whose offsets offset windows cannot make exact: refused by name before anything is read."""


class StaticTopicRefused(TopicRefused):
    """A static topic (5.x logical queues)."""


class CompactionTopicRefused(TopicRefused):
    """A compaction topic (5.x ``cleanup.policy=COMPACTION``)."""


def compaction_refusal(topic: str, attributes: dict[str, str]) -> str | None:
    """Why ``topic`` cannot be landed, from its attributes, or None. A compaction topic keeps only each key's last
    message: the broker serves the compacted store in place of the log, so offsets between two kept messages read
    as nothing, a window's count and its offsets stop agreeing, and a range landed twice can differ."""
    if attributes.get("cleanup.policy", "").upper() != "COMPACTION":
        return None
    return (
        f"topic {topic} is a compaction topic (cleanup.policy=COMPACTION): the broker keeps only the last message of "
        "each key, so its offsets have gaps that offset windows cannot account for and rocketlake does not land it; "
        "nothing was read. Land a topic with cleanup.policy=DELETE (the default), or read the compacted topic's "
        "latest values with a consumer of its own"
    )


class BrokerStoreTimes:
    """``StoreTimeReader`` over a live cluster: what ``b(q, t)`` needs, one round trip per read."""

    def __init__(self, client: RocketMQClient, consumer_group: str):
        self.client = client
        self.consumer_group = consumer_group

    def min_offset(self, queue: MessageQueue) -> int:
        return self.client.get_min_offset(queue)

    def max_offset(self, queue: MessageQueue) -> int:
        return self.client.get_max_offset(queue)

    def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int:
        return self.client.search_offset(queue, timestamp_ms)

    def store_time(self, queue: MessageQueue, offset: int) -> int:
        result = self.client.pull(queue, offset, 1, consumer_group=self.consumer_group)
        if not result.messages or result.messages[0].queue_offset != offset:
            raise RangeUnreadable(
                f"{queue}: no message at offset {offset} (status {result.status}); "
                "the broker may have deleted it meanwhile"
            )
        return result.messages[0].store_timestamp


class GroupBroker(BrokerStoreTimes):
    """What a run of one ingestion needs from RocketMQ (``engine.ingest.Broker``) over a live cluster."""

    def __init__(
        self,
        client: RocketMQClient,
        topic: str | Callable[[], list[str]],
        consumer_group: str,
        with_retry_topic: bool,
        topic_may_be_absent: bool = False,
    ):
        super().__init__(client, consumer_group)
        self.cluster = client.namesrv_address  # written into the ledger: where the table's messages came from
        # The topics landed: one, or a function giving them now (several named, or a pattern's matches).
        self.topics = (lambda: [topic]) if isinstance(topic, str) else topic
        self.with_retry_topic = with_retry_topic
        self.topic_may_be_absent = topic_may_be_absent  # %DLQ%<group>: created by the broker's first dead letter
        self._accepted: set[str] = set()  # topics whose attributes were read: a cleanup policy never changes

    def subscribed_queues(self) -> list[MessageQueue]:
        """Readable queues of the topics, plus the group's retry topic (CLUSTERING) once it exists."""
        queues = []
        for topic in self.topics():
            try:
                queues += self.client.queues(topic)
            except TopicNotExist:
                if not self.topic_may_be_absent:
                    raise
                continue
            static = self.client.route(topic).static_brokers
            if static:
                raise StaticTopicRefused(
                    f"topic {topic} is a static topic (logical queues mapped onto queues of {', '.join(static)}), "
                    "which rocketlake does not land by offset windows yet: its offsets are logical, and a queue's "
                    "mapping can move; land a topic of physical queues"
                )
            if topic not in self._accepted:
                refusal = compaction_refusal(topic, self.client.topic_attributes(topic))
                if refusal:
                    raise CompactionTopicRefused(refusal)
                self._accepted.add(topic)
        if self.with_retry_topic:
            try:
                queues += self.client.queues(retry_topic(self.consumer_group))
            except TopicNotExist:
                pass  # created by the broker on the first send-back; nothing to read until then
        return sorted(queues)

    def pop_refusal(self) -> str | None:
        """Why the group cannot be landed by offset windows, or None: 5.x POP consumers share it (a group in POP
        mode, remoting POP consumers online in it, or POP traces of the group in the brokers' revive logs), taking
        messages one by one and acknowledging each. 5.x gRPC consumers are found by the last alone: a cluster-mode
        proxy keeps their heartbeats to itself, but the brokers log their receives (``rocketmq.pop_log``)."""
        group = self.consumer_group
        topics = self.topics()
        for topic in topics:
            try:
                pop = "POP" in self.client.message_request_modes(group, topic)
                consume_type = None if pop else self.client.consume_type(group, topic)
            except TopicNotExist:
                continue
            if pop or consume_type == "CONSUME_POP":
                why = (
                    "is in POP mode on it (mqadmin setConsumeMode, or the broker's defaultMessageRequestMode)"
                    if pop
                    else "has POP consumers online (remoting clients in POP mode)"
                )
                return _shared_with_pop(f"consumer group {group} {why} for topic {topic}")
        traced = self.client.pop_traces(group, topics)
        for topic in topics:
            if topic in traced:
                return _shared_with_pop(
                    f"consumer group {group} has popped messages of topic {topic} (POP checkpoints or acks of the "
                    "group in the brokers' revive log or timer topic: 5.x gRPC consumers, or other POP consumers)"
                )
        return None

    def committed_offset(self, queue: MessageQueue) -> int | None:
        return self.client.query_consumer_offset(self.consumer_group, queue)

    def commit_offset(self, queue: MessageQueue, offset: int) -> None:
        try:
            taken = self.client.update_consumer_offset(self.consumer_group, queue, offset)
        except SubscriptionGroupNotExist:
            # A broker that does not auto-create groups on offset updates: create it, then retry once.
            self.client.create_subscription_group(self.consumer_group, brokers=[queue.broker_name])
            taken = self.client.update_consumer_offset(self.consumer_group, queue, offset)
        if not taken:
            # A 5.x broker ignores commits of a queue it reset itself (mqadmin resetOffsetByTime) until the group's
            # next pull of it, which the run has not made (the reset came later, or it read nothing there). A pull
            # from the master, where the mark is, erases it; then the commit takes, so what the ledger says holds on
            # the broker too, unless the reset moved the group further forward, which stands.
            self.client.broker(queue.broker_name).pull(
                queue.topic, queue.queue_id, offset, 1, consumer_group=self.consumer_group
            )
            now = self.client.query_consumer_offset(self.consumer_group, queue)
            if now is not None and now >= offset:
                return
            if not self.client.update_consumer_offset(self.consumer_group, queue, offset):
                raise OffsetNotTaken(
                    f"broker {queue.broker_name} ignored the commit of group {self.consumer_group} "
                    f"at {offset} on {queue.key} twice (a server-side offset reset pending); the "
                    "next run commits it again"
                )

    def silent_brokers(self, queues) -> dict[str, str]:
        """One request to each broker of ``queues`` (its first queue's max offset): those that fail to connect or
        answer within the client's timeout, with the error."""
        silent = {}
        for name in sorted({q.broker_name for q in queues}):
            probe = min(q for q in queues if q.broker_name == name)
            try:
                self.client.get_max_offset(probe)
            except (ConnectionFailed, RequestTimeout) as e:
                silent[name] = str(e)
        return silent

    def masters(self, queues) -> dict[str, str]:
        return self.client.offsets_from_master(q.broker_name for q in queues)

    def send_back(self, failure, max_reconsume_times: int, delay_level: int = 0) -> None:
        # Delay level 0: the broker picks 3 + reconsume_times, as for Java's default delayLevelWhenNextConsume.
        self.client.consumer_send_msg_back(
            self.consumer_group, failure.queue, failure, delay_level, max_reconsume_times
        )

    def produce_retry(self, message, avoid: str) -> str:
        return self.client.send_retry(message, avoid=(avoid,)).queue.broker_name


class OffsetNotTaken(RuntimeError):
    """The broker keeps ignoring a commit: a server-side reset of the group is pending there."""


class MemberBroker(GroupBroker):
    """BROADCASTING: the broker for the messages, the member's local offset store for progress (the Java
    client's LocalFileOffsetStore); nothing is committed to the broker and there is no retry topic."""

    def __init__(
        self, client: RocketMQClient, topic: str | Callable[[], list[str]], consumer_group: str, store: LocalOffsetStore
    ):
        super().__init__(client, topic, consumer_group, with_retry_topic=False)
        self.store = store

    def committed_offset(self, queue: MessageQueue) -> int | None:
        return self.store.committed_offset(queue)

    def commit_offset(self, queue: MessageQueue, offset: int) -> None:
        self.store.commit_offset(queue, offset)

    def send_back(self, failure, max_reconsume_times: int, delay_level: int = 0) -> None:
        raise AssertionError("BROADCASTING never sends a message back")

    def produce_retry(self, message, avoid: str) -> str:
        raise AssertionError("BROADCASTING never sends a message back")


class LiveGroup:
    """``run.Group`` over a live cluster: the members a broker of the topic lists, and the orderly locks."""

    def __init__(self, client: RocketMQClient, cfg: IngestionConfig):
        self.client = client
        self.cfg = cfg

    def members(self) -> list[str]:
        from rocketlake.engine.assignment import membership
        from rocketlake.engine.config import MessageModel

        return membership(self.client, self.cfg) if self.cfg.message_model is MessageModel.CLUSTERING else []

    def locked(self, queues, log):
        from rocketlake.engine.orderly import queues_locked

        return queues_locked(self.client, self.cfg.consumer_group, client_id(self.cfg), queues, log=log)


def group_broker(client: RocketMQClient, cfg: IngestionConfig) -> GroupBroker:
    """What a run (or ``rocketlake offsets show``) of ``cfg`` reads its queues and progress through."""
    from rocketlake.engine.config import MessageModel

    topics = cfg.topic if cfg.topic is not None else (lambda: subscribed_topics(cfg, client))
    if cfg.message_model is MessageModel.BROADCASTING:
        return MemberBroker(client, topics, cfg.consumer_group, LocalOffsetStore(offset_store_path(cfg)))
    if cfg.dead_letters_of is not None:
        return GroupBroker(client, topics, cfg.consumer_group, with_retry_topic=False, topic_may_be_absent=True)
    return GroupBroker(client, topics, cfg.consumer_group, with_retry_topic=True)


def resolve_ranges(opts: SourceOptions) -> list[OffsetRange]:
    """The source's bounds (offsets or exact store-time boundaries) turned into one range per queue."""
    client = make_client(opts)
    times = BrokerStoreTimes(client, opts.consumer_group)
    ranges = []
    for mq in client.queues(opts.topic):
        lo, hi = times.min_offset(mq), times.max_offset(mq)
        start = _bound(opts.starting_offsets, mq, lo, hi, default=lo)
        end = _bound(opts.ending_offsets, mq, lo, hi, default=hi)
        if opts.starting_timestamp is not None:
            start = max(start, first_offset_at_or_after(times, mq, opts.starting_timestamp, lo, hi))
        if opts.ending_timestamp is not None:
            end = min(end, first_offset_at_or_after(times, mq, opts.ending_timestamp, lo, hi))
        if start < lo:
            raise RangeUnreadable(
                f"{mq}: starting offset {start} is below the queue's min offset {lo}; "
                f"offsets [{start}, {lo}) were already deleted by the broker"
            )
        if end > start:
            ranges.append(OffsetRange(mq, start, min(end, hi)))
    return ranges


def _bound(bound, mq: MessageQueue, lo: int, hi: int, default: int) -> int:
    if bound == "earliest":
        return lo
    if bound == "latest":
        return hi
    return bound.get(mq.broker_name, {}).get(mq.queue_id, default)


def range_subscription(opts: SourceOptions, offsets: OffsetRange) -> Subscription:
    """What the messages of ``offsets`` are matched against: the retry topic is subscribed with "*" whatever
    the main topic's expression (as the push consumer does)."""
    topic = offsets.queue.topic
    return Subscription.parse(topic, "*" if is_retry_topic(topic) else opts.subscription)


def _shared_with_pop(what: str) -> str:
    return (
        f"{what}: POP consumers take and acknowledge messages one by one, so the group's offsets do not say what was "
        "consumed and offset windows cannot land it exactly; nothing was read. Give the ingestion a consumer group of "
        "its own"
    )


def pull_chunks(opts: SourceOptions, offsets: OffsetRange) -> Iterator[list[Message] | RawRecords]:
    """The messages of ``[start, end)`` in offset order, one pull answer at a time, unfiltered: indexed
    records for :mod:`columnar <rocketlake.rocketmq.columnar>` where it can read them, decoded
    messages otherwise."""
    client = make_client(opts)
    for _, messages in read_ranges(
        client,
        [offsets],
        consumer_group=opts.consumer_group,
        batch_size=opts.pull_batch_size,
        max_messages_in_flight=opts.pull_threshold_for_queue,
        columnar=True,
    ):
        yield messages
