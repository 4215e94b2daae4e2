"""AZ outage with the remote WAL (KIP-1176 "Leader Failover and Recovery in an AZ Outage"): the
az1 broker and the az1 bucket fail at the same moment while idempotent acks=all producers write.
New leaders in az2/az3 republish their recent local log into their own bucket
(`remote.wal.failover.republish`), followers skip the former leader's metadata (older epoch or
unreadable object) and stay on the WAL path. After the bucket is back and broker 1 restarted:
every acknowledged message is readable exactly once and in order, all replicas are identical,
and after garbage collection no WAL object is left without metadata.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from conftest import unique_topic
from test_cluster import Cluster, create_topic
from test_remote_wal import PARTITIONS, metric_sum_one, wait_identical

METADATA_TOPIC = "__remote_wal_log_metadata"
VALUE_PAD = 1500


@pytest.fixture
def failover_cluster(tmp_path):
    buckets = {rack: tmp_path / f"bucket-{rack}" for rack in ("az1", "az2", "az3")}
    c = Cluster(tmp_path / "cluster")
    for b in c.brokers:
        b.extra_config.update({
            "remote.wal.store": "local",
            "remote.wal.buckets": ",".join(f"{r}={d}" for r, d in buckets.items()),
            "remote.wal.upload.interval.ms": 20,
            "remote.wal.fallback.ms": 3000,
            "remote.wal.gc.interval.ms": 200,
            "remote.wal.orphan.grace.ms": 1000,
            "remote.wal.failover.republish": "comprehensive",
            # A dead broker is fenced (and its leaderships move) within a few seconds.
            "broker.heartbeat.interval.ms": 500,
            "broker.session.timeout.ms": 3000,
        })
    c.start()
    c.buckets = buckets
    yield c
    c.stop()


class NumberedProducer(threading.Thread):
    """Idempotent acks=all producer writing `<partition>-<seq>` to every partition until stopped;
    remembers, per partition, the sequence numbers acknowledged, in acknowledgement order."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.topic = topic
        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
        })
        self.acked: dict[int, list[int]] = defaultdict(list)
        self.acked_bytes = 0
        self.errors: list = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def on_delivery(self, err, msg):
        if err is not None:
            self.errors.append(err)
            return
        pid, seq = msg.value()[:20].split(b"-")[:2]
        with self.lock:
            self.acked[int(pid)].append(int(seq))
            self.acked_bytes += len(msg.value())

    def run(self):
        seq = 0
        while not self.stopping.is_set():
            for pid in range(PARTITIONS):
                value = b"%02d-%08d-" % (pid, seq) + b"x" * VALUE_PAD
                while True:
                    try:
                        self.producer.produce(self.topic, value=value, partition=pid,
                                              on_delivery=self.on_delivery)
                        break
                    except BufferError:
                        self.producer.poll(0.05)
            seq += 1
            self.producer.poll(0.01)
        self.producer.flush(120)

    def acked_total(self) -> int:
        with self.lock:
            return self.acked_bytes


def fail_bucket(path):
    """The bucket becomes unreadable: its directory moves away and a regular file takes its
    name (GETs fail with "not a directory"). Returns where the data went."""
    hidden = path.with_name(path.name + "-failed")
    path.rename(hidden)
    path.write_bytes(b"az1 is down\n")
    return hidden


def restore_bucket(path, hidden):
    path.unlink()
    hidden.rename(path)


def read_partition(bootstrap: str, topic: str, pid: int, end: int) -> list[bytes]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"check-{topic}-{pid}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    consumer.assign([TopicPartition(topic, pid, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    offset = 0
    while offset < end and time.monotonic() < deadline:
        for m in consumer.consume(500, timeout=1):
            assert m.error() is None, m.error()
            values.append(m.value())
            offset = m.offset() + 1
    consumer.close()
    assert offset >= end, f"partition {pid}: read up to {offset} of {end}"
    return values


def metadata_values(bootstrap: str) -> list[bytes]:
    """The live records of the metadata topic: the latest value per key, tombstones applied."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": unique_topic("meta-check"),
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    md = consumer.list_topics(METADATA_TOPIC, timeout=10).topics[METADATA_TOPIC]
    latest: dict[tuple[int, bytes], bytes | None] = {}
    for pid in md.partitions:
        _, high = consumer.get_watermark_offsets(TopicPartition(METADATA_TOPIC, pid), timeout=10)
        if high <= 0:
            continue
        consumer.assign([TopicPartition(METADATA_TOPIC, pid, 0)])
        offset = 0
        deadline = time.monotonic() + 30
        while offset < high and time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=1):
                assert m.error() is None, m.error()
                latest[(pid, m.key())] = m.value()
                offset = m.offset() + 1
    consumer.close()
    return [v for v in latest.values() if v is not None]


def objects_without_metadata(c) -> list[str]:
    """Object keys in any bucket that no live metadata record names."""
    keys = [
        str(p.relative_to(root))
        for root in c.buckets.values()
        for p in root.rglob("*.wal")
        if p.is_file()
    ]
    if not keys:
        return []
    values = metadata_values(c.bootstrap)
    return [k for k in keys if not any(k.encode() in v for v in values)]


def wait_failed_over(c, topics: list[str], dead: int, timeout: float = 60):
    """Until no partition of `topics` is led by broker `dead` or has it in its ISR."""
    admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in c.brokers
                                                       if b is not c.by_id(dead))})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=10)
        if all(
            t in md.topics and all(
                p.leader not in (-1, dead) and dead not in p.isrs
                for p in md.topics[t].partitions.values()
            )
            for t in topics
        ):
            return
        time.sleep(0.2)
    raise TimeoutError(f"broker {dead} still leads or is in sync")


def follower_bytes(brokers, path: str) -> float:
    return sum(metric_sum_one(b, "ferry_remote_wal_follower_bytes_total", path=path) for b in brokers)


def test_az_outage_new_leaders_republish_and_nothing_is_lost(failover_cluster):
    c = failover_cluster
    topic = unique_topic("walaz")
    parts = create_topic(c, topic, PARTITIONS,
                         {"remote.wal.enable": "true", "min.insync.replicas": "2"})
    led_by_1 = [pid for pid, p in parts.items() if p.leader == 1]
    assert led_by_1, "broker 1 leads none of the partitions"
    survivors = c.brokers[1:]

    producer = NumberedProducer(c.bootstrap, topic)
    producer.start()
    time.sleep(4)

    # az1 fails: its broker and its bucket at the same moment.
    wal_at_kill = follower_bytes(survivors, "wal")
    classic_at_kill = follower_bytes(survivors, "classic")
    c.by_id(1).kill9()
    hidden = fail_bucket(c.buckets["az1"])

    # Until broker 1 is fenced, its partitions (of the topic and of the metadata topic) have no
    # leader: appends of the others whose metadata cannot be published reach followers by the
    # classic fetch (the uploader's rule for a failed publish). Once new leaders are elected
    # the WAL path carries everything again.
    wait_failed_over(c, [topic, METADATA_TOPIC], dead=1)
    wal_before = follower_bytes(survivors, "wal")
    classic_before = follower_bytes(survivors, "classic")
    acked_before = producer.acked_total()
    deadline = time.monotonic() + 60
    while producer.acked_total() < acked_before + 8_000_000 and time.monotonic() < deadline:
        assert not producer.errors, producer.errors[:3]
        time.sleep(0.5)
    producer.stopping.set()
    producer.join(150)
    assert not producer.errors, producer.errors[:3]
    after = producer.acked_total() - acked_before
    assert after >= 8_000_000, f"only {after} bytes acknowledged after the failover"

    # (a) The new leaders republished into their own buckets what lay above the high watermark
    # they knew (often nothing: the followers in sync hold the rest), and their followers kept
    # the WAL path: they got the post-failover data from the WAL, hardly anything by the classic
    # fetch.
    republished = sum(metric_sum_one(b, "ferry_remote_wal_republished_bytes_total")
                      for b in survivors)
    wal_bytes = follower_bytes(survivors, "wal") - wal_before
    classic_bytes = follower_bytes(survivors, "classic") - classic_before
    figures = (f"republished {republished}; after the failover: follower wal {wal_bytes}, "
               f"classic {classic_bytes}, acked {after}; while broker 1 was not yet fenced: "
               f"wal {wal_before - wal_at_kill}, classic {classic_before - classic_at_kill}")
    print(figures)
    assert wal_bytes > 0.8 * after, figures
    assert classic_bytes < 0.1 * after, figures

    # (b) The bucket comes back, broker 1 restarts and follows the new leaders (truncating by
    # leader epoch what the others never had).
    restore_bucket(c.buckets["az1"], hidden)
    c.by_id(1).start()
    wait_identical(c, topic, timeout=90)

    # Every acknowledged message exactly once and in order, per partition.
    for pid in range(PARTITIONS):
        acked = producer.acked[pid]
        probe = Consumer({"bootstrap.servers": c.bootstrap, "group.id": f"probe-{topic}"})
        _, end = probe.get_watermark_offsets(TopicPartition(topic, pid), timeout=10)
        probe.close()
        seqs = [int(v.split(b"-")[1]) for v in read_partition(c.bootstrap, topic, pid, end)]
        assert len(seqs) == len(set(seqs)), f"partition {pid}: duplicates"
        assert seqs == sorted(seqs), f"partition {pid}: out of order"
        missing = set(acked) - set(seqs)
        assert not missing, f"partition {pid}: {len(missing)} acknowledged messages lost"
        assert acked == sorted(acked), f"partition {pid}: acknowledged out of order"

    # After garbage collection no object is left without metadata (orphans are swept).
    deadline = time.monotonic() + 60
    while (left := objects_without_metadata(c)) and time.monotonic() < deadline:
        time.sleep(1)
    assert not left, f"WAL objects without metadata: {left[:5]} ({len(left)})"
