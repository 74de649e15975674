"""A broker SIGKILLed while our pull is in flight, then restarted: the call fails fast and clearly, and
the very same client object works again once the broker is back.

On 5.3.3 it kills broker-a of the disruptable cluster (tests/conftest.py ``disruptable``), which the tests that
stop brokers share in turn; on 4.9.7 broker-a of the session's 4.9 cluster (``disruptable_4x``: nothing else runs
on it meanwhile). Either is handed back with every broker registered and answering. The topic is the test's own.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid

import pytest

from rocketlake.jars import ROCKETMQ_4_VERSION, ROCKETMQ_VERSION
from rocketlake.local.cluster import LocalCluster
from rocketlake.local.process import stop_all
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.connection import get_connection
from rocketlake.rocketmq.errors import ConnectionFailed, RequestTimeout, RocketMQError
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.pull import PullStatus
from rocketlake.rocketmq.send import OutgoingMessage

pytestmark = pytest.mark.broker

TIMEOUT = 5.0
HOLD_MS = 20_000  # the in-flight pull is a long poll held this long by the broker


def kill_broker(cluster: LocalCluster, name: str) -> None:
    """SIGKILL a broker, as a machine dies, and return once it is gone (stop_all waits for every thread)."""
    assert stop_all([cluster.broker_processes[name]], sig=signal.SIGKILL) == [name], f"{name} is not running"


def in_flight(address: str) -> bool:
    """Whether our pooled connection to ``address`` has a request awaiting its answer (white-box:
    there is no public view of a connection's pending table)."""
    channel = get_connection(address)._channel
    return channel is not None and bool(channel._pending)


#: version -> the fixture lending that line's cluster to a test that kills a broker
CLUSTERS = {ROCKETMQ_VERSION: "disruptable", ROCKETMQ_4_VERSION: "disruptable_4x"}


@pytest.fixture
def cluster(request: pytest.FixtureRequest, version: str) -> LocalCluster:
    cluster = request.getfixturevalue(CLUSTERS[version])
    assert cluster.spec.version == version
    return cluster


@pytest.mark.parametrize("version", [ROCKETMQ_VERSION, ROCKETMQ_4_VERSION])
def test_broker_killed_mid_pull_fails_fast_and_the_same_client_recovers(cluster, version):
    spec = cluster.spec
    address = spec.broker("broker-a").address
    client = RocketMQClient(spec.namesrv_address, timeout=TIMEOUT)
    topic = f"restart_topic_{uuid.uuid4().hex[:8]}"
    client.create_topic(topic, 1, brokers=["broker-a"])  # on the killed broker alone, as when it was the only one
    mq = MessageQueue(topic, "broker-a", 0)
    sent = client.send_batch([OutgoingMessage(topic, f"before {i}".encode()) for i in range(3)], mq)
    deadline = time.monotonic() + 10
    while client.get_max_offset(mq) < 3:
        assert time.monotonic() < deadline
    before = client.pull(mq, 0, consumer_group="g_restart").messages
    assert [m.msg_id for m in before] == [s.msg_id for s in sent]

    # A long poll at the end of the queue: the broker holds it, so it is in flight when we kill.
    outcome: dict[str, object] = {}

    def pull_and_wait() -> None:
        try:
            outcome["result"] = client.pull(mq, 3, consumer_group="g_restart", suspend_timeout_ms=HOLD_MS)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome["error"] = exc
        outcome["at"] = time.monotonic()

    worker = threading.Thread(target=pull_and_wait, daemon=True)
    worker.start()
    deadline = time.monotonic() + 10
    while not in_flight(address):
        assert time.monotonic() < deadline and worker.is_alive(), outcome
    killed_at = time.monotonic()
    kill_broker(cluster, "broker-a")
    worker.join(TIMEOUT + HOLD_MS / 1000)
    assert not worker.is_alive()

    error = outcome.get("error")
    assert isinstance(error, (ConnectionFailed, RequestTimeout)), outcome
    assert error.address == address and address in str(error) and "PULL_MESSAGE(11)" in str(error)
    assert outcome["at"] - killed_at < TIMEOUT  # failed on the kill, not after the 20 s hold

    # While the broker is down every call fails within its timeout (retries included), naming it.
    started = time.monotonic()
    with pytest.raises((ConnectionFailed, RequestTimeout)) as caught:
        client.get_max_offset(mq)
    assert time.monotonic() - started < TIMEOUT
    assert caught.value.address == address

    cluster.up()  # restarts exactly the broker that is not running

    # The same client object: poll until the restarted broker serves again.
    deadline = time.monotonic() + 90
    while True:
        try:
            after = client.pull(mq, 0, consumer_group="g_restart")
            break
        except RocketMQError as exc:
            assert type(exc).retriable and time.monotonic() < deadline, exc
    assert after.status is PullStatus.FOUND
    assert [(m.queue_offset, m.msg_id, m.body) for m in after.messages] == [
        (m.queue_offset, m.msg_id, m.body) for m in before
    ]
    again = client.send(OutgoingMessage(topic, b"after restart"), mq)
    assert again.queue_offset == 3
    deadline = time.monotonic() + 10
    while client.get_max_offset(mq) < 4:
        assert time.monotonic() < deadline
    assert [m.body for m in client.pull(mq, 3, consumer_group="g_restart").messages] == [b"after restart"]
