"""A whole ``rocketlake.yaml``: read, validated, and its problems named one per line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from rocketlake.engine.config.clusters import ClusterConfig
from rocketlake.engine.config.common import CONFIG_ENV, DEFAULT_CONFIG, ConfigError, _Strict
from rocketlake.engine.config.ingestion import IngestionConfig, in_namespace
from rocketlake.engine.config.lake import LakeConfig, SparkConfig

# One definition of each, the wire's: a config value is the name the Java client and the broker use.


class RocketLakeConfig(_Strict):
    """A whole ``rocketlake.yaml``, validated: its clusters, lake, Spark and ingestions (``load_config`` reads one)."""

    clusters: dict[str, ClusterConfig]
    lake: LakeConfig = LakeConfig()
    spark: SparkConfig = SparkConfig()
    ingestions: dict[str, IngestionConfig] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _references(self) -> "RocketLakeConfig":
        problems = []
        tables: dict[str, str] = {}
        for name, ing in self.ingestions.items():
            if ing.cluster not in self.clusters:
                problems.append(
                    f"ingestions.{name}.cluster: {ing.cluster!r} is not one of the clusters {sorted(self.clusters)}"
                )
            if ing.table in tables:
                problems.append(
                    f"ingestions.{name}.table: {ing.table!r} is already the table of ingestion "
                    f"{tables[ing.table]!r}; each ingestion needs its own table"
                )
            tables[ing.table] = name
        for name, ing in self.ingestions.items():
            database, _, table = ing.table.partition(".")
            for clash, why in ((database, "folder"), (ing.table.replace(".", "__"), "job and sensor names")):
                if table and clash in tables:
                    problems.append(
                        f"ingestions.{name}.table: {ing.table!r} and the table {clash!r} of ingestion "
                        f"{tables[clash]!r} would share their {why}; rename one of them"
                    )
        for name, ing in list(self.ingestions.items()):
            cluster = self.clusters.get(ing.cluster)
            if cluster is not None and cluster.namespace is not None and ing.namespace is None:
                try:
                    self.ingestions[name] = in_namespace(ing, cluster.namespace)
                except ValueError as e:
                    problems.append(f"ingestions.{name}: {e}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def catalog_tables(self) -> list[str]:
        """The tables named in Spark's catalog (``database.name``), their dead letters' among them."""
        named = [ing.catalog_table for ing in self.ingestions.values() if ing.catalog_table]
        return [t for n in named for t in (n, f"{n}_dlq")]


def config_path(path: str | os.PathLike | None = None) -> Path:
    return Path(path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)


def load_config(path: str | os.PathLike | None = None) -> RocketLakeConfig:
    """Read and validate the configuration (``$ROCKETLAKE_CONFIG`` or ``rocketlake.yaml``)."""
    source = config_path(path)
    try:
        raw = yaml.safe_load(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(str(source), [f"file not found (set {CONFIG_ENV} or create {DEFAULT_CONFIG})"]) from None
    except IsADirectoryError:
        raise ConfigError(
            str(source), [f"is a directory, not a file: name the YAML file in it (set {CONFIG_ENV} to it, or --config)"]
        ) from None
    except PermissionError:
        raise ConfigError(
            str(source),
            [
                "cannot be read by this user (permission denied): make it readable to "
                "the process that runs rocketlake (Dagster's code server and runs too)"
            ],
        ) from None
    except OSError as e:
        raise ConfigError(str(source), [f"cannot be read: {e.strerror or e}"]) from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            str(source), [f"is not UTF-8 text (byte 0x{e.object[e.start]:02x} at position {e.start}): save it as UTF-8"]
        ) from None
    except yaml.YAMLError as e:
        raise ConfigError(str(source), [f"not valid YAML: {e}"]) from None
    return parse_config(raw, str(source))


def parse_config(raw: Any, source: str = "<config>") -> RocketLakeConfig:
    if not isinstance(raw, dict):
        raise ConfigError(source, ["the file must be a mapping with 'clusters' and 'ingestions'"])
    try:
        config = RocketLakeConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(source, [_describe(err, raw) for err in e.errors()]) from None
    refused = [
        f"ingestions.{name}.{problem}"
        for name, ingestion in config.ingestions.items()
        for problem in ingestion.not_supported_yet()
    ]
    if refused:
        raise ConfigError(source, refused)
    return config


def _describe(err: dict, raw: Any) -> str:
    """'ingestions.orders.pull_batch_size: 5000 is out of range [1, 1024]' from a pydantic error."""
    loc = [str(p) for p in err["loc"]]
    where = ".".join(loc) or "(top level)"
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return f"{where}: unknown key (misspelt? every accepted key: docs/reference/configuration.md, `make docs`)"
    if err["type"] == "missing":
        return f"{where}: required key is missing"
    if err["type"] == "enum":
        allowed = err.get("ctx", {}).get("expected", "")
        return f"{where}: {err.get('input')!r} is not allowed; allowed: {allowed}"
    if "input" in err and not isinstance(err["input"], dict):
        joiner = " " if message.startswith(("is ", "must", "needs")) else ": "
        return f"{where}: {err['input']!r}{joiner}{message}"
    return f"{where}: {message}"
