"""Bodies of two requests a broker sends a consumer on its heartbeat connection, and of the answer to one.

* RESET_CONSUMER_CLIENT_OFFSET (220, oneway): what ``mqadmin resetOffsetByTime`` makes a broker send every client
  of a group when the broker does not reset offsets itself (4.x; 5.x with ``useServerSideResetOffset=false``).
  Header: ``topic``, ``group``, ``timestamp``, ``isForce``. Body: fastjson's ``ResetOffsetBody``,
  ``{"offsetTable":{{"brokerName":..,"queueId":..,"topic":..}:offset,..}}`` (object keys: not JSON).
  ``Broker2Client.resetOffset`` puts in it, per write queue of that broker, the offset stored at the time
  (``isForce``, or when it is before the group's), else the group's committed offset.
* CONSUME_MESSAGE_DIRECTLY (309): ``mqadmin queryMsgById -g G -d CLIENT_ID`` and the Dashboard's "resend to
  consumer". Header: ``consumerGroup``, ``clientId``, ``msgId``, ``brokerName``, ``topic``; body: the message's
  record as the commit log stores it. Answer: ``ConsumeMessageDirectlyResult`` as JSON.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from . import fastjson
from .errors import ProtocolError
from .message_queue import MessageQueue


def decode_reset_offset_body(body: bytes | None) -> dict[MessageQueue, int]:
    """``ResetOffsetBody.offsetTable``: queue -> the offset the broker asks the client to move to."""
    if not body:
        return {}
    parsed = fastjson.loads(body)
    table = parsed.get("offsetTable") if isinstance(parsed, dict) else None
    if not isinstance(table, dict):
        raise ProtocolError(f"ResetOffsetBody without an offsetTable: {bytes(body)[:200]!r}")
    found = {}
    for key, offset in table.items():
        fields = dict(key) if isinstance(key, fastjson.FrozenObject) else None
        if not fields or not isinstance(offset, int):
            raise ProtocolError(f"ResetOffsetBody entry {key!r}: {offset!r} is not a queue and an offset")
        found[MessageQueue(fields["topic"], fields["brokerName"], int(fields["queueId"]))] = offset
    return found


class CMResult(enum.Enum):
    """``CMResult``: the verdict of a direct consume."""

    CR_SUCCESS = "CR_SUCCESS"
    CR_LATER = "CR_LATER"
    CR_ROLLBACK = "CR_ROLLBACK"
    CR_COMMIT = "CR_COMMIT"
    CR_THROW_EXCEPTION = "CR_THROW_EXCEPTION"
    CR_RETURN_NULL = "CR_RETURN_NULL"


@dataclass(frozen=True)
class DirectConsumeResult:
    """``ConsumeMessageDirectlyResult``; mqadmin prints its ``toString``."""

    consume_result: CMResult
    order: bool = False
    auto_commit: bool = True
    remark: str | None = None
    spent_time_ms: int = 0

    def encode(self) -> bytes:
        """fastjson's form: fields sorted, a null remark left out."""
        fields = {
            "autoCommit": self.auto_commit,
            "consumeResult": self.consume_result.value,
            "order": self.order,
            "spentTimeMills": int(self.spent_time_ms),
        }
        if self.remark is not None:
            fields["remark"] = self.remark
        return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def __str__(self) -> str:  # ConsumeMessageDirectlyResult#toString
        return (
            f"ConsumeMessageDirectlyResult [order={str(self.order).lower()}, "
            f"autoCommit={str(self.auto_commit).lower()}, consumeResult={self.consume_result.value}, "
            f"remark={self.remark if self.remark is not None else 'null'}, spentTimeMills={self.spent_time_ms}]"
        )
