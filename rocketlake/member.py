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

from rocketlake.pipelines.config import IngestionConfig, MessageModel
from rocketlake.resources.rocketmq.client import RocketMQClient
from rocketlake.resources.rocketmq.errors import ClosedBeforeAnswer, RocketMQError, is_refusal
from rocketlake.resources.rocketmq.heartbeat import ConsumerData, ConsumeType
from rocketlake.resources.rocketmq.message import retry_topic

HEARTBEAT_S = 30.0  # ClientConfig.heartbeatBrokerInterval


def consumer_data(cfg: IngestionConfig, topics: list[str] | None = None) -> ConsumerData:
    """What a push consumer of this ingestion announces: its topics (``topics``: those a pattern matches now), and
    its retry topic in CLUSTERING."""
    subscriptions = {topic: cfg.subscription for topic in (topics if topics is not None else cfg.topic_names)}
    if cfg.message_model is MessageModel.CLUSTERING:
        subscriptions[retry_topic(cfg.consumer_group)] = "*"  # as DefaultMQPushConsumerImpl.copySubscription
    return ConsumerData.of(cfg.consumer_group, subscriptions, message_model=cfg.message_model,
                           consume_type=ConsumeType.CONSUME_PASSIVELY, consume_from_where=cfg.consume_from_where)


class Member:
    """Heartbeats for one ingestion until ``stop`` is set, then unregisters."""

    def __init__(self, client: RocketMQClient, cfg: IngestionConfig, log: Callable[[str], None] = print,
                 every_s: float = HEARTBEAT_S):
        self.client, self.cfg, self.log, self.every_s = client, cfg, log, every_s
        self.client_id = cfg.client_id

    def beat(self) -> list[str]:
        """One heartbeat to the topics' brokers; the group's members as the brokers now list them. A pattern's
        topics are matched again at every beat, so a topic created later is subscribed to from then on."""
        topics = self.cfg.subscribed_topics(self.client)
        self.client.heart_beat(self.client_id, [consumer_data(self.cfg, topics)])
        return sorted(self.client.get_consumer_list_by_group(self.cfg.consumer_group, topics[0]))

    def run(self, stop: threading.Event) -> None:
        group = self.cfg.consumer_group
        self.log(f"member {self.client_id} of group {group} ({self.cfg.topic_label}): heartbeat every "
                 f"{self.every_s:.0f}s; stop with SIGTERM or Ctrl-C")
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
            self.client.unregister_client(self.client_id, consumer_group=group)
            self.log(f"member {self.client_id} left group {group} (unregistered from every broker)")
        except RocketMQError as e:
            self.log(f"could not unregister ({e}); the brokers drop this member when its connection closes")
