"""Pure parts of the local runtime: rendered configuration, pid identity, mqadmin parsing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from rocketlake.jars import delta_jar_set, rocketmq_jar_set
from rocketlake.local.mqadmin import parse_consumer_progress, parse_sync_state_set, parse_topic_status
from rocketlake.local.process import ROCKETMQ_TIMER_SLACK_NS, ManagedProcess, jvm_base_flags, start_time
from rocketlake.local.spec import AclSpec, BrokerSpec, ClusterSpec


def parse_properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_broker_config_stays_on_loopback_and_small():
    spec = ClusterSpec(
        state_dir=Path("/s"),
        store_root=Path("/dev/shm/x"),
        namesrv_port=1234,
        brokers=(BrokerSpec("broker-a", 2000), BrokerSpec("broker-b", 3000)),
    )
    props = parse_properties(spec.broker_properties(spec.broker("broker-b")))
    assert props["brokerIP1"] == props["bindAddress"] == "127.0.0.1"
    assert props["namesrvAddr"] == "127.0.0.1:1234"
    assert props["listenPort"] == "3000" and props["haListenPort"] == "3001"
    assert props["brokerName"] == "broker-b" and props["brokerId"] == "0"
    assert props["storePathRootDir"] == "/dev/shm/x/broker-b"
    assert props["cleanFileForciblyEnable"] == "false"
    assert int(props["mappedFileSizeCommitLog"]) < 2**30


def test_a_cluster_on_ipv6_loopback_listens_registers_and_is_named_there():
    spec = replace(
        ClusterSpec(state_dir=Path("/s"), namesrv_port=1234, brokers=(BrokerSpec("broker-a", 2000),)), host="::1"
    )
    assert spec.namesrv_address == "[::1]:1234"  # as a client names it beside a port
    assert spec.brokers[0].address == "::1:2000"  # as the broker registers itself: brokerIP1 + ":" + port
    assert spec.with_slaves().brokers[1].address == "::1:2005"
    props = parse_properties(spec.broker_properties(spec.broker("broker-a")))
    assert props["brokerIP1"] == props["brokerIP2"] == props["bindAddress"] == "::1"
    assert props["namesrvAddr"] == "[::1]:1234"
    assert parse_properties(spec.namesrv_properties())["bindAddress"] == "::1"
    assert "-Djava.net.preferIPv4Stack=true" in jvm_base_flags(Path("/s"), Path("/h"), "x.xml")
    assert "-Djava.net.preferIPv4Stack=true" not in jvm_base_flags(Path("/s"), Path("/h"), "x.xml", ipv4_only=False)
    with pytest.raises(ValueError, match="127.0.0.1 or ::1, not '10.0.0.1'"):
        ClusterSpec(state_dir=Path("/s"), host="10.0.0.1")


def test_java_opt_ext_comes_last_in_every_rocketmq_jvms_options(monkeypatch):
    monkeypatch.setenv("JAVA_OPT_EXT", "-XX:TieredStopAtLevel=1 -Dx='a b'")
    assert jvm_base_flags(Path("/s"), Path("/h"), "x.xml")[-2:] == ["-XX:TieredStopAtLevel=1", "-Dx=a b"]
    monkeypatch.delenv("JAVA_OPT_EXT")
    assert not [f for f in jvm_base_flags(Path("/s"), Path("/h"), "x.xml") if "TieredStopAtLevel" in f]


def test_a_process_started_with_timer_slack_has_it_and_the_starter_keeps_its_own(tmp_path):
    own = Path("/proc/self/timerslack_ns")  # the main thread's, which runs the test
    before = own.read_text()
    proc = ManagedProcess("slack", tmp_path)
    # The child reads its own slack (reading another process's needs CAP_SYS_NICE).
    proc.start(["sh", "-c", "cat /proc/self/timerslack_ns"], {}, timer_slack_ns=ROCKETMQ_TIMER_SLACK_NS)
    deadline = time.monotonic() + 10
    while not proc.log_file.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)  # polls the child's output, bounded by the deadline
    assert proc.log_file.read_text().strip() == str(ROCKETMQ_TIMER_SLACK_NS)
    assert own.read_text() == before


def test_rendered_properties_have_no_trailing_spaces():
    # The broker silently ignores a value like "10911 ": that would move ports without a word.
    spec = ClusterSpec(state_dir=Path("/s"))
    for text in (spec.namesrv_properties(), *(spec.broker_properties(b) for b in spec.brokers)):
        assert all(line == line.strip() and "=" in line for line in text.splitlines())


_ACL_KEYS = {
    "aclEnable",
    "authenticationEnabled",
    "authenticationProvider",
    "authenticationMetadataProvider",
    "initAuthenticationUser",
}


@pytest.mark.parametrize("version", ["5.3.3", "4.9.7"])
def test_acl_is_off_unless_asked_for(version):
    spec = ClusterSpec(state_dir=Path("/s"), version=version)
    assert spec.acl is None
    assert not _ACL_KEYS & parse_properties(spec.broker_properties(spec.brokers[0])).keys()
    assert spec.home_files() == spec.logback_files()


def test_4x_acl_is_plain_acl_yml_in_rocketmq_home():
    spec = ClusterSpec(state_dir=Path("/s"), version="4.9.7", acl=AclSpec("rocketlake_ak", "s3cret.Key-1"))
    props = parse_properties(spec.broker_properties(spec.brokers[0]))
    assert props["aclEnable"] == "true"
    assert not (_ACL_KEYS - {"aclEnable"}) & props.keys()  # no 5.x authentication keys
    files = spec.home_files()
    assert files.keys() == {*spec.logback_files(), "conf/plain_acl.yml", "conf/tools.yml"}
    # mqadmin and the Java peers sign with the same account (conf/tools.yml, AclUtils' format)
    assert yaml.safe_load(files["conf/tools.yml"]) == {"accessKey": "rocketlake_ak", "secretKey": "s3cret.Key-1"}
    # PlainPermissionManager reads ${rocketmq.home.dir}/conf/plain_acl.yml: one admin account that no
    # remote address is trusted for (an empty whiteRemoteAddress matches nothing).
    assert yaml.safe_load(files["conf/plain_acl.yml"]) == {
        "accounts": [
            {"accessKey": "rocketlake_ak", "secretKey": "s3cret.Key-1", "whiteRemoteAddress": "", "admin": True}
        ]
    }
    assert "globalWhiteRemoteAddresses" not in files["conf/plain_acl.yml"]


def test_5x_acl_is_authentication_with_an_initial_user():
    spec = ClusterSpec(state_dir=Path("/s"), acl=AclSpec("rocketlake_ak", "s3cret.Key-1"))
    props = parse_properties(spec.broker_properties(spec.brokers[0]))
    assert "aclEnable" not in props  # a dead switch on 5.3: the plain ACL module is gone
    assert props["authenticationEnabled"] == "true"
    assert props["authenticationMetadataProvider"].endswith(".LocalAuthenticationMetadataProvider")
    assert props["authenticationProvider"].endswith(".DefaultAuthenticationProvider")
    assert json.loads(props["initAuthenticationUser"]) == {"username": "rocketlake_ak", "password": "s3cret.Key-1"}
    assert "authorizationEnabled" not in props  # authentication only: the account may do everything
    assert spec.logback_files() == {}
    assert yaml.safe_load(spec.home_files()["conf/tools.yml"]) == {
        "accessKey": "rocketlake_ak",
        "secretKey": "s3cret.Key-1",
    }
    # Everything else is rendered as without ACL.
    plain = parse_properties(replace(spec, acl=None).broker_properties(spec.brokers[0]))
    assert {k: v for k, v in props.items() if k not in _ACL_KEYS} == plain


def test_acl_spec_hides_the_secret_and_refuses_keys_the_broker_would():
    assert "s3cret.Key-1" not in repr(AclSpec("rocketlake_ak", "s3cret.Key-1"))
    assert "s3cret.Key-1" not in repr(ClusterSpec(state_dir=Path("/s"), acl=AclSpec("rocketlake_ak", "s3cret.Key-1")))
    with pytest.raises(ValueError, match="secret key") as short:
        AclSpec("rocketlake_ak", "123456")  # 4.9 wants more than 6 characters
    assert "123456" not in str(short.value)
    for bad in ("has space1", 'quote"d-key', "back\\slash", "new\nline12"):
        with pytest.raises(ValueError, match="access key"):
            AclSpec(bad, "s3cret.Key-1")


def test_broker_reserves_fast_and_ha_ports():
    assert BrokerSpec("b", 10911).ports == (10909, 10911, 10912)


def test_jar_sets_name_the_pinned_artifacts():
    assert {a.artifact for a in rocketmq_jar_set("5.3.3").artifacts} >= {
        "rocketmq-broker",
        "rocketmq-namesrv",
        "rocketmq-tools",
        "rocketmq-client",
    }
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
        ("broker-a", 0, 0, 12),
        ("broker-b", 3, 2, 13),
    ]


def test_parse_consumer_progress():
    rows = parse_consumer_progress(CONSUMER_PROGRESS)
    assert [(r.topic, r.broker_name, r.queue_id, r.broker_offset, r.consumer_offset) for r in rows] == [
        ("orders", "broker-a", 0, 12, 10),
        ("%RETRY%g", "broker-b", 0, 0, 0),
    ]


def test_extra_broker_properties_override_the_defaults():
    from rocketlake.local.spec import SHORT_RETENTION

    spec = ClusterSpec(state_dir=Path("/s"), extra_broker_properties=SHORT_RETENTION)
    text = spec.broker_properties(spec.brokers[0])
    props = parse_properties(text)
    assert props["fileReservedTime"] == "0" and props["deleteWhen"] == "99"
    assert props["mappedFileSizeCommitLog"] == str(16 * 1024)
    assert text.count("fileReservedTime=") == 1  # overridden in place, not rendered twice
    default = parse_properties(ClusterSpec(state_dir=Path("/s")).broker_properties(spec.brokers[0]))
    assert default["fileReservedTime"] == "168" and "deleteWhen" not in default


def test_a_spark_cluster_spec_is_found_again_by_down_and_status(tmp_path):
    from rocketlake.local.spark_cluster import SparkClusterSpec

    spec = SparkClusterSpec(tmp_path, master_port=17077, master_ui_port=18080, worker_ui_ports=(18081, 18082, 18083))
    tmp_path.mkdir(exist_ok=True)
    spec.save()
    assert SparkClusterSpec.saved(tmp_path) == spec
    assert spec.master_url == "spark://127.0.0.1:17077" and spec.workers == 3
    assert SparkClusterSpec.saved(tmp_path / "elsewhere") is None


def test_local_env_needs_postgres_and_never_prints_the_password_elsewhere(tmp_path, capsys, monkeypatch):
    from rocketlake.cli.main import main

    monkeypatch.setenv("ROCKETLAKE_POSTGRES_PASSWORD", "s3cret-for-the-shell")
    assert main(["local", "env", "--state-dir", str(tmp_path)]) != 0
    assert "(--postgres)" in capsys.readouterr().err
    assert main(["local", "env", "--postgres", "--postgres-port", "15432", "--state-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "export DAGSTER_PG_PORT=15432" in lines and "export DAGSTER_PG_PASSWORD=s3cret-for-the-shell" in lines
    assert not (tmp_path / "postgres" / "password").exists()  # taken from the environment, not written


def test_with_slaves_each_master_gets_a_slave_of_its_own_that_serves_reads():
    spec = ClusterSpec(state_dir=Path("/s"), store_root=Path("/store")).with_slaves()
    assert [(b.key, b.port, b.broker_id) for b in spec.brokers] == [
        ("broker-a", 10911, 0),
        ("broker-b", 10921, 0),
        ("broker-a-s1", 10916, 1),
        ("broker-b-s1", 10926, 1),
    ]
    assert spec.broker("broker-a").is_master and spec.broker("broker-a-s1").broker_id == 1
    assert not set(spec.broker("broker-a").ports) & set(spec.broker("broker-a-s1").ports)
    master, slave = (parse_properties(spec.broker_properties(spec.broker(k))) for k in ("broker-a", "broker-a-s1"))
    assert (slave["brokerName"], slave["brokerId"], slave["brokerRole"]) == ("broker-a", "1", "SLAVE")
    assert (master["brokerId"], master["brokerRole"]) == ("0", "ASYNC_MASTER")
    assert master["slaveReadEnable"] == slave["slaveReadEnable"] == "true"
    assert slave["storePathRootDir"] == "/store/broker-a-s1" != master["storePathRootDir"]
    alone = ClusterSpec(state_dir=Path("/s"))  # no slaves: nothing changes for a master
    assert "slaveReadEnable" not in parse_properties(alone.broker_properties(alone.brokers[0]))


def test_controller_mode_embeds_a_controller_in_the_name_server_and_makes_the_brokers_replicas():
    spec = replace(ClusterSpec(state_dir=Path("/s"), store_root=Path("/store")).with_slaves(), controller=True)
    namesrv = parse_properties(spec.namesrv_properties())
    assert namesrv["enableControllerInNamesrv"] == "true"
    assert namesrv["controllerDLegerPeers"] == "n0-127.0.0.1:9878" and spec.controller_address == "127.0.0.1:9878"
    assert namesrv["controllerStorePath"] == "/store/controller"
    for broker in spec.brokers:  # every replica starts alike: the controller picks the master and gives the ids
        props = parse_properties(spec.broker_properties(broker))
        assert (props["enableControllerMode"], props["controllerAddr"], props["brokerId"], props["brokerRole"]) == (
            "true",
            "127.0.0.1:9878",
            "-1",
            "SLAVE",
        )
        assert props["allAckInSyncStateSet"] == "true" and props["slaveReadEnable"] == "true"
    plain = ClusterSpec(state_dir=Path("/s"))
    assert "enableControllerInNamesrv" not in parse_properties(plain.namesrv_properties())
    assert parse_properties(plain.broker_properties(plain.brokers[0]))["enableControllerMode"] == "false"
    with pytest.raises(ValueError, match="controller mode is RocketMQ 5's"):
        ClusterSpec(state_dir=Path("/s"), version="4.9.7", controller=True)


def test_parse_sync_state_set():
    text = (
        "\n#brokerName\tbroker-a\n#MasterBrokerId\t1\n#MasterAddr\t127.0.0.1:19916\n#MasterEpoch\t4\n"
        "InSyncReplica:\tReplicaIdentity{brokerName='broker-a', brokerId=1, brokerAddress='127.0.0.1:19916', "
        "alive=true}\n\nNotInSyncReplica:\tReplicaIdentity{brokerName='broker-a', brokerId=2, "
        "brokerAddress='127.0.0.1:19911', alive=false}\n"
    )
    state = parse_sync_state_set(text)
    assert state.master == "127.0.0.1:19916"
    assert state.in_sync == {"127.0.0.1:19916": True} and state.not_in_sync == {"127.0.0.1:19911": False}
    assert parse_sync_state_set("#MasterAddr\tnull\n").master is None


def test_a_controller_mode_cluster_is_ready_once_each_name_has_a_master_and_every_replica_an_id():
    from rocketlake.local.cluster import BrokerStatus, ClusterStatus

    def status(*ids):
        brokers = tuple(
            BrokerStatus(key, address, 1, address, broker_id, "broker-a")
            for key, address, broker_id in zip(("broker-a", "broker-a-s1"), ("127.0.0.1:1", "127.0.0.1:2"), ids)
        )
        return ClusterStatus("127.0.0.1:9876", 1, True, brokers, Path("/store"))

    assert status(0, 2).ready and status(2, 0).ready
    assert not status(-1, -1).ready  # registered before the controller gave them ids
    assert not status(2, 3).ready  # no master
    assert "as brokerId -1 (no id from the controller yet)" in status(0, -1).render("DefaultCluster")
    assert "as brokerId 0 (master)" in status(0, 2).render("DefaultCluster")


def test_the_s3_demo_keeps_its_runs_on_the_spark_connect_server_started_with_its_lake(tmp_path, monkeypatch):
    """`rocketlake demo --s3`: the demo's configuration keeps the project's spark.remote with the S3 lake, and the
    local server it starts is given that lake (its bucket's settings, its keys)."""
    from datetime import datetime, timezone

    from rocketlake.demo.run import write_demo_config
    from rocketlake.engine.config import load_config
    from rocketlake.local.s3 import LocalS3
    from rocketlake.local.spark_server import server_for

    project = Path(__file__).resolve().parents[2] / "rocketlake.yaml"
    monkeypatch.chdir(tmp_path)
    lake = LocalS3(tmp_path / "s3", port=7070).lake_settings("demo")
    config = load_config(write_demo_config(project, datetime(2026, 11, 1, tzinfo=timezone.utc), lake=lake))
    assert config.lake.root == "s3a://lake/demo"
    assert config.spark.remote == yaml.safe_load(project.read_text())["spark"]["remote"]
    server = server_for(config.spark, tmp_path / "state", config.lake)
    assert server is not None and server.lake == config.lake


def test_a_running_local_server_without_the_lakes_bucket_is_refused_before_a_run_would_fail(tmp_path):
    """`local up` (and the demo) find the recorded server running: started without this lake's bucket settings (the
    last demo's, on the local lake), its runs would fail; `up` says so instead of reusing it."""
    from rocketlake.delta.storage import server_settings
    from rocketlake.engine.config import LakeConfig
    from rocketlake.local.process import LocalClusterError
    from rocketlake.local.spark_server import LocalSparkServer

    lake = LakeConfig(
        root="s3a://lake/demo",
        s3={
            "endpoint": "http://127.0.0.1:7070",
            "path_style_access": True,
            "access_key_env": "LAKE_KEY",
            "secret_key_env": "LAKE_SECRET",
        },
    )
    server = LocalSparkServer(tmp_path, port=1, lake=lake)
    assert server.lake_refusal() is None  # none runs
    # This very process stands for the running server: its pid and start time recorded, as `up` records them.
    server.process.pid_file.write_text(f"{os.getpid()} {start_time(os.getpid())}\n")
    refusal = server.lake_refusal()  # recorded before its settings were: it had none
    assert refusal is not None and f"(pid {os.getpid()})" in refusal and "s3a://lake/demo" in refusal
    with pytest.raises(LocalClusterError, match=r"stop it \(rocketlake local down\)"):
        server.up()
    server.lake_file.write_text(json.dumps(server_settings(lake)))
    assert server.lake_refusal() is None
    assert LocalSparkServer(tmp_path, port=1).lake_refusal() is None  # a local lake needs no bucket


def test_warm_runs_left_in_the_group_are_found_with_what_they_started():
    """After Ctrl-C, `rocketlake ui` also ends the warm launcher's runs still in its process group: forked twice, a
    run is nobody's descendant (here: a process whose parent exited at once, named as a forked run is named), and
    the ``tail`` it started goes with it. Others in the group are left alone."""
    from rocketlake.demo.ui import warm_runs_left
    from rocketlake.local.process import command_line, descendants, end_processes, start_time

    run = (
        "import os, subprocess, time; subprocess.Popen(['sleep', '60']); print(os.getpid(), flush=True); time.sleep(60)"
    )
    middle = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {run!r}, '-m', "
            "'rocketlake.dagster.warm_runs', 'dagster'], stdout=sys.stdout)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    other = subprocess.Popen(["sleep", "60"])
    ours: dict[int, str] = {}
    try:
        run_pid = int(middle.stdout.readline())
        middle.wait()  # the middle process is gone: the run is an orphan, in this test's process group
        assert run_pid not in descendants(os.getpid()) and "rocketlake.dagster.warm_runs" in command_line(run_pid)
        (tail,) = descendants(run_pid)
        found = warm_runs_left()  # (another worker's runs may be in the group too: only this test's are judged)
        ours = {pid: started for pid, started in found.items() if pid in (run_pid, tail)}
        assert set(ours) == {run_pid, tail} and other.pid not in found, found
        end_processes(ours, grace=1.0)
        assert all(start_time(pid) != started for pid, started in ours.items())
        assert start_time(other.pid) is not None
    finally:
        other.kill()
        end_processes(ours, grace=0)


def test_descendants_are_found_before_their_parent_exits_and_ended_after_it():
    """What `rocketlake ui` does on Ctrl-C: the process tree is taken first, so a grandchild handed to init when its
    parent exits is still ended; one that ignores SIGTERM is killed after the grace."""
    import time

    from rocketlake.local.process import descendants, end_processes, start_time

    grandchild = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; p = subprocess.Popen([sys.executable, "
            f"'-c', {grandchild!r}], stdout=sys.stdout); p.wait()",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    tree: dict[int, str] = {}
    try:
        assert parent.stdout.readline().strip() == "ready"
        assert parent.pid in descendants(os.getpid())
        tree = descendants(parent.pid)  # only the test's own: the worker may have other children (a cluster's JVMs)
        (child,) = tree
        parent.kill()
        parent.wait()
        assert start_time(child) == tree[child]  # orphaned, still running
        began = time.monotonic()
        assert end_processes({child: tree[child]}, grace=1.0) == [child]  # it ignored SIGTERM: killed
        assert time.monotonic() - began < 5
        deadline = time.monotonic() + 5
        while start_time(child) is not None and time.monotonic() < deadline:
            time.sleep(0.05)  # init reaps it; polling the process table, bounded
        assert start_time(child) is None
    finally:
        parent.kill()
        end_processes(tree, grace=0)  # whatever a failed assertion left running
