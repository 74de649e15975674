"""What a run's failure says for each class of broker error, and whether Dagster may retry it (``dagster.ingestion``)."""

import pytest

from rocketlake.dagster.ingestion import explain
from rocketlake.rocketmq.errors import (
    _ACL_HINT,  # the hint the client gives a refused signature (errors.is_refusal)
    NoPermission,
    ProtocolError,
    RangeUnreadable,
    RequestTimeout,
    SystemBusy,
)
from rocketlake.rocketmq.retry import is_retriable
from tests.unit.support import ingestion_config

CFG = ingestion_config()
CONSISTENT = "The table and the group's offsets stay consistent"


@pytest.mark.parametrize(
    ("error", "said", "retried"),
    [
        (
            SystemBusy(address="127.0.0.1:10911", request_code=11, remark="[PC_SYNCHRONIZED]broker busy"),
            "answered this run with an error: 127.0.0.1:10911 answered PULL_MESSAGE(11) with SYSTEM_BUSY(2)",
            True,
        ),
        (
            NoPermission(address="127.0.0.1:10911", request_code=11, remark="no permission"),
            "answered this run with an error: 127.0.0.1:10911 answered PULL_MESSAGE(11) with NO_PERMISSION(16)",
            False,
        ),
        (
            NoPermission(address="127.0.0.1:10911", request_code=11, remark="check signature failed", hint=_ACL_HINT),
            "turned this run away: 127.0.0.1:10911 answered PULL_MESSAGE(11) with NO_PERMISSION(16)",
            False,
        ),
        (
            ProtocolError("127.0.0.1:10911 sent a frame of -3 bytes"),
            "answered this run with an error: 127.0.0.1",
            False,
        ),
        (RangeUnreadable("orders/broker-a/0: no message at offset 7"), "no message at offset 7", False),
        (RequestTimeout(address="127.0.0.1:10911", request_code=14), "cannot reach RocketMQ", True),
    ],
)
def test_every_broker_error_class_is_one_sentence_naming_what_answered_and_retried_only_when_it_may_pass(
    error, said, retried
):
    text = explain(error, CFG, "127.0.0.1:9876")
    assert said in text and text.endswith("run the window again once this is fixed."), text
    assert CONSISTENT in text and "\n" not in text and "Traceback" not in text
    assert is_retriable(error) is retried
