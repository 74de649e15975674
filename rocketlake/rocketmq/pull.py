"""PULL_MESSAGE (11): the request we send and what its answer means (sans I/O).

Request (reference 2.3, ``PullMessageRequestHeader``): every ``@CFNotNull`` field is sent;
``sysFlag`` = ``FLAG_SUBSCRIPTION`` (we always post our subscription, so the broker needs no
heartbeat state) ``| FLAG_COMMIT_OFFSET`` when an offset is committed on the way ``|
FLAG_SUSPEND`` for long polling. No long polling by default: a batch read of a closed window
must never wait for messages that will not come.

Response codes map like ``MQClientAPIImpl#processPullResponse``: 0 FOUND, 19 NO_NEW_MSG,
20 NO_MATCHED_MSG, 21 OFFSET_ILLEGAL; any other code is an error. The broker also puts its
``GetMessageStatus`` name in the remark (``PullMessageProcessor``: ``setRemark(status.name())``),
which tells e.g. NO_MESSAGE_IN_QUEUE from OFFSET_OVERFLOW_BADLY -- both answered with 21 or 19;
it is kept as :attr:`PullResult.store_status`.

Post-processing is ``PullAPIWrapper#processPullResult``: decode, unwrap inner batches, and
re-check tags, since the broker only compares tag *hash codes* (reference 4.2). The client does
not add ``MIN_OFFSET``/``MAX_OFFSET`` properties to every message as Java does: the same values
are :attr:`PullResult.min_offset` / :attr:`PullResult.max_offset`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .codes import RequestCode, ResponseCode
from .columnar import RawRecords, scan_records
from .errors import InvalidArgument, ProtocolError, error_for_response
from .filter import EXPRESSION_TYPE_TAG, Subscription
from .frame import RemotingCommand
from .message import Message, decode_messages

__all__ = [
    "FLAG_CLASS_FILTER",
    "FLAG_COMMIT_OFFSET",
    "FLAG_LITE_PULL_MESSAGE",
    "FLAG_SUBSCRIPTION",
    "FLAG_SUSPEND",
    "GetMessageStatus",
    "PullResult",
    "PullStatus",
    "build_pull_request",
    "parse_pull_response",
]

# PullSysFlag.java
FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
FLAG_CLASS_FILTER = 0x8
FLAG_LITE_PULL_MESSAGE = 0x10


class PullStatus(enum.Enum):
    """``PullStatus.java``: the client's reading of the response code."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


class GetMessageStatus(enum.Enum):
    """``store/GetMessageStatus.java``: why the store answered as it did (the response remark)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_RESET = "OFFSET_RESET"  # 5.x server-side offset reset


_STATUS_BY_CODE = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}
_STORE_STATUS = {s.value: s for s in GetMessageStatus}


@dataclass(frozen=True, slots=True)
class PullResult:
    """The answer to one pull.

    ``messages`` passed the client-side tag re-check (with ``columnar``, they may be
    :class:`RawRecords`, not yet decoded); ``filtered_out`` counts the decoded
    messages it dropped (tag hash collisions). Every offset in ``[request offset,
    next_begin_offset)`` is either in ``messages``, dropped by that re-check, or was skipped by
    the broker's own tag-code filter. ``max_offset`` is one past the queue's last message.
    """

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int = 0
    messages: list[Message] | RawRecords = field(default_factory=list, repr=False)
    filtered_out: int = 0
    store_status: GetMessageStatus | None = None

    @property
    def found(self) -> bool:
        return self.status is PullStatus.FOUND


#: The fields of a pull request that change from one pull of a queue to the next (see frame.RequestTemplate).
PULL_OPEN_FIELDS = ("queueOffset", "maxMsgNums", "commitOffset")


def check_pull_numbers(
    queue_id: int, offset: int, max_msgs: int, commit_offset: int | None, suspend_timeout_ms: int
) -> None:
    """Refuse a pull's numbers out of range (InvalidArgument, naming the argument and its value)."""
    if queue_id < 0:
        raise InvalidArgument(f"queue_id must be >= 0, got {queue_id}")
    if offset < 0:
        raise InvalidArgument(f"pull offset must be >= 0, got {offset}")
    if not 1 <= max_msgs <= 1024:  # pullBatchSize range of checkConfig
        raise InvalidArgument(f"max_msgs must be within [1, 1024], got {max_msgs}")
    if suspend_timeout_ms < 0:
        raise InvalidArgument(f"suspend_timeout_ms must be >= 0, got {suspend_timeout_ms}")
    if commit_offset is not None and commit_offset < 0:
        raise InvalidArgument(f"commit_offset must be >= 0, got {commit_offset}")


def build_pull_request(
    *,
    consumer_group: str,
    topic: str,
    queue_id: int,
    offset: int,
    max_msgs: int,
    subscription: Subscription,
    commit_offset: int | None = None,
    suspend_timeout_ms: int = 0,
    post_subscription: bool = True,
    broker_name: str | None = None,
) -> RemotingCommand:
    """The PULL_MESSAGE request (code 11, which 4.9.x and 5.x both serve).

    ``post_subscription=False`` omits FLAG_SUBSCRIPTION: the broker then uses the subscription
    a HEART_BEAT registered for the group (and answers 24/25 without one).
    """
    check_pull_numbers(queue_id, offset, max_msgs, commit_offset, suspend_timeout_ms)
    sys_flag = 0
    if post_subscription:
        sys_flag |= FLAG_SUBSCRIPTION
    if commit_offset is not None:
        sys_flag |= FLAG_COMMIT_OFFSET
    if suspend_timeout_ms:
        sys_flag |= FLAG_SUSPEND
    fields: dict[str, object] = {
        "consumerGroup": consumer_group,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": max_msgs,
        "sysFlag": sys_flag,
        "commitOffset": commit_offset if commit_offset is not None else 0,
        "suspendTimeoutMillis": suspend_timeout_ms,
        "subVersion": subscription.sub_version if not subscription.is_tag_type else 0,
        "bname": broker_name,
    }
    if post_subscription:
        fields["subscription"] = subscription.sub_string
        fields["expressionType"] = subscription.expression_type or EXPRESSION_TYPE_TAG
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)


def _long(response: RemotingCommand, key: str, address: str) -> int:
    raw = response.ext_fields.get(key)
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        raise ProtocolError(
            f"{address} answered PULL_MESSAGE with {key}={raw!r}, not a number",
            address=address,
            request_code=RequestCode.PULL_MESSAGE,
        ) from None


def parse_pull_response(
    response: RemotingCommand,
    subscription: Subscription,
    *,
    address: str,
    hint: str | None = None,
    columnar: bool = False,
) -> PullResult:
    """Map one PULL_MESSAGE response to a :class:`PullResult`, or raise its error.

    ``columnar``: where every record is of the shape :mod:`.columnar` reads and no tag re-check
    applies, ``messages`` are the indexed :class:`RawRecords` instead of decoded messages.
    """
    status = _STATUS_BY_CODE.get(response.code)
    if status is None:
        raise error_for_response(
            address=address,
            request_code=RequestCode.PULL_MESSAGE,
            response_code=response.code,
            remark=response.remark,
            hint=hint,
        )
    messages: list[Message] | RawRecords = []
    filtered = 0
    records = None
    body = response.body_view if response.body_view is not None else response.body  # see FrameDecoder
    if columnar and status is PullStatus.FOUND and body and not subscription.tags_set:
        records = scan_records(body, response.body_at)
    if records is not None:
        messages = records
    elif status is PullStatus.FOUND and body:
        try:
            messages = decode_messages(body)
        except ProtocolError as exc:
            raise ProtocolError(
                f"{address} answered PULL_MESSAGE with a body that does not decode: {exc}",
                address=address,
                request_code=RequestCode.PULL_MESSAGE,
            ) from exc
        tags_set = subscription.tags_set
        if tags_set and subscription.is_tag_type:
            kept = [m for m in messages if (t := m.properties.get("TAGS")) is not None and t in tags_set]
            filtered = len(messages) - len(kept)
            messages = kept
    ext = response.ext_fields
    try:  # every answer has the four, as numbers; _long says which is not, or defaults one that is missing
        numbers = int(ext["nextBeginOffset"]), int(ext["minOffset"]), int(ext["maxOffset"])
        suggested = int(ext["suggestWhichBrokerId"])
    except (KeyError, ValueError):
        numbers = tuple(_long(response, key, address) for key in ("nextBeginOffset", "minOffset", "maxOffset"))
        suggested = _long(response, "suggestWhichBrokerId", address)
    return PullResult(
        status=status,
        next_begin_offset=numbers[0],
        min_offset=numbers[1],
        max_offset=numbers[2],
        suggest_which_broker_id=suggested,
        messages=messages,
        filtered_out=filtered,
        store_status=_STORE_STATUS.get(response.remark or ""),
    )


def ask_again(moved: bool, result: PullResult) -> bool:
    """Whether a pull answer is to be asked again at once (``moved``: it suggested another broker than before):
    an empty answer sending the queue elsewhere (a 5.x slave answers what it has not copied yet
    PULL_RETRY_IMMEDIATELY, suggesting the master), or a 5.x broker's server-side reset of the group (mqadmin
    resetOffsetByTime), announced to the group's next pull of the queue whatever its offset, and erased by it."""
    return (moved and not result.found) or result.store_status is GetMessageStatus.OFFSET_RESET
