"""RocketMQ's own admin CLI (``mqadmin``), run from the cached tools jars.

It is the oracle: when our code says a topic has N messages or a group sits at offset X, the
tests ask mqadmin too. mqadmin exits 0 even when its sub-command fails, so the output is checked
for the exception it prints instead. Its ``MQAdminStartup.main0`` runs in the state directory's Java
peer server (peers.py), not in a JVM of its own per call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rocketlake import jars
from rocketlake.local import peers
from rocketlake.local.process import LocalClusterError

MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"


@dataclass(frozen=True)
class QueueStatus:
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class QueueProgress:
    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int


@dataclass(frozen=True)
class SyncStateSet:
    """``getSyncStateSet``: a broker name's master (None while it has none) and its replicas by address, alive or
    not; only a replica in sync can be elected master."""

    master: str | None
    in_sync: dict[str, bool]
    not_in_sync: dict[str, bool]


_REPLICA = re.compile(
    r"^(InSyncReplica|NotInSyncReplica):\s*ReplicaIdentity\{.*brokerAddress='([^']*)', "
    r"alive=(true|false)\}",
    re.MULTILINE,
)


# A sub-command that throws prints the exception's stack trace on stderr and still exits 0.
_FAILURE = re.compile(r"^(Caused by: )?[\w.$]+(Exception|Error)\b", re.MULTILINE)


class MQAdmin:
    def __init__(self, namesrv: str, state_dir: Path, version: str = jars.ROCKETMQ_VERSION):
        self.namesrv = namesrv
        self.state_dir = state_dir
        self.version = version

    def run(self, *args: str, timeout: float = 120.0) -> str:
        """``mqadmin <args> -n <namesrv>``: what it prints on stdout. The peer server runs it with the flags a
        mqadmin JVM of ours had (user.home = the state directory, rocketmq.home.dir = its home/, the tools'
        logback configuration); an exit code is 1 for a bad option (System.exit, trapped there), else 0."""
        code, out, err = peers.server(self.state_dir, self.version).call(
            MAIN, [*args, "-n", self.namesrv], timeout=timeout
        )
        if code != 0 or _FAILURE.search(err):
            raise LocalClusterError(f"mqadmin {' '.join(args)} failed (exit {code}):\n{(out + err).strip()[-3000:]}")
        return out

    def update_topic(
        self, topic: str, broker_address: str, queues: int, attributes: dict[str, str] | None = None
    ) -> None:
        """``attributes``: 5.x topic attributes (``message.type``, ``cleanup.policy``), added with ``-a +k=v``."""
        added = ",".join(f"+{k}={v}" for k, v in (attributes or {}).items())
        self.run(
            "updateTopic",
            "-b",
            broker_address,
            "-t",
            topic,
            "-r",
            str(queues),
            "-w",
            str(queues),
            *(["-a", added] if added else []),
        )

    def topic_status(self, topic: str) -> list[QueueStatus]:
        return parse_topic_status(self.run("topicStatus", "-t", topic))

    def consumer_progress(self, group: str, topic: str | None = None) -> list[QueueProgress]:
        return parse_consumer_progress(self.run("consumerProgress", "-g", group, *(["-t", topic] if topic else [])))

    def consumer_connection(self, group: str) -> str:
        """``consumerConnection -g group``: the group's connected clients (#ClientId ...), as mqadmin prints them."""
        return self.run("consumerConnection", "-g", group)

    def delete_expired_commit_log(self, broker_address: str) -> None:
        """DELETE_EXPIRED_COMMITLOG: the broker deletes its expired commit-log files in its next clean
        rounds (asynchronously: wait on the queues' min offsets). mqadmin prints "success" or "false"."""
        out = self.run("deleteExpiredCommitLog", "-b", broker_address)
        if "success" not in out:
            raise LocalClusterError(f"mqadmin deleteExpiredCommitLog -b {broker_address} answered {out.strip()!r}")

    def cluster_list(self) -> str:
        return self.run("clusterList")

    def sync_state_set(self, controller: str, broker_name: str) -> SyncStateSet:
        """What the controller at ``controller`` knows of ``broker_name``'s replicas (5.x controller mode)."""
        return parse_sync_state_set(self.run("getSyncStateSet", "-a", controller, "-b", broker_name))


def parse_sync_state_set(text: str) -> SyncStateSet:
    master = re.search(r"^#MasterAddr\s+(\S+)", text, re.MULTILINE)
    replicas: dict[str, dict[str, bool]] = {"InSyncReplica": {}, "NotInSyncReplica": {}}
    for kind, address, alive in _REPLICA.findall(text):
        replicas[kind][address] = alive == "true"
    return SyncStateSet(
        master.group(1) if master and master.group(1) != "null" else None,
        replicas["InSyncReplica"],
        replicas["NotInSyncReplica"],
    )


def parse_topic_status(text: str) -> list[QueueStatus]:
    """Rows of ``topicStatus``: #Broker Name #QID #Min Offset #Max Offset #Last Updated."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and all(p.isdigit() for p in parts[1:4]):
            rows.append(QueueStatus(parts[0], int(parts[1]), int(parts[2]), int(parts[3])))
    return rows


def parse_consumer_progress(text: str) -> list[QueueProgress]:
    """Rows of ``consumerProgress``: #Topic #Broker Name #QID #Broker Offset #Consumer Offset #Diff ..."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and all(p.lstrip("-").isdigit() for p in parts[2:5]):
            rows.append(QueueProgress(parts[0], parts[1], int(parts[2]), int(parts[3]), int(parts[4])))
    return rows
