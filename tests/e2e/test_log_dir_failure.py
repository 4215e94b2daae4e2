"""A failed log directory (issue 17): three brokers with two `log.dirs` each; the second dir
of broker 2 is a small ext4 file system on a loop device that the test shuts down
(EXT4_IOC_SHUTDOWN: every later I/O on it returns EIO), under an acks=all idempotent load.

As Kafka does, broker 2 takes that dir offline and keeps running: the controller moves the
leadership of its partitions there to other in-sync replicas, the partitions of its other dir
keep being served by it, DescribeLogDirs reports KAFKA_STORAGE_ERROR for the failed dir, and
every acknowledged record reads back.

Needs root (mount); skipped otherwise.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import struct
import subprocess
import time

import pytest
from kafka.admin import KafkaAdminClient

from conftest import unique_topic
from test_cluster import Cluster, create_topic
from test_cluster_failover import (
    FAST,
    MIN_ISR,
    NumberedProducer,
    check_acknowledged_exactly_once,
    metric,
    partitions_of,
    wait_for,
)

VICTIM = 2
PARTITIONS = 8
KAFKA_STORAGE_ERROR = 56
# _IOW('X', 125, __u32): the ext4 "going down" ioctl; NOLOGFLUSH shuts the file system down
# at once, without flushing its journal, as a dying disk would.
EXT4_IOC_SHUTDOWN = 0x8004587D
EXT4_GOING_FLAGS_NOLOGFLUSH = 2


def run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def make_disk(image, mount) -> str | None:
    """Formats `image` (64 MiB, sparse) as ext4 and mounts it at `mount`; why not, if it fails."""
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    made = run("mkfs.ext4", "-q", "-F", str(image))
    if made.returncode != 0:
        return f"mkfs.ext4 failed: {made.stderr.strip()}"
    mounted = run("mount", "-o", "loop", str(image), str(mount))
    if mounted.returncode != 0:
        return f"cannot mount a loop device: {mounted.stderr.strip()}"
    return None


def unmount(mount) -> None:
    if run("umount", str(mount)).returncode != 0:
        run("umount", "-l", str(mount))


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MiB ext4 file system mounted at `tmp_path/disk`; unmounted and deleted at the end,
    whatever happened."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a loop device")
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("mkfs.ext4 not installed")
    image = tmp_path / "disk.img"
    mount = tmp_path / "disk"
    mount.mkdir()
    why = make_disk(image, mount)
    if why is not None:
        image.unlink(missing_ok=True)
        pytest.skip(why)
    try:
        yield mount
    finally:
        unmount(mount)
        image.unlink(missing_ok=True)


def shut_down(mount) -> None:
    fd = os.open(mount, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
    finally:
        os.close(fd)


@pytest.fixture
def cluster(tmp_path, small_disk):
    c = Cluster(tmp_path, FAST)
    for b in c.brokers:
        second = small_disk / "logs" if b is c.by_id(VICTIM) else b.workdir / "data2"
        b.extra_config["log.dirs"] = f"{b.data_dir},{second}"
    c.start()
    yield c
    c.stop()


def log_dirs(broker) -> dict:
    """{log dir: (error code, {topic: sorted partitions})} as `broker` reports them."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        [answer] = admin.describe_log_dirs(brokers=[VICTIM])
    finally:
        admin.close()
    return {
        d["log_dir"]: (d["error_code"], {t["name"]: sorted(p["partition_index"]
                                                           for p in t["partitions"])
                                         for t in d["topics"]})
        for d in answer["log_dirs"]
    }


def offline_replicas(broker, topic: str) -> dict:
    """{partition: offline replicas} in `broker`'s Metadata answer."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        [t] = admin.describe_topics([topic])
    finally:
        admin.close()
    return {p["partition_index"]: sorted(p["offline_replicas"]) for p in t["partitions"]}


def test_a_failed_log_dir_moves_leadership_and_loses_nothing(cluster, small_disk):
    victim = cluster.by_id(VICTIM)
    failed_dir = str(small_disk / "logs")
    healthy_dir = str(victim.data_dir)
    topic = unique_topic("logdir")
    create_topic(cluster, topic, PARTITIONS, MIN_ISR)

    before = log_dirs(victim)
    on_failed = before[failed_dir][1].get(topic, [])
    on_healthy = before[healthy_dir][1].get(topic, [])
    assert on_failed and on_healthy, f"partitions should land in both dirs: {before}"
    layout = partitions_of(cluster, topic)
    led_on_failed = [p for p in on_failed if layout[p][0] == VICTIM]
    assert led_on_failed, f"broker {VICTIM} should lead a partition of the failed dir: {layout}"

    producer = NumberedProducer(cluster.bootstrap, topic, PARTITIONS)
    producer.start()
    try:
        producer.wait_progress()
        faulted = time.monotonic()
        shut_down(small_disk)

        def moved():
            now = partitions_of(cluster, topic)
            return all(now[p][0] != VICTIM and VICTIM not in now[p][2] for p in on_failed)

        wait_for("leadership and ISR membership moved off the failed dir", moved, timeout=60)
        moved_after = time.monotonic() - faulted
        print(f"\nfault to leadership moved: {moved_after:.2f} s "
              f"(heartbeat {FAST['broker.heartbeat.interval.ms']} ms)")

        # Load goes on, now led elsewhere for the failed dir's partitions.
        producer.wait_progress(300, timeout=60)
        assert victim.alive(), "a failed log dir must not stop the broker"

        after = wait_for("DescribeLogDirs reports the failed dir",
                         lambda: (lambda d: d if d[failed_dir][0] == KAFKA_STORAGE_ERROR
                                  else None)(log_dirs(victim)))
        assert after[healthy_dir][0] == 0, after
        assert after[healthy_dir][1].get(topic) == on_healthy, after
        assert metric(victim, "ferry_offline_log_directory_count") == 1

        # Every broker's Metadata lists broker 2's replicas of the failed dir as offline.
        for b in cluster.brokers:
            listed = offline_replicas(b, topic)
            assert all(listed[p] == ([VICTIM] if p in on_failed else [])
                       for p in range(PARTITIONS)), (b.bootstrap, listed)

        # The other dir keeps serving: broker 2 stays in sync there (and leads where it did).
        now = partitions_of(cluster, topic)
        for p in on_healthy:
            assert VICTIM in now[p][2], f"partition {p} of the healthy dir left the ISR: {now[p]}"
    finally:
        producer.finish()
    check_acknowledged_exactly_once(cluster, topic, producer)
    assert victim.alive()
    # Said once, not per request.
    failures = victim.log_path.read_text(errors="replace").count("log dir failed")
    assert failures == 1, f"{failures} 'log dir failed' lines"

    # Restarted with the disk still failed, the broker starts with that dir offline (as Kafka
    # does): it serves the other dir and does not recreate the failed dir's partitions.
    victim.stop()
    victim.start()
    wait_for("the restarted broker reports the failed dir", lambda: (
        lambda d: d if d[failed_dir][0] == KAFKA_STORAGE_ERROR else None)(log_dirs(victim)))
    assert metric(victim, "ferry_offline_log_directory_count") == 1
    wait_for("the healthy dir's partitions back in sync on the restarted broker", lambda: all(
        VICTIM in partitions_of(cluster, topic)[p][2] for p in on_healthy), timeout=60)
    now = partitions_of(cluster, topic)
    assert all(VICTIM not in now[p][2] for p in on_failed), now

    # The operator's remedy: replace the disk (a new, empty file system at the same path) and
    # restart. The broker comes back with both dirs online, re-replicates the partitions the
    # disk held from the leaders and rejoins their ISR.
    victim.stop()
    unmount(small_disk)
    assert make_disk(small_disk.parent / "disk.img", small_disk) is None
    victim.start()
    wait_for(f"{topic}: every ISR back to 3", lambda: all(
        len(isr) == 3 for _, _, isr in partitions_of(cluster, topic).values()), timeout=90)
    healed = log_dirs(victim)
    assert healed[failed_dir][0] == 0, healed
    assert healed[failed_dir][1].get(topic) == on_failed, healed
    assert metric(victim, "ferry_offline_log_directory_count") == 0
    assert all(not v for v in offline_replicas(victim, topic).values())
    check_acknowledged_exactly_once(cluster, topic, producer)
