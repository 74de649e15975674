"""Java programs built against the official RocketMQ client: the independent peer.

Our tests, demo and benchmarks judge the Python client against what the Java client does on the
same broker. The sources ship beside this module and are compiled on first use with ``javac``
against the cached RocketMQ jars; the classes are cached by source hash.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rocketlake.resources import jars
from rocketlake.resources.local.process import TOOL_HEAP, LocalClusterError

SOURCES = Path(__file__).parent / "peers"


@dataclass(frozen=True)
class SentMessage:
    """What the broker answered the Java producer for one message."""

    index: int
    topic: str
    msg_id: str
    offset_msg_id: str | None
    broker_name: str
    queue_id: int
    queue_offset: int
    status: str

    @classmethod
    def from_dict(cls, d: dict) -> "SentMessage":
        return cls(d["index"], d["topic"], d["msgId"], d.get("offsetMsgId"), d["brokerName"], d["queueId"],
                   d["queueOffset"], d["status"])


def build(program: str, version: str = jars.ROCKETMQ_VERSION) -> str:
    """Compile ``<program>.java`` once per source content; return the classpath to run it."""
    source = SOURCES / f"{program}.java"
    lib_cp = jars.classpath(jars.rocketmq_jar_set(version))
    digest = hashlib.sha256(source.read_bytes() + version.encode()).hexdigest()[:16]
    out = jars.cache_dir() / "peers" / f"{program}-{digest}"
    if not (out / f"{program}.class").exists():
        javac = jars.require_tool("javac", "compile the Java peer programs")
        tmp = out.with_name(out.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-cp", lib_cp, "-d", str(tmp), str(source)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise LocalClusterError(f"javac failed on {source}:\n{proc.stderr[-3000:]}")
        if not out.exists():  # another process may have built the same source meanwhile
            tmp.rename(out)
    return f"{out}:{lib_cp}"


def java_command(program: str, state_dir: Path, args: list[str], version: str = jars.ROCKETMQ_VERSION) -> list[str]:
    java = jars.require_tool("java", "run the Java peer programs")
    logs = state_dir / "logs" / "peers"
    return [java, *TOOL_HEAP, f"-Drocketmq.client.logRoot={logs}", "-Drocketmq.client.logUseSlf4j=false",
            f"-Duser.home={state_dir}", "-Drmq.logback.configurationFile=rmq.client.logback.xml",
            "-cp", build(program, version), program, *args]


def run(program: str, state_dir: Path, args: list[str], stdin: str = "", *,
        version: str = jars.ROCKETMQ_VERSION, timeout: float = 300.0) -> list[dict]:
    """Run a peer program; its JSON output lines come back parsed."""
    proc = subprocess.run(java_command(program, state_dir, args, version), input=stdin, capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise LocalClusterError(f"the Java peer {program} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def produce(namesrv: str, state_dir: Path, messages: list[dict] | None = None, *, args: list[str] = (),
            version: str = jars.ROCKETMQ_VERSION, timeout: float = 300.0) -> list[SentMessage]:
    """Send with the Java producer of ``version``; ``messages`` are the JSON lines of its stdin mode."""
    stdin = "".join(json.dumps(m) + "\n" for m in messages or [])
    lines = run("ProducerPeer", state_dir, ["--namesrv", namesrv, *args], stdin, version=version, timeout=timeout)
    return [SentMessage.from_dict(d) for d in lines]


def consume(namesrv: str, state_dir: Path, topic: str, ranges: dict[tuple[str, int], tuple[int, int]], *,
            subscription: str | None = None, bench: bool = False, pull_batch_size: int = 32,
            version: str = jars.ROCKETMQ_VERSION, timeout: float = 600.0) -> list[dict]:
    """Read ``{(broker, queue_id): (from, until)}`` with the Java DefaultLitePullConsumer (assign + seek)."""
    queues = ",".join(f"{b}:{q}:{lo}:{hi}" for (b, q), (lo, hi) in ranges.items())
    args = ["--namesrv", namesrv, "--topic", topic, "--queues", queues, "--pull-batch-size", str(pull_batch_size),
            "--mode", "bench" if bench else "dump"] + (["--subscription", subscription] if subscription else [])
    return run("ConsumerPeer", state_dir, args, version=version, timeout=timeout)


def admin(namesrv: str, state_dir: Path, commands: list[dict], *, version: str = jars.ROCKETMQ_VERSION) -> list[dict]:
    """Ask the Java admin API (DefaultMQAdminExt); one answer {"ok", "value" | "error"} per command."""
    stdin = "".join(json.dumps(c) + "\n" for c in commands)
    return run("AdminPeer", state_dir, ["--namesrv", namesrv], stdin, version=version)


def allocate(cases: list[dict], state_dir: Path, *, version: str = jars.ROCKETMQ_VERSION,
             timeout: float = 300.0) -> list[dict]:
    """Ask the Java ``AllocateMessageQueue*`` strategies, one JVM for every case (see AllocatePeer.java)."""
    stdin = "".join(json.dumps(c) + "\n" for c in cases)
    return run("AllocatePeer", state_dir, [], stdin, version=version, timeout=timeout)


def start_push_member(namesrv: str, state_dir: Path, group: str, topic: str, *, client_ip: str, instance_name: str,
                      version: str = jars.ROCKETMQ_VERSION) -> subprocess.Popen:
    """A Java DefaultMQPushConsumer in ``group`` until its stdin closes; it prints each allocation it is given
    (see PushMemberPeer.java). Text mode, line-buffered: read ``stdout`` line by line."""
    args = ["--namesrv", namesrv, "--group", group, "--topic", topic, "--client-ip", client_ip,
            "--instance-name", instance_name]
    return subprocess.Popen(java_command("PushMemberPeer", state_dir, args, version), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)


def start_retry_consumer(namesrv: str, state_dir: Path, group: str, topic: str, *, max_reconsume_times: int,
                         fail_until: dict[str, int], version: str = jars.ROCKETMQ_VERSION) -> subprocess.Popen:
    """A Java DefaultMQPushConsumer whose listener answers RECONSUME_LATER for a message tagged ``t`` while its
    reconsumeTimes is below ``fail_until[t]``; it prints each delivery until its stdin closes (see RetryPeer.java)."""
    args = ["--namesrv", namesrv, "--group", group, "--topic", topic, "--max-reconsume-times", str(max_reconsume_times)]
    for tag, times in fail_until.items():
        args += ["--fail", f"{tag}={times}"]
    return subprocess.Popen(java_command("RetryPeer", state_dir, args, version), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
