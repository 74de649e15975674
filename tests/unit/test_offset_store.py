"""The BROADCASTING member's local offset store: readable, and valid whatever instant a write is killed at."""

from __future__ import annotations

import json
import os

import pytest

from rocketlake.engine.offset_store import LocalOffsetStore, OffsetStoreCorrupt, store_path
from rocketlake.rocketmq.message_queue import MessageQueue

A, B = MessageQueue("orders", "broker-a", 0), MessageQueue("orders", "broker-b", 1)


def test_offsets_survive_a_new_store_and_read_like_a_table(tmp_path):
    path = store_path(tmp_path, "10.0.0.7@eu1", "g")
    store = LocalOffsetStore(path)
    assert store.committed_offset(A) is None
    store.commit_offset(A, 12)
    store.commit_offset(B, 7)
    assert LocalOffsetStore(path).offsets == {A: 12, B: 7}
    assert json.loads(path.read_text()) == {"offsetTable": {"orders/broker-a/0": 12, "orders/broker-b/1": 7}}
    assert path.read_text().count("\n") >= 4  # one queue per line


def killed_between(monkeypatch, step: int):
    """Make the ``step``-th os.replace of the next write raise, as a kill at that instant would stop it."""
    real, calls = os.replace, []

    def replace(src, dst):
        calls.append((src, dst))
        if len(calls) == step:
            raise KeyboardInterrupt("killed")
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.parametrize("step", [1, 2])
def test_a_write_killed_at_any_step_leaves_the_previous_or_the_new_offsets(tmp_path, monkeypatch, step):
    path = store_path(tmp_path, "me", "g")
    store = LocalOffsetStore(path)
    store.commit_offset(A, 5)
    store.commit_offset(A, 6)
    killed_between(monkeypatch, step)
    with pytest.raises(KeyboardInterrupt):
        store.commit_offset(A, 9)
    monkeypatch.undo()
    assert LocalOffsetStore(path).offsets == {A: 6}  # the last complete write, from the file or its backup


def test_a_torn_file_falls_back_to_the_backup_and_both_torn_is_a_clear_error(tmp_path):
    path = store_path(tmp_path, "me", "g")
    store = LocalOffsetStore(path)
    store.commit_offset(A, 5)
    store.commit_offset(A, 6)  # .bak holds 5
    path.write_text('{"offsetTable": {"orders/bro')
    assert LocalOffsetStore(path).offsets == {A: 5}
    path.with_name("offsets.json.bak").write_text("")
    with pytest.raises(OffsetStoreCorrupt) as error:
        LocalOffsetStore(path)
    assert str(path) in str(error.value) and "consume_from_where" in str(error.value)
