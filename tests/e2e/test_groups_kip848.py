"""KIP-848 consumer groups (ConsumerGroupHeartbeat / ConsumerGroupDescribe, server-side
assignors) with librdkafka's `group.protocol=consumer`."""

from __future__ import annotations

import signal

import pytest
from confluent_kafka import (ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition,
                             libversion)

from conftest import (KIP848_BROKER, GroupMember, all_partitions, ck_admin, close_all,
                      consume_until, create_topic, poll_members, produce_numbered, unique_topic,
                      wait_group_stable)

try:
    from confluent_kafka import ConsumerGroupType
except ImportError:  # pragma: no cover
    ConsumerGroupType = None

def test_librdkafka_supports_consumer_protocol():
    ver = libversion()[1]
    # librdkafka >= 2.12.0 (0x020c00ff) serves group.protocol=consumer (GA); requirements pin it.
    assert ver >= 0x020C0000, f"librdkafka {libversion()[0]} is too old for group.protocol=consumer"


@pytest.fixture
def kbroker(broker_factory):
    return broker_factory(dict(KIP848_BROKER))


def member(b, group, topic, name, **conf):
    return GroupMember(b, group, [topic], name=name, classic=False,
                       **{"group.protocol": "consumer", **conf})


def _exactly(records, expected, what):
    keys = [(p, o) for _n, _t, p, o, _k, _v in records]
    assert len(keys) == len(set(keys)), f"{what}: duplicates"
    assert set(keys) == expected, (
        f"{what}: missing {sorted(expected - set(keys))[:10]} extra {sorted(set(keys) - expected)[:10]}")


@pytest.mark.parametrize("assignor", [None, "range", "uniform"])
def test_two_members_consume_exactly_once(kbroker, assignor):
    b = kbroker
    topic = create_topic(b, unique_topic("k848"), 6)
    group = unique_topic("g")
    conf = {} if assignor is None else {"group.remote.assignor": assignor}
    ms = [member(b, group, topic, f"m{i}", **conf) for i in range(2)]
    try:
        wait_group_stable(ms, all_partitions(topic, 6), timeout=60)
        shares = {m.name: m.assignment() for m in ms}
        assert sorted(len(s) for s in shares.values()) == [3, 3], shares
        if assignor == "range":
            # range: each member gets a contiguous block of partitions
            for s in shares.values():
                ps = sorted(p for _t, p in s)
                assert ps == list(range(ps[0], ps[0] + len(ps))), shares
        expected = produce_numbered(b, topic, 6, 30)
        got = consume_until(ms, len(expected), timeout=60)
        _exactly(got, expected, f"kip848/{assignor}")
        for name, _t, p, _o, _k, _v in got:
            assert (topic, p) in shares[name], f"{name} consumed {p} it did not own"
        for m in ms:
            assert m.assignment() == shares[m.name]
            assert not m.protocol_errors(), m.protocol_errors()

        d = ck_admin(b).describe_consumer_groups([group])[group].result(timeout=30)
        if ConsumerGroupType is not None:
            assert d.type == ConsumerGroupType.CONSUMER, d.type
        assert d.state == ConsumerGroupState.STABLE, d.state
        assert len(d.members) == 2
        described = sorted(sorted((tp.topic, tp.partition) for tp in mem.assignment.topic_partitions)
                           for mem in d.members)
        assert described == sorted(sorted(s) for s in shares.values()), described
        if assignor is not None:
            assert d.partition_assignor == assignor, d.partition_assignor
        else:
            assert d.partition_assignor == "uniform", d.partition_assignor
        if ConsumerGroupType is not None:
            listed = {g.group_id: g for g in ck_admin(b).list_consumer_groups(
                types={ConsumerGroupType.CONSUMER}).result(timeout=30).valid}
            assert group in listed
    finally:
        close_all(ms)


def test_member_leaves_other_takes_over(kbroker):
    b = kbroker
    topic = create_topic(b, unique_topic("k848"), 6)
    group = unique_topic("g")
    a = member(b, group, topic, "a")
    c = member(b, group, topic, "c")
    try:
        wait_group_stable([a, c], all_partitions(topic, 6), timeout=60)
        batch1 = produce_numbered(b, topic, 6, 10, tag="b1")
        _exactly(consume_until([a, c], len(batch1)), batch1, "before leave")
        a.commit_consumed()
        c.commit_consumed()
        mark = len(c.records)
        a.close()
        took = wait_group_stable([c], all_partitions(topic, 6), timeout=6 + 30, hold=1.0)
        print(f"kip848 takeover after leave: {took:.2f}s")
        batch2 = produce_numbered(b, topic, 6, 10, tag="b2")
        consume_until([c], len(batch2))
        _exactly([("c",) + r for r in c.records[mark:]], batch2, "survivor")
        d = ck_admin(b).describe_consumer_groups([group])[group].result(timeout=30)
        assert len(d.members) == 1 and d.state == ConsumerGroupState.STABLE, (d.state, d.members)
    finally:
        close_all([a, c])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill9"])
def test_commit_restart_resume(kbroker, sig):
    b = kbroker
    n = 20
    topic = create_topic(b, unique_topic("k848"), 3)
    group = unique_topic("g")
    produce_numbered(b, topic, 3, n)
    commit_at = {p: 4 + 3 * p for p in range(3)}
    m1 = member(b, group, topic, "m1")
    try:
        wait_group_stable([m1], all_partitions(topic, 3), timeout=60, hold=0.5)
        consume_until([m1], 3 * n - len(m1.records))
        res = m1.consumer.commit(offsets=[TopicPartition(topic, p, o, metadata=f"k-{p}")
                                          for p, o in commit_at.items()], asynchronous=False)
        assert all(tp.error is None for tp in res), res
    finally:
        m1.close()

    b.restart(sig)

    # Held in a name until the answer is in: an admin client that only a temporary refers to
    # is destroyed as soon as the call returns, and its pending request may never be answered.
    admin = ck_admin(b)
    lst = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(timeout=60)
    assert {tp.partition: (tp.offset, tp.metadata) for tp in lst.topic_partitions
            if tp.topic == topic} == {p: (o, f"k-{p}") for p, o in commit_at.items()}
    m2 = member(b, group, topic, "m2")
    try:
        expected = {(p, o) for p in range(3) for o in range(commit_at[p], n)}
        consume_until([m2], len(expected), timeout=60)
        got = [("m2",) + r for r in m2.records]
        _exactly(got, expected, f"resume after {sig.name}")
    finally:
        m2.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_online_upgrade_and_downgrade_between_protocols(kbroker, strategy):
    """A team moves a classic group to group.protocol=consumer one consumer at a time and back
    (Kafka's group.consumer.migration.policy=bidirectional, the default): a consumer-protocol
    member joining a classic group with members upgrades it, classic members keep working in
    the consumer group, and the last consumer-protocol member leaving downgrades it. Every
    batch produced along the way is consumed exactly once by whoever owns it."""
    if ConsumerGroupType is None:
        pytest.skip("confluent-kafka too old to report the group type")
    b = kbroker
    topic = create_topic(b, unique_topic("mig"), 6)
    group = unique_topic("g")
    admin = ck_admin(b)

    def group_type():
        return admin.describe_consumer_groups([group])[group].result(timeout=30).type

    def classic(name):
        return GroupMember(b, group, [topic], name=name,
                           **{"partition.assignment.strategy": strategy})

    def phase(members, tag, expected_type):
        wait_group_stable(members, all_partitions(topic, 6), timeout=60, hold=1.0)
        assert group_type() == expected_type, (tag, group_type())
        marks = {m.name: len(m.records) for m in members}
        batch = produce_numbered(b, topic, 6, 10, tag=tag)
        consume_until(members, len(batch))
        got = [(m.name,) + r for m in members for r in m.records[marks[m.name]:]]
        _exactly(got, batch, tag)
        for m in members:
            m.commit_consumed()
            assert not m.protocol_errors(), (tag, m.name, m.protocol_errors())

    c1 = classic("c1")
    everyone = [c1]
    try:
        phase([c1], "classic", ConsumerGroupType.CLASSIC)
        k1 = member(b, group, topic, "k1")
        everyone.append(k1)
        phase([c1, k1], "upgraded", ConsumerGroupType.CONSUMER)
        d = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert len(d.members) == 2, d.members
        c1.close()
        phase([k1], "classic-left", ConsumerGroupType.CONSUMER)
        c2 = classic("c2")
        everyone.append(c2)
        phase([k1, c2], "classic-joined", ConsumerGroupType.CONSUMER)
        k1.close()
        phase([c2], "downgraded", ConsumerGroupType.CLASSIC)
    finally:
        close_all(everyone)


def test_static_member_restart_keeps_its_partitions(kbroker):
    """A static member (group.instance.id) that restarts within its session keeps its
    partitions, and the others are not rebalanced: librdkafka leaves with epoch -2, the
    coordinator keeps the member's place, and the next incarnation takes it over (KIP-848)."""
    b = kbroker
    topic = create_topic(b, unique_topic("k848s"), 6)
    group = unique_topic("g")
    a = member(b, group, topic, "a", **{"group.instance.id": "inst-a"})
    c = member(b, group, topic, "c", **{"group.instance.id": "inst-c"})
    everyone = [a, c]
    try:
        wait_group_stable([a, c], all_partitions(topic, 6), timeout=60)
        a_share, c_share = a.assignment(), c.assignment()
        c_revokes = len(c.revokes)
        a.close()
        poll_members([c], 2.0)
        assert c.assignment() == c_share, "c was handed a's partitions while a restarted"
        a2 = member(b, group, topic, "a2", **{"group.instance.id": "inst-a"})
        everyone.append(a2)
        wait_group_stable([a2, c], all_partitions(topic, 6), timeout=60, hold=1.0)
        assert a2.assignment() == a_share
        assert c.assignment() == c_share
        assert len(c.revokes) == c_revokes, c.revokes[c_revokes:]
        assert not c.protocol_errors() and not a2.protocol_errors()
    finally:
        close_all(everyone)
