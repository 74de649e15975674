"""Name server bodies: fastjson's bare integer keys, route/cluster parsing, response handling.

Bodies below are written the way the reference (section 2.1/2.2) describes fastjson output;
no name server is involved. NameServerClient's fail-over is exercised against closed
loopback ports only.
"""

from __future__ import annotations

import json
import pickle
import socket

import pytest

from rocketlake.rocketmq.codes import RequestCode, ResponseCode
from rocketlake.rocketmq.errors import (
    BrokerSystemError,
    ConnectionFailed,
    InvalidArgument,
    ProtocolError,
    TopicNotExist,
)
from rocketlake.rocketmq.frame import RemotingCommand
from rocketlake.rocketmq.namesrv import (
    BrokerData,
    NameServerClient,
    QueueData,
    cluster_info_from_response,
    normalize_json,
    parse_cluster_info,
    parse_topic_route,
    topic_route_from_response,
)

try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None

# fastjson default output for a 2-broker route (brokerAddrs is a HashMap<Long,String>: bare keys).
ROUTE_FASTJSON = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"broker-a",'
    b'"cluster":"DefaultCluster","enableActingMaster":false},'
    b'{"brokerAddrs":{0:"127.0.0.1:10811"},"brokerName":"broker-b","cluster":"DefaultCluster",'
    b'"enableActingMaster":false}],"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4},'
    b'{"brokerName":"broker-b","perm":2,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8}]}'
)
# The same route as a >= 4.9.4 name server writes it for version >= 401 (keys quoted, non-ASCII escaped).
ROUTE_STANDARD = ROUTE_FASTJSON.replace(b"{0:", b'{"0":').replace(b",1:", b',"1":')

CLUSTER_FASTJSON = (
    b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911"},"brokerName":"broker-a",'
    b'"cluster":"c1","enableActingMaster":false,"zoneName":"z1"},'
    b'"broker-b":{"brokerAddrs":{0:"10.0.0.2:10911", 2:"10.0.0.3:10911"},"brokerName":"broker-b","cluster":"c1"}},'
    b'"clusterAddrTable":{"c1":["broker-a","broker-b"]}}'
)


# --------------------------------------------------------------------------- normaliser


@pytest.mark.parametrize(
    "raw, expected",
    [
        ('{0:"a"}', '{"0":"a"}'),
        ('{0:"a",1:"b"}', '{"0":"a","1":"b"}'),
        ('{ 0 : "a" , 12 :"b"}', '{ "0" : "a" , "12" :"b"}'),
        ('{-1:"neg"}', '{"-1":"neg"}'),
        ('{"x":{0:{1:2}}}', '{"x":{"0":{"1":2}}}'),
        ('{"k":"{0:1}"}', '{"k":"{0:1}"}'),  # inside a string: untouched
        ('{"k":"a\\"{0:\\"","n":{3:"c"}}', '{"k":"a\\"{0:\\"","n":{"3":"c"}}'),  # escaped quote inside a string
        ('{"k":"\\\\",5:"after escaped backslash"}', '{"k":"\\\\","5":"after escaped backslash"}'),
        ("[0,1,{2:3}]", '[0,1,{"2":3}]'),  # array elements are not keys
        ('{"a":1,"b":[1,2]}', '{"a":1,"b":[1,2]}'),  # standard JSON unchanged
        ('{"9":"already quoted"}', '{"9":"already quoted"}'),
        ('{"t":"中文,7:x"}', '{"t":"中文,7:x"}'),
    ],
)
def test_normalize_json_quotes_bare_integer_keys_only_outside_strings(raw: str, expected: str) -> None:
    assert normalize_json(raw) == expected
    json.loads(expected)  # the expectation itself is valid JSON


if given is not None:
    JSON_VALUES = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=20,
    )

    @settings(max_examples=300, deadline=2000)
    @given(value=JSON_VALUES)
    def test_standard_json_passes_through_unchanged(value: object) -> None:
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False), json.dumps(value, indent=1)):
            assert normalize_json(text) == text

    @settings(max_examples=300, deadline=2000)
    @given(table=st.dictionaries(st.integers(-(2**63), 2**63 - 1), st.text(), max_size=6))
    def test_fastjson_integer_key_maps_parse_after_normalising(table: dict[int, str]) -> None:
        fastjson = "{" + ",".join(f"{k}:{json.dumps(v)}" for k, v in table.items()) + "}"
        assert json.loads(normalize_json('{"brokerAddrs":' + fastjson + "}")) == {
            "brokerAddrs": {str(k): v for k, v in table.items()}
        }


# --------------------------------------------------------------------------- parsing


def test_both_route_dialects_parse_to_the_same_route() -> None:
    route = parse_topic_route("T1", ROUTE_FASTJSON)
    assert route == parse_topic_route("T1", ROUTE_STANDARD)
    assert route.topic == "T1"
    assert route.queue_datas == (
        QueueData(broker_name="broker-a", read_queue_nums=4, write_queue_nums=4, perm=6, topic_sys_flag=0),
        QueueData(broker_name="broker-b", read_queue_nums=8, write_queue_nums=8, perm=2, topic_sys_flag=0),
    )
    assert [q.readable for q in route.queue_datas] == [True, False]  # perm 2 = write only
    broker_a = route.broker("broker-a")
    assert broker_a == BrokerData(
        cluster="DefaultCluster",
        broker_name="broker-a",
        broker_addrs={0: "127.0.0.1:10911", 1: "127.0.0.1:10921"},
    )
    assert broker_a.master_addr == "127.0.0.1:10911"
    assert route.broker("broker-z") is None
    assert route.filter_server_table == {}


def test_route_survives_pickling_for_spark_workers() -> None:
    route = parse_topic_route("T1", ROUTE_FASTJSON)
    assert pickle.loads(pickle.dumps(route)) == route


def test_cluster_info_parses_bare_keys_and_tables() -> None:
    info = parse_cluster_info(CLUSTER_FASTJSON)
    assert info.cluster_addr_table == {"c1": ("broker-a", "broker-b")}
    assert info.broker_addr_table["broker-a"].zone_name == "z1"
    assert info.broker_addr_table["broker-b"].broker_addrs == {0: "10.0.0.2:10911", 2: "10.0.0.3:10911"}
    assert info.broker_addr_table["broker-b"].master_addr == "10.0.0.2:10911"


@pytest.mark.parametrize(
    "body, fragment",
    [
        (b"not json", "not JSON even after quoting integer keys"),
        (b'{"queueDatas":[{"perm":6,"readQueueNums":1,"writeQueueNums":1}]}', "queueDatas[0].brokerName is missing"),
        (
            b'{"queueDatas":[{"brokerName":"b","perm":"6","readQueueNums":1,"writeQueueNums":1}]}',
            "queueDatas[0].perm is '6', expected int",
        ),
        (b'{"brokerDatas":[{"brokerName":"b","brokerAddrs":{"master":"x:1"}}]}', "key 'master' is not a broker id"),
        (b'{"brokerDatas":[{"brokerName":"b","brokerAddrs":{0:5}}]}', "brokerAddrs[0] is 5"),
        (b"[]", "is a list, expected an object"),
        (b'{"queueDatas":[{"brokerName":"b\xff"}]}', "not UTF-8"),
    ],
)
def test_malformed_route_bodies_raise_protocol_error_naming_the_field(body: bytes, fragment: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_topic_route("T1", body)
    assert fragment in str(info.value)


# --------------------------------------------------------------------------- responses


def response(code: int, body: bytes = b"", remark: str | None = None) -> RemotingCommand:
    return RemotingCommand(code=code, body=body, remark=remark, opaque=1, flag=1, language="JAVA")


def test_topic_not_exist_tells_the_user_to_create_the_topic() -> None:
    remark = (
        "No topic route info in name server for the topic: T9\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ"
    )
    with pytest.raises(TopicNotExist) as info:
        topic_route_from_response("127.0.0.1:9876", "T9", response(ResponseCode.TOPIC_NOT_EXIST, remark=remark))
    message = str(info.value)
    assert message.startswith("127.0.0.1:9876 answered GET_ROUTEINFO_BY_TOPIC(105) with TOPIC_NOT_EXIST(17): No topic")
    assert "create it first" in message and "mqadmin updateTopic -n 127.0.0.1:9876 -c <cluster> -t T9" in message
    assert info.value.request_code == RequestCode.GET_ROUTEINFO_BY_TOPIC


def test_success_responses_are_parsed_and_errors_mapped() -> None:
    assert topic_route_from_response("a:1", "T1", response(0, ROUTE_FASTJSON)).queue_datas[0].broker_name == "broker-a"
    assert "broker-b" in cluster_info_from_response("a:1", response(0, CLUSTER_FASTJSON)).broker_addr_table
    with pytest.raises(BrokerSystemError, match="name server not ready"):
        cluster_info_from_response("a:1", response(1, remark="name server not ready"))
    with pytest.raises(ProtocolError, match=r"a:1 answered GET_BROKER_CLUSTER_INFO\(106\) with a bad body"):
        cluster_info_from_response("a:1", response(0, b"{oops"))


# --------------------------------------------------------------------------- client


def closed_port() -> int:
    with socket.socket() as s:  # bound then closed: nothing listens there afterwards
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_addresses_are_split_and_validated() -> None:
    assert NameServerClient(" 10.0.0.1:9876; 10.0.0.2:9876 ;").addresses == ("10.0.0.1:9876", "10.0.0.2:9876")
    assert NameServerClient(["a:1", "b:2"]).addresses == ("a:1", "b:2")
    with pytest.raises(InvalidArgument, match="no name server address"):
        NameServerClient(" ; ")
    with pytest.raises(InvalidArgument, match="bad address 'localhost'"):
        NameServerClient("localhost")


def test_client_is_picklable() -> None:
    client = NameServerClient("a:1;b:2", timeout=1.5)
    copy = pickle.loads(pickle.dumps(client))
    assert (copy.addresses, copy.timeout) == (("a:1", "b:2"), 1.5)


def test_every_name_server_is_tried_and_the_error_names_all_of_them() -> None:
    first, second = f"127.0.0.1:{closed_port()}", f"127.0.0.1:{closed_port()}"
    client = NameServerClient(f"{first};{second}", timeout=2.0)
    with pytest.raises(ConnectionFailed) as info:
        client.topic_route("T1")
    message = str(info.value)
    assert message.startswith(f"all 2 name servers failed ({first}, {second}): ")
    assert message.index(first) < message.index(second)  # tried in order
    assert message.count("GET_ROUTEINFO_BY_TOPIC(105)") == 2
    assert isinstance(info.value.__cause__, ConnectionFailed) and info.value.__cause__.address == second


def test_a_single_name_server_failure_is_raised_as_is() -> None:
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(ConnectionFailed) as info:
        NameServerClient(address, timeout=2.0).cluster_info()
    assert str(info.value).startswith(f"cannot connect to {address} for GET_BROKER_CLUSTER_INFO(106)")
