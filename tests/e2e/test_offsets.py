"""ListOffsets: earliest, latest, by timestamp, max timestamp; watermarks."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from conftest import (
    assert_delivered,
    ck_admin,
    ck_consumer,
    ck_producer,
    create_topic,
    produce_sync,
    unique_topic,
)

T = 30
RETRIABLE = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
             KafkaError.UNKNOWN_TOPIC_OR_PART}
BASE = 1_700_000_000_000


def list_offset(broker, topic, partition, spec):
    # In a cluster, the leader may learn of a new topic a moment after the broker that answered
    # the client's metadata: NOT_LEADER_OR_FOLLOWER is retriable, as Kafka's clients treat it.
    deadline = time.monotonic() + T
    while True:
        fs = ck_admin(broker).list_offsets({TopicPartition(topic, partition): spec},
                                           request_timeout=T)
        try:
            return list(fs.values())[0].result(timeout=T)
        except KafkaException as e:
            if e.args[0].code() not in RETRIABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def seeded_topic(broker, timestamps, partitions=1):
    """A topic whose partition 0 holds one message per timestamp, in order."""
    topic = create_topic(broker, unique_topic("offs"), partitions=partitions)
    p = ck_producer(broker, **{"linger.ms": 0})
    msgs = [{"key": str(i).encode(), "value": f"v{i}".encode(), "partition": 0, "timestamp": ts}
            for i, ts in enumerate(timestamps)]
    # one request per message so each lands in its own batch
    for m in msgs:
        assert_delivered(produce_sync(p, topic, [m]))
    return topic


def test_earliest_latest_on_empty_and_filled_partition(broker):
    topic = create_topic(broker, unique_topic("el"), partitions=2)
    assert list_offset(broker, topic, 0, OffsetSpec.earliest()).offset == 0
    assert list_offset(broker, topic, 0, OffsetSpec.latest()).offset == 0
    p = ck_producer(broker)
    assert_delivered(produce_sync(p, topic, [{"value": b"x", "partition": 1}] * 7))
    assert list_offset(broker, topic, 1, OffsetSpec.earliest()).offset == 0
    assert list_offset(broker, topic, 1, OffsetSpec.latest()).offset == 7
    assert list_offset(broker, topic, 0, OffsetSpec.latest()).offset == 0

    c = ck_consumer(broker)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 1), timeout=T) == (0, 7)
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=T) == (0, 0)
    finally:
        c.close()


def test_offsets_for_times(broker):
    ts = [BASE + i * 10_000 for i in range(10)]  # 10 s apart
    topic = seeded_topic(broker, ts)

    def lookup(t):
        c = ck_consumer(broker)
        try:
            (res,) = c.offsets_for_times([TopicPartition(topic, 0, t)], timeout=T)
            assert res.error is None, res.error
            return res.offset
        finally:
            c.close()

    assert lookup(0) == 0                     # before everything: first offset
    assert lookup(ts[0]) == 0                 # exact
    assert lookup(ts[3]) == 3                 # exact
    assert lookup(ts[3] + 1) == 4             # between: next one at or after
    assert lookup(ts[9]) == 9
    assert lookup(ts[9] + 1) == -1            # after everything: no offset (-1)

    # the same through the admin API
    assert list_offset(broker, topic, 0, OffsetSpec.for_timestamp(ts[5] - 1)).offset == 5
    assert list_offset(broker, topic, 0, OffsetSpec.for_timestamp(ts[9] + 1)).offset == -1


def test_offsets_for_times_with_unordered_timestamps(broker):
    # timestamps need not grow with offsets: the first offset whose timestamp >= target wins
    ts = [BASE + 50_000, BASE + 10_000, BASE + 70_000, BASE + 20_000]
    topic = seeded_topic(broker, ts)
    assert list_offset(broker, topic, 0, OffsetSpec.for_timestamp(BASE + 15_000)).offset == 0
    assert list_offset(broker, topic, 0, OffsetSpec.for_timestamp(BASE + 60_000)).offset == 2
    assert list_offset(broker, topic, 0, OffsetSpec.for_timestamp(BASE + 80_000)).offset == -1


def test_max_timestamp(broker):
    ts = [BASE + 50_000, BASE + 10_000, BASE + 90_000, BASE + 20_000]
    topic = seeded_topic(broker, ts)
    res = list_offset(broker, topic, 0, OffsetSpec.max_timestamp())
    assert res.offset == 2
    assert res.timestamp == BASE + 90_000


def test_max_timestamp_within_one_batch(broker):
    topic = create_topic(broker, unique_topic("maxb"))
    p = ck_producer(broker, **{"linger.ms": 200})
    ts = [BASE + 3, BASE + 9, BASE + 1]
    assert_delivered(produce_sync(p, topic, [{"value": b"v", "partition": 0, "timestamp": t} for t in ts]))
    res = list_offset(broker, topic, 0, OffsetSpec.max_timestamp())
    assert (res.offset, res.timestamp) == (1, BASE + 9)


def test_list_offsets_unknown_partition(broker):
    topic = create_topic(broker, unique_topic("unk"))
    fs = ck_admin(broker).list_offsets({TopicPartition(topic, 3): OffsetSpec.latest()}, request_timeout=T)
    fut = list(fs.values())[0]
    try:
        fut.result(timeout=T)
        raised = None
    except Exception as e:  # noqa: BLE001
        raised = e
    assert raised is not None, "ListOffsets for a partition that does not exist should fail"


def test_kafka_python_offsets(broker):
    from kafka import KafkaConsumer, TopicPartition as KTP

    ts = [BASE + i * 1000 for i in range(5)]
    topic = seeded_topic(broker, ts)
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                      request_timeout_ms=30000)
    try:
        tp = KTP(topic, 0)
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 5}
        found = c.offsets_for_times({tp: ts[2] + 1})[tp]
        assert found.offset == 3 and found.timestamp == ts[3]
        assert c.offsets_for_times({tp: ts[4] + 1})[tp] is None
    finally:
        c.close()
