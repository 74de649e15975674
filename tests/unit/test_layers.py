"""The layers of the package, as contracts on its import graph (read from the source with ``ast``: every import,
those inside functions included).

The folders are installed under one import package (pyproject.toml ``package-dir``), so the graph is built with that
mapping: ``assets/`` is ``rocketlake.assets``, and so on. Top to bottom:

1. ``rocketlake``: the code location, the CLI, the member process, the demo;
2. ``rocketlake.assets``: Dagster's side (assets, schedules, sensors, checks, executor);
3. the Dagster resources (``resources.spark``, ``resources.rocketmq_resource``) and the local runtime
   (``resources.local``), which start and configure what the layers below use;
4. ``rocketlake.pipelines``: the engine, the Spark data source and the Delta writer;
5. the RocketMQ wire client (``resources.rocketmq``) and the jar resolver (``resources.jars``).

A module imports from its own layer and the layers below, never above. The engine's core (``ENGINE_CORE``: the
configuration, windows, planning, the ledger, the accounting, progress, the run and its steps) imports neither Dagster
nor Spark nor Delta, even through another module of the package: only the Spark and Delta side of ``pipelines``
(the data source, the body decoding, the writer, the ledger's reader) does.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
#: pyproject.toml's package-dir: folder -> import package
FOLDERS = {
    "rocketlake": "rocketlake",
    "assets": "rocketlake.assets",
    "pipelines": "rocketlake.pipelines",
    "resources": "rocketlake.resources",
}
#: top to bottom; a module belongs to the layer of its longest matching prefix
LAYERS = (
    ("rocketlake",),
    ("rocketlake.assets",),
    ("rocketlake.resources.spark", "rocketlake.resources.rocketmq_resource", "rocketlake.resources.local"),
    ("rocketlake.pipelines",),
    ("rocketlake.resources", "rocketlake.resources.rocketmq", "rocketlake.resources.jars"),
)
FRAMEWORKS = ("dagster", "dagster_shared", "pyspark", "delta", "deltalake")
ENGINE_CORE = tuple(
    f"rocketlake.pipelines.{name}"
    for name in (
        "accounting",
        "allocation",
        "assignment",
        "avro",
        "backlog",
        "broker_access",
        "broker_clock",
        "columns",
        "completeness",
        "config",
        "failures",
        "freshness",
        "identity",
        "ingest",
        "ledger",
        "listener",
        "offset_store",
        "offsets",
        "options",
        "orderly",
        "planning",
        "progress",
        "run",
        "tails",
        "topics",
        "windows",
    )
)


@cache
def modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts])] = path
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


def test_the_graph_is_read_from_every_folder():
    names = modules()
    assert len(names) > 100 and all(any(n.startswith(p) for n in names) for p in FOLDERS.values())
    # Absolute, relative and in-function imports are all read.
    assert any(m.startswith("rocketlake.pipelines.") for m, _ in imports("rocketlake.pipelines.run"))
    assert any(m == "rocketlake.resources.rocketmq.errors" for m, _ in imports("rocketlake.resources.rocketmq.client"))


def test_no_module_imports_a_layer_above_its_own():
    upward = [
        f"{name}:{line} imports {imported}"
        for name in modules()
        for imported, line in imports(name)
        if layer(imported) is not None and layer(imported) < layer(name)
    ]
    assert not upward, "\n".join(upward)


def test_the_engines_core_imports_no_framework_even_indirectly():
    assert set(ENGINE_CORE) <= set(modules()), set(ENGINE_CORE) - set(modules())
    reached = {name: sorted(m for m in reachable(name) if m.split(".")[0] in FRAMEWORKS) for name in ENGINE_CORE}
    assert not any(reached.values()), {name: found for name, found in reached.items() if found}


def test_the_contracts_can_fail():
    # The graph of a module known to import upward and one known to import Spark, so that the contracts above
    # are not vacuous.
    assert (
        layer("rocketlake.assets.ingestion")
        < layer("rocketlake.pipelines.run")
        < layer("rocketlake.resources.rocketmq.client")
    )
    assert layer("rocketlake.resources.local.cluster") < layer("rocketlake.pipelines.config")
    assert any(m.startswith("pyspark") for m in reachable("rocketlake.pipelines.materialize"))
    assert any(layer(m) == 3 for m, _ in imports("rocketlake.assets.ingestion"))  # assets use the engine
