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
