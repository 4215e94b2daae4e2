"""The long-term tier's first step (KIP-405, docs/rfcs/0004-long-term-tier.md), on one broker
with `remote.log.storage.system.enable=true` and a local-directory store: a topic with
`remote.storage.enable=true` has its closed segments copied, with their indexes, to the tier
and recorded in `__remote_log_metadata`; a restarted broker reads that topic back and copies
nothing twice; retention that moves the log start offset deletes the tier's copies too. Kafka's
refusals of `remote.storage.enable=true` (no tier on the broker, a compacted topic) hold.

The tests wait for files and metrics; they assert no timings.
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource, NewTopic

from conftest import (assert_delivered, ck_admin, ck_producer, create_topic, produce_sync,
                      unique_topic, wait_topic)

T = 60
SEGMENT_BYTES = 16384


def tier_config(tier_dir: Path) -> dict:
    return {
        "remote.log.storage.system.enable": True,
        "remote.log.storage.local.dir": str(tier_dir),
        "remote.log.manager.task.interval.ms": 200,
        "log.retention.check.interval.ms": 200,
    }


def metric(broker, name: str) -> float:
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
        text = r.read().decode()
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def local_segments(broker, topic: str) -> list[Path]:
    return sorted((broker.data_dir / f"{topic}-0").glob("*.log"))


def tier_objects(tier_dir: Path, suffix: str) -> list[Path]:
    return sorted(tier_dir.glob(f"tier/*/0/*.{suffix}"))


def wait_until(what: str, check, timeout: float = T):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def fill(broker, topic: str, records: int = 3000):
    producer = ck_producer(broker, **{"batch.size": 2048, "linger.ms": 0})
    reports = produce_sync(producer, topic,
                           [{"value": f"value-{i:06}-" + "x" * 80} for i in range(records)])
    assert_delivered(reports)


def tier_copies_match_local(broker, topic: str, tier_dir: Path) -> bool:
    """Every closed local segment has a .log object in the tier with the same bytes."""
    closed = local_segments(broker, topic)[:-1]
    by_start = {p.name.split("-")[0]: p for p in tier_objects(tier_dir, "log")}
    if not closed or len(by_start) != len(closed):
        return False
    for seg in closed:
        copy = by_start.get(seg.stem)
        if copy is None or copy.read_bytes() != seg.read_bytes():
            return False
    return True


def test_remote_storage_is_refused_without_the_brokers_tier(broker):
    topic = unique_topic("notier")
    fs = ck_admin(broker).create_topics(
        [NewTopic(topic, 1, 1, config={"remote.storage.enable": "true"})]
    )
    with pytest.raises(KafkaException) as e:
        fs[topic].result(timeout=T)
    assert e.value.args[0].name() == "INVALID_CONFIG", e.value
    assert "Tiered Storage functionality is disabled" in str(e.value)


def test_a_compacted_topic_cannot_tier(broker_factory, tmp_path):
    broker = broker_factory(tier_config(tmp_path / "tier"))
    topic = unique_topic("compacted")
    fs = ck_admin(broker).create_topics(
        [NewTopic(topic, 1, 1, config={"remote.storage.enable": "true",
                                       "cleanup.policy": "compact"})]
    )
    with pytest.raises(KafkaException) as e:
        fs[topic].result(timeout=T)
    assert e.value.args[0].name() == "INVALID_CONFIG", e.value


def test_closed_segments_are_copied_once_and_follow_the_log_start(broker_factory, tmp_path):
    tier_dir = tmp_path / "tier"
    broker = broker_factory(tier_config(tier_dir))
    topic = create_topic(broker, unique_topic("tiered"), config={
        "remote.storage.enable": "true",
        "segment.bytes": str(SEGMENT_BYTES),
    })
    fill(broker, topic)
    closed = len(local_segments(broker, topic)) - 1
    assert closed >= 5, local_segments(broker, topic)

    # Every closed segment is in the tier, byte for byte, with its indexes and checkpoint.
    wait_until("closed segments copied to the tier",
               lambda: tier_copies_match_local(broker, topic, tier_dir))
    for suffix in ("index", "timeindex", "leader-epoch-checkpoint"):
        assert len(tier_objects(tier_dir, suffix)) == closed, suffix
    assert metric(broker, "ferry_tier_segments_copied_total") == closed
    assert metric(broker, "ferry_tier_copy_errors_total") == 0
    assert metric(broker, "ferry_tier_remote_bytes") == sum(
        p.stat().st_size for p in tier_objects(tier_dir, "log"))
    md = ck_admin(broker).list_topics(timeout=10)
    assert "__remote_log_metadata" in md.topics

    # A restarted broker reads the metadata topic back and copies nothing again; new closed
    # segments are copied after the old ones.
    broker.restart()
    wait_topic(broker, topic, 1)
    fill(broker, topic, records=1000)
    wait_until("new segments copied after the restart",
               lambda: tier_copies_match_local(broker, topic, tier_dir))
    closed_now = len(local_segments(broker, topic)) - 1
    assert metric(broker, "ferry_tier_segments_copied_total") == closed_now - closed
    assert len(tier_objects(tier_dir, "log")) == closed_now

    # Retention moves the log start offset; the tier's copies below it go too.
    admin = ck_admin(broker)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic,
                              set_config={"remote.storage.enable": "true",
                                          "segment.bytes": str(SEGMENT_BYTES),
                                          "retention.bytes": str(3 * SEGMENT_BYTES)})
    admin.alter_configs([resource])[resource].result(timeout=T)
    wait_until("local retention to delete old segments",
               lambda: len(local_segments(broker, topic)) <= 5)
    wait_until("the tier to drop the copies below the log start",
               lambda: tier_copies_match_local(broker, topic, tier_dir))
    for suffix in ("index", "timeindex"):
        assert len(tier_objects(tier_dir, suffix)) == len(local_segments(broker, topic)) - 1
    assert metric(broker, "ferry_tier_segments_deleted_total") > 0


@pytest.fixture
def s3_tier(tmp_path):
    """An S3 API server (ferry-s3-test-server or s3s-fs) on loopback with a bucket `tier`:
    the broker config of a tier there."""
    from test_remote_wal import S3_KEY, S3_SECRET, S3Server

    server = S3Server(tmp_path / "s3", "tier")
    (tmp_path / "s3" / "tier").mkdir(parents=True, exist_ok=True)
    server.start()
    yield {
        "remote.log.storage.system.enable": True,
        "remote.log.storage.type": "s3",
        "remote.log.storage.s3.bucket": "tier",
        "remote.log.storage.s3.endpoint": server.endpoint,
        "remote.log.storage.s3.path.style": True,
        "remote.log.storage.s3.access.key.id": S3_KEY,
        "remote.log.storage.s3.secret.access.key": S3_SECRET,
        "remote.log.manager.task.interval.ms": 200,
        "log.retention.check.interval.ms": 200,
    }
    server.stop()


@pytest.mark.parametrize("store", ["local", "s3"])
def test_a_consumer_reads_the_tier_below_the_local_log(broker_factory, tmp_path, store, request):
    """With a small `local.retention.bytes` the disk keeps a few segments and the tier the
    rest; consumers read every record from offset 0, in order, across the tier and the local
    log; ListOffsets earliest and by timestamp see the tier; DeleteRecords moves the start in
    the tier too; all of it again after a kill -9. On a local directory and on an S3 API."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition
    from confluent_kafka import TopicPartition as TP

    from conftest import ck_consumer, consume_partition

    if store == "s3":
        broker = broker_factory(request.getfixturevalue("s3_tier"))
    else:
        broker = broker_factory(tier_config(tmp_path / "tier"))
    topic = create_topic(broker, unique_topic("tierread"), config={
        "remote.storage.enable": "true",
        "segment.bytes": str(SEGMENT_BYTES),
        "local.retention.bytes": str(3 * SEGMENT_BYTES),
    })
    records = 3000
    # Recent timestamps: retention.ms (7 days) must not expire them.
    base_ts = int(time.time() * 1000) - 3_600_000
    producer = ck_producer(broker, **{"batch.size": 2048, "linger.ms": 0})
    assert_delivered(produce_sync(producer, topic, [
        {"value": f"value-{i:06}-" + "x" * 80, "timestamp": base_ts + 10 * i}
        for i in range(records)
    ]))
    wait_until("local retention to keep a few segments",
               lambda: len(local_segments(broker, topic)) <= 5)
    local_start = int(local_segments(broker, topic)[0].stem)
    assert local_start > 1000, local_start

    def check_reads(first: int):
        c = ck_consumer(broker)
        try:
            low, high = c.get_watermark_offsets(TP(topic, 0), timeout=10)
            assert (low, high) == (first, records), (low, high)
            # By timestamp: a record far below the local log start, found in the tier.
            found = c.offsets_for_times([TP(topic, 0, base_ts + 10 * 1500)], timeout=10)
            assert found[0].offset == 1500, found
        finally:
            c.close()
        for isolation in ("read_uncommitted", "read_committed"):
            msgs = consume_partition(broker, topic, 0, expected=records - first,
                                     timeout=T, start_offset=OFFSET_BEGINNING,
                                     **{"isolation.level": isolation})
            assert [m.offset() for m in msgs] == list(range(first, records)), isolation
            assert all(m.value() == (f"value-{m.offset():06}-" + "x" * 80).encode()
                       for m in msgs), isolation

    check_reads(0)

    # DeleteRecords below the local log start: the tier stops serving what is below.
    admin = ck_admin(broker)
    done = admin.delete_records([TopicPartition(topic, 0, 1000)])
    low = done[TopicPartition(topic, 0, 1000)].result(timeout=T)
    assert low.low_watermark == 1000, low
    c = ck_consumer(broker)
    try:
        assert c.get_watermark_offsets(TP(topic, 0), timeout=10)[0] == 1000
    finally:
        c.close()
    msgs = consume_partition(broker, topic, 0, expected=records - 1000, timeout=T,
                             start_offset=500, **{"auto.offset.reset": "earliest"})
    assert msgs[0].offset() == 1000

    # The tier's metadata (copies and the log start) survives a kill -9.
    broker.kill9()
    broker.start()
    wait_topic(broker, topic, 1)
    check_reads(1000)


def test_copy_disable_makes_the_tier_read_only_and_turning_it_off_needs_delete(broker_factory,
                                                                               tmp_path):
    """KIP-950 as Kafka 4 has it: `remote.log.copy.disable=true` stops the copies (the tier
    keeps serving what it holds, the local log goes back to `retention.*`); turning
    `remote.storage.enable` off is refused unless `remote.log.delete.on.disable=true` says the
    tier's copies go, and then they do."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    from conftest import consume_partition

    tier_dir = tmp_path / "tier"
    broker = broker_factory(tier_config(tier_dir))
    base = {"segment.bytes": str(SEGMENT_BYTES), "local.retention.bytes": str(3 * SEGMENT_BYTES)}
    topic = create_topic(broker, unique_topic("kip950"),
                         config={"remote.storage.enable": "true", **base})
    admin = ck_admin(broker)

    def incremental(changes: dict):
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in changes.items()]
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
        for f in admin.incremental_alter_configs([res]).values():
            f.result(timeout=T)

    fill(broker, topic, records=2000)
    wait_until("copies in the tier", lambda: tier_copies_match_local(broker, topic, tier_dir))
    wait_until("local retention", lambda: len(local_segments(broker, topic)) <= 5)
    copied = metric(broker, "ferry_tier_segments_copied_total")
    in_tier = len(tier_objects(tier_dir, "log"))

    # Read-only: nothing more is copied, and the local log keeps what retention.* allows (all
    # of it here), no longer only local.retention.bytes.
    incremental({"remote.log.copy.disable": "true"})
    fill(broker, topic, records=2000)
    time.sleep(1.5)  # several manager passes (every 200 ms) and retention checks
    assert metric(broker, "ferry_tier_segments_copied_total") == copied
    assert len(tier_objects(tier_dir, "log")) == in_tier
    assert len(local_segments(broker, topic)) > 10, "local retention is retention.* again"
    msgs = consume_partition(broker, topic, 0, expected=4000, timeout=T, start_offset=0)
    assert [m.offset() for m in msgs] == list(range(4000)), "the tier still serves its part"

    # Turning the tier off must say what becomes of its data.
    with pytest.raises(KafkaException) as e:
        incremental({"remote.storage.enable": "false"})
    assert e.value.args[0].name() == "INVALID_CONFIG", e.value
    assert "remote.log.delete.on.disable=true" in str(e.value)
    incremental({"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    wait_until("the tier's copies deleted", lambda: not tier_objects(tier_dir, "log"))
    local_start = int(local_segments(broker, topic)[0].stem)
    msgs = consume_partition(broker, topic, 0, expected=4000 - local_start, timeout=T,
                             start_offset=0)
    assert msgs[0].offset() == local_start and msgs[-1].offset() == 3999
