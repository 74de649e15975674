"""One reading of Dagster's migration scripts per process, for the warm fork server and the runs it forks.

Every time a Dagster instance opens a SQL storage (its runs, its schedules, its event log's index and each run's own
event-log shard on SQLite), Dagster checks the database's schema revision against the newest of its Alembic
migration scripts (``check_alembic_revision``). Alembic answers by building a ``ScriptDirectory`` and executing
each of the scripts in it to learn their revisions: about 90 modules, a third of a forked run's own Python CPU on
the project's machine (``py-spy``, benchmarks/README.md), paid four or five times in every run.

The scripts are files of the installed Dagster, which a process cannot see change (an upgrade takes a restart of
the daemon, as for the fork server's imports): :func:`share_revision_maps` has every ``ScriptDirectory`` of the
process built on the same directories share one revision map, read once. The fork server reads it before its first
fork, so each run inherits it read. Each caller still gets a ``ScriptDirectory`` of its own, with its own options;
what a migration or a stamp does is unchanged.
"""

from __future__ import annotations

import threading

__all__ = ["share_revision_maps"]

_lock = threading.Lock()
_shared: dict[tuple, object] = {}  # what the scripts are read from -> the RevisionMap first built on it
_installed = False


def share_revision_maps() -> None:
    """From now on, this process's Alembic ``ScriptDirectory.from_config`` hands out script directories that share
    one revision map per set of directories read. Idempotent."""
    global _installed
    from alembic.script import ScriptDirectory

    with _lock:
        if _installed:
            return
        build = ScriptDirectory.from_config.__func__  # the classmethod's own function

        def from_config(cls, config):
            script = build(cls, config)
            # What ScriptDirectory._load_revisions reads: the same key, the same revisions.
            # Older Alembic (1.13, the lowest rocketlake takes) leaves version_locations None when the configuration
            # names none; recursive version locations are read with a default for any older still.
            key = (
                cls,
                script.dir,
                tuple(script.version_locations or ()),
                script.sourceless,
                getattr(script, "recursive_version_locations", False),
            )
            with _lock:
                script.revision_map = _shared.setdefault(key, script.revision_map)
            return script

        ScriptDirectory.from_config = classmethod(from_config)
        _installed = True
