"""Dagster's private modules are imported in one place only (``rocketlake/dagster/dagster_private.py``), each import
with the reason no public API serves, so an upgrade that moves one breaks there, visibly."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["rocketlake", "assets", "pipelines", "resources"]  # the library and the repository's code location
ALLOWED = ROOT / "rocketlake" / "dagster" / "dagster_private.py"


def private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        found += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.startswith("dagster._")]
    return found


def test_only_the_one_module_imports_dagster_internals():
    offenders = [
        hit
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ALLOWED
        for hit in private_imports(path)
    ]
    assert offenders == []


def test_each_private_import_says_why():
    lines = ALLOWED.read_text().splitlines()
    imports = [i for i, line in enumerate(lines) if line.startswith("from dagster._")]
    assert imports, "the module lists the private imports"
    for i in imports:
        assert lines[i - 1].startswith("#"), f"{lines[i]}: no comment above it saying why no public API serves"
