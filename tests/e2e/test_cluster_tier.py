"""The long-term tier (KIP-405) in a three-broker cluster sharing one tier (a local directory
every broker uses as `remote.log.storage.local.dir`): an RF=3 topic with
`remote.storage.enable=true`, small segments and a small `local.retention.bytes` keeps most of
its data only in the tier.

- After kill -9 of the leader, the new leader knows the tier's segments (from
  `__remote_log_metadata`), serves a consumer from offset 0 across the tier and its local
  log, and goes on copying after what the tier holds (no two copies of the same offsets).
- A replica whose partition directory was wiped, or that was down while the leader's local
  log start moved past its log end, catches up without copying the tier: the
  leader answers OFFSET_MOVED_TO_TIERED_STORAGE, the replica starts its log at the leader's
  local log start with the tier's leader epochs and producer state (its log start is > 0).

The tests wait for files, metadata and metrics; they assert no timings.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING

from conftest import assert_delivered, ck_producer, consume_partition, produce_sync, unique_topic
from test_cluster import Cluster, create_topic
from test_cluster_failover import FAST, metric, partitions_of, wait_for

T = 90
SEGMENT_BYTES = 16384
RECORD = "x" * 80


def tier_config(tier_dir: Path) -> dict:
    return {
        **FAST,
        "remote.log.storage.system.enable": True,
        "remote.log.storage.local.dir": str(tier_dir),
        "remote.log.manager.task.interval.ms": 200,
        "log.retention.check.interval.ms": 200,
    }


@pytest.fixture
def tiered_cluster(tmp_path):
    tier_dir = tmp_path / "tier"
    c = Cluster(tmp_path, tier_config(tier_dir))
    c.tier_dir = tier_dir
    c.start()
    yield c
    c.stop()


def value(i: int) -> str:
    return f"value-{i:06}-{RECORD}"


def fill(cluster, topic: str, first: int, count: int):
    producer = ck_producer(cluster, **{"batch.size": 2048, "linger.ms": 0, "acks": "all",
                                       "enable.idempotence": True})
    assert_delivered(produce_sync(producer, topic,
                                  [{"value": value(i)} for i in range(first, first + count)]))


def local_segments(broker, topic: str) -> list[Path]:
    return sorted((broker.data_dir / f"{topic}-0").glob("*.log"))


def tier_log_starts(tier_dir: Path) -> list[int]:
    """The start offsets of the segments in the tier (`<start>-<segment id>.log` objects)."""
    return sorted(int(p.name.split("-")[0]) for p in tier_dir.glob("tier/*/0/*.log"))


def leader_of(cluster, topic: str) -> int:
    return wait_for("a leader", lambda: partitions_of(cluster, topic)[0][0] > 0
                    and partitions_of(cluster, topic)[0][0])


def create_tiered(cluster, prefix: str) -> str:
    name = unique_topic(prefix)
    create_topic(cluster, name, 1, config={
        "remote.storage.enable": "true",
        "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.bytes": str(3 * SEGMENT_BYTES),
        "min.insync.replicas": "2",
    })
    return name


def check_all_records(cluster, topic: str, total: int):
    msgs = consume_partition(cluster, topic, 0, expected=total, timeout=T,
                             start_offset=OFFSET_BEGINNING)
    assert [m.offset() for m in msgs] == list(range(total))
    assert all(m.value() == value(m.offset()).encode() for m in msgs)


def mostly_tiered(cluster, topic: str, broker) -> int:
    """Waits until `broker` keeps a few local segments and returns its local log start."""
    wait_for("local retention to keep a few segments",
             lambda: 0 < len(local_segments(broker, topic)) <= 5, timeout=T)
    return int(local_segments(broker, topic)[0].stem)


def test_after_kill9_of_the_leader_the_new_leader_serves_and_copies_the_tier(tiered_cluster):
    c = tiered_cluster
    topic = create_tiered(c, "tierfail")
    fill(c, topic, 0, 3000)
    old = leader_of(c, topic)
    local_start = mostly_tiered(c, topic, c.by_id(old))
    assert local_start > 1500, local_start
    copied_before = tier_log_starts(c.tier_dir)
    assert copied_before and copied_before[0] == 0, copied_before

    c.by_id(old).kill9()
    new = wait_for("a new leader", lambda: (lambda l: l > 0 and l != old and l)(
        partitions_of(c, topic)[0][0]), timeout=T)
    check_all_records(c, topic, 3000)

    # The new leader copies what comes next, after what the tier holds: no offset twice.
    fill(c, topic, 3000, 2000)
    wait_for("the new leader copying to the tier",
             lambda: metric(c.by_id(new), "ferry_tier_segments_copied_total") >= 3, timeout=T)
    starts = tier_log_starts(c.tier_dir)
    assert len(starts) == len(set(starts)), starts
    assert starts[:len(copied_before)] == copied_before
    mostly_tiered(c, topic, c.by_id(new))
    check_all_records(c, topic, 5000)

    # The new leader reports the topic's size in the tier; the followers report none.
    def tier_bytes():
        return sum(p.stat().st_size for p in c.tier_dir.glob("tier/*/0/*.log"))

    def labelled(broker, name):
        return metric(broker, f'{name}{{topic="{topic}"}}')

    wait_for("the new leader's remote size gauge",
             lambda: labelled(c.by_id(new), "ferry_tier_remote_log_size_bytes") == tier_bytes(),
             timeout=T)
    assert labelled(c.by_id(new), "ferry_tier_remote_log_segments") == len(
        tier_log_starts(c.tier_dir))
    follower = next(b for b in c.brokers if b.alive() and b is not c.by_id(new))
    assert labelled(follower, "ferry_tier_remote_log_size_bytes") == 0

    # The new leader deletes from the tier too: DeleteRecords below its local log start
    # removes the segments wholly below the new start, and nothing below it is served.
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    done = admin.delete_records([TopicPartition(topic, 0, 1000)])
    assert done[TopicPartition(topic, 0, 1000)].result(timeout=T).low_watermark == 1000
    # (At most the segment holding offset 1000 starts below it.)
    wait_for("the tier's segments wholly below 1000 deleted",
             lambda: sum(1 for s in tier_log_starts(c.tier_dir) if s < 1000) <= 1, timeout=T)
    msgs = consume_partition(c, topic, 0, expected=4000, timeout=T,
                             start_offset=OFFSET_BEGINNING)
    assert [m.offset() for m in msgs] == list(range(1000, 5000))

    # The old leader comes back as a follower and catches up.
    c.by_id(old).start()
    wait_for("the old leader back in the ISR",
             lambda: sorted(partitions_of(c, topic)[0][2]) == [1, 2, 3], timeout=T)


@pytest.mark.parametrize("how", ["wiped", "lagging"])
def test_a_replica_below_the_local_log_start_starts_there_from_the_tier(tiered_cluster, how):
    """`wiped`: the replica's partition directory is gone (a new disk); `lagging`: it was
    down while the leader's local log start moved past its log end."""
    c = tiered_cluster
    topic = create_tiered(c, "tierwipe")
    fill(c, topic, 0, 3000)
    leader = leader_of(c, topic)
    local_start = mostly_tiered(c, topic, c.by_id(leader))
    follower = next(b for b in c.brokers if b is not c.by_id(leader))

    follower.stop()
    total = 3500 if how == "wiped" else 6000
    if how == "wiped":
        # It loses its copy of the partition (its controller state stays).
        shutil.rmtree(follower.data_dir / f"{topic}-0")
    fill(c, topic, 3000, total - 3000)
    if how == "lagging":
        local_start = wait_for("the leader's local log start past the replica's end",
                               lambda: (lambda s: s > 3000 and s)(
                                   mostly_tiered(c, topic, c.by_id(leader))), timeout=T)
    follower.start()
    wait_for("the wiped replica back in the ISR",
             lambda: sorted(partitions_of(c, topic)[0][2]) == [1, 2, 3], timeout=T)

    # It started at (or just past) the leader's local log start, not at 0: the tier's data
    # was not copied across.
    segs = local_segments(follower, topic)
    first = int(segs[0].stem)
    assert first >= local_start > 0, (first, local_start)
    logs = "".join(p.read_text(errors="replace") for p in follower.workdir.glob("ferry-*.log"))
    started = [line for line in logs.splitlines()
               if "starting this replica's log from the long-term tier" in line]
    assert started, "the replica did not start from the tier"
    # With the idempotent producer's state, from the snapshot copied with the segment.
    assert "producer_snapshot=true" in started[-1], started[-1]
    part_dir = follower.data_dir / f"{topic}-0"
    # Its leader epochs come from the tier's checkpoint: they reach below its own first
    # offset (a log merely restarted there would know epochs from its first batch on).
    lines = (part_dir / "leader-epoch-checkpoint").read_text().split("\n")
    epochs = [tuple(int(x) for x in line.split()) for line in lines[2:] if line.strip()]
    assert epochs and epochs[0][1] < first, (epochs, first)

    # It serves as leader: every record from 0, the tier's and its own.
    c.by_id(leader).kill9()
    wait_for("the wiped replica or the other one leading",
             lambda: (lambda l: l > 0 and l != leader and l)(partitions_of(c, topic)[0][0]),
             timeout=T)
    check_all_records(c, topic, total)
