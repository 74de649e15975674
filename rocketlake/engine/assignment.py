"""Which queues this member takes: the group's membership on the brokers, divided by the configured strategy.

A CLUSTERING member of a push consumer group rebalances each subscribed topic on its own
(``RebalanceImpl.rebalanceByTopic``): the topic's queues and the group's client ids, both sorted, go
through the allocation strategy. rocketlake does the same for the topic and the group's retry topic,
with the membership the brokers report (GET_CONSUMER_LIST_BY_GROUP: ``rocketlake member`` processes,
Java consumers, anyone heartbeating in the group). Pure but for ``membership``, which asks the broker.

A deployment that runs no member process is not on the list. When nobody is, it is the group's only
member and takes every queue (one deployment needs no member process); when others are, it takes
nothing and says why: taking queues the others already divided among themselves would land them twice
in the offsets' eyes, and dividing them with itself included would disagree with every other member.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace

from rocketlake.engine import identity
from rocketlake.engine.allocation import PrefixMachineRoomResolver, Strategy, make_strategy, rebalance
from rocketlake.engine.config import AllocateStrategy, IngestionConfig, MessageModel
from rocketlake.engine.topics import membership_topic_of
from rocketlake.rocketmq.message_queue import MessageQueue


@dataclass(frozen=True)
class Assignment:
    """One member's share of its group's queues, and what it was computed from."""

    client_id: str
    strategy: str
    members: tuple[str, ...]  # as the brokers listed them (sorted); empty: nobody heartbeats
    queues: tuple[MessageQueue, ...]  # every queue of the subscription (sorted)
    taken: tuple[MessageQueue, ...]  # this member's (sorted)
    why_none: str = ""  # when ``taken`` is empty: why, in one line
    topic: str = ""  # the subscribed topic (the others are its retry topic)

    @property
    def key(self) -> str:
        """Changes exactly when the assignment or what it was computed from changes (a sensor's cursor)."""
        return "|".join(
            [
                self.strategy,
                ",".join(self.members),
                ",".join(q.key for q in self.queues),
                ",".join(q.key for q in self.taken),
            ]
        )

    def describe(self) -> str:
        members = ", ".join(self.members) or f"none listed, so {self.client_id} alone"
        if not self.taken:
            return f"member {self.client_id} takes no queue: {self.why_none} (members: {members})"
        text = (
            f"member {self.client_id} takes {len(self.taken)} of {len(self.queues)} queues under "
            f"{self.strategy} (members: {members}): {', '.join(q.key for q in self.taken)}"
        )
        of_topic = [q for q in self.queues if q.topic == self.topic]
        if of_topic and not any(q.topic == self.topic for q in self.taken):
            text += f"; it idles on topic {self.topic}: none of its {len(of_topic)} queue(s) is its share"
        return text


def _load(path: str):
    module, _, attr = path.partition(":")
    target = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    return target() if isinstance(target, type) else target


def _configured_queues(cfg: IngestionConfig) -> list[MessageQueue]:
    queues = []
    for item in cfg.allocate_message_queue_list or []:
        parts = item.split("/")
        topic = parts[0] if len(parts) == 3 else cfg.topic  # one topic: config validated the rest
        queues.append(MessageQueue(topic, parts[-2], int(parts[-1])))
    return queues


def strategy_of(cfg: IngestionConfig) -> Strategy:
    """The configured strategy with what it needs (``make_strategy``)."""
    resolver = _load(cfg.machine_room_resolver) if cfg.machine_room_resolver else PrefixMachineRoomResolver()
    return make_strategy(
        cfg.allocate_message_queue_strategy,
        queues=_configured_queues(cfg),
        consumer_rooms=cfg.consumer_machine_rooms or [],
        resolver=resolver,
        inner=cfg.machine_room_nearby_strategy,
        virtual_node_count=cfg.virtual_node_count,
    )


def assign(cfg: IngestionConfig, client_id: str, queues: Iterable[MessageQueue], members: Iterable[str]) -> Assignment:
    """This member's queues, topic by topic, as the push consumer's rebalance computes them."""
    queues = tuple(sorted(set(queues)))
    members = tuple(sorted(set(members)))
    if cfg.message_model is MessageModel.BROADCASTING:
        return Assignment(client_id, "BROADCASTING", members, queues, queues, topic=cfg.topic)
    name = cfg.allocate_message_queue_strategy.value
    if members and client_id not in members:
        return Assignment(
            client_id,
            name,
            members,
            queues,
            (),
            why_none=(
                f"the group has members on the brokers and {client_id} is not one of them; start "
                f"`rocketlake member` for this deployment (or give it the client id of a running one)"
            ),
            topic=cfg.topic,
        )
    cids = members or (client_id,)
    strategy = strategy_of(cfg)
    taken: set[MessageQueue] = set()
    for topic in sorted({q.topic for q in queues}):
        of_topic = [q for q in queues if q.topic == topic]
        chosen = rebalance(strategy, cfg.consumer_group, client_id, of_topic, cids)
        if cfg.allocate_message_queue_strategy is AllocateStrategy.CONFIG:
            chosen = chosen & set(of_topic)  # the configured list names queues of every topic at once
        taken |= chosen
    why = "" if taken else f"{name} gives it none of {len(queues)} queue(s) among {len(cids)} member(s)"
    return Assignment(client_id, name, members, queues, tuple(sorted(taken)), why_none=why, topic=cfg.topic)


def membership(client, cfg: IngestionConfig) -> list[str]:
    """The group's client ids as a broker of the topic lists them (one broker, as the Java client asks)."""
    return list(client.get_consumer_list_by_group(cfg.consumer_group, membership_topic_of(cfg, client)))


def member_share(
    cfg: IngestionConfig,
    queues: Iterable[MessageQueue],
    members: Iterable[str],
    only: Collection[MessageQueue] | None = None,
) -> Assignment:
    """This member's queues now (the membership the brokers list, divided by the strategy), narrowed to
    ``only`` (the queues a rebalance sensor asked a run for) when given."""
    members = members if cfg.message_model is MessageModel.CLUSTERING else []
    share = assign(cfg, identity.client_id(cfg), queues, members)
    if only is None:
        return share
    asked = set(only)
    return replace(share, taken=tuple(q for q in share.taken if q in asked))


def owners(cfg: IngestionConfig, queues: Iterable[MessageQueue], members: Iterable[str]) -> dict[MessageQueue, str]:
    """Queue -> the member that takes it now (every member's share, as each computes it)."""
    queues, members = list(queues), sorted(set(members))
    if cfg.message_model is MessageModel.BROADCASTING:
        return {q: "every member" for q in queues}
    if not members:
        return {q: "none (the next run of any deployment takes it)" for q in queues}
    owned: dict[MessageQueue, str] = {}
    for member in members:
        for q in assign(cfg, member, queues, members).taken:
            owned[q] = f"{owned[q]}, {member}" if q in owned else member
    return owned
