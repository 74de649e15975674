"""The project's local Dagster instance (``.rocketlake/dagster``), as ``rocketlake.dagster.launch`` makes it."""

import pytest
import yaml

from rocketlake.dagster import launch

pytestmark = pytest.mark.unit


def test_a_new_local_instance_is_the_recommended_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    home = launch.dagster_home()
    assert (tmp_path / home / "dagster.yaml").read_text() == launch.RECOMMENDED_INSTANCE.read_text()


def test_a_local_instance_written_before_the_launcher_moved_names_its_new_module(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    old = launch.RECOMMENDED_INSTANCE.read_text().replace("rocketlake.dagster.warm_runs", "rocketlake.warm_runs")
    assert "module: rocketlake.warm_runs" in old
    (tmp_path / launch.LOCAL_DAGSTER_HOME).mkdir(parents=True)
    (tmp_path / launch.LOCAL_DAGSTER_HOME / "dagster.yaml").write_text(old)
    launch.dagster_home()
    settings = yaml.safe_load((tmp_path / launch.LOCAL_DAGSTER_HOME / "dagster.yaml").read_text())
    assert settings["run_launcher"]["module"] == "rocketlake.dagster.warm_runs"
