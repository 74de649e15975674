"""Plain-data helpers shared by the unit tests."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

from rocketlake.engine.config import IngestionConfig, parse_config

#: The smallest valid rocketlake.yaml: one ingestion ``orders`` (``with_ingestion`` changes its keys).
MINIMAL = {
    "clusters": {"local": {"namesrv": "127.0.0.1:9876"}},
    "ingestions": {
        "orders": {
            "cluster": "local",
            "topic": "orders",
            "consumer_group": "rocketlake_orders",
            "table": "orders_raw",
            "window": {"start": "2026-11-01T00:00:00Z"},
        }
    },
}


def with_ingestion(**changes) -> dict:
    raw = copy.deepcopy(MINIMAL)
    raw["ingestions"]["orders"].update(changes)
    return raw


def ingestion_config(**ingestion) -> IngestionConfig:
    """A valid ingestion ``orders`` (topic orders, group g, minute windows) with ``ingestion``'s keys on top."""
    return parse_config(
        {
            "clusters": {"local": {"namesrv": "127.0.0.1:9876"}},
            "ingestions": {
                "orders": {
                    "cluster": "local",
                    "topic": "orders",
                    "consumer_group": "g",
                    "table": "orders",
                    "window": {"cron": "* * * * *", "start": "1970-01-01"},
                    **ingestion,
                }
            },
        }
    ).ingestions["orders"]


@dataclass
class Recorded:
    """``ingest.RecordedRuns`` as plain data: the runs a caller recorded, per partition key (Dagster's part)."""

    runs: dict[str, set[str]] = field(default_factory=dict)  # partition key -> runs recorded for it
    asked: list[set[str]] = field(default_factory=list)

    def among(self, partition_keys):
        self.asked.append(set(partition_keys))
        return {run for key in partition_keys for run in self.runs.get(key, ())}

    def record(self, entry):
        for key in entry.partition_keys:
            self.runs.setdefault(key, set()).add(entry.run_id)


class Lines:
    """A run's log (``engine.run.RunLog``) kept as lines."""

    def __init__(self):
        self.lines: list[str] = []

    def info(self, msg):
        self.lines.append(msg)

    warning = info


def land_table(path: Path, namesrv: str | None) -> None:
    """A Delta table whose commit carries a ledger entry landed from ``namesrv`` (none: a table without a ledger)."""
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake

    from rocketlake.engine.ledger import LedgerEntry

    metadata = (
        {} if namesrv is None else {"userMetadata": LedgerEntry("orders", "g", "r1", (), namesrv=namesrv).to_json()}
    )
    write_deltalake(
        str(path), pa.table({"msg_id": ["m1"]}), commit_properties=CommitProperties(custom_metadata=metadata)
    )


#: The tests' .proto files (and Avro schemas): what users compile with protoc.
SCHEMAS = Path(__file__).resolve().parents[1] / "integration" / "schemas"


def descriptor_set(proto: str, out_dir: Path) -> Path:
    """``protoc --include_imports --descriptor_set_out`` of ``SCHEMAS/proto`` (grpcio-tools' protoc, with the
    well-known types it ships), written in ``out_dir``: the file a user hands ``body.descriptor_file``."""
    import grpc_tools
    from grpc_tools import protoc

    out = out_dir / f"{Path(proto).stem}.desc"
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = ["protoc", f"-I{SCHEMAS}", f"-I{well_known}", "--include_imports", f"--descriptor_set_out={out}", proto]
    assert protoc.main(args) == 0, f"protoc failed on {proto}"
    return out
