"""Corruption on a three-broker cluster (racks az1..az3): one byte flipped inside a record of a
closed segment on one replica of an RF=3 topic is found by that broker's scrubber and repaired
with another replica's bytes; the segment file is then byte for byte the other replicas', and a
consumer with check.crcs=true reads every record (docs/reliability.md, "Corruption").

The scrubber runs fast here (`log.scrubber.interval.ms` 200, 4 MiB/s); the tests wait for the
metrics, they assert no timings (the times are printed, for the figures in the docs).

One cluster serves the module; each test uses its own topic.
"""

from __future__ import annotations

import re
import struct
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from conftest import unique_topic
from test_cluster import Cluster, create_topic

T = 30
RECORDS = 3000
# Small segments, so that most of the topic is in closed ones.
SEGMENT_BYTES = 16384
BATCH_HEADER = 61


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(
        tmp_path_factory.mktemp("corruption"),
        {
            "log.scrubber.bytes.per.second": 4 << 20,
            "log.scrubber.interval.ms": 200,
        },
    )
    c.start()
    yield c
    c.stop()


def metric(broker, name: str) -> float:
    """The sum of every series of the counter `name` on `broker`."""
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
        body = r.read().decode()
    pattern = re.compile(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), re.M)
    return sum(float(v) for v in pattern.findall(body))


def value(i: int) -> bytes:
    return f"record-{i:06d}-".encode() + b"x" * 80


def produce(cluster: Cluster, topic: str):
    # Small batches: a segment rolls only between batches.
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                  "batch.size": 4096, "enable.idempotence": True})
    errors = []
    for i in range(RECORDS):
        p.produce(topic, value=value(i), partition=0,
                  on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(T) == 0
    assert errors == []


def segments(broker, topic: str) -> list[Path]:
    return sorted((broker.data_dir / f"{topic}-0").glob("*.log"))


def log_bytes(broker, topic: str) -> bytes:
    return b"".join(p.read_bytes() for p in segments(broker, topic))


def wait_replicas_equal(cluster: Cluster, topic: str):
    """Every replica holds the same batches (segment boundaries may differ)."""
    deadline = time.monotonic() + T
    while time.monotonic() < deadline:
        logs = [log_bytes(b, topic) for b in cluster.brokers]
        if logs[0] and all(x == logs[0] for x in logs):
            return
        time.sleep(0.2)
    raise AssertionError("replicas did not converge")


def flip_a_record_byte(segment: Path) -> int:
    """Flips one byte in the middle of the records of the segment's second batch (inside the
    CRC's cover, so only the CRC can tell); returns its position."""
    data = segment.read_bytes()
    (length,) = struct.unpack(">i", data[8:12])
    second = 12 + length
    (length2,) = struct.unpack(">i", data[second + 8:second + 12])
    pos = second + BATCH_HEADER + (12 + length2 - BATCH_HEADER) // 2
    with open(segment, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0xFF]))
    return pos


def consume_all(cluster: Cluster, topic: str) -> list[bytes]:
    c = Consumer({
        "bootstrap.servers": cluster.bootstrap,
        "group.id": "corruption-e2e",
        "enable.auto.commit": False,
        "check.crcs": True,
        "enable.partition.eof": True,
    })
    c.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < RECORDS and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                continue
            values.append(m.value())
    finally:
        c.close()
    return values


def wait_metric_above(broker, name: str, baseline: float, timeout: float = 120,
                      since: float | None = None) -> float:
    """Seconds from `since` (default: now) until the counter passed `baseline` on `broker`."""
    start = time.monotonic() if since is None else since
    while time.monotonic() - start < timeout:
        if metric(broker, name) > baseline:
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"{name} stayed at {baseline} on broker {broker.workdir.name}")


@pytest.mark.parametrize("role", ["leader", "follower"])
def test_a_flipped_byte_in_a_closed_segment_is_found_and_repaired(cluster, role):
    topic = unique_topic(f"corrupt-{role}")
    partitions = create_topic(cluster, topic, 1, config={"segment.bytes": str(SEGMENT_BYTES)})
    leader = partitions[0].leader
    produce(cluster, topic)
    wait_replicas_equal(cluster, topic)

    target = cluster.by_id(leader) if role == "leader" else next(
        b for i, b in enumerate(cluster.brokers, start=1) if i != leader)
    closed = segments(target, topic)[:-1]
    assert len(closed) >= 3, closed
    segment = closed[1]
    original = segment.read_bytes()
    found = metric(target, "ferry_log_corrupt_batches_found_total")
    repaired = metric(target, "ferry_log_corrupt_batches_repaired_total")

    flip_a_record_byte(segment)
    flipped = time.monotonic()
    assert segment.read_bytes() != original
    detect_s = wait_metric_above(target, "ferry_log_corrupt_batches_found_total", found,
                                 since=flipped)
    repair_s = wait_metric_above(target, "ferry_log_corrupt_batches_repaired_total", repaired,
                                 since=flipped)
    print(f"\n{role}: found {detect_s:.3f} s and repaired {repair_s:.3f} s after the flip")

    assert segment.read_bytes() == original
    others = [b for b in cluster.brokers if b is not target]
    assert all(log_bytes(b, topic) == log_bytes(target, topic) for b in others)
    assert metric(target, "ferry_log_corrupt_batches_unrepairable_total") == 0

    values = consume_all(cluster, topic)
    assert values == [value(i) for i in range(RECORDS)]


@pytest.fixture(scope="module")
def cluster_without_scans(tmp_path_factory):
    """The scrubber scans nothing here (`log.scrubber.enable=false`): only the leader's check of
    replica fetches can find corruption, and the repair of what it finds still runs."""
    c = Cluster(
        tmp_path_factory.mktemp("corruption-fetch"),
        {"log.scrubber.enable": False},
    )
    c.start()
    yield c
    c.stop()


def test_a_leader_never_sends_a_follower_a_corrupt_batch_and_repairs_its_copy(
        cluster_without_scans):
    cluster = cluster_without_scans
    topic = unique_topic("corrupt-fetch")
    partitions = create_topic(cluster, topic, 1, config={"segment.bytes": str(SEGMENT_BYTES)})
    leader_id = partitions[0].leader
    leader = cluster.by_id(leader_id)
    behind, in_sync = [b for i, b in enumerate(cluster.brokers, start=1) if i != leader_id]

    # The follower `behind` misses the whole topic; `in_sync` gets it all.
    behind.pause()
    try:
        produce(cluster, topic)
        deadline = time.monotonic() + T
        while log_bytes(in_sync, topic) != log_bytes(leader, topic):
            assert time.monotonic() < deadline, "the in-sync follower did not catch up"
            time.sleep(0.2)
        segment = segments(leader, topic)[:-1][2]
        original = segment.read_bytes()
        found = metric(leader, "ferry_log_corrupt_batches_found_total")
        flip_a_record_byte(segment)
    finally:
        behind.resume()
    resumed = time.monotonic()

    # The follower's fetch reaches the bad batch: the leader sends what precedes it, and
    # repairs its copy from the in-sync follower; then the follower gets the good bytes.
    detect_s = wait_metric_above(leader, "ferry_log_corrupt_batches_found_total", found,
                                 since=resumed)
    repair_s = wait_metric_above(leader, "ferry_log_corrupt_batches_repaired_total", 0,
                                 since=resumed)
    print(f"\nreplica fetch: found {detect_s:.3f} s and repaired {repair_s:.3f} s after the "
          "follower resumed")
    assert segment.read_bytes() == original
    wait_replicas_equal(cluster, topic)
    assert metric(leader, "ferry_log_scrubber_bytes_checked_total") == 0

    values = consume_all(cluster, topic)
    assert values == [value(i) for i in range(RECORDS)]


def batches(segment: Path):
    """(position, base offset, total length) of each batch in a segment file."""
    data = segment.read_bytes()
    pos = 0
    while pos + 12 <= len(data):
        base, length = struct.unpack(">qi", data[pos:pos + 12])
        yield pos, base, 12 + length
        pos += 12 + length


def flip_batch_everywhere(cluster: Cluster, topic: str, base_offset: int):
    """Flips the same record byte of the batch at `base_offset` on every replica (segment
    boundaries may differ between replicas; the batches do not)."""
    for b in cluster.brokers:
        hits = [(seg, pos, n) for seg in segments(b, topic)
                for pos, base, n in batches(seg) if base == base_offset]
        assert len(hits) == 1, (b.workdir.name, hits)
        seg, pos, n = hits[0]
        at = pos + BATCH_HEADER + (n - BATCH_HEADER) // 2
        with open(seg, "r+b") as f:
            f.seek(at)
            x = f.read(1)
            f.seek(at)
            f.write(bytes([x[0] ^ 0xFF]))


def test_a_batch_corrupt_on_every_replica_is_unrepairable_and_never_served(cluster):
    topic = unique_topic("corrupt-everywhere")
    partitions = create_topic(cluster, topic, 1, config={"segment.bytes": str(SEGMENT_BYTES)})
    leader = cluster.by_id(partitions[0].leader)
    produce(cluster, topic)
    wait_replicas_equal(cluster, topic)
    # A batch in the middle of a closed segment of the leader.
    segment = segments(leader, topic)[:-1][3]
    _, base_offset, _ = list(batches(segment))[1]
    unrepairable = metric(leader, "ferry_log_corrupt_batches_unrepairable_total")

    flip_batch_everywhere(cluster, topic, base_offset)
    wait_metric_above(leader, "ferry_log_corrupt_batches_unrepairable_total", unrepairable)
    # Tried again on later passes, counted once, never in a loop.
    passes = metric(leader, "ferry_log_scrubber_passes_total")
    deadline = time.monotonic() + 60
    while metric(leader, "ferry_log_scrubber_passes_total") < passes + 3:
        assert time.monotonic() < deadline, "the scrubber stopped passing"
        time.sleep(0.1)
    assert metric(leader, "ferry_log_corrupt_batches_unrepairable_total") == unrepairable + 1
    assert metric(leader, "ferry_log_corrupt_batches_repaired_total") >= 0

    # A check.crcs consumer gets every record before the bad batch, no error, nothing after.
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "corruption-e2e",
                  "enable.auto.commit": False, "check.crcs": True})
    c.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            values.append(m.value())
    finally:
        c.close()
    assert values == [value(i) for i in range(base_offset)]
