"""Tag subscriptions: expression parsing, Java tag hash codes, and the client-side tag re-check.

Why this matters: the broker filters a TAG subscription only by the *hash code* of the tag stored in
the consume queue, so messages whose tag merely collides with a subscribed tag reach the client. The
Java client therefore re-checks the tag string after every pull (``PullAPIWrapper#processPullResult``).
Our hash codes go to the broker (heartbeat / pull ``subscription``), so they must be bit-identical to
Java's ``String.hashCode``; our re-check must keep exactly the messages Java keeps.

Upstream sources (apache/rocketmq):

* ``remoting/.../protocol/filter/FilterAPI.java#buildSubscriptionData`` (4.9.x:
  ``common/.../protocol/filter/FilterAPI.java``, same behaviour)
* ``remoting/.../protocol/heartbeat/SubscriptionData.java`` (``SUB_ALL``, JSON field names)
* ``broker/.../filter/ExpressionMessageFilter.java#isMatchedByConsumeQueue`` (broker-side check)
* ``common/.../message/MessageExtBrokerInner.java#tagsString2tagsCode`` (tag -> consume-queue code)
* ``client/.../impl/consumer/PullAPIWrapper.java#processPullResult`` (client-side re-check)
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from .errors import InvalidArgument

if TYPE_CHECKING:  # pragma: no cover
    from .message import Message

__all__ = [
    "EXPRESSION_TYPE_SQL92",
    "EXPRESSION_TYPE_TAG",
    "SUB_ALL",
    "Subscription",
    "filter_by_tags",
    "java_string_hash",
    "tags_code",
]

#: ``SubscriptionData.SUB_ALL``
SUB_ALL: Final = "*"
#: ``common/.../filter/ExpressionType.java``
EXPRESSION_TYPE_TAG: Final = "TAG"
EXPRESSION_TYPE_SQL92: Final = "SQL92"

_TAG_SEPARATOR: Final = "||"
# Java String.trim() strips every char <= U+0020 (all C0 controls and space), nothing else;
# Python's str.strip() would also strip U+0085, U+00A0, U+2000..., and keep U+0000-U+0008.
_JAVA_TRIM_CHARS: Final = "".join(map(chr, range(0x21)))


def java_string_hash(text: str) -> int:
    """``java.lang.String#hashCode`` as a signed 32-bit int.

    Java hashes UTF-16 code units, so a character outside the BMP contributes its two surrogates.
    Lone surrogates in ``text`` (possible in Python and in Java) are hashed as the code unit itself.
    """
    h = 0
    if text.isascii():
        units: Iterable[int] = text.encode("ascii")
    else:
        encoded = text.encode("utf-16-be", "surrogatepass")
        units = struct.unpack(f">{len(encoded) // 2}H", encoded)
    for unit in units:
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def tags_code(tags: str | None) -> int:
    """Consume-queue tag code of a message: 0 without tags, else ``tags.hashCode()``.

    ``MessageExtBrokerInner#tagsString2tagsCode``; the broker stores this value and compares it
    with the subscription's ``code_set``.
    """
    return java_string_hash(tags) if tags else 0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _is_tag_type(expression_type: str | None) -> bool:
    # ExpressionType#isTagType: null, "" and "TAG" all mean TAG.
    return not expression_type or expression_type == EXPRESSION_TYPE_TAG


@dataclass(frozen=True, slots=True)
class Subscription:
    """``SubscriptionData`` of one topic, built like ``FilterAPI.build``.

    ``sub_version`` is the creation time in ms, as in Java; it is excluded from equality.
    """

    topic: str
    sub_string: str
    tags_set: frozenset[str] = frozenset()
    code_set: frozenset[int] = frozenset()
    expression_type: str = EXPRESSION_TYPE_TAG
    sub_version: int = field(default_factory=_now_ms, compare=False)

    @classmethod
    def parse(
        cls, topic: str, expression: str | None, expression_type: str | None = EXPRESSION_TYPE_TAG
    ) -> Subscription:
        """Build a subscription from a consumer's expression (``FilterAPI#build``).

        TAG expressions: ``None``, ``""`` and ``"*"`` subscribe to everything (``sub_string`` becomes
        ``"*"``); otherwise the text is split on the literal ``"||"``, every piece is trimmed the Java
        way, empty pieces are dropped, and ``sub_string`` keeps the original text. So ``" || "``
        yields no tags although it is not ``"*"``: the broker then matches nothing and the client
        re-checks nothing, exactly as in Java.

        SQL92 (or other non-TAG) expressions are kept verbatim with no tags; the broker evaluates them.

        Raises:
            InvalidArgument: (a ``ValueError``) ``"subString split error"`` when Java's ``split``
                yields no piece at all (the expression is only ``"||"`` separators), or an empty
                non-TAG expression.
        """
        if not _is_tag_type(expression_type):
            if not expression:
                raise InvalidArgument(f"Expression can't be null! {expression_type}")
            return cls(topic=topic, sub_string=expression, expression_type=str(expression_type))
        if not expression or expression == SUB_ALL:
            return cls(topic=topic, sub_string=SUB_ALL)
        pieces = expression.split(_TAG_SEPARATOR)
        # Java's String#split drops trailing empty strings; a result of length 0 is an error.
        while pieces and pieces[-1] == "":
            pieces.pop()
        if not pieces:
            raise InvalidArgument("subString split error")
        tags = [tag for tag in (piece.strip(_JAVA_TRIM_CHARS) for piece in pieces) if tag]
        return cls(
            topic=topic,
            sub_string=expression,
            tags_set=frozenset(tags),
            code_set=frozenset(java_string_hash(tag) for tag in tags),
        )

    @property
    def is_tag_type(self) -> bool:
        return _is_tag_type(self.expression_type)

    @property
    def subscribes_all(self) -> bool:
        """True for ``"*"`` (also what ``None`` and ``""`` were normalised to)."""
        return self.is_tag_type and self.sub_string == SUB_ALL

    def matches_tags(self, tags: str | None) -> bool:
        """Client-side re-check of one message's TAGS (``PullAPIWrapper#processPullResult``).

        Only when ``tags_set`` is non-empty is anything filtered: the message must then carry a
        TAGS property equal (whole string) to one of the subscribed tags. A message without tags
        therefore passes ``"*"`` and fails every real tag list.
        """
        if not self.tags_set:
            return True
        return tags is not None and tags in self.tags_set

    def matches(self, message: Message) -> bool:
        """``matches_tags`` applied to ``message.tags``."""
        return self.matches_tags(message.tags)

    def matches_tags_code(self, code: int | None) -> bool:
        """Broker-side consume-queue check (``ExpressionMessageFilter#isMatchedByConsumeQueue``).

        Useful for fakes and tests that simulate the broker: hash collisions pass here and are
        removed by ``matches``. Non-TAG expressions are not evaluated (treated as a match).
        """
        if not self.is_tag_type or code is None or self.sub_string == SUB_ALL:
            return True
        return code in self.code_set

    def as_json_dict(self) -> dict[str, Any]:
        """Fields of the fastjson form of ``SubscriptionData`` (heartbeat / pull ``subscription``).

        Set members are sorted for reproducible output; Java's HashSet order carries no meaning.
        """
        return {
            "classFilterMode": False,
            "codeSet": sorted(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": sorted(self.tags_set),
            "topic": self.topic,
        }


def filter_by_tags(messages: Iterable[Message], subscription: Subscription) -> list[Message]:
    """Keep the messages that pass ``subscription.matches`` (``PullAPIWrapper#processPullResult``).

    Returns the input as a new list unchanged when the subscription has no tags (Java skips the
    loop in that case).
    """
    if not subscription.tags_set:
        return list(messages)
    tags_set = subscription.tags_set
    return [m for m in messages if (t := m.tags) is not None and t in tags_set]
