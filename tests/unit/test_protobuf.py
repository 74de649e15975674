"""Protobuf bodies (``body.format: protobuf``): the columns spark-protobuf's ``from_protobuf`` gives a message type,
and bodies decoded into them with its nulls; what the configuration and the source refuse, naming why."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from google.protobuf import message_factory

from rocketlake.engine.config import ConfigError, parse_config
from rocketlake.engine.options import SourceOptionError, parse_options
from rocketlake.engine.protobuf import BodyDecoder
from tests.unit.support import descriptor_set, with_ingestion

pytestmark = pytest.mark.unit

#: spark-protobuf's mapping of shop.v1.Order (tests/integration/schemas/order.proto), field by field.
ORDER_COLUMNS = (
    "STRUCT<`order_id`: STRING, `quantity`: INT, `total_cents`: BIGINT, `points`: INT, `big`: BIGINT, "
    "`delta`: INT, `fixed`: BIGINT, `weight`: FLOAT, `amount`: DOUBLE, `gift`: BOOLEAN, `note`: BINARY, "
    "`status`: STRING, `ship`: STRUCT<`city`: STRING, `zip`: INT>, `labels`: ARRAY<STRING>, "
    "`lines`: ARRAY<STRUCT<`sku`: STRING, `quantity`: INT, `price`: DOUBLE>>, `counts`: MAP<STRING, INT>, "
    "`placed_at`: TIMESTAMP, `took`: BIGINT, `discount`: STRUCT<`value`: INT>, `card`: STRING, "
    "`cash_cents`: BIGINT, `rating`: INT, `history`: ARRAY<STRING>>"
)


@pytest.fixture(scope="module")
def order_set(tmp_path_factory):
    return descriptor_set("order.proto", tmp_path_factory.mktemp("protobuf"))


def test_the_columns_are_those_from_protobuf_gives_the_message(order_set):
    decoder = BodyDecoder(order_set.read_bytes(), "shop.v1.Order")
    assert decoder.column.ddl == ORDER_COLUMNS  # google.protobuf.Empty (`nothing`) has no column, as in Spark


def test_bodies_decode_with_spark_protobufs_nulls_and_java_values(order_set):
    decoder = BodyDecoder(order_set.read_bytes(), "shop.v1.Order")
    order = message_factory.GetMessageClass(decoder.descriptor)
    full = order(
        order_id="o-1",
        quantity=0,  # a proto3 scalar at its default: not on the wire, so null
        points=4294967295,  # uint32 above the signed range: Java's int bits
        big=2**64 - 1,
        delta=-3,
        amount=1.5,
        status=2,
        labels=["a", ""],  # an element at its default stays: only a field is absent
        card="",  # a oneof member set to its default is set
        rating=0,  # `optional`: present at 0
        history=[0, 2, 7],  # 7 is no Status: Java's name for an unknown number
    )
    full.ship.city = "Lyon"
    full.placed_at.seconds, full.placed_at.nanos = 1_700_000_000, 5_000
    full.took.seconds = 90
    full.discount.value = 0  # a wrapper set to 0: the message is there, its value is not
    full.counts["k"] = 0  # a map's value at its default stays
    full.lines.add(sku="s", quantity=0)
    empty = order()
    decoded, errors = decoder.decode([full.SerializeToString(), empty.SerializeToString(), b"\xff\xff", None])
    first, second, third, fourth = decoded.to_pylist()
    assert first == {
        "order_id": "o-1",
        "quantity": None,
        "total_cents": None,
        "points": -1,
        "big": -1,
        "delta": -3,
        "fixed": None,
        "weight": None,
        "amount": 1.5,
        "gift": None,
        "note": None,
        "status": "PAID",
        "ship": {"city": "Lyon", "zip": None},
        "labels": ["a", ""],
        "lines": [{"sku": "s", "quantity": None, "price": None}],
        "counts": [("k", 0)],
        "placed_at": datetime(2023, 11, 14, 22, 13, 20, 5, tzinfo=timezone.utc),
        "took": 90_000_000,  # a Duration: its microseconds (Delta stores no interval)
        "discount": {"value": None},
        "card": "",
        "cash_cents": None,
        "rating": 0,
        "history": ["STATUS_UNSPECIFIED", "PAID", "UNKNOWN_ENUM_VALUE_Status_7"],
    }
    # Absent: null, but an absent repeated field or map is empty.
    assert {k: v for k, v in second.items() if v is not None} == {
        "labels": [],
        "lines": [],
        "counts": [],
        "history": [],
    }
    assert (third, fourth) == (None, None)
    assert errors[:2] == [None, None] and errors[3] is None
    assert errors[2].startswith("body is not a shop.v1.Order message (Protobuf binary): ")


def test_proto2_keeps_declared_defaults_and_presence(tmp_path):
    decoder = BodyDecoder(descriptor_set("legacy.proto", tmp_path).read_bytes(), "shop.v1.Legacy")
    legacy = message_factory.GetMessageClass(decoder.descriptor)
    assert decoder.column.ddl == "STRUCT<`id`: STRING, `count`: INT, `region`: STRING>"
    decoded, _ = decoder.decode([legacy(id="x", count=0).SerializeToString()])
    assert decoded.to_pylist() == [{"id": "x", "count": 0, "region": "eu"}]  # proto2 presence; a declared default


def protobuf_body(descriptor_file, message_name="shop.v1.Order", **more):
    return {"format": "protobuf", "descriptor_file": str(descriptor_file), "message_name": message_name, **more}


def problems_of(body) -> str:
    with pytest.raises(ConfigError) as refused:
        parse_config(with_ingestion(body=body))
    return str(refused.value)


def test_the_configuration_checks_the_descriptor_set_and_the_message_at_load(order_set, tmp_path):
    ok = parse_config(with_ingestion(body=protobuf_body(order_set))).ingestions["orders"]
    assert ok.body.format == "protobuf" and ok.can_fail
    assert "shop.v1.Nope' is not in the descriptor set; it holds shop.v1.Address, shop.v1.Line, shop.v1.Order" in (
        problems_of(protobuf_body(order_set, "shop.v1.Nope"))
    )
    assert "cannot be read (No such file or directory)" in problems_of(protobuf_body(tmp_path / "missing.desc"))
    order_set_text = tmp_path / "order.proto.txt"
    order_set_text.write_text("syntax = 'proto3';")
    assert "is not a descriptor set (protoc --include_imports" in problems_of(protobuf_body(order_set_text))
    recursive = descriptor_set("tree.proto", tmp_path)
    assert "field shop.v1.Node.children makes shop.v1.Node recursive" in problems_of(
        protobuf_body(recursive, "shop.v1.Node")
    )
    assert "format protobuf needs descriptor_file" in problems_of({"format": "protobuf"})
    assert "remove schema and evolve" in problems_of(protobuf_body(order_set, schema="a STRING"))
    assert "message_name applies to format protobuf only" in problems_of({"format": "raw", "message_name": "x.Y"})


def test_the_source_takes_a_descriptor_file_or_its_bytes(order_set):
    import base64

    base = {"namesrv": "127.0.0.1:9876", "topic": "t", "bodyFormat": "protobuf"}
    by_file = parse_options({**base, "protobufDescriptorFile": str(order_set), "protobufMessageName": "shop.v1.Order"})
    encoded = base64.b64encode(order_set.read_bytes()).decode()
    by_bytes = parse_options({**base, "protobufDescriptorSet": encoded, "protobufMessageName": "shop.v1.Order"})
    assert by_file.protobuf_descriptor == by_bytes.protobuf_descriptor == order_set.read_bytes()
    with pytest.raises(SourceOptionError, match="option protobufMessageName is required"):
        parse_options({**base, "protobufDescriptorFile": str(order_set)})
    with pytest.raises(SourceOptionError, match="needs protobufDescriptorFile"):
        parse_options({**base, "protobufMessageName": "shop.v1.Order"})
    with pytest.raises(SourceOptionError, match="options protobufmessagename need bodyFormat=protobuf"):
        parse_options({"namesrv": "127.0.0.1:9876", "topic": "t", "protobufMessageName": "shop.v1.Order"})


def test_a_direct_consume_decodes_a_protobuf_body_as_a_run_does(order_set, monkeypatch):
    """``mqadmin consumeMessage``: the member decodes the body with the reader's decoder; one that does not decode
    is answered later with the reason a run gives."""
    import tests.unit.listeners as listeners
    from rocketlake.member.requests import consume_directly
    from rocketlake.rocketmq.client_requests import CMResult
    from rocketlake.rocketmq.message import Message
    from tests.unit.record_encoder import encode_message_record
    from tests.unit.support import ingestion_config

    def record(body: bytes) -> bytes:
        return encode_message_record(
            Message(
                topic="orders",
                queue_id=1,
                queue_offset=7,
                commit_log_offset=1234,
                born_host="127.0.0.1:5000",
                store_host="127.0.0.1:10911",
                store_timestamp=1700000000000,
                body=body,
                properties={"TAGS": "t", "UNIQ_KEY": "ABC"},
            )
        )

    seen = []
    monkeypatch.setattr(
        listeners, "spy", lambda messages, ctx: seen.extend(messages) or "CONSUME_SUCCESS", raising=False
    )
    cfg = ingestion_config(listener="tests.unit.listeners:spy", body=protobuf_body(order_set))
    decoder = BodyDecoder(order_set.read_bytes(), "shop.v1.Order")
    body = message_factory.GetMessageClass(decoder.descriptor)(order_id="o-7", quantity=3).SerializeToString()
    assert consume_directly(cfg, record(body), "broker-a").consume_result is CMResult.CR_SUCCESS
    assert (seen[0]["order_id"], seen[0]["quantity"], seen[0]["amount"]) == ("o-7", 3, None)
    bad = consume_directly(cfg, record(b"\xff"), "broker-a")
    assert bad.consume_result is CMResult.CR_LATER
    assert bad.remark.startswith("body is not a shop.v1.Order message (Protobuf binary)")


def _order_messages():
    """Orders with any subset of their fields set, to any values, unknown enum numbers and -0.0 among them."""
    from hypothesis import strategies as st

    i32, i64 = st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)
    u32, u64 = st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)
    text = st.text(max_size=8)
    maybe = lambda s: st.none() | s  # noqa: E731
    line = st.fixed_dictionaries({"sku": text, "quantity": i32, "price": st.floats(allow_nan=False)})
    return st.fixed_dictionaries(
        {
            "order_id": maybe(text),
            "quantity": maybe(i32),
            "total_cents": maybe(i64),
            "points": maybe(u32),
            "big": maybe(u64),
            "delta": maybe(i32),
            "fixed": maybe(u64),
            "weight": maybe(st.floats(allow_nan=False, width=32)),
            "amount": maybe(st.sampled_from([0.0, -0.0, 1.5, -2.25])),
            "gift": maybe(st.booleans()),
            "note": maybe(st.binary(max_size=4)),
            "status": maybe(st.sampled_from([0, 1, 2, 7])),
            "ship": maybe(st.fixed_dictionaries({"city": text, "zip": i32})),
            "labels": st.lists(text, max_size=3),
            "lines": st.lists(line, max_size=3),
            "counts": st.dictionaries(text, i32, max_size=3),
            "placed_at": maybe(st.tuples(st.integers(-(10**10), 10**10), st.integers(0, 999_999_999))),
            "took": maybe(st.tuples(st.integers(-(10**9), 10**9), st.integers(0, 999_999_999))),
            "discount": maybe(i32),
            "payment": maybe(st.sampled_from([("card", ""), ("card", "visa"), ("cash_cents", 0), ("cash_cents", 9)])),
            "rating": maybe(i32),
            "history": st.lists(st.sampled_from([0, 1, 2, 7]), max_size=3),
        }
    )


def _order(order, values: dict):
    message = order()
    for name, value in values.items():
        if value is None:
            continue
        if name in ("ship",):
            getattr(message, name).MergeFrom(getattr(message, name).__class__(**value))
        elif name == "lines":
            for line in value:
                message.lines.add(**line)
        elif name == "counts":
            message.counts.update(value)
        elif name in ("placed_at", "took"):
            getattr(message, name).seconds, getattr(message, name).nanos = value
        elif name == "discount":
            message.discount.value = value
        elif name == "payment":
            setattr(message, *value)
        elif name in ("labels", "history"):
            getattr(message, name).extend(value)
        else:
            setattr(message, name, value)
    return message


def test_the_columnar_decoder_gives_what_the_reference_gives_message_by_message(order_set):
    """ptars parses a whole batch into Arrow and Arrow's functions bring it to from_protobuf's nulls; the reference
    decoder applies the rules one message at a time. Any batch of any orders: the same column."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    decoder = BodyDecoder(order_set.read_bytes(), "shop.v1.Order")
    assert decoder._columnar is not None, "ptars is a dependency: the columnar path must be there"
    order = message_factory.GetMessageClass(decoder.descriptor)

    @settings(max_examples=60, deadline=None)
    @given(st.lists(_order_messages(), min_size=1, max_size=6), st.lists(st.booleans(), min_size=6, max_size=6))
    def same(orders, absent):
        bodies = [None if gone else _order(order, o).SerializeToString() for o, gone in zip(orders, absent)]
        columnar, errors = decoder.decode(bodies)
        reference, reference_errors = decoder.decode_each(bodies)
        assert errors == reference_errors == [None] * len(bodies)
        assert columnar.type == reference.type == decoder.column.arrow
        assert unordered_maps(columnar.to_pylist()) == unordered_maps(reference.to_pylist())

    same()


def unordered_maps(rows: list[dict | None]) -> list[dict | None]:
    """A map's entries in a set's order: ptars gives them as on the wire, the runtime's map in its own order."""
    return [row and {**row, "counts": sorted(row["counts"])} for row in rows]
