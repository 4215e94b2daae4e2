"""Connection limits as Kafka's broker applies them (issue 13): `max.connections.per.ip` closes
one connection too many from an address, `max.connections` (here a listener's own) makes new
clients wait until a connection closes, `connections.max.idle.ms` closes a
connection that sends nothing; a client that keeps talking is left alone."""

from __future__ import annotations

import socket
import time

import pytest

import kwire
from conftest import free_port

pytestmark = pytest.mark.single_node("limits are per broker")


def api_versions_ok(conn: kwire.Conn) -> bool:
    code, _ = kwire.parse_api_versions_v0(kwire.api_versions(conn))
    return code == kwire.ERR_NONE


def conn_from(source: str, port: int) -> kwire.Conn:
    """A wire connection to the broker from the loopback address `source` (127.0.0.0/8 is all
    loopback on Linux), so that the fixtures' own connections from 127.0.0.1 do not count."""
    conn = kwire.Conn.__new__(kwire.Conn)
    conn.sock = socket.create_connection(("127.0.0.1", port), timeout=10,
                                         source_address=(source, 0))
    conn.corr = 0
    return conn


def test_one_connection_too_many_from_an_address_is_closed(broker_factory):
    b = broker_factory({"max.connections.per.ip": 1000,
                        "max.connections.per.ip.overrides": "127.0.0.2:3"})
    conns = [conn_from("127.0.0.2", b.port) for _ in range(3)]
    try:
        assert all(api_versions_ok(c) for c in conns)
        extra = conn_from("127.0.0.2", b.port)
        assert extra.wait_closed(timeout=5)
        extra.close()
        from test_remote_wal import metric_sum_one
        assert metric_sum_one(b, "ferry_connections_refused_total") == 1
        # Another address is not affected.
        with conn_from("127.0.0.3", b.port) as other:
            assert api_versions_ok(other)
        # One closes: the next one is served.
        conns.pop().close()
        deadline = time.monotonic() + 5
        while True:
            try:
                with conn_from("127.0.0.2", b.port) as again:
                    assert api_versions_ok(again)
                break
            except (ConnectionError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        for c in conns:
            c.close()
    assert b.alive()


def test_at_max_connections_a_client_waits_until_a_connection_closes(broker_factory):
    # CLIENT has a limit of its own (the broker-wide one would also count the connections the
    # fixtures and the inter-broker listener hold; its rules are unit-tested in limits.rs).
    client_port = free_port()
    b = broker_factory({"listener.name.client.max.connections": 2}, start=False)
    b.extra_config["listeners"] = (
        f"PLAINTEXT://127.0.0.1:{b.port},CLIENT://127.0.0.1:{client_port}")
    b.extra_config["advertised.listeners"] = ""
    b.extra_config["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT"
    b.start()
    held = [kwire.Conn("127.0.0.1", client_port), kwire.Conn("127.0.0.1", client_port)]
    try:
        assert all(api_versions_ok(c) for c in held)
        waiting = kwire.Conn("127.0.0.1", client_port, timeout=1.5)
        # Connected (the kernel's backlog) but not served while two are open.
        with pytest.raises(socket.timeout):
            api_versions_ok(waiting)
        # Another listener is not held to CLIENT's limit.
        with kwire.Conn.to(b) as other:
            assert api_versions_ok(other)
        # A close lets the waiting client in; its request was kept, so it gets its answer.
        held.pop().close()
        waiting.sock.settimeout(10)
        r = kwire.Reader(waiting.recv_frame())
        assert r.i32() == waiting.corr
        assert r.i16() == kwire.ERR_NONE
        waiting.close()
    finally:
        for c in held:
            c.close()


def test_an_idle_connection_is_closed_and_a_talking_one_is_not(broker_factory):
    b = broker_factory({"connections.max.idle.ms": 1000})
    with kwire.Conn.to(b) as idle, kwire.Conn.to(b) as talking:
        assert api_versions_ok(idle) and api_versions_ok(talking)
        started = time.monotonic()
        while time.monotonic() - started < 3:
            assert api_versions_ok(talking)
            time.sleep(0.3)
        assert idle.wait_closed(timeout=1)
        assert api_versions_ok(talking)
