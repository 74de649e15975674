"""The columns of the ``rocketmq`` source and of landed tables: which are always there, which are opt-in.

Always there: what identifies a message (topic, broker, queue, offset, message id), what places it in a window
(store time), and what users filter and read (tags, keys, body). Kafka's source lands the same information in
its seven columns. Every other field a broker stores is a **metadata column**, produced only when asked for
(the source's ``metadataColumns`` option, an ingestion's ``metadata_columns``), as Kafka's source adds headers
only with ``includeHeaders`` and Flink's RocketMQ connector reads metadata only into columns declared
``METADATA``. A column nobody asked for costs nothing: the decoder never builds it (the properties map above
all, the largest part of the decode; tags, keys and the message id are looked up without it).
"""

from __future__ import annotations

import pyarrow as pa

_TS = pa.timestamp("us", tz="UTC")

#: (name, Arrow type, Spark DDL type, always there), in the order columns appear.
_CATALOGUE: tuple[tuple[str, pa.DataType, str, bool], ...] = (
    ("topic", pa.string(), "STRING", True),
    ("broker_name", pa.string(), "STRING", True),
    ("queue_id", pa.int32(), "INT", True),
    ("queue_offset", pa.int64(), "BIGINT", True),
    ("msg_id", pa.string(), "STRING", True),
    ("offset_msg_id", pa.string(), "STRING", False),
    ("tags", pa.string(), "STRING", True),
    ("keys", pa.string(), "STRING", True),
    ("properties", pa.map_(pa.string(), pa.string()), "MAP<STRING, STRING>", False),
    ("born_timestamp", _TS, "TIMESTAMP", False),
    ("store_timestamp", _TS, "TIMESTAMP", True),
    ("born_host", pa.string(), "STRING", False),
    ("store_host", pa.string(), "STRING", False),
    ("reconsume_times", pa.int32(), "INT", False),
    ("body", pa.binary(), "BINARY", True),
    ("origin_topic", pa.string(), "STRING", False),
    ("origin_msg_id", pa.string(), "STRING", False),
    ("origin_offset_msg_id", pa.string(), "STRING", False),
    ("message_group", pa.string(), "STRING", False),
)

CORE_COLUMNS: tuple[str, ...] = tuple(name for name, _, _, always in _CATALOGUE if always)
#: Opt-in, by name. ``origin_topic`` / ``origin_msg_id``: the topic the producer wrote to and the message's original
#: id, the same for a message and every redelivered copy of it (``RETRY_TOPIC``; ``UNIQ_KEY``, else
#: ``ORIGIN_MESSAGE_ID``, else the offset id). ``origin_offset_msg_id``: the offset id of the one stored message a
#: row is or came from (its own on a main-topic message; ``ORIGIN_MESSAGE_ID`` on a copy, which the broker sets on
#: send-back): two messages a producer's retry stored with one msgId have one ``origin_msg_id`` and two of these.
#: ``message_group``: a 5.x FIFO message's group (``__SHARDINGKEY``), null for other messages.
METADATA_COLUMNS: tuple[str, ...] = tuple(name for name, _, _, always in _CATALOGUE if not always)
#: What dedup of redelivered copies and the dead-letter tables need: landed wherever copies can land. A copy is
#: matched to its original by ``origin_offset_msg_id``, the stored message it came from.
ORIGIN_COLUMNS = ("origin_topic", "origin_msg_id", "origin_offset_msg_id")
#: What sending a failed message back needs: its commit-log position and its attempts so far.
SEND_BACK_COLUMNS = ("offset_msg_id", "reconsume_times")

# Present only when asked for, by other options.
TEXT_COLUMN = ("body_text", pa.string(), "STRING")  # bodyFormat=text
VARIANT_COLUMN = "body_variant"  # body.format variant: the JSON body as one VARIANT column, added by Spark
MATCHED_COLUMN = ("matched", pa.bool_(), "BOOLEAN")  # includeFiltered=true: every offset, with the tag verdict
WINDOW_COLUMN = ("window_start", _TS, "TIMESTAMP")  # plan option: the window each chunk belongs to
#: bodyFormat=protobuf: the decoded body (a STRUCT of the message's fields) and why a body did not decode
PROTOBUF_COLUMN = "body_protobuf"
PROTOBUF_ERROR_COLUMN = "body_protobuf_error"
#: framing=confluent (bodies in Confluent's wire format, but Protobuf's): the payload after the frame, and why a
#: body has none (no frame, an unknown schema id, another schema)
PAYLOAD_COLUMN = "body_payload"
FRAME_ERROR_COLUMN = "body_frame_error"

#: Every column name rocketlake itself may put in a table (a JSON body's fields must not take one).
OWN_COLUMNS = frozenset(name for name, *_ in _CATALOGUE) | {
    TEXT_COLUMN[0],
    VARIANT_COLUMN,
    MATCHED_COLUMN[0],
    WINDOW_COLUMN[0],
    PROTOBUF_COLUMN,
    PROTOBUF_ERROR_COLUMN,
    PAYLOAD_COLUMN,
    FRAME_ERROR_COLUMN,
}


class UnknownColumn(ValueError):
    """A metadata column name that is not one; the message lists those that are."""


def check_metadata(names) -> tuple[str, ...]:
    """``names`` in catalogue order, or :class:`UnknownColumn` naming the first that is not a metadata column."""
    wanted = set(names)
    for name in names:
        if name not in METADATA_COLUMNS:
            hint = " (always there)" if name in CORE_COLUMNS else ""
            raise UnknownColumn(f"{name!r} is not a metadata column{hint}; allowed: {', '.join(METADATA_COLUMNS)}")
    return tuple(name for name in METADATA_COLUMNS if name in wanted)


def source_fields(
    metadata=(), *, text: bool = False, matched: bool = False, window: bool = False
) -> list[tuple[str, pa.DataType, str]]:
    """(name, Arrow type, DDL type) of the source's columns: the core ones, ``metadata``, then the optional ones."""
    wanted = set(check_metadata(metadata))
    fields = [(name, kind, ddl) for name, kind, ddl, always in _CATALOGUE if always or name in wanted]
    for flag, column in ((text, TEXT_COLUMN), (matched, MATCHED_COLUMN), (window, WINDOW_COLUMN)):
        if flag:
            fields.append(column)
    return fields


def arrow_schema(metadata=(), *, text: bool = False, matched: bool = False, window: bool = False) -> pa.Schema:
    return pa.schema(
        [(name, kind) for name, kind, _ in source_fields(metadata, text=text, matched=matched, window=window)]
    )


def schema_ddl(metadata=(), *, text: bool = False, matched: bool = False, window: bool = False) -> str:
    return ", ".join(
        f"{name} {ddl}" for name, _, ddl in source_fields(metadata, text=text, matched=matched, window=window)
    )


def landed_metadata(cfg, table_columns=()) -> tuple[str, ...]:
    """The metadata columns an ingestion's table gets: those configured (``metadata_columns``); the origin columns
    wherever redelivered copies can land (an ingestion whose messages can fail, whose copies are found by them);
    in a dead-letter table, the origin columns and the attempts made; and those the table already has (left out,
    they would silently turn null)."""
    names = set(cfg.metadata_columns) | (set(table_columns) & set(METADATA_COLUMNS))
    if cfg.can_fail:
        names |= set(ORIGIN_COLUMNS)
    if cfg.dead_letters_of is not None:
        names |= {*ORIGIN_COLUMNS, "reconsume_times"}
    return check_metadata(names)


def read_metadata(cfg, landed: tuple[str, ...]) -> tuple[str, ...]:
    """The metadata columns a run reads: what it lands, what sending failures back needs, and for a listener every
    one (it gets what a Java listener's ``MessageExt`` holds)."""
    if cfg.listener is not None:
        return METADATA_COLUMNS
    names = set(landed)
    if cfg.can_fail:
        names |= set(SEND_BACK_COLUMNS) | set(ORIGIN_COLUMNS)
    return check_metadata(names)
