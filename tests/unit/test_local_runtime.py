"""Pure parts of the local runtime: rendered configuration, pid identity, mqadmin parsing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from resources.jars import delta_jar_set, rocketmq_jar_set
from resources.local.mqadmin import parse_consumer_progress, parse_topic_status
from resources.local.process import ManagedProcess, start_time
from resources.local.spec import BrokerSpec, ClusterSpec


def parse_properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_broker_config_stays_on_loopback_and_small():
    spec = ClusterSpec(state_dir=Path("/s"), store_root=Path("/dev/shm/x"), namesrv_port=1234,
                       brokers=(BrokerSpec("broker-a", 2000), BrokerSpec("broker-b", 3000)))
    props = parse_properties(spec.broker_properties(spec.broker("broker-b")))
    assert props["brokerIP1"] == props["bindAddress"] == "127.0.0.1"
    assert props["namesrvAddr"] == "127.0.0.1:1234"
    assert props["listenPort"] == "3000" and props["haListenPort"] == "3001"
    assert props["brokerName"] == "broker-b" and props["brokerId"] == "0"
    assert props["storePathRootDir"] == "/dev/shm/x/broker-b"
    assert props["cleanFileForciblyEnable"] == "false"
    assert int(props["mappedFileSizeCommitLog"]) < 2**30


def test_rendered_properties_have_no_trailing_spaces():
    # The broker silently ignores a value like "10911 ": that would move ports without a word.
    spec = ClusterSpec(state_dir=Path("/s"))
    for text in (spec.namesrv_properties(), *(spec.broker_properties(b) for b in spec.brokers)):
        assert all(line == line.strip() and "=" in line for line in text.splitlines())


def test_broker_reserves_fast_and_ha_ports():
    assert BrokerSpec("b", 10911).ports == (10909, 10911, 10912)


def test_jar_sets_name_the_pinned_artifacts():
    assert {a.artifact for a in rocketmq_jar_set("5.3.3").artifacts} >= {"rocketmq-broker", "rocketmq-namesrv",
                                                                          "rocketmq-tools", "rocketmq-client"}
    (delta,) = delta_jar_set().artifacts
    assert delta.artifact.startswith("delta-spark_4.") and delta.artifact.endswith("_2.13")
    assert "<artifactId>rocketmq-broker</artifactId><version>5.3.3</version>" in rocketmq_jar_set("5.3.3").pom()


def test_pid_file_recognises_only_the_same_process(tmp_path):
    proc = ManagedProcess("sleeper", tmp_path)
    pid = proc.start([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ))
    try:
        assert proc.pid() == pid
        # A pid file whose start time does not match is someone else's process (pid reuse).
        proc.pid_file.write_text(f"{pid} 1\n")
        assert proc.pid() is None
        proc.pid_file.write_text(f"{pid} {start_time(pid)}\n")
        assert proc.stop(timeout=5) is True
        assert start_time(pid) is None
        assert proc.stop() is False
    finally:
        subprocess.run(["kill", "-9", str(pid)], capture_output=True)


TOPIC_STATUS = """\
#Broker Name                      #QID  #Min Offset           #Max Offset             #Last Updated
broker-a                          0     0                     12                      2026-11-22 02:07:09,817
broker-b                          3     2                     13                      2026-11-22 02:07:09,901
"""

CONSUMER_PROGRESS = """\
#Topic                            #Broker Name                      #QID  #Broker Offset        #Consumer Offset      #Diff                 #Inflight             #LastTime
orders                            broker-a                          0     12                    10                    2                     0                     2026-11-22 02:07:09
%RETRY%g                          broker-b                          0     0                     0                     0                     0                     N/A

Consume TPS: 0.00
Consume Diff Total: 2
"""


def test_parse_topic_status():
    rows = parse_topic_status(TOPIC_STATUS)
    assert [(r.broker_name, r.queue_id, r.min_offset, r.max_offset) for r in rows] == [
        ("broker-a", 0, 0, 12), ("broker-b", 3, 2, 13)]


def test_parse_consumer_progress():
    rows = parse_consumer_progress(CONSUMER_PROGRESS)
    assert [(r.topic, r.broker_name, r.queue_id, r.broker_offset, r.consumer_offset) for r in rows] == [
        ("orders", "broker-a", 0, 12, 10), ("%RETRY%g", "broker-b", 0, 0, 0)]
