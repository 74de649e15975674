"""One multiplexed TCP connection per remote address, and the per-process pool of them.

RocketMQ multiplexes every request to a given broker or name server over a single long-lived
connection and matches responses by ``opaque`` (remoting/.../netty/NettyRemotingAbstract.java).
A :class:`Connection` does the same with a socket and a table ``opaque -> pending call``;
the socket is read by the callers waiting for responses (leader/follower, see :class:`_Channel`)
and, while nobody waits, by a daemon idle reader:

* every call has a timeout (:class:`RequestTimeout` names the address and the request);
* when the socket breaks, every pending call fails with :class:`ConnectionFailed` and the
  *next* call opens a new socket -- a broker restart needs no new client;
* requests the server sends to us (flag bit 0 clear) are demultiplexed: NOTIFY_CONSUMER_IDS_CHANGED
  goes to the registered listeners; a request whose code has a handler of this process
  (:func:`handle_server_requests`, e.g. GET_CONSUMER_RUNNING_INFO for a member) is answered by it, on a
  thread of its own; anything else that expects an answer gets REQUEST_CODE_NOT_SUPPORTED with the same
  opaque, like ``NettyRemotingAbstract#processRequestCommand``.

The pool (:func:`get_connection`) is keyed by ``(os.getpid(), address)``: a forked or unpickled
Spark Python worker never writes to a socket its parent opened.

Frames are read with ``recv_into`` straight into the arena of a :class:`~.frame.FrameDecoder`
(as much as it has room for, at least 64 KiB) and split there; the body of an answer whose caller
asks for it in place (a pull's records) stays where the socket wrote it (``RemotingCommand.body_view``),
every other body is copied out as bytes.
A pull answer thus costs a handful of syscalls, no per-byte Python work and no copy of its own.
Under TLS, records are read into a 256 KiB chunk and opened into the arena.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import NoReturn, Protocol

from .codes import MAX_FRAME_SIZE, RequestCode, ResponseCode
from .errors import (
    ClosedBeforeAnswer,
    ConnectionFailed,
    ConnectionTurnedAway,
    InvalidArgument,
    ProtocolError,
    RequestTimeout,
    describe_request,
    error_for_response,
)
from .frame import FLAG_ONEWAY, FLAG_RESPONSE, FrameDecoder, RemotingCommand, RequestTemplate, encode
from .tls import TlsSession, TlsSettings, handshake, speaks_tls, tls_failure_advice

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "Connection",
    "ConsumerIdsChangedListener",
    "PendingResponse",
    "RPCHook",
    "close_all",
    "get_connection",
    "split_address",
]

log = logging.getLogger(__name__)

#: ``ClientConfig#mqClientApiTimeout`` (3000 ms): default for calls without their own timeout.
DEFAULT_TIMEOUT = 3.0
#: ``NettyClientConfig#connectTimeoutMillis`` (3000 ms); a call's own timeout caps it further.
DEFAULT_CONNECT_TIMEOUT = 3.0
_READ_CHUNK = 256 * 1024
# A channel nobody used for this long is replaced before its next request: brokers close connections idle for
# 120 s, and a request must never race that close.
CHANNEL_MAX_IDLE_S = 60.0

# Longest single poll: waiters re-check their deadline and the channel's failure, the idle
# reader whether callers took over, and a blocked send its deadline this often.
_POLL_INTERVAL = 0.5
_OPAQUE_MASK = 0x7FFFFFFF  # Java's opaque is an int32 from an AtomicInteger


class RPCHook(Protocol):
    """Called with a private copy of each outgoing request, after its opaque is set.

    May add or change ``request.ext_fields`` (ACL signing does); must not block.
    """

    def before_request(self, address: str, request: RemotingCommand) -> None: ...


#: Receives the NOTIFY_CONSUMER_IDS_CHANGED request (``ext_fields["consumerGroup"]``).
ConsumerIdsChangedListener = Callable[[RemotingCommand], None]


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` -> ``(host, port)``; the port follows the *last* colon, as in
    ``RemotingHelper#string2SocketAddress``, so bare and bracketed IPv6 hosts both work."""
    host, sep, port = address.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise InvalidArgument(f"bad address {address!r}: expected host:port, e.g. 127.0.0.1:10911")
    return host, int(port)


class _Channel:
    """One socket, read by whichever thread is waiting for a response. It fails once and is never reused.

    Reading is *leader/follower*: a caller waiting for its response takes the lead (``_lead``)
    and reads frames itself, dispatching every response it finds to its own waiter; callers that
    find the lead taken wait on ``_arrived`` until their response is in or the lead is free. So
    one thread keeping several pulls in flight reads its own answers: no thread hand-off per
    response, which in one Python process costs more than decoding them. A daemon *idle reader*
    takes the lead only while nobody waits, so requests the server sends (NOTIFY_CONSUMER_IDS_CHANGED)
    and a closed connection are still noticed at once on an idle connection.

    The socket is in blocking mode but used only with ``MSG_DONTWAIT``, polled when it has nothing to read or no
    room to write: every wait has a bound, and the poll interval lets waiters notice a failure from another thread.
    """

    def __init__(self, conn: Connection, sock: socket.socket, tls: TlsSession | None = None) -> None:
        self._conn = conn
        self._address = conn.address
        self._sock = sock
        self._tls = tls  # frames are sealed into TLS records before the socket and opened after it
        self._answered = False  # a frame came in: a close from here on is not a refused plain connection
        self._closed_unanswered = False  # closed before any answer (``_early_close_hint``)
        self._turned_away = False  # ... by a server that speaks TLS only, to this plain connection
        self._lock = threading.Lock()  # guards _pending and _failure
        self._send_lock = threading.Lock()  # one frame on the wire at a time
        self._lead = threading.Lock()  # held by the one thread reading the socket
        self._arrived = threading.Condition(threading.Lock())  # responses dispatched or lead released
        self._waiting = 0  # callers inside wait_for(); the idle reader stays away while > 0
        self._stopped = threading.Event()
        # opaque -> the call waiting for its response (the slot the reader fills in)
        self._pending: dict[int, PendingResponse] = {}
        self._failure: str | None = None
        self.last_active = time.monotonic()  # a frame written or read
        # Used under _lead only:
        self._decoder = FrameDecoder(conn.max_frame_size, views=True)  # pull answers are read where they land
        self._chunk = memoryview(bytearray(_READ_CHUNK)) if tls is not None else None  # TLS records, before opening
        self._read_poll = select.poll()
        self._read_poll.register(sock, select.POLLIN)
        # Used under _send_lock only:
        self._write_poll = select.poll()
        self._write_poll.register(sock, select.POLLOUT)
        self._reader = threading.Thread(
            target=self._idle_read_loop, name=f"rocketmq-reader[{self._address}]", daemon=True
        )

    def start(self) -> None:
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self._failure is None

    def retire_if_idle(self, idle_s: float) -> None:
        """Fail the channel if nothing crossed it for ``idle_s`` and no call waits on it.

        Brokers close a connection idle for 120 s (``serverChannelMaxIdleTimeSeconds``). A request written just
        as that close happens is lost without an answer, and a send cannot be retried blindly (it might have
        been stored), so a channel is retired well before the broker's deadline, as the Java client's own idle
        handler does, instead of being raced."""
        if time.monotonic() - self.last_active < idle_s:  # every send asks: the common answer without the lock
            return
        with self._lock:
            if self._failure is not None or self._pending or time.monotonic() - self.last_active < idle_s:
                return
        self.fail(f"idle for over {idle_s:.0f}s: retired before the broker's idle timeout could close it")

    def register(self, call: PendingResponse) -> None:
        with self._lock:
            if self._failure is not None:
                self._raise_failed(call.request_code)
            self._pending[call.opaque] = call

    def unregister(self, opaque: int) -> None:
        with self._lock:
            self._pending.pop(opaque, None)

    def _raise_failed(self, request_code: int, cause: BaseException | None = None) -> NoReturn:
        raise self._failure_class()(
            f"connection to {self._address} broke before {describe_request(request_code)} "
            f"could be sent: {self._failure}",
            address=self._address,
            request_code=request_code,
        ) from cause

    # ----------------------------------------------------------------- writing

    def send(self, data: bytes, deadline: float, request_code: int) -> None:
        """Write one whole frame, or fail the channel if only part of it got out."""
        lock = self._send_lock
        if not lock.acquire(blocking=False) and not lock.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            raise self._send_timeout(request_code, "another request was still being written")
        try:
            if self._tls is not None:
                try:
                    data = self._tls.seal(data)  # under the send lock: records go out in the order they were made
                except ssl.SSLError as exc:  # the reader met the peer's alert or close first
                    self.fail(f"the TLS session ended: {tls_failure_advice(exc)}{self._early_close_hint()}")
                    self._raise_failed(request_code, exc)
            view = data  # a memoryview only once a send wrote part of it
            sent = 0
            while sent < len(data):
                if self._failure is not None:
                    self._raise_failed(request_code)
                try:
                    sent += self._sock.send(view, socket.MSG_DONTWAIT)
                    self.last_active = time.monotonic()
                    if sent < len(data):
                        view = memoryview(data)[sent:]
                    continue
                except BlockingIOError:
                    pass
                except OSError as exc:
                    self.fail(f"send failed: {exc}{self._early_close_hint()}")
                    self._raise_failed(request_code, exc)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if sent:  # half a frame on the wire: the stream is unusable from here on
                        self.fail(f"a send timed out after {sent} of {len(data)} bytes")
                    raise self._send_timeout(request_code, "the socket send buffer stayed full")
                self._write_poll.poll(_millis(min(remaining, _POLL_INTERVAL)))
        finally:
            self._send_lock.release()

    def _failure_class(self) -> type[ConnectionFailed]:
        if self._turned_away:
            return ConnectionTurnedAway
        return ClosedBeforeAnswer if self._closed_unanswered else ConnectionFailed

    def _early_close_hint(self) -> str:
        """Why a server drops a connection before its first answer, when the cause is the connection's setup (the
        channel's failure is then a ``ClosedBeforeAnswer``)."""
        if self._answered or self._failure is not None:  # answered once, or failed already (by us: a timeout)
            return ""
        self._closed_unanswered = True
        if self._tls is None:
            # Asked once, now: a server that answers a TLS handshake closed us for speaking plain, and will again
            # (a refusal, not retried); one that does not may have crashed at that moment (retried).
            if speaks_tls(self._address):
                self._turned_away = True
                return (
                    " before answering anything, and it answers TLS: it enforces TLS "
                    "(tls.server.mode=enforcing); configure tls for this cluster"
                )
            return (
                " before answering anything: if the server enforces TLS (tls.server.mode=enforcing), configure "
                "tls for this cluster"
            )
        return (
            " before answering anything over TLS: if the server requires a client certificate "
            "(tls.server.need.client.auth=require), set tls.cert_file and tls.key_file"
        )

    def _send_timeout(self, request_code: int, why: str) -> RequestTimeout:
        return RequestTimeout(
            f"could not send {describe_request(request_code)} to {self._address} within the timeout: {why}",
            address=self._address,
            request_code=request_code,
        )

    # ----------------------------------------------------------------- reading

    def wait_for(self, call: PendingResponse, deadline: float) -> None:
        """Return once ``call`` is answered, the channel failed, or ``deadline`` passed."""
        if call.done():
            return
        arrived = self._arrived
        with arrived:
            self._waiting += 1
        try:
            while not call.done() and self._failure is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                if self._lead.acquire(blocking=False):
                    try:
                        while not call.done() and self._failure is None:
                            remaining = deadline - time.monotonic()
                            if remaining <= 0:
                                break
                            self._read(min(remaining, _POLL_INTERVAL))
                    finally:
                        self._lead.release()
                        with arrived:
                            arrived.notify_all()  # a follower may take the lead
                else:
                    with arrived:
                        # _read notifies under this lock after dispatching, so no wakeup is lost.
                        if not call.done() and self._failure is None:
                            arrived.wait(min(remaining, _POLL_INTERVAL))
        finally:
            with arrived:
                self._waiting -= 1

    def _idle_read_loop(self) -> None:
        try:
            while self._failure is None and not self._stopped.is_set():
                if self._waiting:  # callers lead; look again later
                    self._stopped.wait(_POLL_INTERVAL)
                    continue
                if not self._lead.acquire(timeout=_POLL_INTERVAL):
                    continue
                try:
                    if not self._waiting:
                        self._read(_POLL_INTERVAL)
                finally:
                    self._lead.release()
                    with self._arrived:
                        self._arrived.notify_all()
        finally:
            # Close under the lead and the send lock: no thread is polling, reading or writing
            # this fd, so its number cannot be reused by another socket under anyone's feet.
            with self._lead, self._send_lock:
                self._sock.close()

    def _read(self, timeout: float) -> None:
        """Wait up to ``timeout`` for bytes, then read what is there and dispatch it (under ``_lead``).

        The socket is read first and polled only when it has nothing: a caller keeping several pulls in flight
        usually finds an answer already there, and the poll would be one more system call per read."""
        try:
            into = self._decoder.space() if self._tls is None else self._chunk
            try:
                received = self._sock.recv_into(into, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if not self._read_poll.poll(_millis(timeout)):
                    return
                received = self._sock.recv_into(into, 0, socket.MSG_DONTWAIT)
            if not received:
                self.fail(f"the peer closed the connection{self._early_close_hint()}")
                return
            if self._tls is None:
                commands = self._decoder.received(received)
            else:
                commands = self._decoder.feed(self._tls.open(self._chunk[:received]))
            self._answered = self._answered or bool(commands)
            self.last_active = time.monotonic()
        except BlockingIOError:
            return
        except ssl.SSLZeroReturnError:
            self.fail("the peer closed the TLS session")
            return
        except ssl.SSLError as exc:
            self.fail(f"TLS error: {tls_failure_advice(exc)}")
            return
        except ProtocolError as exc:
            self.fail(f"undecodable data from the peer: {exc}")
            return
        except OSError as exc:
            self.fail(f"read failed: {exc}{self._early_close_hint()}")
            return
        if self._tls is not None and self._tls.wants_write:  # the TLS layer answers the peer (a key update)
            try:
                self.send(b"", time.monotonic() + DEFAULT_TIMEOUT, 0)
            except (ConnectionFailed, RequestTimeout) as exc:
                self.fail(f"could not answer the peer's TLS message: {exc}")
                return
        try:
            for command in commands:
                self._dispatch(command)
        except Exception as exc:  # a bug must not leave callers waiting for their timeouts
            log.exception("reading from %s failed", self._address)
            self.fail(f"reading failed: {exc!r}")
        if self._tls is not None and self._tls.closed_by_peer:  # after what it sent before is dispatched
            self.fail("the peer closed the TLS session")
        with self._arrived:
            self._arrived.notify_all()

    def _dispatch(self, command: RemotingCommand) -> None:
        if command.is_response:
            with self._lock:
                call = self._pending.pop(command.opaque, None)
                if call is not None:
                    if not call.body_in_place:  # the caller reads bytes; only one that asked reads it where it landed
                        command.take_body_view()
                    # Under the lock: a caller that unregisters at its deadline then finds the answer, not a gap.
                    call.response = command
            if call is None:  # its caller timed out already; Java logs and drops it too
                log.debug("%s: dropping response with unknown opaque %d", self._address, command.opaque)
        else:
            command.take_body_view()
            self._conn._handle_server_request(self, command)

    # ----------------------------------------------------------------- failure

    def fail(self, reason: str) -> None:
        """Mark the channel dead, fail every pending call, wake every waiter; the idle reader closes the socket."""
        with self._lock:
            if self._failure is not None:
                return
            pending, self._pending = self._pending, {}
            # Every pending call is failed *before* the failure is published: a waiter that sees
            # _failure stop its wait must find its call already answered.
            failed = self._failure_class()
            for call in pending.values():
                call.error = failed(
                    f"connection to {self._address} broke while waiting for "
                    f"{describe_request(call.request_code)}: {reason}",
                    address=self._address,
                    request_code=call.request_code,
                )
            self._failure = reason
        self._stopped.set()
        # shutdown (not close) from here: another thread may be polling or reading this fd, and
        # closing would let the number be reused under it.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with self._arrived:
            self._arrived.notify_all()

    def close(self, reason: str) -> None:
        self.fail(reason)
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout=2 * _POLL_INTERVAL)


def _millis(seconds: float) -> int:
    """poll()'s timeout: whole milliseconds, rounded up so a short wait is not a busy loop."""
    return max(1, int(seconds * 1000 + 0.999))


class PendingResponse:
    """A request on the wire whose response has not been taken yet (from :meth:`Connection.invoke_async`).

    It is also the slot its channel's reader fills in: ``response``, or ``error`` when the connection broke. A
    plain object, not a ``concurrent.futures.Future``: callers wait through :meth:`_Channel.wait_for`, never on a
    future's own condition, which each call would pay for (a lock made, taken and notified) without using it."""

    __slots__ = (
        "_channel",
        "_connection",
        "_deadline",
        "_timeout",
        "body_in_place",
        "error",
        "opaque",
        "request_code",
        "response",
    )

    def __init__(
        self,
        connection: Connection,
        channel: _Channel,
        request_code: int,
        opaque: int,
        deadline: float,
        timeout: float,
        body_in_place: bool,
    ) -> None:
        self._connection = connection
        self._channel = channel
        self.request_code = request_code
        self.opaque = opaque
        self._deadline = deadline
        self._timeout = timeout
        self.body_in_place = body_in_place  # the answer's body is read where it landed (``body_view``)
        self.response: RemotingCommand | None = None
        self.error: ConnectionFailed | None = None

    def done(self) -> bool:
        """True once the response (or the connection's failure) is in."""
        return self.response is not None or self.error is not None

    def result(self) -> RemotingCommand:
        """The response, waiting until the call's deadline at most.

        Raises :class:`ConnectionFailed` or :class:`RequestTimeout` like :meth:`Connection.invoke`.
        """
        if self.response is None and self.error is None:
            self._channel.wait_for(self, self._deadline)
        if self.response is not None:  # the reader took it out of the channel's table
            return self.response
        if self.error is not None:
            raise self.error
        self._channel.unregister(self.opaque)
        if self.response is not None:  # the answer raced the deadline; take it
            return self.response
        if self.error is not None:  # so did the connection's failure
            raise self.error
        connection = self._connection
        what = f"{describe_request(self.request_code)} (opaque {self.opaque})"
        if connection._close_on_timeout:
            self._channel.fail(f"{what} timed out after {self._timeout:g} s, so the socket was dropped")
        raise RequestTimeout(
            f"{connection.address} did not answer {what} within {self._timeout:g} s",
            address=connection.address,
            request_code=self.request_code,
        )

    def cancel(self) -> None:
        """Stop waiting: a response that still arrives is dropped by the reader."""
        self._channel.unregister(self.opaque)


class Connection:
    """A lazily opened, self-healing, multiplexed connection to one broker or name server.

    Thread-safe: any number of threads may call :meth:`invoke` concurrently. Usually obtained
    from :func:`get_connection` rather than constructed directly. Cannot be pickled and is
    only usable in the process that created it.

    ``close_on_timeout`` (default on, like Java's ``NettySystemConfig.clientCloseSocketIfTimeout``)
    drops the socket when a call times out, so a half-open connection to a vanished host is
    replaced by the next call instead of timing out until TCP keepalive notices; other calls
    pending on that socket then fail with :class:`ConnectionFailed`.
    """

    def __init__(
        self,
        address: str,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        close_on_timeout: bool = True,
        max_frame_size: int = MAX_FRAME_SIZE,
        tls: TlsSettings | None = None,
    ) -> None:
        self._host, self._port = split_address(address)
        self._address = address
        self.tls = tls
        self._connect_timeout = connect_timeout
        self._close_on_timeout = close_on_timeout
        self.max_frame_size = max_frame_size
        self._pid = os.getpid()
        self._lock = threading.Lock()  # guards _channel replacement and _closed
        self._channel: _Channel | None = None
        self._closed = False
        self._opaque_lock = threading.Lock()
        self._opaques = itertools.count()
        self._listeners: tuple[ConsumerIdsChangedListener, ...] = ()

    @property
    def address(self) -> str:
        return self._address

    @property
    def closed(self) -> bool:
        """True after :meth:`close`; a closed connection never reconnects."""
        return self._closed

    @property
    def connected(self) -> bool:
        """Whether a socket is open right now (it opens lazily and after each break)."""
        channel = self._channel
        return channel is not None and channel.alive

    def __repr__(self) -> str:
        state = "closed" if self._closed else "connected" if self.connected else "idle"
        return f"Connection({self._address!r}, {state}{', tls' if self.tls is not None else ''})"

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a rocketmq Connection owns a socket and cannot be pickled: pickle the address "
            "and call get_connection(address) in the worker"
        )

    # ----------------------------------------------------------------- calls

    def invoke(
        self,
        request: RemotingCommand,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        rpc_hook: RPCHook | None = None,
    ) -> RemotingCommand:
        """Send ``request`` and wait at most ``timeout`` seconds for its response.

        ``request`` itself is not modified; a copy gets the opaque and the hook's fields.
        Raises :class:`ConnectionFailed` or :class:`RequestTimeout`; a non-success response
        code is returned, not raised (see :meth:`invoke_checked`).
        """
        return self.invoke_async(request, timeout, rpc_hook=rpc_hook).result()

    def invoke_async(
        self,
        request: RemotingCommand,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        rpc_hook: RPCHook | None = None,
        body_in_place: bool = False,
    ) -> PendingResponse:
        """Send ``request`` now and return at once; :meth:`PendingResponse.result` waits for the answer.

        Lets one thread keep several requests in flight on this connection (Java's
        ``invokeAsync``): the broker serves them concurrently and the responses are matched by
        opaque whatever their order. ``timeout`` counts from now, so a response that arrived
        before its deadline is returned even if ``result()`` is called later. With ``body_in_place``
        the answer's body is ``body_view``, a view of where the socket wrote it (``body`` stays empty):
        what a pull's records are read from without a copy.
        """
        deadline = time.monotonic() + timeout
        command = self._prepare(request, rpc_hook, oneway=False)
        data = encode(command, max_frame_size=self.max_frame_size)
        return self._send_async(command.code, [command.opaque], [data], deadline, timeout, body_in_place)[0]

    def invoke_template_async(
        self,
        template: RequestTemplate,
        values: tuple[str, ...],
        timeout: float = DEFAULT_TIMEOUT,
        *,
        body_in_place: bool = False,
    ) -> PendingResponse:
        """:meth:`invoke_async` of the request ``template`` makes with ``values`` (no RPC hook: a hook signs the
        fields, so a signed request is encoded whole)."""
        return self.invoke_template_many_async(template, [values], timeout, body_in_place=body_in_place)[0]

    def invoke_template_many_async(
        self,
        template: RequestTemplate,
        values: list[tuple[str, ...]],
        timeout: float = DEFAULT_TIMEOUT,
        *,
        body_in_place: bool = False,
    ) -> list[PendingResponse]:
        """:meth:`invoke_template_async` of each of ``values``, written to the socket in one send: the kernel's
        loopback work and the send's locks are paid once for them all (a range read's refill of a queue's pulls)."""
        deadline = time.monotonic() + timeout
        code = template.code
        opaques = [self._next_opaque(code) for _ in values]
        frames = [template.encode(opaque, one) for opaque, one in zip(opaques, values)]
        return self._send_async(code, opaques, frames, deadline, timeout, body_in_place)

    def _send_async(
        self,
        code: int,
        opaques: list[int],
        frames: list[bytes],
        deadline: float,
        timeout: float,
        body_in_place: bool,
    ) -> list[PendingResponse]:
        """Register a call per opaque, then write every frame in one send; nothing stays registered if it fails."""
        channel = self._open_channel(deadline, code)
        calls: list[PendingResponse] = []
        try:
            for opaque in opaques:
                call = PendingResponse(self, channel, code, opaque, deadline, timeout, body_in_place)
                channel.register(call)
                calls.append(call)
            channel.send(frames[0] if len(frames) == 1 else b"".join(frames), deadline, code)
        except BaseException:
            for call in calls:
                channel.unregister(call.opaque)
            raise
        return calls

    def invoke_checked(
        self,
        request: RemotingCommand,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        rpc_hook: RPCHook | None = None,
        ok_codes: Collection[int] = (ResponseCode.SUCCESS,),
        hint: str | None = None,
    ) -> RemotingCommand:
        """:meth:`invoke`, raising the :class:`BrokerError` subclass for any code not in ``ok_codes``."""
        response = self.invoke(request, timeout, rpc_hook=rpc_hook)
        if response.code not in ok_codes:
            raise error_for_response(
                address=self._address,
                request_code=request.code,
                response_code=response.code,
                remark=response.remark,
                hint=hint,
            )
        return response

    def invoke_oneway(
        self,
        request: RemotingCommand,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        rpc_hook: RPCHook | None = None,
    ) -> None:
        """Send ``request`` with the oneway flag; ``timeout`` bounds connecting and writing."""
        deadline = time.monotonic() + timeout
        command = self._prepare(request, rpc_hook, oneway=True)
        data = encode(command, max_frame_size=self.max_frame_size)
        self._open_channel(deadline, command.code).send(data, deadline, command.code)

    def _next_opaque(self, request_code: int) -> int:
        if os.getpid() != self._pid:
            raise ConnectionFailed(
                f"this Connection to {self._address} belongs to process {self._pid}; "
                "call get_connection() in this process instead",
                address=self._address,
                request_code=request_code,
            )
        with self._opaque_lock:
            return next(self._opaques) & _OPAQUE_MASK

    def _prepare(self, request: RemotingCommand, rpc_hook: RPCHook | None, *, oneway: bool) -> RemotingCommand:
        opaque = self._next_opaque(request.code)
        flag = request.flag & ~FLAG_RESPONSE
        flag = flag | FLAG_ONEWAY if oneway else flag & ~FLAG_ONEWAY
        command = replace(request, opaque=opaque, flag=flag, ext_fields=dict(request.ext_fields))
        if rpc_hook is not None:
            rpc_hook.before_request(self._address, command)
        return command

    def _open_channel(self, deadline: float, request_code: int) -> _Channel:
        channel = self._channel
        if channel is not None:
            channel.retire_if_idle(CHANNEL_MAX_IDLE_S)
            if channel.alive:
                return channel
        with self._lock:
            if self._closed:
                raise ConnectionFailed(
                    f"the connection to {self._address} was closed by this client; "
                    "use get_connection() for a fresh one",
                    address=self._address,
                    request_code=request_code,
                )
            channel = self._channel
            if channel is not None and channel.alive:
                return channel
            timeout = min(self._connect_timeout, max(deadline - time.monotonic(), 0.001))
            try:
                sock = socket.create_connection((self._host, self._port), timeout=timeout)
            except OSError as exc:
                raise ConnectionFailed(
                    f"cannot connect to {self._address} for {describe_request(request_code)}: {exc}",
                    address=self._address,
                    request_code=request_code,
                ) from exc
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                session = None
                if self.tls is not None:
                    session = handshake(
                        sock,
                        self.tls,
                        self._host,
                        self._address,
                        time.monotonic() + max(timeout, self._connect_timeout),
                        request_code,
                    )
                sock.settimeout(None)  # blocking mode; every wait is a bounded poll (see _Channel)
            except OSError as exc:
                sock.close()
                raise ConnectionFailed(
                    f"cannot configure the socket to {self._address}: {exc}",
                    address=self._address,
                    request_code=request_code,
                ) from exc
            except ConnectionFailed:
                sock.close()
                raise
            channel = _Channel(self, sock, session)
            channel.start()
            self._channel = channel
            return channel

    # ----------------------------------------------------------------- server -> client

    def add_consumer_ids_changed_listener(self, listener: ConsumerIdsChangedListener) -> None:
        """Call ``listener`` (on a short-lived thread of its own) for each NOTIFY_CONSUMER_IDS_CHANGED.

        The broker sends it when a group's membership changes; the Java client rebalances at once.
        A separate thread lets the listener make calls on this very connection without
        blocking the reader that must deliver their responses.
        """
        with self._lock:
            self._listeners = (*self._listeners, listener)

    def remove_consumer_ids_changed_listener(self, listener: ConsumerIdsChangedListener) -> None:
        with self._lock:
            self._listeners = tuple(x for x in self._listeners if x != listener)

    def _handle_server_request(self, channel: _Channel, request: RemotingCommand) -> None:
        if request.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            # ClientRemotingProcessor#notifyConsumerIdsChanged returns null: never answered.
            for listener in self._listeners:
                threading.Thread(
                    target=_run_listener,
                    args=(listener, request, self._address),
                    name=f"rocketmq-notify[{self._address}]",
                    daemon=True,
                ).start()
            return
        handler = _server_request_handlers.get(request.code)
        if handler is not None:
            # A thread of its own: the handler may call the broker over this very connection, whose answers the
            # reader thread (this one) must stay free to deliver. A oneway request (RESET_CONSUMER_CLIENT_OFFSET)
            # is handled and never answered, as ClientRemotingProcessor returns null for it.
            threading.Thread(
                target=self._answer,
                args=(channel, request, handler),
                name=f"rocketmq-answer[{self._address}]",
                daemon=True,
            ).start()
            return
        if request.is_oneway:
            log.debug("%s: ignoring oneway server request %s", self._address, describe_request(request.code))
            return
        # NettyRemotingAbstract#processRequestCommand answers unknown codes exactly like this.
        response = request.make_response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
        )
        try:
            channel.send(encode(response), time.monotonic() + DEFAULT_TIMEOUT, request.code)
        except (ConnectionFailed, RequestTimeout) as exc:
            log.warning("%s: could not answer server request %s: %s", self._address, request.code, exc)

    def _answer(self, channel: _Channel, request: RemotingCommand, handler: ServerRequestHandler) -> None:
        try:
            response = handler(request, self._address)
        except Exception as exc:  # the broker must get an answer, as NettyRemotingAbstract gives SYSTEM_ERROR
            log.exception("%s: handler of server request %s failed", self._address, request.code)
            response = request.make_response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if request.is_oneway:
            return
        if response is None:  # a handler for oneway requests asked something else: the broker must not wait
            response = request.make_response(ResponseCode.SYSTEM_ERROR, f"request {request.code} got no answer")
        try:
            channel.send(encode(response), time.monotonic() + DEFAULT_TIMEOUT, request.code)
        except (ConnectionFailed, RequestTimeout) as exc:
            log.warning("%s: could not answer server request %s: %s", self._address, request.code, exc)

    # ----------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Close the socket and fail pending calls; the connection stays closed for good.

        In a forked child the inherited socket is only dropped: a shutdown there would cut
        the parent's connection, which shares it.
        """
        if os.getpid() != self._pid:  # no lock either: a parent thread may have held it at fork time
            self._closed, self._channel = True, None
            return
        with self._lock:
            self._closed = True
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close("the connection was closed by this client")


#: Answers a request a server sends this process: (the request, the server's address) -> the response
#: (``request.make_response(...)`` with a body; None for a oneway request, which gets no answer).
ServerRequestHandler = Callable[[RemotingCommand, str], "RemotingCommand | None"]
_server_request_handlers: dict[int, ServerRequestHandler] = {}


def handle_server_requests(code: int, handler: ServerRequestHandler | None) -> None:
    """Answer every request of ``code`` a server sends on any connection of this process with ``handler``
    (None: stop; such requests are then answered REQUEST_CODE_NOT_SUPPORTED again)."""
    if handler is None:
        _server_request_handlers.pop(int(code), None)
    else:
        _server_request_handlers[int(code)] = handler


def _run_listener(listener: ConsumerIdsChangedListener, request: RemotingCommand, address: str) -> None:
    try:
        listener(request)
    except Exception:
        log.exception("%s: consumer-ids-changed listener %r failed", address, listener)


# --------------------------------------------------------------------------- pool

_pool: dict[tuple[int, str, TlsSettings | None], Connection] = {}
_pool_lock = threading.Lock()


def get_connection(address: str, tls: TlsSettings | None = None) -> Connection:
    """The shared :class:`Connection` for ``address`` (with ``tls``, or in clear) in this process (created lazily,
    no I/O)."""
    key = (os.getpid(), address, tls)
    with _pool_lock:
        connection = _pool.get(key)
        if connection is None or connection.closed:
            connection = _pool[key] = Connection(address, tls=tls)
        return connection


def close_all() -> None:
    """Close every pooled connection of this process (never a parent's: that would
    shut down the parent's sockets, which a forked child shares)."""
    pid = os.getpid()
    with _pool_lock:
        mine = [key for key in _pool if key[0] == pid]
        connections = [_pool.pop(key) for key in mine]
    for connection in connections:
        connection.close()


def _forget_parent_pool() -> None:
    # In a forked child the lock may have been held by a parent thread that does not exist
    # here, and the parent's sockets must only be dropped (a close of our copy of the fd is
    # harmless; a shutdown would cut the parent's connection).
    global _pool_lock
    _pool_lock = threading.Lock()
    _pool.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_pool)
