"""The brokers' clocks, read from real brokers (4.9 and 5.x), one of them restarted on a clock 30 s behind.

What the ``broker_clock`` check judges (``engine.broker_clock``): GET_BROKER_RUNTIME_INFO's ``bootTimestamp``
and ``runtime`` put together. A broker on this host's clock reads within its error of 0; broker-b of the
disruptable cluster, started under libfaketime 30 s behind, reads 30 s behind, and the check names it, until it is
started again on the machine's clock.
"""

from __future__ import annotations

import re
import signal
import time

import pytest

from rocketlake.dagster.lag import clock_outcome
from rocketlake.engine.broker_clock import read_clocks
from rocketlake.engine.config import parse_config
from rocketlake.local.process import stop_all
from rocketlake.rocketmq.client import RocketMQClient
from tests.conftest import hand_over
from tests.faketime import faketime_env
from tests.unit.support import with_ingestion

pytestmark = pytest.mark.broker

STEP_S = 30


def clocks_of(cluster) -> dict[str, tuple[float, float]]:
    """broker -> (skew, error) in seconds, once every broker answers: a 4.9 broker answers SYSTEM_ERROR
    (NoSuchElementException) until its store took its first one-second sample of figures."""
    deadline = time.monotonic() + 30
    with RocketMQClient(cluster.spec.namesrv_address, timeout=5.0) as client:
        while True:
            clocks, unread = read_clocks(client, [b.name for b in cluster.spec.brokers])
            if not unread or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # polls the brokers
    assert not unread
    return {c.broker: (c.skew_ms / 1000, c.error_ms / 1000) for c in clocks}


def restart_broker_b(cluster, env: dict[str, str]) -> None:
    assert stop_all([cluster.broker_processes["broker-b"]], sig=signal.SIGKILL) == ["broker-b"]
    cluster.broker_env["broker-b"] = env
    hand_over(cluster)


def test_a_4x_brokers_clock_reads_as_this_hosts(local_cluster_4x):
    for broker, (skew, error) in clocks_of(local_cluster_4x).items():
        assert abs(skew) <= error + 0.5, f"{broker}: {skew:+.1f}s ±{error:.1f}s on this host's clock"


def test_a_broker_on_a_clock_behind_is_read_as_such_and_turns_the_check_red(disruptable):
    cfg = parse_config(
        with_ingestion(window={"cron": "* * * * *", "grace_seconds": 2, "start": "2026-01-01T00:00:00+00:00"})
    ).ingestions["orders"]
    try:
        restart_broker_b(disruptable, faketime_env(f"-{STEP_S}s"))
        clocks = clocks_of(disruptable)
        (a_skew, a_error), (b_skew, b_error) = clocks["broker-a"], clocks["broker-b"]
        assert abs(a_skew) <= a_error + 0.5, clocks
        assert abs(b_skew + STEP_S) <= b_error + 0.5, clocks
        with RocketMQClient(disruptable.spec.namesrv_address, timeout=5.0) as client:
            red = clock_outcome(cfg, *read_clocks(client, clocks))
        assert not red["passed"] and re.match(
            r"broker-b is (29|30)\.\d+s behind this host \(±\d\.\ds\): more "
            r"than window.grace_seconds \(2s\)",
            red["description"],
        ), red["description"]
    finally:
        restart_broker_b(disruptable, {})
    clocks_of(disruptable)  # both answer again
    with RocketMQClient(disruptable.spec.namesrv_address, timeout=5.0) as client:
        green = clock_outcome(cfg, *read_clocks(client, ["broker-a", "broker-b"]))
    assert green["passed"] and "broker-b" in green["description"], green["description"]
