"""What a project landed from one local cluster: the tables ``rocketlake local down --wipe`` must delete with its store.

Their ledgers would refuse the new, empty store (``LedgerAheadOfBroker``), so they go with it; tables landed from
any other cluster (the demo's, while a test harness wipes its own) stay. Each ledger entry names the name server
it was read from (``LedgerEntry.namesrv``); a failures table follows its ingestion's table.
"""

from __future__ import annotations

from pathlib import Path

from rocketlake.delta.ledger_log import source_of
from rocketlake.engine.failures import failures_table


def _addresses(namesrv: str) -> set[str]:
    return {a.strip().replace("localhost:", "127.0.0.1:") for a in namesrv.split(";") if a.strip()}


def landed_from(lake_root: Path, namesrv: str) -> list[Path]:
    """The table folders under ``lake_root`` landed from the cluster at ``namesrv``, with their failures tables."""
    if not lake_root.is_dir():
        return []
    wiped = _addresses(namesrv)
    tables = {p.name: p for p in sorted(lake_root.iterdir()) if (p / "_delta_log").is_dir()}
    chosen = {name for name, path in tables.items() if _addresses(source_of(path) or "") & wiped}
    chosen |= {failures_table(name) for name in chosen if failures_table(name) in tables}
    return [tables[name] for name in sorted(chosen)]
