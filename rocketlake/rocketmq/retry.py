"""Retries with a small, pluggable backoff -- only for errors that say retrying can help.

A :class:`Backoff` is anything with ``delays()``: one delay (seconds) per retry, so its length is
the number of retries. :func:`call_with_retries` runs a call, and while it raises a retriable
:class:`~.errors.RocketMQError` (``type(exc).retriable``: connection lost, timeout, broker busy,
...) and delays remain, waits, lets the caller react (``on_retry``, e.g. refresh a route) and
calls again. Anything else -- a topic that does not exist, a bad argument -- is raised at once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from .errors import InvalidArgument, RocketMQError, is_refusal

__all__ = [
    "NO_RETRY",
    "Backoff",
    "ExponentialBackoff",
    "call_with_retries",
    "is_retriable",
]

_T = TypeVar("_T")


class Backoff(Protocol):
    """A retry policy: ``delays()`` yields the wait before each retry (finite)."""

    def delays(self) -> Iterable[float]: ...


@dataclass(frozen=True, slots=True)
class ExponentialBackoff:
    """``retries`` waits of ``initial * multiplier**i`` seconds, capped at ``max_delay``.

    ``jitter`` (0..1) shortens each wait by a random fraction up to that share, so many
    clients hitting the same busy broker do not retry in lockstep.
    """

    retries: int = 2
    initial: float = 0.1
    multiplier: float = 2.0
    max_delay: float = 1.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise InvalidArgument(f"ExponentialBackoff.retries must be >= 0, got {self.retries}")
        if self.initial < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise InvalidArgument(
                "ExponentialBackoff needs initial >= 0, max_delay >= 0 and multiplier >= 1, got "
                f"initial={self.initial}, max_delay={self.max_delay}, multiplier={self.multiplier}"
            )
        if not 0 <= self.jitter <= 1:
            raise InvalidArgument(f"ExponentialBackoff.jitter must be within [0, 1], got {self.jitter}")

    def delays(self) -> Iterator[float]:
        delay = self.initial
        for _ in range(self.retries):
            wait = min(delay, self.max_delay)
            if self.jitter:
                wait *= 1 - random.random() * self.jitter
            yield wait
            delay *= self.multiplier


#: Never retry.
NO_RETRY = ExponentialBackoff(retries=0)


def is_retriable(exc: BaseException) -> bool:
    """True for a :class:`RocketMQError` whose class says a later identical call may succeed, unless the cluster
    turned this client away for its TLS or its signature (``errors.is_refusal``): that answer does not change."""
    return isinstance(exc, RocketMQError) and type(exc).retriable and not is_refusal(exc)


def call_with_retries(
    call: Callable[[], _T],
    backoff: Backoff,
    *,
    retriable: Callable[[BaseException], bool] = is_retriable,
    on_retry: Callable[[BaseException, int], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> _T:
    """``call()``, retried after each retriable failure while ``backoff`` has delays left.

    ``on_retry(exc, attempt)`` runs before each wait (attempt counts from 1). The last error
    is raised unchanged when the delays run out.
    """
    delays = iter(backoff.delays())
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not retriable(exc):
                raise
            delay = next(delays, None)
            if delay is None:
                raise
            attempt += 1
            if on_retry is not None:
                on_retry(exc, attempt)
            if delay > 0:
                sleep(delay)
