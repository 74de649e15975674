"""A broker's clock from its runtime info, and the ``broker_clock`` check's verdict, on plain data.

tests/integration/test_broker_clock.py reads the clocks of real brokers, one of them on a shifted clock.
"""

import pytest

from rocketlake.dagster.lag import clock_outcome
from rocketlake.engine.broker_clock import BrokerClock, clock_of, read_clocks, runtime_seconds
from rocketlake.engine.config import IngestionConfig, parse_config
from rocketlake.rocketmq.admin import parse_kv_table
from rocketlake.rocketmq.errors import ConnectionFailed, ProtocolError
from tests.unit.support import with_ingestion


def test_runtime_is_read_in_seconds_with_thousands_grouped():
    assert runtime_seconds("[ 0 days, 0 hours, 0 minutes, 7 seconds ]") == 7
    assert runtime_seconds("[ 1 days, 2 hours, 3 minutes, 4 seconds ]") == ((24 + 2) * 60 + 3) * 60 + 4
    assert runtime_seconds(" [ 1,024 days, 0 hours, 0 minutes, 0 seconds ] ") == 1024 * 86400
    with pytest.raises(ProtocolError, match="runtime '5 minutes'"):
        runtime_seconds("5 minutes")


def test_the_skew_is_the_middle_of_what_the_round_trip_allows():
    # Booted at 1,000,000 ms of its clock, 100 s ago by its clock: its time was in [1,100,000, 1,101,000).
    info = {"bootTimestamp": "1000000", "runtime": "[ 0 days, 0 hours, 1 minutes, 40 seconds ]"}
    clock = clock_of("broker-b", info, sent_ms=1_130_000, answered_ms=1_130_200)  # this host: 30 s later
    # skew in [1,100,000 - 1,130,200, 1,101,000 - 1,130,000] = [-30,200, -29,000]
    assert clock == BrokerClock("broker-b", skew_ms=-29_600, error_ms=600)
    assert clock.off_by_more_than(28_000) and not clock.off_by_more_than(29_000)
    assert clock.describe() == "broker-b is 29.6s behind this host (±0.6s)"
    with pytest.raises(ProtocolError, match="broker-b's runtime info has no usable bootTimestamp"):
        clock_of("broker-b", {"runtime": info["runtime"]}, 0, 0)


def test_a_kv_table_body_is_name_to_value_and_anything_else_is_refused():
    assert parse_kv_table(
        b'{"table":{"bootTimestamp":"17","runtime":"[ 0 days, 0 hours, 0 minutes, 1 seconds ]"}}'
    ) == {"bootTimestamp": "17", "runtime": "[ 0 days, 0 hours, 0 minutes, 1 seconds ]"}
    with pytest.raises(ProtocolError, match="KVTable"):
        parse_kv_table(b'{"table":{"bootTimestamp":17}}')


class _Brokers:
    """What ``read_clocks`` needs of a client: a broker's runtime info, or the error asking it gives."""

    def __init__(self, answers):
        self.answers = answers

    def broker(self, name):
        answer = self.answers[name]
        if isinstance(answer, Exception):
            raise answer
        return type("Broker", (), {"get_broker_runtime_info": lambda self: answer})()


def test_a_broker_not_answering_is_named_and_not_judged():
    ticks = iter([10_000.0, 10_000.1, 10_000.2, 10_000.3])
    up = {"bootTimestamp": "9000000", "runtime": "[ 0 days, 0 hours, 16 minutes, 40 seconds ]"}  # 10,000 s
    clocks, unread = read_clocks(
        _Brokers({"broker-a": up, "broker-b": ConnectionFailed("refused")}),
        ["broker-b", "broker-a", "broker-a"],
        now=lambda: next(ticks),
    )
    assert [c.broker for c in clocks] == ["broker-a"] and abs(clocks[0].skew_ms) <= clocks[0].error_ms
    assert unread == {"broker-b": "refused"}


def _cfg(grace: int) -> IngestionConfig:
    return parse_config(
        with_ingestion(window={"cron": "* * * * *", "grace_seconds": grace, "start": "2026-01-01T00:00:00+00:00"})
    ).ingestions["orders"]


def test_the_check_fails_on_a_clock_off_by_more_than_the_grace_and_says_what_to_do():
    near, behind = BrokerClock("broker-a", 300, 500), BrokerClock("broker-b", -30_000, 600)
    green = clock_outcome(_cfg(60), [near, behind], {})
    assert green["passed"] and "within window.grace_seconds (60s)" in green["description"]
    red = clock_outcome(_cfg(2), [near, behind], {"broker-c": "refused"})
    assert not red["passed"]
    assert red["description"].startswith(
        "broker-b is 30.0s behind this host (±0.6s): more than window.grace_seconds (2s)"
    )
    assert "time sync" in red["description"] and "not read: broker-c: refused" in red["description"]
    assert red["metadata"]["skew_seconds/broker-b"].value == -30.0
    # The measure's own error never turns it red: 2.4 s off, ±0.6 s, against a grace of 2 s.
    assert clock_outcome(_cfg(2), [BrokerClock("broker-a", 2_400, 600)], {})["passed"]
