"""Topic configs as Kafka 4 defines them, through confluent-kafka's AdminClient (and a raw
DescribeConfigs v3 for documentation strings): every Kafka topic config accepted by
CreateTopics, AlterConfigs and IncrementalAlterConfigs, Kafka's INVALID_CONFIG messages,
MirrorMaker 2-style DELETE of keys at their default, synonyms in Kafka's order, dynamic broker
configs (BROKER resources, kept across restarts) and log levels (BROKER_LOGGER resources)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

import kwire
from conftest import ck_admin, create_topic, kafka_error_code, unique_topic

T = 30  # seconds, per admin call

# A value other than the default for every topic config Kafka 4.x's LogConfig defines.
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy": "compact,delete",
    "compression.gzip.level": "5",
    "compression.lz4.level": "10",
    "compression.type": "lz4",
    "compression.zstd.level": "7",
    "delete.retention.ms": "1000",
    "file.delete.delay.ms": "1000",
    "flush.messages": "1000",
    "flush.ms": "1000",
    "follower.replication.throttled.replicas": "0:1",
    "index.interval.bytes": "1000",
    "leader.replication.throttled.replicas": "*",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": "100000",
    "max.message.bytes": "100000",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "3600000",
    "message.timestamp.type": "LogAppendTime",
    "min.cleanable.dirty.ratio": "0.2",
    "min.compaction.lag.ms": "10",
    "min.insync.replicas": "1",
    "preallocate": "true",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
    "retention.bytes": "100000000",
    "retention.ms": "100000000",
    "segment.bytes": "1048576",
    "segment.index.bytes": "100000",
    "segment.jitter.ms": "1000",
    "segment.ms": "100000000",
    "unclean.leader.election.enable": "false",
}
# Removed in Kafka 4 but still sent by tools talking to 3.x clusters: accepted and dropped.
REMOVED = {
    "message.format.version": "2.8-IV1",
    "message.timestamp.difference.max.ms": "1000",
    "message.downconversion.enable": "true",
}


def describe(broker, rtype, name, **kw) -> dict:
    fs = ck_admin(broker).describe_configs([ConfigResource(rtype, name)], request_timeout=T, **kw)
    (_, fut), = fs.items()
    return fut.result(timeout=T)


def incremental(broker, rtype, name, entries) -> None:
    res = ConfigResource(rtype, name, incremental_configs=entries)
    for f in ck_admin(broker).incremental_alter_configs([res], request_timeout=T).values():
        f.result(timeout=T)


def incremental_error(broker, rtype, name, entries) -> KafkaException:
    with pytest.raises(KafkaException) as ei:
        incremental(broker, rtype, name, entries)
    return ei.value


def src(entry) -> str:
    """ConfigEntry.source as the ConfigSource name, whatever type the binding hands back."""
    s = entry.source
    return s.name if isinstance(s, ConfigSource) else ConfigSource(s).name


def synonyms(entry) -> list[tuple[str, str]]:
    return [(s.name, src(s)) for s in entry.synonyms.values()]


def test_create_topics_accepts_every_kafka_topic_config(broker):
    name = unique_topic("allcfg")
    create_topic(broker, name, config={**KAFKA_TOPIC_CONFIGS, **REMOVED})
    cfg = describe(broker, ResourceType.TOPIC, name)
    for key, value in KAFKA_TOPIC_CONFIGS.items():
        assert key in cfg, f"{key} not described"
        assert cfg[key].value == value, (key, cfg[key].value)
        assert src(cfg[key]) == "DYNAMIC_TOPIC_CONFIG", key
    for key in REMOVED:
        assert key not in cfg, f"{key} was stored"


def test_alter_configs_and_incremental_accept_every_kafka_topic_config(broker):
    name = create_topic(broker, unique_topic("altcfg"))
    res = ConfigResource(ResourceType.TOPIC, name, set_config={**KAFKA_TOPIC_CONFIGS, **REMOVED})
    for f in ck_admin(broker).alter_configs([res], request_timeout=T).values():
        f.result(timeout=T)
    cfg = describe(broker, ResourceType.TOPIC, name)
    assert {k: cfg[k].value for k in KAFKA_TOPIC_CONFIGS} == KAFKA_TOPIC_CONFIGS

    other = create_topic(broker, unique_topic("inccfg"))
    incremental(broker, ResourceType.TOPIC, other, [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in {**KAFKA_TOPIC_CONFIGS, **REMOVED}.items()
    ])
    cfg = describe(broker, ResourceType.TOPIC, other)
    assert {k: cfg[k].value for k in KAFKA_TOPIC_CONFIGS} == KAFKA_TOPIC_CONFIGS


@pytest.mark.parametrize("key,value,message", [
    ("retention.ms", "-5", "Invalid value -5 for configuration retention.ms: Value must be at least -1"),
    ("flush.ms", "soon", "Not a number of type LONG"),
    ("compression.gzip.level", "10", "Value must be between 1 and 9 or equal to -1"),
    ("compression.zstd.level", "23", "Value must be no more than 22"),
    ("message.timestamp.before.max.ms", "-1", "Value must be at least 0"),
    ("leader.replication.throttled.replicas", "all", "must be the literal '*'"),
    ("preallocate", "maybe", "Expected value to be either true or false"),
    ("message.format.version", "banana", "is not a valid version"),
    ("no.such.config", "1", "Unknown topic config name: no.such.config"),
])
def test_invalid_values_answer_invalid_config_with_kafkas_message(broker, key, value, message):
    name = unique_topic("badcfg")
    fs = ck_admin(broker).create_topics([NewTopic(name, 1, 1, config={key: value})],
                                        operation_timeout=T, request_timeout=T)
    with pytest.raises(KafkaException) as ei:
        fs[name].result(timeout=T)
    assert kafka_error_code(ei.value) == KafkaError.INVALID_CONFIG
    assert message in str(ei.value)

    existing = create_topic(broker, unique_topic("badinc"))
    e = incremental_error(broker, ResourceType.TOPIC, existing,
                          [ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    assert kafka_error_code(e) == KafkaError.INVALID_CONFIG
    assert message in str(e)


def test_mirrormaker_style_delete_of_keys_at_their_default_succeeds(broker):
    name = create_topic(broker, unique_topic("mm2"), config={"retention.ms": "3600000"})
    # MirrorMaker 2's config sync sets what it copies and DELETEs the rest, most of it at its
    # default here, some of it unknown to a Kafka 4 broker.
    incremental(broker, ResourceType.TOPIC, name, [
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("flush.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("segment.jitter.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("message.format.version", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    cfg = describe(broker, ResourceType.TOPIC, name)
    assert cfg["cleanup.policy"].value == "compact"
    assert cfg["retention.ms"].value == "604800000"
    assert src(cfg["retention.ms"]) == "DEFAULT_CONFIG"
    assert src(cfg["flush.ms"]) == "DEFAULT_CONFIG"


def test_describe_configs_synonyms_in_kafkas_order(broker_factory):
    broker = broker_factory({"log.retention.ms": 7200000, "log.retention.hours": 5})
    name = create_topic(broker, unique_topic("syn"), config={"retention.ms": "3600000"})
    # confluent-kafka keeps synonyms in a dict by name (a name given twice keeps its first
    # place and last source), so the exact list is read raw.
    raw = describe_configs_v3(broker, 2, name)
    assert [(n, s) for n, _, s in raw["retention.ms"][3]] == [
        ("retention.ms", 1),  # DYNAMIC_TOPIC_CONFIG
        ("log.retention.ms", 4),  # STATIC_BROKER_CONFIG
        ("log.retention.hours", 4),
        ("log.retention.hours", 5),  # DEFAULT_CONFIG
    ]
    assert [(n, v) for n, v, _ in raw["retention.ms"][3]][1:] == [
        ("log.retention.ms", "7200000"), ("log.retention.hours", "5"), ("log.retention.hours", "168"),
    ]
    cfg = describe(broker, ResourceType.TOPIC, name)
    assert synonyms(cfg["retention.ms"])[:2] == [
        ("retention.ms", "DYNAMIC_TOPIC_CONFIG"),
        ("log.retention.ms", "STATIC_BROKER_CONFIG"),
    ]
    assert synonyms(cfg["segment.bytes"]) == [("log.segment.bytes", "DEFAULT_CONFIG")]
    # A key without a broker default (Kafka's CONFIGS_WITH_NO_SERVER_DEFAULTS) has none.
    assert synonyms(cfg["leader.replication.throttled.replicas"]) == []

    plain = create_topic(broker, unique_topic("syn2"))
    cfg = describe(broker, ResourceType.TOPIC, plain)
    assert cfg["retention.ms"].value == "7200000"
    assert src(cfg["retention.ms"]) == "STATIC_BROKER_CONFIG"


def describe_configs_v3(broker, rtype: int, name: str) -> dict:
    """Raw DescribeConfigs v3 with include_synonyms and include_documentation (confluent-kafka
    never asks for documentation): {name: (value, source, documentation, [synonyms])}."""
    body = (kwire.i32(1) + kwire.i8(rtype) + kwire.string(name) + kwire.i32(-1)
            + kwire.i8(1) + kwire.i8(1))
    with kwire.Conn.to(broker) as conn:
        r = conn.request(32, 3, body)
    r.i32()  # throttle
    assert r.i32() == 1
    err, msg = r.i16(), r.string()
    assert err == 0, msg
    r.i8(), r.string()
    out = {}
    for _ in range(r.i32()):
        cname, value = r.string(), r.string()
        r.i8()  # read only
        source = r.i8()
        r.i8()  # sensitive
        syns = []
        for _ in range(r.i32()):
            syns.append((r.string(), r.string(), r.i8()))
        r.i8()  # type
        doc = r.string()
        out[cname] = (value, source, doc, syns)
    return out


SET, DELETE = 0, 1
BROKER, BROKER_LOGGER = 4, 8


def incremental_v0(broker, rtype: int, name: str, ops) -> tuple[int, str | None]:
    """Raw IncrementalAlterConfigs v0 (confluent-kafka refuses the cluster-default BROKER
    resource `""` and has no BROKER_LOGGER type): (error code, message)."""
    body = kwire.i32(1) + kwire.i8(rtype) + kwire.string(name) + kwire.i32(len(ops))
    for key, op, value in ops:
        body += kwire.string(key) + kwire.i8(op) + kwire.string(value)
    body += kwire.i8(0)
    with kwire.Conn.to(broker) as conn:
        r = conn.request(44, 0, body)
    r.i32()  # throttle
    assert r.i32() == 1
    return r.i16(), r.string()


def test_describe_configs_returns_documentation_when_asked(broker):
    name = create_topic(broker, unique_topic("doc"))
    cfg = describe_configs_v3(broker, 2, name)
    assert "older than this" in cfg["retention.ms"][2]
    assert cfg["preallocate"][2]
    broker_cfg = describe_configs_v3(broker, 4, str(broker.node_ids[0]))
    assert broker_cfg["log.retention.ms"][2]


def test_dynamic_broker_configs_reach_topics_and_survive_a_restart(broker):
    node = str(broker.node_ids[0])
    name = create_topic(broker, unique_topic("dyn"))
    assert incremental_v0(broker, BROKER, "", [
        ("log.retention.ms", SET, "123456"), ("num.partitions", SET, "3"),
    ])[0] == 0
    cfg = describe(broker, ResourceType.TOPIC, name)
    assert cfg["retention.ms"].value == "123456"
    assert src(cfg["retention.ms"]) == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    defaults = describe_configs_v3(broker, BROKER, "")
    assert defaults["log.retention.ms"][:2] == ("123456", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG

    incremental(broker, ResourceType.BROKER, node, [
        ConfigEntry("log.retention.ms", "654321", incremental_operation=AlterConfigOpType.SET),
    ])
    mine = describe(broker, ResourceType.BROKER, node)
    assert mine["log.retention.ms"].value == "654321"
    assert src(mine["log.retention.ms"]) == "DYNAMIC_BROKER_CONFIG"
    assert not mine["log.retention.ms"].is_read_only
    assert mine["node.id"].is_read_only
    # Per broker, then the cluster default, then the default of log.retention.hours.
    raw = describe_configs_v3(broker, BROKER, node)
    assert [(n, s) for n, _, s in raw["log.retention.ms"][3]] == [
        ("log.retention.ms", 2), ("log.retention.ms", 3), ("log.retention.hours", 5),
    ]
    # A topic created without a partition count takes the dynamic num.partitions.
    auto = unique_topic("dynparts")
    fs = ck_admin(broker).create_topics([NewTopic(auto)], operation_timeout=T, request_timeout=T)
    fs[auto].result(timeout=T)
    md = ck_admin(broker).list_topics(auto, timeout=T)
    assert len(md.topics[auto].partitions) == 3

    broker.restart()
    cfg = describe(broker, ResourceType.TOPIC, name)
    assert cfg["retention.ms"].value == "654321"
    assert src(cfg["retention.ms"]) == "DYNAMIC_BROKER_CONFIG"

    incremental(broker, ResourceType.BROKER, node, [
        ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    assert describe(broker, ResourceType.TOPIC, name)["retention.ms"].value == "123456"

    e = incremental_error(broker, ResourceType.BROKER, node, [
        ConfigEntry("node.id", "7", incremental_operation=AlterConfigOpType.SET),
    ])
    assert kafka_error_code(e) == KafkaError.INVALID_CONFIG
    err, msg = incremental_v0(broker, BROKER, "", [("log.segment.bytes", SET, "1")])
    assert err == KafkaError.INVALID_CONFIG, msg


def test_custom_broker_configs_are_kept_and_described_as_secrets(broker):
    """Kafka keeps broker keys it does not declare (`DynamicConfig.Broker` allows custom
    properties: a plugin's key, a Kerberos setting on a broker without Kerberos; librdkafka's
    test 0081 sets `sasl.kerberos.min.time.before.relogin`) and describes them as secrets of
    unknown type. A declared key that is not dynamic stays refused."""
    node = str(broker.node_ids[0])
    incremental(broker, ResourceType.BROKER, node, [
        ConfigEntry("sasl.kerberos.min.time.before.relogin", "58000",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("my.plugin.secret", "s3cr3t", incremental_operation=AlterConfigOpType.SET),
    ])
    assert incremental_v0(broker, BROKER, "", [("my.plugin.default", SET, "x")])[0] == 0
    mine = describe(broker, ResourceType.BROKER, node)
    for key, source in [("sasl.kerberos.min.time.before.relogin", "DYNAMIC_BROKER_CONFIG"),
                        ("my.plugin.secret", "DYNAMIC_BROKER_CONFIG"),
                        ("my.plugin.default", "DYNAMIC_DEFAULT_BROKER_CONFIG")]:
        assert key in mine, sorted(mine)
        assert mine[key].is_sensitive and mine[key].value is None, mine[key]
        assert src(mine[key]) == source
    assert "my.plugin.default" in describe_configs_v3(broker, BROKER, "")
    assert "my.plugin.default" not in describe(broker, ResourceType.TOPIC,
                                               create_topic(broker, unique_topic("cust")))
    broker.restart()
    assert "my.plugin.secret" in describe(broker, ResourceType.BROKER, node)
    incremental(broker, ResourceType.BROKER, node, [
        ConfigEntry("my.plugin.secret", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    assert "my.plugin.secret" not in describe(broker, ResourceType.BROKER, node)
    e = incremental_error(broker, ResourceType.BROKER, node, [
        ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET),
    ])
    assert kafka_error_code(e) == KafkaError.INVALID_CONFIG


def test_group_configs_override_the_consumer_protocol_settings_per_group(broker):
    """GROUP config resources (Kafka 4.0, KIP-848): `consumer.session.timeout.ms` and
    `consumer.heartbeat.interval.ms` per group, within the broker's `group.consumer.min.*` /
    `max.*` bounds, kept in the metadata across restarts; the group need not exist. librdkafka's
    test 0081 sets one against a 4.0 broker."""
    group = unique_topic("grp-cfg")
    before = describe(broker, ResourceType.GROUP, group)
    assert before["consumer.session.timeout.ms"].value == "45000"
    assert src(before["consumer.session.timeout.ms"]) == "DEFAULT_CONFIG"
    incremental(broker, ResourceType.GROUP, group, [
        ConfigEntry("consumer.session.timeout.ms", "50000",
                    incremental_operation=AlterConfigOpType.SET),
    ])
    after = describe(broker, ResourceType.GROUP, group)
    assert after["consumer.session.timeout.ms"].value == "50000"
    assert src(after["consumer.session.timeout.ms"]) == "GROUP_CONFIG"
    assert after["consumer.heartbeat.interval.ms"].value == "5000"
    for key, value in [("consumer.session.timeout.ms", "1000"),      # below the minimum
                       ("consumer.heartbeat.interval.ms", "60000"),  # above the maximum
                       ("share.record.lock.duration.ms", "1000")]:   # not served
        e = incremental_error(broker, ResourceType.GROUP, group, [
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        assert kafka_error_code(e) == KafkaError.INVALID_CONFIG, (key, e)
    broker.restart()
    assert describe(broker, ResourceType.GROUP, group)["consumer.session.timeout.ms"].value == \
        "50000"
    incremental(broker, ResourceType.GROUP, group, [
        ConfigEntry("consumer.session.timeout.ms", None,
                    incremental_operation=AlterConfigOpType.DELETE),
    ])
    assert describe(broker, ResourceType.GROUP, group)["consumer.session.timeout.ms"].value == \
        "45000"


def test_broker_logger_levels_change_at_run_time(broker):
    node = str(broker.node_ids[0])
    loggers = describe_configs_v3(broker, BROKER_LOGGER, node)
    assert "root" in loggers and "ferry_broker" in loggers
    root = loggers["root"][0]
    assert root in ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "OFF")
    assert loggers["ferry_broker"][1] == 6  # DYNAMIC_BROKER_LOGGER_CONFIG
    assert incremental_v0(broker, BROKER_LOGGER, node, [("ferry_broker", SET, "DEBUG")])[0] == 0
    assert describe_configs_v3(broker, BROKER_LOGGER, node)["ferry_broker"][0] == "DEBUG"
    assert incremental_v0(broker, BROKER_LOGGER, node, [("ferry_broker", DELETE, None)])[0] == 0
    assert describe_configs_v3(broker, BROKER_LOGGER, node)["ferry_broker"][0] == root
    err, msg = incremental_v0(broker, BROKER_LOGGER, node, [("ferry_broker", SET, "LOUD")])
    assert err == KafkaError.INVALID_CONFIG, msg
    err, _ = incremental_v0(broker, BROKER_LOGGER, "99", [("ferry_broker", SET, "INFO")])
    assert err == KafkaError.INVALID_REQUEST


def test_records_out_of_time_are_named_and_the_others_refused_on_their_account(broker):
    """A batch with records outside KIP-937's bounds is refused whole, and Produce v8+ names
    those records (KIP-467 `record_errors`), as Kafka's LogValidator does: librdkafka fails
    them with INVALID_RECORD, and the batch's others with
    _INVALID_DIFFERENT_RECORD (with one record named it reports INVALID_TIMESTAMP for all).
    The old records are not the first, whose timestamp librdkafka puts in the batch header:
    each record is checked."""
    import time as _time

    from conftest import ck_producer

    topic = create_topic(broker, unique_topic("ts-records"), config={
        "message.timestamp.before.max.ms": "60000",
    })
    now = int(_time.time() * 1000)
    codes = {}

    def deliver(i):
        def cb(err, _msg):
            codes[i] = err.code() if err else None
        return cb

    # One batch: a long linger, every record produced before the first send.
    p = ck_producer(broker, **{"linger.ms": 1000, "retries": 0})
    old = (3, 6)
    for i in range(10):
        ts = now - 3_600_000 if i in old else now
        p.produce(topic, f"v{i}".encode(), timestamp=ts, on_delivery=deliver(i))
    p.flush(30)
    expected = {i: KafkaError.INVALID_RECORD if i in old
                else KafkaError._INVALID_DIFFERENT_RECORD for i in range(10)}
    assert codes == expected, codes
    # Nothing of the refused batch was written: the next record takes offset 0.
    offsets = {}
    p.produce(topic, b"after", timestamp=now,
              on_delivery=lambda err, msg: offsets.update(after=(err, msg.offset())))
    p.flush(30)
    assert offsets["after"] == (None, 0), offsets


def test_timestamps_outside_kip_937_bounds_answer_invalid_timestamp(broker):
    """message.timestamp.before.max.ms / after.max.ms (KIP-937) refuse a CreateTime batch
    whose timestamps lie too far from the broker's clock; LogAppendTime topics take any."""
    import time as _time

    from conftest import ck_consumer, ck_producer

    strict = create_topic(broker, unique_topic("ts-bounds"), config={
        "message.timestamp.before.max.ms": "60000",
        "message.timestamp.after.max.ms": "60000",
    })
    stamped = create_topic(broker, unique_topic("ts-append"), config={
        "message.timestamp.type": "LogAppendTime",
        "message.timestamp.before.max.ms": "60000",
    })
    now = int(_time.time() * 1000)
    outcomes = {}

    def deliver(tag):
        def cb(err, msg):
            outcomes[tag] = err.code() if err else None
        return cb

    p = ck_producer(broker, retries=0)
    # One batch each: one record out of bounds refuses its whole batch, as in Kafka.
    for topic, value, ts, tag in [(strict, b"old", now - 3_600_000, "old"),
                                  (strict, b"future", now + 3_600_000, "future"),
                                  (strict, b"now", now, "now"),
                                  (stamped, b"old", now - 3_600_000, "stamped")]:
        p.produce(topic, value, timestamp=ts, on_delivery=deliver(tag))
        p.flush(30)
    assert outcomes == {
        "old": KafkaError.INVALID_TIMESTAMP,
        "future": KafkaError.INVALID_TIMESTAMP,
        "now": None,
        "stamped": None,
    }, outcomes

    from confluent_kafka import TopicPartition

    c = ck_consumer(broker)
    c.assign([TopicPartition(strict, 0, 0)])
    got = []
    deadline = _time.monotonic() + 30
    while _time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            break  # end of partition
        got.append(m.value())
    c.close()
    assert got == [b"now"]


def test_compression_levels_are_used_when_the_broker_recompresses(broker):
    """compression.<codec>.level (KIP-390): the same uncompressed records take less disk at a
    higher level of the topic's codec, and read back the same."""
    import time as _time
    from pathlib import Path

    from conftest import ck_consumer, ck_producer

    values = [(f"record {i} of a level test, {i * 7919 % 1000} " * 8).encode() for i in range(3000)]
    sizes = {}
    for codec, low, high in [("gzip", 1, 9), ("zstd", 1, 19)]:
        for level in (low, high):
            topic = create_topic(broker, unique_topic(f"lvl-{codec}-{level}"), config={
                "compression.type": codec, f"compression.{codec}.level": str(level)})
            p = ck_producer(broker, **{"compression.type": "none", "linger.ms": 50,
                                       "batch.size": 1 << 20})
            for v in values:
                p.produce(topic, v)
            assert p.flush(30) == 0
            seg = sum(f.stat().st_size for d in broker.data_dirs
                      for f in Path(d).glob(f"{topic}-0/*.log"))
            sizes[(codec, level)] = seg

            from confluent_kafka import TopicPartition

            c = ck_consumer(broker)
            c.assign([TopicPartition(topic, 0, 0)])
            got = []
            deadline = _time.monotonic() + 30
            while len(got) < len(values) and _time.monotonic() < deadline:
                m = c.poll(1.0)
                if m is not None and not m.error():
                    got.append(m.value())
            c.close()
            assert got == values, (codec, level)
        assert sizes[(codec, high)] < sizes[(codec, low)], sizes
