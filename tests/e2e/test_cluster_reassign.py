"""Moving partitions between brokers (KIP-455) on a three-broker cluster, with real clients:
kafkajs `alterPartitionReassignments` / `listPartitionReassignments`, confluent-kafka's
`elect_leaders`, and raw requests (kwire) for what the clients cannot send (a cancellation,
KIP-860's replication-factor guard).

The moved partition belongs to a remote-WAL topic, written by an acks=all producer the whole
time: nothing acknowledged may be lost, and the replicas end identical.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ElectionType, TopicPartition

from conftest import unique_topic
from test_cluster import Cluster
from test_cluster_elect import NO_REBALANCE, create_assigned, elect
from test_cluster_failover import (
    NumberedProducer,
    check_acknowledged_exactly_once,
    partitions_of,
    wait_for,
)
from test_produce_consume import kafkajs
from test_remote_wal import WAL_TUNING, local_buckets

ERR_INVALID_REPLICATION_FACTOR = 38
ERR_INVALID_REPLICA_ASSIGNMENT = 39
ERR_NO_REASSIGNMENT_IN_PROGRESS = 85


@pytest.fixture
def wal_cluster(tmp_path):
    _, stores = local_buckets(tmp_path)
    c = Cluster(tmp_path, {**NO_REBALANCE, **WAL_TUNING, **stores})
    c.start()
    yield c
    c.stop()


def kafkajs_admin(bootstrap: str, *steps) -> list:
    out = kafkajs({"op": "admin", "brokers": bootstrap.split(","), "steps": list(steps)})
    assert out["ok"], out
    return out["results"]


def admin(cluster: Cluster, *steps) -> list:
    return kafkajs_admin(cluster.bootstrap, *steps)


def ongoing(cluster: Cluster, topic: str, bootstrap: str | None = None) -> list:
    """kafkajs' view of the reassignments in progress for `topic`."""
    [listed] = kafkajs_admin(bootstrap or cluster.bootstrap,
                             {"do": "listPartitionReassignments",
                              "topics": [{"topic": topic, "partitions": [0]}]})
    return [p for t in listed["topics"] if t["name"] == topic for p in t["partitions"]]


def replica_dir(cluster: Cluster, broker: int, topic: str):
    return cluster.by_id(broker).data_dir / f"{topic}-0"


def test_a_remote_wal_partition_moves_racks_under_acks_all_load_and_leadership_comes_back(
        wal_cluster):
    cluster = wal_cluster
    topic = unique_topic("move")
    create_assigned(cluster, topic, [1, 2],
                    {"remote.wal.enable": "true", "min.insync.replicas": "2"})
    producer = NumberedProducer(cluster.bootstrap, topic, 1)
    producer.start()
    producer.wait_progress()

    # Move the partition off az1 (broker 1, its leader) onto az3 (broker 3).
    admin(cluster, {"do": "alterPartitionReassignments", "timeout": 30000,
                    "topics": [{"topic": topic,
                                "partitionAssignment": [{"partition": 0, "replicas": [3, 2]}]}]})
    # Listed while the new replica catches up, or already done; never anything else.
    listed = ongoing(cluster, topic)
    assert listed in ([], [{"partition": 0, "replicas": [3, 2, 1], "addingReplicas": [3],
                            "removingReplicas": [1]}]), listed
    wait_for("the reassignment completes", lambda: not ongoing(cluster, topic)
             and partitions_of(cluster, topic)[0][1] == [3, 2], timeout=60)
    leader, replicas, isr = partitions_of(cluster, topic)[0]
    assert leader == 3, "the leader left the replicas: the first target replica in sync leads"
    assert isr == [2, 3]
    wait_for("broker 1 deleted its replica", lambda: not replica_dir(cluster, 1, topic).exists())
    producer.wait_progress()

    # Reorder so broker 2 is preferred: the leader stays until ElectLeaders moves it back.
    admin(cluster, {"do": "alterPartitionReassignments", "timeout": 30000,
                    "topics": [{"topic": topic,
                                "partitionAssignment": [{"partition": 0, "replicas": [2, 3]}]}]})
    wait_for("replicas reordered", lambda: partitions_of(cluster, topic)[0][1] == [2, 3])
    assert partitions_of(cluster, topic)[0][0] == 3
    assert elect(cluster.bootstrap, ElectionType.PREFERRED, [TopicPartition(topic, 0)]) == {
        (topic, 0): 0}
    wait_for("broker 2 leads", lambda: partitions_of(cluster, topic)[0][0] == 2, timeout=10)
    producer.wait_progress()
    producer.finish()
    assert not producer.errors, producer.errors[:3]
    check_acknowledged_exactly_once(cluster, topic, producer)

    # The two replicas hold the same log, the one on broker 1 is gone.
    def logs(b: int) -> bytes:
        return b"".join(p.read_bytes() for p in sorted(replica_dir(cluster, b, topic).glob("*.log")))

    # The follower catches up through the WAL path; on a loaded machine that takes a while.
    wait_for("identical replicas on 2 and 3", lambda: logs(2) == logs(3) and logs(2), timeout=120)
    assert not replica_dir(cluster, 1, topic).exists()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, NO_REBALANCE)
    c.start()
    yield c
    c.stop()


def test_bad_reassignments_are_refused_and_an_ongoing_one_can_be_cancelled(cluster):
    import kwire

    topic = unique_topic("cancel")
    create_assigned(cluster, topic, [1, 2])
    # kafkajs refuses negative ids itself; a broker that does not exist is the controller's call.
    out = kafkajs({"op": "admin", "brokers": cluster.bootstrap.split(","), "steps": [
        {"do": "alterPartitionReassignments", "timeout": 30000,
         "topics": [{"topic": topic, "partitionAssignment": [{"partition": 0,
                                                              "replicas": [1, 7]}]}]}]})
    assert not out["ok"] and [e["type"] for e in out["error"]["errors"]] == [
        "INVALID_REPLICA_ASSIGNMENT"], out
    assert ongoing(cluster, topic) == []

    # Broker 3 is stopped, so a move onto it stays in progress; cancelling it goes back.
    cluster.by_id(3).stop()
    c12 = ",".join(cluster.by_id(b).bootstrap for b in (1, 2))
    kafkajs_admin(c12, {"do": "alterPartitionReassignments", "timeout": 30000,
                    "topics": [{"topic": topic,
                                "partitionAssignment": [{"partition": 0, "replicas": [3, 2]}]}]})
    time.sleep(1)
    assert ongoing(cluster, topic, c12) == [{"partition": 0, "replicas": [3, 2, 1],
                                        "addingReplicas": [3], "removingReplicas": [1]}]
    with kwire.Conn.to(cluster.by_id(2)) as conn:
        assert kwire.alter_partition_reassignments(conn, topic, 0, None) == (0, 0)
        # Back to the original replicas, in the order Kafka gives them: the replica list minus
        # the adding ones (the target's order first).
        wait_for("back to [2, 1]", lambda: partitions_of(cluster, topic)[0][1] == [2, 1])
        assert kwire.alter_partition_reassignments(conn, topic, 0, None) == (
            0, ERR_NO_REASSIGNMENT_IN_PROGRESS)
        # KIP-860: v1 with allow_replication_factor_change=false refuses 2 -> 1 replicas.
        assert kwire.alter_partition_reassignments(conn, topic, 0, [2],
                                                   allow_rf_change=False) == (
            0, ERR_INVALID_REPLICATION_FACTOR)
        assert kwire.alter_partition_reassignments(conn, topic, 0, [2, 2]) == (
            0, ERR_INVALID_REPLICA_ASSIGNMENT)
    assert partitions_of(cluster, topic)[0][:2] == (1, [2, 1])


def alter_configs(cluster: Cluster, resource, name: str, changes: dict):
    """IncrementalAlterConfigs: SET each value, DELETE each None."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None
                           else AlterConfigOpType.DELETE) for k, v in changes.items()]
    a = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in a.incremental_alter_configs([ConfigResource(resource, name,
                                                         incremental_configs=entries)]).values():
        f.result(timeout=30)


def replica_bytes(cluster: Cluster, broker: int, topic: str, partition: int) -> int:
    d = cluster.by_id(broker).data_dir / f"{topic}-{partition}"
    return sum(p.stat().st_size for p in d.glob("*.log")) if d.exists() else 0


def test_replication_throttles_hold_back_new_replicas_until_lifted(cluster):
    """KIP-73 as kafka-reassign-partitions sets it: partition 0's new replica (broker 3) is
    throttled on the follower side, partition 1's on its leader (broker 1). Each side's rate is
    200 kB/s, so after the first burst (Kafka's sampled rate measures it over ten seconds) the
    new replicas stay far behind; lifting the rates lets both reassignments complete."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic, ResourceType

    from test_cluster_failover import metric

    topic = unique_topic("throttle")
    admin_client = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin_client.create_topics([NewTopic(topic, num_partitions=2,
                                         replica_assignment=[[1, 2], [1, 2]])])[topic].result(
        timeout=30)
    wait_for("leaders", lambda: all(l == 1 for l, _, _ in partitions_of(cluster, topic).values()))
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "linger.ms": 5, "batch.size": 200_000})
    value = b"x" * 10_000
    for i in range(800):  # 8 MB per partition
        for p in (0, 1):
            while True:
                try:
                    producer.produce(topic, value=value, partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
    assert producer.flush(60) == 0
    size = replica_bytes(cluster, 1, topic, 0)
    assert size > 8_000_000

    rate = "200000"
    alter_configs(cluster, ResourceType.TOPIC, topic, {
        "follower.replication.throttled.replicas": "0:3",
        "leader.replication.throttled.replicas": "1:1"})
    alter_configs(cluster, ResourceType.BROKER, "3", {"follower.replication.throttled.rate": rate})
    alter_configs(cluster, ResourceType.BROKER, "1", {"leader.replication.throttled.rate": rate})
    admin(cluster, {"do": "alterPartitionReassignments", "timeout": 30000,
                    "topics": [{"topic": topic, "partitionAssignment": [
                        {"partition": 0, "replicas": [1, 2, 3]},
                        {"partition": 1, "replicas": [1, 2, 3]}]}]})
    time.sleep(3)
    # A rate bound cannot be beaten by a slow machine, only approached: 2 MB of burst, up to
    # one 1 MiB fetch past it, then 200 kB/s.
    behind = {p: replica_bytes(cluster, 3, topic, p) for p in (0, 1)}
    assert all(b < size * 3 // 4 for b in behind.values()), (behind, size)
    assert metric(cluster.by_id(3), "ferry_replication_throttle_held_back_total") > 0
    assert metric(cluster.by_id(1), "ferry_replication_throttle_held_back_total") > 0
    assert metric(cluster.by_id(3), "ferry_replication_throttled_bytes_total") > 0
    listed = kafkajs_admin(cluster.bootstrap, {"do": "listPartitionReassignments",
                                               "topics": [{"topic": topic, "partitions": [0, 1]}]})
    assert sorted(p["partition"] for t in listed[0]["topics"] for p in t["partitions"]) == [0, 1]

    alter_configs(cluster, ResourceType.BROKER, "3", {"follower.replication.throttled.rate": None})
    alter_configs(cluster, ResourceType.BROKER, "1", {"leader.replication.throttled.rate": None})
    wait_for("both reassignments complete", lambda: all(
        replicas == [1, 2, 3] and isr == [1, 2, 3]
        for _, replicas, isr in partitions_of(cluster, topic).values()), timeout=60)
    assert replica_bytes(cluster, 3, topic, 0) == replica_bytes(cluster, 1, topic, 0)
