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

from resources import jars
from resources.local.process import TOOL_HEAP, LocalClusterError

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
    def from_json(cls, line: str) -> "SentMessage":
        d = json.loads(line)
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


def produce(namesrv: str, state_dir: Path, messages: list[dict] | None = None, *, args: list[str] = (),
            version: str = jars.ROCKETMQ_VERSION, timeout: float = 300.0) -> list[SentMessage]:
    """Send with the Java producer of ``version``; ``messages`` are the JSON lines of its stdin mode."""
    stdin = "".join(json.dumps(m) + "\n" for m in messages or [])
    cmd = java_command("ProducerPeer", state_dir, ["--namesrv", namesrv, *args], version)
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise LocalClusterError(f"the Java producer peer failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return [SentMessage.from_json(line) for line in proc.stdout.splitlines() if line.startswith("{")]
