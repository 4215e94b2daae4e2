"""A broker whose log dir fills up (issue 17): it stays up, refuses what it cannot store with
Kafka's KAFKA_STORAGE_ERROR, keeps every acknowledged record, lets the operator free space by
deleting a topic or records, and takes produce again without a restart.

The log dir is a small tmpfs the test mounts itself (root only; skipped otherwise).
"""

import os
import subprocess
import time
import urllib.request

import pytest

from conftest import ck_admin, ck_consumer, ck_producer, create_topic, unique_topic

FS_MB = 96
RESERVE = 16 << 20  # metadata.log.reserve.bytes' default


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "small-fs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_MB}m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def metric(broker, name: str) -> dict[str, float]:
    """Every sample of one metric family, by its label string."""
    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            out[key[len(name):]] = float(value)
    return out


def produce_until_full(broker, topic: str, acked: dict, value: bytes, limit: int) -> dict:
    """Produces `limit` records acks=all; returns the error names of the refused ones.
    `acked` collects (partition, offset) -> value of every acknowledged record."""
    errors: dict[str, int] = {}

    def on_delivery(err, msg):
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()
        else:
            errors[err.name()] = errors.get(err.name(), 0) + 1

    p = ck_producer(broker, acks="all", **{"message.timeout.ms": 20000, "retries": 0,
                                            "enable.idempotence": False})
    for i in range(limit):
        while True:
            try:
                p.produce(topic, value=value + i.to_bytes(8, "big"), on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    p.flush(60)
    return errors


def fill_to_the_last_byte(path):
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 20, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError:
                pass


def read_all(broker, topic: str, partitions: int) -> dict:
    from confluent_kafka import TopicPartition

    c = ck_consumer(broker)
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, eof = {}, set()
    deadline = time.monotonic() + 60
    while len(eof) < partitions and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            if m.error().code() == m.error()._PARTITION_EOF:
                eof.add(m.partition())
                continue
            raise AssertionError(f"consume error: {m.error()}")
        got[(m.partition(), m.offset())] = m.value()
    c.close()
    return got


def test_full_disk_refuses_keeps_acked_frees_space_and_resumes(small_fs, broker_factory):
    # small_fs first: it is unmounted after the broker stops.
    broker = broker_factory({"log.dirs": str(small_fs), "log.segment.bytes": 8 << 20,
                             "metadata.log.reserve.bytes": RESERVE})
    topic = create_topic(broker, unique_topic("fill"), partitions=2)
    value = os.urandom(16 << 10)
    acked: dict = {}
    # More than the file system holds: the tail is refused.
    errors = produce_until_full(broker, topic, acked, value, (FS_MB << 20) // len(value) + 800)
    assert acked, "nothing was acknowledged before the disk filled"
    assert errors, "the disk never filled"
    assert set(errors) <= {"KAFKA_STORAGE_ERROR", "_MSG_TIMED_OUT"}, errors
    assert "KAFKA_STORAGE_ERROR" in errors, errors
    assert broker.alive()

    # The broker says which dir is full.
    full = metric(broker, "ferry_log_dir_full")
    assert any(v == 1 for v in full.values()), full
    assert "log dir is full" in broker.log_tail(400)

    # Every acknowledged record reads back, and nothing else.
    got = read_all(broker, topic, 2)
    assert got == acked

    # The worst case: not one free block left (another writer took the last of it).
    fill_to_the_last_byte(small_fs / "filler")

    # The operator's remedy: delete the topic. The controller's metadata log shares the disk.
    admin = ck_admin(broker)
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)

    # Space comes back and produce resumes without a restart.
    topic2 = create_topic(broker, unique_topic("after"), partitions=1)
    acked2: dict = {}
    errors2 = produce_until_full(broker, topic2, acked2, value, 200)
    assert not errors2, errors2
    assert len(acked2) == 200
    assert read_all(broker, topic2, 1) == acked2
    deadline = time.monotonic() + 30
    while any(v == 1 for v in metric(broker, "ferry_log_dir_full").values()):
        assert time.monotonic() < deadline, "the full-disk metric never cleared"
        time.sleep(0.5)


def test_restart_on_a_full_disk_then_delete_records_frees_space(small_fs, broker_factory):
    broker = broker_factory({"log.dirs": str(small_fs), "log.segment.bytes": 4 << 20,
                             "metadata.log.reserve.bytes": RESERVE})
    topic = create_topic(broker, unique_topic("full-restart"), partitions=1)
    value = os.urandom(16 << 10)
    acked: dict = {}
    errors = produce_until_full(broker, topic, acked, value, (FS_MB << 20) // len(value) + 800)
    assert "KAFKA_STORAGE_ERROR" in errors, errors
    fill_to_the_last_byte(small_fs / "filler")

    # A restart on a disk without one free block: the broker comes back and serves what it
    # acknowledged (its shutdown and load write nothing they cannot do without).
    broker.restart()
    assert read_all(broker, topic, 1) == acked

    # DeleteRecords up to the end: the segments below the new log start go, and produce
    # resumes on the same partition.
    from confluent_kafka import TopicPartition

    end = max(o for (_, o) in acked) + 1
    admin = ck_admin(broker, **{"client.id": "after-restart"})  # not the cached pre-restart one
    futures = admin.delete_records([TopicPartition(topic, 0, end)], request_timeout=60)
    for f in futures.values():
        f.result(timeout=60)
    more: dict = {}
    deadline = time.monotonic() + 60
    while True:
        errs = produce_until_full(broker, topic, more, value, 20)
        if not errs:
            break
        assert time.monotonic() < deadline, f"produce did not resume: {errs}"
        time.sleep(1)
    assert len(more) >= 20
    assert all(o >= end for (_, o) in more)


def test_retention_frees_a_full_disk_with_no_free_block(small_fs, broker_factory):
    broker = broker_factory({"log.dirs": str(small_fs), "log.segment.bytes": 4 << 20,
                             "metadata.log.reserve.bytes": RESERVE,
                             "log.retention.check.interval.ms": 500})
    topic = create_topic(broker, unique_topic("full-retention"), partitions=1)
    value = os.urandom(16 << 10)
    acked: dict = {}
    errors = produce_until_full(broker, topic, acked, value, (FS_MB << 20) // len(value) + 800)
    assert "KAFKA_STORAGE_ERROR" in errors, errors

    # The operator lowers retention (a metadata write: the reserve lets it through), then
    # the disk loses its last free block before retention runs.
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = ck_admin(broker)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", str(8 << 20),
                    incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=60)
    fill_to_the_last_byte(small_fs / "filler")

    # Retention deletes segments even though it cannot write its checkpoint first, and
    # produce resumes.
    more: dict = {}
    deadline = time.monotonic() + 60
    while True:
        errs = produce_until_full(broker, topic, more, value, 20)
        if not errs:
            break
        assert time.monotonic() < deadline, f"produce did not resume: {errs}"
        time.sleep(1)
    got = read_all(broker, topic, 1)
    assert {k: v for k, v in acked.items() if k in got} == {k: got[k] for k in acked if k in got}
    assert all(got.get(k) == v for k, v in more.items())
    assert broker.alive()
