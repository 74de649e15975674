"""Issue 45, a broker that stops answering shows red: the lag sensor's tick on the disruptable brokers, broker-b
paused (SIGSTOP) past the client's timeout, then broker-a killed.

While broker-b's route is still listed (the name server drops it only after 120 s without its heartbeat), the
tick used to fail the whole group's read on broker-b's first request and end with a skip reason: no check was
evaluated, so a paused or hung broker never showed in the UI. Now broker-a's queues are still judged, and the
``caught_up`` check fails naming broker-b, its address and what it did not answer; it is green again the first tick
after broker-b answers.

A killed broker is another matter: its connection to the name server closes and the name server drops it from the
route at once, so the tick found no broker to ask and judged broker-b's queues alone: ``caught_up`` stayed green for
the whole outage while broker-a held messages not landed (the chaos soak's ``broker_kill`` showed no red when no
tick fell between its return and the next run's commit). A broker that held queues of the group at the last lag
observation and is in no route now fails the check too.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetKey,
    AssetObservation,
    DagsterInstance,
    build_sensor_context,
)

from rocketlake.dagster.catch_up import CAUGHT_UP_CHECK
from rocketlake.dagster.lag import CLOCK_CHECK
from rocketlake.dagster.rocketmq_resource import RocketMQResource
from rocketlake.local.process import stop_all
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.send import OutgoingMessage
from tests.conftest import hand_over
from tests.integration.ingestion_support import definitions, unique, write_config

pytestmark = pytest.mark.broker


def two_broker_ingestion(cluster, tmp_path, name: str):
    """A topic with a queue on each broker, a message in each, the group's offsets at 0: the topic, group, table and
    a tick of the lag sensor (its checks and observations are returned, not recorded as the daemon would)."""
    topic, group, table = unique(name), unique(f"g_{name}"), unique("t")
    with RocketMQClient(cluster.spec.namesrv_address, timeout=5.0) as client:
        client.create_topic(topic, 1)
        deadline = time.monotonic() + 10
        while {q.broker_name for q in client.queues(topic)} != {"broker-a", "broker-b"}:
            assert time.monotonic() < deadline, client.queues(topic)
            time.sleep(0.2)  # polls the name server for the route
            client.refresh_route(topic)
        client.create_subscription_group(group)
        for broker in ("broker-a", "broker-b"):
            mq = MessageQueue(topic, broker, 0)
            client.send(OutgoingMessage(topic, b'{"order": "o"}'), mq)
            client.update_consumer_offset(group, mq, 0)
    config = write_config(
        tmp_path / "rocketlake.yaml",
        cluster,
        tmp_path / "lake",
        {
            "orders": {
                "topic": topic,
                "consumer_group": group,
                "table": table,
                "mq_client_api_timeout": 3000,
                "window": {
                    "cron": "* * * * *",
                    "timezone": "UTC",
                    "grace_seconds": 2,
                    # The messages' window must not fall due (close + grace + slack) before the last tick: sent a
                    # few seconds before a minute ended, a slack of 0 let it fall due during the paused tick's
                    # timeouts, and the last tick found the queues trailing (a CI run did). A minute more keeps every
                    # tick before the deadline; the red under test is the paused broker's, not the lag's.
                    "freshness_slack_seconds": 60,
                    "start": "2026-11-01T00:00:00Z",
                },
            }
        },
    )
    defs = definitions(config)
    sensor = defs.get_sensor_def("rocketlake_test_lag")
    resources = {"rocketmq_test": RocketMQResource(namesrv=cluster.spec.namesrv_address)}

    def tick(instance):
        result = sensor.evaluate_tick(
            build_sensor_context(instance=instance, resources=resources, definitions=defs, sensor_name=sensor.name)
        )
        checks = {
            e.check_name: e
            for e in result.asset_events
            if isinstance(e, AssetCheckEvaluation) and e.asset_key == AssetKey(table)
        }
        observations = [e for e in result.asset_events if isinstance(e, AssetObservation)]
        assert result.asset_events, result.skip_message
        return checks, observations

    return topic, group, table, tick


def test_a_paused_broker_turns_caught_up_red_naming_it_and_the_other_brokers_queues_are_still_judged(
    disruptable, tmp_path
):
    _, group, table, tick = two_broker_ingestion(disruptable, tmp_path, "paused")
    broker_b = disruptable.broker_processes["broker-b"].pid()
    address_b = next(b.address for b in disruptable.spec.brokers if b.name == "broker-b")
    with DagsterInstance.ephemeral() as instance:
        checks, _ = tick(instance)
        assert checks[CAUGHT_UP_CHECK].passed, checks[CAUGHT_UP_CHECK].description
        os.kill(broker_b, signal.SIGSTOP)
        try:
            checks, observations = tick(instance)
        finally:
            os.kill(broker_b, signal.SIGCONT)
        red = checks[CAUGHT_UP_CHECK]
        assert not red.passed, red.description
        assert red.description.startswith(f"broker-b ({address_b}) did not answer "), red.description
        assert f"the progress of 1 queue(s) of group {group} on it is unknown" in red.description, red.description
        # No lag figure is better than one that leaves broker-b's queue out.
        assert observations == [], observations
        assert "not read: broker-b" in checks[CLOCK_CHECK].description, checks[CLOCK_CHECK].description

        checks, observations = tick(instance)
        assert checks[CAUGHT_UP_CHECK].passed, checks[CAUGHT_UP_CHECK].description
        assert len(observations) == 1


def test_a_killed_broker_that_left_the_route_turns_caught_up_red_until_it_is_back(disruptable, tmp_path):
    topic, group, table, tick = two_broker_ingestion(disruptable, tmp_path, "killed")
    with DagsterInstance.ephemeral() as instance:
        checks, observations = tick(instance)
        assert checks[CAUGHT_UP_CHECK].passed, checks[CAUGHT_UP_CHECK].description
        instance.report_runless_asset_event(observations[0])  # what the daemon does with a tick's observation
        stop_all([disruptable.broker_processes["broker-a"]], sig=signal.SIGKILL)
        with RocketMQClient(disruptable.spec.namesrv_address, timeout=5.0) as client:
            deadline = time.monotonic() + 30
            while client.refresh_route(topic).broker("broker-a") is not None:
                assert time.monotonic() < deadline, "the name server still lists broker-a 30 s after its kill"
                time.sleep(0.2)  # polls the name server for the route
        checks, observations = tick(instance)
        red = checks[CAUGHT_UP_CHECK]
        assert not red.passed, red.description
        assert red.description.startswith("broker-a is in no route of the group's topics"), red.description
        assert f"1 queue(s) of group {group} on it" in red.description, red.description
        assert observations == [], observations  # the memory of broker-a's queues stays the last observation

        hand_over(disruptable)  # broker-a started again on its store
        checks, observations = tick(instance)
        assert checks[CAUGHT_UP_CHECK].passed, checks[CAUGHT_UP_CHECK].description
        assert len(observations) == 1
