"""Tables named in Spark's catalog (``table: database.name``): the table lives at its path in the lake, as every
table does, and the catalog names it there.

Everything rocketlake does to a table (the landing's replace, the ledger in its commits, compaction, VACUUM, the
sensors' reads with delta-rs) goes by path, so a catalog table behaves exactly as a table by path. What the catalog
adds is the name users query (``SELECT ... FROM sales.orders``): the first landing creates the table at its path,
then registers it, as an external table, under that name (``CREATE TABLE ... USING DELTA LOCATION``); a later run
finds it there. A name the catalog already gives to another location, or to a table that is not Delta, is refused
before anything is written: landing at the configured path would leave users querying other data under that name.

Which catalog: the session's. The local runtime's Spark Connect server keeps a metastore of its own (Derby, under
its state directory), so names outlive the server; a run that starts its own Spark has the in-memory catalog
unless its ``spark.conf`` names a metastore, and registers the table again in each session.
"""

from __future__ import annotations

from pyspark.sql import SparkSession


class CatalogConflict(ValueError):
    """The catalog's table of that name is not the table rocketlake lands."""


def _identifier(name: str) -> str:
    return ".".join(f"`{part}`" for part in name.split("."))


def _same_place(a: str, b: str) -> bool:
    def plain(location: str) -> str:
        for prefix in ("file://", "file:"):
            if location.startswith(prefix):
                location = location[len(prefix) :]
                break
        return location.rstrip("/")

    return plain(a) == plain(b)


def catalog_entry(spark: SparkSession, name: str) -> tuple[str, str] | None:
    """``(provider, location)`` of the catalog's table ``name``, or None when the catalog has no such table."""
    if not spark.catalog.tableExists(name):
        return None
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {_identifier(name)}").collect()
    described = {row[0].strip(): (row[1] or "").strip() for row in rows if row[0]}
    return described.get("Provider", "").lower(), described.get("Location", "")


def catalog_refusal(entry: tuple[str, str] | None, name: str, path: str) -> str | None:
    """Why ``name`` cannot be landed at ``path`` given its catalog ``entry`` (``catalog_entry``), or None."""
    if entry is None:
        return None
    provider, location = entry
    if provider != "delta":
        return (
            f"table {name}: the catalog's {name} is a {provider or 'non-Delta'} table, not Delta; rocketlake lands "
            f"Delta tables: drop it, or name another table"
        )
    if not _same_place(location, path):
        return (
            f"table {name}: the catalog's {name} is at {location}, but this lake puts it at {path}; "
            f"point lake.root at the table's location, or drop the catalog's entry (DROP TABLE {name} on an "
            "external table keeps its files)"
        )
    return None


def check_catalog(spark: SparkSession, name: str, path: str) -> bool:
    """Raise ``CatalogConflict`` when the catalog names ``name`` elsewhere; True when it has the table already."""
    entry = catalog_entry(spark, name)
    refusal = catalog_refusal(entry, name, path)
    if refusal is not None:
        raise CatalogConflict(refusal)
    return entry is not None


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def register(spark: SparkSession, name: str, path: str) -> None:
    """Name the Delta table at ``path`` as ``name`` in the session's catalog: an external table, whose schema and
    properties Delta reads from the table's log. A database the catalog lacks is created at the folder that holds
    the table (``<lake.root>/<database>``), not in the session's warehouse, which is the working directory's
    ``spark-warehouse`` unless configured."""
    database, _ = name.split(".")
    folder = path.rstrip("/").rsplit("/", 1)[0]
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}` LOCATION {_sql_string(folder)}")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {_identifier(name)} USING DELTA LOCATION {_sql_string(path)}")
