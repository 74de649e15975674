"""The frame echo peer of the wire client's unit tests: a loopback listener that splits the byte stream into frames
with the codec and, by default, echoes each request back as a response with the same opaque. Tests give it a
``reply`` function to hold, reorder or drop answers, or to cut the connection. It knows nothing of RocketMQ beyond
framing and is not a broker; tests against a real broker live in tests/integration."""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
from collections.abc import Callable

from rocketlake.rocketmq.codes import ResponseCode
from rocketlake.rocketmq.errors import ProtocolError
from rocketlake.rocketmq.frame import FrameDecoder, RemotingCommand, encode

WAIT = 5.0  # upper bound for anything that should happen "at once"
CLOSE = b"<close the connection>"  # reply sentinel

Reply = Callable[[RemotingCommand], list[bytes]]


def echo_response(request: RemotingCommand, **changes: object) -> RemotingCommand:
    response = RemotingCommand(
        code=ResponseCode.SUCCESS,
        ext_fields=dict(request.ext_fields),
        body=request.body,
        opaque=request.opaque,
        flag=1,
        language="JAVA",
    )
    for key, value in changes.items():
        setattr(response, key, value)
    return response


def echo(request: RemotingCommand) -> list[bytes]:
    return [] if request.is_oneway else [encode(echo_response(request))]


class FrameEchoPeer:
    """Loopback frame echo peer; see the module docstring."""

    def __init__(self, reply: Reply = echo, port: int = 0) -> None:
        self._listener = socket.create_server(("127.0.0.1", port))  # SO_REUSEADDR on POSIX
        self._listener.settimeout(0.1)  # accept poll, so close() needs no cross-thread wakeup
        self.port = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.reply = reply
        self.received: queue.Queue[RemotingCommand] = queue.Queue()
        self.accepted = 0
        self._connections: list[tuple[socket.socket, threading.Lock]] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True)
        self._acceptor.start()

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(None)
            entry = (sock, threading.Lock())
            with self._lock:
                self.accepted += 1
                self._connections.append(entry)
            threading.Thread(target=self._serve, args=entry, daemon=True).start()

    def _serve(self, sock: socket.socket, send_lock: threading.Lock) -> None:
        decoder = FrameDecoder()
        try:
            while data := sock.recv(65536):
                for request in decoder.feed(data):
                    self.received.put(request)
                    for out in self.reply(request):
                        if out is CLOSE:
                            sock.shutdown(socket.SHUT_RDWR)
                            return
                        with send_lock:
                            sock.sendall(out)
        except OSError:
            pass
        except ProtocolError:
            pass  # the client's TLS probe (a ClientHello is no frame): a plain broker closes it, as here
        finally:
            sock.close()

    def push(self, command: RemotingCommand) -> None:
        """Send a server-initiated frame on the newest connection."""
        with self._lock:
            sock, send_lock = self._connections[-1]
        with send_lock:
            sock.sendall(encode(command))

    def next_received(self) -> RemotingCommand:
        return self.received.get(timeout=WAIT)

    def close(self) -> None:
        self._stopped.set()
        self._acceptor.join(WAIT)  # closing while accept() polls would keep the port bound a moment longer
        self._listener.close()
        with self._lock:
            connections = list(self._connections)
        for sock, _ in connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
