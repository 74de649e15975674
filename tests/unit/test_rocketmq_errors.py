"""The error hierarchy and the wire codes it names."""

from __future__ import annotations

import builtins
import pickle

import pytest

from rocketlake.rocketmq import codes, errors
from rocketlake.rocketmq.codes import LanguageCode, RequestCode, ResponseCode
from rocketlake.rocketmq.errors import (
    BrokerError,
    ConnectionFailed,
    InvalidName,
    ProtocolError,
    RequestTimeout,
    RocketMQError,
    SubscriptionGroupNotExist,
    SystemBusy,
    TopicNotExist,
    error_for_response,
)


def test_broker_error_message_names_address_request_response_and_remark() -> None:
    error = error_for_response(
        address="127.0.0.1:10911",
        request_code=RequestCode.PULL_MESSAGE,
        response_code=17,
        remark="topic[x] not exist, apply first please!",
    )
    assert type(error) is TopicNotExist
    assert str(error) == (
        "127.0.0.1:10911 answered PULL_MESSAGE(11) with TOPIC_NOT_EXIST(17): topic[x] not exist, apply first please!"
    )
    assert (error.address, error.request_code, error.response_code) == ("127.0.0.1:10911", 11, 17)


def test_hint_and_missing_remark_are_spelled_out() -> None:
    error = error_for_response(address="a:1", request_code=105, response_code=17, remark=None, hint="create it")
    assert str(error) == "a:1 answered GET_ROUTEINFO_BY_TOPIC(105) with TOPIC_NOT_EXIST(17) (no remark) -- create it"


@pytest.mark.parametrize(
    "code, remark",
    [  # as the real brokers answer (tests/integration/test_rocketmq_security.py)
        (
            1,
            (
                "org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=rocketlake_ak, "
                "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:683)"
            ),
        ),
        (16, "check signature failed."),
        (16, "username cannot be null."),
        (16, "User:someone_else is not found."),
    ],
)
def test_an_acl_refusal_says_to_check_the_credentials(code: int, remark: str) -> None:
    text = str(error_for_response(address="a:1", request_code=11, response_code=code, remark=remark))
    assert text.startswith("a:1 answered PULL_MESSAGE(11) with ") and remark in text
    assert "check the AccessKey and SecretKey it signs with" in text
    assert text.endswith("set those two keys in the cluster's configuration if it signs with none")
    assert "access_key_env and secret_key_env" in text


def test_other_refusals_get_no_acl_hint() -> None:
    error = error_for_response(
        address="a:1", request_code=11, response_code=16, remark="the broker[10.0.0.1] pulling message is forbidden"
    )
    assert error.hint is None and "AccessKey" not in str(error)


@pytest.mark.parametrize(
    "code, cls, retriable",
    [
        (2, SystemBusy, True),
        (17, TopicNotExist, False),
        (22, errors.QueryNotFound, False),
        (26, SubscriptionGroupNotExist, False),
        (16, errors.NoPermission, False),
        (215, errors.FlowControl, True),
        (1500, errors.GoAway, True),
    ],
)
def test_response_codes_resolve_to_subclasses(code: int, cls: type[BrokerError], retriable: bool) -> None:
    error = error_for_response(address="b:1", request_code=11, response_code=code, remark="r")
    assert type(error) is cls
    assert error.retriable is retriable
    assert isinstance(error, BrokerError) and isinstance(error, RocketMQError)


def test_every_registered_subclass_maps_back_from_its_own_code() -> None:
    subclasses = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, BrokerError)]
    registered = [c for c in subclasses if c.code is not None]
    assert len(registered) >= 15
    for cls in registered:
        code = int(cls.code or 0)
        assert type(error_for_response(address=None, request_code=None, response_code=code, remark=None)) is cls
        assert ResponseCode(code).name  # every class stands for a known response code


def test_unknown_response_code_gets_the_generic_class_and_still_names_the_code() -> None:
    error = error_for_response(address="c:1", request_code=9999, response_code=777, remark="odd")
    assert type(error) is BrokerError
    assert str(error) == "c:1 answered UNKNOWN_REQUEST(9999) with UNKNOWN_RESPONSE(777): odd"


def test_transport_errors_are_retriable_and_protocol_errors_are_not() -> None:
    assert ConnectionFailed.retriable and RequestTimeout.retriable
    assert not ProtocolError.retriable and not RocketMQError.retriable
    assert str(ProtocolError("bad length", offset=12)) == "bad length (at byte offset 12)"


def test_no_error_class_shadows_a_builtin() -> None:
    assert [name for name in errors.__all__ if hasattr(builtins, name)] == []


def test_invalid_name_is_also_a_value_error() -> None:
    error = InvalidName("x", kind="topic", value="a b", rule="characters", limit="^[%|a-zA-Z0-9_-]+$")
    assert isinstance(error, ValueError) and isinstance(error, RocketMQError)


@pytest.mark.parametrize(
    "error",
    [
        error_for_response(address="a:1", request_code=11, response_code=26, remark="no group", hint="h"),
        ProtocolError("truncated", offset=5, address="a:1"),
        RequestTimeout("slow", address="a:1", request_code=11),
        InvalidName("bad", kind="group", value="g g", rule="characters", limit="^x$"),
    ],
    ids=["broker", "protocol", "timeout", "name"],
)
def test_errors_survive_pickling_with_their_context(error: RocketMQError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert vars(copy) == vars(error)


# --------------------------------------------------------------------------- codes


@pytest.mark.parametrize(
    "member, value",
    [
        (RequestCode.PULL_MESSAGE, 11),
        (RequestCode.QUERY_CONSUMER_OFFSET, 14),
        (RequestCode.UPDATE_CONSUMER_OFFSET, 15),
        (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, 29),
        (RequestCode.GET_MAX_OFFSET, 30),
        (RequestCode.GET_MIN_OFFSET, 31),
        (RequestCode.HEART_BEAT, 34),
        (RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, 40),
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, 105),
        (RequestCode.GET_BROKER_CLUSTER_INFO, 106),
        (RequestCode.SEND_MESSAGE_V2, 310),
        (RequestCode.LITE_PULL_MESSAGE, 361),
        (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, 3),
        (ResponseCode.PULL_NOT_FOUND, 19),
        (ResponseCode.PULL_RETRY_IMMEDIATELY, 20),
        (ResponseCode.PULL_OFFSET_MOVED, 21),
        (ResponseCode.INVALID_PARAMETER, 29),
        (ResponseCode.FLOW_CONTROL, 215),
        (ResponseCode.GO_AWAY, 1500),
        (LanguageCode.PYTHON, 3),
    ],
)
def test_codes_match_the_reference(member: int, value: int) -> None:
    assert member == value


def test_reference_request_catalogue_is_complete() -> None:
    # Section 2.0 catalogue plus the server-to-client requests of section 1.5.
    listed = {
        105,
        106,
        11,
        361,
        31,
        30,
        29,
        32,
        14,
        15,
        38,
        34,
        35,
        36,
        41,
        42,
        10,
        310,
        320,
        17,
        215,
        216,
        203,
        208,
        40,
        220,
        221,
        307,
        309,
        39,
        326,
    }
    assert listed <= {int(c) for c in RequestCode}


def test_reference_response_codes_are_complete() -> None:
    listed = {
        0,
        1,
        2,
        3,
        4,
        10,
        11,
        12,
        13,
        14,
        15,
        16,
        17,
        18,
        19,
        20,
        21,
        22,
        23,
        24,
        25,
        26,
        27,
        28,
        29,
        200,
        201,
        202,
        203,
        204,
        205,
        206,
        207,
        208,
        209,
        210,
        211,
        212,
        213,
        215,
        501,
        604,
        1500,
        -1000,
        -1002,
        -1004,
        -1006,
    }
    assert listed == {int(c) for c in ResponseCode}


def test_code_names_for_messages() -> None:
    assert codes.request_name(11) == "PULL_MESSAGE"
    assert codes.request_name(4242) == "UNKNOWN_REQUEST"
    assert codes.response_name(26) == "SUBSCRIPTION_GROUP_NOT_EXIST"
    assert codes.MAX_FRAME_SIZE == 16_777_216 and codes.CURRENT_VERSION == 479


def test_a_refusal_for_tls_or_a_signature_is_not_retried() -> None:
    from rocketlake.rocketmq.errors import ConnectionFailed, ConnectionTurnedAway, is_refusal
    from rocketlake.rocketmq.retry import is_retriable

    acl = error_for_response(address="a:1", request_code=34, response_code=16, remark="check signature failed.")
    untrusted = ConnectionTurnedAway(
        "the TLS handshake with a:1 failed: its certificate is not trusted", address="a:1", request_code=34
    )
    restart = ConnectionFailed(
        "cannot connect to a:1 for HEART_BEAT(34): [Errno 111] Connection refused", address="a:1", request_code=34
    )
    assert is_refusal(acl) and is_refusal(untrusted) and not is_refusal(restart)
    assert not is_retriable(untrusted) and not is_retriable(acl) and is_retriable(restart)
