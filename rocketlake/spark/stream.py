"""``spark.readStream.format("rocketmq")``: the batch reader's chunks, planned by a stream reader with admission control.

The planner (Spark's long-lived Python process beside the driver) keeps the stream's position as offsets per
(topic, broker, queue) and asks the brokers for their queues' max offsets at each micro-batch; the tasks read each
queue's ``[start, end)`` exactly as a batch read does (``RocketMQReader.read``), so a stream's rows are the batch
reader's rows. Like Spark's Kafka source:

* ``maxOffsetsPerTrigger`` caps a micro-batch, spread over the queues in proportion to their backlog;
* ``Trigger.AvailableNow`` reads up to the max offsets the queues had when the query started, in batches of that
  cap, then stops;
* new queues (a topic that grew, a topic a ``topicPattern`` matches later) are read from their earliest offset.

Unlike Kafka's source, a stream with a ``consumerGroup`` commits the group's offsets to the brokers when Spark
commits a batch to the sink (``commit``, which Spark calls as it plans the next batch): ``mqadmin
consumerProgress`` then shows the stream's progress, one batch behind the sink.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from rocketlake.engine.planning import split_ranges
from rocketlake.engine.stream_options import StreamOffset, StreamOptions, with_topic
from rocketlake.rocketmq.errors import ProtocolError
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange
from rocketlake.spark.source import Chunk, RocketMQReader

try:  # Spark 4.2's read limits; an older Spark never gets here (``RocketMQDataSource.streamReader`` refuses it)
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - Spark 4.0/4.1
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]


def offset_of(positions: dict[MessageQueue, int]) -> StreamOffset:
    """The JSON Spark checkpoints: sorted, so that the same position is always the same text."""
    out: StreamOffset = {}
    for mq in sorted(positions):
        out.setdefault(mq.topic, {}).setdefault(mq.broker_name, {})[str(mq.queue_id)] = positions[mq]
    return out


def positions_of(offset: StreamOffset) -> dict[MessageQueue, int]:
    return {
        MessageQueue(topic, broker, int(queue)): int(value)
        for topic, brokers in offset.items()
        for broker, queues in brokers.items()
        for queue, value in queues.items()
    }


def capped(start: dict[MessageQueue, int], available: dict[MessageQueue, int], most: int) -> dict[MessageQueue, int]:
    """``available`` cut to at most ``most`` offsets past ``start`` in all, each queue's share in proportion to its
    backlog (the remainder to the largest backlogs first), as Spark's Kafka source rate-limits its partitions."""
    backlog = {mq: max(0, available[mq] - start.get(mq, available[mq])) for mq in available}
    total = sum(backlog.values())
    if total <= most:
        return dict(available)
    share = {mq: most * lag // total for mq, lag in backlog.items()}
    left = most - sum(share.values())
    for mq in sorted(backlog, key=lambda q: (-(backlog[q] - share[q]), q)):
        if left <= 0:
            break
        if share[mq] < backlog[mq]:
            share[mq] += 1
            left -= 1
    return {mq: start.get(mq, available[mq]) + share[mq] for mq in available}


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: StreamOptions):
        self.options = options
        self.target: dict[MessageQueue, int] | None = None  # Trigger.AvailableNow: where the query stops
        self.announced = False  # whether the brokers know the group (``_announce``)
        self.available: dict[MessageQueue, int] | None = None  # the max offsets ``latestOffset`` read last

    # ------------------------------------------------------------------ the planner's side

    def _client(self):
        from rocketlake.engine.broker_access import make_client

        return make_client(self.options.source)

    def _queues(self) -> list[MessageQueue]:
        from rocketlake.engine.topics import matching_topics

        client = self._client()
        topics = self.options.topics or tuple(matching_topics(self.options.topic_pattern, client.topics()))
        return sorted(mq for topic in topics for mq in client.queues(topic))

    def _max_offsets(self) -> dict[MessageQueue, int]:
        client = self._client()
        return {mq: client.get_max_offset(mq) for mq in self._queues()}

    def _first(self, mq: MessageQueue) -> int:
        """Where a queue the stream has no position for starts: ``startingOffsets``/``startingTimestamp`` for the
        queues of the query's start, the earliest offset for one found later (``latestOffset``)."""
        from rocketlake.engine.broker_access import BrokerStoreTimes
        from rocketlake.engine.windows import first_offset_at_or_after

        opts, client = self.options, self._client()
        lo, hi = client.get_min_offset(mq), client.get_max_offset(mq)
        if opts.starting_timestamp is not None:
            times = BrokerStoreTimes(client, opts.source.consumer_group)
            return first_offset_at_or_after(times, mq, opts.starting_timestamp, lo, hi)
        starting = opts.starting
        if starting == "latest":
            return hi
        if starting == "group":
            committed = client.query_consumer_offset(opts.source.consumer_group, mq)
            return lo if committed is None or committed < 0 else min(max(committed, lo), hi)
        if isinstance(starting, dict):
            given = starting.get(mq.topic, {}).get(mq.broker_name, {}).get(str(mq.queue_id))
            return lo if given is None else given
        return lo

    def initialOffset(self) -> dict:
        return offset_of({mq: self._first(mq) for mq in self._queues()})

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._max_offsets()

    def getDefaultReadLimit(self):
        most = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if most is None else ReadMaxRows(most)

    def latestOffset(self, start: dict, limit) -> dict:
        begun = positions_of(start)
        available = self.available = self._max_offsets()
        client = self._client()
        for mq in available:
            if mq not in begun:  # a queue found since: from its earliest offset
                begun[mq] = client.get_min_offset(mq)
        if self.target is not None:  # AvailableNow: nothing past what the queues held when the query started
            available = {mq: min(hi, self.target.get(mq, begun[mq])) for mq, hi in available.items()}
        available = {mq: max(hi, begun[mq]) for mq, hi in available.items()}
        for mq, at in begun.items():
            available.setdefault(mq, at)  # a queue no longer listed keeps its position
        if isinstance(limit, ReadMaxRows):
            available = capped(begun, available, limit.max_rows)
        return offset_of(available)

    def reportLatestOffset(self) -> dict | None:
        """What the queues held at the last ``latestOffset`` (Spark asks right after it): no second round of
        requests to every queue for a progress report."""
        return None if self.available is None else offset_of(self.available)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begun, ends = positions_of(start), positions_of(end)
        client = self._client()
        ranges = []
        for mq, hi in ends.items():
            lo = begun[mq] if mq in begun else client.get_min_offset(mq)
            if hi > lo:
                ranges.append(OffsetRange(mq, lo, hi))
        return [Chunk(r) for r in split_ranges(ranges, self.options.source.max_messages_per_partition)]

    def commit(self, end: dict) -> None:
        group = self.options.commit_group
        if group is None:
            return
        client = self._client()
        positions = positions_of(end)
        if not self.announced:
            self.announced = self._announce(group, sorted({mq.topic for mq in positions}))
        for mq, offset in positions.items():
            try:
                client.update_consumer_offset(group, mq, offset)
            except (ProtocolError, OSError) as e:
                # The sink holds the batch and Spark's checkpoint its end: the brokers' view of the group is for
                # monitoring only, and the next batch's commit brings it up to date.
                print(
                    f"rocketlake stream: offset {offset} of {mq} not committed for group {group}: {e}", file=sys.stderr
                )

    def _announce(self, group: str, topics: list[str]) -> bool:
        """One heartbeat of the group, then goodbye: the brokers create the group and its retry topic, as for any
        consumer of it, so that ``mqadmin consumerProgress`` can show it; the stream is no lasting member of it (it
        takes every queue, whoever else is in the group)."""
        from rocketlake.rocketmq.heartbeat import ConsumerData
        from rocketlake.rocketmq.message import retry_topic

        client, client_id = self._client(), f"rocketlake-stream@{group}"
        try:
            client.heart_beat(
                client_id, [ConsumerData.of(group, {**dict.fromkeys(topics, "*"), retry_topic(group): "*"})]
            )
            client.unregister_client(client_id, consumer_group=group)
        except (ProtocolError, OSError) as e:
            print(f"rocketlake stream: group {group} not announced to the brokers: {e}", file=sys.stderr)
            return False
        return True

    # ------------------------------------------------------------------ the tasks' side

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, Chunk):
            return iter(())
        return RocketMQReader(with_topic(self.options.source, partition.offsets.queue.topic)).read(partition)
