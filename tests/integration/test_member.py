"""`rocketlake member`: a deployment is a member of its group while the process runs, as a Java push consumer
is: the brokers' consumer list and mqadmin consumerConnection show its client id, and it leaves on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocketlake.resources.rocketmq.client import RocketMQClient
from tests.integration.ingestion_support import unique, write_config

pytestmark = pytest.mark.stack
ROOT = Path(__file__).resolve().parents[2]


def until(condition, timeout_s: float, what: str):
    """Poll the broker's own state until ``condition()`` is truthy."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what() if callable(what) else what}: not within {timeout_s:.0f}s")
        time.sleep(0.2)
    return value


def test_a_member_process_joins_the_group_and_leaves_it_when_stopped(tmp_path, local_cluster, produced):
    group, instance = unique("g"), unique("deploy")
    config = write_config(tmp_path / "rocketlake.yaml", local_cluster, tmp_path / "lake", {
        "orders": {"topic": produced.topic, "consumer_group": group, "table": unique("t"),
                   "client_ip": "127.0.0.1", "instance_name": instance}})
    client_id = f"127.0.0.1@{instance}"
    client = RocketMQClient(local_cluster.spec.namesrv_address)
    proc = subprocess.Popen([str(Path(sys.executable).parent / "rocketlake"), "member", "orders", "--config",
                             str(config)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        until(lambda: client_id in client.get_consumer_list_by_group(group, produced.topic), 60,
              f"{client_id} in the brokers' consumer list of {group}")
        assert client_id in local_cluster.mqadmin().consumer_connection(group)  # what an operator sees
        assert_consumer_status_shows_the_member(local_cluster, client, group, client_id, produced.topic)
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


def sections(status: str) -> dict[str, list[str]]:
    """``mqadmin consumerStatus -i``'s output: section title -> its lines."""
    found: dict[str, list[str]] = {}
    title = None
    for line in status.splitlines():
        if line.startswith("#") and line.rstrip().endswith("#") and len(line.strip()) > 2:
            title = line.strip().strip("#")
            found[title] = []
        elif title is not None and line.strip():
            found[title].append(line)
    return found


def assert_consumer_status_shows_the_member(cluster, client, group: str, client_id: str, topic: str):
    """``mqadmin consumerStatus`` asks the member (through the broker) what a Java push consumer reports, and shows
    it as it shows a Java one: beside a Java DefaultMQPushConsumer of another group on the same topic."""
    from rocketlake.resources.local import peers

    queues = client.queues(topic)
    client.update_consumer_offset(group, queues[0], 3)  # what the group committed, as a run would
    java_group, java_instance = unique("g_java"), unique("java")
    java = peers.start_push_member(cluster.spec.namesrv_address, cluster.spec.state_dir, java_group, topic,
                                   client_ip="127.0.0.1", instance_name=java_instance)
    try:
        java_id = f"127.0.0.1@{java_instance}"
        until(lambda: java_id in client.get_consumer_list_by_group(java_group, topic), 60, f"{java_id} joined")
        ours = sections(cluster.mqadmin().run("consumerStatus", "-g", group, "-i", client_id))
        theirs = sections(cluster.mqadmin().run("consumerStatus", "-g", java_group, "-i", java_id))
    finally:
        java.stdin.close()
        java.wait(timeout=60)
    assert set(ours) == set(theirs), (sorted(ours), sorted(theirs))  # the same sections, the same tools
    properties = {key.strip(): value.strip() for key, _, value in
                  (line.partition(": ") for line in ours["Consumer Properties"])}
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


def test_two_deployments_on_one_host_with_one_configuration_are_two_members(tmp_path, local_cluster, produced,
                                                                           monkeypatch):
    """``instance_name: DEFAULT`` in CLUSTERING names each deployment after its Dagster instance (the Java client
    names each process after its pid), so the brokers count two members, each the id its own runs compute."""
    import os

    from rocketlake.pipelines.config import load_config

    group = unique("g")
    config = write_config(tmp_path / "rocketlake.yaml", local_cluster, tmp_path / "lake", {
        "orders": {"topic": produced.topic, "consumer_group": group, "table": unique("t"), "client_ip": "127.0.0.1"}})
    client = RocketMQClient(local_cluster.spec.namesrv_address)
    procs, ids = [], []
    try:
        for name in ("d1", "d2"):
            env = dict(os.environ, DAGSTER_HOME=str(tmp_path / name))
            procs.append(subprocess.Popen([str(Path(sys.executable).parent / "rocketlake"), "member", "orders",
                                           "--config", str(config)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
            monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
            ids.append(load_config(config).ingestions["orders"].client_id)  # what that deployment's runs use
        assert ids[0] != ids[1] and all(i.startswith("127.0.0.1@dagster-") for i in ids)
        until(lambda: sorted(client.get_consumer_list_by_group(group, produced.topic)) == sorted(ids), 60,
              lambda: f"both deployments listed (brokers list {client.get_consumer_list_by_group(group, produced.topic)})")
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
