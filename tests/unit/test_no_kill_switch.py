"""The crash tests' kill points live in tests/crash_points, installed by the tests: none ships in the package."""

from __future__ import annotations

from pathlib import Path

import rocketlake


def test_no_module_of_the_package_can_kill_its_own_run():
    root = Path(rocketlake.__file__).parent
    sources = {path: path.read_text() for path in root.rglob("*.py")}
    assert len(sources) > 100, "the package's modules were found"
    armed = sorted(
        str(path)
        for path, text in sources.items()
        if "ROCKETLAKE_FAILPOINT" in text or "killpg" in text or "failpoint(" in text
    )
    assert armed == []
