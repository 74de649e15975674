"""Queue allocation: which queues of a topic one consumer member takes (pure, no I/O).

Ports of RocketMQ's ``AllocateMessageQueueStrategy`` implementations
(``client/.../consumer/rebalance/*.java`` and ``common/.../consistenthash/ConsistentHashRouter.java``,
identical in 4.9.8 and 5.3.3 apart from the MD5 charset noted below), line for line, including
their edge cases. ``tests/integration/test_allocation_vs_java.py`` proves them equal to the Java
classes on hundreds of random cases.

Every strategy has the Java signature ``allocate(consumer_group, current_cid, mq_all, cid_all)``
and takes the lists *as given*; ``RebalanceImpl.rebalanceByTopic`` sorts both before calling it,
which :func:`sort_for_rebalance` reproduces, and turns the answer into a set, which
:func:`rebalance` reproduces.

Java behaviours kept on purpose:

- the common check (``AbstractAllocateMessageQueueStrategy#check``): an empty current id, queue
  list or member list raises (:class:`AllocationError`, Java's ``IllegalArgumentException``); a
  current id not among the members gets nothing (logged; Java logs ``[BUG]`` at info);
- ``CONFIG`` returns its configured list whatever the inputs (no check at all);
- ``MACHINE_ROOM`` keeps queues whose broker name ``split("@")`` (Java's split: trailing empty
  parts dropped) has exactly two parts, the first among the consumer rooms; member *i* takes
  ``mod = n // c`` queues from ``mod * i`` and, if ``rem > i``, the queue at ``i + mod * c``;
- ``MACHINE_ROOM_NEARBY`` groups queues and members by room (sorted by room), gives each member
  the inner strategy's share of its own room's queues among its room's members, plus its share
  (among *all* members) of every room that has no member;
- ``CONSISTENT_HASH`` builds a ring of ``virtual_node_count`` nodes per member keyed
  ``"<cid>-<i>"`` (a later colliding hash overwrites), hashes ``MessageQueue#toString`` and takes
  the first node at or after it, wrapping around; with 0 virtual nodes nobody gets anything.
  The default hash is the first 4 bytes of the UTF-8 MD5 digest, big-endian, unsigned
  (4.9.x used the platform charset: equal for ASCII names).
"""

from __future__ import annotations

import hashlib
import logging
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from rocketlake.engine.config import AllocateStrategy
from rocketlake.rocketmq.message_queue import MessageQueue

__all__ = [
    "AllocationError",
    "Strategy",
    "MachineRoomResolver",
    "PrefixMachineRoomResolver",
    "Averagely",
    "AveragelyByCircle",
    "ByConfig",
    "ByMachineRoom",
    "MachineRoomNearby",
    "ConsistentHash",
    "make_strategy",
    "sort_for_rebalance",
    "rebalance",
    "java_string_key",
    "java_split",
    "md5_hash",
]

log = logging.getLogger(__name__)


class AllocationError(ValueError):
    """What Java raises as ``IllegalArgumentException`` (RebalanceImpl logs it and skips the topic)."""


def java_string_key(text: str) -> bytes:
    """A sort key equal to Java's ``String.compareTo`` (UTF-16 code units, then length)."""
    return text.encode("utf-16-be", "surrogatepass")


def _queue_key(mq: MessageQueue) -> tuple[bytes, bytes, int]:
    return (java_string_key(mq.topic), java_string_key(mq.broker_name), mq.queue_id)


def sort_for_rebalance(mq_all: Iterable[MessageQueue], cid_all: Iterable[str]) -> tuple[list[MessageQueue], list[str]]:
    """``Collections.sort(mqAll); Collections.sort(cidAll)`` as ``RebalanceImpl.rebalanceByTopic`` does."""
    return sorted(mq_all, key=_queue_key), sorted(cid_all, key=java_string_key)


def java_split(text: str, sep: str) -> list[str]:
    """Java's ``String.split`` with a literal one-character separator: trailing empty parts dropped.

    ``"a@b@".split("@")`` is ``[a, b]``, ``"@".split("@")`` is ``[]``, ``"".split("@")`` is ``[""]``.
    """
    parts = text.split(sep)
    if len(parts) == 1:
        return parts  # no match: the whole string, even when empty
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def md5_hash(key: str) -> int:
    """``ConsistentHashRouter.MD5Hash``: first 4 MD5 bytes of the UTF-8 key, big-endian, unsigned."""
    # Java's getBytes(UTF_8) writes '?' for a lone surrogate; "replace" does the same.
    return int.from_bytes(hashlib.md5(key.encode("utf-8", "replace")).digest()[:4], "big")


class Strategy(Protocol):
    name: str

    def allocate(
        self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]: ...


def _check(
    consumer_group: str, current_cid: str | None, mq_all: Sequence[MessageQueue] | None, cid_all: Sequence[str] | None
) -> bool:
    """``AbstractAllocateMessageQueueStrategy#check``."""
    if not current_cid:
        raise AllocationError("currentCID is empty")
    if not mq_all:
        raise AllocationError("mqAll is null or mqAll empty")
    if not cid_all:
        raise AllocationError("cidAll is null or cidAll empty")
    if current_cid not in cid_all:
        log.warning(
            "consumer group %s: the consumer id %s is not among the members %s; it takes no queue",
            consumer_group,
            current_cid,
            list(cid_all),
        )
        return False
    return True


class Averagely:
    """``AllocateMessageQueueAveragely`` (AVG, the default): contiguous blocks, the first ``n % c`` one longer."""

    name = AllocateStrategy.AVG.value

    def allocate(self, consumer_group, current_cid, mq_all, cid_all):
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        n, c = len(mq_all), len(cid_all)
        index = list(cid_all).index(current_cid)
        mod = n % c
        if n <= c:
            average = 1
        else:
            average = n // c + 1 if (mod > 0 and index < mod) else n // c
        start = index * average if (mod > 0 and index < mod) else index * average + mod
        count = min(average, n - start)
        return [mq_all[start + i] for i in range(count)]


class AveragelyByCircle:
    """``AllocateMessageQueueAveragelyByCircle`` (AVG_BY_CIRCLE): round robin."""

    name = AllocateStrategy.AVG_BY_CIRCLE.value

    def allocate(self, consumer_group, current_cid, mq_all, cid_all):
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        index = list(cid_all).index(current_cid)
        c = len(cid_all)
        return [mq_all[i] for i in range(index, len(mq_all)) if i % c == index]


class ByConfig:
    """``AllocateMessageQueueByConfig`` (CONFIG): the configured list, verbatim, for every member."""

    name = AllocateStrategy.CONFIG.value

    def __init__(self, queues: Iterable[MessageQueue]):
        self.queues = list(queues)

    def allocate(self, consumer_group, current_cid, mq_all, cid_all):
        return list(self.queues)


class ByMachineRoom:
    """``AllocateMessageQueueByMachineRoom`` (MACHINE_ROOM): queues of brokers ``room@name`` in the consumer rooms."""

    name = AllocateStrategy.MACHINE_ROOM.value

    def __init__(self, consumer_rooms: Iterable[str]):
        self.consumer_rooms = frozenset(consumer_rooms)

    def allocate(self, consumer_group, current_cid, mq_all, cid_all):
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        current = list(cid_all).index(current_cid)
        pre = []
        for mq in mq_all:
            parts = java_split(mq.broker_name, "@")
            if len(parts) == 2 and parts[0] in self.consumer_rooms:
                pre.append(mq)
        c = len(cid_all)
        mod, rem = len(pre) // c, len(pre) % c
        result = pre[mod * current : mod * current + mod]
        if rem > current:
            result.append(pre[current + mod * c])
        return result


class MachineRoomResolver(Protocol):
    """Where a broker's queue and a client are deployed (``AllocateMachineRoomNearby.MachineRoomResolver``)."""

    def broker_deploy_in(self, mq: MessageQueue) -> str: ...

    def consumer_deploy_in(self, client_id: str) -> str: ...


class PrefixMachineRoomResolver:
    """The room is the text before the first ``@``: broker ``room@name``, client id ``room@ip@instance``.

    A name without ``@`` is its own room. This rule is the one the Java peer (AllocatePeer) uses.
    """

    @staticmethod
    def room(name: str) -> str:
        return name.split("@", 1)[0]

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        return self.room(mq.broker_name)

    def consumer_deploy_in(self, client_id: str) -> str:
        return self.room(client_id)


class MachineRoomNearby:
    """``AllocateMachineRoomNearby`` (MACHINE_ROOM_NEARBY): an inner strategy applied room by room."""

    def __init__(self, inner: Strategy, resolver: MachineRoomResolver):
        if inner is None:
            raise AllocationError("allocateMessageQueueStrategy is null")
        if resolver is None:
            raise AllocationError("machineRoomResolver is null")
        self.inner = inner
        self.resolver = resolver
        self.name = f"{AllocateStrategy.MACHINE_ROOM_NEARBY.value}-{inner.name}"

    def allocate(self, consumer_group, current_cid, mq_all, cid_all):
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        room_queues: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            room = self.resolver.broker_deploy_in(mq)
            if not room:
                raise AllocationError(f"Machine room is null for mq {mq}")
            room_queues.setdefault(room, []).append(mq)
        room_members: dict[str, list[str]] = {}
        for cid in cid_all:
            room = self.resolver.consumer_deploy_in(cid)
            if not room:
                raise AllocationError(f"Machine room is null for consumer id {cid}")
            room_members.setdefault(room, []).append(cid)

        result: list[MessageQueue] = []
        my_room = self.resolver.consumer_deploy_in(current_cid)
        mine = room_queues.pop(my_room, None)
        if mine:
            result += self.inner.allocate(consumer_group, current_cid, mine, room_members.get(my_room))
        for room in sorted(room_queues, key=java_string_key):  # Java's TreeMap order
            if room not in room_members:  # nobody in that room: every member shares its queues
                result += self.inner.allocate(consumer_group, current_cid, room_queues[room], cid_all)
        return result


class ConsistentHash:
    """``AllocateMessageQueueConsistentHash`` (CONSISTENT_HASH) over ``ConsistentHashRouter``."""

    name = AllocateStrategy.CONSISTENT_HASH.value

    def __init__(self, virtual_node_count: int = 10, hash_function: Callable[[str], int] | None = None):
        if virtual_node_count < 0:
            raise AllocationError(f"illegal virtualNodeCnt :{virtual_node_count}")
        self.virtual_node_count = virtual_node_count
        self.hash_function = hash_function or md5_hash

    def ring(self, cid_all: Sequence[str]) -> tuple[list[int], list[str]]:
        """The sorted ring keys and, aligned, the member each belongs to."""
        ring: dict[int, str] = {}
        for cid in cid_all:
            existing = sum(1 for owner in ring.values() if owner == cid)  # getExistingReplicas
            for i in range(self.virtual_node_count):
                ring[self.hash_function(f"{cid}-{i + existing}")] = cid  # TreeMap.put: later wins
        keys = sorted(ring)
        return keys, [ring[k] for k in keys]

    def allocate(self, consumer_group, current_cid, mq_all, cid_all):
        if not _check(consumer_group, current_cid, mq_all, cid_all):
            return []
        keys, owners = self.ring(cid_all)
        if not keys:
            return []
        result = []
        for mq in mq_all:
            at = bisect_left(keys, self.hash_function(str(mq)))  # tailMap(hash).firstKey()
            if owners[at if at < len(keys) else 0] == current_cid:
                result.append(mq)
        return result


def make_strategy(
    strategy: AllocateStrategy | str,
    *,
    queues: Iterable[MessageQueue] | None = None,
    consumer_rooms: Iterable[str] | None = None,
    resolver: MachineRoomResolver | None = None,
    inner: AllocateStrategy | str | Strategy = AllocateStrategy.AVG,
    virtual_node_count: int = 10,
) -> Strategy:
    """The strategy a consumer's ``allocate_message_queue_strategy`` names, with what it needs.

    CONFIG needs ``queues``; MACHINE_ROOM needs ``consumer_rooms``; MACHINE_ROOM_NEARBY needs a
    ``resolver`` (``PrefixMachineRoomResolver()`` is the ``room@...`` naming rule) and wraps
    ``inner`` (a strategy object, or a name built with the same keyword arguments; AVG by default);
    CONSISTENT_HASH takes ``virtual_node_count`` (RocketMQ's default 10).
    """
    kind = AllocateStrategy(strategy)
    if kind is AllocateStrategy.AVG:
        return Averagely()
    if kind is AllocateStrategy.AVG_BY_CIRCLE:
        return AveragelyByCircle()
    if kind is AllocateStrategy.CONFIG:
        if queues is None:
            raise AllocationError("the CONFIG allocation strategy needs the list of queues to take")
        return ByConfig(queues)
    if kind is AllocateStrategy.MACHINE_ROOM:
        if consumer_rooms is None:
            raise AllocationError("the MACHINE_ROOM allocation strategy needs the consumer machine rooms")
        return ByMachineRoom(consumer_rooms)
    if kind is AllocateStrategy.CONSISTENT_HASH:
        return ConsistentHash(virtual_node_count)
    if resolver is None:
        raise AllocationError("the MACHINE_ROOM_NEARBY allocation strategy needs a machine room resolver")
    if isinstance(inner, (str, AllocateStrategy)):
        if AllocateStrategy(inner) is AllocateStrategy.MACHINE_ROOM_NEARBY:
            raise AllocationError("MACHINE_ROOM_NEARBY cannot wrap itself; choose another inner strategy")
        inner = make_strategy(
            inner, queues=queues, consumer_rooms=consumer_rooms, virtual_node_count=virtual_node_count
        )
    return MachineRoomNearby(inner, resolver)


def rebalance(
    strategy: Strategy, consumer_group: str, current_cid: str, mq_set: Iterable[MessageQueue], cid_all: Iterable[str]
) -> frozenset[MessageQueue]:
    """One topic's CLUSTERING rebalance as ``RebalanceImpl.rebalanceByTopic``: sort, allocate, make a set.

    Java logs an allocation exception and keeps its old assignment; here it propagates.
    """
    mq_all, cids = sort_for_rebalance(set(mq_set), cid_all)
    return frozenset(strategy.allocate(consumer_group, current_cid, mq_all, cids))
