"""Restarts on the same data dir: graceful (SIGTERM) and crash (SIGKILL under load)."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import ConfigResource, ResourceType

from conftest import (
    assert_delivered,
    ck_admin,
    ck_producer,
    consume_partition,
    create_topic,
    produce_sync,
    unique_topic,
    wait_topic,
)

T = 30


def snapshot(broker, topics):
    """Topic ids, partition counts and non-default configs of the given topics."""
    admin = ck_admin(broker)
    out = {}
    descs = admin.describe_topics(TopicCollection(list(topics)), request_timeout=T)
    for name in topics:
        d = descs[name].result(timeout=T)
        (fut,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)], request_timeout=T).values()
        cfg = fut.result(timeout=T)
        overrides = {k: e.value for k, e in cfg.items() if not e.is_default}
        out[name] = {"id": str(d.topic_id), "partitions": len(d.partitions), "configs": overrides}
    return out


def test_sigterm_restart_keeps_data_ids_and_configs(broker):
    a = create_topic(broker, unique_topic("dura"), partitions=3,
                     config={"retention.ms": "86400000", "cleanup.policy": "delete",
                             "max.message.bytes": "500000"})
    b = create_topic(broker, unique_topic("durb"), partitions=1,
                     config={"message.timestamp.type": "LogAppendTime"})
    sent = {}
    for codec in ("none", "gzip", "zstd"):
        p = ck_producer(broker, **{"compression.type": codec, "linger.ms": 10})
        msgs = [{"key": f"{codec}-{i}".encode(), "value": f"{codec}-v{i}".encode() * 3,
                 "partition": i % 3, "headers": [("c", codec.encode())]} for i in range(300)]
        assert_delivered(produce_sync(p, a, msgs))
        for m in msgs:
            sent.setdefault(m["partition"], []).append((m["key"], m["value"]))
    pb = ck_producer(broker)
    assert_delivered(produce_sync(pb, b, [{"value": b"lat-%d" % i, "partition": 0} for i in range(10)]))
    before_lat = [m.timestamp() for m in consume_partition(broker, b, 0, expected=10)]
    before = snapshot(broker, [a, b])
    assert before[a]["configs"].get("retention.ms") == "86400000"

    rc = broker.restart(signal.SIGTERM)
    assert rc == 0, f"ferry exited with {rc} on SIGTERM (expected 0 within 15 s)"

    assert snapshot(broker, [a, b]) == before
    for part in range(3):
        got = consume_partition(broker, a, part, expected=len(sent[part]))
        assert [(m.key(), m.value()) for m in got] == sent[part]
        assert [m.offset() for m in got] == list(range(len(sent[part])))
    assert [m.timestamp() for m in consume_partition(broker, b, 0, expected=10)] == before_lat

    # appends continue after the recovered end
    p = ck_producer(broker)
    reports = produce_sync(p, a, [{"value": b"after", "partition": 0}])
    assert_delivered(reports)
    assert reports[0][1].offset() == len(sent[0])

    # a second restart, still the same
    assert broker.restart(signal.SIGTERM) == 0
    assert snapshot(broker, [a, b]) == before


def test_deleted_topic_stays_deleted_after_restart(broker):
    keep = create_topic(broker, unique_topic("keep"))
    gone = create_topic(broker, unique_topic("gone"))
    ck_admin(broker).delete_topics([gone], operation_timeout=T, request_timeout=T)[gone].result(timeout=T)
    assert broker.restart() == 0
    names = set(ck_admin(broker).list_topics(timeout=T).topics)
    assert keep in names and gone not in names


def test_sigterm_with_open_clients_exits_zero(broker):
    topic = create_topic(broker, unique_topic("open"))
    p = ck_producer(broker)
    assert_delivered(produce_sync(p, topic, [{"value": b"x", "partition": 0}]))
    from conftest import ck_consumer
    from confluent_kafka import TopicPartition, OFFSET_BEGINNING
    c = ck_consumer(broker)
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    c.poll(2)  # consumer now long-polls Fetch against the broker
    try:
        t0 = time.monotonic()
        rc = broker.stop(signal.SIGTERM)
        assert rc == 0, f"exit code {rc} after SIGTERM with open connections"
        assert time.monotonic() - t0 < 15
    finally:
        c.close()


@pytest.mark.slow
def test_kill9_under_idempotent_load_keeps_every_acked_message_once(broker):
    parts = 3
    topic = create_topic(broker, unique_topic("crash"), partitions=parts)
    acked = []  # (partition, offset, value)
    failed = []
    lock = threading.Lock()
    stop = threading.Event()
    p = ck_producer(broker, **{
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": 10000,
        "retry.backoff.ms": 100,
        "reconnect.backoff.max.ms": 500,
    })

    def on_delivery(err, msg):
        with lock:
            if err is None:
                acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                failed.append((msg.value(), err))

    def run():
        i = 0
        while not stop.is_set():
            try:
                p.produce(topic, value=f"m{i}".encode(), key=f"k{i}".encode(), partition=i % parts,
                          on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            p.poll(0.001 if i % 50 else 0.01)
        p.poll(0)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if len(acked) >= 3000:
                break
        time.sleep(0.05)
    with lock:
        assert len(acked) >= 3000, f"only {len(acked)} acks before the crash (failed: {failed[:3]})"

    broker.kill9()
    stop.set()
    th.join(timeout=30)
    p.purge(in_queue=True, in_flight=True)
    p.flush(15)
    with lock:
        acked_at_crash = list(acked)

    broker.start()
    wait_topic(broker, topic, partitions=parts)

    by_part = {part: consume_partition(broker, topic, part, timeout=60) for part in range(parts)}
    all_values = Counter(m.value() for msgs in by_part.values() for m in msgs)
    dupes = [v for v, n in all_values.items() if n > 1]
    assert not dupes, f"{len(dupes)} values stored more than once, e.g. {dupes[:5]}"
    stored = {(part, m.offset()): m.value() for part, msgs in by_part.items() for m in msgs}
    missing = [(pt, off, v) for pt, off, v in acked_at_crash if stored.get((pt, off)) != v]
    assert not missing, (f"{len(missing)} of {len(acked_at_crash)} acknowledged messages lost or moved "
                         f"after kill -9, e.g. {missing[:5]}")
    for part, msgs in by_part.items():
        assert [m.offset() for m in msgs] == list(range(len(msgs))), f"p{part}: offset gaps"

    # the topic still takes writes, right after what survived
    p2 = ck_producer(broker, **{"enable.idempotence": True, "acks": "all"})
    reports = produce_sync(p2, topic, [{"value": b"after-crash", "partition": part} for part in range(parts)])
    assert_delivered(reports)
    for (err, m) in reports:
        assert m.offset() == len(by_part[m.partition()])
    assert broker.stop() == 0


def test_kill9_idle_broker_restarts_with_data(broker):
    topic = create_topic(broker, unique_topic("k9"), partitions=2, config={"retention.ms": "123456789"})
    p = ck_producer(broker, **{"acks": "all"})
    assert_delivered(produce_sync(p, topic, [{"value": b"v%d" % i, "partition": i % 2} for i in range(100)]))
    before = snapshot(broker, [topic])
    broker.restart(signal.SIGKILL)
    assert snapshot(broker, [topic]) == before
    for part in range(2):
        got = consume_partition(broker, topic, part, expected=50)
        assert [m.value() for m in got] == [b"v%d" % i for i in range(part, 100, 2)]
