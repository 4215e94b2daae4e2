"""Kafka behaviours clients and admin tools rely on at the edges (issue 15): commits to
partitions that do not exist, deleting a group whose members have left, and ApiVersions
advertising only what the broker answers."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (ConsumerGroupTopicPartitions, KafkaError, KafkaException,
                             TopicPartition)

import kwire
from conftest import (GROUP_BROKER_CONFIG, KIP848_BROKER, GroupMember, ck_admin, create_topic,
                      kafka_error_code, produce_numbered, unique_topic)


@pytest.fixture
def gbroker(broker_factory):
    return broker_factory({**GROUP_BROKER_CONFIG, **KIP848_BROKER})


def _alter(admin, group, tps):
    """AlterConsumerGroupOffsets: the per-partition errors ({(topic, partition): code|None}),
    or the error of the call as a whole."""
    fut = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group]
    try:
        res = fut.result(timeout=30)
    except KafkaException as e:
        return None, kafka_error_code(e)
    return {(tp.topic, tp.partition): (tp.error.code() if tp.error else None)
            for tp in res.topic_partitions}, None


def _committed(admin, group, tps):
    res = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, tps)])[group].result(timeout=30)
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}


def test_alter_offsets_of_a_partition_that_does_not_exist(gbroker):
    b = gbroker
    topic = create_topic(b, unique_topic("edge-alter"), partitions=2)
    admin = ck_admin(b)
    group = unique_topic("edge-alter-g")

    # The existing partition commits; the one past the topic's partitions does not.
    errs, whole = _alter(admin, group, [TopicPartition(topic, 0, 5), TopicPartition(topic, 7, 5)])
    assert whole is None, whole
    assert errs[(topic, 7)] == KafkaError.UNKNOWN_TOPIC_OR_PART, errs
    assert errs[(topic, 0)] is None, errs
    assert _committed(admin, group, [TopicPartition(topic, 0)])[(topic, 0)] == 5

    # A topic that does not exist at all.
    missing = unique_topic("edge-missing")
    errs, whole = _alter(admin, group, [TopicPartition(missing, 0, 1)])
    assert whole is None, whole
    assert errs[(missing, 0)] == KafkaError.UNKNOWN_TOPIC_OR_PART, errs
    # Nothing was stored for it.
    assert _committed(admin, group, [TopicPartition(missing, 0)])[(missing, 0)] < 0


def _consume_commit_close(b, group, topic, **conf):
    m = GroupMember(b, group, [topic], name=group, **conf)
    try:
        deadline = time.monotonic() + 60
        while len(m.records) < 10 and time.monotonic() < deadline:
            m.poll(0.2)
        assert len(m.records) == 10, m.records
        assert m.commit_consumed()
    finally:
        m.close()


def _delete_when_empty(admin, group, timeout: float = 30):
    """DeleteGroups once the group is empty: it may take a moment for a leave to be
    processed, but the answer must turn to success, never stay NON_EMPTY_GROUP."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.delete_consumer_groups([group])[group].result(timeout=30)
            return
        except KafkaException as e:
            if kafka_error_code(e) != KafkaError.NON_EMPTY_GROUP or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_delete_a_group_whose_members_left(gbroker, protocol):
    b = gbroker
    topic = create_topic(b, unique_topic("edge-del"), partitions=1)
    produce_numbered(b, topic, 1, 10)
    group = unique_topic(f"edge-del-{protocol}")
    conf = {} if protocol == "classic" else {"group.protocol": "consumer"}
    _consume_commit_close(b, group, topic, classic=protocol == "classic", **conf)

    admin = ck_admin(b)
    assert _committed(admin, group, [TopicPartition(topic, 0)])[(topic, 0)] == 10
    _delete_when_empty(admin, group)
    # Gone with its offsets; deleting again: GROUP_ID_NOT_FOUND.
    assert _committed(admin, group, [TopicPartition(topic, 0)])[(topic, 0)] < 0
    with pytest.raises(KafkaException) as ei:
        admin.delete_consumer_groups([group])[group].result(timeout=30)
    assert kafka_error_code(ei.value) == KafkaError.GROUP_ID_NOT_FOUND, ei.value


def test_api_versions_lists_only_answered_apis(broker):
    """ApiVersions leaves out the Kafka APIs ferry does not serve; a raw OffsetCommit to a
    topic that does not exist answers its partition UNKNOWN_TOPIC_OR_PARTITION."""
    with kwire.Conn.to(broker) as c:
        # ApiVersions v0: error_code, [api_key, min, max].
        r = c.request(18, 0, b"")
        assert r.i16() == 0
        advertised = {}
        for _ in range(r.i32()):
            key, lo, hi = r.i16(), r.i16(), r.i16()
            advertised[key] = (lo, hi)
        # Kafka APIs ferry does not serve are not advertised (UpdateFeatures, share groups).
        for unserved in (57, 76, 77, 78, 79):
            assert unserved not in advertised, advertised
        assert advertised[8][0] <= 2  # OffsetCommit v2

        # OffsetCommit v2: group, generation -1, member "", retention -1, one topic that does
        # not exist with partition 0 (offset 3, metadata "").
        body = (kwire.string("edge-wire-g") + kwire.i32(-1) + kwire.string("")
                + kwire.i64(-1) + kwire.i32(1) + kwire.string(unique_topic("edge-nope"))
                + kwire.i32(1) + kwire.i32(0) + kwire.i64(3) + kwire.string(""))
        r = c.request(8, 2, body)
        assert r.i32() == 1  # one topic
        r.string()
        assert r.i32() == 1  # one partition
        assert r.i32() == 0
        assert r.i16() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_a_success_carries_a_null_error_message(broker):
    """Kafka answers null, not an empty string, where a success has no error message; kafkajs
    compares it (its own broker tests expect `errorMessage: null`)."""
    with kwire.Conn.to(broker) as c:
        # FindCoordinator v2: key, key_type 0 (group) -> throttle, error, message, node...
        r = c.request(10, 2, kwire.string("edge-null-msg-g") + kwire.i8(0))
        r.i32()
        assert r.i16() == 0
        assert r.string() is None

        # CreateTopics v4: one topic, 1 partition, RF -1, no assignments, no configs; timeout,
        # validate_only -> throttle, [name, error, message].
        topic = unique_topic("edge-null-msg")
        body = (kwire.i32(1) + kwire.string(topic) + kwire.i32(1) + kwire.i16(-1)
                + kwire.i32(0) + kwire.i32(0) + kwire.i32(30000) + kwire.i8(0))
        r = c.request(19, 4, body)
        r.i32()
        assert r.i32() == 1
        assert r.string() == topic
        assert r.i16() == 0
        assert r.string() is None
