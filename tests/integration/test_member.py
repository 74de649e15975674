"""`rocketlake member`: a deployment is a member of its group while the process runs, as a Java push consumer
is: the brokers' consumer list and mqadmin consumerConnection show its client id, and it leaves on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rocketlake.engine.identity import client_id
from rocketlake.rocketmq.client import RocketMQClient
from tests.integration.ingestion_support import ROOT, sections, start_member, unique, until, write_config

pytestmark = pytest.mark.stack


def test_a_member_process_joins_the_group_and_leaves_it_when_stopped(tmp_path, local_cluster, produced):
    group, instance = unique("g"), unique("deploy")
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {
            "orders": {
                "topic": produced.topic,
                "consumer_group": group,
                "table": unique("t"),
                "client_ip": "127.0.0.1",
                "instance_name": instance,
                "listener": POISON_LISTENER,
            }
        },
    )
    client_id = f"127.0.0.1@{instance}"
    client = RocketMQClient(local_cluster.spec.namesrv_address)
    proc = start_member(config, tmp_path)
    try:
        until(
            lambda: client_id in client.get_consumer_list_by_group(group, produced.topic),
            60,
            f"{client_id} in the brokers' consumer list of {group}",
        )
        assert client_id in local_cluster.mqadmin().consumer_connection(group)  # what an operator sees
        assert_consumer_status_shows_the_member(local_cluster, client, group, client_id, produced.topic)
        assert_direct_consume_answers_the_listeners_verdict(
            local_cluster, client, group, client_id, produced, tmp_path / "lake"
        )
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, output
        assert f"members of group {group}: {client_id}" in output
        assert f"member {client_id} left group {group}" in output
        assert client_id not in client.get_consumer_list_by_group(group, produced.topic)  # unregistered at once
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        client.close()


POISON_LISTENER = "tests.unit.listeners:fail_poison"  # RECONSUME_LATER for a message tagged poison


def test_reset_offset_by_time_reaches_a_live_member_which_moves_forward_and_refuses_backward(
    tmp_path, local_cluster_4x
):
    """On a broker that asks the group's clients to reset (4.9; 5.x resets on the broker itself, see the docs),
    ``mqadmin resetOffsetByTime`` sends the live member RESET_CONSUMER_CLIENT_OFFSET, which it takes through the
    rules of ``rocketlake offsets reset``: a move forward is committed, a move backward changes nothing and the
    member says why (the request is oneway: its log and running info are where the answer goes)."""
    from rocketlake.local.peers import produce

    cluster = local_cluster_4x
    group, instance, topic = unique("g"), unique("deploy"), unique("t_reset")
    client = RocketMQClient(cluster.spec.namesrv_address)
    log = tmp_path / "member.log"
    proc = None
    try:
        client.create_topic(topic, 2)
        produce(
            cluster.spec.namesrv_address,
            cluster.spec.state_dir,
            [{"topic": topic, "body": f'{{"order_id": "o-{i}", "amount": 1.0}}'} for i in range(8)],
            version=cluster.spec.version,
        )
        queues = client.queues(topic)
        ends = {q: client.get_max_offset(q) for q in queues}
        assert sum(ends.values()) == 8
        for q in queues:  # the broker resets only a group with an offset on every queue
            client.update_consumer_offset(group, q, 0)
        config = write_config(
            tmp_path / "rocketlake.yaml",
            cluster,
            tmp_path / "lake",
            {
                "orders": {
                    "topic": topic,
                    "consumer_group": group,
                    "table": unique("t"),
                    "client_ip": "127.0.0.1",
                    "instance_name": instance,
                }
            },
        )
        with open(log, "w") as out:
            proc = start_member(config, tmp_path, output=out)
        client_id = f"127.0.0.1@{instance}"
        until(lambda: client_id in client.get_consumer_list_by_group(group, topic), 60, f"{client_id} joined")

        def committed():
            return {q: client.query_consumer_offset(group, q) for q in queues}

        # Each broker sends the member its own queues (a verdict per broker): wait for as many verdicts as brokers.
        brokers = len({q.broker_name for q in queues})

        def verdicts(mark: str) -> int:
            return log.read_text().count(mark)

        cluster.mqadmin().run("resetOffsetByTime", "-g", group, "-t", topic, "-s", "now")  # forward, to the ends
        until(
            lambda: verdicts("reset to the queues' ends: moved") == brokers,
            60,
            lambda: f"the member's {brokers} verdicts in {log.read_text()}",
        )  # each logged once committed
        assert committed() == ends
        cluster.mqadmin().run("resetOffsetByTime", "-g", group, "-t", topic, "-s", "0")  # backward, to the start
        until(
            lambda: verdicts("REFUSED") == brokers, 60, lambda: f"the member's {brokers} verdicts in {log.read_text()}"
        )
        assert committed() == ends
        assert "would move backward" in log.read_text() and "Nothing was changed" in log.read_text()
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        client.close()


def assert_direct_consume_answers_the_listeners_verdict(
    cluster, client, group: str, client_id: str, produced, lake: Path
):
    """``mqadmin queryMsgById -g -d`` (CONSUME_MESSAGE_DIRECTLY through the broker): the member runs its listener
    on that one message and answers the verdict as a Java push consumer does; nothing lands, no offset moves."""
    from rocketlake.local.peers import produce

    # The shared topic's messages are counted by other tests: the poisoned one goes to a topic of its own (the
    # broker hands the member whatever message the operator names, as it does a Java consumer).
    elsewhere = unique("t_direct")
    client.create_topic(elsewhere, 1)
    [poison] = produce(
        cluster.spec.namesrv_address,
        cluster.spec.state_dir,
        [{"topic": elsewhere, "tags": "poison", "body": '{"order_id": "p", "amount": 1.0}'}],
    )
    committed = {q: client.query_consumer_offset(group, q) for q in client.queues(produced.topic)}
    verdicts = {}
    for name, sent in (("ok", produced.sent[0]), ("poison", poison)):
        verdicts[name] = (
            cluster.mqadmin()
            .run("queryMsgById", "-t", sent.topic, "-i", sent.offset_msg_id, "-g", group, "-d", client_id)
            .strip()
        )
    assert "consumeResult=CR_SUCCESS" in verdicts["ok"], verdicts
    assert (
        "ConsumeMessageDirectlyResult [order=false, autoCommit=true, consumeResult=CR_LATER, remark=listener "
        "answered RECONSUME_LATER"
    ) in verdicts["poison"], verdicts
    assert {q: client.query_consumer_offset(group, q) for q in committed} == committed
    assert not lake.exists()  # landing happens in window runs only


def assert_consumer_status_shows_the_member(cluster, client, group: str, client_id: str, topic: str):
    """``mqadmin consumerStatus`` asks the member (through the broker) what a Java push consumer reports, and shows
    it as it shows a Java one: beside a Java DefaultMQPushConsumer of another group on the same topic."""
    from tests import java_oracles

    queues = client.queues(topic)
    client.update_consumer_offset(group, queues[0], 3)  # what the group committed, as a run would
    java_group, java_instance = unique("g_java"), unique("java")
    java = java_oracles.start_push_member(
        cluster.spec.namesrv_address,
        cluster.spec.state_dir,
        java_group,
        topic,
        client_ip="127.0.0.1",
        instance_name=java_instance,
    )
    try:
        java_id = f"127.0.0.1@{java_instance}"
        until(lambda: java_id in client.get_consumer_list_by_group(java_group, topic), 60, f"{java_id} joined")
        ours = sections(cluster.mqadmin().run("consumerStatus", "-g", group, "-i", client_id))
        theirs = sections(cluster.mqadmin().run("consumerStatus", "-g", java_group, "-i", java_id))
    finally:
        java.stdin.close()
        java.wait(timeout=60)
    assert set(ours) == set(theirs), (sorted(ours), sorted(theirs))  # the same sections, the same tools
    properties = {
        key.strip(): value.strip() for key, _, value in (line.partition(": ") for line in ours["Consumer Properties"])
    }
    assert properties["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY", ours["Consumer Properties"]
    assert properties["consumerGroup"] == group and properties["messageModel"] == "CLUSTERING"
    subscribed = " ".join(ours["Consumer Subscription"])
    assert topic in subscribed and f"%RETRY%{group}" in subscribed
    offsets = [line.split() for line in ours["Consumer Offset"] if topic in line]
    # One member: it holds every queue of the topic, each with the offset the group committed (-1: none yet).
    assert sorted((o[1], int(o[2])) for o in offsets) == sorted((q.broker_name, q.queue_id) for q in queues)
    committed = {(o[1], int(o[2])): int(o[-1]) for o in offsets}
    assert committed[(queues[0].broker_name, queues[0].queue_id)] == 3
    on_broker = {(q.broker_name, q.queue_id): client.query_consumer_offset(group, q) for q in queues}
    assert committed == {q: -1 if offset is None else offset for q, offset in on_broker.items()}
    # Without -i, mqadmin asks every member and checks their subscriptions; it names ours and fails on nothing.
    everyone = cluster.mqadmin().run("consumerStatus", "-g", group)
    assert client_id in everyone


def test_two_deployments_on_one_host_with_one_configuration_are_two_members(
    tmp_path, local_cluster, produced, monkeypatch
):
    """``instance_name: DEFAULT`` in CLUSTERING names each deployment after its Dagster instance (the Java client
    names each process after its pid), so the brokers count two members, each the id its own runs compute."""
    import os

    from rocketlake.engine.config import load_config

    group = unique("g")
    config = write_config(
        tmp_path / "rocketlake.yaml",
        local_cluster,
        tmp_path / "lake",
        {"orders": {"topic": produced.topic, "consumer_group": group, "table": unique("t"), "client_ip": "127.0.0.1"}},
    )
    client = RocketMQClient(local_cluster.spec.namesrv_address)
    procs, ids = [], []
    try:
        for name in ("d1", "d2"):
            env = dict(os.environ, DAGSTER_HOME=str(tmp_path / name))
            procs.append(
                subprocess.Popen(
                    [str(Path(sys.executable).parent / "rocketlake"), "member", "orders", "--config", str(config)],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
            monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
            ids.append(client_id(load_config(config).ingestions["orders"]))  # what that deployment's runs use
        assert ids[0] != ids[1] and all(i.startswith("127.0.0.1@dagster-") for i in ids)
        until(
            lambda: sorted(client.get_consumer_list_by_group(group, produced.topic)) == sorted(ids),
            60,
            lambda: (
                f"both deployments listed (brokers list {client.get_consumer_list_by_group(group, produced.topic)})"
            ),
        )
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
        client.close()
