"""BROADCASTING progress: a local offset store per member, as the Java client's LocalFileOffsetStore.

In BROADCASTING every member consumes every message, so progress is the member's own, not the group's:
the Java client keeps it in ``~/.rocketmq_offsets/<clientId>/<group>/offsets.json`` and never commits
to the broker. rocketlake does the same, in ``<local_offset_store_dir>/<client id>/<group>/offsets.json``.

The file is written the way MixAll.string2File does it, so a crash at any instant leaves a valid store:
the new content goes to ``offsets.json.tmp`` (flushed to disk), the current file is moved to
``offsets.json.bak``, then the new one takes its place. A reader takes ``offsets.json`` and falls back
to ``.bak`` when the file is missing or unreadable (a crash between the two renames). The file is
indented JSON, one ``topic/broker/queue: offset`` per line, readable by a person.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rocketlake.rocketmq.message_queue import MessageQueue

FILE = "offsets.json"


class OffsetStoreCorrupt(RuntimeError):
    """Neither the store nor its backup can be read."""


def store_path(root: str | Path, client_id: str, group: str) -> Path:
    return Path(root).expanduser() / client_id / group / FILE


class LocalOffsetStore:
    """One member's offsets for one group, in one file."""

    def __init__(self, path: Path):
        self.path = path
        self.offsets: dict[MessageQueue, int] = self._load()

    def _load(self) -> dict[MessageQueue, int]:
        problems = []
        for candidate in (self.path, self.path.with_name(FILE + ".bak")):
            if not candidate.exists():
                continue
            try:
                table = json.loads(candidate.read_text())["offsetTable"]
                return {MessageQueue.from_key(key): int(offset) for key, offset in table.items()}
            except (ValueError, KeyError, TypeError) as e:
                problems.append(f"{candidate}: {e}")
        if problems:
            raise OffsetStoreCorrupt(
                "the local offset store cannot be read (" + "; ".join(problems) + "); move it "
                "away to start this member per consume_from_where"
            )
        return {}

    def committed_offset(self, queue: MessageQueue) -> int | None:
        return self.offsets.get(queue)

    def commit_offset(self, queue: MessageQueue, offset: int) -> None:
        self.offsets[queue] = offset
        self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"offsetTable": {mq.key: off for mq, off in sorted(self.offsets.items())}}, indent=2)
        tmp, bak = self.path.with_name(FILE + ".tmp"), self.path.with_name(FILE + ".bak")
        with open(tmp, "w") as f:
            f.write(body + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self.path.exists():
            os.replace(self.path, bak)
        os.replace(tmp, self.path)
