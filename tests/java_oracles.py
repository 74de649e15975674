"""The tests' Java oracles: the official RocketMQ client doing what rocketlake does, to judge it by.

Their sources (``tests/java_peers``) are not part of the wheel: importing this module compiles them with the
package's peers (``peers.add_sources``), and they run on the same PeerServer JVM (``consume``, ``allocate``) or in
JVMs of their own (the push consumers).
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path

from rocketlake import jars
from rocketlake.local import peers
from rocketlake.local.peers import java_command, run_peer

SOURCES = Path(__file__).resolve().parent / "java_peers"
peers.add_sources(SOURCES)


def consume(
    namesrv: str,
    state_dir: Path,
    topic: str,
    ranges: dict[tuple[str, int], tuple[int, int]],
    *,
    subscription: str | None = None,
    bench: bool = False,
    pull_batch_size: int = 32,
    version: str = jars.ROCKETMQ_VERSION,
    timeout: float = 600.0,
) -> list[dict]:
    """Read ``{(broker, queue_id): (from, until)}`` with the Java DefaultLitePullConsumer (assign + seek)."""
    queues = ",".join(f"{b}:{q}:{lo}:{hi}" for (b, q), (lo, hi) in ranges.items())
    args = [
        "--namesrv",
        namesrv,
        "--topic",
        topic,
        "--queues",
        queues,
        "--pull-batch-size",
        str(pull_batch_size),
        "--mode",
        "bench" if bench else "dump",
    ] + (["--subscription", subscription] if subscription else [])
    return run_peer("ConsumerPeer", state_dir, args, version=version, timeout=timeout)


def allocate(
    cases: list[dict], state_dir: Path, *, version: str = jars.ROCKETMQ_VERSION, timeout: float = 300.0
) -> list[dict]:
    """Ask the Java ``AllocateMessageQueue*`` strategies, one run for every case (see AllocatePeer.java)."""
    stdin = "".join(json.dumps(c) + "\n" for c in cases)
    return run_peer("AllocatePeer", state_dir, [], stdin, version=version, timeout=timeout)


def start_push_member(
    namesrv: str,
    state_dir: Path,
    group: str,
    topic: str,
    *,
    client_ip: str,
    instance_name: str,
    version: str = jars.ROCKETMQ_VERSION,
) -> subprocess.Popen:
    """A Java DefaultMQPushConsumer in ``group`` until its stdin closes; it prints each allocation it is given
    (see PushMemberPeer.java). Text mode, line-buffered: read ``stdout`` line by line."""
    args = [
        "--namesrv",
        namesrv,
        "--group",
        group,
        "--topic",
        topic,
        "--client-ip",
        client_ip,
        "--instance-name",
        instance_name,
    ]
    return subprocess.Popen(
        java_command("PushMemberPeer", state_dir, args, version),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        bufsize=1,
    )


def allocations(member: subprocess.Popen) -> queue.Queue:
    """The lines a ``start_push_member`` process prints, as they come (read by a thread of their own)."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in member.stdout], daemon=True).start()
    return lines


def allocation_among(lines: queue.Queue, topic: str, members: list[str], timeout: float = 90) -> dict:
    """The first allocation of ``topic`` the member prints once it counts exactly ``members`` (the Java client
    rebalances at its start, when the group's members change and every 20 s)."""
    while True:
        line = lines.get(timeout=timeout)
        answer = json.loads(line) if line.startswith("{") else {}
        if answer.get("topic") == topic and answer.get("cids") == members:
            return answer


def start_retry_consumer(
    namesrv: str,
    state_dir: Path,
    group: str,
    topic: str,
    *,
    max_reconsume_times: int,
    fail_until: dict[str, int],
    version: str = jars.ROCKETMQ_VERSION,
) -> subprocess.Popen:
    """A Java DefaultMQPushConsumer whose listener answers RECONSUME_LATER for a message tagged ``t`` while its
    reconsumeTimes is below ``fail_until[t]``; it prints each delivery until its stdin closes (see RetryPeer.java)."""
    args = ["--namesrv", namesrv, "--group", group, "--topic", topic, "--max-reconsume-times", str(max_reconsume_times)]
    for tag, times in fail_until.items():
        args += ["--fail", f"{tag}={times}"]
    return subprocess.Popen(
        java_command("RetryPeer", state_dir, args, version),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        bufsize=1,
    )
