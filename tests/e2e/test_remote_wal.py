"""The remote WAL (KIP-1176) on a three-broker loopback cluster (racks az1..az3): followers of a
`remote.wal.enable=true` topic get their data through the object store of the leader's rack
instead of by Fetch across racks.

Run twice: with the `local` store (a directory per rack) and with one S3 API server per rack
(`ferry-s3-test-server`, built with the workspace, or the stock `s3s-fs` of
scripts/install-s3s-fs.sh), each holding its rack's bucket.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import FERRY_BIN, free_port, unique_topic
from test_cluster import Cluster, create_topic, cross_rack_received, log_bytes

PARTITIONS = 12
S3_KEY = "ferry-e2e-access"
S3_SECRET = "ferry-e2e-secret-key"


def s3_server_binary() -> tuple[str, bool]:
    """The S3 API server to run: `ferry-s3-test-server` (built with the workspace, next to the
    broker binary: s3s-fs's storage with TCP_NODELAY) when present, else the stock `s3s-fs`.
    Returns (path, whether it is ferry's)."""
    ours = Path(FERRY_BIN).parent / "ferry-s3-test-server"
    if ours.exists():
        return str(ours), True
    binary = shutil.which("s3s-fs") or str(Path.home() / ".cargo" / "bin" / "s3s-fs")
    if not Path(binary).exists():
        pytest.fail("no S3 test server: build the workspace or run scripts/install-s3s-fs.sh")
    return binary, False


class S3Server:
    """One S3 API server (one rack's zone) holding that rack's bucket."""

    def __init__(self, root: Path, rack: str):
        self.root = root
        self.rack = rack
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.binary, self.ours = s3_server_binary()
        (root / f"wal-{rack}").mkdir(parents=True, exist_ok=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        args = [self.binary, "--host", "127.0.0.1", "--port", str(self.port),
                "--access-key", S3_KEY, "--secret-key", S3_SECRET, str(self.root)]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        for _ in range(500):
            assert self.proc.poll() is None, f"{self.binary} exited during start-up"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return
            except OSError:
                time.sleep(0.02)
        raise TimeoutError(f"{self.binary} did not start")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def kill9(self):
        """The zone's store fails at once, requests in flight included."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


class S3Zones:
    """One S3 API server per rack (as S3 Express One Zone has a zonal endpoint per AZ), each
    with its rack's bucket; `start`/`stop` act on all of them (a store outage)."""

    def __init__(self, root: Path, racks=("az1", "az2", "az3")):
        self.servers = {rack: S3Server(root / rack, rack) for rack in racks}

    def bucket_dir(self, rack: str) -> Path:
        server = self.servers[rack]
        return server.root / f"wal-{rack}"

    def config(self) -> dict:
        return {
            "remote.wal.store": "s3",
            "remote.wal.buckets": ",".join(f"{r}=wal-{r}" for r in self.servers),
            "remote.wal.s3.endpoints": ",".join(
                f"{r}={s.endpoint}" for r, s in self.servers.items()),
            "remote.wal.s3.path.style": True,
            "remote.wal.s3.access.key.id": S3_KEY,
            "remote.wal.s3.secret.access.key": S3_SECRET,
        }

    def start(self):
        for s in self.servers.values():
            s.start()

    def stop(self):
        for s in self.servers.values():
            s.stop()


def local_buckets(root: Path, racks=("az1", "az2", "az3")) -> tuple[dict, dict]:
    """One bucket directory per rack under `root`: (rack -> directory, broker config)."""
    buckets = {rack: root / f"bucket-{rack}" for rack in racks}
    extra = {
        "remote.wal.store": "local",
        "remote.wal.buckets": ",".join(f"{r}={d}" for r, d in buckets.items()),
    }
    return buckets, extra


# What every remote-WAL cluster of these suites sets besides the store.
WAL_TUNING = {
    "remote.wal.upload.interval.ms": 20,
    # Debug builds on a loaded 2-core box: under a produce burst the WAL path can pause past the
    # 500 ms default (each pause answered by up to replica.fetch.max.bytes of classic data per
    # partition); a wider window keeps the bytes on the WAL path.
    "remote.wal.fallback.ms": 3000,
    "remote.wal.gc.interval.ms": 200,
    "remote.wal.orphan.grace.ms": 1000,
}


@pytest.fixture(params=["local", "s3"])
def wal_cluster(request, tmp_path):
    store = request.param
    s3 = None
    if store == "local":
        buckets, extra = local_buckets(tmp_path)
    else:
        s3 = S3Zones(tmp_path / "s3")
        s3.start()
        buckets = {rack: s3.bucket_dir(rack) for rack in ("az1", "az2", "az3")}
        extra = s3.config()
    extra.update(WAL_TUNING)
    c = Cluster(tmp_path / "cluster")
    for b in c.brokers:
        b.extra_config.update(extra)
    c.start()
    c.store = store
    c.s3 = s3
    c.buckets = buckets
    yield c
    c.stop()
    if s3 is not None:
        s3.stop()


def scrape(broker) -> str:
    return urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()


def metric_sum(cluster, name: str, **labels) -> float:
    """Sum of a metric's samples over every broker, filtered by labels."""
    total = 0.0
    pat = re.compile(r"^" + re.escape(name) + r"(\{[^}]*\})? ([0-9.e+-]+)$")
    for b in cluster.brokers:
        for line in scrape(b).splitlines():
            m = pat.match(line)
            if not m:
                continue
            have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
            if all(have.get(k) == v for k, v in labels.items()):
                total += float(m.group(2))
    return total


def produce(cluster, topic: str, total_bytes: int, acks: str, value_size: int = 10_000,
            partitions: list[int] | None = None) -> int:
    """Produces `total_bytes` round-robin over `partitions` (default: all of them)."""
    partitions = partitions if partitions is not None else list(range(PARTITIONS))
    producer = Producer({
        "bootstrap.servers": cluster.bootstrap,
        "acks": acks,
        "linger.ms": 5,
        "batch.size": 256 * 1024,
        "compression.type": "none",
        "queue.buffering.max.kbytes": 65536,
    })
    errors = []
    value = b"v" * value_size
    count = total_bytes // value_size
    for i in range(count):
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=value,
                                 partition=partitions[i % len(partitions)],
                                 on_delivery=lambda e, m: errors.append(e) if e else None)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 200 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    assert errors == []
    return count * value_size


def wait_identical(cluster, topic: str, timeout: float = 60, replicas: dict | None = None):
    """Waits until every replica of each partition holds the same log bytes; `replicas` maps a
    partition to its replicas' node ids (default: every broker of the cluster)."""
    def holders(pid):
        ids = replicas[pid] if replicas else cluster.node_ids
        return [cluster.by_id(i) for i in ids]

    deadline = time.monotonic() + timeout
    while True:
        diffs = [
            pid for pid in range(PARTITIONS)
            if len({log_bytes(b, topic, pid) for b in holders(pid)}) != 1
        ]
        if not diffs:
            return
        if time.monotonic() > deadline:
            sizes = {pid: [len(log_bytes(b, topic, pid)) for b in holders(pid)] for pid in diffs}
            raise AssertionError(f"replicas differ: {sizes}")
        time.sleep(0.5)


def test_remote_wal_replicates_through_the_object_store(wal_cluster):
    c = wal_cluster
    classic = unique_topic("classic")
    wal = unique_topic("wal")
    create_topic(c, wal, PARTITIONS, {"remote.wal.enable": "true"})
    create_topic(c, classic, PARTITIONS)
    mb = 1_000_000
    volume = 100 * mb if c.store == "local" else 40 * mb

    # At the producer's full rate, acks=1 and then acks=all: each keeps its replication bytes
    # in-zone on its own (the classic fallback is for a broken path, not a busy one).
    produced = 0
    for acks in ("1", "all"):
        before = cross_rack_received(c, "replication")
        part = produce(c, wal, volume // 2, acks)
        produced += part
        wait_identical(c, wal)
        wal_moved = cross_rack_received(c, "replication") - before
        ratio = wal_moved / part
        assert ratio < 0.03, (
            f"acks={acks}: {wal_moved} cross-rack replication bytes for {part} produced; "
            f"follower bytes: wal {metric_sum(c, 'ferry_remote_wal_follower_bytes_total', path='wal')}, "
            f"classic {metric_sum(c, 'ferry_remote_wal_follower_bytes_total', path='classic')}, "
            f"fallback ranges {metric_sum(c, 'ferry_remote_wal_fallback_ranges_total')}, "
            f"reports served classic {metric_sum(c, 'ferry_remote_wal_reports_served_classic_total')}, "
            f"switches to classic {metric_sum(c, 'ferry_remote_wal_classic_switches_total')}"
        )
    assert metric_sum(c, "ferry_remote_wal_follower_bytes_total", path="wal") > produced
    # Every stage of the path was measured.
    for stage in ("cut_wait", "put", "publish", "metadata_delivery", "get_queue", "get",
                  "append_wait", "report", "commit"):
        assert metric_sum(c, "ferry_remote_wal_stage_seconds_count", stage=stage) > 0, stage

    before = cross_rack_received(c, "replication")
    classic_produced = produce(c, classic, 5 * mb, "all")
    time.sleep(1.0)
    classic_ratio = (cross_rack_received(c, "replication") - before) / classic_produced
    assert 1.8 < classic_ratio < 2.6, classic_ratio

    # Objects carry slices of many partitions.
    count = metric_sum(c, "ferry_remote_wal_partitions_per_object_count")
    total = metric_sum(c, "ferry_remote_wal_partitions_per_object_sum")
    at_most_two = metric_sum(c, "ferry_remote_wal_partitions_per_object_bucket", le="2.0")
    assert count > 0 and total / count > 1, (total, count)
    assert at_most_two < count, "no object held slices of three or more partitions"
    # The metadata went through the topic, partly by Produce to other brokers.
    assert metric_sum(c, "ferry_remote_wal_metadata_produced_bytes_total") > 0

    # The estimated cost gauge and the cost report see the same cluster.
    assert metric_sum(c, "ferry_remote_wal_estimated_cost_micro_usd_per_hour", part="transfer") >= 0
    report = subprocess.run(
        [str(FERRY_BIN), "cost-report", "--window-secs", "0.5",
         "--metrics", ",".join(b.metrics_url for b in c.brokers)],
        capture_output=True, text=True, timeout=60,
    )
    assert report.returncode == 0, report.stderr
    assert "cross-AZ inter-broker" in report.stdout and "USD/hour" in report.stdout, report.stdout

    # A consumer in a rack reads everything.
    consumer = Consumer({
        "bootstrap.servers": c.bootstrap,
        "group.id": f"g-{wal}",
        "client.rack": "az2",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(wal, p, 0) for p in range(PARTITIONS)])
    got = 0
    deadline = time.monotonic() + 60
    while got < produced and time.monotonic() < deadline:
        for m in consumer.consume(1000, timeout=1):
            assert m.error() is None, m.error()
            got += len(m.value())
    consumer.close()
    assert got == produced


def bucket_objects(c, rack: str) -> list[Path]:
    return [p for p in c.buckets[rack].rglob("*.wal") if p.is_file()]


def test_leader_loss_and_store_outage_lose_nothing(wal_cluster):
    c = wal_cluster
    topic = unique_topic("walfail")
    parts = create_topic(c, topic, PARTITIONS, {"remote.wal.enable": "true", "min.insync.replicas": "2"})
    mb = 1_000_000

    # Objects are deleted once every in-sync replica holds their data (GC).
    produce(c, topic, 5 * mb, "all")
    wait_identical(c, topic)
    deadline = time.monotonic() + 30
    while any(bucket_objects(c, r) for r in c.buckets) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not any(bucket_objects(c, r) for r in c.buckets), "WAL objects were not collected"

    # The store of az1 fails: producing goes on, followers of broker 1's partitions fall back to
    # the classic fetch; after recovery the WAL path carries the data again.
    classic_before = metric_sum(c, "ferry_remote_wal_follower_bytes_total", path="classic")
    if c.store == "local":
        hidden = c.buckets["az1"].with_name("bucket-az1-hidden")
        c.buckets["az1"].rename(hidden)
    else:
        c.s3.stop()
    produce(c, topic, 5 * mb, "all")
    assert metric_sum(c, "ferry_remote_wal_follower_bytes_total", path="classic") > classic_before
    if c.store == "local":
        hidden.rename(c.buckets["az1"])
    else:
        c.s3.start()
    wait_identical(c, topic)
    # Broker 1's followers (on brokers 2 and 3) get WAL bytes again.
    def wal_bytes_from_followers():
        return sum(
            metric_sum_one(b, "ferry_remote_wal_follower_bytes_total", path="wal")
            for b in c.brokers[1:]
        )
    wal_before = wal_bytes_from_followers()
    produce(c, topic, 5 * mb, "all")
    wait_identical(c, topic)
    assert wal_bytes_from_followers() > wal_before + 5 * mb

    # Kill a leader right after acks=all acknowledgements: the followers already hold every
    # acknowledged record (their high watermark counted them). Failover itself is the
    # controller's business; what the WAL path must guarantee is that acks=all meant "on the
    # in-sync followers".
    victim = c.by_id(parts[0].leader)
    acked = []
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 2,
                         "enable.idempotence": True})
    for i in range(2000):
        producer.produce(topic, value=b"acked-%06d" % i, partition=0,
                         on_delivery=lambda e, m: acked.append(m.value()) if e is None else None)
    assert producer.flush(60) == 0
    victim.kill9()
    assert len(acked) == 2000
    for b in c.brokers:
        if b is victim:
            continue
        data = log_bytes(b, topic, 0)
        missing = [v for v in acked if v not in data]
        assert not missing, f"broker {b.config()['node.id']} lacks {len(missing)} acknowledged records"
    victim.start()


def metric_sum_one(broker, name: str, **labels) -> float:
    class One:
        brokers = [broker]
    return metric_sum(One, name, **labels)
