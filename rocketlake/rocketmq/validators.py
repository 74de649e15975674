"""Topic and group name rules, as the Java client enforces them before any I/O.

Rules and texts come from ``client/.../Validators.java`` (``checkTopic``, ``checkGroup``,
``isNotAllowedSendTopic``) and ``common/.../topic/TopicValidator.java`` (character bitmap,
system topics); reference section 5.1. Each error message starts with the Java text, so
it can be searched for, and then names the value, the rule and the limit it broke.

The group limit is 255 (``Validators.CHARACTER_MAX_LENGTH``) as in every released version up
to 5.3.3; upstream develop lowers it to 120 so that ``%RETRY%``/``%DLQ%`` + group stays <= 255.
"""

from __future__ import annotations

import re

from .errors import InvalidName

__all__ = [
    "DEFAULT_CONSUMER_GROUP",
    "GROUP_MAX_LENGTH",
    "NOT_ALLOWED_SEND_TOPICS",
    "SYSTEM_TOPICS",
    "TOPIC_MAX_LENGTH",
    "VALID_PATTERN",
    "check_consumer_group",
    "check_group",
    "check_topic",
    "check_topic_for_send",
    "is_system_group",
    "is_system_topic",
]

#: ``Validators.TOPIC_MAX_LENGTH``
TOPIC_MAX_LENGTH = 127
#: ``Validators.CHARACTER_MAX_LENGTH`` (released 4.9.x - 5.3.3)
GROUP_MAX_LENGTH = 255
#: The pattern quoted in Java's messages; implemented there as a 128-entry bitmap.
VALID_PATTERN = "^[%|a-zA-Z0-9_-]+$"
_VALID = re.compile(r"[%|a-zA-Z0-9_\-]+")  # fullmatch; ASCII-only by construction

#: ``MixAll.DEFAULT_CONSUMER_GROUP``, refused by ``DefaultMQPushConsumerImpl#checkConfig``.
DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"
_SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"  # MixAll.CID_RMQ_SYS_PREFIX
_SYSTEM_TOPIC_PREFIX = "rmq_sys_"  # TopicValidator.SYSTEM_TOPIC_PREFIX

#: ``TopicValidator.SYSTEM_TOPIC_SET``
SYSTEM_TOPICS = frozenset(
    {
        "TBW102",  # AUTO_CREATE_TOPIC_KEY_TOPIC
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",  # RMQ_SYS_ROCKSDB_OFFSET_TOPIC
    }
)
#: ``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)

# java.lang.Character#isWhitespace is Python's str.isspace minus the no-break spaces and NEL.
_NOT_JAVA_WHITESPACE = frozenset("\u00a0\u2007\u202f\u0085")


def _is_blank(value: str) -> bool:
    """``UtilAll.isBlank``: empty, or only Java whitespace."""
    return not value or (value.isspace() and _NOT_JAVA_WHITESPACE.isdisjoint(value))


def _java_length(value: str) -> int:
    """``String.length()`` counts UTF-16 code units, so characters beyond U+FFFF count twice."""
    return len(value.encode("utf-16-le", "surrogatepass")) // 2


def _check_name(kind: str, value: str, max_length: int, messages: tuple[str, str, str]) -> None:
    blank, too_long, illegal = messages
    shown = repr(value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "...")
    if not isinstance(value, str) or _is_blank(value):
        raise InvalidName(f"{blank} (got {shown})", kind=kind, value=value, rule="blank")
    length = _java_length(value)
    if length > max_length:
        raise InvalidName(
            f"{too_long} (got {shown}, {length} characters)",
            kind=kind,
            value=value,
            rule="max_length",
            limit=max_length,
        )
    if not _VALID.fullmatch(value):
        bad = "".join(sorted({c for c in value if not _VALID.fullmatch(c)}))
        raise InvalidName(
            f"{illegal} (got {shown}; offending characters: {bad!r})",
            kind=kind,
            value=value,
            rule="characters",
            limit=VALID_PATTERN,
        )


def check_topic(topic: str) -> None:
    """``Validators.checkTopic``: not blank, at most 127 characters, only ``[%|a-zA-Z0-9_-]``.

    Note ``%`` is legal, so ``%RETRY%group`` passes.
    """
    _check_name(
        "topic",
        topic,
        TOPIC_MAX_LENGTH,
        (
            "The specified topic is blank",
            f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}.",
            f"The specified topic[{topic}] contains illegal characters, allowing only {VALID_PATTERN}",
        ),
    )


def check_topic_for_send(topic: str) -> None:
    """``Validators.checkTopic`` + ``isNotAllowedSendTopic`` (``Validators.checkMessage``)."""
    check_topic(topic)
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise InvalidName(
            f"Sending message to topic[{topic}] is forbidden. (it is a broker-internal system topic)",
            kind="topic",
            value=topic,
            rule="not_allowed_send",
        )


def check_group(group: str) -> None:
    """``Validators.checkGroup``: not blank, at most 255 characters, only ``[%|a-zA-Z0-9_-]``."""
    _check_name(
        "group",
        group,
        GROUP_MAX_LENGTH,
        (
            "the specified group is blank",
            f"the specified group is longer than group max length {GROUP_MAX_LENGTH}.",
            f"the specified group[{group}] contains illegal characters, allowing only {VALID_PATTERN}",
        ),
    )


def check_consumer_group(group: str) -> None:
    """:func:`check_group` plus ``checkConfig``'s refusal of the reserved ``DEFAULT_CONSUMER``."""
    check_group(group)
    if group == DEFAULT_CONSUMER_GROUP:
        raise InvalidName(
            "consumerGroup can not equal DEFAULT_CONSUMER, please specify another one.",
            kind="group",
            value=group,
            rule="reserved",
        )


def is_system_topic(topic: str) -> bool:
    """``TopicValidator.isSystemTopic``: a known system topic or the ``rmq_sys_`` prefix."""
    return topic in SYSTEM_TOPICS or topic.startswith(_SYSTEM_TOPIC_PREFIX)


def is_system_group(group: str) -> bool:
    """``MixAll.isSysConsumerGroup``: the ``CID_RMQ_SYS_`` prefix."""
    return group.startswith(_SYSTEM_GROUP_PREFIX)
