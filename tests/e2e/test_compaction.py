"""Log compaction (cleanup.policy=compact) seen through real clients: the cleaner drops
superseded records of closed segments, keeps the latest value per key, readers during cleaning
see a consistent log, and keyless records are refused."""

from __future__ import annotations

import threading
import time

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from conftest import (ck_consumer, ck_producer, create_topic, produce_sync, unique_topic)

KEYS = [f"k{i}" for i in range(10)]
DELETED = {"k8", "k9"}
ROUNDS = 80
PAD = "x" * 80

COMPACT_BROKER = {"log.retention.check.interval.ms": 500, "log.cleaner.backoff.ms": 500,
                  "group.initial.rebalance.delay.ms": 0}
COMPACT_TOPIC = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "600000",  # keep tombstones for the duration of the test
}


def _round_of(value: bytes | None) -> int:
    return -1 if value is None else int(value.split(b":")[1])


CLIENT_ERRORS: list = []


def read_all(broker, topic, timeout=30):
    """Read partition 0 from the beginning to EOF: [(offset, key, value)]. Consumer errors other
    than EOF are recorded in CLIENT_ERRORS (the tests assert there are none at the end) and
    reading goes on, so the compaction checks still run."""
    c = ck_consumer(broker)
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                CLIENT_ERRORS.append(str(m.error()))
                continue
            out.append((m.offset(), m.key().decode() if m.key() else None, m.value()))
        raise AssertionError(f"no EOF within {timeout}s ({len(out)} read)")
    finally:
        c.close()


def check_consistent(records, where):
    """Offsets strictly increase; per key, a later record never carries an older round."""
    last_off = -1
    seen: dict = {}
    for off, key, value in records:
        assert off > last_off, f"{where}: offset {off} after {last_off}"
        last_off = off
        if key in KEYS:
            r = _round_of(value) if value is not None else ROUNDS  # tombstone is newest
            assert r >= seen.get(key, -2), (
                f"{where}: {key} went back from round {seen[key]} to {r} at offset {off}")
            seen[key] = r


def test_compaction_keeps_latest_value_per_key(broker_factory):
    b = broker_factory(dict(COMPACT_BROKER))
    topic = create_topic(b, unique_topic("cmp"), 1, config=dict(COMPACT_TOPIC))
    p = ck_producer(b)
    CLIENT_ERRORS.clear()

    stop = threading.Event()
    reader_errors: list = []
    reader_passes = [0]

    def reader():
        while not stop.is_set():
            try:
                check_consistent(read_all(b, topic, timeout=60), f"concurrent pass {reader_passes[0]}")
                reader_passes[0] += 1
            except Exception as e:  # noqa: BLE001 - reported by the test thread
                reader_errors.append(e)
                return

    produced = 0
    for r in range(ROUNDS):
        msgs = [{"key": k, "value": f"{k}:{r}:{PAD}"} for k in KEYS]
        reports = produce_sync(p, topic, msgs)
        assert all(e is None for e, _m in reports), [e for e, _m in reports if e][:3]
        produced += len(msgs)
        if r == 10:
            t = threading.Thread(target=reader, daemon=True)
            t.start()
    reports = produce_sync(p, topic, [{"key": k, "value": None} for k in sorted(DELETED)])
    assert all(e is None for e, _m in reports)
    # filler updates roll the segment holding the final values, so that it can be cleaned too
    reports = produce_sync(p, topic, [{"key": "filler", "value": f"filler:{i}:{PAD}"}
                                      for i in range(100)])
    assert all(e is None for e, _m in reports)
    produced += len(DELETED) + 100

    stale = None
    records: list = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            records = read_all(b, topic)
            check_consistent(records, "main reader")
            stale = [(o, k, _round_of(v)) for o, k, v in records
                     if k in KEYS and v is not None and (k in DELETED or _round_of(v) != ROUNDS - 1)]
            if not stale and len(records) < produced // 4:
                break
            time.sleep(0.5)
    finally:
        stop.set()
        t.join(timeout=90)

    assert not reader_errors, f"concurrent reader: {reader_errors[0]}"
    assert reader_passes[0] >= 1, "the concurrent reader never finished a pass"
    assert not stale, (f"after 120s {len(stale)} superseded records still readable "
                       f"(of {len(records)} read, {produced} produced), e.g. {stale[:5]}")
    assert len(records) < produced // 4, f"{len(records)} records left of {produced}"

    latest: dict = {}
    for off, k, v in records:
        latest[k] = v
    for k in KEYS:
        if k in DELETED:
            assert latest.get(k) is None, f"{k}: deleted key reads {latest.get(k)!r}"
        else:
            assert _round_of(latest.get(k)) == ROUNDS - 1, f"{k}: latest {latest.get(k)!r}"
    per_key = {k: sum(1 for _o, kk, _v in records if kk == k) for k in KEYS}
    assert all(n <= 1 for n in per_key.values()), f"keys left more than once: {per_key}"
    assert records[-1][1] == "filler" and _round_of(records[-1][2]) == 99
    # librdkafka reading the cleaned log must not surface errors to the application
    assert not CLIENT_ERRORS, (f"{len(CLIENT_ERRORS)} consumer errors reading the compacted "
                               f"log, e.g. {sorted(set(CLIENT_ERRORS))[:3]}")


def test_null_key_on_compacted_topic_is_invalid_record(broker_factory):
    b = broker_factory(dict(COMPACT_BROKER))
    topic = create_topic(b, unique_topic("cmp"), 1, config=dict(COMPACT_TOPIC))
    p = ck_producer(b, **{"message.timeout.ms": 20000})
    reports = produce_sync(p, topic, [{"value": "no key"}])
    err, _m = reports[0]
    assert err is not None, "a keyless record was accepted by a compacted topic"
    assert err.code() == KafkaError.INVALID_RECORD, f"expected INVALID_RECORD, got {err}"
    # keyed records still go through, and the keyless one is not in the log
    ok = produce_sync(p, topic, [{"key": "a", "value": "1"}])
    assert ok[0][0] is None, ok[0][0]
    assert [(k, v) for _o, k, v in read_all(b, topic)] == [("a", b"1")]


def test_keyless_records_in_a_batch_are_named_and_the_others_refused_on_their_account(
        broker_factory):
    """Produce v8+ names each refused record (KIP-467 `record_errors`): librdkafka then fails
    those records with INVALID_RECORD and the batch's other records with
    _INVALID_DIFFERENT_RECORD, instead of blaming all of them. Nothing of the batch is
    written (librdkafka's own test 0011 checks the same)."""
    b = broker_factory(dict(COMPACT_BROKER))
    topic = create_topic(b, unique_topic("cmp"), 1, config=dict(COMPACT_TOPIC))
    # One batch: a long linger, everything produced before the first send.
    p = ck_producer(b, **{"linger.ms": 1000, "message.timeout.ms": 20000})
    messages = [{"value": f"v{i}"} if i % 5 == 0 else {"key": f"k{i}", "value": f"v{i}"}
                for i in range(20)]
    reports = produce_sync(p, topic, messages)
    codes = [r[0].code() if r[0] is not None else None for r in reports]
    expected = [KafkaError.INVALID_RECORD if i % 5 == 0 else KafkaError._INVALID_DIFFERENT_RECORD
                for i in range(20)]
    assert codes == expected, codes
    ok = produce_sync(p, topic, [{"key": "a", "value": "1"}])
    assert ok[0][0] is None, ok[0][0]
    assert [(k, v) for _o, k, v in read_all(b, topic)] == [("a", b"1")]


def test_the_cleaner_runs_on_its_own_backoff_not_on_the_retention_interval(broker_factory):
    """Kafka's cleaner looks for dirty logs every `log.cleaner.backoff.ms` (15 s by default),
    whatever `log.retention.check.interval.ms` (5 minutes by default) says. librdkafka's test
    0077 waits 20 s for compaction with both at their defaults."""
    b = broker_factory({"log.cleaner.backoff.ms": 300, "group.initial.rebalance.delay.ms": 0})
    topic = create_topic(b, unique_topic("cmp-backoff"), 1, config=dict(COMPACT_TOPIC))
    p = ck_producer(b)
    for r in range(20):
        reports = produce_sync(p, topic, [{"key": k, "value": f"{k}:{r}:{PAD}"} for k in KEYS])
        assert all(e is None for e, _m in reports)
    # Roll the segment with the last values, so that it can be cleaned too.
    assert all(e is None for e, _m in produce_sync(
        p, topic, [{"key": "filler", "value": f"filler:{i}:{PAD}"} for i in range(60)]))
    deadline = time.monotonic() + 30
    while True:
        records = read_all(b, topic)
        superseded = [(o, k) for o, k, v in records if k in KEYS and _round_of(v) != 19]
        if not superseded:
            break
        assert time.monotonic() < deadline, (
            f"{len(superseded)} superseded records after 30 s, e.g. {superseded[:3]}")
        time.sleep(0.5)
    assert all(_round_of(v) == 19 for _o, k, v in records if k in KEYS)
