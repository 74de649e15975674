"""`rocketlake local up | down | status` as a user types it, and the errors a user meets."""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rocketlake.resources.local.cluster import LocalCluster
from rocketlake.resources.local.process import LocalClusterError, ManagedProcess, port_in_use, start_time
from rocketlake.resources.local.spec import ClusterSpec
from tests.conftest import free_ports, make_spec
from tests.unit.support import land_table

pytestmark = pytest.mark.stack


def rocketlake(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rocketlake.cli", *args], capture_output=True, text=True,
                          env=env or dict(os.environ), timeout=300, cwd=cwd)


def cluster_args(spec: ClusterSpec) -> list[str]:
    return ["--state-dir", str(spec.state_dir), "--store-dir", str(spec.store),
            "--namesrv-port", str(spec.namesrv_port),
            "--broker-ports", ",".join(str(b.port) for b in spec.brokers)]


def test_up_twice_then_down_leaves_nothing_running(tmp_path):
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
    try:
        first = rocketlake("local", "up", *args)
        assert first.returncode == 0, first.stderr
        assert first.stdout.count("registered") == 2
        # progress while it starts: one line per process ready
        assert "name server listening on" in first.stdout and first.stdout.count(" is up at ") == 2, first.stdout
        roles = ["namesrv", "broker-a", "broker-b"]
        pids = {r: ManagedProcess(r, spec.state_dir).pid() for r in roles}
        assert all(pids.values()), pids

        second = rocketlake("local", "up", *args)
        assert second.returncode == 0, second.stderr
        assert {r: ManagedProcess(r, spec.state_dir).pid() for r in roles} == pids  # nothing restarted

        assert rocketlake("local", "status", *args).returncode == 0
    finally:
        down = rocketlake("local", "down", "--wipe", *args, cwd=project)
    assert down.returncode == 0, down.stderr
    assert "broker-a" in down.stdout and "namesrv" in down.stdout
    assert ("deleted what was landed from the wiped store: .rocketlake/lake/orders, .rocketlake/lake/orders_failures"
            in down.stdout)
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
