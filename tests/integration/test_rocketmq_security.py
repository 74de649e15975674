"""Our ACL 1.0 request signing (resources/rocketmq/acl.py) against real brokers that enforce it.

A client with the right :class:`Credentials` creates a topic, sends, pulls and commits offsets; a
client without credentials, with the wrong secret or with an unknown access key is refused on each
broker request it tries, with a typed error naming the broker, the request and the response code,
and neither secret ever shows up in an error or in our logs.

Each RocketMQ line gets its own small cluster (name server + one broker, on free ports), since the
session clusters run without ACL:

* 4.9.7: plain ACL (``aclEnable=true`` + ``${rocketmq.home.dir}/conf/plain_acl.yml``, one admin
  account). A refusal is an ``AclException`` thrown by the broker's RPC hook, which 4.9 answers with
  SYSTEM_ERROR(1) and the exception as remark, e.g. ``org.apache.rocketmq.acl.common.AclException:
  Check signature failed for accessKey=rocketlake_ak, org.apache...PlainPermissionManager.validate(...)``.
* 5.3.3: the plain ACL module is gone (``aclEnable`` is a dead switch); authentication 2.0
  (``authenticationEnabled=true``, the account created by ``initAuthenticationUser``) checks the
  very same AccessKey/Signature extFields and answers NO_PERMISSION(16), e.g. ``check signature
  failed.`` Authorization stays off, so the account may do everything (create topics included).

The name server has no ACL on either line: routes are looked up by every client alike.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pytest

from rocketlake.resources.jars import ROCKETMQ_4_VERSION, ROCKETMQ_VERSION
from rocketlake.resources.local.cluster import LocalCluster
from rocketlake.resources.local.spec import AclSpec
from rocketlake.resources.rocketmq.acl import Credentials
from rocketlake.resources.rocketmq.client import RocketMQClient
from rocketlake.resources.rocketmq.errors import (
    BrokerError,
    BrokerSystemError,
    NoPermission,
    TopicNotExist,
)
from rocketlake.resources.rocketmq.message_queue import MessageQueue
from rocketlake.resources.rocketmq.pull import PullStatus
from rocketlake.resources.rocketmq.send import OutgoingMessage
from tests.conftest import make_spec

pytestmark = pytest.mark.broker

ACCESS_KEY = "rocketlake_ak"
SECRET_KEY = "rl-acl-secret.7c41e9"
WRONG_SECRET = "rl-not-the-secret.0b52"
UNKNOWN_KEY = "someone_else"
TIMEOUT = 10.0


@dataclass(frozen=True)
class Refusal:
    """How one RocketMQ line refuses a request: error class, response code, remark per credential kind."""

    error: type[BrokerError]
    code: int
    remarks: dict[str, str]


_ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"

REFUSALS = {
    ROCKETMQ_VERSION: Refusal(NoPermission, 16, {
        "unsigned": "username cannot be null.",
        "wrong_secret": "check signature failed.",
        "unknown_key": f"User:{UNKNOWN_KEY} is not found.",
    }),
    ROCKETMQ_4_VERSION: Refusal(BrokerSystemError, 1, {
        "unsigned": f"{_ACL_EXCEPTION}: No accessKey is configured",
        "wrong_secret": f"{_ACL_EXCEPTION}: Check signature failed for accessKey={ACCESS_KEY}",
        "unknown_key": f"{_ACL_EXCEPTION}: No acl config for {UNKNOWN_KEY}",
    }),
}

CREDENTIALS = {
    "unsigned": None,
    "wrong_secret": Credentials(ACCESS_KEY, WRONG_SECRET),
    "unknown_key": Credentials(UNKNOWN_KEY, SECRET_KEY),
}


@dataclass(frozen=True)
class AclCluster:
    cluster: LocalCluster
    topic: str  # created by the signed client, 2 queues on broker-a

    @property
    def version(self) -> str:
        return self.cluster.spec.version

    @property
    def address(self) -> str:
        return self.cluster.spec.brokers[0].address

    def client(self, credentials: Credentials | None) -> RocketMQClient:
        return RocketMQClient(self.cluster.spec.namesrv_address, credentials=credentials, timeout=TIMEOUT)

    def signed(self) -> RocketMQClient:
        return self.client(Credentials(ACCESS_KEY, SECRET_KEY))


@pytest.fixture(scope="module", params=[ROCKETMQ_VERSION, ROCKETMQ_4_VERSION])
def acl_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    version = request.param
    spec = make_spec(tmp_path_factory.mktemp(f"acl-{version}"), version=version)
    spec = replace(spec, brokers=spec.brokers[:1], acl=AclSpec(ACCESS_KEY, SECRET_KEY))
    cluster = LocalCluster(spec)
    try:
        cluster.up()
        topic = f"acl_{uuid.uuid4().hex[:8]}"
        route = RocketMQClient(spec.namesrv_address, credentials=Credentials(ACCESS_KEY, SECRET_KEY),
                               timeout=TIMEOUT).create_topic(topic, 2)
        assert {q.broker_name: q.write_queue_nums for q in route.queue_datas} == {"broker-a": 2}
        yield AclCluster(cluster, topic)
    finally:
        cluster.down(wipe=True)


def wait_for_max_offset(client: RocketMQClient, mq: MessageQueue, at_least: int) -> int:
    deadline = time.monotonic() + 10
    while (offset := client.get_max_offset(mq)) < at_least:
        assert time.monotonic() < deadline, f"{mq} stays at max offset {offset}, expected {at_least}"
    return offset


def test_signed_client_creates_sends_pulls_and_commits(
    acl_cluster: AclCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = acl_cluster.signed()
    topic = f"acl_own_{uuid.uuid4().hex[:8]}"
    route = client.create_topic(topic, 1)  # UPDATE_AND_CREATE_TOPIC: admin-only on 4.9
    assert [(q.broker_name, q.read_queue_nums) for q in route.queue_datas] == [("broker-a", 1)]
    mq = MessageQueue(topic, "broker-a", 0)

    sent = [client.send(OutgoingMessage(topic, b"signed 0", tags="a"), mq)]
    sent += client.send_batch([OutgoingMessage(topic, f"signed {i}".encode(), keys=[f"k{i}"]) for i in (1, 2)], mq)
    assert [s.queue_offset for s in sent] == [0, 1, 2]
    assert wait_for_max_offset(client, mq, 3) == 3
    assert client.get_min_offset(mq) == 0

    group = f"g_acl_{uuid.uuid4().hex[:8]}"
    result = client.pull(mq, 0, consumer_group=group)
    assert result.status is PullStatus.FOUND
    assert [(m.queue_offset, m.msg_id, m.body) for m in result.messages] == [
        (s.queue_offset, s.msg_id, f"signed {i}".encode()) for i, s in enumerate(sent)]
    assert [m.tags for m in result.messages] == ["a", None, None]
    assert client.pull(mq, 3, consumer_group=group).status is PullStatus.NO_NEW_MSG

    assert client.update_consumer_offset(group, mq, 2) is True
    assert client.query_consumer_offset(group, mq) == 2
    assert client.update_consumer_offset(group, mq, 3) is True
    assert client.query_consumer_offset(group, mq) == 3
    assert SECRET_KEY not in caplog.text and SECRET_KEY not in repr(client)


@pytest.mark.parametrize("kind", list(CREDENTIALS))
def test_unsigned_or_wrongly_signed_requests_are_refused_without_leaking_secrets(
    acl_cluster: AclCluster, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    expected = REFUSALS[acl_cluster.version]
    signed = acl_cluster.signed()
    topic = acl_cluster.topic
    mq = MessageQueue(topic, "broker-a", 1)
    group = f"g_acl_{kind}"
    # What the refused calls must leave untouched, seen by the signed client.
    signed.create_subscription_group(group)  # 5.3 takes no commit for a group it does not know
    before = signed.send(OutgoingMessage(topic, f"before {kind}".encode()), mq)
    max_before = wait_for_max_offset(signed, mq, before.queue_offset + 1)
    assert signed.update_consumer_offset(group, mq, 1) is True

    client = acl_cluster.client(CREDENTIALS[kind])
    calls: dict[str, Callable[[], object]] = {
        "PULL_MESSAGE(11)": lambda: client.pull(mq, 0, consumer_group=group),
        "SEND_MESSAGE_V2(310)": lambda: client.send(OutgoingMessage(topic, b"must not be stored"), mq),
        "GET_MAX_OFFSET(30)": lambda: client.get_max_offset(mq),
        "QUERY_CONSUMER_OFFSET(14)": lambda: client.query_consumer_offset(group, mq),
        "UPDATE_CONSUMER_OFFSET(15)": lambda: client.update_consumer_offset(group, mq, 0),
        "UPDATE_AND_CREATE_TOPIC(17)": lambda: client.create_topic(f"acl_denied_{kind}", 1, wait=1),
    }
    for request, call in calls.items():
        with pytest.raises(expected.error) as caught:
            call()
        error = caught.value
        text = str(error)
        assert error.address == acl_cluster.address and error.response_code == expected.code
        assert text.startswith(f"{acl_cluster.address} answered {request} with "), text
        assert f"({expected.code}): {expected.remarks[kind]}" in text, text
        assert "check the AccessKey and SecretKey it signs with" in text  # says what to do
        assert not type(error).retriable  # fails at once: only new credentials help
        for secret in (SECRET_KEY, WRONG_SECRET):
            assert secret not in text and secret not in repr(error) and secret not in (error.remark or "")
            assert secret not in repr(client) and secret not in repr(client.credentials)

    for secret in (SECRET_KEY, WRONG_SECRET):
        assert secret not in caplog.text
    # The refused send stored nothing, the refused commit moved nothing, the refused create made no topic.
    assert signed.get_max_offset(mq) == max_before
    assert signed.query_consumer_offset(group, mq) == 1
    with pytest.raises(TopicNotExist):
        signed.route(f"acl_denied_{kind}")
