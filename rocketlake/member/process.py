"""A member of an ingestion's consumer group, as a long-lived process: ``rocketlake member INGESTION``.

A Java push consumer is a member of its group while it heartbeats (HEART_BEAT every 30 s to every
broker of its topics); the brokers' consumer list (GET_CONSUMER_LIST_BY_GROUP) is the membership,
and ``mqadmin consumerConnection`` shows it. rocketlake's runs are short, so a deployment that wants
to be seen as a member runs this process beside its code location: it announces the ingestion's
consumer data under the deployment's client id (``ip@instance_name``, the id its runs lock queues
with), prints the membership whenever it changes, and unregisters from every broker when stopped
(SIGTERM or Ctrl-C). A member that dies without unregistering leaves the list when the broker
notices its closed connection, or after the broker's channel expiry (120 s without a heartbeat).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from rocketlake.engine import identity
from rocketlake.engine.config import IngestionConfig, MessageModel
from rocketlake.engine.topics import subscribed_topics
from rocketlake.member import requests as member_requests
from rocketlake.member import status as member_status
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.client_requests import decode_reset_offset_body
from rocketlake.rocketmq.codes import CURRENT_VERSION, RequestCode, ResponseCode
from rocketlake.rocketmq.connection import handle_server_requests
from rocketlake.rocketmq.errors import ClosedBeforeAnswer, RocketMQError, is_refusal
from rocketlake.rocketmq.frame import RemotingCommand
from rocketlake.rocketmq.heartbeat import ConsumerData, ConsumeType
from rocketlake.rocketmq.message import retry_topic

HEARTBEAT_S = 30.0  # ClientConfig.heartbeatBrokerInterval


def consumer_data(cfg: IngestionConfig, topics: list[str] | None = None) -> ConsumerData:
    """What a push consumer of this ingestion announces: its topics (``topics``: those a pattern matches now), and
    its retry topic in CLUSTERING."""
    subscriptions = {topic: cfg.subscription for topic in (topics if topics is not None else cfg.topic_names)}
    if cfg.message_model is MessageModel.CLUSTERING:
        subscriptions[retry_topic(cfg.consumer_group)] = "*"  # as DefaultMQPushConsumerImpl.copySubscription
    return ConsumerData.of(
        cfg.consumer_group,
        subscriptions,
        message_model=cfg.message_model,
        consume_type=ConsumeType.CONSUME_PASSIVELY,
        consume_from_where=cfg.consume_from_where,
    )


#: The members of this process by group: whom the brokers' requests to clients for that group go to.
_members: dict[str, Member] = {}
#: What this process answers when a broker asks (``mqadmin consumerStatus``, ``resetOffsetByTime``, ``queryMsgById``).
_HANDLED = (
    RequestCode.GET_CONSUMER_RUNNING_INFO,
    RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
    RequestCode.CONSUME_MESSAGE_DIRECTLY,
)


def _answer(request: RemotingCommand, address: str) -> RemotingCommand | None:
    if request.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:  # oneway: nothing is answered
        member = _members.get(request.ext_fields.get("group", ""))
        if member is not None:
            member.reset(address, request)
        return None
    group, client_id = request.ext_fields.get("consumerGroup", ""), request.ext_fields.get("clientId")
    member = _members.get(group)
    if member is None or (client_id is not None and client_id != member.client_id):
        return request.make_response(
            ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{group}> not exist in this consumer"
        )
    if request.code == RequestCode.CONSUME_MESSAGE_DIRECTLY:
        return replace(request.make_response(ResponseCode.SUCCESS), body=member.consume_directly(request))
    return replace(request.make_response(ResponseCode.SUCCESS), body=member.running_info())


def client_version() -> str:
    """What ``PROP_CLIENT_VERSION`` reports: rocketlake's release and the remoting protocol version it speaks."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("rocketlake")
    except PackageNotFoundError:
        release = "unknown"
    return f"rocketlake {release} (protocol {CURRENT_VERSION})"


class Member:
    """Heartbeats for one ingestion until ``stop`` is set, then unregisters; while it runs, answers the brokers'
    requests to clients for its group: GET_CONSUMER_RUNNING_INFO (``member.status``), RESET_CONSUMER_CLIENT_OFFSET
    and CONSUME_MESSAGE_DIRECTLY (``member.requests``).

    ``landed``: the end offset of what the table's ledger holds, per queue (for the running info).
    ``in_flight``: the ids of the group's runs in flight (a reset waits for none).
    ``rates``: the ingestion's recent rates (``member.status.consume_status``; None: reported as 0)."""

    def __init__(
        self,
        client: RocketMQClient,
        cfg: IngestionConfig,
        log: Callable[[str], None] = print,
        every_s: float = HEARTBEAT_S,
        landed: Callable[[], dict] | None = None,
        in_flight: Callable[[], set[str]] | None = None,
        rates: Callable[[], member_status.ConsumeStatus | None] | None = None,
    ):
        self.client, self.cfg, self.log, self.every_s = client, cfg, log, every_s
        self.client_id = identity.client_id(cfg)
        self.landed = landed or dict
        self.in_flight = in_flight or set
        self.rates = rates or (lambda: None)
        # Requests come on each broker's connection thread. Resets are taken one at a time (Java's
        # MQClientInstance.resetOffset is synchronized): mqadmin has every broker send one at once, and each plans
        # on what the one before committed.
        self._one_at_a_time = threading.Lock()
        self.started_ms = member_status.now_ms()
        self.last_reset: member_requests.ResetOutcome | None = None
        self.brokers: list[str] | None = None  # the last heartbeat's: they hear the goodbye (None: every broker)

    def running_info(self) -> bytes:
        """What ``mqadmin consumerStatus`` shows of this member now: its share of the queues (as its runs compute
        it), the group's committed offset of each, the ledger's landed end, and what became of the last reset."""
        from rocketlake.engine.broker_access import group_broker

        cfg = self.cfg
        broker = group_broker(self.client, cfg)
        held = {mq: broker.committed_offset(mq) for mq in self._share(broker)}
        extra = {} if self.last_reset is None else {member_status.LAST_RESET: self.last_reset.summary()}
        try:
            rates = self.rates()
        except Exception as e:  # the runs' figures are Dagster's: without them the rest is still worth answering
            self.log(f"the running info reports no rates: reading the runs failed: {type(e).__name__}: {e}")
            rates = None
        return member_status.running_info(
            cfg,
            subscribed_topics(cfg, self.client),
            held,
            self.landed(),
            self.client.namesrv_address,
            self.started_ms,
            client_version(),
            extra,
            rates,
        )

    def _share(self, broker) -> list:
        """The queues that are this member's share now, as its runs compute it."""
        from rocketlake.engine.assignment import member_share, membership

        cfg = self.cfg
        members = membership(self.client, cfg) if cfg.message_model is MessageModel.CLUSTERING else []
        return list(member_share(cfg, broker.subscribed_queues(), members).taken)

    def reset(self, address: str, request: RemotingCommand) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET from the broker at ``address``: the queues of the table that are this
        member's share (as a Java client resets those it holds), through ``offsets reset``'s rules. mqadmin has each
        broker send its own table: the verdict is per broker."""
        timestamp = int(request.ext_fields.get("timestamp", "-1"))
        with self._one_at_a_time:
            self._reset(address, timestamp, request.body)

    def _reset(self, address: str, timestamp: int, body: bytes | None) -> None:
        from rocketlake.engine.broker_access import group_broker

        try:
            broker = group_broker(self.client, self.cfg)
            share = set(self._share(broker))
            targets = {mq: offset for mq, offset in decode_reset_offset_body(body).items() if mq in share}
            outcome = member_requests.reset_offsets(
                broker, targets, set(subscribed_topics(self.cfg, self.client)), timestamp, self.in_flight
            )
        except Exception as e:  # oneway: no one to answer; the operator reads the log and consumerStatus
            outcome = member_requests.ResetOutcome(timestamp, refused=f"{type(e).__name__}: {e}")
        self.last_reset = outcome
        self.log(f"offset reset asked by broker {address} for group {self.cfg.consumer_group}: {outcome.summary()}")

    def consume_directly(self, request: RemotingCommand) -> bytes:
        """CONSUME_MESSAGE_DIRECTLY: the listener's verdict on the message; nothing lands, no offset moves."""
        fields = request.ext_fields
        result = member_requests.consume_directly(self.cfg, request.body or b"", fields.get("brokerName", ""))
        self.log(
            f"direct consume of message {fields.get('msgId')} (asked through broker "
            f"{fields.get('brokerName')}): {result}"
        )
        return result.encode()

    def beat(self) -> list[str]:
        """One heartbeat to the topics' brokers; the group's members as the brokers now list them. A pattern's
        topics are matched again at every beat, so a topic created later is subscribed to from then on."""
        topics = subscribed_topics(self.cfg, self.client)
        self.brokers = sorted(self.client.heart_beat(self.client_id, [consumer_data(self.cfg, topics)]))
        return sorted(self.client.get_consumer_list_by_group(self.cfg.consumer_group, topics[0]))

    def run(self, stop: threading.Event) -> None:
        _members[self.cfg.consumer_group] = self
        for code in _HANDLED:
            handle_server_requests(code, _answer)
        try:
            self._beat_until(stop)
        finally:
            _members.pop(self.cfg.consumer_group, None)
            if not _members:
                for code in _HANDLED:
                    handle_server_requests(code, None)

    def _beat_until(self, stop: threading.Event) -> None:
        group = self.cfg.consumer_group
        self.log(
            f"member {self.client_id} of group {group} ({self.cfg.topic_label}): heartbeat every "
            f"{self.every_s:.0f}s; stop with SIGTERM or Ctrl-C"
        )
        members: list[str] | None = None
        while True:
            try:
                now = self.beat()
            except RocketMQError as e:  # a broker restarting must not end the membership: beat again later
                # ... but a cluster that turns us away (TLS, ACL) will not change its mind, and a first heartbeat
                # whose connection closes before any answer is what an enforcing TLS server does to a plain client.
                if is_refusal(e) or (members is None and isinstance(e, ClosedBeforeAnswer)):
                    raise
                self.log(f"heartbeat failed ({e}); trying again in {self.every_s:.0f}s")
            else:
                if now != members:
                    self.log(f"members of group {group}: {', '.join(now) or 'none'}")
                    members = now
            if stop.wait(self.every_s):
                break
        try:
            self.client.unregister_client(self.client_id, consumer_group=group, brokers=self.brokers)
            self.log(f"member {self.client_id} left group {group} (unregistered from every broker)")
        except RocketMQError as e:
            self.log(f"could not unregister ({e}); the brokers drop this member when its connection closes")
