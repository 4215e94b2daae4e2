"""Admin APIs through confluent-kafka's AdminClient and kafka-python's KafkaAdminClient:
CreateTopics, Metadata, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
CreatePartitions, DeleteTopics, DescribeCluster, DescribeLogDirs, DeleteRecords."""

from __future__ import annotations

import time

import kwire

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from conftest import (
    assert_delivered,
    ck_admin,
    ck_producer,
    consume_partition,
    create_topic,
    kafka_error_code,
    produce_sync,
    unique_topic,
    wait_topic,
)

T = 30  # seconds, per admin call


def kp_admin(broker):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)


def create_error(broker, topic: NewTopic) -> int | None:
    fs = ck_admin(broker).create_topics([topic], operation_timeout=T, request_timeout=T)
    try:
        fs[topic.topic].result(timeout=T)
        return None
    except KafkaException as e:
        return kafka_error_code(e)


def describe_topic_configs(broker, name: str) -> dict:
    fs = ck_admin(broker).describe_configs([ConfigResource(ResourceType.TOPIC, name)], request_timeout=T)
    (res, fut), = fs.items()
    return fut.result(timeout=T)


def src(entry) -> str:
    """ConfigEntry.source as the ConfigSource name, whatever type the binding hands back."""
    s = entry.source
    return s.name if isinstance(s, ConfigSource) else ConfigSource(s).name


def all_topic_names(broker) -> set:
    # all-topics metadata never auto-creates
    return set(ck_admin(broker).list_topics(timeout=T).topics)


def describe_topic(broker, name: str):
    fs = ck_admin(broker).describe_topics(TopicCollection([name]), request_timeout=T)
    return fs[name].result(timeout=T)


# --- create / describe ------------------------------------------------------------------------


def test_create_topic_with_configs_and_describe(broker):
    name = unique_topic("adm")
    create_topic(broker, name, partitions=3,
                 config={"retention.ms": "3600000", "cleanup.policy": "delete"})
    assert name in all_topic_names(broker)

    md = ck_admin(broker).list_topics(topic=name, timeout=T).topics[name]
    assert md.error is None
    assert sorted(md.partitions) == [0, 1, 2]
    for p in md.partitions.values():
        assert p.leader in broker.node_ids
        assert sorted(p.replicas) == broker.node_ids
        assert sorted(p.isrs) == broker.node_ids

    desc = describe_topic(broker, name)
    assert desc.name == name
    assert desc.topic_id is not None and str(desc.topic_id) not in ("", "AAAAAAAAAAAAAAAAAAAAAA")
    assert [p.id for p in desc.partitions] == [0, 1, 2]
    assert all(p.leader.id in broker.node_ids for p in desc.partitions)
    assert not desc.is_internal

    cfg = describe_topic_configs(broker, name)
    assert cfg["retention.ms"].value == "3600000"
    assert src(cfg["retention.ms"]) == "DYNAMIC_TOPIC_CONFIG"
    assert not cfg["retention.ms"].is_default
    assert cfg["cleanup.policy"].value == "delete"
    assert src(cfg["cleanup.policy"]) == "DYNAMIC_TOPIC_CONFIG"


def test_describe_configs_reports_defaults(broker):
    name = create_topic(broker, unique_topic("defaults"))
    cfg = describe_topic_configs(broker, name)
    for key in ("retention.ms", "cleanup.policy", "max.message.bytes", "segment.bytes",
                "message.timestamp.type", "retention.bytes", "compression.type"):
        assert key in cfg, f"{key} missing from DescribeConfigs (got {sorted(cfg)})"
        assert src(cfg[key]) in ("DEFAULT_CONFIG", "STATIC_BROKER_CONFIG"), (key, src(cfg[key]))
    # Kafka's defaults
    assert cfg["retention.ms"].value == "604800000"
    assert cfg["cleanup.policy"].value == "delete"
    assert cfg["message.timestamp.type"].value == "CreateTime"
    assert cfg["retention.bytes"].value == "-1"


def test_two_topic_ids_differ_and_are_stable(broker):
    a = create_topic(broker, unique_topic("ida"))
    b = create_topic(broker, unique_topic("idb"))
    ida, idb = describe_topic(broker, a).topic_id, describe_topic(broker, b).topic_id
    assert str(ida) != str(idb)
    assert str(describe_topic(broker, a).topic_id) == str(ida)


def test_create_topic_defaults_to_num_partitions(broker_factory):
    b = broker_factory({"num.partitions": 4})
    name = unique_topic("dflt")
    fs = ck_admin(b).create_topics([NewTopic(name)], operation_timeout=T, request_timeout=T)
    fs[name].result(timeout=T)
    t = wait_topic(b, name)
    assert len(t.partitions) == 4


def test_validate_only_does_not_create(broker):
    name = unique_topic("vonly")
    fs = ck_admin(broker).create_topics([NewTopic(name, 2, 1)], validate_only=True,
                                        operation_timeout=T, request_timeout=T)
    fs[name].result(timeout=T)
    time.sleep(0.5)
    assert name not in all_topic_names(broker)


# --- create errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["bad name!", "..", ".", "x" * 250, "", "a/b", "t\u00e9"])
def test_invalid_topic_names(broker, bad):
    code = create_error(broker, NewTopic(bad, 1, 1))
    assert code == KafkaError.TOPIC_EXCEPTION, f"{bad!r}: got {code}"
    if bad:
        assert bad not in all_topic_names(broker)


def test_duplicate_create(broker):
    name = create_topic(broker, unique_topic("dup"))
    assert create_error(broker, NewTopic(name, 1, 1)) == KafkaError.TOPIC_ALREADY_EXISTS


@pytest.mark.parametrize("key,value", [
    ("retention.ms", "not-a-number"),
    ("cleanup.policy", "shred"),
    ("message.timestamp.type", "Sometimes"),
    ("no.such.config", "1"),
])
def test_invalid_config_value(broker, key, value):
    name = unique_topic("badcfg")
    code = create_error(broker, NewTopic(name, 1, 1, config={key: value}))
    assert code == KafkaError.INVALID_CONFIG, f"{key}={value}: got {code}"
    assert name not in all_topic_names(broker)


def test_invalid_partition_and_replication_counts(broker):
    assert create_error(broker, NewTopic(unique_topic("p0"), 0, 1)) == KafkaError.INVALID_PARTITIONS
    # more replicas than brokers
    too_many = len(broker.node_ids) + 1
    assert create_error(broker, NewTopic(unique_topic("rf"), 1, too_many)) == \
        KafkaError.INVALID_REPLICATION_FACTOR


def test_unknown_topic_describe(broker):
    name = unique_topic("ghost")
    fs = ck_admin(broker).describe_configs([ConfigResource(ResourceType.TOPIC, name)], request_timeout=T)
    (_, fut), = fs.items()
    with pytest.raises(KafkaException) as ei:
        fut.result(timeout=T)
    assert kafka_error_code(ei.value) == KafkaError.UNKNOWN_TOPIC_OR_PART

    fs = ck_admin(broker).describe_topics(TopicCollection([name]), request_timeout=T)
    with pytest.raises(KafkaException) as ei:
        fs[name].result(timeout=T)
    assert kafka_error_code(ei.value) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert name not in all_topic_names(broker)


# --- alter configs -------------------------------------------------------------------------------


def test_alter_configs_replaces_whole_set(broker):
    name = create_topic(broker, unique_topic("alter"), config={"retention.ms": "1000000"})
    res = ConfigResource(ResourceType.TOPIC, name, set_config={"segment.bytes": "1048576"})
    fs = ck_admin(broker).alter_configs([res], request_timeout=T)
    for f in fs.values():
        f.result(timeout=T)
    cfg = describe_topic_configs(broker, name)
    assert cfg["segment.bytes"].value == "1048576"
    assert src(cfg["segment.bytes"]) == "DYNAMIC_TOPIC_CONFIG"
    # non-incremental AlterConfigs resets what it does not name
    assert cfg["retention.ms"].value == "604800000"
    assert src(cfg["retention.ms"]) == "DEFAULT_CONFIG"


def test_incremental_alter_set_and_delete(broker):
    name = create_topic(broker, unique_topic("incr"), config={"retention.ms": "1000000"})
    admin = ck_admin(broker)
    res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("max.message.bytes", "65536", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
    ])
    for f in admin.incremental_alter_configs([res], request_timeout=T).values():
        f.result(timeout=T)
    cfg = describe_topic_configs(broker, name)
    assert cfg["max.message.bytes"].value == "65536"
    assert cfg["cleanup.policy"].value == "compact"
    assert cfg["retention.ms"].value == "1000000"  # untouched

    res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    for f in admin.incremental_alter_configs([res], request_timeout=T).values():
        f.result(timeout=T)
    cfg = describe_topic_configs(broker, name)
    assert cfg["retention.ms"].value == "604800000"
    assert src(cfg["retention.ms"]) == "DEFAULT_CONFIG"
    assert cfg["cleanup.policy"].value == "delete"
    assert cfg["max.message.bytes"].value == "65536"


def test_alter_config_invalid_value_and_unknown_topic(broker):
    name = create_topic(broker, unique_topic("altbad"))
    admin = ck_admin(broker)
    res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    (fut,) = admin.incremental_alter_configs([res], request_timeout=T).values()
    with pytest.raises(KafkaException) as ei:
        fut.result(timeout=T)
    assert kafka_error_code(ei.value) == KafkaError.INVALID_CONFIG
    assert describe_topic_configs(broker, name)["retention.ms"].value == "604800000"

    res = ConfigResource(ResourceType.TOPIC, unique_topic("nope"), incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    (fut,) = admin.incremental_alter_configs([res], request_timeout=T).values()
    with pytest.raises(KafkaException) as ei:
        fut.result(timeout=T)
    assert kafka_error_code(ei.value) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_altered_max_message_bytes_takes_effect(broker):
    name = create_topic(broker, unique_topic("effect"))
    p = ck_producer(broker, **{"linger.ms": 0})
    assert_delivered(produce_sync(p, name, [{"value": b"a" * 5000, "partition": 0}]))
    res = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("max.message.bytes", "1024", incremental_operation=AlterConfigOpType.SET)])
    for f in ck_admin(broker).incremental_alter_configs([res], request_timeout=T).values():
        f.result(timeout=T)
    # Brokers apply committed config changes asynchronously (in a cluster, the partition leader
    # may not be the broker that answered): wait for it.
    deadline = time.monotonic() + T
    while True:
        err = produce_sync(p, name, [{"value": b"a" * 5000, "partition": 0}])[0][0]
        if err is not None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err


# --- partitions / delete ------------------------------------------------------------------------


def test_create_partitions(broker):
    name = create_topic(broker, unique_topic("grow"), partitions=1)
    fs = ck_admin(broker).create_partitions([NewPartitions(name, 4)], operation_timeout=T, request_timeout=T)
    fs[name].result(timeout=T)
    t = wait_topic(broker, name, partitions=4)
    assert sorted(t.partitions) == [0, 1, 2, 3]
    p = ck_producer(broker)
    assert_delivered(produce_sync(p, name, [{"value": f"p{i}".encode(), "partition": i} for i in range(4)]))
    for i in range(4):
        assert [m.value() for m in consume_partition(broker, name, i, expected=1)] == [f"p{i}".encode()]

    # shrinking or same count is refused
    fs = ck_admin(broker).create_partitions([NewPartitions(name, 2)], operation_timeout=T, request_timeout=T)
    with pytest.raises(KafkaException) as ei:
        fs[name].result(timeout=T)
    assert kafka_error_code(ei.value) == KafkaError.INVALID_PARTITIONS


def test_create_partitions_unknown_topic(broker):
    name = unique_topic("nogrow")
    fs = ck_admin(broker).create_partitions([NewPartitions(name, 3)], operation_timeout=T, request_timeout=T)
    with pytest.raises(KafkaException) as ei:
        fs[name].result(timeout=T)
    assert kafka_error_code(ei.value) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_topic_then_produce_autocreates_fresh_topic(broker):
    name = create_topic(broker, unique_topic("del"), partitions=2)
    old_id = str(describe_topic(broker, name).topic_id)
    p = ck_producer(broker)
    assert_delivered(produce_sync(p, name, [{"value": b"old", "partition": 1}]))
    fs = ck_admin(broker).delete_topics([name], operation_timeout=T, request_timeout=T)
    fs[name].result(timeout=T)
    # Every broker must have applied the deletion: one still showing the old topic to the new
    # producer's first Metadata request would send it to the deleted partitions, and librdkafka
    # then waits topic.metadata.propagation.max.ms (30 s) for a topic it believes is gone.
    ports = [b.port for b in getattr(broker, "brokers", [broker])]

    def known_somewhere() -> bool:
        for port in ports:
            with kwire.Conn("127.0.0.1", port) as c:
                if kwire.topic_known(c, name):
                    return True
        return False

    deadline = time.monotonic() + T
    while known_somewhere() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not known_somewhere()
    assert name not in all_topic_names(broker)

    # auto.create.topics.enable=true: producing recreates it, empty, with the default count
    p2 = ck_producer(broker)
    assert_delivered(produce_sync(p2, name, [{"value": b"new", "partition": 0}]))
    t = wait_topic(broker, name)
    assert len(t.partitions) == 1
    assert str(describe_topic(broker, name).topic_id) != old_id
    assert [m.value() for m in consume_partition(broker, name, 0, expected=1)] == [b"new"]


def test_delete_topic_then_produce_unknown_without_autocreate(broker_factory):
    b = broker_factory({"auto.create.topics.enable": False})
    name = create_topic(b, unique_topic("del2"))
    ck_admin(b).delete_topics([name], operation_timeout=T, request_timeout=T)[name].result(timeout=T)
    deadline = time.monotonic() + T
    while name in all_topic_names(b) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert name not in all_topic_names(b)
    p = ck_producer(b, **{"message.timeout.ms": 5000})
    err = produce_sync(p, name, [{"value": b"x"}])[0][0]
    assert err is not None and err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                                              KafkaError._MSG_TIMED_OUT), err
    with kwire.Conn.to(b) as c:  # the topic is gone: any broker answers for it
        code, _ = kwire.produce_v3(c, name, 0, kwire.record_batch([(None, b"x")]))
    assert code == kwire.ERR_UNKNOWN_TOPIC_OR_PARTITION


def test_delete_unknown_topic(broker):
    name = unique_topic("nodel")
    fs = ck_admin(broker).delete_topics([name], operation_timeout=T, request_timeout=T)
    with pytest.raises(KafkaException) as ei:
        fs[name].result(timeout=T)
    assert kafka_error_code(ei.value) == KafkaError.UNKNOWN_TOPIC_OR_PART


# --- cluster, log dirs, delete records -------------------------------------------------------------


def test_describe_cluster(broker):
    res = ck_admin(broker).describe_cluster(request_timeout=T).result(timeout=T)
    assert sorted(n.id for n in res.nodes) == broker.node_ids
    assert sorted(f"{n.host}:{n.port}" for n in res.nodes) == sorted(broker.bootstrap.split(","))
    assert res.controller is not None and res.controller.id in broker.node_ids
    assert res.cluster_id
    # stable across calls
    assert ck_admin(broker).describe_cluster(request_timeout=T).result(timeout=T).cluster_id == res.cluster_id


def test_describe_log_dirs_sizes_after_produce(broker):
    name = create_topic(broker, unique_topic("ldirs"), partitions=2)
    p = ck_producer(broker)
    assert_delivered(produce_sync(p, name, [{"value": b"v" * 1000, "partition": 0}] * 20))
    admin = kp_admin(broker)
    try:
        out = admin.describe_log_dirs()
    finally:
        admin.close()
    # kafka-python asks every broker; each holds a replica of every partition (acks=all)
    assert sorted(b["broker"] for b in out) == broker.node_ids
    for entry, data_dir in zip(sorted(out, key=lambda b: b["broker"]), broker.data_dirs):
        dirs = entry["log_dirs"]
        assert len(dirs) >= 1
        sizes = {}
        for d in dirs:
            assert d["error_code"] == 0
            assert d["log_dir"].startswith(str(data_dir)), d["log_dir"]
            for t in d["topics"]:
                for part in t["partitions"]:
                    sizes[(t["name"], part["partition_index"])] = part["partition_size"]
        assert sizes.get((name, 0), 0) > 20 * 1000, (entry["broker"], sizes)
        assert sizes.get((name, 1), -1) >= 0, (entry["broker"], sizes)


def test_delete_records_moves_low_watermark(broker):
    name = create_topic(broker, unique_topic("delrec"))
    p = ck_producer(broker)
    assert_delivered(produce_sync(p, name, [{"value": f"m{i}".encode(), "partition": 0} for i in range(10)]))
    admin = ck_admin(broker)
    fs = admin.delete_records([TopicPartition(name, 0, 4)], request_timeout=T, operation_timeout=T)
    res = list(fs.values())[0].result(timeout=T)
    assert res.low_watermark == 4

    fs = admin.list_offsets({TopicPartition(name, 0): OffsetSpec.earliest()}, request_timeout=T)
    assert list(fs.values())[0].result(timeout=T).offset == 4
    fs = admin.list_offsets({TopicPartition(name, 0): OffsetSpec.latest()}, request_timeout=T)
    assert list(fs.values())[0].result(timeout=T).offset == 10

    got = consume_partition(broker, name, 0, expected=6)
    assert [m.offset() for m in got] == list(range(4, 10))
    assert got[0].value() == b"m4"

    # beyond the high watermark is refused
    fs = admin.delete_records([TopicPartition(name, 0, 50)], request_timeout=T, operation_timeout=T)
    with pytest.raises(KafkaException) as ei:
        list(fs.values())[0].result(timeout=T)
    assert kafka_error_code(ei.value) == KafkaError.OFFSET_OUT_OF_RANGE


# --- kafka-python admin ----------------------------------------------------------------------------


def test_kafka_python_admin_roundtrip(broker):
    from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType
    from kafka.errors import InvalidTopicError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

    name = unique_topic("kpadm")
    admin = kp_admin(broker)
    try:
        admin.create_topics({name: {"num_partitions": 2, "replication_factor": broker.replication_factor,
                                    "configs": {"retention.ms": "7200000"}}})
        wait_topic(broker, name, partitions=2)
        assert name in admin.list_topics()

        (t,) = admin.describe_topics([name])
        assert t["name"] == name and t["error_code"] == 0
        assert len(t["partitions"]) == 2

        cfgs = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, name)])
        topic_cfg = cfgs["topic"][name]
        assert topic_cfg["retention.ms"]["value"] == "7200000"
        assert topic_cfg["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"

        all_cfg = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, name)], config_filter="all")
        assert all_cfg["topic"][name]["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"

        res = admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, name,
                                                   configs={"retention.ms": "9000000"})],
                                  raise_on_unknown=False)
        assert res["topic"][name] == "OK", res
        # Another broker may answer before it has applied the change (as in Kafka): poll.
        deadline = time.monotonic() + T
        while (describe_topic_configs(broker, name)["retention.ms"].value != "9000000"
               and time.monotonic() < deadline):
            time.sleep(0.2)
        assert describe_topic_configs(broker, name)["retention.ms"].value == "9000000"

        admin.create_partitions({name: 3})
        wait_topic(broker, name, partitions=3)

        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics({name: {"num_partitions": 1, "replication_factor": 1}})
        with pytest.raises(InvalidTopicError):
            admin.create_topics({"bad name!": {"num_partitions": 1, "replication_factor": 1}})

        cl = admin.describe_cluster()
        assert sorted(b["broker_id"] for b in cl["brokers"]) == broker.node_ids
        assert cl["controller_id"] in broker.node_ids

        admin.delete_topics([name])
        deadline = time.monotonic() + T
        while name in admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert name not in admin.list_topics()
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics([name])
    finally:
        admin.close()


def test_authorized_operations_without_an_authorizer_are_the_ones_kafka_defines(broker):
    """Without an authorizer Kafka answers, for a topic and for the cluster, every operation it
    defines on that resource type (`AclEntry.supportedOperations`), not every operation there
    is: librdkafka's test 0081 expects exactly the topic's eight."""
    from confluent_kafka.admin import AclOperation as Op

    topic = create_topic(broker, unique_topic("authops"))
    admin = ck_admin(broker)
    fs = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True,
                               request_timeout=30)
    described = fs[topic].result(timeout=30)
    assert sorted(o.name for o in described.authorized_operations) == sorted(o.name for o in [
        Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS])
    cluster = admin.describe_cluster(include_authorized_operations=True,
                                     request_timeout=30).result(timeout=30)
    assert sorted(o.name for o in cluster.authorized_operations) == sorted(o.name for o in [
        Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE])
