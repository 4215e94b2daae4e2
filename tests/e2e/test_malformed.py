"""Hostile and broken input on the wire. After every case the broker must still be alive and
serve a normal client (metadata, produce, consume)."""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest

from conftest import (
    assert_delivered,
    ck_admin,
    ck_producer,
    consume_partition,
    create_topic,
    produce_sync,
    unique_topic,
)
import kwire

SUPPORTED_APIS = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 18: "ApiVersions",
    19: "CreateTopics", 20: "DeleteTopics", 21: "DeleteRecords", 22: "InitProducerId",
    23: "OffsetForLeaderEpoch", 32: "DescribeConfigs", 33: "AlterConfigs", 35: "DescribeLogDirs",
    37: "CreatePartitions", 44: "IncrementalAlterConfigs", 60: "DescribeCluster",
}


def assert_healthy(broker):
    time.sleep(0.3)  # let a crash caused by the previous input surface
    assert broker.alive(), f"ferry died\n{broker.log_tail()}"
    md = ck_admin(broker).list_topics(timeout=30)
    assert 1 in md.brokers
    topic = unique_topic("health")
    create_topic(broker, topic)
    p = ck_producer(broker)
    assert_delivered(produce_sync(p, topic, [{"key": b"k", "value": b"still-alive", "partition": 0}]))
    got = consume_partition(broker, topic, 0, expected=1)
    assert got[0].value() == b"still-alive"
    assert broker.alive()


def closed_or_error_response(conn: kwire.Conn, corr: int, timeout: float = 10) -> str:
    """'closed' if the broker drops the connection, 'response' if it answers with a frame
    carrying our correlation id; fails on anything else (e.g. silence)."""
    conn.sock.settimeout(timeout)
    try:
        data = conn.recv_frame()
    except (ConnectionError, OSError) as e:
        if isinstance(e, socket.timeout):
            raise AssertionError("broker neither answered nor closed the connection") from e
        return "closed"
    assert struct.unpack(">i", data[:4])[0] == corr
    return "response"


def test_random_bytes(broker):
    rnd = random.Random(1234)
    for _ in range(20):
        with kwire.Conn.to(broker) as c:
            try:
                c.send_raw(bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 4096))))
            except OSError:
                pass
    assert_healthy(broker)


def test_random_bytes_after_valid_length(broker):
    rnd = random.Random(99)
    for _ in range(20):
        body = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(8, 512)))
        with kwire.Conn.to(broker) as c:
            try:
                c.send_raw(kwire.frame(body))
                c.wait_closed(timeout=2)
            except OSError:
                pass
    assert_healthy(broker)


def test_truncated_frame_then_close(broker):
    with kwire.Conn.to(broker) as c:
        c.send_raw(kwire.i32(100) + b"\x00\x12\x00\x00" + b"abc")
    with kwire.Conn.to(broker) as c:
        c.send_raw(b"\x00\x00")  # not even a whole length
    assert_healthy(broker)


def test_huge_frame_length_closes_connection(broker):
    with kwire.Conn.to(broker) as c:
        c.send_raw(kwire.i32(0x7FFFFFFF) + b"\x00" * 64)
        assert c.wait_closed(timeout=10), "a frame claiming 2 GB must close the connection"
    assert_healthy(broker)


def test_frame_just_over_socket_request_max_bytes(broker_factory):
    b = broker_factory({"socket.request.max.bytes": 1024 * 1024})
    with kwire.Conn.to(b) as c:
        c.send_raw(kwire.i32(1024 * 1024 + 1))
        assert c.wait_closed(timeout=10)
    assert_healthy(b)


def test_a_stream_of_bad_frames_cannot_flood_the_log(broker_factory):
    """Hundreds of malformed frames close hundreds of connections, but the warnings about them
    are rate-limited: a hostile client must not be able to fill the disk with logs."""
    b = broker_factory()
    brokers = b.brokers if hasattr(b, "brokers") else [b]

    def bad_frame_lines() -> int:
        return sum(
            p.read_text(errors="replace").count("closing connection: bad frame")
            for x in brokers
            for p in x.workdir.glob("ferry-*.log")
        )

    before = bad_frame_lines()
    for _ in range(300):
        with kwire.Conn.to(b) as c:
            try:
                c.send_raw(kwire.i32(-5) + b"\x00" * 8)
                c.wait_closed(timeout=2)
            except OSError:
                pass
    assert_healthy(b)
    logged = bad_frame_lines() - before
    # 10 lines per 10 s are let through; the test takes well under a minute.
    assert 1 <= logged <= 60, f"{logged} bad-frame warnings for 300 bad frames"


def test_negative_length_closes_connection(broker):
    for n in (-1, -0x80000000):
        with kwire.Conn.to(broker) as c:
            c.send_raw(kwire.i32(n) + b"\x00" * 16)
            assert c.wait_closed(timeout=10), f"length {n} must close the connection"
    assert_healthy(broker)


def test_zero_length_frame(broker):
    with kwire.Conn.to(broker) as c:
        c.send_raw(kwire.i32(0))
        assert c.wait_closed(timeout=10)
    assert_healthy(broker)


def test_unknown_api_key(broker):
    with kwire.Conn.to(broker) as c:
        c.send_raw(kwire.frame(kwire.request_header_v1(9999, 0, 7) + b"\x00" * 8))
        closed_or_error_response(c, 7)
    with kwire.Conn.to(broker) as c:
        c.send_raw(kwire.frame(kwire.request_header_v1(-1, 0, 8)))
        closed_or_error_response(c, 8)
    assert_healthy(broker)


def test_api_versions_v0_lists_supported_apis(broker):
    with kwire.Conn.to(broker) as c:
        r = kwire.api_versions(c, 0)
        err, apis = kwire.parse_api_versions_v0(r)
    assert err == 0
    missing = {k: n for k, n in SUPPORTED_APIS.items() if k not in apis}
    assert not missing, f"ApiVersions does not list {missing}"
    for k, (lo, hi) in apis.items():
        assert 0 <= lo <= hi, (k, lo, hi)
    assert apis[18][1] >= 3  # flexible ApiVersions


def test_api_versions_unsupported_version_gets_v0_fallback(broker):
    with kwire.Conn.to(broker) as c:
        c.corr += 1
        # a v99 request: header v2 would apply, but the broker must not rely on parsing the body
        c.send_raw(kwire.frame(kwire.request_header_v2(kwire.API_API_VERSIONS, 99, c.corr)
                               + kwire.compact_string("x") + kwire.compact_string("1") + kwire.uvarint(0)))
        data = c.recv_frame()
        r = kwire.Reader(data)
        assert r.i32() == c.corr
        err, apis = kwire.parse_api_versions_v0(r)
        assert err == kwire.ERR_UNSUPPORTED_VERSION
        assert kwire.API_API_VERSIONS in apis
        assert apis[kwire.API_API_VERSIONS][0] == 0
        assert r.remaining() == 0, f"{r.remaining()} trailing bytes after a v0 ApiVersions body"
        # the connection stays usable: a proper request on it still works
        err, apis = kwire.parse_api_versions_v0(kwire.api_versions(c, 0))
        assert err == 0
    assert_healthy(broker)


def test_unsupported_version_of_other_api_closes(broker):
    with kwire.Conn.to(broker) as c:
        c.send_raw(kwire.frame(kwire.request_header_v1(kwire.API_PRODUCE, 99, 5) + b"\x00" * 32))
        closed_or_error_response(c, 5)
        assert c.wait_closed(timeout=10), "Produce v99 must close the connection"
    assert_healthy(broker)


def test_garbage_body_of_known_api(broker):
    rnd = random.Random(7)
    for api in (0, 1, 3, 19, 32):
        with kwire.Conn.to(broker) as c:
            body = bytes(rnd.getrandbits(8) for _ in range(64))
            try:
                c.send_raw(kwire.frame(kwire.request_header_v1(api, 1, 11) + body))
                c.wait_closed(timeout=3)
            except OSError:
                pass
    # a string length pointing far past the end of the frame
    with kwire.Conn.to(broker) as c:
        body = kwire.i32(1) + kwire.i16(30000) + b"abc"  # Metadata v1: 1 topic, name len 30000
        c.send_raw(kwire.frame(kwire.request_header_v1(kwire.API_METADATA, 1, 12) + body))
        closed_or_error_response(c, 12)
    # an array count of 2^31-1 elements in a tiny frame
    with kwire.Conn.to(broker) as c:
        body = kwire.i32(0x7FFFFFFF)
        c.send_raw(kwire.frame(kwire.request_header_v1(kwire.API_METADATA, 1, 13) + body))
        closed_or_error_response(c, 13)
    assert_healthy(broker)


def test_bad_record_batch_crc_is_rejected(broker):
    topic = create_topic(broker, unique_topic("crc"))
    batch = bytearray(kwire.record_batch([(b"k", b"v")]))
    batch[-1] ^= 0xFF  # corrupt the last value byte: CRC no longer matches
    with kwire.Conn.to_leader(broker, topic, 0) as c:
        code, _ = kwire.produce_v3(c, topic, 0, bytes(batch))
    assert code in (2, 87), f"expected CORRUPT_MESSAGE (2) or INVALID_RECORD (87), got {code}"
    assert consume_partition(broker, topic, 0) == []
    assert_healthy(broker)


def test_many_connections_opened_and_dropped(broker):
    socks = []
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
        socks.append(s)
    for s in socks:
        s.close()
    assert_healthy(broker)


def test_pipelined_requests_answered_in_order(broker):
    with kwire.Conn.to(broker) as c:
        frames = b"".join(kwire.frame(kwire.request_header_v1(kwire.API_API_VERSIONS, 0, corr))
                          for corr in range(100, 120))
        c.send_raw(frames)
        corrs = [struct.unpack(">i", c.recv_frame()[:4])[0] for _ in range(20)]
    assert corrs == list(range(100, 120))


BIG = 0x7FFFFFFF
# (api name, key, version, body whose first array count, or bytes length, claims 2^31-1 elements)
HUGE_COUNT_CASES = [
    ("Metadata", 3, 1, kwire.i32(BIG)),
    ("Produce topics", 0, 3, kwire.string(None) + kwire.i16(-1) + kwire.i32(1000) + kwire.i32(BIG)),
    ("Produce records", 0, 3, kwire.string(None) + kwire.i16(-1) + kwire.i32(1000) + kwire.i32(1)
     + kwire.string("t") + kwire.i32(1) + kwire.i32(0) + kwire.i32(BIG)),
    ("Fetch", 1, 4, kwire.i32(-1) + kwire.i32(100) + kwire.i32(1) + kwire.i32(1 << 20) + kwire.i8(0)
     + kwire.i32(BIG)),
    ("ListOffsets", 2, 1, kwire.i32(-1) + kwire.i32(BIG)),
    ("CreateTopics", 19, 2, kwire.i32(BIG)),
    ("DeleteTopics", 20, 1, kwire.i32(BIG)),
    ("DeleteRecords", 21, 0, kwire.i32(BIG)),
    ("OffsetForLeaderEpoch", 23, 2, kwire.i32(BIG)),
    ("DescribeConfigs", 32, 1, kwire.i32(BIG)),
    ("AlterConfigs", 33, 0, kwire.i32(BIG)),
    ("DescribeLogDirs", 35, 1, kwire.i32(BIG)),
    ("CreatePartitions", 37, 0, kwire.i32(BIG)),
    ("IncrementalAlterConfigs", 44, 0, kwire.i32(BIG)),
]


@pytest.mark.parametrize("name,key,version,body", HUGE_COUNT_CASES, ids=[c[0] for c in HUGE_COUNT_CASES])
def test_huge_count_in_tiny_frame(broker, name, key, version, body):
    """A 20-byte request must not make the broker reserve memory for 2^31 elements."""
    with kwire.Conn.to(broker) as c:
        c.send_raw(kwire.frame(kwire.request_header_v1(key, version, 21) + body))
        closed_or_error_response(c, 21)
    assert_healthy(broker)
