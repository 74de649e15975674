"""``spark.readStream.format("rocketmq")``: the batch reader's chunks, planned by a stream reader with admission control.

The planner (Spark's long-lived Python process beside the driver) keeps the stream's position as offsets per
(topic, broker, queue) and asks the brokers for their queues' max offsets at each micro-batch; the tasks read each
queue's ``[start, end)`` exactly as a batch read does (``RocketMQReader.read``), so a stream's rows are the batch
reader's rows. Like Spark's Kafka source:

* ``maxOffsetsPerTrigger`` caps a micro-batch, spread over the queues in proportion to their backlog;
  ``maxBytesPerTrigger`` (as Delta's source has it) caps the bytes the batch's messages take in the brokers' store,
  read from the queues' entries (``QUERY_CONSUME_QUEUE``, what ``mqadmin queryCq`` shows);
* ``Trigger.AvailableNow`` reads up to the max offsets the queues had when the query started, in batches of that
  cap, then stops;
* new queues (a topic that grew, a topic a ``topicPattern`` matches later) are read from their earliest offset.

Unlike Kafka's source, a stream with a ``consumerGroup`` commits the group's offsets to the brokers when Spark
commits a batch to the sink (``commit``, which Spark calls as it plans the next batch): ``mqadmin
consumerProgress`` then shows the stream's progress, one batch behind the sink.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from rocketlake.engine.planning import split_ranges
from rocketlake.engine.stream_options import StreamOffset, StreamOptions, with_topic
from rocketlake.rocketmq.errors import ProtocolError
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange
from rocketlake.spark.source import Chunk, RocketMQReader

try:  # Spark 4.2's read limits; an older Spark never gets here (``RocketMQDataSource.streamReader`` refuses it)
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - Spark 4.0/4.1
    ReadAllAvailable = ReadMaxBytes = ReadMaxRows = None  # type: ignore[assignment,misc]
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


#: Queue entries asked of a broker at a time when measuring a batch in bytes (about 70 bytes of JSON each).
SIZES_PER_REQUEST = 2048


def bytes_capped(
    start: dict[MessageQueue, int],
    available: dict[MessageQueue, int],
    most: int,
    sizes: Callable[[MessageQueue, int, int], list[int]],
) -> dict[MessageQueue, int]:
    """``available`` cut so that the messages past ``start`` take at most ``most`` bytes in all, as the brokers store
    them (``sizes(mq, index, count)``: the stored sizes of a queue's messages from offset ``index``). Each queue's
    budget is in proportion to its backlog, and what one leaves unused goes to the largest backlogs left. At least one
    message when any waits: a message larger than the limit is a batch of its own, as Delta's source admits a file
    larger than its ``maxBytesPerTrigger``."""
    waiting = {mq: hi - start.get(mq, hi) for mq, hi in available.items() if hi > start.get(mq, hi)}
    total = sum(waiting.values())
    taken = dict.fromkeys(waiting, 0)
    measured: dict[MessageQueue, list[int]] = {mq: [] for mq in waiting}

    def take(mq: MessageQueue, budget: int) -> int:
        """Admit ``mq``'s next messages while they fit in ``budget``; the bytes they take."""
        used, known = 0, measured[mq]
        while taken[mq] < waiting[mq]:
            if taken[mq] == len(known):
                more = sizes(mq, start[mq] + len(known), min(waiting[mq] - len(known), SIZES_PER_REQUEST))
                if not more:  # no entry there (deleted meanwhile): nothing to measure, nothing admitted by size
                    break
                known.extend(more)
            if used + known[taken[mq]] > budget:
                break
            used += known[taken[mq]]
            taken[mq] += 1
        return used

    spare = 0
    for mq in sorted(waiting):
        budget = most * waiting[mq] // total
        spare += budget - take(mq, budget)
    for mq in sorted(waiting, key=lambda q: (-(waiting[q] - taken[q]), q)):
        if spare <= 0:
            break
        spare -= take(mq, spare)
    if waiting and not any(taken.values()):
        taken[max(sorted(waiting), key=lambda q: waiting[q])] = 1
    return {mq: start.get(mq, hi) + taken.get(mq, 0) for mq, hi in available.items()}


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
        from rocketlake.engine.topics import pattern_topics

        client = self._client()
        topics = self.options.topics or tuple(pattern_topics(self.options.topic_pattern, client))
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
        """The options' limit, for Spark to pass back to ``latestOffset`` (``ReadAllAvailable`` for ``Trigger.Once``).
        Spark's Python sources take one built-in limit: with both options, the rows; ``latestOffset`` applies
        the bytes too."""
        opts = self.options
        if opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(opts.max_offsets_per_trigger)
        if opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(opts.max_bytes_per_trigger)
        return ReadAllAvailable()

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
        if isinstance(limit, ReadAllAvailable):
            return offset_of(available)
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.max_offsets_per_trigger
        if rows is not None:
            available = capped(begun, available, rows)
        most_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.options.max_bytes_per_trigger
        if most_bytes is not None:
            available = bytes_capped(begun, available, most_bytes, client.stored_sizes)
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
            reached = client.heart_beat(
                client_id, [ConsumerData.of(group, {**dict.fromkeys(topics, "*"), retry_topic(group): "*"})]
            )
            client.unregister_client(client_id, consumer_group=group, brokers=list(reached))
        except (ProtocolError, OSError) as e:
            print(f"rocketlake stream: group {group} not announced to the brokers: {e}", file=sys.stderr)
            return False
        return True

    # ------------------------------------------------------------------ the tasks' side

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, Chunk):
            return iter(())
        return RocketMQReader(with_topic(self.options.source, partition.offsets.queue.topic)).read(partition)
