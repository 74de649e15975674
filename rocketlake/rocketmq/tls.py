"""TLS to name servers and brokers, as the Java client's ``useTLS`` speaks it, with Python's ``ssl`` module.

RocketMQ's remoting servers (``tls.server.mode``: ``permissive`` or ``enforcing``) take a TLS handshake on their
usual ports: the first byte of a connection tells them whether it is TLS. A connection here speaks TLS from its first
byte when its cluster is configured with :class:`TlsSettings`.

The encryption runs over memory BIOs (``SSLContext.wrap_bio``), not an ``SSLSocket``: a connection's socket is
written by the callers (one frame at a time) and read by whichever thread leads the reading (``connection._Channel``),
and one OpenSSL object must not be used by two threads at once. With memory BIOs the socket I/O stays as it is
(``poll`` and ``MSG_DONTWAIT``) and only the in-memory TLS steps take a lock.

Unlike the Java client, whose default trusts any certificate (``tls.client.authServer=false``), the server's
certificate chain and its name (the address's host: an IP address must be in the certificate's subjectAltName) are
checked by default; ``verify_hostname: false`` turns the name check off for test clusters with self-signed
certificates, never the chain.
"""

from __future__ import annotations

import functools
import socket
import ssl
import threading
import time
from dataclasses import dataclass

from .errors import ConnectionFailed, ConnectionTurnedAway, describe_request

__all__ = ["TlsSettings", "TlsSession", "handshake", "speaks_tls"]

_RECORD = 64 * 1024


@dataclass(frozen=True)
class TlsSettings:
    """One cluster's TLS: whom to trust, who we are (for servers that ask, ``tls.server.need.client.auth``)."""

    ca_file: str | None = None  # PEM CA bundle the servers' certificates chain to; None: the system's trust store
    cert_file: str | None = None  # PEM client certificate (chain), for servers that require one
    key_file: str | None = None  # its unencrypted PEM private key
    verify_hostname: bool = True  # the certificate must name the address's host (IP SAN for an IP address)

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("a client certificate needs both cert_file and key_file")

    def context(self) -> ssl.SSLContext:
        """The client context, built once per process and settings (the files are read then)."""
        return _context(self)

    def options(self) -> dict[str, str]:
        """The Spark source options carrying these settings to the tasks (paths only: nothing secret)."""
        out = {"tls": "true", "tlsVerifyHostname": str(self.verify_hostname).lower()}
        for key, value in (("tlsCaFile", self.ca_file), ("tlsCertFile", self.cert_file), ("tlsKeyFile", self.key_file)):
            if value is not None:
                out[key] = value
        return out


@functools.lru_cache(maxsize=None)
def _context(settings: TlsSettings) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = settings.verify_hostname
    if settings.cert_file is not None:
        context.load_cert_chain(settings.cert_file, settings.key_file)
    return context


class TlsSession:
    """One connection's TLS state over memory BIOs: ``seal`` plaintext into records, ``open`` records into plaintext.

    Thread-safe: ``seal`` (the writers, under the channel's send lock) and ``open`` (the reading thread) take a lock
    around the OpenSSL object; the bytes they hand back are sent or decoded outside it."""

    def __init__(self, obj: ssl.SSLObject, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO) -> None:
        self._obj, self._in, self._out = obj, incoming, outgoing
        self._lock = threading.Lock()
        self._closed_by_peer = False

    def seal(self, data: bytes | memoryview) -> bytes:
        """The records to send for ``data`` (and whatever the TLS layer itself still had to send)."""
        with self._lock:
            view = memoryview(data)
            while view:
                view = view[self._obj.write(view) :]
            return self._out.read()

    def open(self, records: bytes | memoryview) -> bytes:
        """The plaintext in ``records`` received from the peer (possibly none until a record is whole). After the
        peer's close_notify it returns what came before it and ``closed_by_peer`` turns true.

        Raises ``ssl.SSLError`` on a TLS alert."""
        with self._lock:
            self._in.write(records)
            parts = []
            while not self._closed_by_peer:
                try:
                    part = self._obj.read(_RECORD)
                except ssl.SSLWantReadError:
                    break
                if part:
                    parts.append(part)
                else:
                    # The peer's close_notify: OpenSSL answers every read after it with no bytes, not an error, so
                    # a loop that kept reading would spin (and grow) on the connection of a broker that shut down.
                    self._closed_by_peer = True
            return b"".join(parts)

    @property
    def closed_by_peer(self) -> bool:
        """Whether the peer ended the TLS session (what it sent before is delivered first)."""
        return self._closed_by_peer

    @property
    def wants_write(self) -> bool:
        """Whether reading produced records to send back (a TLS 1.3 key update, for one)."""
        return self._out.pending > 0


def handshake(
    sock: socket.socket, settings: TlsSettings, host: str, address: str, deadline: float, request_code: int
) -> TlsSession:
    """Run the TLS handshake on the freshly connected blocking ``sock`` before ``deadline``."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = settings.context().wrap_bio(incoming, outgoing, server_hostname=host)
    try:
        while True:
            try:
                obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                if outgoing.pending:
                    sock.sendall(outgoing.read())
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                data = sock.recv(_RECORD)
                if not data:
                    raise ConnectionTurnedAway(
                        f"the TLS handshake with {address} failed: the server closed the connection without "
                        "answering; its TLS may be off (tls.server.mode=disabled), or it requires a client "
                        "certificate (tls.cert_file and tls.key_file)",
                        address=address,
                        request_code=request_code,
                    ) from None
                incoming.write(data)
        if outgoing.pending:
            sock.sendall(outgoing.read())
    except ssl.SSLCertVerificationError as exc:
        raise ConnectionTurnedAway(
            f"the TLS handshake with {address} failed: {_verify_advice(exc)}",
            address=address,
            request_code=request_code,
        ) from None
    except ssl.SSLError as exc:
        raise ConnectionTurnedAway(
            f"the TLS handshake with {address} failed: {exc.reason or exc}; {_alert_advice(exc)}",
            address=address,
            request_code=request_code,
        ) from None
    except TimeoutError:
        raise ConnectionFailed(
            f"the TLS handshake with {address} did not finish within the timeout (before "
            f"{describe_request(request_code)}): is this a RocketMQ server with TLS on?",
            address=address,
            request_code=request_code,
        ) from None
    except OSError as exc:  # reset mid-handshake: what a server with TLS off does to a ClientHello
        raise ConnectionTurnedAway(
            f"the TLS handshake with {address} failed: {exc}; its TLS may be off (tls.server.mode=disabled), or it "
            "requires a client certificate (tls.cert_file and tls.key_file)",
            address=address,
            request_code=request_code,
        ) from None
    return TlsSession(obj, incoming, outgoing)


def _verify_advice(exc: ssl.SSLCertVerificationError) -> str:
    message = exc.verify_message or str(exc)
    if "expired" in message:
        return (
            f"its certificate has expired ({message}): renew the server's certificate "
            "(tls.server.certPath on the server)"
        )
    if "not yet valid" in message:
        return f"its certificate is not valid yet ({message}): check the server's certificate and both clocks"
    if "mismatch" in message.lower() or "hostname" in message.lower() or "IP address" in message:
        return (
            f"its certificate does not name this address ({message}): connect by a name the certificate has, "
            "reissue it with this address in its subjectAltName, or, for a test cluster only, set "
            "tls.verify_hostname: false"
        )
    return (
        f"its certificate is not trusted ({message}): set tls.ca_file to the CA that signed the server's "
        "certificate (tls.server.certPath on the server)"
    )


def _alert_advice(exc: ssl.SSLError) -> str:
    reason = (exc.reason or "").upper()
    if "CERTIFICATE_REQUIRED" in reason or "BAD_CERTIFICATE" in reason or "UNKNOWN_CA" in reason:
        return (
            "the server refused our client certificate or wants one (tls.server.need.client.auth): set "
            "tls.cert_file and tls.key_file to a certificate its tls.server.trustCertPath trusts"
        )
    if "WRONG_VERSION_NUMBER" in reason or "PACKET_LENGTH" in reason:
        return "the server does not speak TLS on this port (tls.server.mode=disabled?)"
    return "check the cluster's tls settings against the server's tls.server.* settings"


def tls_failure_advice(exc: ssl.SSLError) -> str:
    """A TLS error after the handshake (an alert the server sent), as a sentence."""
    return f"{exc.reason or exc}; {_alert_advice(exc)}"


def speaks_tls(address: str, timeout: float = 2.0) -> bool:
    """Whether the server at ``address`` answers a TLS handshake: asked after it closed a plain connection before
    answering anything, which an enforcing TLS server does at a plain client's first byte, and a server that crashed
    at that moment does too. Only the handshake's answer is looked at (no certificate is checked, nothing is sent
    after it): a TLS server answers with its hello or an alert; a plain RocketMQ server answers a ClientHello
    with nothing, a server that is down refuses the connection."""
    host, _, port = address.rpartition(":")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, int(port)), timeout=timeout) as sock,
            context.wrap_socket(sock, server_hostname=host),
        ):
            return True
    except ssl.SSLError as exc:  # an alert is TLS too (a server that requires a certificate we did not offer)
        return "ALERT" in (exc.reason or "")
    except (OSError, ValueError):
        return False
