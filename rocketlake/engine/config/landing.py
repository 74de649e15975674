"""How messages land: the windows, the body's decoding and the table's layout."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ConfigDict, Field, field_validator, model_validator

from rocketlake.engine.config.common import _Strict, _template

# One definition of each, the wire's: a config value is the name the Java client and the broker use.

#: five fields of numbers, names, ``*``, ranges, steps and lists (and Quartz's ``?``, ``L``, ``W``, ``#``)
CRON_SHAPE = re.compile(r"[\w*?/,#-]+(\s+[\w*?/,#-]+){4}")
CRON_PROBLEM = "is not a valid cron expression (5 fields, e.g. '0 * * * *' or '* * * * *')"


class WindowConfig(_Strict):
    cron: str = "0 * * * *"
    timezone: str = "UTC"
    grace_seconds: int = Field(default=60, ge=0, le=7 * 24 * 3600)
    # How long after close + grace a window may take to land before the `fresh` check fails.
    freshness_slack_seconds: int = Field(default=300, ge=0, le=7 * 24 * 3600)
    start: datetime

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        if _template(value):
            return value
        # Its shape only: what each field may hold is Dagster's to say, whose partitions the windows are; the
        # definitions check it with Dagster's own parser (``dagster.partitions.check_crons``), naming this key.
        if not CRON_SHAPE.fullmatch(value.strip()):
            raise ValueError(CRON_PROBLEM)
        return value

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        if _template(value):
            return value
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise ValueError("is not an IANA time zone (e.g. UTC, Europe/Berlin)") from e
        return value

    @field_validator("start")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


class BodyConfig(_Strict):
    format: Literal["raw", "text", "json", "variant", "avro", "protobuf"] = Field(
        default="raw",
        description="`raw`: the body's bytes only. `text`: also `body_text`, the body as UTF-8. `json`: `schema`'s "
        "fields as columns (and more with `evolve`). `variant`: the JSON body as one VARIANT column, "
        "`body_variant` (Spark's `parse_json`), whatever its fields: schemaless JSON lands without inference, "
        "and is read with `variant_get(body_variant, '$.field', 'type')` or `body_variant:field`. `avro`: "
        "`schema_file`'s fields as columns. `protobuf`: the fields of `message_name` in `descriptor_file` as "
        "columns, with the types Spark's `from_protobuf` gives them, decoded in the reader. A body that does not "
        "decode is a failed message.",
    )
    schema_: str | None = Field(
        default=None, alias="schema", description="Spark DDL of the JSON body, e.g. 'a STRING'."
    )
    evolve: Literal["none", "add_columns"] = Field(
        default="none",
        description="JSON bodies only. `add_columns`: a top-level or nested field the table lacks becomes a new "
        "column, with the type Spark's JSON inference gives it over the run's bodies, in the same Delta "
        "commit as the window it arrived in (earlier rows hold null there). The table's columns then "
        "bind: a body whose field holds a value of another type is a failed message (sent to the retry "
        "topic, then the dead-letter queue, and counted), not a null. Fields whose name Delta cannot "
        "store, or that match a column only up to case, stay in `body` and are named in the run's log. "
        "With `add_columns`, `schema` may be left out: every column then comes from the bodies. "
        "`none`: only `schema`'s fields are columns; other fields stay in `body`.",
    )

    schema_file: str | None = Field(
        default=None,
        description="format avro: the writer schema, an Avro record schema file (.avsc), relative to the project "
        "directory. Its fields become columns (Spark's from_avro types).",
    )
    encoding: Literal["binary", "single_object"] = Field(
        default="binary",
        description="format avro: `binary`, the record's Avro binary encoding alone; `single_object`, Avro's "
        "single-object encoding (C3 01, the schema's 8-byte CRC-64-AVRO fingerprint, then the binary "
        "encoding), whose fingerprint must be schema_file's.",
    )

    descriptor_file: str | None = Field(
        default=None,
        description="format protobuf: a descriptor set file (`protoc --include_imports --descriptor_set_out=FILE`), "
        "relative to the project directory, as `from_protobuf` takes it.",
    )
    message_name: str | None = Field(
        default=None,
        description="format protobuf: the full name of the bodies' message type in descriptor_file "
        "(`package.Message`). Its fields become columns.",
    )

    framing: Literal["none", "confluent"] = Field(
        default="none",
        description="`confluent`: each body is framed in Confluent's wire format (a magic byte 0, the schema's id "
        "in 4 bytes, for Protobuf the message-index list), as the Confluent serializers write it; the frame is "
        "checked against `registry_url` or `schemas_dir` and removed before decoding. A body without a frame, with "
        "an id the registry does not hold, or framed as another message, is a failed message; a registry that "
        "cannot be reached fails the window. With format protobuf, avro (each id's schema must be schema_file) or json.",
    )
    registry_url: str | None = Field(
        default=None,
        description="framing confluent: the schema registry (Confluent's REST API: `GET /schemas/ids/{id}`), e.g. "
        "http://127.0.0.1:8081 or Apicurio's http://host:8080/apis/ccompat/v7. Each id is looked up once a process.",
    )
    schemas_dir: str | None = Field(
        default=None,
        description="framing confluent, offline: instead of registry_url, a directory with one file a schema, named "
        "by its id (`42.proto`, `42.avsc`, ...), relative to the project directory.",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def registry_options(self) -> dict[str, str]:
        """The source's options of ``framing`` (none: no option)."""
        if self.framing == "none":
            return {}
        where = {"schemaRegistryUrl": self.registry_url} if self.registry_url else {"schemaDirectory": self.schemas_dir}
        return {"framing": self.framing, **where}

    def protobuf_descriptor_set(self) -> bytes:
        """The bytes of ``descriptor_file`` (format protobuf)."""
        return Path(self.descriptor_file).read_bytes()

    def avro_schema(self) -> str:
        """The text of ``schema_file`` (format avro), as ``from_avro`` takes it."""
        return Path(self.schema_file).read_text()

    @model_validator(mode="after")
    def _avro_needs_a_record_schema(self) -> "BodyConfig":
        if self.format == "variant" and (self.schema_ is not None or self.evolve != "none"):
            raise ValueError(
                "format variant lands the whole JSON body as one VARIANT column (body_variant): remove schema and "
                "evolve, or use format json for columns of their own"
            )
        if self.format != "avro":
            for key in ("schema_file", "encoding"):
                if key in self.model_fields_set:
                    raise ValueError(f"{key} applies to format avro only (format is {self.format!r}); remove it")
            return self
        if self.schema_ is not None or self.evolve != "none":
            raise ValueError("format avro takes its columns from schema_file (an .avsc file): remove schema and evolve")
        if not self.schema_file:
            raise ValueError("format avro needs schema_file, the writer schema (an Avro record schema, .avsc)")
        try:
            parsed = json.loads(self.avro_schema())
        except OSError as e:
            raise ValueError(
                f"schema_file {self.schema_file!r} cannot be read ({e.strerror}); give a path relative "
                "to the project directory"
            ) from None
        except ValueError as e:
            raise ValueError(f"schema_file {self.schema_file!r} is not JSON: {e}") from None
        if not isinstance(parsed, dict) or parsed.get("type") != "record" or not parsed.get("fields"):
            raise ValueError(
                f"schema_file {self.schema_file!r} is not an Avro record schema with fields (its "
                "fields become the table's columns)"
            )
        from rocketlake.engine.avro import schema_problem

        problem = schema_problem(parsed)
        if problem:
            raise ValueError(f"schema_file {self.schema_file!r} is not a valid Avro schema: {problem}")
        from rocketlake.engine.columns import OWN_COLUMNS

        clashes = sorted({f.get("name") for f in parsed["fields"]} & OWN_COLUMNS)
        if clashes:
            raise ValueError(
                f"schema_file {self.schema_file!r}: fields {clashes} clash with rocketlake's own columns; rename them"
            )
        return self

    @model_validator(mode="after")
    def _framing_needs_a_registry(self) -> "BodyConfig":
        if self.framing == "none":
            for key in ("registry_url", "schemas_dir"):
                if key in self.model_fields_set:
                    raise ValueError(f"{key} applies to framing confluent only; remove it, or set framing: confluent")
            return self
        if self.format not in ("protobuf", "avro", "json"):
            raise ValueError(
                f"framing confluent with format {self.format} is not supported yet (formats protobuf, avro and json "
                "are); land such bodies with format raw"
            )
        if self.evolve != "none":
            raise ValueError(
                "framing confluent with evolve is not supported yet: the columns come from schema; remove evolve"
            )
        if (self.registry_url is None) == (self.schemas_dir is None):
            raise ValueError("framing confluent needs one of registry_url (a schema registry) or schemas_dir (offline)")
        if self.registry_url is not None and not re.fullmatch(r"https?://[^/\s]+(/\S*)?", self.registry_url):
            raise ValueError(f"registry_url {self.registry_url!r} is not an http:// or https:// URL")
        if self.schemas_dir is not None and not Path(self.schemas_dir).is_dir():
            raise ValueError(f"schemas_dir {self.schemas_dir!r} is not a directory")
        return self

    @model_validator(mode="after")
    def _protobuf_needs_a_message(self) -> "BodyConfig":
        if self.format != "protobuf":
            for key in ("descriptor_file", "message_name"):
                if key in self.model_fields_set:
                    raise ValueError(f"{key} applies to format protobuf only (format is {self.format!r}); remove it")
            return self
        if self.schema_ is not None or self.evolve != "none":
            raise ValueError(
                "format protobuf takes its columns from message_name in descriptor_file: remove schema and evolve "
                "(a newer descriptor's fields become columns as they arrive)"
            )
        if not self.descriptor_file or not self.message_name:
            raise ValueError(
                "format protobuf needs descriptor_file (protoc --include_imports --descriptor_set_out=FILE) and "
                "message_name (package.Message)"
            )
        from rocketlake.engine.columns import OWN_COLUMNS
        from rocketlake.engine.protobuf import (
            ProtobufSchemaError,
            kept_fields,
            load_descriptor_set,
            message_descriptor,
            struct_of,
        )

        try:
            message = message_descriptor(load_descriptor_set(self.descriptor_file), self.message_name)
            struct_of(message)
        except ProtobufSchemaError as e:
            raise ValueError(f"descriptor_file {self.descriptor_file!r}: {e}") from None
        clashes = sorted({f.name for f, _ in kept_fields(message)} & OWN_COLUMNS)
        if clashes:
            raise ValueError(
                f"message {self.message_name}: fields {clashes} clash with rocketlake's own columns; rename them"
            )
        return self

    @model_validator(mode="after")
    def _json_needs_schema(self) -> "BodyConfig":
        if self.evolve != "none" and self.format != "json":
            raise ValueError(
                f"evolve {self.evolve!r} applies to format json only (format is {self.format!r}); "
                "remove evolve, or set format: json"
            )
        if self.format == "json" and self.evolve == "none" and not (self.schema_ or "").strip():
            raise ValueError(
                'format json needs a schema (Spark DDL, e.g. "order_id STRING, amount DOUBLE"), or '
                "evolve: add_columns to take the columns from the bodies"
            )
        return self


#: Columns no layout may name: the day partition is always there (first), bytes and maps cannot partition or cluster.
LAYOUT_REFUSED = {
    "window_date": "it is always the table's first partition column",
    "body": "bytes cannot partition, cluster or Z-order a table",
    "properties": "a map cannot partition, cluster or Z-order a table",
}
#: Delta's limit on clustering columns.
MAX_CLUSTERING_COLUMNS = 4


class LayoutConfig(_Strict):
    """How the table's files are laid out (fixed when the table is created, except ``zorder_by``)."""

    partition_by: list[str] = Field(
        default_factory=list,
        description="Partition columns after window_date: window_hour (the UTC hour of the window's start), a "
        "column rocketlake lands (topic, broker_name, queue_id, tags, ...) or a field of the JSON body. "
        "Set when the table is created; a run refuses an existing table partitioned otherwise.",
    )
    cluster_by: list[str] = Field(
        default_factory=list,
        description="Delta liquid clustering on these columns (at most 4; window_date and window_hour allowed) "
        "instead of partitions: the table is created with CLUSTER BY, is not partitioned, and the "
        "compaction after a day closes is an OPTIMIZE that clusters what was written since. Not with "
        "partition_by or zorder_by.",
    )
    zorder_by: list[str] = Field(
        default_factory=list,
        description="The compaction of a day that is over Z-orders its files by these columns (OPTIMIZE ... "
        "ZORDER BY), so reads filtering on them skip files. Not a partition column.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> "LayoutConfig":
        for key in ("partition_by", "cluster_by", "zorder_by"):
            names = getattr(self, key)
            for name in names:
                if name in LAYOUT_REFUSED:
                    raise ValueError(f"{key}: {name!r} is not allowed ({LAYOUT_REFUSED[name]})")
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                    raise ValueError(
                        f"{key}: {name!r} is not a column name (letters, digits and '_'; nested fields "
                        "cannot lay out a table)"
                    )
            if len(set(names)) != len(names):
                raise ValueError(f"{key}: {names} names a column twice")
        if self.cluster_by and (self.partition_by or self.zorder_by):
            raise ValueError(
                "cluster_by cannot be combined with partition_by or zorder_by: a liquid-clustered Delta "
                "table is neither partitioned nor Z-ordered; choose one"
            )
        if len(self.cluster_by) > MAX_CLUSTERING_COLUMNS:
            raise ValueError(
                f"cluster_by: {self.cluster_by} names {len(self.cluster_by)} columns; Delta clusters "
                f"by at most {MAX_CLUSTERING_COLUMNS}"
            )
        both = sorted(set(self.partition_by) & set(self.zorder_by))
        if both:
            raise ValueError(
                f"zorder_by: {both} are partition columns, which Delta cannot Z-order by; remove them from zorder_by"
            )
        return self
