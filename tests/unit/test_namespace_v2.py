"""RocketMQ's second namespace form: ``ns`` and ``nsd`` in every request's fields (the Java client's
NamespaceRpcHook), signed with the rest when the cluster signs (the hook runs first), carried by the client, its
pickles, the resource and the Spark source's options to every process that sends."""

from __future__ import annotations

import pickle

import pytest

from rocketlake.dagster.rocketmq_resource import RocketMQResource
from rocketlake.engine.config import parse_config
from rocketlake.engine.options import parse_options
from rocketlake.rocketmq.acl import AclClientRPCHook, Credentials, sign, signing_content
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.frame import RemotingCommand
from rocketlake.rocketmq.namespace_hook import request_hook


def test_the_fields_go_in_every_request_and_are_signed_with_the_rest() -> None:
    request = RemotingCommand(code=11, ext_fields={"topic": "orders"})
    hook = request_hook("shop", AclClientRPCHook(Credentials("ak", "sk")))
    hook.before_request("127.0.0.1:10911", request)
    fields = request.ext_fields
    assert (fields["ns"], fields["nsd"], fields["topic"]) == ("shop", "true", "orders")  # the name left as it was
    assert fields["Signature"] == sign(signing_content(fields, b""), "sk")  # ns and nsd signed too
    unsigned = RemotingCommand(code=11, ext_fields={"topic": "orders"})
    request_hook("shop", None).before_request("127.0.0.1:10911", unsigned)
    assert unsigned.ext_fields == {"topic": "orders", "ns": "shop", "nsd": "true"}
    assert request_hook(None, None) is None


def test_the_setting_reaches_the_client_its_pickle_and_the_spark_workers() -> None:
    config = parse_config(
        {
            "clusters": {"hosted": {"namesrv": "127.0.0.1:9876", "namespace_v2": "shop"}},
            "ingestions": {
                "orders": {
                    "cluster": "hosted",
                    "topic": "orders",
                    "consumer_group": "g",
                    "table": "orders",
                    "window": {"cron": "* * * * *", "start": "1970-01-01"},
                }
            },
        }
    )
    assert config.ingestions["orders"].topic == "orders"  # not wrapped, unlike the first form's `shop%orders`
    resource = RocketMQResource.of_cluster("hosted", config.clusters["hosted"])
    client = resource.open_client()
    assert client.namespace_v2 == "shop" and pickle.loads(pickle.dumps(client)).namespace_v2 == "shop"
    options = resource.source_options() | {"topic": "orders"}
    assert options["namespaceV2"] == "shop"
    assert parse_options(options).namespace_v2 == "shop"
    assert RocketMQClient("127.0.0.1:9876").namespace_v2 is None


def test_a_namespace_outside_rocketmqs_characters_is_refused_by_key() -> None:
    with pytest.raises(ValueError, match="namespace_v2") as refused:
        parse_config({"clusters": {"c": {"namesrv": "127.0.0.1:9876", "namespace_v2": "a%b"}}, "ingestions": {}})
    assert "must be 1 to 64 letters, digits" in str(refused.value)
