"""The documentation builds in strict mode (a broken link or anchor fails), and its configuration reference holds
every key the configuration models accept, generated from them."""

import os
import re
import subprocess
import sys
from pathlib import Path

from rocketlake.engine.config import NOT_SUPPORTED_YET, IngestionConfig, WindowConfig

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_build_strictly_with_a_generated_configuration_reference(tmp_path):
    done = subprocess.run(
        [str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tmp_path / "reference" / "configuration" / "index.html").read_text()
    keys = set(re.findall(r"<td><code>([a-z_]+)</code></td>", page))
    expected = {f.alias or name for name, f in IngestionConfig.model_fields.items()} | set(WindowConfig.model_fields)
    assert expected <= keys, sorted(expected - keys)
    assert page.count("not supported yet") >= len(NOT_SUPPORTED_YET)
    assert "[1, 1024]" in page  # a RocketMQ range, read from the validators


def test_the_readme_is_a_short_quick_start_with_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert readme.splitlines()[3].startswith("make demo") and readme.splitlines()[4].startswith("make test")
    assert len(readme.splitlines()) < 60
