"""The Java peer server (rocketlake/local/peers.py, PeerServer.java): one JVM answers the peers' and mqadmin's calls.

Many calls go to one process; a failing call (an exception, or mqadmin's System.exit on a bad option) answers its
error and leaves the server serving; a server killed from outside, or one stopped by a timeout, is replaced on the
next call.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rocketlake.local import peers
from rocketlake.local.process import LocalClusterError
from tests import java_oracles

# "integration" as asked; "broker" is the tier tests/conftest.py requires of every test outside tests/unit.
pytestmark = [pytest.mark.integration, pytest.mark.broker]

_CASE = {
    "id": 1,
    "group": "g",
    "strategy": {"name": "AVG"},
    "queues": [["t", "b", 0], ["t", "b", 1]],
    "cids": ["c1", "c2"],
    "ask": ["c1", "c2"],
}


def _server(java_peers) -> peers.PeerServer:
    return peers.server(java_peers.state_dir, java_peers.version)


def test_calls_share_one_server_and_failures_leave_it_serving(java_peers, new_topic):
    topic = new_topic(queues=2)
    server = _server(java_peers)
    java_peers.admin([{"op": "maxOffset", "topic": topic, "broker": "broker-a", "queue_id": 0}])  # it runs now
    pid, starts = server.pid, server.starts
    assert pid is not None

    sent = java_peers.produce(
        [{"topic": topic, "body": f"m{i}", "broker": "broker-a", "queue_id": 0} for i in range(3)]
    )
    assert [s.queue_offset for s in sent] == [0, 1, 2]
    [max_offset] = java_peers.admin([{"op": "maxOffset", "topic": topic, "broker": "broker-a", "queue_id": 0}])
    assert max_offset == {"ok": True, "value": 3}
    status = {(s.broker_name, s.queue_id): s.max_offset for s in java_peers.mqadmin().topic_status(topic)}
    assert status[("broker-a", 0)] == 3
    dump = java_peers.consume(topic, {("broker-a", 0): (0, 3)})
    assert [m["msgId"] for m in dump] == [s.msg_id for s in sent]

    # An unknown admin op is answered in band; the other commands of the call still run.
    unknown, known = java_peers.admin(
        [{"op": "noSuchOp"}, {"op": "minOffset", "topic": topic, "broker": "broker-a", "queue_id": 0}]
    )
    assert unknown["ok"] is False and "unknown op noSuchOp" in unknown["error"]
    assert known == {"ok": True, "value": 0}
    # A program that throws: exit 1 and its stack trace, as a JVM of its own would have ended.
    with pytest.raises(LocalClusterError, match=r"ProducerPeer failed \(exit 1\):\n(?s:.*)expected --name value pairs"):
        java_peers.produce(args=["--topic"])
    # mqadmin's parser calls System.exit(1) on a bad option: trapped, so the server lives on.
    with pytest.raises(LocalClusterError, match=r"mqadmin topicStatus -t \S+ --no-such-option failed \(exit 1\)"):
        java_peers.mqadmin().run("topicStatus", "-t", topic, "--no-such-option")
    with pytest.raises(LocalClusterError, match="unknown main"):
        peers.run_peer("NoSuchPeer", java_peers.state_dir, [], version=java_peers.version)

    # Threads share the server one request at a time.
    with ThreadPoolExecutor(4) as pool:
        answers = list(
            pool.map(
                lambda _: java_oracles.allocate([_CASE], java_peers.state_dir, version=java_peers.version), range(8)
            )
        )
    assert all(
        a == [{"id": 1, "name": "AVG", "answers": [{"queues": [["t", "b", 0]]}, {"queues": [["t", "b", 1]]}]}]
        for a in answers
    )
    assert java_peers.mqadmin().topic_status(topic)  # and after all that, still the same server answers
    assert (server.pid, server.starts) == (pid, starts)


def test_produce_returns_once_consumers_can_pull_what_it_sent(java_peers, new_topic, rocketmq_client):
    """A broker answers a send once the message is in its commit log; a consumer sees it when the broker's dispatch
    (ReputMessageService) has put it in the consume queue, a little later. ``produce`` returns after that, so a caller
    that reads a queue's max offset right after it counts every message it sent."""
    from rocketlake.rocketmq.message_queue import MessageQueue

    topic = new_topic(queues=1, brokers=("broker-a",))
    behind = []
    for i in range(30):
        (sent,) = java_peers.produce([{"topic": topic, "body": f"m{i}"}])
        visible = rocketmq_client.get_max_offset(MessageQueue(topic, sent.broker_name, sent.queue_id))
        if visible <= sent.queue_offset:
            behind.append((i, sent.queue_offset, visible))
    assert not behind, f"(call, offset sent, max offset right after) for the calls that returned too early: {behind}"


def test_a_killed_or_timed_out_server_is_replaced_on_the_next_call(local_cluster, create_topic):
    spec = local_cluster.spec
    namesrv, state_dir, version = spec.namesrv_address, spec.state_dir, spec.version
    topic = create_topic(queues=1, brokers=("broker-a",))
    server = peers.server(state_dir, version)
    message = [{"topic": topic, "body": "hello", "broker": "broker-a", "queue_id": 0}]
    peers.produce(namesrv, state_dir, message, version=version)
    first, starts = server.pid, server.starts

    os.kill(first, signal.SIGKILL)  # no wait: the next call may find it still exiting
    [again] = peers.produce(namesrv, state_dir, message, version=version)
    assert again.queue_offset == 1
    second = server.pid
    assert second not in (None, first) and server.starts == starts + 1

    # A call past its timeout (a range nothing fills: the Java consumer waits 10 s for messages) kills the server...
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        java_oracles.consume(namesrv, state_dir, topic, {("broker-a", 0): (2, 100)}, version=version, timeout=2.0)
    assert time.monotonic() - started < 8
    assert server.pid is None
    # ... and the next call has a new one.
    status = {(s.broker_name, s.queue_id): s.max_offset for s in local_cluster.mqadmin().topic_status(topic)}
    assert status == {("broker-a", 0): 2}
    assert server.pid not in (None, second) and server.starts == starts + 2
