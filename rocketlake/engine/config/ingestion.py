"""One ingestion: a DefaultMQPushConsumer's settings, as a batch pipeline, and its dead letters'."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator

from rocketlake.engine.config.common import (
    TABLE_NAME,
    TOPIC_FIELD,
    AllocateStrategy,
    MetadataColumn,
    _range,
    _Strict,
    _template,
)
from rocketlake.engine.config.landing import BodyConfig, LayoutConfig, WindowConfig
from rocketlake.rocketmq.errors import InvalidName

# One definition of each, the wire's: a config value is the name the Java client and the broker use.
from rocketlake.rocketmq.heartbeat import ConsumeFromWhere, MessageModel
from rocketlake.rocketmq.message import DLQ_GROUP_TOPIC_PREFIX
from rocketlake.rocketmq.validators import check_consumer_group, check_topic


class RunRetryConfig(_Strict):
    """A failed window run is retried in the same run by Dagster, after ``delay_seconds`` doubled per attempt (with
    jitter), at most ``max_retries`` times, then reported failed. Errors a retry cannot fix are not retried."""

    max_retries: int = Field(default=3, ge=0, le=20)
    delay_seconds: float = Field(default=10, ge=0, le=3600)


# DefaultMQPushConsumerImpl.checkConfig's inclusive ranges.
PUSH_CONSUMER_RANGES = {
    "consume_thread_min": _range(1, 1000),
    "consume_thread_max": _range(1, 1000),
    "consume_concurrently_max_span": _range(1, 65535),
    "pull_threshold_for_queue": _range(1, 65535),
    "pull_threshold_size_for_queue": _range(1, 1024),
    "pull_threshold_for_topic": _range(1, 6553500, unlimited=-1),
    "pull_threshold_size_for_topic": _range(1, 102400, unlimited=-1),
    "pull_interval": _range(0, 65535),
    "consume_message_batch_max_size": _range(1, 1024),
    "pull_batch_size": _range(1, 1024),
    "pop_invisible_time": _range(5000, 300000),
    "pop_batch_nums": _range(1, 32),
}


# DefaultMQPushConsumer settings rocketlake does not honour yet. A key listed here is refused whenever it is
# present in the file, so that no accepted setting is silently ignored; the work that implements a key deletes
# its line. Value: why, and when it comes.
NOT_SUPPORTED_YET = {
    "consume_concurrently_max_span": (
        "a run reads exact ranges and moves offsets only over whole landed windows, so no span of unacknowledged "
        "messages builds up behind a slow one for it to limit; what a task holds is bounded by "
        "pull_threshold_for_queue and max_messages_per_task"
    ),
    "pull_interval": "the reader pulls without pauses",
    "pull_batch_size_in_bytes": "pulls are bounded by pull_batch_size and the broker's transfer limits",
    "post_subscription_when_pull": "pulls always carry no subscription: every offset is read and its tag re-checked",
    "unit_mode": "unit (cell) mode is not implemented",
    "pop_invisible_time": "rocketlake pulls by offset; POP consumption does not apply",
    "pop_batch_nums": "rocketlake pulls by offset; POP consumption does not apply",
    "await_termination_millis_when_shutdown": "a run ends when its windows are landed; there is no consume thread pool to drain",
}
# (key, value) -> (why, what to do instead)
NOT_SUPPORTED_VALUES: dict[tuple[str, str], tuple[str, str]] = {}


def _ranges_in_schema(schema: dict) -> None:
    """RocketMQ's ranges in the JSON schema too, so a schema check (``dg check yaml``) refuses what a load refuses."""
    for key, check in PUSH_CONSUMER_RANGES.items():
        prop = schema.get("properties", {}).get(key)
        if prop is None:
            continue
        lo, hi, unlimited = check.bounds
        if unlimited is None:
            prop.update(minimum=lo, maximum=hi)
        else:
            prop.pop("type", None)
            prop["anyOf"] = [{"const": unlimited}, {"type": "integer", "minimum": lo, "maximum": hi}]


#: Table properties Spark sets itself and refuses in ``SET TBLPROPERTIES`` (``TableCatalog.RESERVED_PROPERTIES``).
SPARK_RESERVED_PROPERTIES = frozenset({"comment", "external", "is_managed_location", "location", "owner", "provider"})
#: Delta table properties that turn on a feature rocketlake's Spark cannot write: why, and what to do.
REFUSED_TABLE_PROPERTIES = {
    "delta.universalformat.enabledformats": (
        "Iceberg compatibility (UniForm) is not supported yet: Delta writes its Iceberg metadata with the "
        "delta-iceberg module, which rocketlake's Spark does not carry; remove the property (the table stays "
        "readable by Delta readers)"
    ),
}


class IngestionConfig(_Strict):
    """One topic landed in one table by one consumer group: a DefaultMQPushConsumer, as a batch pipeline."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False, json_schema_extra=_ranges_in_schema)

    _dead_letters_of: str | None = PrivateAttr(default=None)
    _dead_letters_cfg: "IngestionConfig | None" = PrivateAttr(default=None)  # whose members heartbeat for it
    _namespace: str | None = PrivateAttr(default=None)  # its cluster's (``in_namespace``)

    cluster: str
    topic: str | None = Field(default=None, description="The topic landed (or topics, or topic_pattern).")
    topics: list[str] = Field(
        default_factory=list,
        description="Several topics landed into the one table, as a consumer subscribed to each: every queue of each "
        "keeps its own ranges and offsets, in the one ledger and commit; subscription applies to all.",
    )
    topic_pattern: str | None = Field(
        default=None,
        description="A regular expression (Python's, matched whole) of the topics landed, like Spark's "
        "subscribePattern: the name server's topic list is matched at every run and by the rebalance "
        "sensor, so a topic created later joins at the next window (from consume_from_where). Retry, "
        "dead-letter and RocketMQ's system topics never match.",
    )
    subscription: str = "*"
    consumer_group: str
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    consume_timestamp: str | None = Field(
        default=None, description="yyyyMMddHHmmss in the window's time zone; default: 30 minutes before first run."
    )
    table: str = Field(
        description="The Delta table: a name (the table at <lake.root>/<name>), or database.name, a table of Spark's "
        "catalog, created there on first landing at <lake.root>/<database>/<name>. Also the asset key. With "
        "{topic} in it (and in consumer_group), each topic of topic_pattern or topics lands in a table of its own, "
        "{topic} being the topic with every character but letters, digits and _ made _."
    )
    window: WindowConfig
    body: BodyConfig = BodyConfig()
    metadata_columns: list[MetadataColumn] = Field(
        default_factory=list,
        description="Columns landed besides topic, broker_name, queue_id, queue_offset, msg_id, tags, keys, "
        "store_timestamp, body and window_start (pipelines.columns). origin_topic, origin_msg_id and "
        "origin_offset_msg_id are landed anyway when messages can fail (a listener, or a body.format that may not decode), and in "
        "dead-letter tables; a column the table already has keeps being landed.",
    )
    # A MessageListenerConcurrently: "package.module:function" (``engine.listener``); None: every message is consumed.
    listener: str | None = None
    run_retry: RunRetryConfig = RunRetryConfig()
    allocate_message_queue_strategy: AllocateStrategy = AllocateStrategy.AVG
    # What the strategies need (``engine.allocation``): CONFIG's queues ("broker_name/queue_id", or
    # "topic/broker_name/queue_id" for another subscribed topic such as the retry topic), MACHINE_ROOM's rooms,
    # MACHINE_ROOM_NEARBY's resolver ("module:attribute", default: the room is the text before the first "@" of
    # a broker name or client id) and inner strategy, CONSISTENT_HASH's virtual nodes per member.
    allocate_message_queue_list: list[str] | None = None
    consumer_machine_rooms: list[str] | None = None
    machine_room_resolver: str | None = None
    machine_room_nearby_strategy: AllocateStrategy = AllocateStrategy.AVG
    virtual_node_count: int = Field(default=10, ge=0)
    # The table's upkeep (rocketlake's own): Delta table properties, and VACUUM after a day is compacted.
    table_properties: dict[str, str] = Field(
        default_factory=dict,
        description="Delta table properties (e.g. delta.enableChangeDataFeed: 'true', delta.logRetentionDuration: "
        "'interval 30 days', or a name of your own; not Spark's reserved owner, comment, location, ...): "
        "set by the commit that creates the table, and on an existing table whose values differ before "
        "a run writes (ALTER TABLE ... SET TBLPROPERTIES, a commit of its own). Delta checks delta.* "
        "names and values: a run whose properties Delta refuses fails before it writes anything.",
    )
    layout: LayoutConfig = Field(
        default_factory=LayoutConfig, description="Partitioning, liquid clustering or Z-ordering of the table."
    )
    vacuum_retention_hours: int | None = Field(
        default=None,
        ge=0,
        le=10 * 365 * 24,
        description="After a run compacts a day that is over, VACUUM the table with this retention: data files no "
        "longer in the table for that long are deleted. None (default): never. Below Delta's 168 h "
        "check, make sure no reader or writer of the table runs that long (time travel to older "
        "versions fails once their files are gone). Refused below run_timeout (a run of another member "
        "could lose the files it reads).",
    )
    on_deleted_messages: Literal["fail", "record"] = Field(
        default="fail",
        description="When the broker deleted messages the group never landed: fail the run, or "
        "record the gap in the ledger and move on.",
    )

    # DefaultMQPushConsumer settings, RocketMQ's defaults; ranges from checkConfig (inclusive).
    consume_thread_min: int = 20
    consume_thread_max: int = 20
    consume_concurrently_max_span: int = 2000
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue: int = 100  # MiB
    pull_threshold_for_topic: int = -1
    pull_threshold_size_for_topic: int = -1  # MiB
    pull_interval: int = 0  # ms
    consume_message_batch_max_size: int = 1
    pull_batch_size: int = 32
    pull_batch_size_in_bytes: int = Field(default=256 * 1024, ge=1)
    post_subscription_when_pull: bool = False
    unit_mode: bool = False
    max_reconsume_times: int = Field(default=-1, ge=-1)  # -1: 16 when concurrent, unbounded when orderly
    # Orderly: how long a queue waits after a message failed before a run tries it again (Java: 1 s, minimum 10 ms
    # in ConsumeMessageOrderlyService, at most 30 s).
    suspend_current_queue_time_millis: int = Field(default=1000, ge=10, le=30_000)
    # Minutes, as in RocketMQ, but enforced per listener call to the second: fractions are allowed (0.5 = 30 s).
    consume_timeout: float = Field(default=15, ge=1 / 60)
    pop_invisible_time: int = 60_000
    pop_batch_nums: int = 32
    await_termination_millis_when_shutdown: int = Field(default=0, ge=0)
    consume_orderly: bool = False
    # rocketlake's own: the longest offset range one Spark task reads (what it holds at once is
    # bounded by the pull thresholds above); longer ranges become several tasks.
    max_messages_per_task: int = Field(default=200_000, ge=1)
    # rocketlake's own: the run's deadline (``spark.deadline``); the job's dagster/max_runtime tag carries it to
    # Dagster's run monitoring.
    run_timeout: float = Field(
        default=120,
        gt=0,
        le=7 * 24 * 60,
        description="Minutes (fractions allowed) a run may take from its step's start: past it, its Spark work is "
        "stopped and it fails with nothing more committed, freeing its group's pool slot; its windows "
        "land again. At least consume_timeout; vacuum_retention_hours must outlast it.",
    )
    # ClientConfig settings a batch pipeline still uses.
    # ms, per broker call; unset: the cluster's RocketMQResource timeout_ms (3000 unless the project sets another).
    mq_client_api_timeout: int | None = Field(default=None, ge=1)
    instance_name: str = "DEFAULT"
    client_ip: str | None = None
    unit_name: str | None = None
    # BROADCASTING: where each member keeps its own progress (the Java client's rocketmq.client.localOffsetStoreDir).
    local_offset_store_dir: str = "~/.rocketmq_offsets"

    @field_validator(*PUSH_CONSUMER_RANGES.keys())
    @classmethod
    def _in_range(cls, value: int, info) -> int:
        return PUSH_CONSUMER_RANGES[info.field_name](value)

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        if value is None or _template(value):
            return value
        try:
            check_topic(value)
        except InvalidName as e:
            raise ValueError(str(e)) from None
        return value

    @field_validator("topics")
    @classmethod
    def _topics(cls, value: list[str]) -> list[str]:
        for topic in value:
            if not _template(topic):
                try:
                    check_topic(topic)
                except InvalidName as e:
                    raise ValueError(str(e)) from None
        return value

    @field_validator("consumer_group")
    @classmethod
    def _group(cls, value: str) -> str:
        if _template(value):
            return value
        try:
            check_consumer_group(value.replace(TOPIC_FIELD, "t", 1))
        except InvalidName as e:
            raise ValueError(str(e)) from None
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "IngestionConfig":
        given = [key for key in ("topic", "topics", "topic_pattern") if getattr(self, key)]
        if len(given) != 1:
            raise ValueError(
                "name the topics landed with exactly one of topic, topics (a list) and topic_pattern "
                f"(a regular expression); given: {', '.join(given) or 'none'}"
            )
        if len(set(self.topics)) != len(self.topics):
            raise ValueError(f"topics {self.topics} names a topic twice")
        if self.topic_pattern is not None:
            try:
                re.compile(self.topic_pattern)
            except re.error as e:
                raise ValueError(f"topic_pattern {self.topic_pattern!r} is not a regular expression: {e}") from None
        if TOPIC_FIELD in self.table or TOPIC_FIELD in self.consumer_group:
            if self.topic is not None or TOPIC_FIELD not in self.table or TOPIC_FIELD not in self.consumer_group:
                raise ValueError(
                    f"table {self.table!r} and consumer_group {self.consumer_group!r}: a table per topic names "
                    "{topic} in both (each table commits its own offsets and has its own retry and dead-letter "
                    "topics, so its own group, e.g. table: raw_{topic}, consumer_group: lake_{topic}) and lands "
                    "topic_pattern's or topics' topics"
                )
        if self.topic is None and any(len(item.split("/")) != 3 for item in self.allocate_message_queue_list or []):
            raise ValueError(
                "allocate_message_queue_list: with topics or topic_pattern, name each queue as "
                "topic/broker_name/queue_id"
            )
        return self

    @field_validator("table_properties", mode="before")
    @classmethod
    def _table_property_texts(cls, value):
        """YAML's ``true`` and ``5`` as Delta writes them (``'true'``, ``'5'``)."""
        if isinstance(value, dict):
            return {
                k: str(v).lower() if isinstance(v, bool) else str(v) if isinstance(v, (int, float)) else v
                for k, v in value.items()
            }
        return value

    @field_validator("table_properties")
    @classmethod
    def _table_properties(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", key):
                raise ValueError(
                    f"table property name {key!r} is not allowed: letters, digits, '_', '.' and '-' "
                    "(e.g. delta.enableChangeDataFeed)"
                )
            if key.lower() in REFUSED_TABLE_PROPERTIES:
                raise ValueError(f"table property {key}: {REFUSED_TABLE_PROPERTIES[key.lower()]}")
            if key.lower() in SPARK_RESERVED_PROPERTIES:
                raise ValueError(
                    f"table property {key} is reserved by Spark, which sets it itself and refuses it "
                    f"({', '.join(sorted(SPARK_RESERVED_PROPERTIES))}): remove it, or use a name of your "
                    "own"
                )
            if any(c in text for c in "'\\\n"):
                raise ValueError(
                    f"table property {key}: the value {text!r} holds a quote, backslash or line break, "
                    "which rocketlake does not pass on to Delta; write the value without them"
                )
        return value

    @field_validator("consume_timestamp")
    @classmethod
    def _consume_timestamp(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                if not re.fullmatch(r"\d{14}", value):
                    raise ValueError
                datetime.strptime(value, "%Y%m%d%H%M%S")
            except ValueError:
                # The text of DefaultMQPushConsumerImpl.checkConfig, so users can search for it.
                raise ValueError("is invalid, the valid format is yyyyMMddHHmmss") from None
        return value

    @field_validator("table")
    @classmethod
    def _table(cls, value: str) -> str:
        # The table name is also the Dagster asset key and the table's folder: keep it to what all of them accept.
        # ``{topic}`` makes it a table per topic (``engine.topic_tables``), named from each topic's letters.
        if not re.fullmatch(TABLE_NAME, value.replace(TOPIC_FIELD, "t", 1)):
            raise ValueError(
                "must be name or database.name, each matching [A-Za-z_][A-Za-z0-9_]* (it is the Dagster asset "
                "key, the table's folder and, with a database, its name in Spark's catalog)"
            )
        return value

    @field_validator("allocate_message_queue_list")
    @classmethod
    def _queue_list(cls, value: list[str] | None) -> list[str] | None:
        for item in value or []:
            parts = item.split("/")
            if len(parts) not in (2, 3) or not parts[-1].isdigit() or not all(parts[:-1]):
                raise ValueError(
                    f"item {item!r} is not a queue: write broker_name/queue_id (e.g. broker-a/3), or "
                    "topic/broker_name/queue_id for another subscribed topic"
                )
        return value

    @field_validator("machine_room_resolver")
    @classmethod
    def _resolver(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[\w.]+:[\w.]+", value):
            raise ValueError(
                "must be an import path module:attribute (an object or class with "
                "broker_deploy_in(queue) and consumer_deploy_in(client_id))"
            )
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> "IngestionConfig":
        if self.consume_thread_min > self.consume_thread_max:
            raise ValueError(
                f"consume_thread_min ({self.consume_thread_min}) is larger than consume_thread_max "
                f"({self.consume_thread_max})"
            )
        strategy = self.allocate_message_queue_strategy
        if strategy is AllocateStrategy.CONFIG and not self.allocate_message_queue_list:
            raise ValueError(
                "allocate_message_queue_strategy CONFIG needs allocate_message_queue_list, the queues "
                "this member takes (broker_name/queue_id items)"
            )
        if strategy is AllocateStrategy.MACHINE_ROOM and not self.consumer_machine_rooms:
            raise ValueError(
                "allocate_message_queue_strategy MACHINE_ROOM needs consumer_machine_rooms, the rooms "
                "whose brokers (named room@broker) this member's group consumes"
            )
        if self.machine_room_nearby_strategy is AllocateStrategy.MACHINE_ROOM_NEARBY:
            raise ValueError(
                "machine_room_nearby_strategy: MACHINE_ROOM_NEARBY cannot wrap itself; choose AVG, "
                "AVG_BY_CIRCLE, CONFIG, MACHINE_ROOM or CONSISTENT_HASH"
            )
        used = {
            "allocate_message_queue_list": AllocateStrategy.CONFIG,
            "consumer_machine_rooms": AllocateStrategy.MACHINE_ROOM,
            "machine_room_resolver": AllocateStrategy.MACHINE_ROOM_NEARBY,
            "machine_room_nearby_strategy": AllocateStrategy.MACHINE_ROOM_NEARBY,
            "virtual_node_count": AllocateStrategy.CONSISTENT_HASH,
        }
        for key, needs in used.items():
            # A key that changes nothing is refused: it only applies with its strategy (or as NEARBY's inner one).
            inner = self.machine_room_nearby_strategy if strategy is AllocateStrategy.MACHINE_ROOM_NEARBY else None
            if key in self.model_fields_set and needs not in (strategy, inner):
                raise ValueError(
                    f"{key} applies only with allocate_message_queue_strategy {needs.value} "
                    f"(this ingestion uses {strategy.value}); remove it"
                )
        self._listener_checks()
        self._deadline_checks()
        if (
            self.message_model is MessageModel.BROADCASTING
            and "allocate_message_queue_strategy" in self.model_fields_set
        ):
            raise ValueError(
                "allocate_message_queue_strategy applies to CLUSTERING only: in BROADCASTING every "
                "member takes every queue; remove it"
            )
        return self

    def _deadline_checks(self) -> None:
        """The run's deadline against what must fit in it, or outlast it."""
        if self.listener is not None and self.run_timeout < self.consume_timeout:
            raise ValueError(
                f"run_timeout: {self.run_timeout:g} is below consume_timeout ({self.consume_timeout:g} "
                f"min): one listener call could outlast the run; allowed: run_timeout >= "
                f"{self.consume_timeout:g}"
            )
        hours = self.vacuum_retention_hours
        if hours is not None and hours * 60 < self.run_timeout:
            # Another member's run (or this table's dead-letter run) may read a snapshot as old as its start; a
            # VACUUM that deletes that snapshot's files under it fails it, or worse.
            raise ValueError(
                f"vacuum_retention_hours: {hours} is below run_timeout ({self.run_timeout:g} min): "
                "VACUUM could delete files a run of another member still reads; allowed: "
                f"vacuum_retention_hours >= {math.ceil(self.run_timeout / 60)} (or a shorter run_timeout)"
            )

    def _listener_checks(self) -> None:
        """Listener settings change something only where a listener (or a decoding that can fail) runs."""
        if self.listener is not None and not re.fullmatch(r"[\w.]+:[\w.]+", self.listener):
            raise ValueError(f"listener {self.listener!r} must be an import path package.module:function")
        for key in ("consume_thread_min", "consume_thread_max", "consume_timeout", "consume_message_batch_max_size"):
            if key in self.model_fields_set and self.listener is None:
                raise ValueError(f"{key} applies only to a listener (set listener: package.module:function); remove it")
        if self.listener is not None and self.body.format == "variant":
            raise ValueError(
                f"a listener ({self.listener}) with body.format variant is not supported yet: listeners get a "
                "message's columns in Python, where Spark does not hand VARIANT values over; use format json with "
                "a schema, or no listener"
            )
        vectorised = self.listener_is_vectorized  # loads the listener: one that cannot be imported fails here
        if vectorised and self.consume_orderly:
            raise ValueError(
                f"a vectorised listener ({self.listener}) with consume_orderly: true is not supported yet: "
                "orderly queues are consumed message batch by message batch, in offset order; use a "
                "per-batch listener (fn(messages, context) -> ConsumeOrderlyStatus)"
            )
        if "suspend_current_queue_time_millis" in self.model_fields_set and not (
            self.consume_orderly and self.can_fail
        ):
            raise ValueError(
                "suspend_current_queue_time_millis applies only to consume_orderly: true ingestions whose "
                "messages can fail (a listener, or a body.format that can fail to decode); remove it"
            )
        if "consume_message_batch_max_size" in self.model_fields_set and vectorised:
            raise ValueError(
                f"consume_message_batch_max_size applies to per-batch listeners; {self.listener} is "
                "vectorised and gets whole Arrow batches (bounded by pull_threshold_for_queue); remove it"
            )
        if "max_reconsume_times" in self.model_fields_set and not self.can_fail:
            raise ValueError(
                "max_reconsume_times applies only when a message can fail: with a listener, or a body.format "
                "(json, text) that can fail to decode; remove it"
            )
        if "max_reconsume_times" in self.model_fields_set and self.message_model is MessageModel.BROADCASTING:
            raise ValueError(
                "max_reconsume_times applies to CLUSTERING only: in BROADCASTING a failed message is "
                "not sent back (as in RocketMQ), it lands in the failures table; remove it"
            )

    @property
    def listener_is_vectorized(self) -> bool:
        """Whether the listener is ``@vectorized``; loads it, so a listener that cannot be imported fails at load."""
        if self.listener is None:
            return False
        from rocketlake.engine.listener import Vectorized, load_listener

        return isinstance(load_listener(self.listener), Vectorized)

    @property
    def dead_letters_of(self) -> str | None:
        """For the dead-letter ingestion (``dead_letter_config``): the topic of the ingestion whose DLQ it lands."""
        return self._dead_letters_of

    @property
    def membership_topic(self) -> str | None:
        """The topic whose brokers list the group's members (the members subscribe to it, not to the DLQ); None
        for a pattern, whose topics are known only from the name server (``topics.membership_topic_of``)."""
        members = self._dead_letters_cfg or self
        return members.topic_names[0] if members.topic_names else None

    @property
    def members_config(self) -> IngestionConfig:
        """The ingestion whose members heartbeat for this one: itself, or for ``<table>_dlq`` the main ingestion."""
        return self._dead_letters_cfg or self

    @property
    def namespace(self) -> str | None:
        """Its cluster's namespace: its topics and group are wrapped in it (``in_namespace``)."""
        return self._namespace

    def plain(self, name: str) -> str:
        """A topic or group as users name it: without the cluster's namespace (``ns%orders`` -> ``orders``)."""
        prefix = f"{self._namespace}%" if self._namespace else None
        return name[len(prefix) :] if prefix and name.startswith(prefix) else name

    @property
    def catalog_table(self) -> str | None:
        """``database.name`` when ``table`` names a table of Spark's catalog, else None (a table by path alone)."""
        return self.table if "." in self.table else None

    @property
    def table_key_path(self) -> tuple[str, ...]:
        """The table's Dagster asset key path: ``("orders",)``, or ``("sales", "orders")`` for ``sales.orders``."""
        return tuple(self.table.split("."))

    @property
    def topic_names(self) -> tuple[str, ...]:
        """The topics named in the configuration (``topic`` or ``topics``); none for a pattern."""
        return (self.topic,) if self.topic is not None else tuple(self.topics)

    @property
    def topic_label(self) -> str:
        """The topics, as logs and descriptions name them."""
        if self.topic_pattern is not None:
            return f"topics matching /{self.topic_pattern}/"
        return ", ".join(self.topic_names)

    @property
    def can_fail(self) -> bool:
        """A message of this ingestion can fail: a listener may reject it, or its body may not decode."""
        return self.listener is not None or self.body.format != "raw"

    @property
    def consume_timeout_seconds(self) -> float:
        return self.consume_timeout * 60

    @property
    def run_timeout_seconds(self) -> float:
        return self.run_timeout * 60

    def not_supported_yet(self) -> list[str]:
        """'key: value is not supported yet (why); what to do' for every setting in the file rocketlake does
        not honour yet."""

        def shown(value: Any) -> str:
            return repr(getattr(value, "value", value))  # an enum as the user wrote it

        refused = [
            f"{key}: {shown(getattr(self, key))} is not supported yet ({why}); remove the key"
            for key, why in NOT_SUPPORTED_YET.items()
            if key in self.model_fields_set
        ]
        for (key, value), (why, instead) in NOT_SUPPORTED_VALUES.items():
            current = getattr(self, key)
            if getattr(current, "value", current) == value:
                refused.append(f"{key}: {value!r} is not supported yet ({why}); {instead}")
        return refused

    @property
    def effective_max_reconsume_times(self) -> int:
        if self.max_reconsume_times != -1:
            return self.max_reconsume_times
        return 2**31 - 1 if self.consume_orderly else 16

    def consume_from_timestamp_ms(self, now: datetime) -> int:
        """consumeTimestamp in epoch ms: the configured time in the window's zone, else 30 minutes ago."""
        if self.consume_timestamp is None:
            return int((now - timedelta(minutes=30)).timestamp() * 1000)
        local = datetime.strptime(self.consume_timestamp, "%Y%m%d%H%M%S").replace(tzinfo=ZoneInfo(self.window.timezone))
        return int(local.timestamp() * 1000)

    def per_queue_limits(self, queue_count: int) -> tuple[int, int]:
        """(messages, bytes) one task may hold for one queue.

        Topic-wide limits become per-queue limits as ``max(1, topic_limit / queue_count)``, the
        way the push consumer divides them across the queues it holds; the tighter one wins.
        """
        messages = self.pull_threshold_for_queue
        size_mib = self.pull_threshold_size_for_queue
        if self.pull_threshold_for_topic != -1 and queue_count:
            messages = min(messages, max(1, self.pull_threshold_for_topic // queue_count))
        if self.pull_threshold_size_for_topic != -1 and queue_count:
            size_mib = min(size_mib, max(1, self.pull_threshold_size_for_topic // queue_count))
        return messages, size_mib * 1024 * 1024


def in_namespace(cfg: IngestionConfig, namespace: str) -> IngestionConfig:
    """``cfg`` with its topics and group wrapped in ``namespace`` (RocketMQ's ``NamespaceUtil.wrapNamespace``, the
    first form: ``ns%name``), as the brokers know them; ValueError when a wrapped name breaks RocketMQ's rules."""

    def wrapped(name: str) -> str:
        return name if name.startswith(f"{namespace}%") else f"{namespace}%{name}"

    topic = wrapped(cfg.topic) if cfg.topic is not None else None
    topics = [wrapped(t) for t in cfg.topics]
    group = wrapped(cfg.consumer_group)
    try:
        for name in (t for t in [topic, *topics] if t is not None):
            check_topic(name)
        check_consumer_group(group.replace(TOPIC_FIELD, "t", 1))
    except InvalidName as e:
        raise ValueError(f"with the cluster's namespace {namespace!r}: {e}") from None
    namespaced = cfg.model_copy(update={"topic": topic, "topics": topics, "consumer_group": group})
    namespaced._namespace = namespace
    return namespaced


def dead_letter_config(cfg: IngestionConfig) -> IngestionConfig:
    """The ingestion of ``%DLQ%<group>`` into ``<table>_dlq``: same group, cluster, windows and members; raw bodies
    (a dead letter is kept as it was, decodable or not), no listener, from the queue's first offset (a dead letter
    is never skipped), no retry topic."""
    dlq = cfg.model_copy(
        update={
            "topic": DLQ_GROUP_TOPIC_PREFIX + cfg.consumer_group,
            "table": f"{cfg.table}_dlq",
            "subscription": "*",
            "topics": [],
            "topic_pattern": None,
            "body": BodyConfig(),
            "listener": None,
            "consume_orderly": False,
            "layout": LayoutConfig(),
            "consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        }
    )
    dlq._dead_letters_of = cfg.topic_label
    dlq._dead_letters_cfg = cfg
    return dlq
