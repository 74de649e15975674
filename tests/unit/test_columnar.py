"""The columnar decoder gives exactly what the exact decoder and the source's row builder give, or
declines (None) so that the exact path runs; never a different answer."""

from __future__ import annotations

import random

import pytest

from rocketlake.engine.columns import METADATA_COLUMNS, arrow_schema
from rocketlake.rocketmq.columnar import RawRecords, record_batch, scan_records
from rocketlake.rocketmq.errors import ProtocolError
from rocketlake.rocketmq.filter import Subscription
from rocketlake.rocketmq.message import (
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    Message,
    decode_messages,
)
from rocketlake.spark.source import _BatchBuilder
from tests.unit.record_encoder import encode_message_record

# Names that end like another ("XTAGS"), values that hold a piece's text ("TAGS\x01TagA"): a lookup must find a name
# only where a piece starts.
NAMES = [
    "UNIQ_KEY",
    "TAGS",
    "KEYS",
    "WAIT",
    "RETRY_TOPIC",
    "ORIGIN_MESSAGE_ID",
    "region",
    "a\x01b",
    "",
    "é",
    "XTAGS",
    "AGS",
]
VALUES = [
    "",
    "x",
    "TagA",
    "TagB",
    "k1  k2 ",
    " k3",
    "a\x01b",
    "ünï",
    "7F0000010B2D18B4AAC200000000002A",
    "TAGS\x01TagB",
    "KEYS",
]


def _properties_text(rng: random.Random, repeat_a_name: bool, with_uniq_key: bool = False) -> str:
    """Raw properties strings, separators and all, including pieces Java skips."""
    pieces = [f"{name}\x01{rng.choice(VALUES)}" for name in rng.sample(NAMES, rng.randint(0, 6))]
    if with_uniq_key:  # as a producer's messages all have: no offset id is then needed for msg_id
        pieces = [p for p in pieces if not p.startswith("UNIQ_KEY")] + [f"UNIQ_KEY\x01{rng.getrandbits(128):032X}"]
    if rng.random() < 0.2:
        pieces.insert(rng.randint(0, len(pieces)), rng.choice(VALUES))  # no separator at all
    if repeat_a_name and pieces:  # again later: a later non-empty value wins, an empty one is skipped
        for _ in range(rng.randint(1, 2)):
            pieces.insert(
                rng.randint(1, len(pieces)), pieces[0].partition("\x01")[0] + "\x01" + rng.choice(["later", ""])
            )
    return "\x02".join(pieces) + ("\x02" if rng.random() < 0.7 else "")


def _record(
    rng: random.Random, offset: int, topic: str = "orders", repeat_a_name: bool = False, with_uniq_key: bool = False
) -> bytes:
    from rocketlake.rocketmq.message import decode_properties

    props_text = _properties_text(rng, repeat_a_name, with_uniq_key)
    message = Message(
        topic,
        flag=rng.randint(0, 5),
        queue_id=3,
        queue_offset=offset,
        commit_log_offset=rng.randint(0, 1 << 40),
        sys_flag=rng.choice([0, 4, 8]),
        born_timestamp=rng.randint(1, 1 << 42),
        born_host=rng.choice(["127.0.0.1:5555", "10.1.2.3:65535", "192.168.0.9:0"]),
        store_timestamp=rng.randint(1, 1 << 42),
        store_host=rng.choice(["127.0.0.1:10911", "127.0.0.1:10921"]),
        reconsume_times=rng.randint(0, 16),
        body=rng.choice([b"", b"\xff\xfe not utf-8", "ünïcode".encode(), bytes(rng.randbytes(rng.randint(0, 300)))]),
        properties=decode_properties(props_text),
    )
    record = bytearray(encode_message_record(message))
    # Put the raw text back (encode_message_record writes the parsed dict): skipped pieces and all.
    raw = props_text.encode()
    head = len(record) - 2 - len(encode_properties_of(message))
    record[head:] = len(raw).to_bytes(2, "big") + raw
    record[0:4] = len(record).to_bytes(4, "big")
    return bytes(record)


def encode_properties_of(message: Message) -> bytes:
    from rocketlake.rocketmq.message import encode_properties

    return encode_properties(message.properties).encode()


def _exact(body: bytes, schema, subscription: Subscription, include_filtered: bool, window_ms: int | None):
    builder = _BatchBuilder(schema, "broker-a", window_ms)
    for message in decode_messages(body):
        matched = subscription.matches(message)
        if matched or include_filtered:
            builder.add(message, matched)
    return builder.flush().to_pylist()


@pytest.mark.parametrize("seed", range(40))
def test_columnar_batches_equal_the_exact_decoder_row_for_row(seed):
    rng = random.Random(seed)
    # Rows naming a property twice, as brokers store batch-sent messages: first place, last value.
    topic = rng.choice(["orders", "%RETRY%group", "%DLQ%group"])
    with_uniq_key = rng.random() < 0.3
    body = b"".join(
        _record(rng, 100 + i, topic, repeat_a_name=rng.random() < 0.3, with_uniq_key=with_uniq_key)
        for i in range(rng.randint(4, 60))
    )
    expression = rng.choice(["*", "TagA", "TagA || TagB", "TagC"])
    subscription = Subscription.parse(topic, expression)
    include_filtered = rng.random() < 0.5
    with_text = rng.random() < 0.5
    window_ms = rng.choice([None, 1_700_000_000_000])
    metadata = rng.sample(METADATA_COLUMNS, rng.randint(0, len(METADATA_COLUMNS)))  # any of them, or none
    schema = arrow_schema(metadata, matched=include_filtered, window=window_ms is not None, text=with_text)
    records = scan_records(body)
    assert records is not None
    assert records.queue_offsets.tolist() == [m.queue_offset for m in decode_messages(body)]
    batch = record_batch(
        records,
        schema,
        broker_name="broker-a",
        subscription=subscription,
        include_filtered=include_filtered,
        window_start_us=None if window_ms is None else window_ms * 1000,
    )
    expected = _exact(body, schema, subscription, include_filtered, window_ms)
    assert batch is not None
    assert batch.schema == schema
    assert batch.to_pylist() == expected


def test_records_outside_the_fast_shape_are_left_to_the_exact_decoder():
    def fast(record: bytes):
        records = scan_records(record)
        return records and record_batch(
            records,
            arrow_schema(),
            broker_name="b",
            subscription=Subscription.parse("orders", "*"),
            include_filtered=False,
            window_start_us=None,
        )

    plain = Message("orders", queue_offset=7, born_host="127.0.0.1:1", store_host="127.0.0.1:2", body=b"x")
    assert fast(encode_message_record(plain)) is not None
    for odd in (
        Message("orders", queue_offset=7, sys_flag=BORNHOST_V6_FLAG, born_host="[::1]:1", store_host="127.0.0.1:2"),
        Message(
            "orders",
            queue_offset=7,
            sys_flag=COMPRESSED_FLAG,
            born_host="127.0.0.1:1",
            store_host="127.0.0.1:2",
            body=b"not really deflated",
        ),
    ):
        assert scan_records(encode_message_record(odd)) is not None  # indexed: the sizes add up
        assert fast(encode_message_record(odd)) is None  # but not decoded here
        # One odd record among plain ones sends the whole batch to the exact decoder.
        mixed = RawRecords.concat(
            [scan_records(encode_message_record(plain)), scan_records(encode_message_record(odd))]
        )
        assert (
            record_batch(
                mixed,
                arrow_schema(),
                broker_name="b",
                subscription=Subscription.parse("orders", "*"),
                include_filtered=False,
                window_start_us=None,
            )
            is None
        )
    truncated = encode_message_record(plain)[:-1]
    assert scan_records(truncated) is None
    with pytest.raises(Exception):
        decode_messages(truncated)  # the exact decoder names what is wrong


def test_cut_and_joined_records_keep_their_offsets_and_bytes():
    rng = random.Random(7)
    first = b"".join(_record(rng, i) for i in range(5))
    second = b"".join(_record(rng, 5 + i) for i in range(4))
    a, b = scan_records(first), scan_records(second)
    joined = RawRecords.concat([a[:3], b])
    assert joined.queue_offsets.tolist() == [0, 1, 2, 5, 6, 7, 8]
    assert [m.queue_offset for m in joined.messages()] == [0, 1, 2, 5, 6, 7, 8]
    assert joined.nbytes == len(joined.record_bytes())


def test_answers_read_in_place_are_joined_without_a_copy_into_the_same_batch():
    """Pull answers that a connection read into one arena (frame.FrameDecoder with views) lie side by side, headers
    between: a flush joins them with one view and builds the batch the copied answers give."""
    import numpy as np

    from rocketlake.rocketmq.frame import FrameDecoder, RemotingCommand, encode

    rng = random.Random(5)
    bodies = [b"".join(_record(rng, 10 * i + j) for j in range(10)) for i in range(4)]
    stream = b"".join(encode(RemotingCommand(code=0, opaque=i, flag=1, body=body)) for i, body in enumerate(bodies))
    answers = FrameDecoder(views=True).feed(stream)
    in_place = [scan_records(answer.body_view) for answer in answers]
    joined = RawRecords.concat([in_place[0][2:], *in_place[1:]])
    assert np.shares_memory(joined.buffer, np.frombuffer(in_place[0].arena, np.uint8))  # a view, not a copy
    copied = RawRecords.concat([scan_records(bodies[0])[2:], *map(scan_records, bodies[1:])])
    assert joined.queue_offsets.tolist() == copied.queue_offsets.tolist() == [*range(2, 10), *range(10, 40)]
    assert joined.record_bytes() == copied.record_bytes()
    args = dict(
        broker_name="b", subscription=Subscription.parse("orders", "*"), include_filtered=False, window_start_us=None
    )
    schema = arrow_schema(list(METADATA_COLUMNS))
    assert record_batch(joined, schema, **args).to_pylist() == record_batch(copied, schema, **args).to_pylist()


def test_queue_offsets_are_read_from_the_records_with_gaps_and_checked_before_a_batch_is_built():
    rng = random.Random(11)
    gapped = b"".join(_record(rng, offset) for offset in (10, 11, 15, 16))  # deleted messages: 12..14
    assert scan_records(gapped).queue_offsets.tolist() == [10, 11, 15, 16]
    # Endpoints as far apart as the count says but the middle out of order: never from a broker, and refused by name
    # before anything lands (scan_records takes consecutive endpoints on trust, for speed).
    shuffled = scan_records(b"".join(_record(rng, offset) for offset in (20, 22, 21, 23)))
    assert shuffled.queue_offsets.tolist() == [20, 21, 22, 23]
    with pytest.raises(
        ProtocolError,
        match=r"broker broker-a answered PULL_MESSAGE with a queue's records out of "
        r"offset order \(offsets 20 to 23 for 4 records\)",
    ):
        record_batch(
            shuffled,
            arrow_schema(),
            broker_name="broker-a",
            subscription=Subscription.parse("orders", "*"),
            include_filtered=False,
            window_start_us=None,
        )


@pytest.mark.parametrize("kind", ["binary", "string"])
def test_views_cut_any_string_of_a_buffer_including_short_ones_and_ones_at_its_end(kind):
    import numpy as np
    import pyarrow as pa

    from rocketlake.rocketmq.columnar import _views

    text = b"0123456789abcdefghijklmnopqrstuvwxyz"
    cuts = [(0, 0), (0, 12), (1, 13), (5, 4), (20, 16), (30, 6), (35, 1), (36, 0), (24, 12)]
    starts, lengths = np.array([s for s, _ in cuts]), np.array([n for _, n in cuts])
    array = _views(getattr(pa, kind)(), np.frombuffer(text, np.uint8), starts, lengths)
    expected = [text[s : s + n] for s, n in cuts]
    assert array.to_pylist() == (expected if kind == "binary" else [b.decode() for b in expected])
    assert _views(pa.binary(), np.frombuffer(text, np.uint8), starts[:0], lengths[:0]).to_pylist() == []
    with pytest.raises(pa.ArrowInvalid):
        _views(pa.string(), np.frombuffer(b"ok \xff\xfe", np.uint8), np.array([0, 3]), np.array([3, 2]))


def test_a_record_that_does_not_decode_names_the_broker_that_served_it():
    from rocketlake.rocketmq.errors import ProtocolError
    from rocketlake.spark.source import _TaskBatches

    record = bytearray(
        encode_message_record(
            Message("orders", queue_offset=7, born_host="127.0.0.1:1", store_host="127.0.0.1:2", body=b"x")
        )
    )
    record[4:8] = b"\x00\x00\x00\x01"  # no magic code a broker writes: the fast path declines, the exact decoder fails
    batches = _TaskBatches(arrow_schema(), "broker-a", None, Subscription.parse("orders", "*"), False)
    batches.add(scan_records(bytes(record)))
    with pytest.raises(ProtocolError, match="broker broker-a answered PULL_MESSAGE with a body that does not decode"):
        list(batches.flush())


def test_properties_not_in_utf8_leave_the_batch_to_the_exact_decoder_only_when_landed():
    def record(properties: bytes) -> bytes:
        message = Message(
            "orders",
            queue_offset=7,
            born_host="127.0.0.1:1",
            store_host="127.0.0.1:2",
            body=b"x",
            properties={"A": "b"},
        )
        raw = bytearray(encode_message_record(message))
        head = len(raw) - 2 - len(encode_properties_of(message))
        raw[head:] = len(properties).to_bytes(2, "big") + properties
        raw[0:4] = len(raw).to_bytes(4, "big")
        return bytes(raw)

    subscription = Subscription.parse("orders", "*")

    def fast(body: bytes, schema):
        return record_batch(
            scan_records(body),
            schema,
            broker_name="broker-a",
            subscription=subscription,
            include_filtered=False,
            window_start_us=None,
        )

    # Bad bytes in a property nobody lands: the separators stand where Java's decoder finds them.
    unlanded = record(b"TAGS\x01TagA\x02region\x01\xff\xfe\x02KEYS\x01k\xc3\xa9\x02UNIQ_KEY\x01ABC\x02")
    batch = fast(unlanded, arrow_schema())
    assert batch is not None
    assert batch.to_pylist() == _exact(unlanded, arrow_schema(), subscription, False, None)
    assert batch.to_pylist()[0]["keys"] == "ké"
    # Landed (the map, or a tag): the exact decoder replaces them, as Java does.
    assert fast(unlanded, arrow_schema(["properties"])) is None
    bad_tag = record(b"TAGS\x01Tag\xff\x02")
    assert fast(bad_tag, arrow_schema()) is None
    assert _exact(bad_tag, arrow_schema(), subscription, False, None)[0]["tags"] == "Tag\ufffd"


def test_a_python_worker_leaves_what_it_keeps_out_of_the_daemons_collection_after_each_task():
    """PySpark's daemon runs gc.collect() after every task of a reused worker; the reader freezes what the worker
    holds at its first read and again at its second (what the first task loaded), so those collections walk only
    what tasks made since."""
    import gc

    from rocketlake.spark import source

    def collected(thing) -> bool:  # in a generation the collector walks (frozen objects are in none)
        return any(o is thing for o in gc.get_objects())

    was = source._freezes
    try:
        source._freezes = 0
        loaded = [object()]  # alive before the first task, as the worker's imports are
        source._freeze()
        assert not collected(loaded)
        loaded_by_the_first_task = [object()]  # the read path's modules, the client's pools
        source._freeze()
        assert not collected(loaded_by_the_first_task)
        made_by_a_later_task = [object()]
        source._freeze()  # twice per process: a later task's objects stay collectable
        assert collected(made_by_a_later_task)
    finally:
        gc.unfreeze()
        source._freezes = was


def test_a_spark_task_reading_the_source_does_not_load_the_configuration():
    """pydantic and YAML cost a Python worker 0.2 s to import, at every worker Spark starts; a task reads with
    the source's options only."""
    import subprocess
    import sys

    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from rocketlake.spark import source; from rocketlake.engine import broker_access; "
            "print(sorted(m for m in sys.modules if m.startswith(('rocketlake', 'pydantic', 'yaml'))))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "rocketlake.engine.broker_access" in loaded
    assert "rocketlake.engine.config" not in loaded and "pydantic" not in loaded and "'yaml'" not in loaded
