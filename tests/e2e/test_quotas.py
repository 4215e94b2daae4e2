"""Client quotas enforced (issue 13, KIP-13/55/124/219): a client over its `producer_byte_rate`,
`consumer_byte_rate` or `request_percentage` gets `throttle_time_ms` in its response at once and its connection is then
muted for that long, so over a window its bytes stay near the quota; a throttled fetch loses
nothing; other clients and a removed quota are not throttled.

The brokers here measure over two one-second windows (`quota.window.num = 2`), so a client's
burst allowance is about one second's worth of its quota. Elapsed times are only ever checked
from below (a throttled client cannot be faster than its quota allows), which a slow machine
cannot break."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

import kwire
from conftest import create_topic, unique_topic
from test_security_admin import alter_quotas

pytestmark = pytest.mark.single_node("quota state is per broker; one broker keeps the arithmetic simple")

WINDOWS = {"quota.window.num": 2, "quota.window.size.seconds": 1}


def produce_throttle(conn: kwire.Conn, topic: str, value_bytes: int, client_id: str) -> tuple[int, int]:
    """One Produce v3 of a single record of `value_bytes`; (error code, throttle_time_ms)."""
    batch = kwire.record_batch([(None, b"x" * value_bytes)])
    body = (kwire.string(None) + kwire.i16(1) + kwire.i32(30000) + kwire.i32(1)
            + kwire.string(topic) + kwire.i32(1) + kwire.i32(0) + kwire.bytes_(batch))
    conn.corr += 1
    header = kwire.request_header_v1(kwire.API_PRODUCE, 3, conn.corr, client_id)
    conn.send_raw(kwire.frame(header + body))
    r = kwire.Reader(conn.recv_frame())
    assert r.i32() == conn.corr
    assert r.i32() == 1
    r.string()
    assert r.i32() == 1
    r.i32()
    err = r.i16()
    r.i64(), r.i64()
    return err, r.i32()


def set_quota(broker, entity, key: str, value: float | None):
    ops = [(key, value or 0.0, value is None)]
    assert alter_quotas(broker.port, [(entity, ops)]) == [0]


def test_a_produce_over_quota_is_answered_with_throttle_time_and_the_connection_muted(broker_factory):
    b = broker_factory(WINDOWS)
    topic = create_topic(b, unique_topic("quota"), partitions=1)
    set_quota(b, [("client-id", "capped")], "producer_byte_rate", 50_000)
    with kwire.Conn.to(b) as conn:
        # The quota reaches the broker's image in a moment.
        deadline = time.monotonic() + 10
        throttle = 0
        while throttle == 0 and time.monotonic() < deadline:
            err, throttle = produce_throttle(conn, topic, 200_000, "capped")
            assert err == 0
        # 200 kB at once against 50 kB/s over ~1 s windows: seconds of throttle.
        assert throttle >= 1000, throttle
        # Muted: the next request is read only once the throttle time has passed.
        sent = time.monotonic()
        err, _ = produce_throttle(conn, topic, 10, "capped")
        assert err == 0
        assert time.monotonic() - sent >= throttle / 1000 * 0.8
    from test_remote_wal import metric_sum_one
    assert metric_sum_one(b, "ferry_quota_throttle_ms_total", api="Produce") >= throttle
    # Another client id on the same broker is not throttled.
    with kwire.Conn.to(b) as conn:
        assert produce_throttle(conn, topic, 200_000, "free") == (0, 0)
    # With the quota removed, "capped" is free again.
    set_quota(b, [("client-id", "capped")], "producer_byte_rate", None)
    with kwire.Conn.to(b) as conn:
        deadline = time.monotonic() + 10
        while True:
            err, throttle = produce_throttle(conn, topic, 1000, "capped")
            if throttle == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert (err, throttle) == (0, 0)


def test_a_producer_is_held_to_its_byte_rate_over_a_window(broker_factory):
    b = broker_factory(WINDOWS)
    topic = create_topic(b, unique_topic("quota"), partitions=1)
    quota = 100_000
    set_quota(b, [("client-id", "capped-producer")], "producer_byte_rate", quota)
    time.sleep(1)
    # Small batches: a quota delays a client's next request, never the one that went over.
    p = Producer({"bootstrap.servers": b.bootstrap, "client.id": "capped-producer",
                  "acks": 1, "linger.ms": 5, "batch.size": 20_000})
    total = 600_000
    started = time.monotonic()
    for i in range(total // 1000):
        p.produce(topic, value=b"v" * 1000)
        p.poll(0)
    assert p.flush(120) == 0
    elapsed = time.monotonic() - started
    # About one window of burst, the rest at the quota: (600 - 100) kB / 100 kB/s = 5 s; an
    # unthrottled producer takes well under a second.
    assert elapsed >= 3.0, f"{total} bytes in {elapsed:.1f} s: not held to {quota} B/s"


def test_a_consumer_is_held_to_its_byte_rate_and_loses_nothing(broker_factory):
    b = broker_factory(WINDOWS)
    topic = create_topic(b, unique_topic("quota"), partitions=1)
    # Batches of ~20 kB, so that fetches are too.
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": 1, "linger.ms": 5,
                  "batch.size": 20_000})
    n = 600
    for i in range(n):
        p.produce(topic, value=f"{i:06d}".encode() + b"v" * 994)
    assert p.flush(60) == 0
    # Unauthenticated clients are the user ANONYMOUS.
    set_quota(b, [("user", "ANONYMOUS")], "consumer_byte_rate", 100_000)
    time.sleep(1)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique_topic("g"),
                  "auto.offset.reset": "earliest", "fetch.max.bytes": 1048576})
    c.subscribe([topic])
    got = []
    started = time.monotonic()
    deadline = started + 90
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value()[:6])
    elapsed = time.monotonic() - started
    c.close()
    assert got == [f"{i:06d}".encode() for i in range(n)]
    assert elapsed >= 3.0, f"{n} kB in {elapsed:.1f} s: not held to 100 kB/s"


def test_request_time_over_request_percentage_is_throttled(broker_factory):
    b = broker_factory(WINDOWS)
    topic = create_topic(b, unique_topic("quota"), partitions=1)
    # 0.001 % of one thread: any client doing real work is over it at once.
    set_quota(b, [("client-id", "busy")], "request_percentage", 0.001)
    with kwire.Conn.to(b) as conn:
        deadline = time.monotonic() + 20
        throttle = 0
        while throttle == 0 and time.monotonic() < deadline:
            err, throttle = produce_throttle(conn, topic, 100, "busy")
            assert err == 0
        # Request-time throttles are bounded by one quota window (1 s here), as in Kafka.
        assert 0 < throttle <= 1000, throttle
    with kwire.Conn.to(b) as conn:
        assert produce_throttle(conn, topic, 100, "idle") == (0, 0)
