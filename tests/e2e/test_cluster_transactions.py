"""Transactions on a three-broker cluster under kill -9: of the transaction coordinator (the
leader of the transactional id's `__transaction_state` partition) and of a data partition's
leader, in the middle of transactions, on a classic and on a remote-WAL topic.

A transactional producer loops: begin, produce records with unique ids to every partition,
flush, then commit (or abort every few transactions on purpose). It records the outcome as the
client saw it:

- committed: commit_transaction() returned;
- aborted: the transaction ended (abort, a fatal error, a new producer instance) without
  commit_transaction() ever being called for it;
- unknown: commit_transaction() was called but did not return success (a timeout, an abortable
  or fatal error after EndTxn may have reached the coordinator): either outcome is allowed.

An abortable error is answered with abort_transaction(); a fatal one with a new producer under
the same transactional.id (its InitProducerId fences the old one and ends its transaction).

At the end, once every partition's last stable offset is its high watermark (no transaction
left open), a read_committed consumer must see every committed id exactly once, no aborted id,
each unknown transaction all or nothing, and per partition the transactions in order; a
read_uncommitted consumer must see every committed id too. A read_committed consumer reading
through the kills must never have read an aborted id or an id twice.

The kills land a random few milliseconds into the producer's commit or produce phase; the
broker logs show new coordinators resuming transactions they found prepared. librdkafka retries
coordinator and leader changes itself, so the client usually reports no error at all and the
abort/re-create branches are the fallback, not the common path.
"""

from __future__ import annotations

import random
import struct
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

import kwire
from conftest import unique_topic
from test_cluster import Cluster, create_topic
from test_cluster_failover import FAST, partitions_of, wait_for

PARTITIONS = 3
TXN_STATE_PARTITIONS = 3
TXN_STATE_TOPIC = "__transaction_state"
RECORDS_PER_TXN = 9
ABORT_EVERY = 4
T = 30  # seconds for a transactional call

CONFIG = {
    **FAST,
    "transaction.state.log.num.partitions": TXN_STATE_PARTITIONS,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
}

API_FIND_COORDINATOR = 10
COORDINATOR_TYPE_TRANSACTION = 1


@pytest.fixture(params=["classic", "remote-wal"])
def txn_cluster(request, tmp_path):
    config = dict(CONFIG)
    wal = request.param == "remote-wal"
    if wal:
        buckets = {rack: tmp_path / f"bucket-{rack}" for rack in ("az1", "az2", "az3")}
        config.update({
            "remote.wal.store": "local",
            "remote.wal.buckets": ",".join(f"{r}={d}" for r, d in buckets.items()),
            "remote.wal.upload.interval.ms": 20,
            "remote.wal.fallback.ms": 3000,
        })
    c = Cluster(tmp_path / "cluster", config)
    c.start()
    c.topic_config = {"min.insync.replicas": "2"}
    if wal:
        c.topic_config["remote.wal.enable"] = "true"
    yield c
    c.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"\n===== ferry log tails =====\n{c.log_tail(60)}")


# --- the transaction coordinator ----------------------------------------------------------------


def java_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units)."""
    data = s.encode("utf-16-be")
    h = 0
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def txn_state_partition(txn_id: str) -> int:
    h = java_hash(txn_id)
    return (0 if h == -(1 << 31) else abs(h)) % TXN_STATE_PARTITIONS


def find_coordinator(cluster: Cluster, txn_id: str) -> int | None:
    """FindCoordinator (v1, key type TRANSACTION) asked of the live brokers: the coordinator's
    node id, or None while none answers without error."""
    for b in cluster.brokers:
        if not b.alive():
            continue
        try:
            with kwire.Conn.to(b, timeout=5) as conn:
                r = conn.request(API_FIND_COORDINATOR, 1,
                                 kwire.string(txn_id) + kwire.i8(COORDINATOR_TYPE_TRANSACTION))
                r.i32()  # throttle
                err = r.i16()
                r.string()  # error message
                node = r.i32()
        except (OSError, ValueError, ConnectionError):
            continue
        if err == 0:
            return node
    return None


def coordinator(cluster: Cluster, txn_id: str, exclude: int | None = None) -> int:
    """The coordinator's node id once FindCoordinator and the metadata of `__transaction_state`
    agree on a live broker (other than `exclude`)."""

    def agreed():
        node = find_coordinator(cluster, txn_id)
        if node is None or node == exclude or not cluster.by_id(node).alive():
            return None
        leader = partitions_of(cluster, TXN_STATE_TOPIC)[txn_state_partition(txn_id)][0]
        return node if leader == node else None

    return wait_for(f"the coordinator of {txn_id} (not {exclude})", agreed, timeout=60)


# --- the transactional producer -----------------------------------------------------------------


class TxnWorker(threading.Thread):
    """Runs transactions until stopped and records each one's outcome as the client saw it."""

    def __init__(self, bootstrap: str, topic: str, txn_id: str):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.txn_id = bootstrap, topic, txn_id
        self.committed: dict[int, list[str]] = {}
        self.aborted: dict[int, list[str]] = {}
        self.unknown: dict[int, list[str]] = {}
        self.errors: list[str] = []  # what the client reported, for the failure message
        self.producers = 0
        self.phase = "init"
        self.stopping = threading.Event()
        self.crashed: BaseException | None = None
        self.lock = threading.Lock()

    # -- what the test watches --
    def committed_count(self) -> int:
        with self.lock:
            return len(self.committed)

    def wait_committed(self, n: int, timeout: float = 60):
        wait_for(f"{n} committed transactions (errors {self.errors[-5:]})",
                 lambda: self._check_alive() and self.committed_count() >= n, timeout)

    def wait_phase(self, phase: str, timeout: float = 30):
        wait_for(f"the producer in phase {phase}",
                 lambda: self._check_alive() and self.phase == phase, timeout, step=0.005)

    def _check_alive(self) -> bool:
        if self.crashed is not None:
            raise AssertionError(f"producer thread crashed: {self.crashed!r}")
        return True

    def finish(self):
        self.stopping.set()
        self.join(180)
        assert not self.is_alive(), f"the producer did not stop; phase {self.phase}"
        self._check_alive()

    # -- the loop --
    def _note(self, where: str, e) -> KafkaError | None:
        err = e.args[0] if isinstance(e, KafkaException) and e.args else None
        self.errors.append(f"{where}: {e!r}")
        return err if isinstance(err, KafkaError) else None

    def _new_producer(self) -> Producer:
        while True:
            p = Producer({
                "bootstrap.servers": self.bootstrap,
                "transactional.id": self.txn_id,
                "transaction.timeout.ms": 30000,
                "linger.ms": 5,
                "topic.metadata.refresh.interval.ms": 1000,
            })
            self.producers += 1
            for _ in range(5):
                try:
                    p.init_transactions(T)
                    return p
                except KafkaException as e:
                    err = self._note("init_transactions", e)
                    if err is None or not err.retriable():
                        break
            time.sleep(0.5)

    def run(self):
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported through finish()/wait_*
            self.crashed = e

    def _run(self):
        p = self._new_producer()
        n = 0
        while not self.stopping.is_set():
            n += 1
            ids = [f"{n}:{i}" for i in range(RECORDS_PER_TXN)]
            on_purpose = n % ABORT_EVERY == 0
            commit_called = False
            failed: list = []

            def on_delivery(err, _msg):
                if err is not None:
                    failed.append(err)

            try:
                self.phase = "begin"
                p.begin_transaction()
                self.phase = "produce"
                for i, v in enumerate(ids):
                    while True:
                        try:
                            p.produce(self.topic, value=v.encode(), partition=i % PARTITIONS,
                                      on_delivery=on_delivery)
                            break
                        except BufferError:
                            p.poll(0.05)
                left = p.flush(T)
                if left or failed:
                    raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                                    f"{left} undelivered, failures {failed[:3]}"))
                if on_purpose:
                    self.phase = "abort"
                    p.abort_transaction(T)
                    self._record(self.aborted, n, ids)
                    continue
                self.phase = "commit"
                commit_called = True
                self._commit(p)
                self._record(self.committed, n, ids)
            except KafkaException as e:
                err = self._note(f"txn {n} in {self.phase}", e)
                self._record(self.unknown if commit_called else self.aborted, n, ids)
                if err is not None and err.fatal() or not self._abort(p):
                    p = self._new_producer()
        self.phase = "stopped"

    def _record(self, outcomes: dict, n: int, ids: list[str]):
        with self.lock:
            outcomes[n] = ids

    def _commit(self, p: Producer):
        """commit_transaction(), called again on a retriable error (the outcome is only known
        once a call returns)."""
        for attempt in range(3):
            try:
                p.commit_transaction(T)
                return
            except KafkaException as e:
                err = e.args[0]
                if attempt == 2 or not err.retriable() or err.fatal() or err.txn_requires_abort():
                    raise
                self._note("commit_transaction (retried)", e)

    def _abort(self, p: Producer) -> bool:
        """Ends the failed transaction; False if the producer must be replaced."""
        self.phase = "abort after error"
        for _ in range(3):
            try:
                p.abort_transaction(T)
                return True
            except KafkaException as e:
                err = self._note("abort_transaction", e)
                if err is None or err.fatal() or not err.retriable():
                    return False
        return False


class LiveReader(threading.Thread):
    """A read_committed consumer reading every partition while the brokers die and come back:
    what it reads must never include an aborted record or a record twice."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("live"),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            # An out-of-range position is an error here, not a silent re-read.
            "auto.offset.reset": "error",
            "topic.metadata.refresh.interval.ms": 1000,
        })
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                              for p in range(PARTITIONS)])
        self.seen: Counter = Counter()
        self.errors: list = []
        self.stopping = threading.Event()

    def run(self):
        while not self.stopping.is_set():
            for m in self.consumer.consume(500, timeout=0.2):
                if m.error() is not None:
                    self.errors.append(m.error())
                else:
                    self.seen[m.value().decode()] += 1
        self.consumer.close()

    def finish(self, w: "TxnWorker"):
        wanted = [v for ids in w.committed.values() for v in ids]
        try:
            wait_for("the live reader reads every committed id",
                     lambda: all(self.seen[v] for v in wanted), timeout=60, step=0.5)
        finally:
            self.stopping.set()
            self.join(30)
        duplicates = sorted(v for v, k in self.seen.items() if k > 1)
        assert not duplicates, f"live reader: {len(duplicates)} read twice: {duplicates[:10]}"
        visible = sorted(v for ids in w.aborted.values() for v in ids if self.seen[v])
        assert not visible, f"live reader: {len(visible)} aborted ids read: {visible[:10]}"
        # Transport errors while a broker is down are the client's business; a position out of
        # range (a new leader without what the old one served) is not.
        lost = [e for e in self.errors if e.fatal() or e.code() in (
            KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET)]
        assert not lost, f"live reader errors: {lost[:5]}"


# --- the checker --------------------------------------------------------------------------------


def watermarks(bootstrap: str, topic: str, isolation: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("wm"),
                  "isolation.level": isolation})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)]
    finally:
        c.close()


def read_all(bootstrap: str, topic: str, isolation: str) -> dict[int, list[str]]:
    """Every record value of every partition, from the beginning to where the consumer reports
    the end of the partition (the last stable offset under read_committed)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("check"),
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": isolation})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        out: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"{isolation}: no end of {set(out) - at_end}"
            for m in c.consume(500, timeout=0.5):
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    at_end.add(m.partition())
                    continue
                at_end.discard(m.partition())
                out[m.partition()].append(m.value().decode())
        return out
    finally:
        c.close()


def check_exactly_once(cluster: Cluster, topic: str, w: TxnWorker):
    # No transaction is left open: the last stable offset reaches the high watermark.
    def settled():
        hw = watermarks(cluster.bootstrap, topic, "read_uncommitted")
        lso = watermarks(cluster.bootstrap, topic, "read_committed")
        return (hw, lso) if hw == lso else None

    wait_for("every transaction decided (LSO == HW)", settled, timeout=60, step=0.5)

    committed = read_all(cluster.bootstrap, topic, "read_committed")
    seen = Counter(v for vs in committed.values() for v in vs)
    known = {**w.committed, **w.aborted, **w.unknown}
    summary = (f"{len(w.committed)} committed, {len(w.aborted)} aborted, {len(w.unknown)} "
               f"unknown transactions; {w.producers} producers; client errors {w.errors[-8:]}")
    print(summary)

    duplicates = sorted(v for v, k in seen.items() if k > 1)
    assert not duplicates, f"{len(duplicates)} ids read twice: {duplicates[:10]}; {summary}"
    strangers = sorted(v for v in seen if int(v.split(":")[0]) not in known)
    assert not strangers, f"ids of no transaction: {strangers[:10]}; {summary}"
    lost = sorted(v for ids in w.committed.values() for v in ids if v not in seen)
    assert not lost, f"{len(lost)} committed ids lost: {lost[:10]}; {summary}"
    visible = sorted(v for ids in w.aborted.values() for v in ids if v in seen)
    assert not visible, f"{len(visible)} aborted ids visible: {visible[:10]}; {summary}"
    partial = {n: sum(v in seen for v in ids) for n, ids in w.unknown.items()}
    partial = {n: k for n, k in partial.items() if k not in (0, RECORDS_PER_TXN)}
    assert not partial, f"unknown transactions partly visible: {partial}; {summary}"
    for p, vs in committed.items():
        order = [int(v.split(":")[0]) for v in vs]
        assert order == sorted(order), f"partition {p}: transactions out of order; {summary}"

    everything = read_all(cluster.bootstrap, topic, "read_uncommitted")
    raw = {v for vs in everything.values() for v in vs}
    lost = sorted(v for ids in w.committed.values() for v in ids if v not in raw)
    assert not lost, f"read_uncommitted misses {len(lost)} committed ids: {lost[:10]}"
    return summary


def wait_isr_full(cluster: Cluster, topics: list[str], timeout: float = 60):
    wait_for(f"{topics}: every ISR back to 3", lambda: all(
        len(isr) == 3 for t in topics for _, _, isr in partitions_of(cluster, t).values()),
        timeout)


# --- the tests ----------------------------------------------------------------------------------


def start_worker(cluster: Cluster, prefix: str) -> tuple[str, TxnWorker, LiveReader]:
    topic = unique_topic(prefix)
    create_topic(cluster, topic, PARTITIONS, cluster.topic_config)
    w = TxnWorker(cluster.bootstrap, topic, unique_topic("tid"))
    reader = LiveReader(cluster.bootstrap, topic)
    w.start()
    reader.start()
    w.wait_committed(3)
    return topic, w, reader


def kill_in_phase(w: TxnWorker, victim, phase: str):
    """SIGKILL `victim` once the producer is in `phase`, a random few milliseconds in (a
    commit's EndTxn, its markers and its Complete record take about that long)."""
    w.wait_phase(phase)
    time.sleep(random.uniform(0, 0.03))
    victim.kill9()


def test_kill9_of_the_transaction_coordinator(txn_cluster):
    c = txn_cluster
    topic, w, reader = start_worker(c, "txn-coord")
    try:
        # In the middle of a commit (EndTxn, markers, the Complete record), while records are
        # produced (AddPartitionsToTxn), and in a commit again (the restarted broker may be
        # the coordinator again once it leads its preferred partitions).
        for phase in ("commit", "produce", "commit"):
            node = coordinator(c, w.txn_id)
            victim = c.by_id(node)
            before = w.committed_count()
            kill_in_phase(w, victim, phase)
            coordinator(c, w.txn_id, exclude=node)
            w.wait_committed(before + 3, timeout=90)
            victim.start(wait=False)
            wait_isr_full(c, [topic, TXN_STATE_TOPIC])
            w.wait_committed(w.committed_count() + 2, timeout=90)
    finally:
        w.finish()
    check_exactly_once(c, topic, w)
    reader.finish(w)


def test_kill9_of_a_partition_leader(txn_cluster):
    c = txn_cluster
    topic, w, reader = start_worker(c, "txn-leader")
    try:
        for phase in ("commit", "produce"):
            # A leader of the data that is not the coordinator: markers and produce requests
            # must find the partition's new leader.
            coord = coordinator(c, w.txn_id)
            leaders = {leader for leader, _, _ in partitions_of(c, topic).values()}
            node = min(leaders - {coord}) if leaders - {coord} else min(leaders)
            victim = c.by_id(node)
            before = w.committed_count()
            kill_in_phase(w, victim, phase)
            wait_for(f"broker {node} leads no partition of {topic}", lambda: all(
                leader not in (-1, node) for leader, _, _ in partitions_of(c, topic).values()))
            w.wait_committed(before + 3, timeout=90)
            victim.start(wait=False)
            wait_isr_full(c, [topic, TXN_STATE_TOPIC])
            w.wait_committed(w.committed_count() + 2, timeout=90)
    finally:
        w.finish()
    check_exactly_once(c, topic, w)
    reader.finish(w)
