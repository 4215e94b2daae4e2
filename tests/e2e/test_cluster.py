"""A three-broker cluster on loopback (racks az1, az2, az3): one controller quorum, classic
replication from leaders to followers, acks=all and min.insync.replicas.

`Cluster` (conftest.py): each broker is `process.roles = broker,controller` with the same
`controller.quorum.voters` (controller ports distinct from the Kafka listeners).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# Cluster lives in conftest (the `broker` fixture's cluster mode uses it too); re-exported here
# for suites that import it from this module.
from conftest import Broker, Cluster, free_port, unique_topic  # noqa: F401

LAG_MS = Cluster.LAG_MS


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    c.start()
    yield c
    c.stop()


def create_topic(cluster: Cluster, name: str, partitions: int, config: dict | None = None):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=3, config=config or {})]
    )
    futures[name].result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=10)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
            p.leader >= 1 and len(p.isrs) == 3 for p in t.partitions.values()
        ):
            return {pid: p for pid, p in t.partitions.items()}
        time.sleep(0.2)
    raise TimeoutError(f"topic {name} not ready")


def log_bytes(broker: Broker, topic: str, partition: int) -> bytes:
    d = broker.data_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


def test_three_brokers_replicate_acks_all(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    md = admin.list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]

    topic = unique_topic("repl")
    partitions = create_topic(cluster, topic, 3)
    for p in partitions.values():
        assert sorted(p.replicas) == [1, 2, 3]
    # Leaders spread over the brokers.
    assert len({p.leader for p in partitions.values()}) == 3

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)

    total = 5000
    for i in range(total):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 3,
                         on_delivery=on_delivery)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []

    # Each partition read from its leader: everything, in order.
    for pid, p in partitions.items():
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.by_id(p.leader).bootstrap,
                "group.id": f"g-{topic}-{pid}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign([TopicPartition(topic, pid, 0)])
        values = []
        deadline = time.monotonic() + 60
        expected = len(range(pid, total, 3))
        while len(values) < expected and time.monotonic() < deadline:
            for m in consumer.consume(500, timeout=1):
                assert m.error() is None, m.error()
                values.append(m.value())
        consumer.close()
        assert values == [f"v{i}".encode() for i in range(pid, total, 3)]

    # Followers hold byte-identical logs once caught up.
    deadline = time.monotonic() + 30
    while True:
        same = all(
            len({log_bytes(b, topic, pid) for b in cluster.brokers}) == 1
            for pid in partitions
        )
        if same or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for pid in partitions:
        logs = [log_bytes(b, topic, pid) for b in cluster.brokers]
        assert len(logs[0]) > 0
        assert logs[0] == logs[1] == logs[2], f"partition {pid} differs: {[len(l) for l in logs]}"


def test_min_insync_replicas_with_a_broker_stopped(cluster):
    topic = unique_topic("minisr")
    partitions = create_topic(cluster, topic, 1, {"min.insync.replicas": "3"})
    leader = partitions[0].leader
    producer_conf = {
        "bootstrap.servers": cluster.by_id(leader).bootstrap,
        "acks": "all",
        "enable.idempotence": False,
        "retries": 0,
        "request.timeout.ms": 5000,
        "message.timeout.ms": 10000,
    }

    def produce_one() -> KafkaError | None:
        result = []
        p = Producer(producer_conf)
        p.produce(topic, value=b"x", partition=0, on_delivery=lambda e, m: result.append(e))
        p.flush(20)
        return result[0] if result else KafkaError(KafkaError._TIMED_OUT)

    assert produce_one() is None

    victim = next(b for i, b in enumerate(cluster.brokers) if i + 1 != leader)
    victim.stop()
    deadline = time.monotonic() + 40
    last = None
    while time.monotonic() < deadline:
        last = produce_one()
        if last is not None and last.code() == KafkaError.NOT_ENOUGH_REPLICAS:
            break
        time.sleep(0.5)
    assert last is not None and last.code() == KafkaError.NOT_ENOUGH_REPLICAS, last

    # The stopped follower comes back, catches up and rejoins the ISR; acks=all works again.
    victim.start(wait=False)
    admin = AdminClient({"bootstrap.servers": cluster.by_id(leader).bootstrap})
    deadline = time.monotonic() + 60
    isr = []
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=topic, timeout=10)
        isr = sorted(md.topics[topic].partitions[0].isrs)
        if isr == [1, 2, 3]:
            break
        time.sleep(0.5)
    assert isr == [1, 2, 3]
    assert produce_one() is None


def scrape_inter_broker(broker: Broker) -> dict:
    """`ferry_inter_broker_bytes_total` of one broker as {(direction, peer_rack, kind): bytes}."""
    import re
    import urllib.request

    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    out = {}
    pattern = re.compile(
        r'^ferry_inter_broker_bytes_total\{direction="(\w+)",peer_rack="([^"]*)",kind="(\w+)"\} (\d+)'
    )
    for line in text.splitlines():
        m = pattern.match(line)
        if m:
            out[(m.group(1), m.group(2), m.group(3))] = int(m.group(4))
    return out


def cross_rack_received(cluster: Cluster, kind: str) -> int:
    """Bytes of `kind` every broker received from brokers in other racks (each byte once)."""
    total = 0
    for b in cluster.brokers:
        own = b.extra_config["broker.rack"]
        for (direction, rack, k), n in scrape_inter_broker(b).items():
            if direction == "received" and k == kind and rack != own:
                total += n
    return total


def test_cross_rack_replication_bytes_are_counted(cluster):
    """Classic replication at RF=3 moves every produced byte to two other racks: the metrics
    must show about 2 bytes of cross-rack replication traffic per byte produced."""
    topic = unique_topic("xaz")
    create_topic(cluster, topic, 3)
    before = cross_rack_received(cluster, "replication")
    value = b"x" * 1000
    count = 10_000
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5}
    )
    for i in range(count):
        producer.produce(topic, value=value, partition=i % 3)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    # acks=all: the followers hold everything once the last ack arrived.
    time.sleep(1.0)
    moved = cross_rack_received(cluster, "replication") - before
    produced = count * len(value)
    ratio = moved / produced
    assert 1.9 < ratio < 2.6, f"{moved} cross-rack replication bytes for {produced} produced"
    # The controller quorum talks across racks too, under its own kind.
    assert cross_rack_received(cluster, "controller") > 0


def test_two_brokers_down_refuses_acks_all_but_not_acks_1(cluster):
    """min.insync.replicas=2 with both followers down: nothing is acknowledged with acks=all
    (the ISR cannot hold it), acks=1 still works, and once the brokers return acks=all works
    again. With two of three controller voters down the ISR cannot even shrink (no quorum), so
    the refusal is a timeout or NOT_ENOUGH_REPLICAS depending on how far the ISR got."""
    topic = unique_topic("twodown")
    partitions = create_topic(cluster, topic, 1, {"min.insync.replicas": "2"})
    leader = partitions[0].leader

    def produce_one(acks: str) -> KafkaError | None:
        result = []
        p = Producer({
            "bootstrap.servers": cluster.by_id(leader).bootstrap,
            "acks": acks,
            "enable.idempotence": False,
            "retries": 0,
            "request.timeout.ms": 4000,
            "message.timeout.ms": 8000,
        })
        p.produce(topic, value=acks.encode(), partition=0, on_delivery=lambda e, m: result.append(e))
        p.flush(20)
        return result[0] if result else KafkaError(KafkaError._TIMED_OUT)

    assert produce_one("all") is None
    followers = [b for i, b in enumerate(cluster.brokers) if i + 1 != leader]
    for b in followers:
        b.kill9()
    err = produce_one("all")
    assert err is not None, "acks=all acknowledged with both followers down"
    assert err.code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.REQUEST_TIMED_OUT,
                          KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT), err
    assert produce_one("1") is None

    for b in followers:
        b.start(wait=False)
    deadline = time.monotonic() + 90
    last = err
    while time.monotonic() < deadline:
        last = produce_one("all")
        if last is None:
            break
        time.sleep(1)
    assert last is None, last


def test_an_acks_all_produce_does_not_hold_up_its_connection(tmp_path):
    """While an acks=all produce waits for a paused follower, the next request on the same
    connection is read and appended (Kafka would hold it until the first is answered); the
    answers still come back in request order."""
    import select

    import kwire

    # Long lag and session windows: the paused follower stays registered and in the ISR.
    c = Cluster(tmp_path, extra_config={"replica.lag.time.max.ms": 60000,
                                        "broker.session.timeout.ms": 60000})
    c.start()
    try:
        waiting = unique_topic("waits")
        partitions = create_topic(c, waiting, 1, {"min.insync.replicas": "2"})
        leader = c.by_id(partitions[0].leader)
        follower = next(b for b in c.brokers if b is not leader)
        # A single-replica topic on the same leader: acks=1 appends are visible at once.
        quick = unique_topic("quick")
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        leader_id = partitions[0].leader
        admin.create_topics(
            [NewTopic(quick, num_partitions=1, replica_assignment=[[leader_id]])]
        )[quick].result(30)
        watermarks = Consumer({"bootstrap.servers": leader.bootstrap, "group.id": f"g-{quick}",
                               "socket.timeout.ms": 2000})
        deadline = time.monotonic() + 30
        while True:
            try:
                watermarks.get_watermark_offsets(TopicPartition(quick, 0), timeout=5)
                break
            except Exception:
                assert time.monotonic() < deadline, f"{quick} not ready"
                time.sleep(0.2)

        follower.pause()
        try:
            with kwire.Conn.to(leader, timeout=60) as conn:
                first = kwire.record_batch([(None, b"waits-for-the-isr")])
                second = kwire.record_batch([(None, b"appended-meanwhile")])

                def produce(topic, batch, acks, corr):
                    body = (kwire.string(None) + kwire.i16(acks) + kwire.i32(50000)
                            + kwire.i32(1) + kwire.string(topic) + kwire.i32(1) + kwire.i32(0)
                            + kwire.bytes_(batch))
                    hdr = kwire.request_header_v1(kwire.API_PRODUCE, 3, corr)
                    conn.send_raw(kwire.frame(hdr + body))

                produce(waiting, first, -1, 1)
                produce(quick, second, 1, 2)
                deadline = time.monotonic() + 20

                def quick_end() -> int:
                    # A metadata request of the client may go to the paused broker: retry.
                    try:
                        return watermarks.get_watermark_offsets(TopicPartition(quick, 0),
                                                                timeout=2)[1]
                    except Exception:  # noqa: BLE001 - polled until the deadline
                        return -1

                while quick_end() < 1:
                    assert time.monotonic() < deadline, \
                        "the second request was not appended while the first waited"
                    time.sleep(0.05)
                readable, _, _ = select.select([conn.sock], [], [], 0)
                assert not readable, "the acks=all produce was answered while an in-sync follower was paused"
                # The follower resumes: both answers arrive, in request order, without errors.
                follower.resume()
                for corr in (1, 2):
                    r = kwire.Reader(conn.recv_frame())
                    assert r.i32() == corr
                    assert r.i32() == 1
                    r.string()
                    assert r.i32() == 1
                    r.i32()
                    assert r.i16() == 0
        finally:
            follower.resume()
        watermarks.close()
    finally:
        c.stop()


def test_manual_replica_assignment(cluster):
    """CreateTopics and CreatePartitions with a replica assignment place replicas (and the
    preferred leader, the first listed) exactly as asked; a bad one is refused."""
    from confluent_kafka.admin import NewPartitions

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = unique_topic("manual")
    wanted = [[2, 3], [3, 1], [1, 2]]
    admin.create_topics([NewTopic(topic, num_partitions=3, replica_assignment=wanted)])[topic].result(30)
    admin.create_partitions([NewPartitions(topic, 4, replica_assignment=[[3, 2]])])[topic].result(30)
    deadline = time.monotonic() + 30
    while True:
        t = admin.list_topics(topic=topic, timeout=10).topics[topic]
        got = {pid: (p.replicas, p.leader) for pid, p in t.partitions.items()}
        if len(got) == 4 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert got == {0: ([2, 3], 2), 1: ([3, 1], 3), 2: ([1, 2], 1), 3: ([3, 2], 3)}

    bad = unique_topic("badassign")
    for assignment, text in (([[1, 1]], "more than once"), ([[1, 9]], "no such broker"),
                             ([[1, 2], [3]], "not consistent")):
        with pytest.raises(Exception) as e:
            admin.create_topics([NewTopic(bad, num_partitions=len(assignment),
                                          replica_assignment=assignment)])[bad].result(30)
        assert e.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, e.value
        assert text in e.value.args[0].str()


def test_isr_shrinking_below_min_insync_while_waiting_is_not_an_acknowledgement(cluster):
    """An acks=all produce waiting for a follower that stops is answered
    NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrinks below min.insync.replicas, never
    success: the records are in the leader's log only (Kafka's rule). The next produce is
    refused up front with NOT_ENOUGH_REPLICAS."""
    import kwire

    topic = unique_topic("shrink")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # Replicas on brokers 1 and 2 only: broker 3 keeps the controller quorum alive while 2 stops.
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]],
                                  config={"min.insync.replicas": "2"})])[topic].result(30)
    deadline = time.monotonic() + 30
    while True:
        p = admin.list_topics(topic=topic, timeout=10).topics[topic].partitions.get(0)
        if p is not None and p.leader == 1 and sorted(p.isrs) == [1, 2]:
            break
        assert time.monotonic() < deadline, "partition not ready"
        time.sleep(0.2)
    leader, follower = cluster.by_id(1), cluster.by_id(2)
    with kwire.Conn.to(leader, timeout=60) as conn:
        # The metadata above may come from a broker whose image is ahead of the leader's:
        # NOT_LEADER_OR_FOLLOWER until the leader has applied it too (a client retries).
        while (err := kwire.produce_v3(conn, topic, 0,
                                       kwire.record_batch([(None, b"both")]))[0]) == 6:
            assert time.monotonic() < deadline, "the leader never took the partition"
            time.sleep(0.1)
        assert err == 0
        follower.pause()
        try:
            err, _ = kwire.produce_v3(conn, topic, 0, kwire.record_batch([(None, b"alone")]),
                                      timeout_ms=50000)
            assert err == 20, f"error {err}, expected NOT_ENOUGH_REPLICAS_AFTER_APPEND (20)"
            err, _ = kwire.produce_v3(conn, topic, 0, kwire.record_batch([(None, b"refused")]))
            assert err == 19, f"error {err}, expected NOT_ENOUGH_REPLICAS (19)"
        finally:
            follower.resume()
