"""Helpers for the ingestion tests: a config for the test cluster, minute windows, Dagster runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from rocketlake.dagster.definitions import build_definitions
from rocketlake.engine.config import load_config
from rocketlake.local import peers
from rocketlake.local.cluster import LocalCluster
from rocketlake.rocketmq.client import RocketMQClient
from rocketlake.rocketmq.errors import TopicNotExist
from tests import java_oracles

BODY_SCHEMA = "order_id STRING, amount DOUBLE"


def minute_key(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d-%H:%M")


def minute_floor_ms(epoch_ms: int) -> int:
    return epoch_ms // 60_000 * 60_000


def until(condition, timeout: float, what, process=None, interval: float = 0.2):
    """Poll another process's state (a broker, the name server, a Dagster instance, a web page) until
    ``condition()`` is truthy, and return that value. ``what`` (a text, or a callable giving one) names what was
    awaited when ``timeout`` seconds pass; a ``process`` (``subprocess.Popen``) that exits meanwhile fails at once
    with the end of its output."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if process is not None and process.poll() is not None:
            output = process.stdout.read()[-3000:] if process.stdout else ""
            pytest.fail(f"{what() if callable(what) else what}: the process exited ({process.returncode}):\n{output}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what() if callable(what) else what}: not within {timeout:.0f}s")
        time.sleep(interval)  # none of these notifies a change
    return value


def wait_until(epoch_s: float) -> None:
    # Windows are minutes of broker store time: the tests must let real minutes pass.
    while time.time() < epoch_s:
        time.sleep(min(1.0, max(0.0, epoch_s - time.time())))


def wait_for_next_minute(offset_s: float = 1.0) -> None:
    wait_until((int(time.time()) // 60 + 1) * 60 + offset_s)


def room_in_this_minute(seconds: float = 15.0) -> None:
    """Return at once when at least ``seconds`` of the current minute are left, else at the start (+1 s) of the
    next: sends that must all fall in one minute (one window) fit, without the 30 s an alignment on the next
    minute costs on average."""
    if 60 - time.time() % 60 < seconds:
        wait_for_next_minute(offset_s=1)


def write_config(
    path: Path,
    cluster: LocalCluster,
    lake: Path,
    ingestions: dict[str, dict],
    spark: dict | None = None,
    cluster_settings: dict | None = None,
) -> Path:
    """A rocketlake.yaml of ``ingestions``; its runs start Spark of their own on ``local[2]`` unless ``spark`` says
    otherwise (``SparkConnect.settings()``: sessions on the worker's Spark Connect server). ``cluster_settings``:
    the cluster's keys beside its name server."""
    # Yesterday's midnight: a test (or a suite) that runs across midnight UTC keeps its windows valid partitions.
    start = (datetime.now(timezone.utc) - timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    body = {
        "clusters": {"test": {"namesrv": cluster.spec.namesrv_address, **(cluster_settings or {})}},
        "lake": {"root": str(lake)},
        "spark": spark or {"master": "local[2]"},
        "ingestions": {
            name: {
                "cluster": "test",
                "message_model": "CLUSTERING",
                "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
                "window": {"cron": "* * * * *", "timezone": "UTC", "grace_seconds": 2, "start": start.isoformat()},
                "body": {"format": "json", "schema": BODY_SCHEMA},
                **spec,
            }
            for name, spec in ingestions.items()
        },
    }
    path.write_text(yaml.safe_dump(body))
    return path


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


@dataclass
class Produced:
    """Messages sent by the Java peer, with their store times as the Java consumer reports them."""

    topic: str
    by_msg_id: dict[str, dict]  # ConsumerPeer dump lines
    sent: list[peers.SentMessage]

    def windows(self) -> list[str]:
        return sorted({minute_key(m["storeTimestamp"]) for m in self.by_msg_id.values()})

    def in_window(self, key: str) -> list[dict]:
        return [m for m in self.by_msg_id.values() if minute_key(m["storeTimestamp"]) == key]


def materialize_command(table: str, partition: str) -> list[str]:
    """``dagster asset materialize`` of one window of rocketlake's code location, as a person types it."""
    dagster = str(Path(sys.executable).parent / "dagster")
    return [
        dagster,
        "asset",
        "materialize",
        "-m",
        "rocketlake.definitions",
        "--select",
        table,
        "--partition",
        partition,
    ]


def java_dump(cluster: LocalCluster, topic: str, sent: list[peers.SentMessage]) -> dict[str, dict]:
    ends: dict[tuple[str, int], int] = {}
    for s in sent:
        ends[(s.broker_name, s.queue_id)] = max(ends.get((s.broker_name, s.queue_id), 0), s.queue_offset + 1)
    dump = java_oracles.consume(
        cluster.spec.namesrv_address,
        cluster.spec.state_dir,
        topic,
        {q: (0, end) for q, end in ends.items()},
        version=cluster.spec.version,
    )
    return {m["msgId"]: m for m in dump}


def order(i: int, topic: str, tags: str = "TagA") -> dict:
    return {
        "topic": topic,
        "tags": tags,
        "keys": [f"o-{i}"],
        "properties": {"seq": str(i)},
        "body": f'{{"order_id": "o-{i}", "amount": {i}.5}}',
    }


def definitions(config_path: Path):
    return build_definitions(load_config(config_path))


def run_partitions(defs, table: str, instance, first: str, last: str | None = None, tags: dict | None = None):
    job = defs.resolve_job_def(f"{table}_job")
    if last is None or last == first:
        return job.execute_in_process(instance=instance, partition_key=first, raise_on_error=False, tags=tags)
    return job.execute_in_process(
        instance=instance,
        raise_on_error=False,
        tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last, **(tags or {})},
    )


def failures(result) -> list[str]:
    """What made an in-process run fail (each failure event and its error), for an assertion's message."""
    out = []
    for event in result.all_events:
        if event.is_failure:
            error = getattr(event.event_specific_data, "error", None)
            out.append(f"{event.message}: {error.to_string()}" if error is not None else event.message)
    return out


# --------------------------------------------------------------------------------------------
# Shared cron minutes. A Dagster window is a cron minute, so a scenario that needs messages in windows of its own
# waits for real minutes. Instead, every scenario that only needs its messages in one or two closed minutes says
# so here, at import, and the session fixture ``shared_minutes`` (conftest.py) sends them all into the same
# minutes: the suite waits for each of those minutes once, whatever the number of scenarios.

#: topic alias -> (queues on each broker, brokers or None for all)
Topics = dict[str, tuple[int, tuple[str, ...] | None]]
#: the scenario's topic names by alias -> the messages it sends in one minute (ProducerPeer's JSON lines)
Messages = Callable[[dict[str, str]], list[dict]]


@dataclass(frozen=True)
class MinuteScenario:
    topics: Topics
    minutes: tuple[Messages, ...]  # the messages of its first, second, ... shared minute


SHARED_MINUTES: dict[str, MinuteScenario] = {}


def in_shared_minutes(name: str, topics: Topics, *minutes: Messages) -> str:
    """Register a scenario's messages for the shared minutes; ``shared_minutes[name]`` gives what was sent."""
    SHARED_MINUTES[name] = MinuteScenario(topics, minutes)
    return name


@dataclass
class SentInMinutes:
    """What one scenario sent into the shared minutes: its topics and, minute by minute, the broker's answers."""

    topics: dict[str, str]  # alias -> topic name
    windows: list[str]  # the partition key of each minute it sent in
    by_minute: list[list[peers.SentMessage]] = field(default_factory=list)
    _produced: dict[str, Produced] = field(default_factory=dict, repr=False)

    @property
    def sent(self) -> list[peers.SentMessage]:
        return [s for minute in self.by_minute for s in minute]

    def produced(self, cluster: LocalCluster, alias: str) -> Produced:
        """The messages of one topic with the Java consumer's view of them (store times, properties)."""
        if alias not in self._produced:  # the Java consumer reads each topic once
            topic = self.topics[alias]
            sent = [s for s in self.sent if s.topic == topic]
            self._produced[alias] = Produced(topic, java_dump(cluster, topic, sent), sent)
        return self._produced[alias]


def dead_letters(client: RocketMQClient, group: str) -> list:
    """Every message in %DLQ%<group>, as the broker holds it."""
    try:
        queues = client.queues(f"%DLQ%{group}")
    except TopicNotExist:
        return []
    found = []
    for mq in queues:
        offset, end = client.get_min_offset(mq), client.get_max_offset(mq)
        while offset < end:
            result = client.pull(mq, offset, 32, consumer_group=group)
            found += result.messages
            offset = result.next_begin_offset
    return found


def sections(status: str) -> dict[str, list[str]]:
    """``mqadmin consumerStatus -i``'s output: section title -> its lines."""
    found: dict[str, list[str]] = {}
    title = None
    for line in status.splitlines():
        if line.startswith("#") and line.rstrip().endswith("#") and len(line.strip()) > 2:
            title = line.strip().strip("#")
            found[title] = []
        elif title is not None and line.strip():
            found[title].append(line)
    return found


#: The repository's root: member processes import the tests' listeners from it.
ROOT = Path(__file__).resolve().parents[2]


def start_member(config: Path, tmp_path: Path, *args: str, output=subprocess.PIPE) -> subprocess.Popen:
    """``rocketlake member orders`` with the test's Dagster home, and the repository importable (its listener)."""
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, DAGSTER_HOME=str(home), PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "rocketlake"), "member", "orders", "--config", str(config), *args],
        cwd=ROOT,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
    )
