"""The machine-wide lock of a Delta table on a local file system (``delta.local_commits``): local paths only, one
holder at a time across processes, released when the holder is done."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from rocketlake.delta.local_commits import local_path, one_writer


def test_only_local_paths_are_locked():
    assert local_path("/lake/orders") == Path("/lake/orders")
    assert local_path("file:///lake/orders") == Path("/lake/orders")
    assert local_path("lake/orders") == Path("lake/orders").absolute()
    assert local_path("s3a://bucket/lake/orders") is None
    assert local_path("hdfs://nn/lake/orders") is None


def test_a_second_process_waits_until_the_first_is_done(tmp_path):
    table = str(tmp_path / "orders")
    holder = (
        "import sys\n"
        "from rocketlake.delta.local_commits import one_writer\n"
        f"with one_writer({table!r}):\n"
        "    print('held', flush=True)\n"
        "    sys.stdin.readline()\n"  # held until the test says so
    )
    child = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    taken = threading.Event()

    def take() -> None:
        with one_writer(table):
            taken.set()

    try:
        assert child.stdout.readline().strip() == "held"
        with one_writer(str(tmp_path / "another_table")):  # another table's lock is another lock
            pass
        threading.Thread(target=take, daemon=True).start()
        assert not taken.wait(0.5)  # not while the other process holds it
        child.stdin.write("done\n")
        child.stdin.flush()
        assert taken.wait(10)  # at once when it is done
    finally:
        child.stdin.close()
        child.wait(10)
    assert child.returncode == 0
