"""Options of the ``rocketmq`` Spark source, named after Spark's Kafka source where they apply.

| option | meaning |
|---|---|
| namesrv | name server address(es), ';'-separated (required) |
| topic | topic to read (required) |
| subscription | tag expression, ``*`` (default) or ``TagA || TagB`` |
| startingOffsets / endingOffsets | ``earliest``, ``latest``, or JSON ``{"broker-a": {"0": 12}}`` (default earliest / latest) |
| startingTimestamp / endingTimestamp | epoch ms; exact store-time boundaries (first offset stored at or after) |
| pullBatchSize | messages per PULL_MESSAGE request, [1, 1024], default 32 |
| pullThresholdForQueue | most messages a task holds at once (one Arrow batch), [1, 65535], default 1000 |
| pullThresholdSizeForQueue | most MiB a task holds at once (one Arrow batch), [1, 1024], default 100 |
| maxMessagesPerPartition | longest offset range one Spark task reads, default 200000 |
| consumerGroup | the group named in pull requests (nothing is committed), default ``rocketlake_reader`` |
| timeoutMs | per broker call, default 3000 |
| bodyFormat | ``raw`` (default) or ``text`` (adds ``body_text``) |
| metadataColumns | comma-separated metadata columns to add (``engine.columns.METADATA_COLUMNS``: offset_msg_id, properties, born_timestamp, born_host, store_host, reconsume_times, origin_topic, origin_msg_id, origin_offset_msg_id), or ``all``; default none |
| includeFiltered | ``true``: also rows for messages the subscription filters out, with ``matched = false`` |
| accessKey / secretKey | RocketMQ ACL credentials (prefer the Dagster resource, which reads them from the environment) |
| accessKeyEnv / secretKeyEnv | instead: the environment variables holding them, read by each Spark worker (the keys never travel in Spark) |
| tls | true: TLS to the name servers and brokers (default false) |
| tlsCaFile / tlsCertFile / tlsKeyFile | PEM files (paths readable where the tasks run): the CA to trust (default: the system's), the client certificate and its key for servers that require one |
| tlsVerifyHostname | false turns the check of the server certificate's name off (test clusters only; default true) |
| namespaceV2 | RocketMQ's second namespace form: sent in every request's fields (``ns``, ``nsd``), names left as given |
| plan | internal: an explicit JSON list of chunks, used by rocketlake's pipeline |
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rocketlake.engine.columns import METADATA_COLUMNS, UnknownColumn, check_metadata
from rocketlake.rocketmq.message_queue import OffsetRange
from rocketlake.rocketmq.tls import TlsSettings


class SourceOptionError(ValueError):
    """A ``rocketmq`` source option is missing or invalid; the message names it, the value and what is allowed."""


Bound = str | dict[str, dict[int, int]]
#: One range of an explicit plan, with the start (epoch ms) of the window it belongs to.
PlannedRange = tuple[OffsetRange, int]


def encode_plan(planned: Iterable[PlannedRange]) -> str:
    """The ``plan`` option: the one serialized form of ``OffsetRange`` (``to_dict``) plus the window."""
    return json.dumps([{**r.to_dict(), "window_start_ms": start_ms} for r, start_ms in planned], separators=(",", ":"))


def decode_plan(text: str) -> list[PlannedRange]:
    try:
        return [(OffsetRange.from_dict(item), int(item["window_start_ms"])) for item in json.loads(text)]
    except (ValueError, TypeError, KeyError, AttributeError):
        raise SourceOptionError(
            "option plan is not a valid plan (a JSON list of ranges with window_start_ms); "
            "it is internal to rocketlake's pipeline"
        ) from None


@dataclass(frozen=True)
class SourceOptions:
    namesrv: str
    topic: str
    subscription: str = "*"
    starting_offsets: Bound = "earliest"
    ending_offsets: Bound = "latest"
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    pull_batch_size: int = 32
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue: int = 100
    max_messages_per_partition: int = 200_000
    timeout_ms: int = 3000
    consumer_group: str = "rocketlake_reader"
    body_format: str = "raw"
    #: bodyFormat=protobuf: the descriptor set's bytes (read on the driver) and the message's full name
    protobuf_descriptor: bytes | None = field(default=None, repr=False)
    protobuf_message: str | None = None
    #: framing=confluent: the registry (``schemaRegistryUrl``) or directory (``schemaDirectory``) of the frames' ids
    schema_registry_url: str | None = None
    schema_directory: str | None = None
    #: framing=confluent with another bodyFormat than protobuf: what the payload is, ``json`` or ``avro:<the
    #: configured schema's fingerprint, hex>`` (an id's schema must be that one)
    framed_schema: str | None = None
    include_filtered: bool = False
    metadata_columns: tuple[str, ...] = ()
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    access_key_env: str | None = None  # ... or the environment variables holding them, read in each worker
    secret_key_env: str | None = None
    tls: TlsSettings | None = None
    namespace_v2: str | None = None
    plan: list[PlannedRange] | None = field(default=None, repr=False)

    @property
    def pull_threshold_size_for_queue_bytes(self) -> int:
        return self.pull_threshold_size_for_queue * 1024 * 1024


def _int(options: dict[str, str], key: str, default: int, lo: int, hi: int) -> int:
    raw = options.get(key.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SourceOptionError(f"option {key}={raw!r} is not an integer; allowed: [{lo}, {hi}]") from None
    if not lo <= value <= hi:
        raise SourceOptionError(f"option {key}={value} is out of range [{lo}, {hi}]")
    return value


def _bound(options: dict[str, str], key: str, default: str) -> Bound:
    raw = options.get(key.lower(), default)
    if raw in ("earliest", "latest"):
        return raw
    try:
        parsed = json.loads(raw)
        return {str(broker): {int(q): int(off) for q, off in queues.items()} for broker, queues in parsed.items()}
    except (ValueError, AttributeError, TypeError):
        raise SourceOptionError(
            f"option {key}={raw!r} is not valid: use earliest, latest, or JSON keyed by broker name then queue id, "
            'e.g. {"broker-a": {"0": 12, "1": 40}}'
        ) from None


def parse_options(raw: Any) -> SourceOptions:
    # Spark hands options over case-insensitively; normalise to lower case keys.
    options = {str(k).lower(): str(v) for k, v in dict(raw).items()}
    for required in ("namesrv", "topic"):
        if not options.get(required):
            raise SourceOptionError(f"option {required} is required for format rocketmq")
    body_format = options.get("bodyformat", "raw")
    if body_format not in ("raw", "text", "protobuf"):
        raise SourceOptionError(
            f"option bodyFormat={body_format!r} is not allowed; allowed: raw, text, protobuf "
            "(for JSON bodies use rocketlake.spark.body.decode_body on the result)"
        )
    descriptor, message = _protobuf(options, body_format)
    registry_url, directory, framed_schema = _framing(options, body_format)
    starting = _bound(options, "startingOffsets", "earliest")
    ending = _bound(options, "endingOffsets", "latest")
    if starting == "latest":
        raise SourceOptionError("option startingOffsets=latest makes no sense for a batch read (it reads nothing)")
    if ending == "earliest":
        raise SourceOptionError("option endingOffsets=earliest makes no sense for a batch read (it reads nothing)")
    ts = {}
    for key in ("startingTimestamp", "endingTimestamp"):
        ts[key] = _int(options, key, -1, 0, 2**63 - 1) if key.lower() in options else None
    if (
        ts["startingTimestamp"] is not None
        and ts["endingTimestamp"] is not None
        and ts["endingTimestamp"] < ts["startingTimestamp"]
    ):
        raise SourceOptionError(
            f"option endingTimestamp={ts['endingTimestamp']} is before startingTimestamp={ts['startingTimestamp']}"
        )
    plan = decode_plan(options["plan"]) if "plan" in options else None
    return SourceOptions(
        namesrv=options["namesrv"],
        topic=options["topic"],
        subscription=options.get("subscription", "*"),
        starting_offsets=starting,
        ending_offsets=ending,
        starting_timestamp=ts["startingTimestamp"],
        ending_timestamp=ts["endingTimestamp"],
        pull_batch_size=_int(options, "pullBatchSize", 32, 1, 1024),
        pull_threshold_for_queue=_int(options, "pullThresholdForQueue", 1000, 1, 65535),
        pull_threshold_size_for_queue=_int(options, "pullThresholdSizeForQueue", 100, 1, 1024),
        max_messages_per_partition=_int(options, "maxMessagesPerPartition", 200_000, 1, 2**31 - 1),
        timeout_ms=_int(options, "timeoutMs", 3000, 1, 3_600_000),
        consumer_group=options.get("consumergroup", "rocketlake_reader"),
        body_format=body_format,
        protobuf_descriptor=descriptor,
        protobuf_message=message,
        schema_registry_url=registry_url,
        schema_directory=directory,
        framed_schema=framed_schema,
        include_filtered=options.get("includefiltered", "false").lower() == "true",
        metadata_columns=_metadata(options),
        access_key=options.get("accesskey"),
        secret_key=options.get("secretkey"),
        access_key_env=options.get("accesskeyenv"),
        secret_key_env=options.get("secretkeyenv"),
        tls=_tls(options),
        namespace_v2=options.get("namespacev2") or None,
        plan=plan,
    )


def _protobuf(options: dict[str, str], body_format: str) -> tuple[bytes | None, str | None]:
    """bodyFormat=protobuf's message: ``protobufMessageName`` in the descriptor set, given as a file
    (``protobufDescriptorFile``, read here, on the driver) or as its bytes in base64 (``protobufDescriptorSet``: what
    rocketlake's runs pass, so a Spark Connect server elsewhere needs no file of the project's)."""
    keys = ("protobufdescriptorfile", "protobufdescriptorset", "protobufmessagename")
    if body_format != "protobuf":
        extra = [k for k in keys if k in options]
        if extra:
            raise SourceOptionError(f"options {', '.join(extra)} need bodyFormat=protobuf")
        return None, None
    from rocketlake.engine.protobuf import ProtobufSchemaError, load_descriptor_set, message_descriptor, struct_of

    message = options.get("protobufmessagename")
    if not message:
        raise SourceOptionError("option protobufMessageName is required with bodyFormat=protobuf (package.Message)")
    if "protobufdescriptorset" not in options and "protobufdescriptorfile" not in options:
        raise SourceOptionError(
            "bodyFormat=protobuf needs protobufDescriptorFile (protoc --include_imports --descriptor_set_out) "
            "or protobufDescriptorSet (its bytes in base64)"
        )
    try:
        if "protobufdescriptorset" in options:
            descriptor = base64.b64decode(options["protobufdescriptorset"], validate=True)
        else:
            descriptor = load_descriptor_set(options["protobufdescriptorfile"])
        struct_of(message_descriptor(descriptor, message))
    except (ProtobufSchemaError, ValueError) as exc:
        raise SourceOptionError(f"bodyFormat=protobuf: {exc}") from None
    return descriptor, message


def _framing(options: dict[str, str], body_format: str) -> tuple[str | None, str | None, str | None]:
    """``framing=confluent`` (Confluent's wire format, ``engine.registry``): the registry's URL or the directory
    of schemas keyed by id, exactly one of them, and (but for bodyFormat=protobuf, which decodes the payload
    itself) ``framedSchema``: ``json``, or ``avro:<fingerprint>`` (CRC-64-AVRO of the schema every id must name)."""
    framing = options.get("framing", "none")
    url, directory = options.get("schemaregistryurl"), options.get("schemadirectory")
    framed_schema = options.get("framedschema")
    if framing not in ("none", "confluent"):
        raise SourceOptionError(f"option framing={framing!r} is not allowed; allowed: none, confluent")
    if framing == "none":
        if url or directory or framed_schema:
            raise SourceOptionError(
                "options schemaRegistryUrl, schemaDirectory and framedSchema need framing=confluent"
            )
        return None, None, None
    if bool(url) == bool(directory):
        raise SourceOptionError("option framing=confluent needs one of schemaRegistryUrl or schemaDirectory")
    if body_format == "protobuf":
        if framed_schema:
            raise SourceOptionError("option framedSchema is for bodyFormat=raw; protobuf bodies name their message")
        return url, directory, None
    if body_format != "raw":
        raise SourceOptionError(f"option framing=confluent with bodyFormat={body_format} is not supported yet")
    if framed_schema != "json" and not re.fullmatch(r"avro:[0-9a-f]{16}", framed_schema or ""):
        raise SourceOptionError(
            f"option framedSchema={framed_schema!r} is not allowed with framing=confluent; allowed: json, "
            "avro:<the schema's CRC-64-AVRO fingerprint, 16 hex digits>"
        )
    return url, directory, framed_schema


def _metadata(options: dict[str, str]) -> tuple[str, ...]:
    raw = options.get("metadatacolumns", "").strip()
    if raw.lower() == "all":
        return METADATA_COLUMNS
    try:
        return check_metadata([name.strip() for name in raw.split(",") if name.strip()])
    except UnknownColumn as exc:
        raise SourceOptionError(f"option metadataColumns={raw!r}: {exc}, or all") from None


def _tls(options: dict[str, str]) -> TlsSettings | None:
    """``tls`` (true/false) with ``tlsCaFile``, ``tlsCertFile``, ``tlsKeyFile``, ``tlsVerifyHostname`` (the cluster's
    TLS settings, ``TlsSettings.options``): paths, which must be readable where the tasks run."""
    flag = options.get("tls", "false").lower()
    if flag not in ("true", "false"):
        raise SourceOptionError(f"option tls={options['tls']!r} is not allowed; allowed: true, false")
    if flag == "false":
        extra = [k for k in ("tlscafile", "tlscertfile", "tlskeyfile", "tlsverifyhostname") if k in options]
        if extra:
            raise SourceOptionError(f"options {', '.join(extra)} need tls=true")
        return None
    verify = options.get("tlsverifyhostname", "true").lower()
    if verify not in ("true", "false"):
        raise SourceOptionError(f"option tlsVerifyHostname={verify!r} is not allowed; allowed: true, false")
    try:
        return TlsSettings(
            options.get("tlscafile"), options.get("tlscertfile"), options.get("tlskeyfile"), verify == "true"
        )
    except ValueError as exc:
        raise SourceOptionError(f"options tlsCertFile/tlsKeyFile: {exc}") from None
