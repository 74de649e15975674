"""A table per topic (``engine.topic_tables``): what the configuration accepts, and the ingestions it becomes."""

from __future__ import annotations

import copy

import pytest

from rocketlake.engine.config import ConfigError, parse_config
from rocketlake.engine.topic_tables import expand, per_topic, table_of
from tests.unit.support import MINIMAL

pytestmark = pytest.mark.unit


def config(namespace: str | None = None, **changes):
    raw = copy.deepcopy(MINIMAL)
    raw["ingestions"]["orders"].pop("topic")
    raw["ingestions"]["orders"].update(
        {"topic_pattern": "orders.*", "table": "raw_{topic}", "consumer_group": "lake_{topic}", **changes}
    )
    raw["ingestions"]["payments"] = {**MINIMAL["ingestions"]["orders"], "topic": "payments", "table": "payments"}
    if namespace:
        raw["clusters"]["local"]["namespace"] = namespace
    return parse_config(raw)


def test_each_topic_becomes_an_ingestion_of_its_own_table_and_group():
    cfg = config()
    assert per_topic(cfg.ingestions["orders"]) and not per_topic(cfg.ingestions["payments"])
    out = expand(cfg, {"orders": ["orders-eu", "orders_us"]})
    assert sorted(out.ingestions) == ["payments", "raw_orders_eu", "raw_orders_us"]
    eu = out.ingestions["raw_orders_eu"]
    assert (eu.topic, eu.topics, eu.topic_pattern, eu.table) == ("orders-eu", [], None, "raw_orders_eu")
    assert eu.consumer_group == "lake_orders-eu" and eu.window == cfg.ingestions["orders"].window
    assert out.ingestions["payments"] == cfg.ingestions["payments"]
    assert sorted(expand(cfg, {"orders": []}).ingestions) == ["payments"]  # no topic yet: no table yet


def test_in_a_namespace_the_brokers_names_are_wrapped_and_the_tables_are_not():
    out = expand(config(namespace="retail"), {"orders": ["orders"]})
    one = out.ingestions["raw_orders"]
    assert (one.topic, one.consumer_group, one.table) == ("retail%orders", "retail%lake_orders", "raw_orders")
    assert one.plain(one.topic) == "orders"


def test_named_topics_and_catalog_tables_take_the_rule_too():
    cfg = config(topic_pattern=None, topics=["a", "b"], table="bronze.{topic}_raw")
    out = expand(cfg, {"orders": ["a", "b"]})
    assert {n: i.table for n, i in out.ingestions.items() if n != "payments"} == {
        "bronze__a_raw": "bronze.a_raw",
        "bronze__b_raw": "bronze.b_raw",
    }
    assert table_of("raw_{topic}", "a|b%c-d") == "raw_a_b_c_d"


def test_two_topics_making_one_table_are_refused_naming_both():
    with pytest.raises(ValueError, match="topic 'orders_eu' of 'orders' and topic 'orders-eu' of 'orders' both make"):
        expand(config(), {"orders": ["orders-eu", "orders_eu"]})
    with pytest.raises(ValueError, match="topic 'ments' of 'orders' and ingestion 'payments' both make table"):
        expand(config(table="pay{topic}"), {"orders": ["ments"]})


def test_a_topic_that_makes_an_invalid_table_or_group_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"topic '1st' makes table '1st', .* put a prefix before \{topic\}"):
        expand(config(table="{topic}"), {"orders": ["1st"]})
    with pytest.raises(ValueError, match="topic '.*' makes consumer group 'lake_x+'"):
        expand(config(), {"orders": ["x" * 260]})


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"consumer_group": "lake"}, "a table per topic names {topic} in both"),
        ({"table": "raw"}, "a table per topic names {topic} in both"),
        ({"topic_pattern": None, "topic": "orders"}, "lands topic_pattern's or topics' topics"),
        ({"table": "raw-{topic}"}, "must be name or database.name"),
    ],
)
def test_the_configuration_refuses_a_half_made_rule(changes, why):
    with pytest.raises(ConfigError, match=why):
        config(**changes)
