"""A run refuses to start when its group's pool is not limited to 1 on its Dagster instance (``dagster.pool_limit``).

The exactly-once protocol relies on one writer per consumer group at a time, which Dagster's pool
(``rocketmq_group_<group>``, ``..._dlq`` for the dead letters) gives only when the instance limits it to 1 for every
step. On an instance without that setting (a user's ``dg dev``, any DAGSTER_HOME without ``concurrency``) the step
fails at once, in one sentence naming the pool, the limit found and the setting to fix, before it asks anything of
Spark or the brokers; with the limit it goes on to the brokers.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path

import pytest
from dagster import instance_for_test, materialize

from rocketlake.dagster.ingestion import build_dead_letter_asset, build_ingestion_asset
from rocketlake.dagster.translator import translate
from rocketlake.engine.config import parse_config
from tests.dagster_instance import pooled_instance

POOL, DLQ_POOL = "rocketmq_group_g", "rocketmq_group_g_dlq"
WINDOW = "2026-11-01-10:00"  # closed long ago


class Touched(Exception):
    """What the fake resources raise when a run asks them for anything: it went past the check."""


class FakeSpark:
    def __init__(self, calls: list[str]):
        self.calls = calls

    def session(self):
        self.calls.append("spark.session")
        raise Touched("spark")


class FakeRocketMQ:
    namesrv = "127.0.0.1:9876"

    def __init__(self, calls: list[str]):
        self.calls = calls

    def client(self, timeout=None):
        self.calls.append("rocketmq.client")  # every read and every offset commit goes through a client
        raise Touched("rocketmq")

    def source_options(self, timeout=None):
        self.calls.append("rocketmq.source_options")
        raise Touched("rocketmq")


def assets(lake: Path):
    config = parse_config(
        {
            "clusters": {"local": {"namesrv": "127.0.0.1:9876"}},
            "lake": {"root": str(lake)},
            "ingestions": {
                "orders": {
                    "cluster": "local",
                    "topic": "orders",
                    "consumer_group": "g",
                    "table": "orders",
                    "window": {"cron": "* * * * *", "start": "2026-11-01"},
                    "run_retry": {"max_retries": 0},
                }
            },
        }
    )
    shaped = translate(config)["orders"]
    ingestion = config.ingestions["orders"]
    return {
        "orders": build_ingestion_asset("orders", ingestion, config.lake, shaped),
        "orders_dlq": build_dead_letter_asset("orders", ingestion, config.lake, shaped),
    }


def run_on(instance, asset, calls: list[str]):
    return materialize(
        [asset],
        instance=instance,
        partition_key=WINDOW,
        raise_on_error=False,
        resources={"spark": FakeSpark(calls), "rocketmq_local": FakeRocketMQ(calls)},
    )


def failure(result) -> str:
    [event] = result.get_step_failure_events()
    data = event.step_failure_data
    return data.user_failure_data.description if data.user_failure_data else data.error.message


@contextmanager
def unlimited():
    with instance_for_test() as instance:  # no `concurrency` at all: Dagster's default, pools without a limit
        yield instance


@contextmanager
def default_limit(n: int, **pools):
    with instance_for_test(overrides={"concurrency": {"pools": {"default_limit": n, **pools}}}) as instance:
        yield instance


@contextmanager
def set_for_pool(n: int, default: int | None = None):
    """`dagster instance concurrency set <pool> n`, on an instance with or without a default limit."""
    overrides = {} if default is None else {"concurrency": {"pools": {"default_limit": default}}}
    with instance_for_test(overrides=overrides) as instance:
        instance.event_log_storage.set_concurrency_slots(POOL, n)
        instance.event_log_storage.set_concurrency_slots(DLQ_POOL, n)
        yield instance


@contextmanager
def ephemeral():
    from dagster import DagsterInstance

    with DagsterInstance.ephemeral() as instance:  # what `materialize(...)` without an instance runs on
        yield instance


REFUSED = [
    pytest.param(
        unlimited,
        "has no limit",
        r"`concurrency: pools: default_limit: 1` in \$DAGSTER_HOME/dagster\.yaml",
        id="no-concurrency-settings",
    ),
    pytest.param(
        lambda: default_limit(2),
        r"is limited to 2 \(`concurrency: pools: default_limit: 2`\)",
        r"`concurrency: pools: default_limit: 1` in \$DAGSTER_HOME/dagster\.yaml",
        id="default-limit-2",
    ),
    pytest.param(
        lambda: set_for_pool(3, default=1),
        r"is limited to 3 \(set for the pool\)",
        r"`dagster instance concurrency set {pool} 1`",
        id="pool-set-to-3",
    ),
    pytest.param(
        lambda: default_limit(1, granularity="run"),
        r"`concurrency: pools: granularity: run`",
        r"`granularity: op`",
        id="run-granularity",
    ),
    pytest.param(
        ephemeral,
        "keeps no pool slots",
        r"a DAGSTER_HOME whose dagster\.yaml sets "
        r"`concurrency: pools: default_limit: 1`",
        id="ephemeral-instance",
    ),
]


@pytest.mark.parametrize(("instance_of", "found", "fix"), REFUSED)
@pytest.mark.parametrize(("asset", "pool"), [("orders", POOL), ("orders_dlq", DLQ_POOL)])
def test_a_run_on_an_instance_whose_pool_is_not_limited_to_1_refuses_in_one_sentence_and_touches_nothing(
    tmp_path, instance_of, found, fix, asset, pool
):
    calls: list[str] = []
    with instance_of() as instance:
        result = run_on(instance, assets(tmp_path / "lake")[asset], calls)
        assert not result.success
        said = failure(result)
        assert f"pool {pool} " in said and re.search(found, said) and re.search(fix.format(pool=pool), said), said
        assert said.endswith("nothing was read or written.") and "\n" not in said, said
        assert calls == []  # no Spark session, no client: nothing read, nothing landed, no offset moved
        assert not (tmp_path / "lake").exists()
        # A permanent failure: the step's retry policy does not run it again.
        assert len(result.get_step_failure_events()) == 1 and not result.filter_events(
            lambda e: e.event_type_value == "STEP_RESTARTED"
        )


@pytest.mark.parametrize(
    "instance_of", [pooled_instance, lambda: set_for_pool(1)], ids=["recommended-instance", "pool-set-to-1"]
)
@pytest.mark.parametrize("asset", ["orders", "orders_dlq"])
def test_a_run_on_an_instance_whose_pool_is_limited_to_1_goes_on_to_the_brokers(tmp_path, instance_of, asset):
    calls: list[str] = []
    with instance_of() as instance:
        result = run_on(instance, assets(tmp_path / "lake")[asset], calls)
    assert calls and calls[0] == "rocketmq.client", calls  # past the check: the run asks the cluster first
    assert "nothing was read or written" not in failure(result)


def test_the_instances_rocketlake_writes_limit_every_pool_to_1(tmp_path, monkeypatch):
    """The local instance (``rocketlake backfill``, the demo and ``rocketlake ui`` without DAGSTER_HOME), the
    production instance (``deploy/dagster.yaml``, which ``rocketlake local up --dagster`` uses) and the tests' own."""
    import yaml
    from dagster import DagsterInstance

    from rocketlake.dagster.launch import dagster_home
    from rocketlake.dagster.pool_limit import check_pool_limited, pool_limit
    from rocketlake.local.dagster_stack import production_instance

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", "restored-after-the-test")
    monkeypatch.delenv("DAGSTER_HOME")
    with DagsterInstance.from_config(str(dagster_home().absolute())) as instance:
        assert pool_limit(instance, POOL).one_at_a_time
        check_pool_limited(instance, POOL, "g")
    # deploy/dagster.yaml's storage is PostgreSQL: its pool settings on a SQLite instance.
    production = {"concurrency": yaml.safe_load(production_instance().read_text())["concurrency"]}
    with instance_for_test(overrides=production) as instance:
        assert pool_limit(instance, DLQ_POOL).one_at_a_time
    with pooled_instance() as instance:
        assert pool_limit(instance, POOL).one_at_a_time


def test_the_guide_shows_the_sentence_a_person_gets():
    from rocketlake.dagster.pool_limit import PoolNotLimited, check_pool_limited

    guide = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "dagster.md").read_text()
    [shown] = [line for line in guide.splitlines() if line.startswith("pool rocketmq_group_GID_orders ")]
    with unlimited() as instance, pytest.raises(PoolNotLimited) as refused:
        check_pool_limited(instance, "rocketmq_group_GID_orders", "GID_orders")
    assert str(refused.value) == shown
