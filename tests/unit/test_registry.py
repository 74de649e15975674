"""Confluent's wire format (``body.framing: confluent``): frames read and written, ids looked up once, a registry
that cannot be reached named, and framed Protobuf bodies decoded or failed with the frame's reason."""

from __future__ import annotations

import socket

import pytest
from google.protobuf import message_factory

from rocketlake.engine.protobuf import BodyDecoder, message_path
from rocketlake.engine.registry import FrameError, RegistryUnreachable, SchemaLookup, frame, read_frame
from tests.unit.support import descriptor_set

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("indexes", [(0,), (2,), (1, 0), (0, 3, 1), (130,)])
def test_a_frame_written_as_the_serializers_write_it_is_read_back(indexes):
    body = frame(42, b"payload", indexes)
    got = read_frame(body, protobuf=True)
    assert (got.schema_id, got.message_indexes, body[got.payload_at :]) == (42, indexes, b"payload")
    plain = frame(7, b"{}")
    assert read_frame(plain, protobuf=False).payload_at == 5 and plain[:5] == b"\x00\x00\x00\x00\x07"


def test_the_first_message_is_a_lone_zero():
    assert frame(1, b"x", (0,)) == b"\x00\x00\x00\x00\x01\x00x"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"", "starts with nothing"),
        (b"\x7b\x22a\x22:1}", "starts with 0x7b, not the magic byte 0x00"),
        (b"\x00\x00\x00", "starts with 0x00"),  # too short to hold an id
        (b"\x00\x00\x00\x00\x01\x04", "ends inside its message-index list"),
    ],
)
def test_a_body_without_a_frame_says_why(body, says):
    with pytest.raises(FrameError, match=says):
        read_frame(body, protobuf=True)


def test_ids_are_looked_up_once_in_a_directory_of_schemas(tmp_path):
    (tmp_path / "7.proto").write_text("syntax = 'proto3';")
    lookup = SchemaLookup(directory=str(tmp_path))
    assert lookup.known(7) and not lookup.known(8)
    (tmp_path / "8.proto").write_text("syntax = 'proto3';")
    assert not lookup.known(8)  # looked up once a process: what was asked is kept


def test_a_registry_that_cannot_be_reached_is_named_with_the_id():
    with socket.socket() as s:  # a port of this machine nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lookup = SchemaLookup(url=f"http://127.0.0.1:{port}")
    with pytest.raises(RegistryUnreachable) as refused:
        lookup.known(3)
    assert str(refused.value).startswith(f"the schema registry at http://127.0.0.1:{port} cannot be reached (")
    assert str(refused.value).endswith("to look up schema id 3: nothing of this window is landed until it answers")


def test_framed_protobuf_bodies_lose_their_frame_or_fail_with_its_reason(tmp_path):
    descriptors = descriptor_set("order.proto", tmp_path).read_bytes()
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "7.proto").write_text("// schema 7")
    decoder = BodyDecoder(descriptors, "shop.v1.Order", registry=SchemaLookup(directory=str(tmp_path / "schemas")))
    assert message_path(decoder.descriptor) == (2,)  # Address, Line, then Order in order.proto
    order = message_factory.GetMessageClass(decoder.descriptor)(order_id="o-1", quantity=2).SerializeToString()
    bodies = [frame(7, order, (2,)), frame(9, order, (2,)), frame(7, order, (0,)), order, None]
    decoded, errors = decoder.decode(bodies)
    assert [row and (row["order_id"], row["quantity"]) for row in decoded.to_pylist()] == [
        ("o-1", 2),
        None,
        None,
        None,
        None,
    ]
    assert errors == [
        None,
        "body is framed with schema id 9, which the schema registry does not hold",
        "body is framed as message [0] of schema 7, not shop.v1.Order ([2] in order.proto)",
        "body is not in Confluent's wire format (it starts with 0x0a, not the magic byte 0x00)",
        None,
    ]


def test_the_configuration_takes_framing_with_one_place_for_the_schemas(tmp_path):
    from rocketlake.engine.config import ConfigError, parse_config
    from tests.unit.support import with_ingestion

    descriptors = str(descriptor_set("order.proto", tmp_path))
    body = {
        "format": "protobuf",
        "descriptor_file": descriptors,
        "message_name": "shop.v1.Order",
        "framing": "confluent",
    }
    ok = parse_config(with_ingestion(body={**body, "registry_url": "http://127.0.0.1:8081"}))
    assert ok.ingestions["orders"].body.registry_options() == {
        "framing": "confluent",
        "schemaRegistryUrl": "http://127.0.0.1:8081",
    }
    for more, says in [
        ({}, "framing confluent needs one of registry_url (a schema registry) or schemas_dir (offline)"),
        ({"registry_url": "127.0.0.1:8081"}, "is not an http:// or https:// URL"),
        ({"schemas_dir": str(tmp_path / "nowhere")}, "is not a directory"),
    ]:
        with pytest.raises(ConfigError) as refused:
            parse_config(with_ingestion(body={**body, **more}))
        assert says in str(refused.value)
    with pytest.raises(ConfigError, match="framing confluent with format text is not supported yet"):
        parse_config(with_ingestion(body={"format": "text", "framing": "confluent", "schemas_dir": str(tmp_path)}))
    with pytest.raises(ConfigError, match="registry_url applies to framing confluent only"):
        parse_config(with_ingestion(body={"format": "raw", "registry_url": "http://127.0.0.1:8081"}))


def test_the_source_takes_framing_for_bodies_spark_decodes():
    from rocketlake.engine.options import SourceOptionError, parse_options

    base = {"namesrv": "127.0.0.1:9876", "topic": "t", "framing": "confluent", "schemaDirectory": "/tmp"}
    assert parse_options({**base, "framedSchema": "json"}).framed_schema == "json"
    assert parse_options({**base, "framedSchema": "avro:0011223344556677"}).framed_schema == "avro:0011223344556677"
    with pytest.raises(SourceOptionError, match="option framedSchema='avro' is not allowed"):
        parse_options({**base, "framedSchema": "avro"})
    with pytest.raises(SourceOptionError, match="needs one of schemaRegistryUrl or schemaDirectory"):
        parse_options({**base, "schemaRegistryUrl": "http://127.0.0.1:1", "framedSchema": "json"})
    with pytest.raises(SourceOptionError, match="need framing=confluent"):
        parse_options({"namesrv": "127.0.0.1:9876", "topic": "t", "framedSchema": "json"})
