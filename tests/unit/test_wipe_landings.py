"""``rocketlake local down --wipe`` deletes only what was landed from the wiped cluster (ledger entries name it)."""

from __future__ import annotations

from pathlib import Path

from rocketlake.cli.local import _wipe_local_landings
from tests.unit.support import land_table

OURS, DEMO = "127.0.0.1:19876", "127.0.0.1:9876"


def project(root: Path, tables: dict[str, str | None]) -> Path:
    for name, namesrv in tables.items():
        land_table(root / ".rocketlake/lake" / name, namesrv)
    (root / ".rocketlake/dagster").mkdir(parents=True)
    return root


def test_a_wipe_keeps_another_clusters_tables_and_the_dagster_instance_that_recorded_them(tmp_path, monkeypatch):
    monkeypatch.chdir(project(tmp_path, {"orders": OURS, "orders_failures": None, "demo": DEMO, "foreign": None}))
    assert _wipe_local_landings(OURS) == [".rocketlake/lake/orders", ".rocketlake/lake/orders_failures"]
    assert sorted(p.name for p in Path(".rocketlake/lake").iterdir()) == ["demo", "foreign"]
    assert Path(".rocketlake/dagster").is_dir()
    assert _wipe_local_landings("127.0.0.1:29876") == []  # nothing landed from that one


def test_the_dagster_instance_goes_with_the_last_table_of_the_lake(tmp_path, monkeypatch):
    monkeypatch.chdir(project(tmp_path, {"orders": "localhost:19876", "audit": OURS}))
    assert _wipe_local_landings(OURS) == [".rocketlake/lake/audit", ".rocketlake/lake/orders", ".rocketlake/dagster"]
    assert list(Path(".rocketlake").iterdir()) == []
