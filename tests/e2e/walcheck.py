"""Workloads and the end-of-test checker for remote-WAL fault tests (test_wal_faults.py).

`Workload` runs real producers (confluent-kafka) in threads and records every acknowledged
message with the offset the broker gave it. `check_cluster` then proves, on a healed cluster:

1. every acknowledged message is readable exactly once, at its acknowledged offset, and each
   producer's messages appear in send order per partition;
2. all replicas of every partition hold identical log bytes;
3. no object is left in any bucket without live metadata in `__remote_wal_log_metadata` (after
   the GC and its orphan sweep had their time).
"""

from __future__ import annotations

import os
import re
import struct
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

METADATA_TOPIC = "__remote_wal_log_metadata"
WAL_KEY = re.compile(rb"wal/\d+/\d{13}-\d{10}\.wal")


class ProducerThread:
    """One producer writing `tag:partition:seq|padding` round-robin over the partitions."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, acks: str, tag: str,
                 rate: float, value_size: int = 1000):
        self.topic, self.partitions, self.tag = topic, partitions, tag
        self.acks = acks
        self.rate = rate
        self.value_size = value_size
        conf = {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "message.timeout.ms": 120000,
            "queue.buffering.max.messages": 20000,
        }
        if os.environ.get("FERRY_RDKAFKA_DEBUG"):
            # e.g. "eos,msg": librdkafka's own account of retries and epoch bumps, on stderr.
            conf["debug"] = os.environ["FERRY_RDKAFKA_DEBUG"]
        if acks == "all":
            conf["enable.idempotence"] = True
        else:
            # Without idempotence, one request in flight keeps retries in order.
            conf["max.in.flight.requests.per.connection"] = 1
        self.producer = Producer(conf)
        self.acked: dict[int, dict[bytes, int]] = defaultdict(dict)
        self.failed = 0
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err, msg):
        if err is None:
            self.acked[msg.partition()][msg.value().split(b"|")[0]] = msg.offset()
        else:
            self.failed += 1

    def _run(self):
        seq = 0
        start = time.monotonic()
        while not self.stop.is_set():
            due = start + seq / self.rate
            now = time.monotonic()
            if due > now:
                self.producer.poll(min(due - now, 0.05))
                continue
            p = seq % self.partitions
            head = f"{self.tag}:{p}:{seq:09d}".encode()
            value = head + b"|" + b"x" * max(0, self.value_size - len(head) - 1)
            try:
                self.producer.produce(self.topic, value=value, partition=p,
                                      on_delivery=self._on_delivery)
                seq += 1
                self.sent = seq
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0)
        self.producer.flush(150)

    def acked_count(self) -> int:
        return sum(len(v) for v in self.acked.values())


class Workload:
    """acks=1 and acks=all producers running until `stop()`."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float = 150.0):
        self.topic, self.partitions = topic, partitions
        # Duplicates the client made by resending after a producer epoch bump (see
        # check_messages), filled by the check.
        self.resent_after_epoch_bump: list[str] = []
        self.producers = [
            ProducerThread(bootstrap, topic, partitions, "1", "a1", rate),
            ProducerThread(bootstrap, topic, partitions, "all", "aall", rate),
        ]

    def start(self):
        for p in self.producers:
            p.thread.start()
        return self

    def stop(self):
        for p in self.producers:
            p.stop.set()
        for p in self.producers:
            p.thread.join(180)
            assert not p.thread.is_alive(), f"producer {p.tag} did not finish flushing"

    def acked_count(self) -> int:
        return sum(p.acked_count() for p in self.producers)

    def by_acks(self, acks: str) -> ProducerThread:
        return next(p for p in self.producers if p.acks == acks)


def read_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 90) -> dict:
    """partition -> [(offset, head)] from the start up to the high watermark."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"walcheck-{topic}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    })
    try:
        ends = {}
        for p in range(partitions):
            _lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = hi
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: dict[int, list] = {p: [] for p in range(partitions)}
        done = {p for p in range(partitions) if ends[p] == 0}
        deadline = time.monotonic() + timeout
        while len(done) < partitions and time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= ends[m.partition()]:
                            done.add(m.partition())
                        continue
                    raise AssertionError(f"consume error: {m.error()}")
                out[m.partition()].append((m.offset(), m.value().split(b"|")[0]))
                if m.offset() + 1 >= ends[m.partition()]:
                    done.add(m.partition())
        assert len(done) == partitions, f"read did not reach the end of {set(range(partitions)) - done}"
        return out
    finally:
        c.close()


def producer_epochs(log_dir: Path, topic: str, partition: int) -> dict[int, int]:
    """offset -> producer epoch of every record in one replica's log of `topic`-`partition`
    (uncompressed v2 batches, as the workload writes them), read from its segment files."""
    data = b"".join(p.read_bytes() for p in sorted((log_dir / f"{topic}-{partition}").glob("*.log")))
    out: dict[int, int] = {}
    pos = 0
    while pos + 61 <= len(data):
        base, length = struct.unpack(">qi", data[pos:pos + 12])
        if length < 49 or pos + 12 + length > len(data):
            break
        last_delta = struct.unpack(">i", data[pos + 23:pos + 27])[0]
        epoch = struct.unpack(">h", data[pos + 51:pos + 53])[0]
        for o in range(base, base + last_delta + 1):
            out[o] = epoch
        pos += 12 + length
    return out


def check_messages(bootstrap: str, workload: Workload, strict_acks=("1", "all"),
                   log_dir: Path | None = None) -> dict:
    """Rule 1. Producers in `strict_acks` must have lost and duplicated nothing; the others
    (acks=1 across a leader kill -9 may lose what only the dead leader held, as in Kafka) are
    counted. Returns the figures {acks: (acknowledged, lost, duplicated, misplaced)}.

    With `log_dir` (one replica's data directory), a duplicate whose later copy carries a
    higher producer epoch than the first is reported but allowed: librdkafka bumps the epoch
    of an idempotent producer (KIP-360) when a request is refused for a sequence gap, and then
    resends, under the new epoch, messages whose earlier send may have been written (for
    example NOT_ENOUGH_REPLICAS_AFTER_APPEND). No broker can recognise those, Kafka included
    (librdkafka's INTRODUCTION.md, "Idempotent Producer"). A duplicate within one epoch is a
    failure of the broker's idempotence and still fails the check."""
    read = retrying(read_topic, bootstrap, workload.topic, workload.partitions)
    figures = {}
    problems = []
    examples = []
    for prod in workload.producers:
        acked_total = lost = dup = misplaced = 0
        for p in range(workload.partitions):
            mine = [(o, h) for o, h in read[p] if h.startswith(prod.tag.encode() + b":")]
            counts = Counter(h for _o, h in mine)
            epochs = (producer_epochs(log_dir, workload.topic, p)
                      if log_dir is not None and any(n > 1 for n in counts.values()) else {})
            first_at: dict[bytes, int] = {}
            for o, h in mine:
                if h not in first_at:
                    first_at[h] = o
                elif epochs and epochs.get(o, -1) > epochs.get(first_at[h], -1):
                    bumped = f"{prod.tag}[{p}]: {h.decode()} at {first_at[h]} and again at {o}"
                    workload.resent_after_epoch_bump.append(bumped)
                else:
                    dup += 1
            offsets_of: dict[bytes, set[int]] = defaultdict(set)
            for o, h in mine:
                offsets_of[h].add(o)
            # Send order: sequence numbers increase with offsets (first copies).
            firsts = sorted((o, h) for h, o in first_at.items())
            seqs = [int(h.rsplit(b":", 1)[1]) for _o, h in firsts]
            if seqs != sorted(seqs) and prod.acks in strict_acks:
                problems.append(f"{prod.tag}[{p}] out of order")
            for head, off in prod.acked[p].items():
                acked_total += 1
                if head not in offsets_of:
                    lost += 1
                    if prod.acks in strict_acks and len(examples) < 10:
                        now = next((h for o, h in read[p] if o == off), None)
                        examples.append(f"{head.decode()} acked at {p}@{off}, now {now!r}")
                elif off is not None and off >= 0 and off not in offsets_of[head]:
                    # (-1 or None: the client did not learn the offset, e.g. a retry the broker
                    # recognised as a duplicate; existence and uniqueness still count.)
                    misplaced += 1
                    if prod.acks in strict_acks and len(examples) < 10:
                        examples.append(f"{head.decode()} acked at {p}@{off}, "
                                        f"read at {sorted(offsets_of[head])}")
        figures[prod.acks] = (acked_total, lost, dup, misplaced)
        if prod.acks in strict_acks and (lost or dup or misplaced):
            problems.append(f"acks={prod.acks}: {acked_total} acknowledged, {lost} lost, "
                            f"{dup} duplicated, {misplaced} at another offset")
    print(f"messages per acks (acknowledged, lost, duplicated, misplaced): {figures}")
    if workload.resent_after_epoch_bump:
        print(f"{len(workload.resent_after_epoch_bump)} messages resent by the client after a "
              f"producer epoch bump, e.g. {workload.resent_after_epoch_bump[:3]}")
    assert not problems, (problems, examples)
    return figures


def log_bytes(broker, topic: str, partition: int) -> bytes:
    d = broker.data_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


def wait_identical(cluster, topic: str, partitions: int, timeout: float = 90):
    """Rule 2."""
    deadline = time.monotonic() + timeout
    while True:
        diffs = [p for p in range(partitions)
                 if len({log_bytes(b, topic, p) for b in cluster.brokers}) != 1]
        if not diffs:
            return
        if time.monotonic() > deadline:
            sizes = {p: [len(log_bytes(b, topic, p)) for b in cluster.brokers] for p in diffs}
            raise AssertionError(f"replicas differ: {sizes}")
        time.sleep(0.5)


def retrying(f, *args, timeout: float = 60):
    """Calls `f` until it does not raise a client error (leaders may still be moving)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            return f(*args)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def live_metadata(bootstrap: str) -> list[bytes]:
    return retrying(_live_metadata, bootstrap)


def _live_metadata(bootstrap: str) -> list[bytes]:
    """Values of the live (latest, non-tombstone) records of the metadata topic."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "walcheck-metadata",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    try:
        md = c.list_topics(METADATA_TOPIC, timeout=10).topics.get(METADATA_TOPIC)
        if md is None or md.error is not None:
            return []
        parts = list(md.partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(METADATA_TOPIC, p), timeout=10)[1]
                for p in parts}
        c.assign([TopicPartition(METADATA_TOPIC, p, 0) for p in parts])
        latest: dict[bytes, bytes | None] = {}
        done = {p for p in parts if ends[p] == 0}
        deadline = time.monotonic() + 60
        while len(done) < len(parts) and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        done.add(m.partition())
                    continue
                latest[m.key()] = m.value()
                if m.offset() + 1 >= ends[m.partition()]:
                    done.add(m.partition())
        return [v for v in latest.values() if v is not None]
    finally:
        c.close()


def bucket_objects(buckets: dict[str, Path]) -> set[tuple[str, str]]:
    """(rack, key) of every WAL object in the local bucket directories."""
    out = set()
    for rack, root in buckets.items():
        if not root.is_dir():
            continue
        for f in root.rglob("*.wal"):
            if f.is_file() and ".ferry-tmp" not in f.parts:
                out.add((rack, f.relative_to(root).as_posix()))
    return out


def unreferenced_objects(bootstrap: str, buckets: dict[str, Path]) -> set[tuple[str, str]]:
    referenced = set()
    for v in live_metadata(bootstrap):
        for rack, root in buckets.items():
            if str(root).encode() in v:
                for k in WAL_KEY.findall(v):
                    referenced.add((rack, k.decode()))
    return bucket_objects(buckets) - referenced


def wait_no_orphans(cluster, buckets: dict[str, Path], timeout: float = 60) -> float:
    """Rule 3; returns the seconds it took."""
    start = time.monotonic()
    while True:
        left = unreferenced_objects(cluster.bootstrap, buckets)
        if not left:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"objects without metadata after GC: {sorted(left)[:10]} "
                                 f"({len(left)} in all)")
        time.sleep(1.0)


def check_cluster(cluster, workload: Workload, buckets: dict[str, Path],
                  strict_acks=("1", "all")) -> dict:
    """The three rules on a healed cluster (producers stopped). Returns the message figures."""
    wait_identical(cluster, workload.topic, workload.partitions)
    figures = check_messages(cluster.bootstrap, workload, strict_acks,
                             log_dir=cluster.brokers[0].data_dir)
    swept_in = wait_no_orphans(cluster, buckets)
    print(f"no unreferenced objects after {swept_in:.1f}s; "
          f"{len(bucket_objects(buckets))} objects with metadata remain")
    return figures
