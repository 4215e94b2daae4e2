"""A tiny hand-rolled Kafka wire client for tests that real clients cannot express:
malformed frames, unsupported versions, raw Produce requests with chosen producer ids and
sequence numbers. Written from the protocol spec (kafka.apache.org/protocol), test-only.
"""

from __future__ import annotations

import socket
import struct
import time

import crc32c as _crc32c

API_PRODUCE = 0
API_FETCH = 1
API_METADATA = 3
API_API_VERSIONS = 18
API_INIT_PRODUCER_ID = 22
API_ALTER_PARTITION_REASSIGNMENTS = 45
API_DESCRIBE_QUORUM = 55

ERR_NONE = 0
ERR_UNKNOWN_TOPIC_OR_PARTITION = 3
ERR_UNSUPPORTED_VERSION = 35
ERR_OUT_OF_ORDER_SEQUENCE = 45
ERR_DUPLICATE_SEQUENCE = 46
ERR_INVALID_PRODUCER_EPOCH = 47
ERR_UNKNOWN_PRODUCER_ID = 59


# --- primitive encoders --------------------------------------------------------------------


def i8(v):
    return struct.pack(">b", v)


def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def i64(v):
    return struct.pack(">q", v)


def string(s: str | None) -> bytes:
    if s is None:
        return i16(-1)
    b = s.encode()
    return i16(len(b)) + b


def bytes_(b: bytes | None) -> bytes:
    if b is None:
        return i32(-1)
    return i32(len(b)) + b


def uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint(v: int) -> bytes:
    return uvarint((v << 1) ^ (v >> 63))  # zigzag


def compact_string(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


def request_header_v1(api_key: int, api_version: int, correlation_id: int,
                      client_id: str = "ferry-e2e-raw") -> bytes:
    return i16(api_key) + i16(api_version) + i32(correlation_id) + string(client_id)


def request_header_v2(api_key: int, api_version: int, correlation_id: int,
                      client_id: str = "ferry-e2e-raw") -> bytes:
    return request_header_v1(api_key, api_version, correlation_id, client_id) + uvarint(0)


def frame(payload: bytes) -> bytes:
    return i32(len(payload)) + payload


# --- decoding --------------------------------------------------------------------------------


class Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"short read: want {n} at {self.pos}, have {len(self.data)}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def i8(self):
        return struct.unpack(">b", self.take(1))[0]

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def i64(self):
        return struct.unpack(">q", self.take(8))[0]

    def string(self):
        n = self.i16()
        return None if n < 0 else self.take(n).decode()

    def uvarint(self) -> int:
        shift, out = 0, 0
        while True:
            b = self.take(1)[0]
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def compact_string(self):
        n = self.uvarint() - 1
        return None if n < 0 else self.take(n).decode()

    def skip_tagged_fields(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def remaining(self) -> int:
        return len(self.data) - self.pos


# --- connection --------------------------------------------------------------------------------


class Conn:
    def __init__(self, host: str, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.corr = 0

    @classmethod
    def to(cls, broker, timeout: float = 10.0) -> "Conn":
        return cls("127.0.0.1", broker.port, timeout)

    @classmethod
    def to_leader(cls, broker, topic: str, partition: int = 0, timeout: float = 10.0) -> "Conn":
        """To the partition's leader (in cluster mode not necessarily `broker.port`)."""
        from conftest import leader_port

        return cls("127.0.0.1", leader_port(broker, topic, partition), timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_raw(self, data: bytes):
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        (n,) = struct.unpack(">i", self.recv_exact(4))
        return self.recv_exact(n)

    def request(self, api_key: int, api_version: int, body: bytes, flexible: bool = False) -> Reader:
        """Send one request; return a Reader positioned after the correlation id (and, for
        flexible response headers, the caller must skip tagged fields itself)."""
        self.corr += 1
        hdr = (request_header_v2 if flexible else request_header_v1)(api_key, api_version, self.corr)
        self.send_raw(frame(hdr + body))
        resp = Reader(self.recv_frame())
        corr = resp.i32()
        assert corr == self.corr, f"correlation id {corr} != {self.corr}"
        return resp

    def wait_closed(self, timeout: float = 10.0) -> bool:
        """True if the peer closes the connection (EOF or reset) within timeout. Any bytes the
        broker sends first (e.g. an error response) are read and ignored."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        return False


# --- ApiVersions -------------------------------------------------------------------------------


def parse_api_versions_v0(r: Reader):
    """ApiVersions response v0 body (also what a broker sends back for an unsupported
    ApiVersions version): error_code, [api_key, min, max]."""
    err = r.i16()
    n = r.i32()
    apis = {}
    for _ in range(max(n, 0)):
        k, lo, hi = r.i16(), r.i16(), r.i16()
        apis[k] = (lo, hi)
    return err, apis


def api_versions(conn: Conn, version: int = 0):
    if version >= 3:
        body = compact_string("ferry-e2e") + compact_string("0.1") + uvarint(0)
        r = conn.request(API_API_VERSIONS, version, body, flexible=True)
    else:
        r = conn.request(API_API_VERSIONS, version, b"")
    return r


# --- record batches and Produce -----------------------------------------------------------------


def record(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None,
           headers: list[tuple[str, bytes]] = ()) -> bytes:
    body = i8(0) + varint(ts_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(len(headers))
    for hk, hv in headers:
        kb = hk.encode()
        body += varint(len(kb)) + kb + (varint(-1) if hv is None else varint(len(hv)) + hv)
    return varint(len(body)) + body


def record_batch(records: list[tuple[bytes | None, bytes | None]], base_timestamp: int | None = None,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """An uncompressed magic-2 batch of (key, value) records."""
    ts = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    recs = b"".join(record(i, 0, k, v) for i, (k, v) in enumerate(records))
    after_crc = (
        i16(0)  # attributes: no compression, create time, not transactional
        + i32(len(records) - 1)  # last offset delta
        + i64(ts) + i64(ts)
        + i64(producer_id) + i16(producer_epoch) + i32(base_sequence)
        + i32(len(records))
        + recs
    )
    crc = _crc32c.crc32c(after_crc)
    after_len = i32(0) + i8(2) + struct.pack(">I", crc) + after_crc  # leader epoch, magic, crc
    return i64(0) + i32(len(after_len)) + after_len


def produce_v3(conn: Conn, topic: str, partition: int, batch: bytes, acks: int = -1,
               timeout_ms: int = 30000):
    """Produce v3 (non-flexible). Returns (error_code, base_offset)."""
    body = (string(None) + i16(acks) + i32(timeout_ms)
            + i32(1) + string(topic) + i32(1) + i32(partition) + bytes_(batch))
    r = conn.request(API_PRODUCE, 3, body)
    n_topics = r.i32()
    assert n_topics == 1
    r.string()
    assert r.i32() == 1
    r.i32()  # partition index
    err = r.i16()
    base = r.i64()
    r.i64()  # log append time
    return err, base


def send_produce_v3(conn: Conn, topic: str, partition: int, batch: bytes, acks: int = 0,
                    timeout_ms: int = 30000):
    """Send a Produce v3 without reading an answer (acks=0 has none)."""
    body = (string(None) + i16(acks) + i32(timeout_ms)
            + i32(1) + string(topic) + i32(1) + i32(partition) + bytes_(batch))
    conn.corr += 1
    conn.send_raw(frame(request_header_v1(API_PRODUCE, 3, conn.corr) + body))


def init_producer_id_v1(conn: Conn, timeout_ms: int = 30000):
    """InitProducerId v1 (non-flexible), no transactional id. Returns (err, pid, epoch)."""
    body = string(None) + i32(timeout_ms)
    r = conn.request(API_INIT_PRODUCER_ID, 1, body)
    r.i32()  # throttle
    err = r.i16()
    pid = r.i64()
    epoch = r.i16()
    return err, pid, epoch


# --- Metadata ----------------------------------------------------------------------------------


def topic_known(conn: Conn, topic: str) -> bool:
    """Whether the broker at the other end lists `topic` in its own metadata (Metadata v4,
    which never auto-creates): each broker answers from its own image."""
    body = i32(1) + string(topic) + i8(0)  # topics [topic], allow_auto_topic_creation false
    r = conn.request(API_METADATA, 4, body)
    r.i32()  # throttle
    for _ in range(r.i32()):  # brokers
        r.i32(), r.string(), r.i32(), r.string()
    r.string()  # cluster id
    r.i32()  # controller id
    assert r.i32() == 1
    return r.i16() == ERR_NONE



# --- DescribeQuorum ----------------------------------------------------------------------------


def describe_quorum_v1(conn: Conn, topic: str = "__cluster_metadata", partition: int = 0) -> dict:
    """DescribeQuorum v1 (flexible; KIP-836's fetch and caught-up times) for one partition:
    {"error_code", "topics": [{"name", "partitions": [{"partition", "error_code", "leader_id",
    "leader_epoch", "high_watermark", "voters": [...], "observers": [...]}]}]}, each replica
    {"id", "log_end_offset", "last_fetch_timestamp", "last_caught_up_timestamp"}."""
    body = (uvarint(2) + compact_string(topic) + uvarint(2) + i32(partition) + uvarint(0)
            + uvarint(0) + uvarint(0))
    r = conn.request(API_DESCRIBE_QUORUM, 1, body, flexible=True)
    r.skip_tagged_fields()  # response header v1

    def replicas():
        out = []
        for _ in range(r.uvarint() - 1):
            rep = {"id": r.i32(), "log_end_offset": r.i64(), "last_fetch_timestamp": r.i64(),
                   "last_caught_up_timestamp": r.i64()}
            r.skip_tagged_fields()
            out.append(rep)
        return out

    result = {"error_code": r.i16(), "topics": []}
    for _ in range(r.uvarint() - 1):
        t = {"name": r.compact_string(), "partitions": []}
        for _ in range(r.uvarint() - 1):
            p = {"partition": r.i32(), "error_code": r.i16(), "leader_id": r.i32(),
                 "leader_epoch": r.i32(), "high_watermark": r.i64()}
            p["voters"] = replicas()
            p["observers"] = replicas()
            r.skip_tagged_fields()
            t["partitions"].append(p)
        r.skip_tagged_fields()
        result["topics"].append(t)
    r.skip_tagged_fields()
    return result


def alter_partition_reassignments(conn: Conn, topic: str, partition: int,
                                  replicas: list[int] | None,
                                  allow_rf_change: bool = True) -> tuple[int, int]:
    """AlterPartitionReassignments v1 (flexible; KIP-860) for one partition; `replicas` None
    cancels. Returns (top-level error code, the partition's error code)."""
    if replicas is None:
        targets = uvarint(0)
    else:
        targets = uvarint(len(replicas) + 1) + b"".join(i32(b) for b in replicas)
    body = (i32(30000) + i8(1 if allow_rf_change else 0)
            + uvarint(2) + compact_string(topic)
            + uvarint(2) + i32(partition) + targets + uvarint(0)
            + uvarint(0) + uvarint(0))
    r = conn.request(API_ALTER_PARTITION_REASSIGNMENTS, 1, body, flexible=True)
    r.skip_tagged_fields()  # response header v1
    r.i32()  # throttle_time_ms
    r.i8()  # allow_replication_factor_change
    top = r.i16()
    r.compact_string()
    codes = []
    for _ in range(r.uvarint() - 1):
        r.compact_string()
        for _ in range(r.uvarint() - 1):
            r.i32()
            codes.append(r.i16())
            r.compact_string()
            r.skip_tagged_fields()
        r.skip_tagged_fields()
    assert len(codes) == 1, codes
    return top, codes[0]
