"""The APIs clients and admin tools call beside produce and consume (issue 15): feature levels in
ApiVersions, DescribeTopicPartitions (KIP-966), client telemetry (KIP-714) and the list of
client-metrics resources, each through a real client."""

from __future__ import annotations

import time
import urllib.request

import pytest
from kafka import KafkaAdminClient

import kwire
from conftest import assert_delivered, ck_producer, create_topic, produce_sync, unique_topic


@pytest.fixture
def kp_admin(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    yield admin
    admin.close()


def test_describe_features_shows_kafka_4_levels(kp_admin):
    """kafka-python's describe_features (ApiVersions v3+): metadata.version at Kafka 4.0's
    4.0-IV3, the KIP-848 group protocol on, transactions v1 (level 1, not 2)."""
    features = kp_admin.describe_features()
    assert features["metadata.version"]["finalized"] == (25, 25), features
    assert features["group.version"]["finalized"] == (1, 1), features
    assert features["transaction.version"]["finalized"] == (1, 1), features
    assert features["transaction.version"]["supported"] == (0, 1), features
    assert features["metadata.version"]["finalized_epoch"] is not None, features


def _pages(admin, topics, limit):
    """Every page of DescribeTopicPartitions, following next_cursor."""
    pages, cursor = [], None
    while True:
        page = admin.describe_topic_partitions(topics, response_partition_limit=limit,
                                               cursor=cursor)
        pages.append(page)
        cursor = page["next_cursor"]
        if cursor is None:
            return pages


def test_describe_topic_partitions_pages_with_a_cursor(broker, kp_admin):
    a = create_topic(broker, unique_topic("dtp-a"), partitions=3)
    b = create_topic(broker, unique_topic("dtp-b"), partitions=2)
    missing = unique_topic("dtp-missing")
    pages = _pages(kp_admin, [b, a, missing], limit=2)
    seen = [(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]])
            for page in pages for t in page["topics"]]
    # Name order, at most two partitions a page; a topic cut by the limit goes on next page.
    first, second = sorted([a, b])
    expected_parts = {a: 3, b: 2}
    got = {}
    for name, err, parts in seen:
        if name == missing:
            assert err == 3, seen  # UNKNOWN_TOPIC_OR_PARTITION
            continue
        assert err == 0, seen
        got.setdefault(name, []).extend(parts)
    assert got == {t: list(range(n)) for t, n in expected_parts.items()}, seen
    assert [n for n, _, _ in seen if n != missing][0] == first, seen
    assert all(sum(len(t["partitions"]) for t in p["topics"]) <= 2 for p in pages), pages
    assert len(pages) >= 3, pages

    # What a partition carries, as describeTopics shows it.
    one = kp_admin.describe_topic_partitions([a])["topics"][0]
    p0 = one["partitions"][0]
    assert p0["leader_id"] in broker.node_ids, p0
    assert p0["leader_epoch"] >= 0, p0
    assert p0["leader_id"] in p0["isr_nodes"] and p0["leader_id"] in p0["replica_nodes"], p0
    assert p0["offline_replicas"] == [], p0
    assert not p0["eligible_leader_replicas"], p0


def _requests_of(broker, api: str) -> float:
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
        body = r.read().decode()
    total = 0.0
    for line in body.splitlines():
        if line.startswith("ferry_requests_total{") and f'api="{api}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_librdkafka_asks_for_telemetry_and_is_told_nothing_is_wanted(broker):
    """librdkafka (KIP-714, enable.metrics.push on by default) asks for its subscription once
    the broker advertises GetTelemetrySubscriptions; with no metrics requested it pushes
    none and goes on producing."""
    topic = create_topic(broker, unique_topic("telemetry"))
    before = _requests_of(broker, "GetTelemetrySubscriptions")
    p = ck_producer(broker)
    assert_delivered(produce_sync(p, topic, [{"value": b"t", "partition": 0}] * 3))
    deadline = time.monotonic() + 30
    while _requests_of(broker, "GetTelemetrySubscriptions") <= before:
        assert time.monotonic() < deadline, "librdkafka never asked for its subscription"
        p.poll(0.2)
    assert _requests_of(broker, "PushTelemetry") == 0


def _telemetry_get(c, instance_id: bytes):
    r = c.request(71, 0, instance_id + kwire.uvarint(0), flexible=True)
    r.take(1)  # response header tagged fields
    throttle, err = r.i32(), r.i16()
    client_id, subscription = r.take(16), r.i32()
    return err, client_id, subscription


def _telemetry_push(c, instance_id: bytes, subscription: int, compression: int = 0) -> int:
    body = (instance_id + kwire.i32(subscription) + kwire.i8(0) + kwire.i8(compression)
            + kwire.uvarint(1) + kwire.uvarint(0))  # empty compact bytes, no tagged fields
    r = c.request(72, 0, body, flexible=True)
    r.take(1)
    r.i32()
    return r.i16()


def test_telemetry_wire_errors_are_kafkas(broker):
    zero = bytes(16)
    with kwire.Conn.to(broker) as c:
        err, instance, subscription = _telemetry_get(c, zero)
        assert err == 0 and instance != zero
        # The same client keeps its id.
        assert _telemetry_get(c, instance)[1:] == (instance, subscription)
        assert _telemetry_push(c, instance, subscription) == 0
        assert _telemetry_push(c, zero, subscription) == 42  # INVALID_REQUEST
        assert _telemetry_push(c, instance, subscription ^ 1) == 117  # UNKNOWN_SUBSCRIPTION_ID
        assert _telemetry_push(c, instance, subscription, compression=9) == 76


def test_list_config_resources_names_the_brokers_and_topics(broker, kp_admin):
    """ListConfigResources v1 (KIP-1142), as kafka-python and Kafka 4.1's admin client send it:
    every broker (as a broker and as a broker logger) and every topic; no client-metrics
    resources, since ferry keeps none (v0, KIP-714's ListClientMetricsResources, is that part
    alone)."""
    from kafka.admin import ConfigResourceType

    name = create_topic(broker, unique_topic("cfgres"))
    got = dict(kp_admin.list_config_resources())
    nodes = sorted(str(n) for n in broker.node_ids)
    assert sorted(got["broker"]) == nodes
    assert sorted(got["broker_logger"]) == nodes
    assert name in got["topic"]
    assert "client_metrics" not in got
    only_topics = dict(kp_admin.list_config_resources([ConfigResourceType.TOPIC]))
    assert list(only_topics) == ["topic"] and name in only_topics["topic"]


def test_describe_producers_lists_an_idempotent_producer_and_an_open_transaction(broker, kp_admin):
    """DescribeProducers (what kafka-transactions.sh describe-producers calls), through
    kafka-python: the idempotent producer with its epoch and last sequence, and a transactional
    producer with the offset its open transaction started at."""
    from confluent_kafka import Producer
    from kafka import TopicPartition as KTopicPartition

    topic = create_topic(broker, unique_topic("dp"))
    idem = ck_producer(broker, **{"enable.idempotence": True})
    for i in range(5):
        idem.produce(topic, f"v{i}".encode(), partition=0)
    assert idem.flush(30) == 0
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique_topic("dp-t")})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, b"in-txn", partition=0)
    txn.flush(30)

    tp = KTopicPartition(topic, 0)
    state = kp_admin.describe_producers([tp])[tp]
    producers = sorted(state.active_producers, key=lambda p: p.current_transaction_start_offset)
    assert len(producers) == 2, producers
    plain, open_txn = producers
    assert plain.current_transaction_start_offset == -1
    assert plain.last_sequence == 4 and plain.producer_epoch >= 0
    assert open_txn.current_transaction_start_offset == 5
    assert open_txn.last_sequence == 0
    assert open_txn.last_timestamp > 0
    txn.abort_transaction(30)
