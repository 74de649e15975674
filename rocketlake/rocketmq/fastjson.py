"""Parse the JSON dialect fastjson 1.x writes for maps with non-string keys.

fastjson serialises ``Map<MessageQueue, OffsetWrapper>`` (ConsumeStats, reference 2.15) with
*object* keys and ``Map<Long, String>`` with bare integer keys::

    {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":5}},"consumeTps":0.0}

Neither is JSON. :func:`loads` is a small recursive-descent parser that accepts any JSON value
as an object key; scalars and strings are read by the standard library's scanner. Object keys
come back as :class:`FrozenObject` (hashable), integer keys as ``int``; everything else is
what ``json.loads`` returns.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .errors import ProtocolError

__all__ = ["FrozenObject", "loads"]

_SCALAR = json.JSONDecoder()
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_MAX_DEPTH = 200


class FrozenObject(tuple):
    """An object used as a map key: its ``(key, value)`` pairs, sorted; ``dict(k)`` restores it."""

    __slots__ = ()

    def as_dict(self) -> dict[Any, Any]:
        return dict(self)


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return FrozenObject(sorted(((k, _freeze(v)) for k, v in value.items()), key=repr))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def loads(text: str | bytes) -> Any:
    """Parse ``text`` (fastjson output, standard JSON included); raise ProtocolError if malformed."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"JSON body is not UTF-8: {exc.reason}", offset=exc.start) from None
    try:
        value, pos = _value(text, _skip(text, 0), 0)
    except (ValueError, IndexError, RecursionError) as exc:
        raise ProtocolError(f"malformed JSON body: {exc}") from None
    pos = _skip(text, pos)
    if pos != len(text):
        raise ProtocolError(f"malformed JSON body: unexpected text at character {pos}: {text[pos : pos + 20]!r}")
    return value


def _skip(s: str, i: int) -> int:
    return _WHITESPACE.match(s, i).end()  # type: ignore[union-attr]  # the pattern always matches


def _value(s: str, i: int, depth: int) -> tuple[Any, int]:
    if depth > _MAX_DEPTH:
        raise ValueError(f"nesting deeper than {_MAX_DEPTH} levels")
    c = s[i] if i < len(s) else ""
    if c == "{":
        return _object(s, i + 1, depth + 1)
    if c == "[":
        return _array(s, i + 1, depth + 1)
    if not c:
        raise ValueError("unexpected end of text")
    return _SCALAR.raw_decode(s, i)


def _expect(s: str, i: int, chars: str) -> tuple[str, int]:
    i = _skip(s, i)
    c = s[i] if i < len(s) else ""
    if not c or c not in chars:
        raise ValueError(f"expected one of {chars!r} at character {i}, found {s[i : i + 20]!r}")
    return c, i + 1


def _object(s: str, i: int, depth: int) -> tuple[dict[Any, Any], int]:
    out: dict[Any, Any] = {}
    i = _skip(s, i)
    if s[i : i + 1] == "}":
        return out, i + 1
    while True:
        key, i = _value(s, _skip(s, i), depth)
        if isinstance(key, (dict, list)):
            key = _freeze(key)
        _, i = _expect(s, i, ":")
        out[key], i = _value(s, _skip(s, i), depth)
        c, i = _expect(s, i, ",}")
        if c == "}":
            return out, i


def _array(s: str, i: int, depth: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    i = _skip(s, i)
    if s[i : i + 1] == "]":
        return out, i + 1
    while True:
        item, i = _value(s, _skip(s, i), depth)
        out.append(item)
        c, i = _expect(s, i, ",]")
        if c == "]":
            return out, i
