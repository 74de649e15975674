"""Connections private to one client, for when the process-wide pool is the wrong identity.

A broker knows a consumer group's members by *channel* (``ConsumerGroupInfo.channelInfoTable`` is
keyed by the Netty channel): a second HEART_BEAT with another client id on the same connection
replaces the first member instead of adding one. The shared pool (:func:`~.connection.get_connection`)
gives a whole process one connection per broker, so a process that must appear as several members
(or wants its own member identity next to other code) gives each client a :class:`PrivateConnections`.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .connection import Connection
from .tls import TlsSettings

__all__ = ["PrivateConnections"]


class PrivateConnections:
    """``address -> Connection``, lazily, owned by one client; callable like ``get_connection``.

    Pickles as an empty pool (a worker opens its own sockets); after ``fork()`` the parent's
    connections are never used.
    """

    def __init__(self, tls: TlsSettings | None = None) -> None:
        self.tls = tls
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._connections: dict[str, Connection] = {}

    def __call__(self, address: str) -> Connection:
        with self._lock:
            if self._pid != os.getpid():  # forked: the sockets belong to the parent
                self._pid, self._connections = os.getpid(), {}
            connection = self._connections.get(address)
            if connection is None or connection.closed:
                connection = self._connections[address] = Connection(address, tls=self.tls)
            return connection

    def close(self) -> None:
        """Close every connection (pending calls fail); the pool can be used again afterwards."""
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
            mine = self._pid == os.getpid()
        if mine:
            for connection in connections:
                connection.close()

    def __reduce__(self) -> tuple[Any, ...]:
        return (PrivateConnections, (self.tls,))
