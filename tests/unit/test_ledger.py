"""The ledger's one serialized form, reading it newest first, and the plan handed to Spark."""

from __future__ import annotations

import json
import pickle

import pytest

from rocketlake.engine.ledger import LedgerEntry, NewerLedger, WindowEntry, at_stake, history_of
from rocketlake.engine.options import SourceOptionError, decode_plan, encode_plan, parse_options
from rocketlake.rocketmq.message_queue import MessageQueue, OffsetRange
from rocketlake.spark.source import Chunk, RocketMQReader

A = MessageQueue("orders", "broker/a", 3)  # a '/' in a broker name must survive the queue's key
B = MessageQueue("%RETRY%g", "broker-b", 0)


def entry(run: str, *ranges: OffsetRange, group: str = "g", carried=(), **kw) -> LedgerEntry:
    return LedgerEntry(
        "orders", group, run, (WindowEntry("2026-11-23-10:00", 0, 60_000, tuple(ranges)),), carried=tuple(carried), **kw
    )


def test_an_entry_reads_back_as_written():
    old = entry("r0", OffsetRange(A, 0, 4))
    e = entry("r1", OffsetRange(A, 4, 9), OffsetRange(B, 0, 2), origin={A: 0, B: 0}, gaps={B: (0, 0)}, carried=[old])
    back = LedgerEntry.from_json(e.to_json(), version=7)
    assert back == LedgerEntry(e.ingestion, e.consumer_group, e.run_id, e.windows, e.origin, e.gaps, (old,), 7)
    assert back.self_sufficient and back.carried[0].windows == old.windows


def test_an_entry_written_before_carried_existed_is_not_self_sufficient():
    # The first ledger format (rocketlake <= 0.1): string queue keys, no "carried".
    v1 = {
        "rocketlake": 1,
        "ingestion": "orders",
        "consumer_group": "g",
        "run_id": "r1",
        "windows": [
            {
                "partition_key": "k",
                "start_ms": 0,
                "end_ms": 60000,
                "ranges": [{"topic": "orders", "broker_name": "broker/a", "queue_id": 3, "start": 0, "end": 4}],
            }
        ],
        "origin": {"orders/broker/a/3": 0},
        "gaps": {},
    }
    back = LedgerEntry.from_json(json.dumps(v1))
    assert back.origin == {A: 0} and back.windows[0].ranges == (OffsetRange(A, 0, 4),)
    assert not back.self_sufficient


@pytest.mark.parametrize("foreign", ["not json", '{"operation": "OPTIMIZE"}', '{"rocketlake": "yes"}', "null"])
def test_other_commits_are_not_entries(foreign):
    assert LedgerEntry.from_json(foreign) is None


def test_an_entry_of_a_newer_format_is_refused_not_skipped():
    """Skipped as someone else's commit, it would hide what a newer rocketlake landed, and a run would land it
    again: a run of an older rocketlake stops, saying what to do."""
    newer = entry("r9", OffsetRange(A, 0, 4)).to_json().replace('"rocketlake":1', '"rocketlake":2')
    assert newer != entry("r9", OffsetRange(A, 0, 4)).to_json()
    with pytest.raises(NewerLedger, match="format 2, written by a newer rocketlake.*upgrade rocketlake"):
        LedgerEntry.from_json(newer, version=12)


def test_history_stops_at_the_groups_newest_self_sufficient_entry():
    ancient = LedgerEntry.from_json(entry("r0", OffsetRange(A, 0, 1)).to_json().replace(',"carried":[]', ""), 1)
    assert not ancient.self_sufficient
    dead = LedgerEntry.from_json(entry("dead", OffsetRange(A, 1, 2)).to_json(), 2)
    newest = LedgerEntry.from_json(entry("r2", OffsetRange(A, 2, 3), carried=[dead]).to_json(), 3)  # one writer
    other_group = LedgerEntry.from_json(entry("x", OffsetRange(A, 0, 9), group="other").to_json(), 4)
    seen = []

    def newest_first():
        for e in (other_group, newest, dead, ancient):
            seen.append(e.run_id)
            yield e

    entries, complete = history_of(newest_first(), "g")
    assert complete and [e.run_id for e in entries] == ["dead", "r2"]
    assert seen == ["x", "r2", "dead"], "reading stops at the first commit below the newest self-sufficient entry"
    entries, complete = history_of([ancient], "g")
    assert not complete and [e.run_id for e in entries] == ["r0"]
    assert history_of([newest], "g", lowest_version_read=3)[1], "or when the caller read down to it"


def test_at_stake_keeps_entries_the_committed_offsets_have_not_passed():
    e1, e2 = entry("r1", OffsetRange(A, 0, 5)), entry("r2", OffsetRange(A, 5, 9))
    gap = entry("r3", gaps={B: (0, 4)})
    assert at_stake([e1, e2, gap], {A: 5, B: 4}) == [e2]
    assert at_stake([e1, e2, gap], {A: None, B: 0}) == [e1, e2, gap]
    assert at_stake([e1, e2], {B: 0}) == [], "a queue that left the subscription keeps nothing at stake"


def test_the_plan_option_round_trips_and_splits_into_picklable_chunks():
    planned = [(OffsetRange(A, 10, 25), 60_000), (OffsetRange(B, 0, 3), 120_000)]
    assert decode_plan(encode_plan(planned)) == planned
    opts = parse_options(
        {"namesrv": "127.0.0.1:9876", "topic": "orders", "plan": encode_plan(planned), "maxMessagesPerPartition": "10"}
    )
    chunks = RocketMQReader(opts).partitions()
    assert chunks == [
        Chunk(OffsetRange(A, 10, 20), 60_000),
        Chunk(OffsetRange(A, 20, 25), 60_000),
        Chunk(OffsetRange(B, 0, 3), 120_000),
    ]
    assert pickle.loads(pickle.dumps(chunks)) == chunks  # Spark ships them to the executors


def test_a_bad_plan_is_refused_naming_the_option():
    with pytest.raises(SourceOptionError, match="option plan"):
        parse_options({"namesrv": "n", "topic": "t", "plan": '[{"topic": "t"}]'})


def test_two_writers_each_entry_read_past_its_read_version_down_to_what_it_carries():
    old = entry("old", OffsetRange(A, 0, 4))  # at stake when both members read v4
    v4 = LedgerEntry.from_json(entry("r4", OffsetRange(B, 0, 1), carried=[old]).to_json(), version=4)
    b5 = LedgerEntry.from_json(
        entry("b5", OffsetRange(B, 1, 2), carried=[old], member="m2", read_version=4).to_json(), 5
    )
    a6 = LedgerEntry.from_json(
        entry("a6", OffsetRange(A, 4, 8), carried=[old], member="m1", read_version=4).to_json(), 6
    )
    assert a6.member == "m1" and a6.read_version == 4, "both survive the round trip"
    seen = []

    def newest_first():
        for e in (a6, b5, v4, entry("older", OffsetRange(A, 0, 1))):
            seen.append(e.run_id)
            yield e

    entries, complete = history_of(newest_first(), "g")
    assert complete and [e.run_id for e in entries] == ["old", "b5", "a6"], (
        "b5 committed after a6's run read the table: a6 does not carry it, so it is read on its own"
    )
    assert seen == ["a6", "b5", "r4"], "reading stops at the read version both runs saw"
    entries, complete = history_of([a6], "g")
    assert not complete and [e.run_id for e in entries] == ["old", "a6"], "v5 is unread: read further back"
    assert history_of([a6], "g", lowest_version_read=5)[1], "unless the caller read every commit above v4"


def test_a_suspension_rides_in_the_json_stops_the_spans_and_stays_at_stake_until_its_message_is_passed():
    from rocketlake.engine.ledger import Suspension, suspensions

    a, b = MessageQueue("t", "broker-a", 0), MessageQueue("t", "broker-b", 0)
    stop = Suspension(4, 2, 123_000, "k0", 0, 60_000, "MSGID", "listener answered SUSPEND_CURRENT_QUEUE_A_MOMENT")
    entry = LedgerEntry(
        "orders",
        "g",
        "r1",
        (
            WindowEntry("k0", 0, 60_000, (OffsetRange(a, 2, 9), OffsetRange(b, 0, 3))),
            WindowEntry("k1", 60_000, 120_000, (OffsetRange(a, 9, 12),)),
        ),
        suspended={a: stop},
    )
    back = LedgerEntry.from_json(entry.to_json(), 7)
    assert back.suspended == {a: stop} and back.identity == entry.identity
    assert sorted(s for s in back.spans() if s[2] > s[1]) == [(a, 2, 4), (b, 0, 3)]  # nothing of a from 4 on
    assert at_stake([back], {a: 4, b: 3}) == [back]  # the group stands at the suspended message
    assert at_stake([back], {a: 5, b: 3}) == []  # passed: landed or dead-lettered since
    assert suspensions([back], {a: 4, b: 3}) == {a: stop}
    assert suspensions([back], {a: 5, b: 3}) == {}


def test_optimized_writes_only_for_slices_of_small_ranges():
    """Each Spark task writes its own file; optimized writes (a shuffle of every row) pay only while the ranges,
    and so those files, are small."""
    from rocketlake.delta.writer import LARGE_RANGE_OFFSETS, optimize_write_for

    q1, q2 = MessageQueue("orders", "broker-a", 0), MessageQueue("orders", "broker-b", 0)
    small = entry("r", OffsetRange(q1, 0, 40), OffsetRange(q2, 10, 10))
    assert optimize_write_for(small)
    large = entry("r", OffsetRange(q1, 0, LARGE_RANGE_OFFSETS), OffsetRange(q2, 5, 5 + LARGE_RANGE_OFFSETS + 2))
    assert not optimize_write_for(large)
    # the empty range of a quiet queue is no task and does not dilute the average
    assert not optimize_write_for(entry("r", OffsetRange(q1, 0, LARGE_RANGE_OFFSETS), OffsetRange(q2, 7, 7)))
    assert optimize_write_for(entry("r"))  # nothing to write: the setting is moot, keep the default


def test_slice_predicate_compares_the_queue_columns_themselves():
    """No key string is built per row: topic, broker and queue id are compared as columns, queue ids of one broker
    grouped in one IN list, and names are quoted as SQL strings."""
    from rocketlake.delta.writer import slice_predicate

    a0, a1 = MessageQueue("orders", "broker-a", 0), MessageQueue("orders", "broker-a", 1)
    odd = MessageQueue("orders", "it's-b", 3)
    first = WindowEntry("w1", 60_000, 120_000, (OffsetRange(a0, 5, 9), OffsetRange(a1, 0, 4), OffsetRange(odd, 2, 2)))
    second = WindowEntry(
        "w2", 120_000, 180_000, (OffsetRange(a0, 9, 12), OffsetRange(a1, 4, 6), OffsetRange(odd, 2, 3))
    )
    predicate = slice_predicate([second, first])
    assert "concat" not in predicate
    assert (
        "(window_start = TIMESTAMP'1970-01-01 00:01:00.000Z' AND (topic = 'orders' AND broker_name = 'broker-a' AND "
        "queue_id = 0) AND queue_offset >= 5)"
    ) in predicate
    # the odd queue's first non-empty range is in the second window: bounded there, with its name escaped
    assert (
        "(window_start = TIMESTAMP'1970-01-01 00:02:00.000Z' AND (topic = 'orders' AND broker_name = 'it\\'s-b' AND "
        "queue_id = 3) AND queue_offset >= 2)"
    ) in predicate
    assert (
        "(window_start IN (TIMESTAMP'1970-01-01 00:02:00.000Z') AND (topic = 'orders' AND broker_name = 'broker-a' AND "
        "queue_id IN (0, 1)))"
    ) in predicate
    assert slice_predicate([WindowEntry("w", 0, 60_000, (OffsetRange(a0, 3, 3),))]) == "false"


def fields(**types):
    """Spark fields of these names and types (no Spark session: pyspark parses DDL in the JVM)."""
    from pyspark.sql.types import StructField

    return [StructField(name, kind) for name, kind in types.items()]


def test_new_tables_keep_statistics_on_lookup_columns_and_a_decoded_bodys_fields_only():
    from pyspark.sql.types import BinaryType, DateType, IntegerType, LongType, MapType, StringType, TimestampType

    from rocketlake.delta.writer import stats_columns

    text, ts = StringType(), TimestampType()
    columns = fields(
        topic=text,
        broker_name=text,
        queue_id=IntegerType(),
        queue_offset=LongType(),
        msg_id=text,
        offset_msg_id=text,
        tags=text,
        keys=text,
        properties=MapType(text, text),
        born_timestamp=ts,
        store_timestamp=ts,
        born_host=text,
        store_host=text,
        reconsume_times=IntegerType(),
        body=BinaryType(),
        window_start=ts,
        origin_topic=text,
        origin_msg_id=text,
        origin_offset_msg_id=text,
        order_id=text,
        _rl_error=text,
        window_date=DateType(),
    )
    assert stats_columns(columns) == (
        "`topic`,`broker_name`,`queue_id`,`queue_offset`,`msg_id`,`offset_msg_id`,`tags`,"
        "`born_timestamp`,`store_timestamp`,`window_start`,`order_id`"
    )


def test_statistics_are_kept_only_on_types_delta_keeps_them_of():
    """Delta refuses a table whose ``delta.dataSkippingStatsColumns`` names a BOOLEAN, BINARY, ARRAY or MAP column,
    or a STRUCT holding one (``DELTA_COLUMN_DATA_SKIPPING_NOT_SUPPORTED_TYPE``): a body's fields of those types."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        BooleanType,
        DateType,
        DecimalType,
        IntegerType,
        MapType,
        StringType,
        StructType,
        TimestampNTZType,
    )

    from rocketlake.delta.writer import stats_columns

    text = StringType()
    columns = fields(
        order_id=text,
        gift=BooleanType(),
        note=BinaryType(),
        labels=ArrayType(text),
        counts=MapType(text, IntegerType()),
        ship=StructType(fields(city=text, zip=IntegerType())),
        mixed=StructType(fields(city=text, flag=BooleanType(), at=StructType(fields(x=IntegerType())))),
        flags=StructType(fields(a=BooleanType())),
        amount=DecimalType(10, 2),
        day=DateType(),
        seen=TimestampNTZType(),
    )
    assert stats_columns(columns) == "`order_id`,`ship`,`mixed`.`city`,`mixed`.`at`,`amount`,`day`,`seen`"


def test_the_whole_log_read_shows_each_landing_once_with_its_verdict():
    from dataclasses import replace as with_

    from rocketlake.engine.ledger import BALANCED, PENDING, UNBALANCED, with_verdicts

    landed = with_(entry("r1", OffsetRange(A, 0, 1)), verdict=PENDING)
    verdict = with_(landed, windows=(), carried=(with_(landed, verdict=UNBALANCED),), verdict=None)
    again = with_(verdict, carried=(with_(landed, verdict=BALANCED),))  # the same slice landed again, balanced
    assert [e.verdict for e in with_verdicts([landed, verdict])] == [UNBALANCED]
    assert [(e.run_id, e.verdict) for e in with_verdicts([landed, verdict, landed, again])] == [("r1", BALANCED)] * 2
