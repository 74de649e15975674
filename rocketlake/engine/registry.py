"""Bodies framed by a schema registry (``body.framing: confluent``): Confluent's wire format, and the schemas its ids
name, from a registry that speaks Confluent's REST API or from a directory of schemas keyed by id.

The frame: a magic byte 0, the schema's id (4 bytes, big-endian), for Protobuf the message-index list (which
message of the schema's file the body is: a count then each index, zigzag varints; a lone 0 stands for the first
message), then the payload. A body without a frame, or whose id no schema has, is a failed message; a registry that
cannot be reached fails the window (``RegistryUnreachable``): bodies are never landed undecoded. Each id is looked up
once a process.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = 0
HEADER_BYTES = 5
TIMEOUT_S = 10.0


class FrameError(ValueError):
    """A body that is not in Confluent's wire format (the sentence says why)."""


class RegistryUnreachable(ConnectionError):
    """The registry did not answer: the window fails, nothing lands."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if at >= len(data):
            raise FrameError("body ends inside its message-index list")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise FrameError("body's message-index list holds a varint longer than 10 bytes")


def _zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


@dataclass(frozen=True)
class Frame:
    schema_id: int
    message_indexes: tuple[int, ...]  # Protobuf: the message's path in its schema's file; () otherwise
    payload_at: int  # where the payload begins in the body


def read_frame(body: bytes, protobuf: bool) -> Frame:
    """The frame at the head of ``body``, or ``FrameError`` saying why it has none."""
    if len(body) < HEADER_BYTES or body[0] != MAGIC:
        first = f"0x{body[0]:02x}" if body else "nothing"
        raise FrameError(f"body is not in Confluent's wire format (it starts with {first}, not the magic byte 0x00)")
    schema_id = int.from_bytes(body[1:HEADER_BYTES], "big", signed=True)
    if not protobuf:
        return Frame(schema_id, (), HEADER_BYTES)
    count, at = _varint(body, HEADER_BYTES)
    count = _zigzag(count)
    if count == 0:
        return Frame(schema_id, (0,), at)
    if count < 0 or count > 100:
        raise FrameError(f"body's message-index list claims {count} indexes")
    indexes = []
    for _ in range(count):
        index, at = _varint(body, at)
        indexes.append(_zigzag(index))
    return Frame(schema_id, tuple(indexes), at)


def frame(schema_id: int, payload: bytes, message_indexes: tuple[int, ...] | None = None) -> bytes:
    """``payload`` in Confluent's wire format (``message_indexes`` for Protobuf): what a serializer writes."""

    def varint(value: int) -> bytes:
        value = (value << 1) ^ (value >> 63)  # zigzag
        out = bytearray()
        while True:
            byte = value & 0x7F
            value >>= 7
            if value:
                out.append(byte | 0x80)
            else:
                out.append(byte)
                return bytes(out)

    head = bytes([MAGIC]) + schema_id.to_bytes(4, "big", signed=True)
    if message_indexes is None:
        return head + payload
    if message_indexes == (0,):
        return head + b"\x00" + payload
    return head + varint(len(message_indexes)) + b"".join(varint(i) for i in message_indexes) + payload


@dataclass
class SchemaLookup:
    """The schemas the frames' ids name, asked of a registry (``url``: Confluent's REST API) or a directory
    (``directory``: one file a schema, named ``<id>.<anything>``), each id once a process."""

    url: str | None = None
    directory: str | None = None
    _schemas: dict[int, str | None] = field(default_factory=dict, repr=False)

    def known(self, schema_id: int) -> bool:
        return self.schema(schema_id) is not None

    def schema(self, schema_id: int) -> str | None:
        """The text of the schema ``schema_id`` names, or None when the registry holds no such id."""
        if schema_id not in self._schemas:
            self._schemas[schema_id] = self._look_up(schema_id)
        return self._schemas[schema_id]

    def _look_up(self, schema_id: int) -> str | None:
        if self.directory is not None:
            found = sorted(Path(self.directory).glob(f"{schema_id}.*"))
            return found[0].read_text() if found else None
        address = f"{self.url.rstrip('/')}/schemas/ids/{schema_id}"
        try:
            with urllib.request.urlopen(address, timeout=TIMEOUT_S) as answer:
                return json.load(answer)["schema"]
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise RegistryUnreachable(
                f"the schema registry at {self.url} answered HTTP {e.code} for schema id {schema_id}: nothing of "
                "this window is landed until it answers"
            ) from None
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as e:
            reason = getattr(e, "reason", e)
            raise RegistryUnreachable(
                f"the schema registry at {self.url} cannot be reached ({reason}) to look up schema id {schema_id}: "
                "nothing of this window is landed until it answers"
            ) from None


def unframed(
    bodies: list[bytes | None], lookup: SchemaLookup, check=None, *, protobuf: bool = False
) -> tuple[list[bytes | None], list[str | None]]:
    """Each body's payload, or None with why not: no frame, an id the registry does not hold, or what ``check``
    (``check(frame, schema_text) -> reason or None``) says of the frame and its id's schema, asked once per id and
    message-index list. ``protobuf``: frames carry Protobuf's message-index list."""
    payloads: list[bytes | None] = []
    errors: list[str | None] = []
    verdicts: dict[tuple[int, tuple[int, ...]], str | None] = {}
    for body in bodies:
        if body is None:
            payloads.append(None)
            errors.append(None)
            continue
        try:
            frame = read_frame(body, protobuf=protobuf)
        except FrameError as e:
            payloads.append(None)
            errors.append(str(e))
            continue
        key = (frame.schema_id, frame.message_indexes)
        if key not in verdicts:
            text = lookup.schema(frame.schema_id)
            if text is None:
                verdicts[key] = (
                    f"body is framed with schema id {frame.schema_id}, which the schema registry does not hold"
                )
            else:
                verdicts[key] = check(frame, text) if check else None
        why = verdicts[key]
        payloads.append(None if why else body[frame.payload_at :])
        errors.append(why)
    return payloads, errors
