"""Reads from the closest replica (KIP-392) on a three-broker cluster (racks az1..az3), and what
followers must keep up with to serve them: the leader's log start offset (DeleteRecords) and
their high watermark across a restart (replication-offset-checkpoint).

One cluster serves the whole module; each test uses its own topic.
"""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from conftest import unique_topic
from test_cluster import Cluster, create_topic

AZ2 = 2  # broker 2 is in az2
T = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("rack"))
    for b in c.brokers:
        # Checkpoint often so the restart test does not wait 5 s.
        b.extra_config["replica.high.watermark.checkpoint.interval.ms"] = 200
    c.start()
    yield c
    c.stop()


def consumer_fetch_bytes(broker, topic: str, role: str) -> float:
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
        body = r.read().decode()
    pattern = re.compile(
        r'^ferry_consumer_fetch_bytes_total\{topic="%s",role="%s"\} (\S+)$'
        % (re.escape(topic), role),
        re.M,
    )
    m = pattern.search(body)
    return float(m.group(1)) if m else 0.0


def produce(cluster: Cluster, topic: str, partition: int, n: int, start: int = 0):
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    errors = []
    for i in range(start, start + n):
        p.produce(topic, value=f"v{i}".encode(), partition=partition,
                  on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(T) == 0
    assert errors == []


def read_all(cluster: Cluster, topic: str, partition: int, expected: int, rack: str | None,
             start: int = 0, timeout: float = 30) -> list[str]:
    """Reads `expected` records from `start` with a manually assigned consumer."""
    conf = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": "rack-e2e",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        # Ask the leader again soon, so tests that change followers do not wait minutes.
        "topic.metadata.refresh.interval.ms": 1000,
    }
    if rack is not None:
        conf["client.rack"] = rack
    c = Consumer(conf)
    c.assign([TopicPartition(topic, partition, start)])
    values: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < expected and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                continue
            values.append(m.value().decode())
    finally:
        c.close()
    assert len(values) == expected, f"read {len(values)} of {expected}"
    return values


def partition_led_outside_az2(cluster: Cluster, topic: str) -> tuple[int, int]:
    partitions = create_topic(cluster, topic, 3)
    for pid, p in sorted(partitions.items()):
        if p.leader != AZ2:
            return pid, p.leader
    raise AssertionError("every partition led by az2")


def test_consumer_in_az2_reads_from_the_az2_follower(cluster):
    topic = unique_topic("rack")
    pid, leader = partition_led_outside_az2(cluster, topic)
    n = 2000
    produce(cluster, topic, pid, n)
    values = read_all(cluster, topic, pid, n, rack="az2")
    assert values == [f"v{i}" for i in range(n)]

    follower_bytes = consumer_fetch_bytes(cluster.by_id(AZ2), topic, "follower")
    leader_bytes = consumer_fetch_bytes(cluster.by_id(leader), topic, "leader")
    assert follower_bytes > 0, "the az2 replica served nothing"
    # The leader only points the consumer at az2; it serves no records itself.
    assert leader_bytes < 0.05 * follower_bytes, (leader_bytes, follower_bytes)


def test_consumer_without_rack_reads_from_the_leader(cluster):
    topic = unique_topic("norack")
    pid, leader = partition_led_outside_az2(cluster, topic)
    produce(cluster, topic, pid, 500)
    assert read_all(cluster, topic, pid, 500, rack=None)[-1] == "v499"
    assert consumer_fetch_bytes(cluster.by_id(leader), topic, "leader") > 0
    for b in cluster.brokers:
        assert consumer_fetch_bytes(b, topic, "follower") == 0


def log_start_offset(broker, topic: str, partition: int) -> int:
    # No file means 0: a log whose start never moved writes none.
    path = broker.data_dir / f"{topic}-{partition}" / "log-start-offset"
    if not path.exists():
        return 0
    return int(path.read_text().split()[2])


def test_delete_records_moves_the_followers_log_start_offset(cluster):
    topic = unique_topic("delrec")
    # Small segments and one batch per produce call: the followers have whole segments to delete.
    partitions = create_topic(cluster, topic, 1, config={"segment.bytes": "1024"})
    leader = partitions[0].leader
    for i in range(0, 600, 50):
        produce(cluster, topic, 0, 50, start=i)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fs = admin.delete_records([TopicPartition(topic, 0, 400)], request_timeout=T,
                              operation_timeout=T)
    for f in fs.values():
        assert f.result().low_watermark == 400

    followers = [b for b in cluster.brokers if b is not cluster.by_id(leader)]
    deadline = time.monotonic() + T
    while time.monotonic() < deadline:
        if all(log_start_offset(b, topic, 0) == 400 for b in followers):
            break
        time.sleep(0.2)
    for b in followers:
        assert log_start_offset(b, topic, 0) == 400, b.data_dir
        bases = sorted(int(p.stem) for p in (b.data_dir / f"{topic}-0").glob("*.log"))
        assert bases[0] > 0, f"no segment below 400 deleted: {bases}"
        assert bases[0] <= 400

    # A consumer in a follower's rack starts at the new log start offset.
    rack = "az2" if leader != AZ2 else "az3"
    values = read_all(cluster, topic, 0, 200, rack=rack, start=-2)  # OFFSET_BEGINNING
    assert values[0] == "v400"


def checkpointed_high_watermark(broker, topic: str, partition: int) -> int | None:
    path = broker.data_dir / "replication-offset-checkpoint"
    if not path.exists():
        return None
    for line in path.read_text().splitlines()[2:]:
        t, p, offset = line.split()
        if t == topic and int(p) == partition:
            return int(offset)
    return None


def test_restarted_follower_keeps_its_high_watermark(cluster):
    topic = unique_topic("hwcp")
    pid, leader = partition_led_outside_az2(cluster, topic)
    produce(cluster, topic, pid, 300)
    az2 = cluster.by_id(AZ2)
    deadline = time.monotonic() + T
    while time.monotonic() < deadline and checkpointed_high_watermark(az2, topic, pid) != 300:
        time.sleep(0.1)
    assert checkpointed_high_watermark(az2, topic, pid) == 300

    az2.restart()
    # Written again at the clean shutdown, and read back at start-up.
    assert checkpointed_high_watermark(az2, topic, pid) == 300
    assert consumer_fetch_bytes(az2, topic, "follower") == 0, "metrics restart with the process"
    # The leader sends consumers only to in-sync replicas: wait for az2 to be one again.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=topic, timeout=10)
        if AZ2 in md.topics[topic].partitions[pid].isrs:
            break
        time.sleep(0.2)
    values = read_all(cluster, topic, pid, 300, rack="az2", timeout=60)
    assert values[-1] == "v299"
    assert consumer_fetch_bytes(az2, topic, "follower") > 0


def test_follower_down_during_delete_records_restarts_its_log_at_the_leaders_start(cluster):
    topic = unique_topic("delrec-down")
    partitions = create_topic(cluster, topic, 1)
    leader = partitions[0].leader
    down = next(b for b in cluster.brokers if b is not cluster.by_id(leader))
    produce(cluster, topic, 0, 100)
    down.stop()
    try:
        produce(cluster, topic, 0, 100, start=100)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        fs = admin.delete_records([TopicPartition(topic, 0, 150)], request_timeout=T,
                                  operation_timeout=T)
        for f in fs.values():
            assert f.result().low_watermark == 150
    finally:
        down.start()
    # Its log ended at 100, the leader's now starts at 150: it restarts its log at 150.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and log_start_offset(down, topic, 0) != 150:
        time.sleep(0.2)
    assert log_start_offset(down, topic, 0) == 150
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and checkpointed_high_watermark(down, topic, 0) != 200:
        time.sleep(0.2)
    assert checkpointed_high_watermark(down, topic, 0) == 200
