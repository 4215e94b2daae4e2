"""The remote WAL on four brokers (racks az1, az2, az3, az1). `__remote_wal_log_metadata` keeps
three replicas per partition, so brokers lack some of its partitions and read those over the
network as a consumer (crates/broker/src/remote_wal/remote_reader.rs). A follower whose data
partition's metadata lands in a partition its broker does not host must still get its data
through the object store, not by the classic (cross-AZ) fetch: reading from the replica in its
own rack (KIP-392) while there is one, and from the new leaders after that replica's broker dies.
"""

from __future__ import annotations

import struct
import time

import crc32c
import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from conftest import unique_topic
from test_cluster import Cluster, create_topic, scrape_inter_broker
from test_remote_wal import (
    PARTITIONS, WAL_TUNING, local_buckets, metric_sum, metric_sum_one, produce, wait_identical,
)
from walcheck import METADATA_TOPIC

RACKS = ["az1", "az2", "az3", "az1"]


@pytest.fixture
def four_brokers(tmp_path):
    _, extra = local_buckets(tmp_path)
    c = Cluster(tmp_path / "cluster", size=4, racks=RACKS)
    for b in c.brokers:
        b.extra_config.update(extra)
        b.extra_config.update(WAL_TUNING)
        # A killed broker is fenced (and its leaderships move) within a few seconds.
        b.extra_config.update({"broker.heartbeat.interval.ms": 500,
                               "broker.session.timeout.ms": 3000})
    c.start()
    yield c
    c.stop()


def metadata_partition(topic_id, partition: int, partitions: int) -> int:
    """publisher.rs's routing: crc32c(topic id, partition) modulo the partition count."""
    key = (topic_id.get_most_significant_bits().to_bytes(8, "big", signed=True)
           + topic_id.get_least_significant_bits().to_bytes(8, "big", signed=True)
           + struct.pack(">i", partition))
    return crc32c.crc32c(key) % partitions


def metadata_replicas(admin) -> dict[int, set[int]]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t = admin.list_topics(METADATA_TOPIC, timeout=10).topics.get(METADATA_TOPIC)
        if t is not None and t.error is None and t.partitions:
            return {pid: set(p.replicas) for pid, p in t.partitions.items()}
        time.sleep(0.2)
    raise TimeoutError(f"{METADATA_TOPIC} was not created")


def blind_followers(admin, topic: str, parts: dict, meta: dict) -> list[tuple[int, int]]:
    """(follower broker, data partition) pairs whose metadata partition the broker lacks."""
    topic_id = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=10).topic_id
    out = []
    for pid, p in parts.items():
        m = metadata_partition(topic_id, pid, len(meta))
        out += [(r, pid) for r in p.replicas if r != p.leader and r not in meta[m]]
    return out


def reader_bytes(broker) -> dict[str, int]:
    """`kind="wal_metadata_reader"` bytes `broker` received, by peer rack: its reader's
    responses, and the requests of other brokers' readers it served."""
    out: dict[str, int] = {}
    for (direction, rack, kind), n in scrape_inter_broker(broker).items():
        if direction == "received" and kind == "wal_metadata_reader":
            out[rack] = out.get(rack, 0) + n
    return out


def test_followers_read_metadata_partitions_they_do_not_host(four_brokers):
    c = four_brokers
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    # The metadata topic is created by the first publish.
    warm = unique_topic("walwarm")
    create_topic(c, warm, PARTITIONS, {"remote.wal.enable": "true"})
    produce(c, warm, 1_000_000, "all")
    meta = metadata_replicas(admin)
    assert all(len(r) == 3 for r in meta.values()), meta

    # Rack-aware placement puts one replica in each rack: brokers 2 and 3 host every partition,
    # brokers 1 and 4 half each. A data partition whose az1 replica is a follower and whose
    # metadata partition (chosen from the random topic id) has the other az1 broker has a blind
    # follower: a quarter of the partitions on average. Pick a topic with at least three.
    for _ in range(12):
        topic = unique_topic("wal4")
        parts = create_topic(c, topic, PARTITIONS, {"remote.wal.enable": "true"})
        blind = blind_followers(admin, topic, parts, meta)
        if len(blind) >= 3:
            break
    assert len(blind) >= 3, blind
    # One record per partition before measuring: the WAL fetcher keeps metadata only of
    # partitions it follows, so a broker that sets up a new topic's followers late drops the
    # first records and takes the classic fetch for them (whatever reads the metadata).
    produce(c, topic, PARTITIONS * 10_000, "all")

    classic_before = metric_sum(c, "ferry_remote_wal_follower_bytes_total", path="classic")
    wal_before = metric_sum(c, "ferry_remote_wal_follower_bytes_total", path="wal")
    produced = produce(c, topic, 20_000_000, "all")
    wait_identical(c, topic, replicas={pid: list(p.replicas) for pid, p in parts.items()})
    classic = metric_sum(c, "ferry_remote_wal_follower_bytes_total", path="classic") - classic_before
    wal = metric_sum(c, "ferry_remote_wal_follower_bytes_total", path="wal") - wal_before
    print(f"produced {produced}, follower bytes wal {wal} classic {classic}, "
          f"{len(blind)} blind followers {blind}")
    # Without the network reader the blind followers (>= 3 of 12 partitions, so >= 1/4 of
    # `produced`) get their data by the classic fetch. A loaded machine may push one partition's
    # follower (1/12) there too; half of the blind share separates the two.
    assert classic < produced / 8 and wal > 1.8 * produced, (
        f"follower bytes for {produced} produced: wal {wal}, classic {classic}; blind followers "
        f"{blind}; classic bytes by broker "
        f"{[metric_sum_one(b, 'ferry_remote_wal_follower_bytes_total', path='classic') for b in c.brokers]}; "
        f"reports served classic {metric_sum(c, 'ferry_remote_wal_reports_served_classic_total')}"
    )

    # A broker lacking metadata partitions fetched them as a consumer, counted as its own kind of
    # inter-broker traffic.
    for b in c.brokers:
        node = b.extra_config["node.id"]
        if any(node not in r for r in meta.values()):
            assert sum(reader_bytes(b).values()) > 0, f"broker {node} fetched no metadata"
    # Brokers 1 and 4 share rack az1, and each metadata partition one of them lacks is hosted by
    # the other (three replicas on four brokers): when the leader is in another rack it points
    # the reader at the az1 replica (KIP-392), so only the redirects come from other racks.
    for node in (1, 4):
        got = reader_bytes(c.by_id(node))
        print(f"broker {node}'s metadata reader received by peer rack: {got}")
        cross = sum(n for rack, n in got.items() if rack != "az1")
        assert got.get("az1", 0) > 0 and cross < 0.2 * got["az1"], (node, got)

    # Broker 1 dies: broker 4's reader loses the replica it read from (and the leader of the
    # partitions broker 1 led). It goes back to the image's leaders, now in az2/az3, and its
    # blind followers keep getting their data through the WAL.
    b4 = c.by_id(4)
    c.by_id(1).kill9()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t = AdminClient({"bootstrap.servers": c.by_id(2).bootstrap}).list_topics(
            METADATA_TOPIC, timeout=10).topics[METADATA_TOPIC]
        if all(p.leader not in (-1, 1) for p in t.partitions.values()):
            break
        time.sleep(0.3)
    else:
        raise TimeoutError("broker 1's metadata leaderships did not move")
    live = {pid: [r for r in p.replicas if r != 1] for pid, p in parts.items()}
    # The failover itself (ISR shrink, publishes that failed while broker 1 still led metadata
    # partitions, republishing) takes the classic path for a while; measure after it.
    produce(c, topic, 1_000_000, "all")
    wait_identical(c, topic, replicas=live)
    before = reader_bytes(b4)
    classic_before = metric_sum_one(b4, "ferry_remote_wal_follower_bytes_total", path="classic")
    wal_before = metric_sum_one(b4, "ferry_remote_wal_follower_bytes_total", path="wal")
    produced = produce(c, topic, 5_000_000, "all")
    wait_identical(c, topic, replicas=live)
    after = reader_bytes(b4)
    other_racks = sum(after.get(r, 0) - before.get(r, 0) for r in ("az2", "az3"))
    classic = metric_sum_one(b4, "ferry_remote_wal_follower_bytes_total", path="classic") - classic_before
    wal = metric_sum_one(b4, "ferry_remote_wal_follower_bytes_total", path="wal") - wal_before
    print(f"after broker 1 died: broker 4 reader bytes from az2/az3 {other_racks}, "
          f"follower bytes wal {wal} classic {classic}")
    # Broker 4 follows about half the partitions, its blind followers (>= 3) get >= 1/4 of
    # `produced`; allow one partition's worth (1/12) of classic bytes from a loaded machine.
    assert other_racks > 0 and wal > 0 and classic < 0.15 * produced, (other_racks, wal, classic)
