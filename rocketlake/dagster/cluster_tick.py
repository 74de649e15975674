"""One tick of a sensor that serves every ingestion of a cluster (lag, retry backlog, rebalance).

One sensor per cluster, not per ingestion: the daemon evaluates one sensor where it evaluated one per ingestion
(its own cost per evaluation dominated, measured by ``benchmarks/deployment_cost.py``), and the tick's one client
shares its routes and connections among the ingestions. One group that cannot be read does not hide the others;
a cluster that does not answer at all ends the tick at once rather than waiting out a timeout per group.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from rocketlake.dagster.translator import IngestionAssets
from rocketlake.engine.config import IngestionConfig
from rocketlake.rocketmq.errors import ConnectionFailed, RequestTimeout, RocketMQError

T = TypeVar("T")
Members = list[tuple[IngestionConfig, IngestionAssets]]
#: What says a cluster is not answering, rather than one group's request being refused.
UNREACHABLE = (ConnectionFailed, RequestTimeout)


def tick_timeout_ms(members: Members) -> int | None:
    """The longest ``mq_client_api_timeout`` the ingestions set, for the tick's one client (None: the resource's)."""
    return max((cfg.mq_client_api_timeout for cfg, _ in members if cfg.mq_client_api_timeout), default=None)


def read_each(
    members: Members, read: Callable[[IngestionConfig], T], what: str, log
) -> tuple[list[tuple[IngestionConfig, IngestionAssets, T]], list[str]]:
    """``read`` of each ingestion, in order, and what could not be read (each also a warning in ``log``)."""
    done, failed = [], []
    for i, (cfg, assets) in enumerate(members):
        try:
            done.append((cfg, assets, read(cfg)))
        except RocketMQError as e:
            failed.append(f"cannot {what} of group {cfg.consumer_group}: {e}")
            log.warning(failed[-1])
            left = len(members) - i - 1
            if isinstance(e, UNREACHABLE) and left:
                failed.append(f"{left} other group(s) not read this tick: the cluster did not answer")
                break
    return done, failed


def tick_summary(said: list[str], failed: list[str]) -> str:
    """What a tick says: each ingestion when they are few, a count when they are many; the failures always."""
    head = ["; ".join(said) if len(said) <= 5 else f"{len(said)} ingestions read"] if said else []
    return "; ".join([*head, *failed]) or "no ingestion"
