"""TLS (rocketlake/rocketmq/tls.py) and ACL 1.0 request signing (rocketlake/rocketmq/acl.py) against real name servers
and brokers that enforce both: TLS only (``tls.server.mode=enforcing``, certificates of a CA the local runtime made)
and signed requests only.

TLS: our client speaks it to the name server and the brokers; a client without TLS, or trusting another CA, or a
name server whose certificate has expired, fails at once with a sentence naming the address and what to set. The
Java client (``-Dtls.enable=true``, signing with the same account) sends through the same cluster what ours reads.

A client with the right :class:`Credentials` creates a topic, sends, pulls and commits offsets; a
client without credentials, with the wrong secret or with an unknown access key is refused on each
broker request it tries, with a typed error naming the broker, the request and the response code,
and neither secret ever shows up in an error or in our logs.

Each RocketMQ line gets its own small cluster (name server + one broker, on free ports), since the
session clusters run without TLS and ACL:

* 4.9.7: plain ACL (``aclEnable=true`` + ``${rocketmq.home.dir}/conf/plain_acl.yml``, one admin
  account). A refusal is an ``AclException`` thrown by the broker's RPC hook, which 4.9 answers with
  SYSTEM_ERROR(1) and the exception as remark, e.g. ``org.apache.rocketmq.acl.common.AclException:
  Check signature failed for accessKey=rocketlake_ak, org.apache...PlainPermissionManager.validate(...)``.
* 5.3.3: the plain ACL module is gone (``aclEnable`` is a dead switch); authentication 2.0
  (``authenticationEnabled=true``, the account created by ``initAuthenticationUser``) checks the
  very same AccessKey/Signature extFields and answers NO_PERMISSION(16), e.g. ``check signature
  failed.`` Authorization stays off, so the account may do everything (create topics included).

The name server has no ACL on either line: routes are looked up by every client alike.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from dagster import AssetKey, DagsterInstance

from rocketlake.jars import ROCKETMQ_4_VERSION, ROCKETMQ_VERSION
from rocketlake.local import peers
from rocketlake.local.certificates import issue, local_certificates, new_authority
from rocketlake.local.cluster import LocalCluster
from rocketlake.local.spec import AclSpec, TlsSpec
from rocketlake.rocketmq.acl import Credentials
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.connection import Connection
from rocketlake.rocketmq.errors import (
    BrokerError,
    BrokerSystemError,
    ConnectionFailed,
    ConnectionTurnedAway,
    NoPermission,
    TopicNotExist,
)
from rocketlake.rocketmq.frame import RemotingCommand
from rocketlake.rocketmq.message_queue import MessageQueue
from rocketlake.rocketmq.pull import PullStatus
from rocketlake.rocketmq.retry import NO_RETRY
from rocketlake.rocketmq.send import OutgoingMessage
from rocketlake.rocketmq.tls import TlsSettings
from tests.conftest import SHORT_DELAY_LEVELS, SparkConnect, connect_server, make_spec
from tests.dagster_instance import recommended_home

ROOT = Path(__file__).resolve().parents[2]
DAGSTER = str(Path(sys.executable).parent / "dagster")

pytestmark = pytest.mark.broker

ACCESS_KEY = "rocketlake_ak"
SECRET_KEY = "rl-acl-secret.7c41e9"
WRONG_SECRET = "rl-not-the-secret.0b52"
UNKNOWN_KEY = "someone_else"
TIMEOUT = 10.0


@dataclass(frozen=True)
class Refusal:
    """How one RocketMQ line refuses a request: error class, response code, remark per credential kind."""

    error: type[BrokerError]
    code: int
    remarks: dict[str, str]


_ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"

REFUSALS = {
    ROCKETMQ_VERSION: Refusal(
        NoPermission,
        16,
        {
            "unsigned": "username cannot be null.",
            "wrong_secret": "check signature failed.",
            "unknown_key": f"User:{UNKNOWN_KEY} is not found.",
        },
    ),
    ROCKETMQ_4_VERSION: Refusal(
        BrokerSystemError,
        1,
        {
            "unsigned": f"{_ACL_EXCEPTION}: No accessKey is configured",
            "wrong_secret": f"{_ACL_EXCEPTION}: Check signature failed for accessKey={ACCESS_KEY}",
            "unknown_key": f"{_ACL_EXCEPTION}: No acl config for {UNKNOWN_KEY}",
        },
    ),
}

CREDENTIALS = {
    "unsigned": None,
    "wrong_secret": Credentials(ACCESS_KEY, WRONG_SECRET),
    "unknown_key": Credentials(UNKNOWN_KEY, SECRET_KEY),
}


@dataclass(frozen=True)
class AclCluster:
    cluster: LocalCluster
    topic: str  # created by the signed client, 2 queues on broker-a

    @property
    def version(self) -> str:
        return self.cluster.spec.version

    @property
    def address(self) -> str:
        return self.cluster.spec.brokers[0].address

    def client(self, credentials: Credentials | None, tls: TlsSettings | None = None) -> RocketMQClient:
        return RocketMQClient(
            self.cluster.spec.namesrv_address,
            credentials=credentials,
            timeout=TIMEOUT,
            tls=tls or self.cluster.spec.tls_settings(),
        )

    def signed(self) -> RocketMQClient:
        return self.client(Credentials(ACCESS_KEY, SECRET_KEY))


@pytest.fixture(scope="module", params=[ROCKETMQ_VERSION, ROCKETMQ_4_VERSION])
def acl_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    version = request.param
    spec = make_spec(tmp_path_factory.mktemp(f"acl-{version}"), version=version)
    spec = replace(
        spec,
        brokers=spec.brokers[:1],
        acl=AclSpec(ACCESS_KEY, SECRET_KEY),
        tls=TlsSpec(),
        extra_broker_properties=SHORT_DELAY_LEVELS,
    )
    cluster = LocalCluster(spec)
    try:
        cluster.up()
        topic = f"acl_{uuid.uuid4().hex[:8]}"
        route = RocketMQClient(
            spec.namesrv_address,
            credentials=Credentials(ACCESS_KEY, SECRET_KEY),
            timeout=TIMEOUT,
            tls=spec.tls_settings(),
        ).create_topic(topic, 2)
        assert {q.broker_name: q.write_queue_nums for q in route.queue_datas} == {"broker-a": 2}
        yield AclCluster(cluster, topic)
    finally:
        cluster.down(wipe=True)


def wait_for_max_offset(client: RocketMQClient, mq: MessageQueue, at_least: int) -> int:
    deadline = time.monotonic() + 10
    while (offset := client.get_max_offset(mq)) < at_least:
        assert time.monotonic() < deadline, f"{mq} stays at max offset {offset}, expected {at_least}"
    return offset


def test_signed_client_creates_sends_pulls_and_commits(
    acl_cluster: AclCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = acl_cluster.signed()
    topic = f"acl_own_{uuid.uuid4().hex[:8]}"
    route = client.create_topic(topic, 1)  # UPDATE_AND_CREATE_TOPIC: admin-only on 4.9
    assert [(q.broker_name, q.read_queue_nums) for q in route.queue_datas] == [("broker-a", 1)]
    mq = MessageQueue(topic, "broker-a", 0)

    sent = [client.send(OutgoingMessage(topic, b"signed 0", tags="a"), mq)]
    sent += client.send_batch([OutgoingMessage(topic, f"signed {i}".encode(), keys=[f"k{i}"]) for i in (1, 2)], mq)
    assert [s.queue_offset for s in sent] == [0, 1, 2]
    assert wait_for_max_offset(client, mq, 3) == 3
    assert client.get_min_offset(mq) == 0

    group = f"g_acl_{uuid.uuid4().hex[:8]}"
    result = client.pull(mq, 0, consumer_group=group)
    assert result.status is PullStatus.FOUND
    assert [(m.queue_offset, m.msg_id, m.body) for m in result.messages] == [
        (s.queue_offset, s.msg_id, f"signed {i}".encode()) for i, s in enumerate(sent)
    ]
    assert [m.tags for m in result.messages] == ["a", None, None]
    assert client.pull(mq, 3, consumer_group=group).status is PullStatus.NO_NEW_MSG

    assert client.update_consumer_offset(group, mq, 2) is True
    assert client.query_consumer_offset(group, mq) == 2
    assert client.update_consumer_offset(group, mq, 3) is True
    assert client.query_consumer_offset(group, mq) == 3
    assert SECRET_KEY not in caplog.text and SECRET_KEY not in repr(client)


@pytest.mark.parametrize("kind", list(CREDENTIALS))
def test_unsigned_or_wrongly_signed_requests_are_refused_without_leaking_secrets(
    acl_cluster: AclCluster, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    expected = REFUSALS[acl_cluster.version]
    signed = acl_cluster.signed()
    topic = acl_cluster.topic
    mq = MessageQueue(topic, "broker-a", 1)
    group = f"g_acl_{kind}"
    # What the refused calls must leave untouched, seen by the signed client.
    signed.create_subscription_group(group)  # 5.3 takes no commit for a group it does not know
    before = signed.send(OutgoingMessage(topic, f"before {kind}".encode()), mq)
    max_before = wait_for_max_offset(signed, mq, before.queue_offset + 1)
    assert signed.update_consumer_offset(group, mq, 1) is True

    client = acl_cluster.client(CREDENTIALS[kind])
    calls: dict[str, Callable[[], object]] = {
        "PULL_MESSAGE(11)": lambda: client.pull(mq, 0, consumer_group=group),
        "SEND_MESSAGE_V2(310)": lambda: client.send(OutgoingMessage(topic, b"must not be stored"), mq),
        "GET_MAX_OFFSET(30)": lambda: client.get_max_offset(mq),
        "QUERY_CONSUMER_OFFSET(14)": lambda: client.query_consumer_offset(group, mq),
        "UPDATE_CONSUMER_OFFSET(15)": lambda: client.update_consumer_offset(group, mq, 0),
        "UPDATE_AND_CREATE_TOPIC(17)": lambda: client.create_topic(f"acl_denied_{kind}", 1, wait=1),
    }
    for request, call in calls.items():
        with pytest.raises(expected.error) as caught:
            call()
        error = caught.value
        text = str(error)
        assert error.address == acl_cluster.address and error.response_code == expected.code
        assert text.startswith(f"{acl_cluster.address} answered {request} with "), text
        assert f"({expected.code}): {expected.remarks[kind]}" in text, text
        assert "check the AccessKey and SecretKey it signs with" in text  # says what to do
        assert not type(error).retriable  # fails at once: only new credentials help
        for secret in (SECRET_KEY, WRONG_SECRET):
            assert secret not in text and secret not in repr(error) and secret not in (error.remark or "")
            assert secret not in repr(client) and secret not in repr(client.credentials)

    for secret in (SECRET_KEY, WRONG_SECRET):
        assert secret not in caplog.text
    # The refused send stored nothing, the refused commit moved nothing, the refused create made no topic.
    assert signed.get_max_offset(mq) == max_before
    assert signed.query_consumer_offset(group, mq) == 1
    with pytest.raises(TopicNotExist):
        signed.route(f"acl_denied_{kind}")


def test_a_client_without_tls_is_told_the_cluster_enforces_it(acl_cluster: AclCluster) -> None:
    """The servers close a connection whose first byte is not a TLS handshake: the error says so, at once, and is a
    refusal (``ConnectionTurnedAway``, not retried): the server answers a TLS handshake, so it will close a plain
    connection again, unlike a server that crashed at that moment."""
    for address in (acl_cluster.cluster.spec.namesrv_address, acl_cluster.address):
        began = time.monotonic()
        connection = Connection(address)
        with pytest.raises(ConnectionTurnedAway) as failed:
            connection.invoke(RemotingCommand.request(105), TIMEOUT)  # GET_BROKER_CLUSTER_INFO, or anything
        connection.close()
        assert address in str(failed.value) and "tls.server.mode=enforcing" in str(failed.value), failed.value
        assert time.monotonic() - began < TIMEOUT / 2  # refused, not timed out


def test_a_client_trusting_another_ca_names_the_address_and_the_setting(acl_cluster: AclCluster, tmp_path) -> None:
    other = new_authority(tmp_path / "other", "not the cluster's CA")
    client = acl_cluster.client(Credentials(ACCESS_KEY, SECRET_KEY), TlsSettings(str(other.cert_file)))
    with pytest.raises(ConnectionFailed) as failed:
        client.cluster_info()
    text = str(failed.value)
    assert acl_cluster.cluster.spec.namesrv_address in text and "not trusted" in text and "tls.ca_file" in text


def test_the_java_client_sends_over_tls_what_ours_reads(acl_cluster: AclCluster) -> None:
    """The official producer with ``-Dtls.enable=true`` (trusting the local CA) and the account's signature, then
    our client over TLS: the same messages, offsets and ids."""
    spec = acl_cluster.cluster.spec
    topic = acl_cluster.topic
    sent = peers.produce(
        spec.namesrv_address,
        spec.state_dir,
        [
            {"topic": topic, "tags": "tls", "body": f"over tls {i}", "broker": "broker-a", "queue_id": 0}
            for i in range(5)
        ],
        version=spec.version,
    )
    assert len(sent) == 5 and all(s.status == "SEND_OK" for s in sent)
    client = acl_cluster.signed()
    mq = MessageQueue(topic, "broker-a", 0)
    first = min(s.queue_offset for s in sent)
    wait_for_max_offset(client, mq, first + 5)
    pulled = client.pull(mq, first, 32, consumer_group="g_tls_reader").messages[:5]
    assert [(m.msg_id, m.queue_offset, m.body) for m in pulled] == [
        (s.msg_id, s.queue_offset, f"over tls {i}".encode()) for i, s in enumerate(sent)
    ]


def test_a_name_server_with_an_expired_certificate_is_refused_with_the_reason(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A real name server serving a certificate that expired yesterday, signed by the CA the client trusts."""
    spec = make_spec(tmp_path_factory.mktemp("expired"))
    spec = replace(spec, brokers=(), tls=TlsSpec())
    made = local_certificates(spec.tls_dir)
    now = datetime.now(timezone.utc)
    issue(made.ca, spec.tls_dir, "server", not_before=now - timedelta(days=30), not_after=now - timedelta(days=1))
    cluster = LocalCluster(spec)
    try:
        cluster.up()
        with pytest.raises(ConnectionFailed) as failed:
            RocketMQClient(spec.namesrv_address, timeout=TIMEOUT, tls=spec.tls_settings()).cluster_info()
        text = str(failed.value)
        assert spec.namesrv_address in text and "expired" in text and "renew" in text, text
    finally:
        cluster.down(wipe=True)


def test_a_name_server_that_requires_client_certificates_takes_ours_and_names_what_is_missing(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A real name server with ``tls.server.need.client.auth=require``: the local client certificate (signed by the
    CA it trusts) is taken; without one the client is turned away in a sentence that names the two keys."""
    spec = replace(make_spec(tmp_path_factory.mktemp("mtls")), brokers=(), tls=TlsSpec(require_client_certificate=True))
    cluster = LocalCluster(spec)
    try:
        cluster.up()
        with_certificate = spec.tls_settings()
        assert with_certificate.cert_file and with_certificate.key_file
        assert RocketMQClient(spec.namesrv_address, timeout=TIMEOUT, tls=with_certificate).cluster_info() is not None
        without = TlsSettings(str(spec.tls_dir / "ca.pem"))
        with pytest.raises(ConnectionFailed) as failed:
            RocketMQClient(spec.namesrv_address, timeout=TIMEOUT, tls=without, backoff=NO_RETRY).cluster_info()
        text = str(failed.value)
        assert spec.namesrv_address in text and "tls.cert_file" in text and "tls.key_file" in text, text
    finally:
        cluster.down(wipe=True)


# --------------------------------------------------------------------------------------------
# A whole ingestion through Dagster on the TLS + ACL cluster, its lake on S3. On 5.3.3 only: both lines take the
# very same signature (the tests above), and TLS is the same code on both (TlsSystemConfig is identical); what a run
# adds on top (Spark's workers signing and speaking TLS, send-backs, dead letters) does not differ between them.

ACL_ENV = {"ROCKETLAKE_TEST_ACL_AK": ACCESS_KEY, "ROCKETLAKE_TEST_ACL_SK": SECRET_KEY}
SIGNATURE_FIELD = re.compile(r"""["']Signature["']\s*[:=]|\bSignature=""")


@pytest.fixture(scope="module")
def secure_spark_connect(
    tmp_path_factory: pytest.TempPathFactory, spark_jvm_options, local_s3
) -> Iterator[SparkConnect]:
    """The runs' long-lived Spark Connect server, as `rocketlake spark-server` runs it for this configuration: the S3
    bucket's settings and keys, and the ACL keys' variables in its environment (its Python workers read the cluster,
    signing their requests)."""
    from rocketlake.engine.config import LakeConfig

    yield from connect_server(
        tmp_path_factory.mktemp("secure-spark-connect"), LakeConfig(**local_s3.lake_settings()), ACL_ENV
    )


@pytest.mark.stack
@pytest.mark.parametrize("acl_cluster", [ROCKETMQ_VERSION], indirect=True)
def test_a_dagster_run_lands_commits_and_dead_letters_through_tls_and_acl_and_no_secret_shows(
    acl_cluster: AclCluster,
    local_s3,
    secure_spark_connect: SparkConnect,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from deltalake import DeltaTable
    from pyarrow import fs

    from rocketlake.delta.storage import delta_rs_options
    from rocketlake.engine.config import LakeConfig
    from tests.integration.ingestion_support import order, room_in_this_minute, unique, wait_until, write_config

    spec = acl_cluster.cluster.spec
    client = acl_cluster.signed()
    topic, group, table = unique("secure"), unique("g"), unique("t")
    client.create_topic(topic, 2)

    # The ingestion as a user writes it: keys by variable name, the cluster's CA, the lake on S3, its runs on the
    # long-lived Spark server (started with the bucket's settings and keys, as on the local runtime).
    config = write_config(
        tmp_path / "rocketlake.yaml",
        acl_cluster.cluster,
        tmp_path / "unused",
        {
            "orders": {
                "topic": topic,
                "consumer_group": group,
                "table": table,
                "listener": "tests.unit.listeners:fail_poison",
                "consume_message_batch_max_size": 1,
                "max_reconsume_times": 0,
            }
        },  # a failure goes straight to %DLQ%
        secure_spark_connect.settings(),
    )
    body = yaml.safe_load(config.read_text())
    body["clusters"]["test"] |= {
        "access_key_env": "ROCKETLAKE_TEST_ACL_AK",
        "secret_key_env": "ROCKETLAKE_TEST_ACL_SK",
        "tls": {"ca_file": str(spec.tls_dir / "ca.pem")},
    }
    lake = LakeConfig(**local_s3.lake_settings(unique("secure")))
    body["lake"] = lake.model_dump(exclude_none=True)
    config.write_text(yaml.safe_dump(body))
    home = recommended_home(tmp_path / "dagster_home")
    env = dict(os.environ, ROCKETLAKE_CONFIG=str(config), DAGSTER_HOME=str(home), **ACL_ENV)

    # The Java producer, over TLS and signed, sends a minute's orders; one in three is poison.
    room_in_this_minute()  # the orders must all be stored within one minute, the window
    minute = int(time.time()) // 60 * 60
    sent = peers.produce(
        spec.namesrv_address,
        spec.state_dir,
        [order(i, topic, "poison" if i % 3 == 0 else "TagA") for i in range(9)],
        version=spec.version,
    )
    assert {s.status for s in sent} == {"SEND_OK"}
    assert int(time.time()) // 60 * 60 == minute, "the orders were stored across two minutes (two windows)"
    window = datetime.fromtimestamp(minute, timezone.utc).strftime("%Y-%m-%d-%H:%M")

    # While their window closes: a run whose configuration lacks the tls block is turned away at its first call, in
    # a sentence naming the cluster and what to configure, and leaves no table and no offset (its window: the minute
    # before the orders', closed and empty). With the default run retries: a refusal is permanent, so the step is
    # not retried (each retry would be turned away alike, tens of seconds later).
    plain = config.with_name("without_tls.yaml")
    plain.write_text(
        yaml.safe_dump(
            {**body, "clusters": {"test": {k: v for k, v in body["clusters"]["test"].items() if k != "tls"}}}
        )
    )
    closed = datetime.fromtimestamp(minute - 60, timezone.utc).strftime("%Y-%m-%d-%H:%M")
    refused = subprocess.run(
        [DAGSTER, "asset", "materialize", "-m", "rocketlake.definitions", "--select", table, "--partition", closed],
        cwd=ROOT,
        env=dict(env, ROCKETLAKE_CONFIG=str(plain)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    refusal = refused.stdout + refused.stderr
    assert refused.returncode != 0, refusal[-3000:]
    assert f"cluster 'test' ({spec.namesrv_address}) turned this run away" in refusal, refusal[-3000:]
    assert "configure tls for this cluster" in refusal
    assert "STEP_UP_FOR_RETRY" not in refusal and "STEP_RESTARTED" not in refusal, refusal[-3000:]
    assert local_s3.filesystem().get_file_info(lake.table_path(table)[len("s3a://") :]).type == fs.FileType.NotFound

    wait_until(minute + 60 + 3)  # closed: its end plus the grace of 2 s
    run = subprocess.run(
        [DAGSTER, "asset", "materialize", "-m", "rocketlake.definitions", "--select", table, "--partition", window],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-4000:]

    poison = {s.msg_id for s, i in zip(sent, range(9)) if i % 3 == 0}
    path = lake.table_path(table)
    rows = DeltaTable(path, storage_options=delta_rs_options(lake)).to_pyarrow_table(columns=["msg_id"]).to_pylist()
    assert sorted(r["msg_id"] for r in rows) == sorted(s.msg_id for s in sent if s.msg_id not in poison)
    # Committed after the landing, as the Java admin API (signed, over TLS) reports them.
    [stats] = peers.admin(
        spec.namesrv_address,
        spec.state_dir,
        [{"op": "consumeStats", "group": group, "topic": topic}],
        version=spec.version,
    )
    assert stats["ok"], stats
    ends: dict = {}
    for s in sent:
        ends[(s.broker_name, s.queue_id)] = max(ends.get((s.broker_name, s.queue_id), 0), s.queue_offset + 1)
    assert {
        (r["broker"], r["queue_id"]): r["consumer_offset"]
        for r in stats["value"]
        if (r["broker"], r["queue_id"]) in ends
    } == ends
    # Sent back through TLS and ACL: the broker dead-lettered each poison message (max_reconsume_times 0).
    dlq = [
        m
        for mq in client.queues(f"%DLQ%{group}")
        for m in client.pull(mq, client.get_min_offset(mq), 32, consumer_group=group).messages
    ]
    assert sorted(m.msg_id for m in dlq) == sorted(poison)  # their UNIQ_KEY, kept through the send-back

    # The sensors a daemon would tick (lag, retry backlog), through TLS and signed: their observations are read too.
    from dagster import build_sensor_context

    from rocketlake.dagster.definitions import build_definitions
    from rocketlake.dagster.rocketmq_resource import RocketMQResource
    from rocketlake.engine.config import load_config

    for key, value in ACL_ENV.items():
        monkeypatch.setenv(key, value)
    defs = build_definitions(load_config(config))
    resource = RocketMQResource(
        namesrv=spec.namesrv_address,
        cluster="test",
        access_key_env="ROCKETLAKE_TEST_ACL_AK",
        secret_key_env="ROCKETLAKE_TEST_ACL_SK",
        tls=True,
        tls_ca_file=str(spec.tls_dir / "ca.pem"),
    )
    observations = []
    with DagsterInstance.from_config(str(home)) as instance:
        for name in ("lag", "retry_backlog"):
            sensor = defs.get_sensor_def(f"rocketlake_test_{name}")  # one a cluster
            result = sensor.evaluate_tick(
                build_sensor_context(
                    instance=instance, definitions=defs, resources={"rocketmq_test": resource}, sensor_name=sensor.name
                )
            )
            observations += result.asset_events
    assert observations and all(o.metadata for o in observations)

    # Nothing a person or a log shipper reads holds the ACL secret, the S3 secret or a request signature.
    secrets = [SECRET_KEY, os.environ[lake.s3.secret_key_env]]
    readable = {
        "the CLI's output": output,
        "the refused run's output": refusal,
        "the sensors' observations": repr(observations),
    }
    with DagsterInstance.from_config(str(home)) as instance:
        for dagster_run in instance.get_runs():
            readable[f"run {dagster_run.run_id}'s event log"] = repr(instance.all_logs(dagster_run.run_id))
        materialization = instance.get_latest_materialization_event(AssetKey(table))
        assert materialization is not None
        readable["the asset's metadata"] = repr(materialization.asset_materialization.metadata)
    # The Spark server: its event log (every session it ran), its log and its processes' command lines (`ps`).
    for p in secure_spark_connect.events.rglob("*"):
        assert p.stat().st_size <= 64 * 1024 * 1024, f"{p} holds {p.stat().st_size} bytes"
    server = secure_spark_connect.readable()
    assert any("BatchScan rocketmq" in text for where, text in server.items() if "event log" in where)  # reads' plans
    assert any("s3a://lake/" in text for where, text in server.items() if "event log" in where)  # and writes'
    readable |= server
    filesystem = local_s3.filesystem()
    for info in filesystem.get_file_info(fs.FileSelector(path[len("s3a://") :], recursive=True)):
        if info.type == fs.FileType.File and "/_delta_log/" in info.path:
            with filesystem.open_input_stream(info.path) as stream:
                readable[info.path] = stream.read().decode("utf-8", "replace")
    # The scan read the table's commits (the ledger is in them): a path that matched nothing would pass it vacuously.
    assert any(where.endswith(".json") and "/_delta_log/" in where for where in readable), sorted(readable)
    # Every file of the Dagster instance too: its run and event storage, the runs' captured logs.
    for p in home.rglob("*"):
        if p.is_file():
            assert p.stat().st_size <= 64 * 1024 * 1024, f"{p} holds {p.stat().st_size} bytes"
            readable[f"Dagster's {p.relative_to(home)}"] = p.read_bytes().decode("utf-8", "replace")
    for where, text in readable.items():
        for secret in secrets:
            assert secret not in text, f"a secret is in {where}"
        assert not SIGNATURE_FIELD.search(text), f"a request signature is in {where}"


def test_the_cli_refuses_a_secure_cluster_it_is_not_configured_for_in_one_sentence(
    acl_cluster: AclCluster, tmp_path: Path
) -> None:
    """`rocketlake offsets show` (no Spark, no Dagster: what an operator types first) with the TLS block missing, then
    with the ACL variables unset, then unsigned, then with both: refusals that name the cluster and the key, then the
    table; and `rocketlake member` ends at a refusal instead of beating again forever."""
    from tests.integration.ingestion_support import unique, write_config

    spec = acl_cluster.cluster.spec
    config = write_config(
        tmp_path / "rocketlake.yaml",
        acl_cluster.cluster,
        tmp_path / "lake",
        {"orders": {"topic": acl_cluster.topic, "consumer_group": unique("g"), "table": unique("t")}},
    )
    body = yaml.safe_load(config.read_text())

    def configure(cluster: dict) -> None:
        body["clusters"]["test"] = {"namesrv": spec.namesrv_address, **cluster}
        config.write_text(yaml.safe_dump(body))

    def offsets_show(cluster: dict, env: dict) -> subprocess.CompletedProcess:
        configure(cluster)
        return subprocess.run(
            [sys.executable, "-m", "rocketlake.cli.main", "offsets", "show", "orders", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=tmp_path,
        )

    keys = {"access_key_env": "ROCKETLAKE_TEST_ACL_AK", "secret_key_env": "ROCKETLAKE_TEST_ACL_SK"}
    tls = {"tls": {"ca_file": str(spec.tls_dir / "ca.pem")}}
    without_tls = offsets_show(keys, dict(os.environ, **ACL_ENV))
    assert without_tls.returncode == 2, without_tls.stdout + without_tls.stderr
    assert "cluster 'test'" in without_tls.stderr and "configure tls" in without_tls.stderr, without_tls.stderr
    without_keys = offsets_show({**keys, **tls}, {k: v for k, v in os.environ.items() if k not in ACL_ENV})
    assert without_keys.returncode == 2
    # The sentence a run says too: the CLI builds its client as the definitions do (RocketMQResource.of_cluster).
    assert (
        "cluster 'test' signs its requests (ACL): set the environment variables ROCKETLAKE_TEST_ACL_AK and "
        "ROCKETLAKE_TEST_ACL_SK" in without_keys.stderr
    ), without_keys.stderr
    unsigned = offsets_show(tls, dict(os.environ))
    assert unsigned.returncode == 2 and "cluster 'test'" in unsigned.stderr and "access_key_env" in unsigned.stderr, (
        unsigned.stderr
    )
    # A member (`rocketlake member`, heartbeats until stopped) does not beat again and again at a refusal: it ends.
    configure(keys)  # no tls
    began = time.monotonic()
    member = subprocess.run(
        [sys.executable, "-m", "rocketlake.cli.main", "member", "orders", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, **ACL_ENV),
        cwd=tmp_path,
    )
    assert member.returncode == 2 and "cluster 'test'" in member.stderr and "turned the member away" in member.stderr, (
        member.stdout + member.stderr
    )
    assert time.monotonic() - began < 60
    both = offsets_show({**keys, **tls}, dict(os.environ, **ACL_ENV))
    assert both.returncode == 0, both.stderr
    assert f"{acl_cluster.topic}" in both.stdout
    for result in (without_tls, without_keys, unsigned, member, both):
        assert SECRET_KEY not in result.stdout + result.stderr and "Traceback" not in result.stderr
