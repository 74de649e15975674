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
