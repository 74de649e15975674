"""A sensor serving every ingestion of a cluster: its name, and one tick that reads each ingestion in turn."""

from __future__ import annotations

import logging

from dagster import AssetKey

from rocketlake.dagster.cluster_tick import read_each, tick_summary, tick_timeout_ms
from rocketlake.dagster.translator import cluster_sensor_name, translate
from rocketlake.engine.config import parse_config
from rocketlake.rocketmq.errors import ConnectionFailed, TopicNotExist


def members(count: int, extra: dict | None = None):
    config = parse_config(
        {
            "clusters": {"main": {"namesrv": "127.0.0.1:9876"}},
            "ingestions": {
                f"i{n}": {
                    "cluster": "main",
                    "topic": f"t{n}",
                    "consumer_group": f"g{n}",
                    "table": f"t{n}",
                    "window": {"cron": "* * * * *", "start": "2026-11-01"},
                    **(extra or {}).get(n, {}),
                }
                for n in range(count)
            },
        }
    )
    shaped = translate(config)
    return [(ing, shaped[name]) for name, ing in config.ingestions.items()]


def test_the_name_is_the_cluster_under_the_prefix_every_table_shares():
    assert cluster_sensor_name("main", [AssetKey("a"), AssetKey(["raw", "b"])], "lag") == "rocketlake_main_lag"
    assert (
        cluster_sensor_name("main", [AssetKey(["raw", "x", "a"]), AssetKey(["raw", "b"])], "lag")
        == "raw__rocketlake_main_lag"
    )
    assert cluster_sensor_name("eu-1", [AssetKey(["raw", "a"])], "rebalance") == "raw__rocketlake_eu_1_rebalance"


def test_a_group_that_cannot_be_read_does_not_hide_the_others():
    group = members(3)

    def read(cfg):
        if cfg.consumer_group == "g1":
            raise TopicNotExist(address="127.0.0.1:10911", remark="topic t1 does not exist")
        return cfg.consumer_group.upper()

    done, failed = read_each(group, read, "read the progress", logging.getLogger("test"))
    assert [value for _, _, value in done] == ["G0", "G2"]
    (said,) = failed
    assert said.startswith("cannot read the progress of group g1: ") and "topic t1 does not exist" in said, said


def test_a_cluster_that_does_not_answer_ends_the_tick_at_once():
    calls = []

    def read(cfg):
        calls.append(cfg.consumer_group)
        raise ConnectionFailed("127.0.0.1:9876: connection refused")

    done, failed = read_each(members(4), read, "read the progress", logging.getLogger("test"))
    assert done == [] and calls == ["g0"]  # not one timeout per group
    assert failed == [
        "cannot read the progress of group g0: 127.0.0.1:9876: connection refused",
        "3 other group(s) not read this tick: the cluster did not answer",
    ]


def test_what_a_tick_says_stays_short_with_many_ingestions():
    assert tick_summary(["a", "b"], ["c failed"]) == "a; b; c failed"
    assert tick_summary([str(n) for n in range(100)], []) == "100 ingestions read"
    assert tick_summary([], []) == "no ingestion"


def test_the_ticks_client_waits_as_long_as_the_longest_timeout_set():
    assert tick_timeout_ms(members(2)) is None  # the resource's own
    assert tick_timeout_ms(members(3, {1: {"mq_client_api_timeout": 9000}, 2: {"mq_client_api_timeout": 4000}})) == 9000
