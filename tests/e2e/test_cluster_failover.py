"""Failover of a three-broker cluster (KIP-631 liveness): kill -9 of partition leaders under
acks=all load, a controller voter down, controlled shutdown on SIGTERM, and preferred leaders
coming back.

Brokers heartbeat every 500 ms and are fenced after 3 s of silence, so failover is quick;
the active controller restores preferred leaders every 2 s.
"""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import unique_topic
from test_cluster import Cluster, create_topic

FAST = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "leader.imbalance.check.interval.seconds": 2,
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
}
MIN_ISR = {"min.insync.replicas": "2"}


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, FAST)
    c.start()
    yield c
    c.stop()


def wait_for(what: str, pred, timeout: float = 30.0, step: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except Exception as e:  # noqa: BLE001 - brokers come and go; poll until the deadline
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(step)
    raise TimeoutError(f"{what}: last {last!r}")


def partitions_of(cluster: Cluster, topic: str) -> dict:
    """{partition: (leader, replicas, isr)} as a live broker reports it."""
    admins = cluster.__dict__.setdefault("admins", {})
    for b in cluster.brokers:
        if not b.alive():
            continue
        admin = admins.setdefault(b.bootstrap, AdminClient({"bootstrap.servers": b.bootstrap}))
        try:
            t = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
        except KafkaException:
            continue
        if t is not None and t.error is None and t.partitions:
            return {pid: (p.leader, list(p.replicas), sorted(p.isrs))
                    for pid, p in t.partitions.items()}
    raise RuntimeError(f"no live broker knows {topic}")


def metric(broker, name: str) -> float:
    text = urllib.request.urlopen(broker.metrics_url, timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def active_controller(cluster: Cluster):
    live = [b for b in cluster.brokers if b.alive()]
    return wait_for("an active controller", lambda: next(
        (b for b in live if metric(b, "ferry_controller_active") == 1), None))


class NumberedProducer(threading.Thread):
    """An idempotent acks=all producer writing `partition:seq` to every partition until
    stopped; keeps what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        super().__init__(daemon=True)
        self.topic, self.partitions = topic, partitions
        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120000,
            "topic.metadata.refresh.interval.ms": 1000,
        })
        self.acked = {p: [] for p in range(partitions)}  # (offset, seq)
        self.errors: list = []
        self.stop_event = threading.Event()
        self.unflushed = None

    def _on_delivery(self, err, msg):
        if err is not None:
            self.errors.append(err)
        else:
            seq = int(msg.value().split(b":")[1])
            self.acked[msg.partition()].append((msg.offset(), seq))

    def acked_count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def run(self):
        seq = 0
        while not self.stop_event.is_set():
            for p in range(self.partitions):
                while True:
                    try:
                        self.producer.produce(self.topic, value=f"{p}:{seq}".encode(),
                                              partition=p, on_delivery=self._on_delivery)
                        break
                    except BufferError:
                        self.producer.poll(0.05)
            seq += 1
            self.producer.poll(0)
            time.sleep(0.01)
        self.unflushed = self.producer.flush(120)

    def wait_progress(self, n: int = 200, timeout: float = 40):
        start = self.acked_count()
        wait_for(f"{n} more acknowledged messages (errors {self.errors[:3]})",
                 lambda: self.acked_count() >= start + n, timeout)

    def finish(self):
        self.stop_event.set()
        self.join(180)
        assert self.unflushed == 0, f"{self.unflushed} messages never acknowledged"
        assert self.errors == [], self.errors[:5]


class GroupReader(threading.Thread):
    """A consumer-group member reading the topic and committing every half second."""

    def __init__(self, bootstrap: str, topic: str, group: str):
        super().__init__(daemon=True)
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "topic.metadata.refresh.interval.ms": 1000,
        })
        self.consumer.subscribe([topic])
        self.seen: dict[int, set] = {}
        self.commits: list[dict] = []  # committed offsets, in order
        self.stop_event = threading.Event()

    def run(self):
        last_commit = time.monotonic()
        while not self.stop_event.is_set():
            for m in self.consumer.consume(500, timeout=0.2):
                if m.error() is None:
                    self.seen.setdefault(m.partition(), set()).add(int(m.value().split(b":")[1]))
            if time.monotonic() - last_commit > 0.5:
                last_commit = time.monotonic()
                try:
                    done = self.consumer.commit(asynchronous=False)
                    self.commits.append({tp.partition: tp.offset for tp in done or []})
                except KafkaException:
                    pass  # nothing to commit yet, or the coordinator is moving: try again
        self.consumer.close()

    def committed_total(self) -> int:
        merged: dict[int, int] = {}
        for c in self.commits:
            merged.update(c)
        return sum(merged.values())


def read_partition(cluster: Cluster, topic: str, partition: int) -> list[tuple[int, int]]:
    """(offset, seq) of every record from offset 0 to the high watermark."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique_topic("verify"),
                  "enable.auto.commit": False})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        c.assign([TopicPartition(topic, partition, 0)])
        out = []
        deadline = time.monotonic() + 60
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=1):
                if m.error() is None:
                    out.append((m.offset(), int(m.value().split(b":")[1])))
        return out
    finally:
        c.close()


def check_acknowledged_exactly_once(cluster: Cluster, topic: str, producer: NumberedProducer):
    for p, acked in producer.acked.items():
        records = read_partition(cluster, topic, p)
        seqs = [s for _, s in records]
        assert seqs == sorted(set(seqs)), f"partition {p}: duplicates or disorder"
        by_offset = dict(records)
        present = set(seqs)
        # librdkafka acknowledges a batch whose request failed in a way that may have
        # persisted it (a timeout, a closed connection) once a later batch of the partition
        # is acknowledged, without an offset (its "implicit ack"): such a record must be in
        # the log, at whatever offset.
        missing = [(o, s) for o, s in acked
                   if (by_offset.get(o) != s if o is not None else s not in present)]
        assert not missing, f"partition {p}: {len(missing)} acknowledged records lost: {missing[:5]}"


def batches(broker, topic: str, partition: int) -> list[tuple]:
    """(base offset, leader epoch, length, crc) of every complete record batch on disk."""
    data = b"".join(p.read_bytes()
                    for p in sorted((broker.data_dir / f"{topic}-{partition}").glob("*.log")))
    out, i = [], 0
    while i + 21 <= len(data):
        length = int.from_bytes(data[i + 8:i + 12], "big", signed=True)
        if length <= 0 or i + 12 + length > len(data):
            break
        out.append((int.from_bytes(data[i:i + 8], "big"), data[i + 12:i + 16], length,
                    data[i + 17:i + 21]))
        i += 12 + length
    return out


def check_replicas_identical(cluster: Cluster, topic: str, partitions: int):
    def same():
        return all(len({tuple(batches(b, topic, p)) for b in cluster.brokers}) == 1
                   for p in range(partitions))

    wait_for("identical replicas", same, timeout=30, step=0.5)
    for p in range(partitions):
        assert batches(cluster.brokers[0], topic, p), f"partition {p} is empty"


def wait_isr_full(cluster: Cluster, topic: str, timeout: float = 40):
    wait_for(f"{topic}: every ISR back to 3", lambda: all(
        len(isr) == 3 for _, _, isr in partitions_of(cluster, topic).values()), timeout)


def wait_preferred_leaders(cluster: Cluster, topic: str, timeout: float = 30):
    wait_for(f"{topic}: preferred leaders back", lambda: all(
        leader == replicas[0]
        for leader, replicas, _ in partitions_of(cluster, topic).values()), timeout)


def test_kill9_of_each_leader_loses_no_acknowledged_message(cluster):
    topic = unique_topic("failover")
    create_topic(cluster, topic, 3, MIN_ISR)
    producer = NumberedProducer(cluster.bootstrap, topic, 3)
    reader = GroupReader(cluster.bootstrap, topic, unique_topic("g"))
    producer.start()
    reader.start()
    producer.wait_progress()
    wait_for("the group commits", lambda: reader.committed_total() > 0, 40)

    victims = []
    for p in range(3):
        victim = cluster.by_id(partitions_of(cluster, topic)[p][0])
        victims.append(victim)
        committed = reader.committed_total()
        victim.kill9()
        # Its session expires; every partition it led gets a leader from the ISR.
        wait_for(f"partition {p} fails over from broker {victim}", lambda: all(
            leader not in (-1, cluster.brokers.index(victim) + 1)
            for leader, _, _ in partitions_of(cluster, topic).values()), 30)
        producer.wait_progress()
        wait_for("the group keeps committing", lambda: reader.committed_total() > committed, 40)
        victim.start(wait=False)
        wait_isr_full(cluster, topic)
        producer.wait_progress()

    assert len(set(map(id, victims))) >= 2, "the kills should hit more than one broker"
    wait_preferred_leaders(cluster, topic)
    producer.finish()
    check_acknowledged_exactly_once(cluster, topic, producer)
    check_replicas_identical(cluster, topic, 3)
    elections = sum(metric(b, 'ferry_controller_leader_elections_total{kind="clean"}')
                    for b in cluster.brokers)
    assert elections >= 3
    assert sum(metric(b, 'ferry_controller_leader_elections_total{kind="unclean"}')
               for b in cluster.brokers) == 0

    # The group saw every acknowledged message (at least once), and its offsets moved on.
    wait_for("the group reads everything", lambda: all(
        {s for _, s in producer.acked[p]} <= reader.seen.get(p, set()) for p in range(3)), 60)
    reader.stop_event.set()
    reader.join(30)


def test_one_controller_voter_down_does_not_stop_the_cluster(cluster):
    victim = active_controller(cluster)
    victim.kill9()
    survivors = [b for b in cluster.brokers if b is not victim]
    # A new leader of the quorum, which fences the dead broker after a full session.
    active_controller(cluster)
    wait_for("the dead voter is fenced", lambda: all(
        metric(b, "ferry_controller_fenced_brokers") == 1 for b in survivors), 20)

    topic = unique_topic("voterdown")
    bootstrap = ",".join(b.bootstrap for b in survivors)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=2,
                                  config=MIN_ISR)])[topic].result(timeout=30)
    producer = NumberedProducer(bootstrap, topic, 2)
    producer.start()
    producer.wait_progress()
    producer.finish()
    check_acknowledged_exactly_once(cluster, topic, producer)

    victim.start(wait=False)
    wait_for("the voter is back and unfenced", lambda: all(
        metric(b, "ferry_controller_fenced_brokers") == 0 for b in cluster.brokers), 40)


def test_sigterm_moves_leaderships_first_and_preferred_leaders_return(cluster):
    topic = unique_topic("ctrlshut")
    create_topic(cluster, topic, 6, MIN_ISR)
    wait_preferred_leaders(cluster, topic)
    producer = NumberedProducer(cluster.bootstrap, topic, 6)
    producer.start()
    producer.wait_progress()

    # Not the active controller: its count of controlled shutdowns must outlive the victim.
    controller = active_controller(cluster)
    victim = next(b for b in cluster.brokers if b is not controller)
    vid = cluster.brokers.index(victim) + 1
    assert any(leader == vid for leader, _, _ in partitions_of(cluster, topic).values())
    started = time.monotonic()
    assert victim.stop() == 0
    assert time.monotonic() - started < 12
    log = victim.log_path.read_text(errors="replace")
    assert "controlled shutdown complete" in log, victim.log_tail(40)
    done = next(line for line in log.splitlines() if "controlled shutdown complete" in line)
    assert "leaderships=0" in done, done
    # Leaderships moved while the broker was still up: no partition is left without a leader.
    assert all(leader not in (-1, vid) for leader, _, _ in partitions_of(cluster, topic).values())
    assert metric(controller, "ferry_controller_controlled_shutdowns_total") >= 1
    producer.wait_progress()

    victim.start(wait=False)
    wait_isr_full(cluster, topic)
    wait_preferred_leaders(cluster, topic)
    producer.wait_progress()
    producer.finish()
    check_acknowledged_exactly_once(cluster, topic, producer)


def test_a_paused_broker_is_fenced_then_unfenced_when_its_heartbeats_resume(cluster):
    topic = unique_topic("pause")
    create_topic(cluster, topic, 3, MIN_ISR)
    wait_preferred_leaders(cluster, topic)
    controller = active_controller(cluster)
    victim = next(b for b in cluster.brokers if b is not controller)
    vid = cluster.brokers.index(victim) + 1
    producer = NumberedProducer(cluster.bootstrap, topic, 3)
    producer.start()
    producer.wait_progress()

    victim.pause()
    try:
        wait_for("the paused broker is fenced",
                 lambda: metric(controller, "ferry_controller_fenced_brokers") == 1, 20)
        wait_for("its leaderships moved", lambda: all(
            leader not in (-1, vid) and vid not in isr
            for leader, _, isr in partitions_of(cluster, topic).values()), 20)
        producer.wait_progress()
    finally:
        victim.resume()
    # Same incarnation, heartbeating again: unfenced, back in every ISR, leading again.
    wait_for("unfenced", lambda: metric(controller, "ferry_controller_fenced_brokers") == 0, 20)
    wait_isr_full(cluster, topic)
    wait_preferred_leaders(cluster, topic)
    assert victim.starts == 1
    producer.wait_progress()
    producer.finish()
    check_acknowledged_exactly_once(cluster, topic, producer)
    check_replicas_identical(cluster, topic, 3)
