"""ElectLeaders (preferred and unclean) and DescribeQuorum on a three-broker cluster, with real
clients: confluent-kafka's `elect_leaders`, kafka-python's `describe_metadata_quorum`, and a raw
DescribeQuorum v1 to every broker (only the quorum's leader knows the voters' progress; the
others must ask it).

Automatic preferred-leader restoration is off, so leadership moves only when a test elects.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import kwire
from conftest import kafka_error_code, unique_topic
from test_cluster import Cluster, create_topic
from test_cluster_failover import (
    FAST,
    MIN_ISR,
    NumberedProducer,
    active_controller,
    check_acknowledged_exactly_once,
    batches,
    check_replicas_identical,
    partitions_of,
    wait_for,
    wait_isr_full,
)

NO_REBALANCE = {**FAST, "auto.leader.rebalance.enable": False}

ERR_UNKNOWN_TOPIC_OR_PARTITION = 3
ERR_PREFERRED_LEADER_NOT_AVAILABLE = 80
ERR_ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
ERR_ELECTION_NOT_NEEDED = 84


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, NO_REBALANCE)
    c.start()
    yield c
    c.stop()


def elect(bootstrap: str, kind: ElectionType, partitions) -> dict:
    """{(topic, partition): error code (0: elected)} of one ElectLeaders call."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # confluent-kafka 2.16 refuses its documented timeout keywords here ("more argument
    # specifiers than keyword list entries"): the defaults (socket.timeout.ms) apply.
    result = admin.elect_leaders(kind, partitions).result(timeout=90)
    return {(tp.topic, tp.partition): 0 if err is None else kafka_error_code(err)
            for tp, err in result.items()}


def live_bootstrap(cluster: Cluster) -> str:
    return ",".join(b.bootstrap for b in cluster.brokers if b.alive())


def test_preferred_election_moves_leadership_back_without_losing_acknowledged_records(cluster):
    topic = unique_topic("elect")
    create_topic(cluster, topic, 3, MIN_ISR)
    assert all(leader == replicas[0]
               for leader, replicas, _ in partitions_of(cluster, topic).values())
    producer = NumberedProducer(cluster.bootstrap, topic, 3)
    producer.start()
    producer.wait_progress()

    # Partition 0's preferred leader goes away and comes back in sync, but not leading.
    preferred = partitions_of(cluster, topic)[0][1][0]
    victim = cluster.by_id(preferred)
    victim.kill9()
    wait_for("partition 0 fails over", lambda: partitions_of(cluster, topic)[0][0]
             not in (-1, preferred))
    producer.wait_progress()
    victim.start(wait=False)
    wait_isr_full(cluster, topic)
    moved = sorted(p for p, (leader, replicas, _) in partitions_of(cluster, topic).items()
                   if leader != replicas[0])
    assert 0 in moved
    time.sleep(3)  # longer than leader.imbalance.check.interval.seconds: nothing moves by itself
    assert partitions_of(cluster, topic)[0][0] != preferred
    producer.wait_progress()

    # Elect under load, through a broker that is not the partition's current leader.
    result = elect(cluster.bootstrap, ElectionType.PREFERRED,
                   [TopicPartition(topic, p) for p in range(3)] + [TopicPartition(topic, 9)])
    assert result == {
        **{(topic, p): 0 if p in moved else ERR_ELECTION_NOT_NEEDED for p in range(3)},
        (topic, 9): ERR_UNKNOWN_TOPIC_OR_PARTITION,
    }
    wait_for("preferred leaders everywhere", lambda: all(
        leader == replicas[0] for leader, replicas, _ in partitions_of(cluster, topic).values()),
        timeout=10)
    producer.wait_progress()
    producer.finish()
    check_acknowledged_exactly_once(cluster, topic, producer)
    check_replicas_identical(cluster, topic, 3)

    # Every partition (null partitions): those not needing an election are left out.
    everything = elect(cluster.bootstrap, ElectionType.PREFERRED, None)
    assert not any(t == topic for t, _ in everything), everything


@pytest.fixture
def cluster5(tmp_path):
    """Five voters: two brokers may be down at once and the quorum still commits."""
    c = Cluster(tmp_path, NO_REBALANCE, size=5)
    c.start()
    yield c
    c.stop()


def create_assigned(cluster: Cluster, topic: str, replicas: list[int], config: dict | None = None):
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas],
                                  config=config or {})])[topic].result(timeout=30)
    wait_for(f"{topic} led by {replicas[0]} with ISR {replicas}", lambda: (
        lambda p: p[0] == replicas[0] and p[2] == sorted(replicas))(
            partitions_of(cluster, topic)[0]))


def test_unclean_election_elects_an_out_of_sync_replica_and_the_old_leader_truncates(cluster5):
    cluster = cluster5
    topic = unique_topic("unclean")
    leader, follower = 2, 3
    create_assigned(cluster, topic, [leader, follower])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "topic.metadata.refresh.interval.ms": 1000})
    for i in range(50):
        producer.produce(topic, value=f"both:{i}".encode())
    assert producer.flush(30) == 0

    # The follower goes away: the ISR shrinks to the leader, which takes more writes alone
    # (min.insync.replicas 1).
    cluster.by_id(follower).kill9()
    wait_for("the ISR is the leader alone",
             lambda: partitions_of(cluster, topic)[0][2] == [leader], timeout=30)
    for i in range(20):
        producer.produce(topic, value=f"alone:{i}".encode())
    assert producer.flush(30) == 0

    # Then the leader dies too, and the out-of-sync follower returns: no clean leader exists.
    cluster.by_id(leader).kill9()
    wait_for("the partition is leaderless", lambda: partitions_of(cluster, topic)[0][0] == -1,
             timeout=30)
    cluster.by_id(follower).start(wait=False)
    wait_for("the follower is back", lambda: cluster.by_id(follower).alive()
             and partitions_of(cluster, topic)[0][2] == [leader], timeout=40)
    time.sleep(4)  # a full session: the returning follower is unfenced by now
    state = partitions_of(cluster, topic)[0]
    assert (state[0], state[2]) == (-1, [leader]), "no unclean election by itself"

    bootstrap = live_bootstrap(cluster)
    tp = [TopicPartition(topic, 0)]
    assert elect(bootstrap, ElectionType.PREFERRED, tp) == {
        (topic, 0): ERR_PREFERRED_LEADER_NOT_AVAILABLE}
    assert elect(bootstrap, ElectionType.UNCLEAN, tp) == {(topic, 0): 0}
    # Committed and applied on the broker that answered; the others apply it moments later.
    wait_for("the follower leads alone", lambda: (
        lambda p: (p[0], p[2]) == (follower, [follower]))(partitions_of(cluster, topic)[0]),
        timeout=10)
    assert elect(bootstrap, ElectionType.UNCLEAN, tp) == {(topic, 0): ERR_ELECTION_NOT_NEEDED}

    # The new leader's log is the truth: writes go on after its end, and the returning old
    # leader truncates its 20 records written alone and follows.
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce(topic, value=f"after:{i}".encode())
    assert producer.flush(30) == 0
    cluster.by_id(leader).start(wait=False)
    wait_for("the old leader is back in the ISR",
             lambda: partitions_of(cluster, topic)[0][2] == sorted([leader, follower]),
             timeout=60)

    def same_log():
        return batches(cluster.by_id(leader), topic, 0) == batches(
            cluster.by_id(follower), topic, 0)

    wait_for("identical replicas", same_log, timeout=30, step=0.5)
    values = read_values(bootstrap, topic)
    assert values == [f"both:{i}" for i in range(50)] + [f"after:{i}" for i in range(10)]


def read_values(bootstrap: str, topic: str) -> list[str]:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("read"),
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        out, deadline = [], time.monotonic() + 30
        while len(out) < high and time.monotonic() < deadline:
            for m in c.consume(100, timeout=1):
                if m.error() is None:
                    out.append(m.value().decode())
        return out
    finally:
        c.close()


def test_unclean_election_without_a_live_replica_is_refused(cluster):
    topic = unique_topic("noone")
    create_assigned(cluster, topic, [3])
    cluster.by_id(3).kill9()
    wait_for("the partition is leaderless", lambda: partitions_of(cluster, topic)[0][0] == -1,
             timeout=30)
    result = elect(live_bootstrap(cluster), ElectionType.UNCLEAN, [TopicPartition(topic, 0)])
    assert result == {(topic, 0): ERR_ELIGIBLE_LEADERS_NOT_AVAILABLE}
    result = elect(live_bootstrap(cluster), ElectionType.PREFERRED, [TopicPartition(topic, 0)])
    assert result == {(topic, 0): ERR_PREFERRED_LEADER_NOT_AVAILABLE}


def keep_id(cluster: Cluster, broker) -> int:
    return cluster.brokers.index(broker) + 1


def test_describe_quorum_from_every_broker(cluster):
    controller = active_controller(cluster)
    leader_id = keep_id(cluster, controller)
    answers = []
    for b in cluster.brokers:
        with kwire.Conn.to(b) as conn:
            answers.append(kwire.describe_quorum_v1(conn))
    for a in answers:
        assert a["error_code"] == 0, a
        [t] = a["topics"]
        assert t["name"] == "__cluster_metadata"
        [p] = t["partitions"]
        assert p["error_code"] == 0, p
        assert p["leader_id"] == leader_id
        assert p["leader_epoch"] >= 1
        assert p["high_watermark"] > 0
        assert sorted(v["id"] for v in p["voters"]) == [1, 2, 3]
        assert p["observers"] == []
        now_ms = time.time() * 1000
        for v in p["voters"]:
            assert 0 < v["log_end_offset"] <= p["high_watermark"] + 100, v
            # Voters answer the leader's heartbeats every 100 ms.
            assert now_ms - v["last_fetch_timestamp"] < 10_000, v
            assert now_ms - v["last_caught_up_timestamp"] < 10_000, v

    # A voter that is down stops fetching; every broker still answers, from the leader.
    victim = next(b for b in cluster.brokers if b is not controller)
    victim_id = keep_id(cluster, victim)
    victim.kill9()
    time.sleep(2)
    for b in cluster.brokers:
        if not b.alive():
            continue
        with kwire.Conn.to(b) as conn:
            p = kwire.describe_quorum_v1(conn)["topics"][0]["partitions"][0]
        gone = next(v for v in p["voters"] if v["id"] == victim_id)
        assert time.time() * 1000 - gone["last_fetch_timestamp"] > 1_500, gone
        assert all(time.time() * 1000 - v["last_fetch_timestamp"] < 1_500
                   for v in p["voters"] if v["id"] != victim_id), p

    # Another metadata partition does not exist.
    with kwire.Conn.to(controller) as conn:
        other = kwire.describe_quorum_v1(conn, topic="__cluster_metadata", partition=1)
    assert other["topics"][0]["partitions"][0]["error_code"] == ERR_UNKNOWN_TOPIC_OR_PARTITION


def test_describe_quorum_with_kafka_python_reports_nodes(cluster):
    from kafka import KafkaAdminClient

    controller = active_controller(cluster)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        result = admin.describe_metadata_quorum()
    finally:
        admin.close()
    [t] = result["topics"]
    [p] = t["partitions"]
    assert p["error"] is None
    assert p["leader_id"] == keep_id(cluster, controller)
    assert sorted(v["replica_id"] for v in p["current_voters"]) == [1, 2, 3]
    voters = cluster.brokers[0].config()["controller.quorum.voters"]
    ports = {int(entry.split("@")[0]): int(entry.rsplit(":", 1)[1])
             for entry in voters.split(",")}
    nodes = {n["node_id"]: n["listeners"] for n in result["nodes"]}
    assert sorted(nodes) == [1, 2, 3]
    for node_id, listeners in nodes.items():
        assert [(listener["host"], listener["port"]) for listener in listeners] == [
            ("127.0.0.1", ports[node_id])]


def test_elect_leaders_with_kafka_python(cluster):
    from kafka import KafkaAdminClient

    topic = unique_topic("kpelect")
    create_topic(cluster, topic, 2)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        response = admin.elect_leaders(0, {topic: [0, 1, 7]}, timeout_ms=30_000,
                                       raise_errors=False)
        unclean = admin.elect_leaders(1, {topic: [0]}, timeout_ms=30_000, raise_errors=False)
    finally:
        admin.close()
    assert response.API_VERSION == 2
    assert response.error_code == 0
    codes = {(r.topic, p.partition_id): p.error_code
             for r in response.replica_election_results for p in r.partition_result}
    assert codes == {(topic, 0): ERR_ELECTION_NOT_NEEDED, (topic, 1): ERR_ELECTION_NOT_NEEDED,
                     (topic, 7): ERR_UNKNOWN_TOPIC_OR_PARTITION}
    assert [p.error_code for r in unclean.replica_election_results
            for p in r.partition_result] == [ERR_ELECTION_NOT_NEEDED]
