"""Authorization (issue 13) with real clients: `authorizer.class.name` turns Kafka's
StandardAuthorizer rules on. These clients connect on a PLAINTEXT listener as `User:ANONYMOUS`
(test_sasl.py has ACLs for principals that SASL and client certificates prove); these tests
cover what the broker's config decides:
no ACL + deny by default, `super.users`, `allow.everyone.if.no.acl.found`, and an unknown
authorizer class stopping start-up."""

from __future__ import annotations

import subprocess

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic

from conftest import FERRY_BIN, Broker, ck_admin, ck_producer, consume_partition, kafka_error_code, produce_sync, unique_topic

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC_AUTHORIZATION_FAILED = 29
T = 30

pytestmark = pytest.mark.single_node(
    "in a cluster the brokers' own requests would need ACLs for User:ANONYMOUS; test_sasl.py "
    "runs a secured cluster")


def create_error(broker, name: str) -> int | None:
    fs = ck_admin(broker).create_topics([NewTopic(name, num_partitions=1, replication_factor=1)],
                                        operation_timeout=T, request_timeout=T)
    try:
        fs[name].result(timeout=T)
        return None
    except KafkaException as e:
        return kafka_error_code(e)


def test_no_acl_denies_by_default_and_hides_topics(broker_factory):
    b = broker_factory({"authorizer.class.name": STANDARD})
    topic = unique_topic()
    assert create_error(b, topic) == TOPIC_AUTHORIZATION_FAILED
    # The all-topics metadata shows nothing the principal may not describe.
    md = ck_admin(b).list_topics(timeout=T)
    assert topic not in md.topics
    assert not [t for t in md.topics if not t.startswith("__")]


def test_super_user_may_do_everything(broker_factory):
    b = broker_factory({"authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS"})
    topic = unique_topic()
    assert create_error(b, topic) is None
    reports = produce_sync(ck_producer(b), topic, [{"value": b"v%d" % i} for i in range(3)])
    assert all(err is None for err, _ in reports), reports
    assert [m.value() for m in consume_partition(b, topic, 0, expected=3)] == [b"v0", b"v1", b"v2"]


def test_allow_everyone_if_no_acl_found(broker_factory):
    b = broker_factory({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                        "allow.everyone.if.no.acl.found": True})
    topic = unique_topic()
    assert create_error(b, topic) is None
    reports = produce_sync(ck_producer(b), topic, [{"value": b"x"}])
    assert reports[0][0] is None, reports


def test_unknown_authorizer_class_stops_start_up(tmp_path):
    b = Broker(tmp_path, {"authorizer.class.name": "com.example.MyAuthorizer"})
    b.write_config()
    out = subprocess.run([str(FERRY_BIN), "serve", "--config", str(b.config_path)],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode != 0
    assert "authorizer.class.name" in out.stdout + out.stderr
    assert "com.example.MyAuthorizer" in out.stdout + out.stderr
