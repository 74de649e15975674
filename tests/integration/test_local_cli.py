"""`rocketlake local up | down | status` as a user types it, and the errors a user meets."""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from pyarrow import fs

from rocketlake.engine.config import TlsConfig
from rocketlake.local.cluster import LocalCluster
from rocketlake.local.process import LocalClusterError, ManagedProcess, port_in_use, start_time
from rocketlake.local.s3 import LocalS3
from rocketlake.local.spec import ClusterSpec
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.errors import ConnectionFailed
from rocketlake.rocketmq.retry import NO_RETRY
from tests.conftest import free_ports, make_spec
from tests.unit.support import land_table

pytestmark = pytest.mark.stack


def rocketlake(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rocketlake.cli.main", *args],
        capture_output=True,
        text=True,
        env=env or dict(os.environ),
        timeout=300,
        cwd=cwd,
    )


def cluster_args(spec: ClusterSpec) -> list[str]:
    return [
        "--state-dir",
        str(spec.state_dir),
        "--store-dir",
        str(spec.store),
        "--namesrv-port",
        str(spec.namesrv_port),
        "--broker-ports",
        ",".join(str(b.port) for b in spec.brokers),
    ]


def test_up_twice_then_down_leaves_nothing_running(tmp_path, local_s3, monkeypatch):
    spec = make_spec(tmp_path / "state")
    args = cluster_args(spec)
    # What a project landed from this store in its default places, from another cluster (the demo's), and what
    # it keeps besides.
    project = tmp_path / "project"
    lake = project / ".rocketlake/lake"
    land_table(lake / "orders", spec.namesrv_address)
    land_table(lake / "orders_failures", None)  # a failures table has no ledger: it follows its table
    land_table(lake / "demo_orders", "127.0.0.1:9876")
    (project / ".rocketlake/dagster/history").mkdir(parents=True)
    (project / ".rocketlake/dagster/history/runs.db").write_text("{}")
    (project / ".rocketlake/demo").mkdir()
    (project / ".rocketlake/demo/rocketlake.yaml").write_text("ingestions: {}")
    s3_port, connect_port = free_ports(2)
    s3 = ["--s3", "--s3-port", str(s3_port)]  # and an S3 server of its own (local_s3: its binary is built)
    monkeypatch.delenv("ROCKETLAKE_S3_SECRET_KEY")  # the session server's: this one generates its own at `up`
    # The project's configuration, its Spark Connect server on a free port: `up` starts it, `down` stops it.
    config = yaml.safe_load((Path(__file__).resolve().parents[2] / "rocketlake.yaml").read_text())
    assert config["spark"]["remote"] == "sc://127.0.0.1:15002"  # the local runtime's default: one long-lived Spark
    config["spark"] = {**config["spark"], "master": "local[1]", "remote": f"sc://127.0.0.1:{connect_port}"}
    (project / "rocketlake.yaml").write_text(yaml.safe_dump(config))
    # From a shell that exports SPARK_REMOTE for its PySpark clients (as PySpark documents), where a Connect client
    # ran: the server `up` starts is a Spark driver all the same, not a client of that URL.
    env = dict(
        os.environ,
        ROCKETLAKE_CONFIG=str(project / "rocketlake.yaml"),
        SPARK_REMOTE=f"sc://127.0.0.1:{connect_port}",
        SPARK_CONNECT_MODE_ENABLED="1",
    )
    try:
        first = rocketlake("local", "up", "--tls", *args, *s3, env=env)
        assert first.returncode == 0, first.stderr
        assert first.stdout.count("registered") == 2
        # progress while it starts: one line per process ready
        assert "name server listening on" in first.stdout and first.stdout.count(" is up at ") == 2, first.stdout
        # TLS enforced with the local CA: the printed cluster block reaches it, a plain client is turned away.
        printed_tls = (
            first.stdout.split("TLS enforced", 1)[1].split("use it with ", 1)[1].split(" in rocketlake.yaml")[0]
        )
        ca_file = spec.state_dir / "tls" / "ca.pem"
        assert yaml.safe_load(printed_tls) == {
            "clusters": {"local": {"namesrv": spec.namesrv_address, "tls": {"ca_file": str(ca_file)}}}
        }
        tls_client = RocketMQClient(spec.namesrv_address, tls=TlsConfig(ca_file=str(ca_file)).settings())
        assert set(tls_client.cluster_info().broker_addr_table) == {"broker-a", "broker-b"}
        with pytest.raises(ConnectionFailed, match="tls.server.mode=enforcing"):
            RocketMQClient(spec.namesrv_address, timeout=5.0, backoff=NO_RETRY).cluster_info()
        # The S3 server: its lake section printed, the bucket made, the secret kept out of the output.
        keys = rocketlake("local", "env", *args, *s3, env=env)
        assert keys.returncode == 0, keys.stderr
        secret = dict(line.removeprefix("export ").split("=", 1) for line in keys.stdout.splitlines())[
            "ROCKETLAKE_S3_SECRET_KEY"
        ]
        assert len(secret) >= 20 and secret not in first.stdout + first.stderr
        server = LocalS3(spec.state_dir / "s3", s3_port)
        printed = first.stdout.split("S3-compatible", 1)[1].split("use it with ", 1)[1].split(" in rocketlake.yaml")[0]
        assert yaml.safe_load(printed) == {"lake": server.lake_settings()}
        assert server.lake_settings()["s3"]["endpoint"] == f"http://127.0.0.1:{s3_port}"
        assert server.secret_key() == secret
        assert server.filesystem().get_file_info("lake").type == fs.FileType.Directory
        roles = ["namesrv", "broker-a", "broker-b"]
        pids = {r: ManagedProcess(r, spec.state_dir).pid() for r in roles}
        pids["s3"] = server.process.pid()
        connect = ManagedProcess("spark-connect", spec.state_dir / "spark-connect")
        pids["spark-connect"] = connect.pid()
        assert all(pids.values()), pids
        assert f"Spark Connect server on sc://127.0.0.1:{connect_port} (master local[1], Delta)" in first.stdout
        assert port_in_use(connect_port)

        second = rocketlake("local", "up", *args, *s3, env=env)
        assert second.returncode == 0, second.stderr
        assert {r: ManagedProcess(r, spec.state_dir).pid() for r in roles} | {
            "s3": server.process.pid(),
            "spark-connect": connect.pid(),
        } == pids
        assert server.secret_key() == secret  # kept: the second up did not make another

        status = rocketlake("local", "status", *args, *s3, env=env)  # TLS without --tls: the cluster runs with it
        assert status.returncode == 0 and status.stdout.count("registered") == 2, status.stdout
        assert f"spark-connect: running (pid {pids['spark-connect']})" in status.stdout, status.stdout
    finally:
        down = rocketlake("local", "down", "--wipe", *args, cwd=project)  # stops the S3 server without --s3
    assert down.returncode == 0, down.stderr
    stopped_roles = down.stdout.split("stopped: ", 1)[1].splitlines()[0].split(", ")
    assert {"broker-a", "namesrv", "s3", "spark-connect"} <= set(stopped_roles), down.stdout
    assert not port_in_use(s3_port) and not port_in_use(connect_port)
    assert (
        "deleted what was landed from the wiped store: .rocketlake/lake/orders, .rocketlake/lake/orders_failures"
        in down.stdout
    )
    assert sorted(p.name for p in lake.iterdir()) == ["demo_orders"], "the other cluster's landing stays"
    assert sorted(p.name for p in (project / ".rocketlake").iterdir()) == ["dagster", "demo", "lake"]
    assert all(start_time(pid) is None for pid in pids.values())
    assert not any(port_in_use(p) for b in spec.brokers for p in b.ports)
    assert not port_in_use(spec.namesrv_port)
    stopped = rocketlake("local", "status", *args)
    assert stopped.returncode == 3 and "down" in stopped.stdout
    assert not spec.store.exists()


def test_port_in_use_is_named_and_nothing_starts(tmp_path):
    spec = make_spec(tmp_path / "state")
    with socket.socket() as squatter:
        # As any server binds (Java's do): a connection of an earlier test that used this port may linger in
        # TIME_WAIT, which fails a plain bind although the port is free to listen on (make_spec checks it so).
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", spec.namesrv_port))
        squatter.listen()
        result = rocketlake("local", "up", *cluster_args(spec))
    assert result.returncode == 2
    assert f"port {spec.namesrv_port}" in result.stderr and "already in use" in result.stderr
    assert "Traceback" not in result.stderr
    assert ManagedProcess("namesrv", spec.state_dir).pid() is None


def test_unwritable_store_is_reported(tmp_path):
    spec = make_spec(tmp_path / "state")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    args = cluster_args(spec)
    args[args.index("--store-dir") + 1] = str(blocker / "store")
    result = rocketlake("local", "up", *args)
    assert result.returncode == 2
    assert "not writable" in result.stderr and str(blocker / "store") in result.stderr


def test_missing_java_is_reported(tmp_path):
    spec = make_spec(tmp_path / "state")
    env = dict(os.environ, PATH=str(Path(sys.executable).parent))
    result = rocketlake("local", "up", *cluster_args(spec), env=env)
    assert result.returncode == 2
    assert "'java' is not on PATH" in result.stderr


def test_broker_dying_on_start_shows_its_log(tmp_path):
    # The broker takes a POSIX lock on <store>/lock; held elsewhere it exits with "Lock failed".
    spec = make_spec(tmp_path / "state")
    store = spec.store / "broker-a"
    store.mkdir(parents=True)
    cluster = LocalCluster(spec)
    with open(store / "lock", "w") as held:
        fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            with pytest.raises(LocalClusterError) as failure:
                cluster.up(timeout=90)
        finally:
            cluster.down(wipe=True)
    message = str(failure.value)
    assert "broker-a process exited while waiting" in message
    assert "Lock failed" in message


def test_free_ports_are_free():
    ports = free_ports(3, block=2)
    assert len(set(ports)) == 3
    assert not any(port_in_use(p) for p in ports)


#: A leader thread that leaves before the others, as a JVM's does when it exits: the raw ``exit`` system call ends
#: the calling thread only (ctypes releases the GIL for it), while another thread keeps the listening socket.
LEAVER = """
import ctypes, platform, socket, threading, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", {port}))
s.listen()
def hold():
    while True:
        time.sleep(0.05)
threading.Thread(target=hold).start()
ctypes.CDLL(None).syscall({{"x86_64": 60, "aarch64": 93}}[platform.machine()], 0)
"""


def test_a_process_whose_threads_are_still_exiting_is_not_gone_and_is_stopped_with_its_port(tmp_path):
    """A process whose leader is a zombie while other threads still run holds its files and sockets open: the chaos
    soak's restart of the Spark server found its port still listening right after `down` (ss: LISTEN, no process),
    and the restart failed with "port in use". Such a process is still running for `pid()`, and `stop_all` ends it
    and returns once its port is free."""
    from rocketlake.local.process import stat_fields, stop_all

    (port,) = free_ports(1)
    leaver = ManagedProcess("leaver", tmp_path)
    pid = leaver.start([sys.executable, "-c", LEAVER.format(port=port)], dict(os.environ))
    deadline = time.monotonic() + 30
    while (fields := stat_fields(pid)) is not None and fields[0] != "Z":
        assert time.monotonic() < deadline, "the leader thread did not leave"
        time.sleep(0.05)  # polling another process's state
    assert fields is not None and port_in_use(port)  # the leader left; the process still listens
    assert leaver.pid() == pid, "a process whose threads still run was judged gone"
    assert stop_all([leaver]) == ["leaver"]
    assert leaver.pid() is None and not port_in_use(port)
