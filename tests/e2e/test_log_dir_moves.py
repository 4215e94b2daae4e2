"""Moving a replica between a broker's log dirs (AlterReplicaLogDirs, KIP-113), as
`kafka-reassign-partitions.sh` does with `log_dirs` in its JSON and kafka-python's
`alter_replica_log_dirs`: the move answers at once, runs while the partition takes produce
requests, and loses nothing; DescribeLogDirs shows where the replica is, and a restart finds
it there."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from kafka import TopicPartitionReplica
from kafka.errors import LogDirNotFoundError, NoError, ReplicaNotAvailableError

from conftest import (
    CLUSTER_SIZE,
    assert_delivered,
    ck_producer,
    consume_partition,
    create_topic,
    produce_sync,
    unique_topic,
)

pytestmark = pytest.mark.skipif(CLUSTER_SIZE > 1, reason="one broker with two log dirs")


def kp_admin(broker):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)


def placement(admin, topic: str) -> dict[str, list[tuple[int, bool, int]]]:
    """log dir -> [(partition, is_future, size)] of `topic` on the broker."""
    out: dict[str, list[tuple[int, bool, int]]] = {}
    for entry in admin.describe_log_dirs():
        for d in entry["log_dirs"]:
            assert d["error_code"] == 0, d
            for t in d["topics"]:
                if t["name"] == topic:
                    out.setdefault(d["log_dir"], []).extend(
                        (p["partition_index"], p["is_future_key"], p["partition_size"])
                        for p in t["partitions"]
                    )
    return out


def test_a_replica_moves_to_another_log_dir_under_load_and_loses_nothing(broker_factory):
    b = broker_factory({}, start=False)
    dirs = [b.data_dir / "disk-a", b.data_dir / "disk-b"]
    b.extra_config["log.dirs"] = ",".join(str(d) for d in dirs)
    # Small segments, so that the move copies many closed segments and the active one.
    b.extra_config["log.segment.bytes"] = 256 * 1024
    b.start()
    topic = create_topic(b, unique_topic("move"))
    producer = ck_producer(b, **{"acks": "all", "enable.idempotence": True})
    first = [{"value": f"before-{i}".encode() * 40, "partition": 0} for i in range(3000)]
    assert_delivered(produce_sync(producer, topic, first))

    admin = kp_admin(b)
    try:
        where = placement(admin, topic)
        assert len(where) == 1, where
        (src,) = where
        dest = next(str(d) for d in dirs if str(d) != src)

        # Records keep coming while the replica moves.
        during: list = []
        stop = threading.Event()

        def keep_producing():
            i = 0
            while not stop.is_set() or i < 500:
                batch = [{"value": f"during-{i + k}".encode() * 40, "partition": 0} for k in range(50)]
                during.extend(produce_sync(producer, topic, batch))
                i += 50

        t = threading.Thread(target=keep_producing)
        t.start()
        try:
            result = admin.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, b.node_ids[0]): dest})
            assert result == {TopicPartitionReplica(topic, 0, b.node_ids[0]): NoError}
            deadline = time.monotonic() + 60
            while True:
                where = placement(admin, topic)
                if list(where) == [dest] and all(not fut for _, fut, _ in where[dest]):
                    break
                assert time.monotonic() < deadline, f"still moving: {where}"
                time.sleep(0.2)
        finally:
            stop.set()
            t.join(timeout=60)
        assert_delivered(during)

        # Asking again for where it is now changes nothing.
        again = admin.alter_replica_log_dirs({(topic, 0, b.node_ids[0]): dest})
        assert list(again.values()) == [NoError]
        # A path that is not one of the broker's log dirs, and a partition it does not have.
        bad = admin.alter_replica_log_dirs({(topic, 0, b.node_ids[0]): str(b.data_dir / "nowhere")})
        assert list(bad.values()) == [LogDirNotFoundError]
        missing = admin.alter_replica_log_dirs({(topic, 7, b.node_ids[0]): dest})
        assert list(missing.values()) == [ReplicaNotAvailableError]
    finally:
        admin.close()
    assert not (dirs[0] if str(dirs[0]) == src else dirs[1]).joinpath(f"{topic}-0").exists()

    expected = [m["value"] for m in first] + [r[1].value() for r in during]
    got = consume_partition(b, topic, 0, expected=len(expected))
    assert [m.value() for m in got] == expected
    assert [m.offset() for m in got] == list(range(len(expected)))

    # A restart serves it from the new dir, whole.
    b.restart()
    admin = kp_admin(b)
    try:
        assert list(placement(admin, topic)) == [dest]
    finally:
        admin.close()
    got = consume_partition(b, topic, 0, expected=len(expected))
    assert [m.value() for m in got] == expected


def two_dir_broker(broker_factory):
    b = broker_factory({}, start=False)
    dirs = [b.data_dir / "disk-a", b.data_dir / "disk-b"]
    b.extra_config["log.dirs"] = ",".join(str(d) for d in dirs)
    b.start()
    return b, [str(d) for d in dirs]


def wait_for_placement(admin, topic: str, want: list[str], timeout: float = 60.0):
    """Waits until `topic`'s replicas are all in `want`, none of them a future replica."""
    deadline = time.monotonic() + timeout
    while True:
        where = placement(admin, topic)
        if sorted(where) == sorted(want) and all(not fut for ps in where.values() for _, fut, _ in ps):
            return
        assert time.monotonic() < deadline, f"not where expected: {where}"
        time.sleep(0.2)


def test_a_replica_to_come_is_created_in_the_log_dir_asked_for_it(broker_factory):
    """What `kafka-reassign-partitions.sh` relies on for a replica its reassignment adds: the
    dir named before the replica exists is where the broker creates it."""
    b, dirs = two_dir_broker(broker_factory)
    first = create_topic(b, unique_topic("placed"), partitions=1)
    admin = kp_admin(b)
    try:
        (loaded,) = placement(admin, first)
        # A new log goes to the dir with fewer logs; this one is asked for the busier dir.
        topic = unique_topic("wanted")
        replica = TopicPartitionReplica(topic, 0, b.node_ids[0])
        answer = admin.alter_replica_log_dirs({replica: loaded})
        assert answer == {replica: ReplicaNotAvailableError}
        create_topic(b, topic, partitions=1)
        wait_for_placement(admin, topic, [loaded])
        # A topic nobody asked a dir for still goes to the other dir.
        plain = create_topic(b, unique_topic("plain"), partitions=1)
        wait_for_placement(admin, plain, [d for d in dirs if d != loaded])
    finally:
        admin.close()


def test_a_move_that_a_stop_interrupted_starts_again_after_the_restart(broker_factory):
    b, dirs = two_dir_broker(broker_factory)
    topic = create_topic(b, unique_topic("resumed"), partitions=1)
    producer = ck_producer(b, **{"acks": "all"})
    records = [{"value": f"r-{i}".encode() * 40, "partition": 0} for i in range(2000)]
    assert_delivered(produce_sync(producer, topic, records))
    admin = kp_admin(b)
    try:
        (src,) = placement(admin, topic)
    finally:
        admin.close()
    dest = next(d for d in dirs if d != src)
    # What a kill during a move's copy leaves: the copy under its `-future` name.
    b.kill9()
    half = Path(dest) / f"{topic}-0.{int(time.time() * 1000)}-future"
    half.mkdir()
    (half / "00000000000000000000.log").write_bytes(b"\0" * 100)
    b.start()

    admin = kp_admin(b)
    try:
        wait_for_placement(admin, topic, [dest])
    finally:
        admin.close()
    assert not half.exists()
    got = consume_partition(b, topic, 0, expected=len(records))
    assert [m.value() for m in got] == [r["value"] for r in records]
