"""The Dagster instance files rocketlake ships: YAML a loader reads the same way whatever it does with a repeated key
(PyYAML keeps the last one silently), and the run queue's interval they set."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
FILES = ("rocketlake/dagster/dagster.yaml", "rocketlake/dagster/dagster.production.yaml", "deploy/dagster.yaml")


class _NoRepeatedKeys(yaml.SafeLoader):
    pass


def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    keys = [loader.construct_object(key, deep=deep) for key, _ in node.value]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise yaml.constructor.ConstructorError(None, None, f"repeated key(s) {repeated}", node.start_mark)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_NoRepeatedKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


@pytest.mark.parametrize("name", FILES)
def test_an_instance_file_repeats_no_key_and_dequeues_every_second(name):
    settings = yaml.load((ROOT / name).read_text(), _NoRepeatedKeys)
    assert settings["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert settings["run_coordinator"]["config"]["dequeue_interval_seconds"] == 1


def test_the_check_finds_a_repeated_key():
    with pytest.raises(yaml.constructor.ConstructorError, match=r"repeated key\(s\) \['config'\]"):
        yaml.load("run_coordinator:\n  config: {a: 1}\n  config: {a: 2}\n", _NoRepeatedKeys)
