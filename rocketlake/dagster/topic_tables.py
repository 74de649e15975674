"""Tables per topic in Dagster: which topics the definitions have tables for, fixed when the code location loads.

The name server is asked when a code location initializes (its code server, ``dagster dev``, a CLI command), and
the answer is kept in the definitions' reconstruction metadata, Dagster's way for definitions made from outside
state (``StateBackedDefinitionsLoader``): a run's process rebuilds the very assets its run was launched for
without asking again. A name server that cannot be reached at load gives no table yet, and a warning.

A topic created later has no asset until the definitions load again: ``<ingestion>_new_topics``, a sensor per
such ingestion, finds it at its next tick. Under rocketlake's own code server (``local.code_server``, which names
itself in ``ROCKETLAKE_CODE_SERVER``) the sensor asks that server to load the definitions again, as the UI's Reload
does, and the new table's asset, job and schedule appear; elsewhere its skip reason names the topics for a person
or a deployment to reload the code location.
"""

from __future__ import annotations

import json
import logging
import os
import threading

from dagster import DefaultSensorStatus, SensorDefinition, SensorEvaluationContext, SkipReason, sensor

from rocketlake.dagster.dagster_private import DagsterGrpcClient, DefinitionsLoadContext, DefinitionsLoadType
from rocketlake.dagster.rocketmq_resource import RocketMQResource
from rocketlake.engine.config import IngestionConfig, RocketLakeConfig
from rocketlake.engine.topic_tables import expand, per_topic, topics_now
from rocketlake.local.code_server import CODE_SERVER_ENV
from rocketlake.rocketmq.errors import RocketMQError

log = logging.getLogger(__name__)

#: The reconstruction metadata's key: ``{ingestion: [topic, ...]}`` as the load found them.
METADATA_KEY = "rocketlake/topic_tables"
#: How long a reload may take: the new process imports Dagster, PySpark and the definitions, asking the name server.
RELOAD_TIMEOUT_S = 300


def reload_code_location(address: str) -> threading.Thread:
    """Ask the code server at ``address`` to load the definitions again, from a thread of its own: the server
    answers once a new process has loaded them and the old one is told to stop, and the sensor asking runs in that
    old process, which must be free to answer the tick first."""
    host, _, port = address.rpartition(":")

    def reload() -> None:
        try:
            DagsterGrpcClient(port=int(port), host=host).reload_code(timeout=RELOAD_TIMEOUT_S)
        except Exception as e:  # the next tick asks again
            log.warning("the code server at %s did not reload: %s", address, e)

    thread = threading.Thread(target=reload, name="rocketlake-reload-code-location", daemon=True)
    thread.start()
    return thread


def recorded_topics() -> dict[str, list[str]] | None:
    """The topics the code location's initial load found, when these definitions are being rebuilt from it (a
    run's process); None at an initial load."""
    if not DefinitionsLoadContext.is_set():
        return None
    context = DefinitionsLoadContext.get()
    if context.load_type != DefinitionsLoadType.RECONSTRUCTION or METADATA_KEY not in context.reconstruction_metadata:
        return None
    return json.loads(context.reconstruction_metadata[METADATA_KEY])


def topics_of(config: RocketLakeConfig, name: str, cfg: IngestionConfig) -> list[str]:
    """The topics of a table-per-topic ingestion now, from its cluster's name server; none (with a warning) when it
    cannot be reached."""
    resource = RocketMQResource.of_cluster(cfg.cluster, config.clusters[cfg.cluster])
    try:
        with resource.open_client() as client:
            return topics_now(cfg, client)
    except RocketMQError as e:
        log.warning("ingestion %s: no table per topic yet, the topics could not be listed: %s", name, e)
        return []


def with_topic_tables(config: RocketLakeConfig) -> tuple[RocketLakeConfig, dict[str, list[str]]]:
    """``config`` with a table per topic for each ingestion that asks for them (``engine.topic_tables``), and the
    topics they were made for (empty when none asks)."""
    names = {name: cfg for name, cfg in config.ingestions.items() if per_topic(cfg)}
    if not names:
        return config, {}
    found = recorded_topics()
    if found is None:
        found = {name: topics_of(config, name, cfg) for name, cfg in names.items()}
        DefinitionsLoadContext.get().add_to_pending_reconstruction_metadata(METADATA_KEY, json.dumps(found))
    return expand(config, found), found


def build_new_topics_sensor(
    config: RocketLakeConfig, name: str, cfg: IngestionConfig, tabled: list[str]
) -> SensorDefinition:
    """``<name>_new_topics``: at each tick, the topics of ``name`` that have no table in these definitions."""

    @sensor(
        name=f"{name}_new_topics",
        minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Names the topics of ingestion {name} ({cfg.topic_label}) created since the definitions "
        "loaded: each gets its table when the code location loads again (the UI's Reload).",
    )
    def new_topics(context: SensorEvaluationContext):
        resource = RocketMQResource.of_cluster(cfg.cluster, config.clusters[cfg.cluster])
        with resource.open_client() as client:
            new = sorted(set(topics_now(cfg, client)) - set(tabled))
        server = os.environ.get(CODE_SERVER_ENV)
        if new and server:
            reload_code_location(server)
            return SkipReason(
                f"topics {', '.join(new)} match ingestion {name} and have no table yet: the code server at {server} "
                "is loading the definitions again to create their tables"
            )
        if new:
            return SkipReason(
                f"topics {', '.join(new)} match ingestion {name} and have no table yet: reload the code location "
                "(the UI's Reload, or restart its code server) to create their tables"
            )
        return SkipReason(f"every topic of ingestion {name} has its table ({len(tabled)})")

    return new_topics
