"""The remoting client's TLS layer (rocketlake/rocketmq/tls.py) against a TLS peer on loopback made with Python's own
``ssl`` server side: frames of any size sealed and opened in order from several threads, and each handshake failure a
user meets (untrusted CA, expired certificate, a name the certificate lacks, a plain server) told in one sentence that
names the address and what to set. The same client against real name servers and brokers with TLS enforced is
tests/integration/test_rocketmq_security.py.
"""

from __future__ import annotations

import dataclasses
import socket
import ssl
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from rocketlake.engine.config import TlsConfig
from rocketlake.engine.options import SourceOptionError, parse_options
from rocketlake.local.certificates import Issued, issue, local_certificates, new_authority
from rocketlake.rocketmq.connection import Connection
from rocketlake.rocketmq.errors import ConnectionFailed
from rocketlake.rocketmq.frame import FrameDecoder, RemotingCommand, encode
from rocketlake.rocketmq.tls import TlsSettings

pytestmark = pytest.mark.unit
CODE = 310  # any request code: the responder answers every request with its body


@contextmanager
def responder(
    cert: Issued | None, client_ca: Path | None = None, close_notify_after: int | None = None
) -> Iterator[int]:
    """A TLS server on a free loopback port answering each remoting request with a response carrying its body
    (plain TCP when ``cert`` is None); a client certificate from ``client_ca`` is required when given. After
    ``close_notify_after`` answers it ends the TLS session (close_notify, as a broker shutting down does) and keeps
    the TCP connection open until the test ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    context = None
    if cert is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert.cert_file, cert.key_file)
        if client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(client_ca)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        try:
            if context is not None:
                conn = context.wrap_socket(conn, server_side=True)
            decoder = FrameDecoder(64 * 1024 * 1024)
            answered = 0
            while not stop.is_set():
                if answered == close_notify_after:
                    conn = conn.unwrap()  # close_notify sent; the socket stays open
                    stop.wait()
                    return
                data = conn.recv(65536)
                if not data:
                    return
                for request in decoder.feed(data):
                    response = dataclasses.replace(request.make_response(0, "ok"), body=request.body)
                    conn.sendall(encode(response))
                    answered += 1
        except Exception:  # a handshake or a frame the client's test makes fail: the connection just ends
            return
        finally:
            conn.close()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory):
    return local_certificates(tmp_path_factory.mktemp("pki"))


def call(port: int, tls: TlsSettings | None, body: bytes = b"x", host: str = "127.0.0.1") -> RemotingCommand:
    connection = Connection(f"{host}:{port}", tls=tls)
    try:
        return connection.invoke(RemotingCommand.request(CODE, body=body), 5.0)
    finally:
        connection.close()


def test_frames_of_any_size_cross_tls_in_order_from_several_threads(pki):
    tls = TlsSettings(str(pki.ca.cert_file))
    with responder(pki.server) as port:
        connection = Connection(f"127.0.0.1:{port}", tls=tls)
        bodies = [bytes([i % 251]) * size for i, size in enumerate([0, 1, 16_383, 16_384, 16_385, 3_000_000] * 4)]
        with ThreadPoolExecutor(6) as pool:
            answers = list(
                pool.map(lambda b: connection.invoke(RemotingCommand.request(CODE, body=b), 10.0).body, bodies)
            )
        assert answers == bodies
        assert "tls" in repr(connection)
        connection.close()


def test_a_tls_session_the_peer_ends_fails_the_connection_at_once(pki):
    """A broker shutting down sends close_notify: the connection fails then (its next call opens a new one), and its
    reading thread stops, where it once spun reading nothing and grew a test worker to 16 GB."""
    import time

    with responder(pki.server, close_notify_after=1) as port:
        connection = Connection(f"127.0.0.1:{port}", tls=TlsSettings(str(pki.ca.cert_file)))
        try:
            assert connection.invoke(RemotingCommand.request(CODE, body=b"once"), 5.0).body == b"once"
            deadline = time.monotonic() + 5
            while connection.connected:
                assert time.monotonic() < deadline, "the connection outlived its TLS session"
                time.sleep(0.01)
            for reader in [t for t in threading.enumerate() if t.name == f"rocketmq-reader[127.0.0.1:{port}]"]:
                reader.join(5)
                assert not reader.is_alive(), "the connection's reading thread still runs"
            assert connection.invoke(RemotingCommand.request(CODE, body=b"again"), 5.0).body == b"again"  # reconnects
        finally:
            connection.close()


def test_an_untrusted_certificate_names_the_address_and_the_setting(pki, tmp_path):
    other = new_authority(tmp_path / "other", "another CA")
    with responder(pki.server) as port, pytest.raises(ConnectionFailed) as failed:
        call(port, TlsSettings(str(other.cert_file)))
    message = str(failed.value)
    assert f"127.0.0.1:{port}" in message and "not trusted" in message and "tls.ca_file" in message


def test_an_expired_certificate_is_named_as_such(pki, tmp_path):
    now = datetime.now(timezone.utc)
    expired = issue(pki.ca, tmp_path, "expired", not_before=now - timedelta(days=2), not_after=now - timedelta(days=1))
    with responder(expired) as port, pytest.raises(ConnectionFailed) as failed:
        call(port, TlsSettings(str(pki.ca.cert_file)))
    assert f"127.0.0.1:{port}" in str(failed.value) and "expired" in str(failed.value)


def test_the_name_is_checked_unless_turned_off(pki, tmp_path):
    elsewhere = issue(pki.ca, tmp_path, "elsewhere", names=("broker.example.com",))
    with responder(elsewhere) as port:
        with pytest.raises(ConnectionFailed, match="does not name this address.*verify_hostname: false"):
            call(port, TlsSettings(str(pki.ca.cert_file)))
        assert call(port, TlsSettings(str(pki.ca.cert_file), verify_hostname=False), b"ok").body == b"ok"


def test_a_client_certificate_is_presented_when_configured(pki):
    with responder(pki.server, client_ca=pki.ca.cert_file) as port:
        assert (
            call(
                port, TlsSettings(str(pki.ca.cert_file), str(pki.client.cert_file), str(pki.client.key_file)), b"me"
            ).body
            == b"me"
        )
        with pytest.raises(ConnectionFailed, match="client certificate"):
            call(port, TlsSettings(str(pki.ca.cert_file)))


def test_tls_to_a_plain_server_fails_at_once_with_advice(pki):
    with responder(None) as port, pytest.raises(ConnectionFailed, match=f"127.0.0.1:{port}.*TLS"):
        call(port, TlsSettings(str(pki.ca.cert_file)))


def test_tls_settings_reach_the_tasks_as_paths_only(pki):
    tls = TlsConfig(
        ca_file=str(pki.ca.cert_file), cert_file=str(pki.client.cert_file), key_file=str(pki.client.key_file)
    ).settings()
    options = tls.options()
    assert parse_options({"namesrv": "127.0.0.1:9876", "topic": "t", **options}).tls == tls
    assert parse_options({"namesrv": "127.0.0.1:9876", "topic": "t"}).tls is None
    with pytest.raises(SourceOptionError, match="tlsCaFile|tlscafile"):
        parse_options({"namesrv": "127.0.0.1:9876", "topic": "t", "tlsCaFile": "x"})


def test_tls_configuration_errors_name_the_key(tmp_path):
    with pytest.raises(ValueError, match="ca_file: .*not a readable file"):
        TlsConfig(ca_file=str(tmp_path / "missing.pem"))
    with pytest.raises(ValueError, match="cert_file and key_file go together"):
        TlsConfig(cert_file=str(tmp_path / "c.pem"))


def test_a_failed_handshake_is_not_retried(pki):
    """A handshake that fails is a ConnectionTurnedAway, which nothing retries: only new settings help."""
    from rocketlake.rocketmq.errors import ConnectionTurnedAway
    from rocketlake.rocketmq.retry import is_retriable

    with responder(pki.server) as port, pytest.raises(ConnectionTurnedAway) as failed:
        call(port, TlsSettings(str(new_authority(pki.ca.cert_file.parent / "x", "x").cert_file)))
    assert not is_retriable(failed.value)
    with responder(None) as port, pytest.raises(ConnectionTurnedAway) as failed:
        call(port, TlsSettings(str(pki.ca.cert_file)))
    assert not is_retriable(failed.value)
