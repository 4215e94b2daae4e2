"""Group subscriptions that change under the consumers: a cooperative-sticky group losing one of
its subscribed topics (librdkafka's test 0113), and regular-expression subscriptions in the
classic protocol (resolved by the client) and in KIP-848 (resolved by the broker).

librdkafka 2.0.2's own test 0113 (h_delete_topic) hangs against ferry after the rebalance has
succeeded, in the consumer's destroy: that is the client's bug fixed in librdkafka 2.6.1 (#4724,
a fetch-queue op of a partition removed while consumed keeps the instance alive). The same
sub-tests of librdkafka's current 0113 (h, i, j, n) pass against ferry."""

from __future__ import annotations

import pytest

import kwire
from conftest import (KIP848_BROKER, GroupMember, all_partitions, ck_admin, close_all,
                      consume_until, create_topic, produce_numbered, unique_topic,
                      wait_group_stable, wait_topic)

API_CONSUMER_GROUP_HEARTBEAT = 68
ERR_INVALID_REGULAR_EXPRESSION = 128

def _delete_topic(b, topic):
    admin = ck_admin(b)
    for f in admin.delete_topics([topic], operation_timeout=30).values():
        f.result(timeout=60)


def _keys(records):
    return {(t, p, o) for _n, t, p, o, _k, _v in records}


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
@pytest.mark.parametrize("members,partitions", [(1, 1), (2, 4)])
def test_group_goes_on_after_a_subscribed_topic_is_deleted(broker_factory, protocol, members,
                                                           partitions):
    """Members subscribed to two topics; one topic is deleted: its partitions are revoked, the
    members keep the other topic's partitions and consume what is produced next."""
    b = broker_factory(dict(KIP848_BROKER))
    n = partitions
    keep = create_topic(b, unique_topic("keep"), n)
    gone = create_topic(b, unique_topic("gone"), n)
    group = unique_topic("g")
    if protocol == "classic":
        conf = {"partition.assignment.strategy": "cooperative-sticky",
                "topic.metadata.refresh.interval.ms": 1000}
    else:
        conf = {"group.protocol": "consumer", "topic.metadata.refresh.interval.ms": 1000}
    ms = [GroupMember(b, group, [keep, gone], name=f"m{i}", classic=protocol == "classic",
                      **conf) for i in range(members)]
    try:
        wait_group_stable(ms, all_partitions(keep, n) | all_partitions(gone, n), timeout=60)
        first = produce_numbered(b, keep, n, 5, tag="a")
        got = consume_until(ms, len(first), timeout=60)
        assert {(p, o) for _n, t, p, o, _k, _v in got if t == keep} == first

        _delete_topic(b, gone)
        wait_group_stable(ms, all_partitions(keep, n), timeout=90)
        revoked = set().union(*(r for m in ms for r in m.revokes + m.losts))
        assert all_partitions(gone, n) <= revoked, [(m.name, m.revokes, m.losts) for m in ms]

        second = produce_numbered(b, keep, n, 5, tag="b")
        got = consume_until(ms, len(second), timeout=60)
        assert {(p, o) for _n, t, p, o, _k, _v in got if t == keep} == second
    finally:
        close_all(ms)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_regex_subscription_follows_topic_creation(broker_factory, protocol):
    """A `^prefix.*` subscription gets the matching topics, not the others, and a matching topic
    created later joins the assignment."""
    b = broker_factory(dict(KIP848_BROKER))
    prefix = unique_topic("rx")
    t1 = create_topic(b, f"{prefix}-one", 2)
    other = create_topic(b, unique_topic("other"), 2)
    group = unique_topic("g")
    if protocol == "classic":
        conf = {"topic.metadata.refresh.interval.ms": 1000}
    else:
        conf = {"group.protocol": "consumer", "topic.metadata.refresh.interval.ms": 1000}
    ms = [GroupMember(b, group, [f"^{prefix}-.*"], name=f"m{i}", classic=protocol == "classic",
                      **conf) for i in range(2)]
    try:
        wait_group_stable(ms, all_partitions(t1, 2), timeout=60)
        t2 = create_topic(b, f"{prefix}-two", 2)
        wait_topic(b, t2, 2)
        wait_group_stable(ms, all_partitions(t1, 2) | all_partitions(t2, 2), timeout=90)
        a = produce_numbered(b, t1, 2, 3, tag="x")
        c = produce_numbered(b, t2, 2, 3, tag="y")
        produce_numbered(b, other, 2, 3, tag="z")
        got = consume_until(ms, len(a) + len(c), timeout=60)
        keys = _keys(got)
        assert {(t1, p, o) for p, o in a} | {(t2, p, o) for p, o in c} == keys, keys

        # A matching topic deleted leaves the assignment; the other goes on being consumed.
        _delete_topic(b, t1)
        wait_group_stable(ms, all_partitions(t2, 2), timeout=90)
        d = produce_numbered(b, t2, 2, 3, tag="w")
        got = consume_until(ms, len(d), timeout=60)
        assert _keys(got) == {(t2, p, o) for p, o in d}
    finally:
        close_all(ms)


def _heartbeat_v1(conn, group, member_id, regex):
    """A joining ConsumerGroupHeartbeat v1 with only a regular-expression subscription;
    returns (error code, error message)."""
    body = (kwire.compact_string(group) + kwire.compact_string(member_id) + kwire.i32(0)
            + kwire.compact_string(None) + kwire.compact_string(None) + kwire.i32(30000)
            + kwire.uvarint(0)  # SubscribedTopicNames: null
            + kwire.compact_string(regex) + kwire.compact_string(None)
            + kwire.uvarint(1)  # TopicPartitions: empty
            + kwire.uvarint(0))
    r = conn.request(API_CONSUMER_GROUP_HEARTBEAT, 1, body, flexible=True)
    r.take(1)  # response header tagged fields
    r.i32()  # throttle
    code = r.i16()
    n = r.take(1)[0]
    message = r.take(n - 1).decode() if n else None
    return code, message


def test_kip848_invalid_regex_is_invalid_regular_expression(broker_factory):
    """librdkafka checks a regex itself before sending it, so a raw request shows what the
    broker answers for one it cannot compile: INVALID_REGULAR_EXPRESSION (128), as Kafka; a
    valid one joins."""
    b = broker_factory(dict(KIP848_BROKER))
    group = unique_topic("g")
    with kwire.Conn.to(b) as c:
        code, message = _heartbeat_v1(c, group, "member-bad-regex-1", "^bad(regex")
        assert code == ERR_INVALID_REGULAR_EXPRESSION, (code, message)
        assert "regular expression" in (message or ""), message
        code, message = _heartbeat_v1(c, group, "member-good-regex-1", "^good.*")
        assert code == 0, (code, message)
