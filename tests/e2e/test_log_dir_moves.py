"""Moving a replica between a broker's log dirs (AlterReplicaLogDirs, KIP-113), as
`kafka-reassign-partitions.sh` does with `log_dirs` in its JSON and kafka-python's
`alter_replica_log_dirs`: the move answers at once, runs while the partition takes produce
requests, and loses nothing; DescribeLogDirs shows where the replica is, and a restart finds
it there."""

from __future__ import annotations

import threading
import time

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
