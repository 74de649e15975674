"""Connection: opaque matching, timeouts, reconnects, server-initiated requests, the pool.

The other end is a *frame echo peer*: a loopback listener that splits the byte stream into
frames with the codec and, by default, echoes each request back as a response with the same
opaque. Tests give it a ``reply`` function to hold, reorder or drop answers, or to cut the
connection. It knows nothing of RocketMQ beyond framing and is not a broker; tests against a
real broker live in tests/integration.

Synchronisation uses queues, events and futures with timeouts, never sleeps.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import socket
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from rocketlake.rocketmq.acl import AclClientRPCHook, Credentials, sign, signing_content
from rocketlake.rocketmq.codes import RequestCode, ResponseCode, SerializeType
from rocketlake.rocketmq.connection import Connection, close_all, get_connection, split_address
from rocketlake.rocketmq.errors import (
    ConnectionFailed,
    InvalidArgument,
    RequestTimeout,
    TopicNotExist,
)
from rocketlake.rocketmq.frame import FLAG_ONEWAY, RemotingCommand, encode
from tests.unit.frame_peer import CLOSE, WAIT, FrameEchoPeer, echo, echo_response


@pytest.fixture
def peer() -> Iterator[FrameEchoPeer]:
    peer = FrameEchoPeer()
    yield peer
    peer.close()


@pytest.fixture
def conn(peer: FrameEchoPeer) -> Iterator[Connection]:
    connection = Connection(peer.address)
    yield connection
    connection.close()


def request(code: int = RequestCode.GET_MAX_OFFSET, body: bytes = b"", **fields: object) -> RemotingCommand:
    return RemotingCommand.request(code, fields or {"topic": "T1", "queueId": 0}, body)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- request / response


def test_invoke_round_trip_keeps_the_callers_request_untouched(peer: FrameEchoPeer, conn: Connection) -> None:
    original = request(body=b"payload", topic="T1", queueId=3)
    response = conn.invoke(original, timeout=WAIT)
    sent = peer.next_received()
    assert response.ext_fields == {"topic": "T1", "queueId": "3"} and response.body == b"payload"
    assert response.opaque == sent.opaque and response.is_response
    assert sent.language == "PYTHON" and sent.version == 479 and sent.serialize_type == SerializeType.JSON
    assert original.opaque == 0 and original.flag == 0  # the copy got the opaque, not the caller's object
    assert conn.connected


def test_responses_out_of_order_reach_their_own_callers(peer: FrameEchoPeer, conn: Connection) -> None:
    held: list[RemotingCommand] = []

    def reply(req: RemotingCommand) -> list[bytes]:
        held.append(req)  # hold the first, then answer both in reverse order
        return [] if len(held) < 2 else [encode(echo_response(r)) for r in reversed(held)]

    peer.reply = reply
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(conn.invoke, request(body=b"one"), WAIT)
        second = pool.submit(conn.invoke, request(body=b"two"), WAIT)
        assert first.result(WAIT).body == b"one"
        assert second.result(WAIT).body == b"two"
    assert held[0].opaque != held[1].opaque


def test_many_threads_share_one_connection(peer: FrameEchoPeer, conn: Connection) -> None:
    def call(i: int) -> bool:
        body = f"call-{i}".encode()
        return conn.invoke(request(body=body), WAIT).body == body

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(call, range(400)))
    assert peer.accepted == 1


def test_broker_answers_in_the_binary_header_type(peer: FrameEchoPeer, conn: Connection) -> None:
    peer.reply = lambda req: [encode(echo_response(req, serialize_type=SerializeType.ROCKETMQ, remark="bin"))]
    response = conn.invoke(request(topic="T2"), WAIT)
    assert response.serialize_type == SerializeType.ROCKETMQ
    assert (response.remark, response.ext_fields["topic"]) == ("bin", "T2")


def test_invoke_checked_raises_the_broker_error_with_full_context(peer: FrameEchoPeer, conn: Connection) -> None:
    remark = "topic[x] not exist, apply first please!"
    peer.reply = lambda req: [encode(echo_response(req, code=ResponseCode.TOPIC_NOT_EXIST, remark=remark))]
    assert conn.invoke(request(RequestCode.PULL_MESSAGE), WAIT).code == 17  # plain invoke returns it
    with pytest.raises(TopicNotExist) as info:
        conn.invoke_checked(request(RequestCode.PULL_MESSAGE), WAIT)
    assert str(info.value) == f"{peer.address} answered PULL_MESSAGE(11) with TOPIC_NOT_EXIST(17): {remark}"
    ok = conn.invoke_checked(request(RequestCode.PULL_MESSAGE), WAIT, ok_codes=(17, 19))
    assert ok.remark == remark


def test_oneway_requests_carry_the_flag_and_expect_nothing(peer: FrameEchoPeer, conn: Connection) -> None:
    conn.invoke_oneway(request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="g", commitOffset=5), WAIT)
    sent = peer.next_received()
    assert sent.code == 15 and sent.flag & FLAG_ONEWAY
    assert sent.ext_fields == {"consumerGroup": "g", "commitOffset": "5"}
    assert conn.invoke(request(), WAIT).is_success  # the connection is still fine


def test_an_answer_body_is_bytes_unless_its_caller_reads_it_in_place(peer: FrameEchoPeer, conn: Connection) -> None:
    """Only a caller that asks (a pull, whose records are read where the socket wrote them) gets ``body_view``;
    every other caller, a raw PULL_MESSAGE included, gets ``body`` as before."""
    peer.reply = lambda req: [encode(echo_response(req))]
    plain = conn.invoke(request(RequestCode.PULL_MESSAGE, body=b"records"), WAIT)
    assert plain.body == b"records" and plain.body_view is None
    in_place = conn.invoke_async(request(RequestCode.PULL_MESSAGE, body=b"records"), WAIT, body_in_place=True).result()
    assert in_place.body == b"" and bytes(in_place.body_view) == b"records"


def test_rpc_hook_signs_a_copy_that_the_peer_can_verify(peer: FrameEchoPeer, conn: Connection) -> None:
    original = request(RequestCode.PULL_MESSAGE, body=b"\x01\x02", topic="T1", queueId=0)
    conn.invoke(original, WAIT, rpc_hook=AclClientRPCHook(Credentials("ak", "sk")))
    sent = peer.next_received()
    assert sent.ext_fields["AccessKey"] == "ak"
    assert sent.ext_fields["Signature"] == sign(signing_content(sent.ext_fields, sent.body), "sk")
    assert "Signature" not in original.ext_fields


def test_one_thread_keeps_several_requests_in_flight_and_reads_their_answers_itself(
    peer: FrameEchoPeer, conn: Connection
) -> None:
    held: list[RemotingCommand] = []

    def reply(req: RemotingCommand) -> list[bytes]:
        held.append(req)  # nothing is answered until all four are on the wire, then in reverse
        return [] if len(held) < 4 else [encode(echo_response(r)) for r in reversed(held)]

    peer.reply = reply
    pending = [conn.invoke_async(request(body=f"call-{i}".encode()), WAIT) for i in range(4)]
    assert [p.result().body for p in pending] == [f"call-{i}".encode() for i in range(4)]
    assert len({r.opaque for r in held}) == 4 and peer.accepted == 1


def test_a_caller_reading_for_itself_also_delivers_another_threads_answer(
    peer: FrameEchoPeer, conn: Connection
) -> None:
    held: list[RemotingCommand] = []

    def reply(req: RemotingCommand) -> list[bytes]:
        held.append(req)  # both answers come together, after the second request
        return [] if len(held) < 2 else [encode(echo_response(r)) for r in held]

    peer.reply = reply
    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(conn.invoke, request(body=b"theirs"), WAIT)
        peer.next_received()  # the other thread's request is on the wire and it is waiting
        assert conn.invoke(request(body=b"mine"), WAIT).body == b"mine"
        assert other.result(WAIT).body == b"theirs"


def test_a_cancelled_request_drops_its_late_answer_and_the_connection_goes_on(
    peer: FrameEchoPeer, conn: Connection
) -> None:
    stalled: list[RemotingCommand] = []

    def reply(req: RemotingCommand) -> list[bytes]:
        if req.code == RequestCode.PULL_MESSAGE:
            stalled.append(req)
            return []
        return [encode(echo_response(r, body=b"late")) for r in stalled] + echo(req)

    peer.reply = reply
    pending = conn.invoke_async(request(RequestCode.PULL_MESSAGE), WAIT)
    peer.next_received()
    pending.cancel()
    assert conn.invoke(request(body=b"fresh"), WAIT).body == b"fresh"  # the late answer went nowhere
    assert not pending.done() and peer.accepted == 1


def test_an_async_request_times_out_from_its_send_naming_the_request(peer: FrameEchoPeer, conn: Connection) -> None:
    peer.reply = lambda req: []
    pending = conn.invoke_async(request(RequestCode.QUERY_CONSUMER_OFFSET), timeout=0.2)
    peer.next_received()
    started = time.monotonic()
    with pytest.raises(RequestTimeout, match=r"did not answer QUERY_CONSUMER_OFFSET\(14\) .* within 0.2 s"):
        pending.result()
    assert time.monotonic() - started < WAIT


# --------------------------------------------------------------------------- timeouts


def test_timeout_names_address_and_request_then_the_next_call_reconnects(peer: FrameEchoPeer, conn: Connection) -> None:
    peer.reply = lambda req: [] if req.code == RequestCode.GET_CONSUMER_LIST_BY_GROUP else echo(req)
    started = time.monotonic()
    with pytest.raises(RequestTimeout) as info:
        conn.invoke(request(RequestCode.GET_CONSUMER_LIST_BY_GROUP), timeout=0.3)
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < WAIT
    message = str(info.value)
    assert peer.address in message and "GET_CONSUMER_LIST_BY_GROUP(38)" in message and "0.3 s" in message
    assert (info.value.address, info.value.request_code, info.value.retriable) == (peer.address, 38, True)
    # clientCloseSocketIfTimeout: the timed-out socket was dropped, the next call opens a new one.
    assert conn.invoke(request(), WAIT).is_success
    assert peer.accepted == 2


def test_without_close_on_timeout_a_late_answer_is_dropped_and_the_socket_kept(peer: FrameEchoPeer) -> None:
    stalled: list[RemotingCommand] = []

    def reply(req: RemotingCommand) -> list[bytes]:
        if req.code == RequestCode.GET_CONSUMER_LIST_BY_GROUP:
            stalled.append(req)  # answered only together with the next request, i.e. too late
            return []
        return [encode(echo_response(r, body=b"late")) for r in stalled] + echo(req)

    peer.reply = reply
    conn = Connection(peer.address, close_on_timeout=False)
    try:
        with pytest.raises(RequestTimeout):
            conn.invoke(request(RequestCode.GET_CONSUMER_LIST_BY_GROUP), timeout=0.2)
        assert conn.invoke(request(body=b"fresh"), WAIT).body == b"fresh"  # not the late answer
        assert peer.accepted == 1
    finally:
        conn.close()


# --------------------------------------------------------------------------- broken connections


def test_a_channel_idle_past_the_limit_is_replaced_before_the_next_request(
    peer: FrameEchoPeer, conn: Connection
) -> None:
    """Brokers close a connection idle for 120 s; a request must never race that close, so a channel idle for
    CHANNEL_MAX_IDLE_S is retired and the request goes out on a new one. A busy channel is kept."""
    from rocketlake.rocketmq.connection import CHANNEL_MAX_IDLE_S

    assert conn.invoke(request(), WAIT).is_success
    conn._channel.last_active -= CHANNEL_MAX_IDLE_S / 2  # used a while ago, within the limit: kept
    assert conn.invoke(request(), WAIT).is_success
    assert peer.accepted == 1
    conn._channel.last_active -= CHANNEL_MAX_IDLE_S + 1  # idle past the limit (the clock, not a sleep)
    assert conn.invoke(request(), WAIT).is_success
    assert peer.accepted == 2


def test_a_broken_connection_fails_every_pending_call_at_once(peer: FrameEchoPeer, conn: Connection) -> None:
    def reply(req: RemotingCommand) -> list[bytes]:
        if req.code == RequestCode.HEART_BEAT:
            return [CLOSE]
        return [] if req.code == RequestCode.PULL_MESSAGE else echo(req)  # pulls are held forever

    peer.reply = reply
    with ThreadPoolExecutor(2) as pool:
        pending = [pool.submit(conn.invoke, request(RequestCode.PULL_MESSAGE), 30.0) for _ in range(2)]
        assert {peer.next_received().code, peer.next_received().code} == {11}  # both are in flight
        started = time.monotonic()
        with pytest.raises(ConnectionFailed) as info:
            conn.invoke(request(RequestCode.HEART_BEAT), 30.0)
        assert "HEART_BEAT(34)" in str(info.value) and peer.address in str(info.value)
        for future in pending:
            with pytest.raises(ConnectionFailed, match=r"broke while waiting for PULL_MESSAGE\(11\)"):
                future.result(WAIT)
        assert time.monotonic() - started < WAIT  # failed by the break, not by the 30 s timeout
    assert conn.invoke(request(), WAIT).is_success  # the next call reconnects
    assert peer.accepted == 3  # the first, a TLS probe (it closed before any answer: does it speak TLS?), the next


def test_a_restarted_peer_on_the_same_port_needs_no_new_client() -> None:
    first = FrameEchoPeer()
    conn = Connection(first.address)
    try:
        assert conn.invoke(request(), WAIT).is_success
        first.close()  # "broker restart", part 1
        with pytest.raises(ConnectionFailed):
            conn.invoke(request(), WAIT)
        second = FrameEchoPeer(port=first.port)  # part 2: back on the same address
        try:
            assert conn.invoke(request(body=b"again"), WAIT).body == b"again"
        finally:
            second.close()
    finally:
        conn.close()


def test_undecodable_bytes_from_the_peer_fail_the_call(peer: FrameEchoPeer, conn: Connection) -> None:
    peer.reply = lambda req: [struct.pack(">i", 0x7FFFFFFF)]  # a frame length far over 16 MiB
    with pytest.raises(ConnectionFailed, match="undecodable data from the peer: frame of 2147483651 bytes exceeds"):
        conn.invoke(request(), 30.0)


def test_connect_failure_names_address_and_request() -> None:
    address = f"127.0.0.1:{closed_port()}"
    conn = Connection(address)
    with pytest.raises(ConnectionFailed) as info:
        conn.invoke(request(RequestCode.PULL_MESSAGE), WAIT)
    assert str(info.value).startswith(f"cannot connect to {address} for PULL_MESSAGE(11): ")
    assert info.value.retriable and not conn.connected


def test_close_fails_pending_calls_and_is_final(peer: FrameEchoPeer) -> None:
    peer.reply = lambda req: []
    conn = Connection(peer.address)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(conn.invoke, request(), 30.0)
        peer.next_received()
        conn.close()
        with pytest.raises(ConnectionFailed, match="closed by this client"):
            pending.result(WAIT)
    with pytest.raises(ConnectionFailed, match="closed by this client"):
        conn.invoke(request(), WAIT)
    assert conn.closed


# --------------------------------------------------------------------------- server -> client


def test_unknown_server_requests_are_answered_request_code_not_supported(peer: FrameEchoPeer, conn: Connection) -> None:
    conn.invoke(request(), WAIT)
    peer.next_received()
    peer.push(RemotingCommand(code=RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, opaque=88, flag=FLAG_ONEWAY))
    peer.push(RemotingCommand(code=RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, opaque=89, language="JAVA"))
    answer = peer.next_received()
    assert answer.opaque == 89  # the oneway one (88) got no answer
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and answer.is_response
    assert answer.remark == " request type 221 not supported"  # NettyRemotingAbstract's wording
    assert conn.invoke(request(), WAIT).is_success


def test_notify_consumer_ids_changed_reaches_listeners_and_is_not_answered(
    peer: FrameEchoPeer, conn: Connection
) -> None:
    notified: queue.Queue[RemotingCommand] = queue.Queue()
    calls_from_listener: queue.Queue[bytes] = queue.Queue()

    def failing_listener(_: RemotingCommand) -> None:
        raise RuntimeError("a broken listener must not break the connection")

    def calling_listener(_: RemotingCommand) -> None:
        # A listener may call the broker on the very connection that notified it.
        calls_from_listener.put(conn.invoke(request(body=b"from listener"), WAIT).body)

    conn.add_consumer_ids_changed_listener(failing_listener)
    conn.add_consumer_ids_changed_listener(notified.put)
    conn.add_consumer_ids_changed_listener(calling_listener)
    conn.invoke(request(), WAIT)
    peer.next_received()
    peer.push(
        RemotingCommand(
            code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields={"consumerGroup": "g1"}, opaque=5, flag=FLAG_ONEWAY
        )
    )
    assert notified.get(timeout=WAIT).ext_fields == {"consumerGroup": "g1"}
    assert calls_from_listener.get(timeout=WAIT) == b"from listener"
    assert peer.next_received().body == b"from listener"  # nothing was sent in answer to the notification
    conn.remove_consumer_ids_changed_listener(calling_listener)
    peer.push(RemotingCommand(code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, opaque=6, flag=FLAG_ONEWAY))
    assert notified.get(timeout=WAIT).opaque == 6
    assert calls_from_listener.empty()


# --------------------------------------------------------------------------- pool and processes


def test_pool_returns_one_connection_per_address_even_under_contention() -> None:
    addresses = ("127.0.0.1:1", "127.0.0.1:2")
    barrier = threading.Barrier(16)

    def fetch(i: int) -> Connection:
        barrier.wait(WAIT)
        return get_connection(addresses[i % 2])

    try:
        with ThreadPoolExecutor(16) as pool:
            got = list(pool.map(fetch, range(16)))
        assert len({id(c) for c in got[0::2]}) == 1 and len({id(c) for c in got[1::2]}) == 1
        assert got[0] is not got[1] and got[0].address == addresses[0]
        got[0].close()
        assert get_connection(addresses[0]) is not got[0]  # a closed one is replaced
    finally:
        close_all()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_never_uses_its_parents_socket(peer: FrameEchoPeer) -> None:
    try:
        parent_conn = get_connection(peer.address)
        assert parent_conn.invoke(request(body=b"parent"), WAIT).body == b"parent"
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: report through the pipe, never return into pytest
            verdict = b"?"
            try:
                child_conn = get_connection(peer.address)
                try:
                    parent_conn.invoke(request(), WAIT)
                    inherited = b"used"
                except ConnectionFailed:
                    inherited = b"refused"
                fresh = child_conn.invoke(request(body=b"child"), WAIT).body
                parent_conn.close()  # must only drop the inherited socket, never shut it down
                verdict = b"|".join((b"new" if child_conn is not parent_conn else b"same", inherited, fresh))
            finally:
                os.write(write_end, verdict)
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            verdict = pipe.read()
        os.waitpid(pid, 0)
        assert verdict == b"new|refused|child"
        assert peer.accepted == 2  # the child opened its own socket
        assert parent_conn.invoke(request(body=b"still"), WAIT).body == b"still"  # and left ours alone
    finally:
        close_all()


def test_connections_refuse_pickling_with_advice() -> None:
    with pytest.raises(TypeError, match=r"call get_connection\(address\) in the worker"):
        pickle.dumps(Connection("127.0.0.1:10911"))


@pytest.mark.parametrize(
    "address, expected",
    [
        ("127.0.0.1:10911", ("127.0.0.1", 10911)),
        (" broker-a.local:9876 ", ("broker-a.local", 9876)),
        ("[::1]:10911", ("::1", 10911)),
        ("fe80::1:10911", ("fe80::1", 10911)),  # RocketMQ splits at the last colon
    ],
)
def test_split_address(address: str, expected: tuple[str, int]) -> None:
    assert split_address(address) == expected


@pytest.mark.parametrize("address", ["localhost", "host:", ":9876", "host:port", "host:70000", "host:0", "h:²"])
def test_split_address_rejects_bad_input(address: str) -> None:
    with pytest.raises(InvalidArgument, match="expected host:port"):
        split_address(address)


def test_a_plain_server_that_closes_at_once_is_not_taken_for_a_tls_server() -> None:
    """A server that closes a new plain connection before answering (crashing, say) and does not answer a TLS
    handshake: the failure stays a ``ClosedBeforeAnswer``, retried like any broken connection, never a refusal."""
    from rocketlake.rocketmq.errors import ClosedBeforeAnswer, ConnectionTurnedAway
    from rocketlake.rocketmq.tls import speaks_tls

    listener = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{listener.getsockname()[1]}"

    def close_each() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                conn.recv(1)  # the first byte, as an enforcing TLS server reads it, then the close
                conn.close()

    threading.Thread(target=close_each, daemon=True).start()
    try:
        assert not speaks_tls(address)
        connection = Connection(address)
        with pytest.raises(ClosedBeforeAnswer) as failed:
            connection.invoke(RemotingCommand.request(105), 3.0)
        assert not isinstance(failed.value, ConnectionTurnedAway) and failed.value.retriable
        connection.close()
    finally:
        listener.close()
    assert not speaks_tls(address)  # nothing listens: refused
