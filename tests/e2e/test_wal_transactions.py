"""Transactions on a remote-WAL topic (KIP-1176 with KIP-98): transactional batches and the
COMMIT/ABORT markers reach the followers through the object store like any other batch, the
followers rebuild the producer state, last stable offset and aborted-transaction index from
what they append, and a read_committed consumer reading from a follower (client.rack) sees
exactly what it would see on the leader. Run with the local store and on an S3 API server."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import unique_topic
from test_cluster import create_topic
from test_remote_wal import PARTITIONS, metric_sum, wait_identical, wal_cluster  # noqa: F401

T = 30


def read_all(c, topic: str, rack: str, isolation: str, expected: int) -> list[bytes]:
    """Every record a consumer in `rack` reads: until `expected` arrived, then one more second
    for any extra. (Not until end-of-partition: a follower's high watermark, and so its last
    stable offset, may trail the leader's for a moment.)"""
    consumer = Consumer({
        "bootstrap.servers": c.bootstrap,
        "group.id": f"g-{topic}-{rack}",
        "client.rack": rack,
        "isolation.level": isolation,
        "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for m in consumer.consume(500, timeout=1):
                assert m.error() is None, m.error()
                got.append(m.value())
        for m in consumer.consume(500, timeout=1):
            assert m.error() is None, m.error()
            got.append(m.value())
    finally:
        consumer.close()
    return got


def test_transactions_replicate_through_the_object_store(wal_cluster):
    c = wal_cluster
    topic = unique_topic("wal-txn")
    create_topic(c, topic, PARTITIONS, {"remote.wal.enable": "true"})
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": unique_topic("tid"),
                  "linger.ms": 5})
    p.init_transactions(T)
    committed, aborted = [], []
    for n in range(6):
        values = [f"t{n}-{i}".encode() for i in range(40)]
        p.begin_transaction()
        for i, v in enumerate(values):
            p.produce(topic, value=v, partition=i % PARTITIONS)
        p.flush(T)
        if n % 3 == 1:
            p.abort_transaction(T)
            aborted += values
        else:
            p.commit_transaction(T)
            committed += values
    # Markers included, every replica holds the same bytes: the followers got them through
    # the store (the WAL path), as the cross-rack byte count of the suite above shows.
    wait_identical(c, topic)
    assert metric_sum(c, "ferry_remote_wal_follower_bytes_total", path="wal") > 0

    # A read_committed consumer in each rack (two of them read from a follower) sees exactly
    # the committed records; read_uncommitted sees the aborted ones too.
    for rack in ("az1", "az2", "az3"):
        got = read_all(c, topic, rack, "read_committed", len(committed))
        assert sorted(got) == sorted(committed), rack
    everything = read_all(c, topic, "az2", "read_uncommitted", len(committed) + len(aborted))
    assert sorted(everything) == sorted(committed + aborted)
