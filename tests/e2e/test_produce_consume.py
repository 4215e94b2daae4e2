"""Produce and consume through real clients: confluent-kafka (librdkafka), kafka-python,
kcat and kafkajs, with every codec and acks setting."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaError,
)

from conftest import (
    JS_DIR,
    assert_delivered,
    ck_admin,
    ck_producer,
    consume_partition,
    create_topic,
    produce_sync,
    unique_topic,
    wait_replicas_open,
    wait_topic,
)
import kwire

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
ACKS = ["0", "1", "all"]
BASE_TS = 1_700_000_000_000  # fixed, ms


def make_messages(n: int, partitions: int, tag: str = ""):
    msgs = []
    for i in range(n):
        msgs.append({
            "key": f"key-{tag}{i}".encode(),
            # compressible and incompressible parts
            "value": (f"value-{tag}{i}-" + "x" * (i % 50)).encode() + bytes([i % 256]) * 3,
            "partition": i % partitions,
            "headers": [("h1", f"hv{i}".encode()), ("h2", b"\x00\x01\x02"), ("dup", b"a"), ("dup", b"b")],
            "timestamp": BASE_TS + i * 1000,
        })
    return msgs


def headers_of(m):
    return [(k, v) for k, v in (m.headers() or [])]


def verify_partitions(broker, topic, sent, partitions):
    for p in range(partitions):
        want = [m for m in sent if m["partition"] == p]
        got = consume_partition(broker, topic, p, expected=len(want))
        assert len(got) == len(want), f"partition {p}: {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.offset() == i, f"p{p}: offsets not dense from 0: {g.offset()} at {i}"
            assert g.key() == w["key"]
            assert g.value() == w["value"]
            assert headers_of(g) == w["headers"], f"p{p}#{i}: headers {headers_of(g)}"
            assert g.timestamp() == (TIMESTAMP_CREATE_TIME, w["timestamp"])


@pytest.mark.parametrize("acks", ACKS)
@pytest.mark.parametrize("codec", CODECS)
def test_confluent_codec_acks_roundtrip(broker, codec, acks):
    topic = create_topic(broker, unique_topic(f"c-{codec}-{acks}"), partitions=3)
    if acks == "0":
        # a batch refused at acks=0 is lost, not retried (see wait_replicas_open)
        wait_replicas_open(broker, topic, 3)
    sent = make_messages(90, 3, tag=codec)
    p = ck_producer(broker, **{"compression.type": codec, "acks": acks, "linger.ms": 20})
    reports = produce_sync(p, topic, sent)
    assert_delivered(reports)
    if acks != "0":
        # offsets reported to the producer are per-partition 0..n-1 in send order
        for part in range(3):
            offs = [r[1].offset() for r, m in zip(reports, sent) if m["partition"] == part]
            assert offs == list(range(len(offs))), f"partition {part}: acked offsets {offs}"
    verify_partitions(broker, topic, sent, 3)


def test_confluent_null_key_null_value_and_empty(broker):
    topic = create_topic(broker, unique_topic("nulls"))
    p = ck_producer(broker)
    msgs = [
        {"key": None, "value": b"v-no-key", "partition": 0},
        {"key": b"k-no-value", "value": None, "partition": 0},
        {"key": b"", "value": b"", "partition": 0},
    ]
    assert_delivered(produce_sync(p, topic, msgs))
    got = consume_partition(broker, topic, 0, expected=3)
    assert [(m.key(), m.value()) for m in got] == [
        (None, b"v-no-key"), (b"k-no-value", None), (b"", b"")]


def test_confluent_large_batch_and_large_message(broker):
    topic = create_topic(broker, unique_topic("large"))
    p = ck_producer(broker, **{"compression.type": "lz4", "linger.ms": 50})
    big = bytes(range(256)) * 2048  # 512 KiB, below the 1 MiB default max.message.bytes
    msgs = [{"key": b"big", "value": big, "partition": 0}]
    msgs += [{"key": str(i).encode(), "value": b"s" * 100, "partition": 0} for i in range(2000)]
    assert_delivered(produce_sync(p, topic, msgs))
    got = consume_partition(broker, topic, 0, expected=len(msgs), timeout=60)
    assert got[0].value() == big
    assert [m.key() for m in got[1:]] == [str(i).encode() for i in range(2000)]


# --- kafka-python -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_produce_consume(broker, codec):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = create_topic(broker, unique_topic("kp"), partitions=2)
    prod = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, acks="all",
                         linger_ms=10, request_timeout_ms=30000)
    sent = []
    futs = []
    for i in range(60):
        m = dict(key=f"k{i}".encode(), value=f"v{i}".encode() * 5, partition=i % 2,
                 headers=[("n", str(i).encode())], timestamp_ms=BASE_TS + i)
        sent.append(m)
        futs.append(prod.send(topic, **m))
    prod.flush(timeout=60)
    metas = [f.get(timeout=60) for f in futs]
    for part in range(2):
        assert [md.offset for md in metas if md.partition == part] == list(range(30))
    prod.close(timeout=10)

    cons = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                         enable_auto_commit=False, auto_offset_reset="earliest",
                         consumer_timeout_ms=15000, request_timeout_ms=30000)
    try:
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        cons.assign(tps)
        cons.seek_to_beginning(*tps)
        got = {0: [], 1: []}
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < 60 and time.monotonic() < deadline:
            for tp, recs in cons.poll(timeout_ms=1000).items():
                got[tp.partition].extend(recs)
        for part in range(2):
            want = [m for m in sent if m["partition"] == part]
            recs = got[part]
            assert [r.offset for r in recs] == list(range(len(want)))
            assert [(r.key, r.value) for r in recs] == [(m["key"], m["value"]) for m in want]
            assert [list(r.headers) for r in recs] == [m["headers"] for m in want]
            assert [r.timestamp for r in recs] == [m["timestamp_ms"] for m in want]
    finally:
        cons.close()


def test_kafka_python_reads_confluent_and_vice_versa(broker):
    """Cross-client: what librdkafka writes (zstd) kafka-python reads, and the reverse (gzip)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = create_topic(broker, unique_topic("cross"), partitions=1)
    p = ck_producer(broker, **{"compression.type": "zstd"})
    assert_delivered(produce_sync(p, topic, [{"key": b"a", "value": b"from-librdkafka", "partition": 0}]))
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip")
    kp.send(topic, key=b"b", value=b"from-kafka-python", partition=0).get(timeout=60)
    kp.close(timeout=10)

    got = consume_partition(broker, topic, 0, expected=2)
    assert [(m.key(), m.value()) for m in got] == [(b"a", b"from-librdkafka"), (b"b", b"from-kafka-python")]

    cons = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", consumer_timeout_ms=15000)
    try:
        tp = TopicPartition(topic, 0)
        cons.assign([tp])
        cons.seek_to_beginning(tp)
        recs = []
        deadline = time.monotonic() + 60
        while len(recs) < 2 and time.monotonic() < deadline:
            for _, rs in cons.poll(timeout_ms=1000).items():
                recs.extend(rs)
        assert [(r.key, r.value) for r in recs] == [(b"a", b"from-librdkafka"), (b"b", b"from-kafka-python")]
    finally:
        cons.close()


# --- kcat ---------------------------------------------------------------------------------------


def kcat(*args, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    exe = shutil.which("kcat")
    if exe is None:
        pytest.fail("kcat not installed (scripts/test-all.sh installs it)")
    return subprocess.run([exe, *args], input=input, capture_output=True, text=True, timeout=timeout)


def test_kcat_produce_consume_and_list(broker):
    topic = create_topic(broker, unique_topic("kcat"), partitions=2)
    lines = "".join(f"key{i}:value {i}\n" for i in range(20))
    r = kcat("-P", "-b", broker.bootstrap, "-t", topic, "-p", "1", "-K:", input=lines)
    assert r.returncode == 0, r.stderr

    r = kcat("-C", "-b", broker.bootstrap, "-t", topic, "-p", "1", "-e", "-q", "-o", "beginning",
             "-f", "%k %s\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"key{i} value {i}" for i in range(20)]

    # kcat with the partition's offsets in the format
    r = kcat("-C", "-b", broker.bootstrap, "-t", topic, "-p", "1", "-e", "-q", "-o", "beginning",
             "-f", "%p:%o\n")
    assert r.stdout.splitlines() == [f"1:{i}" for i in range(20)]

    r = kcat("-L", "-b", broker.bootstrap, "-J")
    assert r.returncode == 0, r.stderr
    md = json.loads(r.stdout)
    assert sorted(b["id"] for b in md["brokers"]) == broker.node_ids
    assert sorted(b["name"] for b in md["brokers"]) == sorted(broker.bootstrap.split(","))
    topics = {t["topic"]: t for t in md["topics"]}
    assert topic in topics
    assert sorted(p["partition"] for p in topics[topic]["partitions"]) == [0, 1]
    assert all(p["leader"] in broker.node_ids for p in topics[topic]["partitions"])

    r = kcat("-L", "-b", broker.bootstrap)
    assert r.returncode == 0, r.stderr
    assert f'topic "{topic}" with 2 partitions' in r.stdout


def test_kcat_reads_compressed_data(broker):
    topic = create_topic(broker, unique_topic("kcatz"))
    p = ck_producer(broker, **{"compression.type": "snappy"})
    assert_delivered(produce_sync(p, topic, [{"key": f"k{i}".encode(), "value": f"v{i}".encode(),
                                              "partition": 0} for i in range(10)]))
    r = kcat("-C", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-e", "-q", "-o", "beginning",
             "-f", "%k=%s\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"k{i}=v{i}" for i in range(10)]


# --- kafkajs --------------------------------------------------------------------------------------


def kafkajs(cmd: dict, timeout: float = 120) -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node not installed")
    if not (JS_DIR / "node_modules" / "kafkajs").exists():
        pytest.fail(f"kafkajs not installed in {JS_DIR} (run scripts/test-all.sh)")
    r = subprocess.run([node, str(JS_DIR / "kafkajs_client.mjs"), json.dumps(cmd)],
                       capture_output=True, text=True, timeout=timeout, cwd=JS_DIR)
    assert r.returncode == 0, f"node exited {r.returncode}\nstdout:{r.stdout}\nstderr:{r.stderr}"
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    assert lines, f"no JSON from kafkajs\nstdout:{r.stdout}\nstderr:{r.stderr}"
    out = json.loads(lines[-1])
    out["_stderr"] = r.stderr
    return out


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_kafkajs_producer(broker, codec):
    topic = create_topic(broker, unique_topic("kjs"), partitions=2)
    messages = [{"key": f"k{i}", "value": f"v{i}", "partition": i % 2, "headers": {"src": "kafkajs"},
                 "timestamp": str(BASE_TS + i)} for i in range(40)]
    out = kafkajs({"op": "produce", "brokers": broker.bootstrap.split(","), "topic": topic,
                   "compression": codec, "acks": -1, "messages": messages})
    assert out["ok"], out
    by_part = {r["partition"]: r for r in out["results"]}
    assert set(by_part) == {0, 1}
    assert all(r["errorCode"] == 0 for r in out["results"])
    for part in range(2):
        want = [m for m in messages if m["partition"] == part]
        got = consume_partition(broker, topic, part, expected=len(want))
        assert [(m.key(), m.value()) for m in got] == [(w["key"].encode(), w["value"].encode()) for w in want]
        assert all(headers_of(m) == [("src", b"kafkajs")] for m in got)
        assert [m.timestamp()[1] for m in got] == [int(w["timestamp"]) for w in want]


def test_kafkajs_admin_create_offsets_delete(broker):
    topic = unique_topic("kjsadm")
    out = kafkajs({"op": "admin", "brokers": broker.bootstrap.split(","), "steps": [
        {"do": "createTopics", "topics": [{"topic": topic, "numPartitions": 3,
                                           "configEntries": [{"name": "retention.ms", "value": "3600000"}]}]},
        {"do": "listTopics"},
        {"do": "fetchTopicMetadata", "topics": [topic]},
    ]})
    assert out["ok"], out
    created, listed, md = out["results"]
    assert created is True
    assert topic in listed
    assert len(md["topics"][0]["partitions"]) == 3

    p = ck_producer(broker)
    assert_delivered(produce_sync(p, topic, [{"value": b"x", "partition": 1}] * 5))

    out = kafkajs({"op": "admin", "brokers": broker.bootstrap.split(","), "steps": [
        {"do": "fetchTopicOffsets", "topic": topic},
        {"do": "deleteTopics", "topics": [topic]},
        {"do": "listTopics"},
    ]})
    assert out["ok"], out
    offsets, _, listed = out["results"]
    by_part = {o["partition"]: o for o in offsets}
    assert by_part[1]["high"] == "5" and by_part[1]["low"] == "0"
    assert by_part[0]["high"] == "0" and by_part[2]["high"] == "0"
    # As with Kafka, the deletion is committed when DeleteTopics answers and reaches the other
    # brokers' metadata a moment later: a listing from another broker may still name it.
    deadline = time.monotonic() + 15
    while topic in listed and time.monotonic() < deadline:
        time.sleep(0.2)
        out = kafkajs({"op": "admin", "brokers": broker.bootstrap.split(","),
                       "steps": [{"do": "listTopics"}]})
        assert out["ok"], out
        (listed,) = out["results"]
    assert topic not in listed
    deadline = time.monotonic() + 15
    while topic in ck_admin(broker).list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the deleted topic is still listed"
        time.sleep(0.2)


# --- timestamps, limits, auto-creation, errors ----------------------------------------------------


def test_log_append_time_topic_returns_broker_timestamps(broker):
    topic = create_topic(broker, unique_topic("lat"), config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    p = ck_producer(broker)
    reports = produce_sync(p, topic, [{"key": b"k", "value": b"v%d" % i, "partition": 0,
                                       "timestamp": 1000 + i} for i in range(5)])
    assert_delivered(reports)
    after = int(time.time() * 1000)
    slack = 5000
    for err, m in reports:
        ttype, ts = m.timestamp()
        assert ttype == TIMESTAMP_LOG_APPEND_TIME, f"delivery report timestamp type {ttype}"
        assert before - slack <= ts <= after + slack
    got = consume_partition(broker, topic, 0, expected=5)
    for m in got:
        ttype, ts = m.timestamp()
        assert ttype == TIMESTAMP_LOG_APPEND_TIME, f"fetched timestamp type {ttype}"
        assert before - slack <= ts <= after + slack, f"{ts} not in [{before}, {after}]"


def test_message_larger_than_topic_max_message_bytes_is_rejected(broker):
    topic = create_topic(broker, unique_topic("maxmsg"), config={"max.message.bytes": "2048"})
    p = ck_producer(broker, **{"linger.ms": 0, "compression.type": "none"})
    reports = produce_sync(p, topic, [{"value": b"z" * 20000, "partition": 0}])
    err = reports[0][0]
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, f"got {err}"
    # a small one still goes through
    reports = produce_sync(p, topic, [{"value": b"small", "partition": 0}])
    assert_delivered(reports)
    got = consume_partition(broker, topic, 0, expected=1)
    assert [m.value() for m in got] == [b"small"]


def test_auto_topic_creation_on_produce(broker):
    topic = unique_topic("auto")
    p = ck_producer(broker)
    reports = produce_sync(p, topic, [{"key": b"k", "value": b"auto-created"}])
    assert_delivered(reports)
    t = wait_topic(broker, topic)
    assert len(t.partitions) == 1  # num.partitions = 1 in the fixture config
    got = consume_partition(broker, topic, 0, expected=1)
    assert got[0].value() == b"auto-created"


def test_no_auto_creation_when_disabled(broker_factory):
    b = broker_factory({"auto.create.topics.enable": False})
    topic = unique_topic("noauto")
    p = ck_producer(b, **{"message.timeout.ms": 5000})
    reports = produce_sync(p, topic, [{"value": b"x"}], timeout=30)
    err = reports[0][0]
    assert err is not None and err.code() in (
        KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._MSG_TIMED_OUT), err
    md = ck_admin(b).list_topics(timeout=10)
    assert topic not in md.topics or md.topics[topic].error is not None


def test_unknown_partition(broker):
    topic = create_topic(broker, unique_topic("nopart"), partitions=1)
    # librdkafka knows the partition count from metadata and fails locally
    p = ck_producer(broker, **{"message.timeout.ms": 5000})
    reports = produce_sync(p, topic, [{"value": b"x", "partition": 5}])
    err = reports[0][0]
    assert err is not None and err.code() in (KafkaError._UNKNOWN_PARTITION,
                                              KafkaError.UNKNOWN_TOPIC_OR_PART), err
    # the broker itself must answer UNKNOWN_TOPIC_OR_PARTITION for a raw Produce to it (sent to
    # partition 0's leader, so that in cluster mode the good partition is served on the same
    # connection)
    with kwire.Conn.to_leader(broker, topic, 0) as c:
        code, _ = kwire.produce_v3(c, topic, 5, kwire.record_batch([(b"k", b"v")]))
        assert code == kwire.ERR_UNKNOWN_TOPIC_OR_PARTITION
        # and the good partition still works on the same connection
        code, base = kwire.produce_v3(c, topic, 0, kwire.record_batch([(b"k", b"v")]))
        assert (code, base) == (0, 0)
    got = consume_partition(broker, topic, 0, expected=1)
    assert got[0].value() == b"v"


def test_failed_acks0_produce_closes_the_connection(broker):
    """Kafka's answer to an acks=0 produce it refuses: no response (there is none at acks=0),
    but the connection closes, so the producer refreshes its metadata instead of sending every
    later batch into the same silent refusal."""
    topic = create_topic(broker, unique_topic("acks0err"), partitions=1)
    # The first produce is at acks=0: in a cluster the leader must hold its replica already.
    wait_replicas_open(broker, topic, 1)
    with kwire.Conn.to_leader(broker, topic, 0) as c:
        # a good acks=0 produce keeps the connection: the next request is answered
        kwire.send_produce_v3(c, topic, 0, kwire.record_batch([(b"k", b"first")]), acks=0)
        code, base = kwire.produce_v3(c, topic, 0, kwire.record_batch([(b"k", b"second")]))
        assert (code, base) == (0, 1)
        # a refused one (no such partition) closes it
        kwire.send_produce_v3(c, topic, 5, kwire.record_batch([(b"k", b"lost")]), acks=0)
        assert c.wait_closed(timeout=10)
    got = consume_partition(broker, topic, 0, expected=2)
    assert [m.value() for m in got] == [b"first", b"second"]


def test_raw_produce_batch_offsets(broker):
    """A hand-built magic-2 batch (uncompressed) gets consecutive offsets and reads back."""
    topic = create_topic(broker, unique_topic("raw"))
    with kwire.Conn.to_leader(broker, topic, 0) as c:
        code, base = kwire.produce_v3(c, topic, 0, kwire.record_batch([(b"a", b"1"), (b"b", b"2")],
                                                                       base_timestamp=BASE_TS))
        assert (code, base) == (0, 0)
        code, base = kwire.produce_v3(c, topic, 0, kwire.record_batch([(None, b"3")]))
        assert (code, base) == (0, 2)
    got = consume_partition(broker, topic, 0, expected=3)
    assert [(m.key(), m.value(), m.offset()) for m in got] == [(b"a", b"1", 0), (b"b", b"2", 1), (None, b"3", 2)]
    assert got[0].timestamp() == (TIMESTAMP_CREATE_TIME, BASE_TS)
