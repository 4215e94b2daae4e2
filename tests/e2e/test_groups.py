"""Consumer groups over the classic protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup,
OffsetCommit/OffsetFetch, group admin APIs) with librdkafka, kafka-python and kafkajs."""

from __future__ import annotations

import json
import logging
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import (ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError,
                             KafkaException, TopicPartition)

from conftest import (GROUP_BROKER_CONFIG, JS_DIR, GroupMember, all_partitions, ck_admin,
                      close_all, consume_until, create_topic, kafka_error_code, poll_members,
                      produce_numbered, unique_topic, wait_group_stable)

try:
    from confluent_kafka import ConsumerGroupType
except ImportError:  # pragma: no cover - pinned client has it
    ConsumerGroupType = None


@pytest.fixture
def gbroker(broker_factory):
    return broker_factory(dict(GROUP_BROKER_CONFIG))


def _by_member(records):
    out: dict = {}
    for name, t, p, _o, _k, _v in records:
        out.setdefault(name, set()).add((t, p))
    return out


def _assert_exactly(records, expected: set, what: str):
    keys = [(p, o) for _n, _t, p, o, _k, _v in records]
    dups = sorted({k for k in keys if keys.count(k) > 1})
    assert not dups, f"{what}: {len(dups)} records delivered twice, e.g. {dups[:10]}"
    missing = sorted(expected - set(keys))
    extra = sorted(set(keys) - expected)
    assert not missing and not extra, (
        f"{what}: missing {len(missing)} {missing[:10]}, unexpected {len(extra)} {extra[:10]}")


# --- 1. members split a topic and consume everything exactly once ----------------------------


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
@pytest.mark.parametrize("n_members", [2, 3])
def test_members_split_partitions_exactly_once(gbroker, n_members, strategy):
    b = gbroker
    topic = create_topic(b, unique_topic("grp"), 6)
    group = unique_topic("g")
    members = [GroupMember(b, group, [topic], name=f"m{i}",
                           **{"partition.assignment.strategy": strategy})
               for i in range(n_members)]
    try:
        wait_group_stable(members, all_partitions(topic, 6), timeout=60)
        shares = {m.name: m.assignment() for m in members}
        assert all(len(s) == 6 // n_members for s in shares.values()), \
            f"unbalanced {strategy} assignment: {shares}"
        revokes_before = {m.name: len(m.revokes) for m in members}

        expected = produce_numbered(b, topic, 6, 40)
        got = consume_until(members, len(expected), timeout=60)
        _assert_exactly(got, expected, f"{n_members} members/{strategy}")
        for name, owned in _by_member(got).items():
            assert owned <= shares[name], f"{name} consumed {owned - shares[name]} it did not own"
        for m in members:
            assert m.assignment() == shares[m.name], f"{m.name}: assignment changed while stable"
            assert len(m.revokes) == revokes_before[m.name], f"{m.name}: revoked while stable"
            assert not m.protocol_errors(), f"{m.name}: {m.protocol_errors()}"
    finally:
        close_all(members)


# --- 2. a member leaves / dies: the other takes over -----------------------------------------


def test_member_leave_hands_partitions_over(gbroker):
    b = gbroker
    topic = create_topic(b, unique_topic("grp"), 6)
    group = unique_topic("g")
    a = GroupMember(b, group, [topic], name="a", **{"partition.assignment.strategy": "range"})
    c = GroupMember(b, group, [topic], name="c", **{"partition.assignment.strategy": "range"})
    try:
        wait_group_stable([a, c], all_partitions(topic, 6), timeout=60)
        batch1 = produce_numbered(b, topic, 6, 20, tag="b1")
        _assert_exactly(consume_until([a, c], len(batch1)), batch1, "before leave")
        a.commit_consumed()
        c.commit_consumed()

        mark = len(c.records)
        a.close()  # sends LeaveGroup
        took = wait_group_stable([c], all_partitions(topic, 6), timeout=6 + 30, hold=1.0)
        print(f"takeover after LeaveGroup: {took:.2f}s")

        batch2 = produce_numbered(b, topic, 6, 20, tag="b2")
        consume_until([c], len(batch2), timeout=60)
        after = [("c",) + r for r in c.records[mark:]]
        _assert_exactly(after, batch2, "survivor after leave (committed offsets honoured)")
        assert not c.protocol_errors(), c.protocol_errors()
    finally:
        close_all([a, c])


CHILD_MEMBER = r"""
import json, sys, time
from confluent_kafka import Consumer
cfg = json.loads(sys.argv[1])
topic = cfg.pop("_topic")
c = Consumer(cfg)
c.subscribe([topic])
last = 0.0
while True:
    m = c.poll(0.1)
    if m is not None and not m.error():
        c.commit(message=m, asynchronous=False)
        print(json.dumps({"c": [m.partition(), m.offset()]}), flush=True)
    if time.monotonic() - last > 0.2:
        last = time.monotonic()
        print(json.dumps({"a": sorted(tp.partition for tp in c.assignment())}), flush=True)
"""


class ChildMember:
    """A confluent-kafka group member in its own process (so it can be SIGKILLed). It commits
    every record synchronously before reporting it."""

    def __init__(self, broker, group, topic, **conf):
        cfg = {"bootstrap.servers": broker.bootstrap, "group.id": group, "_topic": topic,
               "auto.offset.reset": "earliest", "enable.auto.commit": False,
               "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
        cfg.update(conf)
        self.topic = topic
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD_MEMBER, json.dumps(cfg)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assignment_now: set = set()
        self.consumed: list = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                if "a" in ev:
                    self.assignment_now = {(self.topic, p) for p in ev["a"]}
                else:
                    self.consumed.append(tuple(ev["c"]))

    def assignment(self) -> set:
        with self.lock:
            return set(self.assignment_now) if self.proc.poll() is None else set()

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=15)

    def stderr(self) -> str:
        return self.proc.stderr.read() if self.proc.poll() is not None else ""


def test_member_killed_partitions_move_after_session_timeout(gbroker):
    b = gbroker
    topic = create_topic(b, unique_topic("grp"), 6)
    group = unique_topic("g")
    child = ChildMember(b, group, topic, **{"partition.assignment.strategy": "range"})
    c = GroupMember(b, group, [topic], name="c", **{"partition.assignment.strategy": "range"})
    try:
        wait_group_stable([c], all_partitions(topic, 6), timeout=60,
                          extra_assignments=lambda: [child.assignment()])
        child_share = child.assignment()
        batch1 = produce_numbered(b, topic, 6, 15, tag="b1")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            c.poll(0.05)
            mine = {(p, o) for _t, p, o, _k, _v in c.records}
            with child.lock:
                theirs = set(child.consumed)
            if mine | theirs >= batch1:
                break
        assert mine | theirs == batch1 and not (mine & theirs), (
            f"before kill: missing {sorted(batch1 - (mine | theirs))[:10]}, "
            f"overlap {sorted(mine & theirs)[:10]}")
        assert {(topic, p) for p, _o in theirs} <= child_share
        c.commit_consumed()

        mark = len(c.records)
        t0 = time.monotonic()
        child.kill()
        # session.timeout.ms=6000: the coordinator must expire the dead member and rebalance
        wait_group_stable([c], all_partitions(topic, 6), timeout=6 + 30, hold=0.5)
        took = time.monotonic() - t0
        print(f"takeover after SIGKILL: {took:.2f}s")
        assert took < 6 + 30

        batch2 = produce_numbered(b, topic, 6, 15, tag="b2")
        consume_until([c], len(batch2), timeout=60)
        after = [("c",) + r for r in c.records[mark:]]
        _assert_exactly(after, batch2, "survivor after SIGKILL of the other member")
        assert not c.protocol_errors(), c.protocol_errors()
    finally:
        if child.proc.poll() is None:
            child.kill()
        close_all([c])


# --- 3. committed offsets (and metadata) survive broker restarts -----------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill9"])
def test_committed_offsets_survive_restart(gbroker, sig):
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP

    b = gbroker
    n = 30
    topic = create_topic(b, unique_topic("grp"), 3)
    group = unique_topic("g")
    produce_numbered(b, topic, 3, n)
    commit_at = {p: 7 + 5 * p for p in range(3)}

    m1 = GroupMember(b, group, [topic], name="m1")
    try:
        wait_group_stable([m1], all_partitions(topic, 3), timeout=60, hold=0.5)
        consume_until([m1], 3 * n - len(m1.records))  # (some arrived while joining)
        assert len(m1.records) == 3 * n
        res = m1.consumer.commit(offsets=[TopicPartition(topic, p, o, metadata=f"meta-{p}")
                                          for p, o in commit_at.items()], asynchronous=False)
        assert all(tp.error is None for tp in res), res
        got = m1.consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
        assert {tp.partition: tp.offset for tp in got} == commit_at
        assert {tp.partition: tp.metadata for tp in got} == {p: f"meta-{p}" for p in range(3)}
    finally:
        m1.close()

    b.restart(sig)

    # OffsetFetch through both admin clients, metadata included
    r = ck_admin(b).list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    lst = r[group].result(timeout=60)
    fetched = {tp.partition: (tp.offset, tp.metadata) for tp in lst.topic_partitions
               if tp.topic == topic}
    assert fetched == {p: (o, f"meta-{p}") for p, o in commit_at.items()}, fetched
    ka = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=30000)
    try:
        kp = ka.list_group_offsets({group: None})[group]
        # confluent-kafka-python commits the metadata string with its C terminator (b"meta-0\0"):
        # kafka-python shows the stored bytes as they are
        assert {tp.partition: (om.offset, om.metadata.rstrip("\x00")) for tp, om in kp.items()
                if tp.topic == topic} == {p: (o, f"meta-{p}") for p, o in commit_at.items()}
    finally:
        ka.close()

    m2 = GroupMember(b, group, [topic], name="m2")
    try:
        expected = {(p, o) for p in range(3) for o in range(commit_at[p], n)}
        consume_until([m2], len(expected), timeout=60)
        got = [("m2",) + r for r in m2.records]
        _assert_exactly(got, expected, f"resume after {sig.name}")
        first = {}
        for _n, _t, p, o, _k, _v in got:
            first.setdefault(p, o)
        assert first == commit_at, f"first offsets after restart {first}, committed {commit_at}"
        got = m2.consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
        assert {tp.partition: tp.metadata for tp in got} == {p: f"meta-{p}" for p in range(3)}
    finally:
        m2.close()
    _ = KTP  # kafka-python TopicPartition is what list_group_offsets returns


# --- 4. admin: list / describe / delete groups, OffsetDelete ----------------------------------


def _ck_group_ids(future_result):
    return {g.group_id: g for g in future_result.valid}


def test_admin_list_describe_delete_groups(gbroker):
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP

    b = gbroker
    admin = ck_admin(b)
    topic = create_topic(b, unique_topic("grp"), 4)
    group = unique_topic("g")
    members = [GroupMember(b, group, [topic], name=f"m{i}", **{
        "partition.assignment.strategy": "range", "client.id": f"cid-{i}"}) for i in range(2)]
    ka = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=30000)
    try:
        wait_group_stable(members, all_partitions(topic, 4), timeout=60)
        expected = produce_numbered(b, topic, 4, 10)
        consume_until(members, len(expected))
        for m in members:
            m.commit_consumed()
        poll_members(members, 0.5)

        # ListGroups with state / type filters
        stable = _ck_group_ids(admin.list_consumer_groups(
            states={ConsumerGroupState.STABLE}).result(timeout=30))
        assert group in stable, f"{group} not listed as Stable: {sorted(stable)}"
        assert stable[group].state == ConsumerGroupState.STABLE
        assert not stable[group].is_simple_consumer_group
        empty = _ck_group_ids(admin.list_consumer_groups(
            states={ConsumerGroupState.EMPTY}).result(timeout=30))
        assert group not in empty
        if ConsumerGroupType is not None:
            classic = _ck_group_ids(admin.list_consumer_groups(
                types={ConsumerGroupType.CLASSIC}).result(timeout=30))
            assert group in classic
            assert classic[group].type == ConsumerGroupType.CLASSIC
            consumer_t = _ck_group_ids(admin.list_consumer_groups(
                types={ConsumerGroupType.CONSUMER}).result(timeout=30))
            assert group not in consumer_t

        # DescribeGroups (confluent-kafka)
        d = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert d.state == ConsumerGroupState.STABLE
        assert d.partition_assignor == "range"
        assert not d.is_simple_consumer_group
        assert d.coordinator.id in b.node_ids
        if ConsumerGroupType is not None:
            assert d.type == ConsumerGroupType.CLASSIC, d.type
        assert len(d.members) == 2, d.members
        described = sorted(sorted((tp.topic, tp.partition)
                                  for tp in mem.assignment.topic_partitions)
                           for mem in d.members)
        actual = sorted(sorted(m.assignment()) for m in members)
        assert described == actual, f"described {described}, members own {actual}"
        assert sorted(mem.client_id for mem in d.members) == ["cid-0", "cid-1"]
        assert all(mem.member_id and mem.host for mem in d.members)

        # kafka-python: list_groups / describe_groups
        kgroups = ka.list_groups()
        flat = json.dumps(kgroups, default=str)
        assert group in flat, f"kafka-python list_groups lacks {group}: {flat[:500]}"
        kd = ka.describe_groups([group])
        kd = kd[group] if isinstance(kd, dict) else kd[0]
        kd_s = json.dumps(kd, default=str)
        assert "Stable" in kd_s and "range" in kd_s, kd_s[:1000]
        assert kd_s.count("cid-") >= 2, kd_s[:1000]

        # DeleteGroups on an active group: NON_EMPTY_GROUP
        with pytest.raises(KafkaException) as ei:
            admin.delete_consumer_groups([group])[group].result(timeout=30)
        assert kafka_error_code(ei.value) == KafkaError.NON_EMPTY_GROUP, ei.value

        # OffsetDelete while the group is subscribed to the topic: GROUP_SUBSCRIBED_TO_TOPIC
        res = ka.delete_group_offsets(group, [KTP(topic, 0)])
        errs = {tp.partition: e for tp, e in res.items()}
        assert errs[0].__name__ == "GroupSubscribedToTopicError", errs
    finally:
        close_all(members)

    try:
        # once empty: listed as Empty, offsets kept
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            empty = _ck_group_ids(admin.list_consumer_groups(
                states={ConsumerGroupState.EMPTY}).result(timeout=30))
            if group in empty:
                break
            time.sleep(0.3)
        assert group in empty, f"{group} not Empty after both members left"
        d = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert d.state == ConsumerGroupState.EMPTY and not d.members

        # OffsetDelete on the empty group
        res = ka.delete_group_offsets(group, [KTP(topic, 0)])
        assert {tp.partition: e.__name__ for tp, e in res.items()} == {0: "NoError"}, res
        left = ka.list_group_offsets({group: None})[group]
        left = {tp.partition: om.offset for tp, om in left.items() if om.offset >= 0}
        assert left == {1: 10, 2: 10, 3: 10}, left

        # DeleteGroups succeeds once empty; the group and its offsets are gone
        admin.delete_consumer_groups([group])[group].result(timeout=30)
        listed = _ck_group_ids(admin.list_consumer_groups().result(timeout=30))
        assert group not in listed
        lst = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(4)])]
        )[group].result(timeout=30)
        assert all(tp.offset < 0 for tp in lst.topic_partitions), lst.topic_partitions
        try:
            d = admin.describe_consumer_groups([group])[group].result(timeout=30)
            assert d.state in (ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN) \
                or (d.state == ConsumerGroupState.EMPTY and not d.members), d.state
        except KafkaException as e:
            assert kafka_error_code(e) == KafkaError.GROUP_ID_NOT_FOUND, e
    finally:
        ka.close()


# --- 5. static membership ----------------------------------------------------------------------


@pytest.mark.parametrize("restarted", ["follower", "leader"])
def test_static_member_restart_keeps_partitions(gbroker, restarted):
    """KIP-345: a static member (group.instance.id) that restarts within the session timeout gets
    its partitions back and the group does not rebalance (Kafka answers a rejoining static leader
    with the current assignment too: old leader id before JoinGroup v9, skipAssignment since)."""
    b = gbroker
    topic = create_topic(b, unique_topic("grp"), 6)
    group = unique_topic("g")
    conf = {"partition.assignment.strategy": "range", "session.timeout.ms": 15000}
    # the first member forms generation 1 alone and stays leader when the second joins
    first = GroupMember(b, group, [topic], name="first", **{"group.instance.id": "inst-1"}, **conf)
    members = [first]
    try:
        wait_group_stable([first], all_partitions(topic, 6), timeout=60, hold=0.5)
        second = GroupMember(b, group, [topic], name="second", **{"group.instance.id": "inst-2"},
                             **conf)
        members.append(second)
        wait_group_stable([first, second], all_partitions(topic, 6), timeout=60)
        victim, other = (first, second) if restarted == "leader" else (second, first)
        v_share, o_share = victim.assignment(), other.assignment()
        o_assigns, o_revokes = len(other.assigns), len(other.revokes)

        victim.close()  # static member: librdkafka sends no LeaveGroup
        instance = "inst-1" if victim is first else "inst-2"
        again = GroupMember(b, group, [topic], name="again", **{"group.instance.id": instance},
                            **conf)
        members.append(again)
        took = wait_group_stable([again, other], all_partitions(topic, 6), timeout=30, hold=3.0)
        print(f"static {restarted} back after {took:.2f}s")
        assert again.assignment() == v_share, f"restarted got {again.assignment()}, had {v_share}"
        assert other.assignment() == o_share
        assert (len(other.assigns), len(other.revokes)) == (o_assigns, o_revokes), (
            f"restarting the static {restarted} rebalanced the group: the other member's "
            f"assigns {other.assigns} revokes {other.revokes}")

        expected = produce_numbered(b, topic, 6, 10)
        got = consume_until([again, other], len(expected))
        _assert_exactly(got, expected, "after static rejoin")
        by = _by_member(got)
        assert by.get("again", set()) <= v_share and by.get(other.name, set()) <= o_share
        assert not other.revokes[o_revokes:], other.revokes
    finally:
        close_all(members)


# --- 6. kafka-python and kafkajs groups --------------------------------------------------------


def test_kafka_python_group_consumes_everything(gbroker):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    b = gbroker
    topic = create_topic(b, unique_topic("grp"), 6)
    group = unique_topic("g")
    expected = produce_numbered(b, topic, 6, 25)
    consumers = [KafkaConsumer(topic, group_id=group, bootstrap_servers=b.bootstrap,
                               auto_offset_reset="earliest", enable_auto_commit=False,
                               session_timeout_ms=6000, heartbeat_interval_ms=1000,
                               client_id=f"kp-{i}") for i in range(1)]
    c = consumers[0]
    try:
        got = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(got) < len(expected):
            for recs in c.poll(timeout_ms=500).values():
                got.extend((r.partition, r.offset) for r in recs)
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            for recs in c.poll(timeout_ms=300).values():
                got.extend((r.partition, r.offset) for r in recs)
        assert len(got) == len(set(got)), "duplicates"
        assert set(got) == expected, f"missing {sorted(expected - set(got))[:10]}"
        assert {tp.partition for tp in c.assignment()} == set(range(6))
        c.commit()
        for p in range(6):
            assert c.committed(KTP(topic, p)) == 25
    finally:
        for x in consumers:
            x.close()
    # a confluent-kafka member of the same group resumes after kafka-python's commits
    m = GroupMember(b, group, [topic], name="ck")
    try:
        wait_group_stable([m], all_partitions(topic, 6), timeout=60, hold=0.5)
        more = produce_numbered(b, topic, 6, 2, tag="more")
        _assert_exactly(consume_until([m], len(more)), more, "after kafka-python commit")
    finally:
        m.close()


def _node():
    node = shutil.which("node")
    if node is None:
        pytest.fail("node not installed")
    if not (JS_DIR / "node_modules" / "kafkajs").exists():
        pytest.fail(f"kafkajs not installed in {JS_DIR} (run scripts/test-all.sh)")
    return node


def test_kafkajs_two_members_split_partitions(gbroker):
    b = gbroker
    topic = create_topic(b, unique_topic("grp"), 6)
    group = unique_topic("g")
    per = 20
    cmd = {"brokers": b.bootstrap.split(","), "topic": topic, "groupId": group, "members": 2,
           "partitions": 6, "expected": 6 * per, "timeoutMs": 90000}
    proc = subprocess.Popen([_node(), str(JS_DIR / "kafkajs_group.mjs"), json.dumps(cmd)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        def next_event(timeout):
            try:
                return json.loads(lines.get(timeout=timeout))
            except queue.Empty:
                proc.kill()
                raise AssertionError(f"kafkajs script silent for {timeout}s; "
                                     f"stderr: {proc.stderr.read()[-3000:]}")

        ready = next_event(90)
        assert ready.get("ready"), ready
        expected = produce_numbered(b, topic, 6, per)
        final = next_event(120)
        assert final.get("ok"), final
        assignments = [set(m["assignment"]) for m in final["members"]]
        assert all(assignments), assignments
        assert set().union(*assignments) == set(range(6))
        assert sum(len(a) for a in assignments) == 6, f"overlapping: {assignments}"
        recs = [(p, o) for m in final["members"] for p, o in m["records"]]
        assert len(recs) == len(set(recs)), "kafkajs members got duplicates"
        assert set(recs) == expected
        for m, a in zip(final["members"], assignments):
            assert m["records"], f"a kafkajs member consumed nothing: {final}"
            assert {p for p, _o in m["records"]} <= a
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


# --- 7. joining a stable group; the initial rebalance delay ------------------------------------


class _ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


BAD_LOG = re.compile(r"(?i)parse fail|protocol parse|failed to parse|_BAD_MSG|BAD_MSG|"
                     r"unsupported.?version|UNKNOWN_SERVER_ERROR|INVALID_REQUEST|malformed|"
                     r"underflow|CORRUPT")


def test_new_member_joins_stable_group_promptly(gbroker):
    b = gbroker
    topic = create_topic(b, unique_topic("grp"), 6)
    group = unique_topic("g")
    handler = _ListHandler()
    log = logging.getLogger(f"rdkafka-{group}")
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    conf = {"session.timeout.ms": 10000, "debug": "cgrp", "logger": log,
            "partition.assignment.strategy": "range"}
    a = GroupMember(b, group, [topic], name="a", **conf)
    n = None
    try:
        wait_group_stable([a], all_partitions(topic, 6), timeout=60, hold=1.0)
        batch1 = produce_numbered(b, topic, 6, 5, tag="b1")
        consume_until([a], len(batch1))
        a.commit_consumed()

        n = GroupMember(b, group, [topic], name="n", **conf)
        took = wait_group_stable([a, n], all_partitions(topic, 6), timeout=30, hold=1.0)
        print(f"new member assigned after {took:.2f}s")
        assert took < 30

        batch2 = produce_numbered(b, topic, 6, 5, tag="b2")
        _assert_exactly(consume_until([a, n], len(batch2)), batch2, "after join")
        poll_members([a, n], 0.5)
        for m in (a, n):
            assert not m.protocol_errors(), f"{m.name}: {m.protocol_errors()}"
            assert not m.errors, f"{m.name}: client errors {m.errors}"
        bad = [l for l in handler.lines if BAD_LOG.search(l)]
        assert not bad, "librdkafka logged protocol problems:\n" + "\n".join(bad[:20])
        assert any("JoinGroup" in l for l in handler.lines), "debug=cgrp logs not captured"
    finally:
        close_all([a] + ([n] if n else []))
        log.removeHandler(handler)


def test_initial_rebalance_delay_default_is_honoured(broker_factory):
    """Default group.initial.rebalance.delay.ms (3000): the first rebalance of a new group waits,
    so two members started together land in one generation (nobody is revoked)."""
    b = broker_factory()
    topic = create_topic(b, unique_topic("grp"), 4)
    group = unique_topic("g")
    conf = {"partition.assignment.strategy": "range"}
    members = [GroupMember(b, group, [topic], name=f"m{i}", **conf) for i in range(2)]
    try:
        took = wait_group_stable(members, all_partitions(topic, 4), timeout=60, hold=1.0)
        print(f"first stable assignment after {took:.2f}s")
        assert took >= 2.0, f"first rebalance completed after {took:.2f}s, default delay is 3s"
        for m in members:
            assert len(m.assigns) == 1 and not m.revokes, (
                f"{m.name}: more than one generation: assigns {m.assigns} revokes {m.revokes}")
    finally:
        close_all(members)
