"""`rocketlake local up --postgres` on real PostgreSQL programs (Debian's), on a free port.

Run as root, the server's data lives outside the state directory (``/var/tmp/rocketlake-postgres/<digest>``, where
the ``postgres`` account can reach it), so deleting the state directory by hand leaves data made with a password
that is gone with it. The next ``up`` must say so and what to do, at once, not time out on a refused login.
"""

from __future__ import annotations

import shutil
import time

import pytest

from rocketlake.local.postgres import LocalPostgres
from rocketlake.local.process import LocalClusterError
from tests.conftest import free_ports

pytestmark = pytest.mark.broker  # a local server of its own, no Spark or Dagster


def test_data_left_by_a_deleted_state_directory_is_named_with_the_way_out(tmp_path, monkeypatch):
    monkeypatch.delenv("ROCKETLAKE_POSTGRES_PASSWORD", raising=False)
    (port,) = free_ports(1)
    state = tmp_path / "state" / "postgres"
    server = LocalPostgres(state, port=port)
    try:
        server.up()
        assert server.down() == ["postgres"]
        shutil.rmtree(state)  # the person deletes .rocketlake by hand; the data directory stays
        if server.data_dir.is_relative_to(state):
            pytest.skip("not run as root: the data directory went with the state directory")  # CI runs as root
        began = time.monotonic()
        with pytest.raises(LocalClusterError) as refused:
            LocalPostgres(state, port=port).up()
        said = str(refused.value)
        assert f"PostgreSQL's data in {server.data_dir} was made with another password" in said, said
        assert "rocketlake local down --postgres --wipe" in said, said
        assert time.monotonic() - began < 30  # said at the first refused login, not after the start's timeout
        assert server.process.pid() is None  # the server it started to try is stopped again
    finally:
        LocalPostgres(state, port=port).down(wipe=True)
    assert not server.data_dir.exists()
