"""Options of ``spark.readStream.format("rocketmq")``, beside the batch reader's (``engine.options``).

| option | meaning |
|---|---|
| topic / topics / topicPattern | one topic, several (comma-separated), or a regular expression matched against the name server's topics at every batch (new topics join, from their earliest offset); exactly one of the three |
| startingOffsets | ``earliest`` (default), ``latest``, ``group`` (the consumer group's committed offsets; earliest where it has none), or JSON ``{"topic": {"broker-a": {"0": 12}}}`` |
| startingTimestamp | epoch ms: each queue starts at its first message stored at or after it (instead of startingOffsets) |
| maxOffsetsPerTrigger | most offsets a micro-batch reads, spread over the queues by their backlog (default: all available) |
| consumerGroup | the group named in pulls; when given, the group's offsets are committed to the brokers after each batch is committed to the sink (``commit``), so ``mqadmin consumerProgress`` shows the stream's progress |

Every other option is the batch reader's (name server, subscription, pulls, TLS, ACL, body, metadata columns);
``endingOffsets``/``endingTimestamp`` are a batch read's and refused here. Offsets, as Spark checkpoints them, are
JSON keyed by topic, broker name and queue id, like Spark's Kafka source's keyed by topic and partition.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from rocketlake.engine.options import SourceOptionError, SourceOptions, parse_options

#: A stream's position: topic -> broker name -> queue id (as a string, JSON's keys) -> the next offset to read.
StreamOffset = dict[str, dict[str, dict[str, int]]]
STARTING = ("earliest", "latest", "group")
#: Options only a stream takes (lower case, as Spark hands options over): with one of them, options are a stream's.
STREAM_ONLY_OPTIONS = ("topics", "topicpattern", "maxoffsetspertrigger", "maxbytespertrigger")
#: What Spark must be for ``readStream``: admission control and ``Trigger.AvailableNow`` for Python sources.
NEEDED_SPARK = (4, 2)


@dataclass(frozen=True)
class StreamOptions:
    source: SourceOptions  # the batch reader's options, with ``topic`` the first topic named
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    starting: str | StreamOffset = "earliest"
    starting_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    commit_group: str | None = None  # the group the brokers are told the stream's progress of


def parse_stream_options(raw: Any) -> StreamOptions:
    options = {str(k).lower(): str(v) for k, v in dict(raw).items()}
    for batch_only in ("endingoffsets", "endingtimestamp", "plan"):
        if batch_only in options:
            name = {"endingoffsets": "endingOffsets", "endingtimestamp": "endingTimestamp"}.get(batch_only, batch_only)
            raise SourceOptionError(
                f"option {name} is a batch read's: a stream reads on as the topic grows "
                "(use Trigger.AvailableNow to stop at the offsets available when the query starts)"
            )
    named = [k for k in ("topic", "topics", "topicpattern") if options.get(k)]
    if len(named) != 1:
        raise SourceOptionError(
            "readStream.format('rocketmq') needs exactly one of the options topic, topics, topicPattern "
            f"(given: {', '.join(named) or 'none'})"
        )
    topics: tuple[str, ...] = ()
    pattern = None
    if named[0] == "topicpattern":
        pattern = options["topicpattern"]
        try:
            re.compile(pattern)
        except re.error as e:
            raise SourceOptionError(f"option topicPattern={pattern!r} is not a regular expression: {e}") from None
    else:
        topics = tuple(t.strip() for t in options[named[0]].split(",") if t.strip())
        if not topics:
            raise SourceOptionError(f"option {named[0]}={options[named[0]]!r} names no topic")
    if "startingtimestamp" in options and "startingoffsets" in options:
        raise SourceOptionError("options startingOffsets and startingTimestamp are exclusive: give one")
    starting = _starting(options.pop("startingoffsets", "earliest"))
    max_offsets = None
    if "maxoffsetspertrigger" in options:
        max_offsets = _positive(options, "maxOffsetsPerTrigger")
    max_bytes = None
    if "maxbytespertrigger" in options:
        max_bytes = _bytes(options["maxbytespertrigger"])
    batch = {k: v for k, v in options.items() if k not in STREAM_ONLY_OPTIONS}
    batch["topic"] = topics[0] if topics else "%pattern%"  # the batch reader's one topic; each chunk names its own
    source = parse_options(batch)
    return StreamOptions(
        source=source,
        topics=topics,
        topic_pattern=pattern,
        starting=starting,
        starting_timestamp=source.starting_timestamp,
        max_offsets_per_trigger=max_offsets,
        max_bytes_per_trigger=max_bytes,
        commit_group=options.get("consumergroup"),
    )


def shaping_options(raw: Any) -> SourceOptions:
    """The options a read's columns follow. Spark asks a source for its schema before it knows whether the read is a
    batch or a stream, and a stream's start (``latest``, ``group``, JSON keyed by topic) and topics (``topicPattern``)
    are no batch read's: options that fail as a batch read's and parse as a stream's are a stream's. A batch read's
    error is raised here, at ``load()``; for options a stream would take (``spark.read`` with
    ``startingOffsets=latest``) the batch reader raises the same sentence when the read is planned. Options that are
    neither say what is wrong for both when it differs: nothing here tells a ``read`` from a ``readStream``."""
    try:
        return parse_options(raw)
    except SourceOptionError as batch_error:
        try:
            return parse_stream_options(raw).source
        except SourceOptionError as stream_error:
            if any(str(k).lower() in STREAM_ONLY_OPTIONS for k in dict(raw)):
                raise stream_error from None
            if str(stream_error) == str(batch_error):
                raise batch_error from None
            raise SourceOptionError(f"{batch_error}; for readStream: {stream_error}") from None


def _starting(raw: str) -> str | StreamOffset:
    if raw in STARTING:
        return raw
    try:
        parsed = json.loads(raw)
        return {
            str(topic): {str(b): {str(int(q)): int(o) for q, o in qs.items()} for b, qs in brokers.items()}
            for topic, brokers in parsed.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise SourceOptionError(
            f"option startingOffsets={raw!r} is not valid for a stream: use earliest, latest, group, or JSON keyed "
            'by topic, broker name then queue id, e.g. {"orders": {"broker-a": {"0": 12}}}'
        ) from None


def _positive(options: dict[str, str], key: str) -> int:
    raw = options[key.lower()]
    try:
        value = int(raw)
    except ValueError:
        raise SourceOptionError(f"option {key}={raw!r} is not an integer; allowed: [1, {2**63 - 1}]") from None
    if value < 1:
        raise SourceOptionError(f"option {key}={value} is out of range [1, {2**63 - 1}]")
    return value


#: Spark's byte-string units (``JavaUtils.byteStringAsBytes``: k, m, g, t, with or without b, powers of 1024).
BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}
BYTE_UNITS |= {"t": 1 << 40, "tb": 1 << 40}


def _bytes(raw: str) -> int:
    """``maxBytesPerTrigger``: a positive number of bytes, bare or with a unit as Spark writes sizes (``512k``, ``64m``,
    ``1g``)."""
    found = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", raw)
    unit = found.group(2).lower() if found else None
    if not found or unit not in BYTE_UNITS or int(found.group(1)) < 1:
        raise SourceOptionError(
            f"option maxBytesPerTrigger={raw!r} is not a size: a positive whole number of bytes, or with a unit "
            "k, m, g or t (powers of 1024), e.g. 64m"
        )
    return int(found.group(1)) * BYTE_UNITS[unit]


def spark_refusal(version: str) -> str | None:
    """Why this Spark cannot run the stream (None when it can): Python sources get admission control and
    ``Trigger.AvailableNow`` in 4.2."""
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        return None
    if (major, minor) >= NEEDED_SPARK:
        return None
    return (
        f"readStream.format('rocketmq') needs Spark 4.2 or later (this is Spark {version}): before 4.2 a Python "
        "source has no read limit and no Trigger.AvailableNow, so a backlog would be one batch; use the batch "
        "reader, spark.read.format('rocketmq'), or rocketlake's windows"
    )


def with_topic(opts: SourceOptions, topic: str) -> SourceOptions:
    return replace(opts, topic=topic)
