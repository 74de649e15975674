"""Calls that run in a process of their own, with a session on a Spark Connect server.

PySpark keeps one kind of session per process, and a pytest worker of the engine and Dagster tiers runs a classic
one (``spark``): a test of the engine on the warm path (``spark.remote``) hands its calls to a child process
instead, started once per module with ``spawn`` (a fresh interpreter: nothing of the worker's Spark in it), where
:func:`session` is the session opened on the server. The calls are module-level functions; their arguments and
results travel pickled, and an exception raised there is raised here.
"""

from __future__ import annotations

import multiprocessing
import pickle
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

_session = []


def _open(url: str) -> None:
    from rocketlake.spark.session import connect_session

    _session.append(connect_session(url))


def _call(function: Callable, *args):
    """``function(*args)``, its exception raised as a RuntimeError with its traceback when it cannot travel pickled
    (PySpark's Connect errors cannot)."""
    try:
        return function(*args)
    except Exception as e:
        try:
            pickle.loads(pickle.dumps(e))
        except Exception:
            raise RuntimeError(traceback.format_exc()) from None
        raise


def session():
    """The child's session on the server (in the child process only)."""
    return _session[0]


@contextmanager
def connect_process(url: str) -> Iterator[Callable]:
    """``call(function, *args)``: ``function(*args)`` in a child process with a session on the server at ``url``."""
    with ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn"), initializer=_open, initargs=(url,)
    ) as pool:
        yield lambda function, *args: pool.submit(_call, function, *args).result()
