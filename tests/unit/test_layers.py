"""The layers of the package, as contracts on its import graph (read from the source with ``ast``: every import,
those inside functions included).

One subpackage per part of ``rocketlake/``, in layers. Top to bottom:

1. ``rocketlake`` itself (the front door, the code location module, the Component) and the command (``cli``);
2. the demo (``demo``) and the group member process (``member``);
3. Dagster's side (``dagster``: assets, schedules, sensors, checks, resources, executor, the warm launcher);
4. the local runtime (``local``), which starts what the layers below talk to;
5. the Spark side (``spark``: the data source, body decoding, the landing of a window, sessions);
6. the Delta side (``delta``: the writer, the ledger's reader, schema evolution, storage);
7. the engine (``engine``: the configuration, windows, planning, the ledger, the accounting, the run);
8. the RocketMQ wire client (``rocketmq``) and the jar resolver (``jars``).

A module imports from its own layer and the layers below, never above. The engine and the wire client import
neither Dagster nor Spark nor Delta, even through another module of the package; nothing below Dagster's side
imports Dagster.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "rocketlake"
#: top to bottom; a module belongs to the layer of its longest matching prefix
LAYERS = (
    ("rocketlake", "rocketlake.cli"),
    ("rocketlake.demo", "rocketlake.member"),
    ("rocketlake.dagster",),
    ("rocketlake.local",),
    ("rocketlake.spark",),
    ("rocketlake.delta",),
    ("rocketlake.engine",),
    ("rocketlake.rocketmq", "rocketlake.jars"),
)
FRAMEWORKS = ("dagster", "dagster_shared", "dagster_webserver", "pyspark", "delta", "deltalake")
DAGSTER = ("dagster", "dagster_shared", "dagster_webserver")


@cache
def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = [p for p in path.relative_to(PACKAGE).with_suffix("").parts if p != "__init__"]
        found[".".join(["rocketlake", *parts])] = path
    return found


@cache
def imports(name: str) -> tuple[tuple[str, int], ...]:
    """(module imported, line) for every import statement of ``name``; ``from x import y`` names ``x.y`` when that
    is a module of the package, else ``x``."""
    path = modules()[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append((full if full in modules() else base, node.lineno))
    return tuple(found)


def layer(module: str) -> int | None:
    best = None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return None if best is None else best[0]


def reachable(name: str) -> set[str]:
    """Every module ``name`` imports, directly or through modules of the package."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for imported, _ in imports(todo.pop()):
            if imported not in seen:
                seen.add(imported)
                if imported in modules():
                    todo.append(imported)
    return seen


def in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_graph_is_read_from_every_subpackage():
    names = modules()
    assert len(names) > 100
    for prefixes in LAYERS:
        for prefix in prefixes:
            assert any(in_package(n, prefix) for n in names), prefix
    # Absolute, relative and in-function imports are all read.
    assert any(m.startswith("rocketlake.engine.") for m, _ in imports("rocketlake.engine.run"))
    assert any(m == "rocketlake.rocketmq.errors" for m, _ in imports("rocketlake.rocketmq.client"))


def test_every_module_has_a_layer():
    assert not [name for name in modules() if layer(name) is None]


def test_no_module_imports_a_layer_above_its_own():
    upward = [
        f"{name}:{line} imports {imported}"
        for name in modules()
        for imported, line in imports(name)
        if layer(imported) is not None and layer(imported) < layer(name)
    ]
    assert not upward, "\n".join(upward)


def test_the_engine_and_the_wire_client_import_no_framework_even_indirectly():
    core = [n for n in modules() if in_package(n, "rocketlake.engine") or in_package(n, "rocketlake.rocketmq")]
    assert len(core) > 50
    reached = {name: sorted(m for m in reachable(name) if m.split(".")[0] in FRAMEWORKS) for name in core}
    assert not any(reached.values()), {name: found for name, found in reached.items() if found}


def test_nothing_below_dagsters_side_imports_dagster_even_indirectly():
    below = [n for n in modules() if layer(n) > layer("rocketlake.dagster")]
    reached = {name: sorted(m for m in reachable(name) if m.split(".")[0] in DAGSTER) for name in below}
    assert not any(reached.values()), {name: found for name, found in reached.items() if found}


def test_the_contracts_can_fail():
    # The graph of a module known to import downward and one known to import Spark, so that the contracts above
    # are not vacuous.
    assert layer("rocketlake.dagster.ingestion") < layer("rocketlake.engine.run") < layer("rocketlake.rocketmq.client")
    assert layer("rocketlake.local.cluster") < layer("rocketlake.engine.config")
    assert any(m.startswith("pyspark") for m in reachable("rocketlake.spark.materialize"))
    assert any(m.startswith("dagster") for m in reachable("rocketlake.dagster.ingestion"))
    assert any(layer(m) == layer("rocketlake.engine") for m, _ in imports("rocketlake.dagster.ingestion"))
