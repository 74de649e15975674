"""Whose timeout a run's broker calls use: the ingestion's ``mq_client_api_timeout`` when set, else the resource's."""

from __future__ import annotations

from rocketlake.dagster.rocketmq_resource import RocketMQResource
from tests.unit.support import ingestion_config


def test_the_resource_timeout_applies_unless_the_ingestion_sets_its_own():
    resource = RocketMQResource(namesrv="127.0.0.1:9876", timeout_ms=7000)
    unset, own = ingestion_config(), ingestion_config(mq_client_api_timeout=500)
    assert unset.mq_client_api_timeout is None
    assert resource.client(unset.mq_client_api_timeout).timeout == 7.0
    assert resource.source_options(unset.mq_client_api_timeout)["timeoutMs"] == "7000"  # Spark's readers too
    assert resource.client(own.mq_client_api_timeout).timeout == 0.5
    assert resource.source_options(own.mq_client_api_timeout)["timeoutMs"] == "500"
    with resource.open_client(unset.mq_client_api_timeout) as sensor_client:  # a sensor's tick
        assert sensor_client.timeout == 7.0
