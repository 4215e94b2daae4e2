"""SASL (issue 13) with real clients: PLAIN over SASL_PLAINTEXT with users from the listener's
JAAS text, SCRAM-SHA-256/512 over SASL_SSL with credentials stored in the controller quorum
(AlterUserScramCredentials), re-authentication (`connections.max.reauth.ms`, KIP-368), the
errors of a failed or out-of-order exchange on the wire, ACLs checked against the principals
SASL and client certificates prove, and a three-broker cluster whose brokers log in to each other
with SASL while a remote-WAL topic replicates.

Every broker here also has a PLAINTEXT listener on `broker.port`: the fixtures use it to see that
the broker is up (as `User:ANONYMOUS`)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

import kwire
from conftest import Broker, Cluster, free_port, kafka_error_code, unique_topic
from pki import Pki
from test_produce_consume import kafkajs, kcat

pytestmark = [
    pytest.mark.single_node("starts its own brokers with their own listeners"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI"),
]

T = 30
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret",
         "erin": "erin-secret"}

API_SASL_HANDSHAKE = 17
API_SASL_AUTHENTICATE = 36
SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31


def plain_jaas(users: dict, login: str | None = None) -> str:
    opts = [f'user_{u}="{p}"' for u, p in users.items()]
    if login is not None:
        opts = [f'username="{login}"', f'password="{users[login]}"', *opts]
    return f"{PLAIN_MODULE} required {' '.join(opts)};"


@pytest.fixture
def pki(tmp_path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def sasl_broker(tmp_path, pki):
    """Brokers with PLAINTEXT on `port`, SASL_PLAINTEXT (PLAIN) on `sasl_port` and SASL_SSL
    (SCRAM-SHA-256/512) on `sasl_ssl_port`; `extra` config on top; stopped at the end."""
    started: list[Broker] = []
    _, _, keystore = pki.leaf("server", "broker")

    def make(extra: dict | None = None, start: bool = True) -> Broker:
        b = Broker(tmp_path / f"b{len(started)}", {})
        b.sasl_port, b.sasl_ssl_port = free_port(), free_port()
        b.extra_config.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{b.sasl_port},"
                         f"SASL_SSL://127.0.0.1:{b.sasl_ssl_port}",
            "advertised.listeners": "",
            "ssl.keystore.location": str(keystore),
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(USERS),
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            **(extra or {}),
        })
        started.append(b)
        if start:
            b.start()
        return b

    yield make
    for b in started:
        if b.alive():
            b.stop()


def plain_client(b: Broker, user: str, password: str | None = None) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{b.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN", "sasl.username": user,
            "sasl.password": USERS[user] if password is None else password}


def scram_client(b: Broker, pki: Pki, mechanism: str, user: str, password: str) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{b.sasl_ssl_port}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki.ca), "sasl.mechanisms": mechanism,
            "sasl.username": user, "sasl.password": password}


def produce_all(conf: dict, topic: str, n: int, prefix: str = "v") -> None:
    p = Producer({**conf, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 20000})
    errors = []
    for i in range(n):
        p.produce(topic, value=f"{prefix}{i}".encode(),
                  on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(60) == 0
    assert not errors, errors


def consume_all(conf: dict, topic: str, n: int, group: str | None = None) -> list[bytes]:
    c = Consumer({**conf, "group.id": group or unique_topic("g"),
                  "auto.offset.reset": "earliest", "enable.partition.eof": False})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                raise KafkaException(m.error())
            got.append(m.value())
    finally:
        c.close()
    return got


# --- SASL on the wire (kwire) ----------------------------------------------------------------------

def handshake(conn: kwire.Conn, mechanism: str) -> tuple[int, list[str]]:
    r = conn.request(API_SASL_HANDSHAKE, 1, kwire.string(mechanism))
    code = r.i16()
    return code, [r.string() for _ in range(r.i32())]


def authenticate(conn: kwire.Conn, auth_bytes: bytes, version: int = 1):
    """(error code, message, auth bytes, session lifetime ms or None) of SaslAuthenticate v0/v1."""
    r = conn.request(API_SASL_AUTHENTICATE, version, kwire.bytes_(auth_bytes))
    code, message = r.i16(), r.string()
    n = r.i32()
    data = r.take(n) if n >= 0 else None
    lifetime = r.i64() if version >= 1 else None
    return code, message, data, lifetime


def metadata_v1(conn: kwire.Conn) -> int:
    """A Metadata v1 request for no topic; returns the number of brokers listed."""
    r = conn.request(kwire.API_METADATA, 1, kwire.i32(0))
    return r.i32()


def plain_login(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()


# --- tests -----------------------------------------------------------------------------------------

def test_plain_over_sasl_plaintext_with_every_client(sasl_broker):
    b = sasl_broker()
    topic = unique_topic("plain")
    admin = AdminClient(plain_client(b, "admin"))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(T)
    # confluent-kafka (librdkafka).
    produce_all(plain_client(b, "alice"), topic, 50)
    assert consume_all(plain_client(b, "bob"), topic, 50) == [f"v{i}".encode() for i in range(50)]
    # Metadata on the SASL listener gives the SASL listener's address.
    md = AdminClient(plain_client(b, "alice")).list_topics(timeout=T)
    assert md.brokers[1].port == b.sasl_port

    # kafka-python.
    from kafka import KafkaConsumer, KafkaProducer
    kp = KafkaProducer(bootstrap_servers=f"127.0.0.1:{b.sasl_port}",
                       security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                       sasl_plain_username="bob", sasl_plain_password=USERS["bob"], acks="all")
    kp.send(topic, b"from-kafka-python").get(timeout=T)
    kp.close()

    # kafkajs.
    out = kafkajs({"op": "produce", "brokers": [f"127.0.0.1:{b.sasl_port}"], "topic": topic,
                   "sasl": {"mechanism": "plain", "username": "alice",
                            "password": USERS["alice"]},
                   "messages": [{"value": "from-kafkajs", "partition": 0}]})
    assert out["ok"], out

    # kcat.
    sasl_args = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
                 "-X", "sasl.username=alice", "-X", f"sasl.password={USERS['alice']}"]
    r = kcat("-P", "-b", f"127.0.0.1:{b.sasl_port}", "-t", topic, "-p", "0", *sasl_args,
             input="from-kcat\n")
    assert r.returncode == 0, r.stderr

    kc = KafkaConsumer(topic, bootstrap_servers=f"127.0.0.1:{b.sasl_port}",
                       security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                       sasl_plain_username="alice", sasl_plain_password=USERS["alice"],
                       auto_offset_reset="earliest", consumer_timeout_ms=10000)
    values = [m.value for m in kc]
    kc.close()
    assert values[50:] == [b"from-kafka-python", b"from-kafkajs", b"from-kcat"], values[50:]
    r = kcat("-C", "-b", f"127.0.0.1:{b.sasl_port}", "-t", topic, "-p", "0", "-e", "-q",
             "-o", "-1", *sasl_args)
    assert r.returncode == 0 and r.stdout.strip() == "from-kcat", r.stderr


def test_scram_over_sasl_ssl_with_credentials_stored_in_the_quorum(sasl_broker, pki):
    b = sasl_broker()
    admin = AdminClient(plain_client(b, "admin"))
    upserts = [
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                     b"carol-secret"),
        UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                     b"dave-secret"),
    ]
    for f in admin.alter_user_scram_credentials(upserts).values():
        f.result(T)
    topic = unique_topic("scram")
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(T)

    carol = scram_client(b, pki, "SCRAM-SHA-512", "carol", "carol-secret")
    produce_all(carol, topic, 100)
    assert sorted(consume_all(carol, topic, 100)) == sorted(f"v{i}".encode() for i in range(100))

    # kafka-python with SCRAM-SHA-256 over TLS.
    from kafka import KafkaProducer
    kp = KafkaProducer(bootstrap_servers=f"127.0.0.1:{b.sasl_ssl_port}",
                       security_protocol="SASL_SSL", ssl_cafile=str(pki.ca),
                       sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="dave",
                       sasl_plain_password="dave-secret", acks="all")
    kp.send(topic, b"from-kafka-python", partition=0).get(timeout=T)
    kp.close()
    # kafkajs with SCRAM-SHA-512 over TLS.
    out = kafkajs({"op": "produce", "brokers": [f"127.0.0.1:{b.sasl_ssl_port}"], "topic": topic,
                   "ssl": {"ca": str(pki.ca)},
                   "sasl": {"mechanism": "scram-sha-512", "username": "carol",
                            "password": "carol-secret"},
                   "messages": [{"value": "from-kafkajs", "partition": 0}]})
    assert out["ok"], out

    # The wrong mechanism for a user, or a wrong password, is refused.
    with pytest.raises(KafkaException) as e:
        AdminClient({**scram_client(b, pki, "SCRAM-SHA-256", "carol", "carol-secret"),
                     "socket.timeout.ms": 5000}).list_topics(timeout=5)
    assert kafka_error_code(e.value) in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT)

    # Once the credential is deleted, carol cannot log in any more.
    gone = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)])
    for f in gone.values():
        f.result(T)
    with pytest.raises(KafkaException):
        AdminClient({**carol, "socket.timeout.ms": 5000}).list_topics(timeout=5)


def test_failed_and_out_of_order_exchanges_get_kafkas_errors(sasl_broker):
    b = sasl_broker({"sasl.server.max.receive.size": 1024})
    # The right password: authenticated, then other requests pass.
    with kwire.Conn("127.0.0.1", b.sasl_port) as conn:
        assert handshake(conn, "PLAIN") == (0, ["PLAIN"])
        code, message, _, lifetime = authenticate(conn, plain_login("alice", USERS["alice"]))
        assert (code, lifetime) == (0, 0), message
        assert metadata_v1(conn) == 1
        # A second exchange after success is an illegal state for SaslAuthenticate alone.
        code, _, _, _ = authenticate(conn, plain_login("alice", USERS["alice"]))
        assert code == ILLEGAL_SASL_STATE
        assert conn.wait_closed()
    # A wrong password: SASL_AUTHENTICATION_FAILED with Kafka's message, then closed.
    with kwire.Conn("127.0.0.1", b.sasl_port) as conn:
        handshake(conn, "PLAIN")
        code, message, _, _ = authenticate(conn, plain_login("alice", "guess"), version=0)
        assert code == SASL_AUTHENTICATION_FAILED
        assert "Invalid username or password" in message, message
        assert conn.wait_closed()
    # An unknown mechanism: the enabled ones are listed, then closed.
    with kwire.Conn("127.0.0.1", b.sasl_port) as conn:
        assert handshake(conn, "SCRAM-SHA-256") == (UNSUPPORTED_SASL_MECHANISM, ["PLAIN"])
        assert conn.wait_closed()
    # Any other request before authentication closes the connection without an answer.
    with kwire.Conn("127.0.0.1", b.sasl_port) as conn:
        conn.send_raw(kwire.frame(kwire.request_header_v1(kwire.API_METADATA, 1, 1) + kwire.i32(0)))
        assert conn.wait_closed()
    # A frame over sasl.server.max.receive.size before authentication is refused...
    with kwire.Conn("127.0.0.1", b.sasl_port) as conn:
        big = kwire.request_header_v1(API_SASL_HANDSHAKE, 1, 1) + kwire.string("P" * 2000)
        conn.send_raw(kwire.frame(big))
        assert conn.wait_closed()
    # ... and SASL requests on a listener without SASL get ILLEGAL_SASL_STATE.
    with kwire.Conn("127.0.0.1", b.port) as conn:
        assert handshake(conn, "PLAIN")[0] == ILLEGAL_SASL_STATE

    # Each login is counted by outcome.
    from test_remote_wal import metric_sum_one
    counted = {r: metric_sum_one(b, "ferry_authentications_total", listener="SASL_PLAINTEXT",
                                 mechanism="PLAIN", result=r) for r in ("success", "failure")}
    assert counted == {"success": 1, "failure": 1}, counted

    # Real clients see the failure as an authentication error.
    with pytest.raises(KafkaException) as e:
        AdminClient({**plain_client(b, "alice", "guess"), "socket.timeout.ms": 5000}
                    ).list_topics(timeout=5)
    assert kafka_error_code(e.value) in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT)
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError as PyKafkaError
    with pytest.raises(PyKafkaError):
        KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{b.sasl_port}",
                         security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                         sasl_plain_username="alice", sasl_plain_password="guess",
                         request_timeout_ms=5000)
    assert b.alive()


def test_sessions_expire_unless_the_client_re_authenticates(sasl_broker):
    b = sasl_broker({"listener.name.sasl_plaintext.connections.max.reauth.ms": 2000})
    # A client that does not re-authenticate is disconnected at its first request after expiry.
    with kwire.Conn("127.0.0.1", b.sasl_port) as conn:
        handshake(conn, "PLAIN")
        code, _, _, lifetime = authenticate(conn, plain_login("alice", USERS["alice"]))
        assert (code, lifetime) == (0, 2000)
        assert metadata_v1(conn) == 1
        time.sleep(2.5)
        conn.send_raw(kwire.frame(kwire.request_header_v1(kwire.API_METADATA, 1, 9) + kwire.i32(0)))
        assert conn.wait_closed()
    # librdkafka re-authenticates in place (KIP-368): a producer running across several
    # session lifetimes loses nothing.
    topic = unique_topic("reauth")
    admin = AdminClient(plain_client(b, "admin"))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(T)
    p = Producer({**plain_client(b, "alice"), "acks": "all", "enable.idempotence": True})
    errors: list = []
    sent = 0
    until = time.monotonic() + 7
    while time.monotonic() < until:
        p.produce(topic, value=f"m{sent}".encode(),
                  on_delivery=lambda err, _m: errors.append(err) if err else None)
        sent += 1
        p.poll(0.05)
    assert p.flush(60) == 0
    assert not errors, errors
    got = consume_all(plain_client(b, "bob"), topic, sent)
    assert got == [f"m{i}".encode() for i in range(sent)]


def test_acls_apply_to_the_principals_sasl_and_certificates_prove(sasl_broker, pki):
    app_cert, app_key, _ = pki.leaf("app", "app-1")
    other_cert, other_key, _ = pki.leaf("other", "stranger")
    b = sasl_broker({
        "authorizer.class.name": STANDARD,
        "super.users": "User:admin",
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),O=ferry$/$1/,DEFAULT",
    }, start=False)
    b.ssl_port = free_port()
    # The fixture's listeners and an SSL one for client certificates.
    b.extra_config["listeners"] = (
        f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{b.sasl_port},"
        f"SASL_SSL://127.0.0.1:{b.sasl_ssl_port},SSL://127.0.0.1:{b.ssl_port}")
    b.start()

    admin = AdminClient(plain_client(b, "admin"))
    topic = unique_topic("acl")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(T)
    lit = ResourcePatternType.LITERAL
    bindings = [
        AclBinding(ResourceType.TOPIC, topic, lit, "User:alice", "*", AclOperation.WRITE,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, topic, lit, "User:app-1", "*", AclOperation.READ,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, "app-", ResourcePatternType.PREFIXED, "User:app-1", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        # The stranger has its group but not the topic.
        AclBinding(ResourceType.GROUP, "strangers", lit, "User:stranger", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(T)

    # alice may write (WRITE implies DESCRIBE); bob may not, nor may the anonymous listener.
    deadline = time.monotonic() + T
    while True:
        try:
            produce_all(plain_client(b, "alice"), topic, 10)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    for conf in (plain_client(b, "bob"), {"bootstrap.servers": b.bootstrap}):
        p = Producer({**conf, "acks": "all", "message.timeout.ms": 5000})
        errs: list = []
        p.produce(topic, value=b"x", on_delivery=lambda err, _m: errs.append(err))
        p.flush(15)
        assert errs and errs[0] is not None and errs[0].code() == TOPIC_AUTHORIZATION_FAILED, errs

    # The client certificate CN=app-1,O=ferry maps to User:app-1, which may read...
    ssl_conf = {"bootstrap.servers": f"127.0.0.1:{b.ssl_port}", "security.protocol": "SSL",
                "ssl.ca.location": str(pki.ca)}
    app = {**ssl_conf, "ssl.certificate.location": str(app_cert),
           "ssl.key.location": str(app_key)}
    assert consume_all(app, topic, 10, group="app-readers") == [f"v{i}".encode() for i in range(10)]
    # ... and another certificate maps to a principal that may not read the topic.
    stranger = {**ssl_conf, "ssl.certificate.location": str(other_cert),
                "ssl.key.location": str(other_key)}
    with pytest.raises(KafkaException) as e:
        consume_all(stranger, topic, 1, group="strangers")
    assert kafka_error_code(e.value) == TOPIC_AUTHORIZATION_FAILED


def produce_error(conf: dict, topic: str) -> int | None:
    """The error code of producing one record (None: delivered)."""
    p = Producer({**conf, "acks": "all", "message.timeout.ms": 8000})
    errs: list = []
    p.produce(topic, value=b"x", on_delivery=lambda err, _m: errs.append(err))
    p.flush(20)
    assert errs, "no delivery report"
    return None if errs[0] is None else errs[0].code()


def consume_error(conf: dict, topic: str, group: str) -> int | None:
    """The error code of consuming `topic` in `group` (None: a record arrived)."""
    try:
        consume_all(conf, topic, 1, group=group)
        return None
    except KafkaException as e:
        return kafka_error_code(e)


def test_an_acl_matrix_for_authenticated_users(sasl_broker):
    """Produce, consume, group and admin operations, each allowed and denied, with literal,
    prefixed and wildcard patterns and a DENY beating an ALLOW, for users who logged in with
    PLAIN (the admin is a super user)."""
    b = sasl_broker({"authorizer.class.name": STANDARD, "super.users": "User:admin"})
    admin = AdminClient(plain_client(b, "admin"))
    orders, audit, erin_topic = unique_topic("orders"), unique_topic("audit"), unique_topic("erin-")
    for t in (orders, audit, erin_topic):
        admin.create_topics([NewTopic(t, 1, 1)])[t].result(T)
    lit, pre = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    acl = AclBinding
    bindings = [
        # alice: write and read orders, in her own group.
        acl(ResourceType.TOPIC, orders, lit, "User:alice", "*", AclOperation.WRITE, allow),
        acl(ResourceType.TOPIC, orders, lit, "User:alice", "*", AclOperation.READ, allow),
        acl(ResourceType.GROUP, "alice-group", lit, "User:alice", "*", AclOperation.READ, allow),
        # bob: every topic (wildcard) but audit (DENY beats ALLOW).
        acl(ResourceType.TOPIC, "*", lit, "User:bob", "*", AclOperation.WRITE, allow),
        acl(ResourceType.TOPIC, audit, lit, "User:bob", "*", AclOperation.WRITE, deny),
        # erin: topics with her prefix, and creating topics on the cluster.
        acl(ResourceType.TOPIC, "erin-", pre, "User:erin", "*", AclOperation.ALL, allow),
        acl(ResourceType.BROKER, "kafka-cluster", lit, "User:erin", "*", AclOperation.CREATE,
            allow),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(T)
    alice, bob, erin = (plain_client(b, u) for u in ("alice", "bob", "erin"))

    # Produce.
    deadline = time.monotonic() + T
    while produce_error(alice, orders) is not None and time.monotonic() < deadline:
        time.sleep(0.5)  # the ACLs reach the broker's image in a moment
    assert produce_error(alice, orders) is None
    assert produce_error(alice, audit) == TOPIC_AUTHORIZATION_FAILED
    assert produce_error(bob, orders) is None
    assert produce_error(bob, audit) == TOPIC_AUTHORIZATION_FAILED
    assert produce_error(erin, erin_topic) is None
    assert produce_error(erin, orders) == TOPIC_AUTHORIZATION_FAILED

    # Consume: topic and group both needed.
    assert consume_error(alice, orders, "alice-group") is None
    assert consume_error(alice, orders, "another-group") == GROUP_AUTHORIZATION_FAILED
    assert consume_error(erin, erin_topic, "erin-group") == GROUP_AUTHORIZATION_FAILED

    # Admin: creating topics needs CREATE; broker configs need the cluster.
    def create(conf, name):
        a = AdminClient(conf)
        try:
            a.create_topics([NewTopic(name, 1, 1)])[name].result(T)
            return None
        except KafkaException as e:
            return kafka_error_code(e)

    assert create(alice, unique_topic("alice-new")) == TOPIC_AUTHORIZATION_FAILED
    assert create(erin, unique_topic("anything")) is None
    from confluent_kafka.admin import ConfigResource
    res = ConfigResource(ConfigResource.Type.BROKER, "1")
    alice_admin = AdminClient(alice)
    with pytest.raises(KafkaException) as e:
        alice_admin.describe_configs([res])[res].result(T)
    assert kafka_error_code(e.value) == CLUSTER_AUTHORIZATION_FAILED
    assert admin.describe_configs([res])[res].result(T)

    # Topics a user may not describe are not revealed.
    seen = set(alice_admin.list_topics(timeout=T).topics)
    assert orders in seen and audit not in seen and erin_topic not in seen


def test_kafkas_default_mechanism_stops_start_up_naming_the_key(sasl_broker):
    b = sasl_broker({"sasl.enabled.mechanisms": "GSSAPI"}, start=False)
    b.start(wait=False)
    assert b.wait_exit(timeout=30) not in (0, None)
    log = b.log_tail()
    assert "GSSAPI" in log and "sasl.enabled.mechanisms" in log, log


@pytest.mark.parametrize("inter_broker", ["sasl_plain", "ssl_certificates"])
def test_three_brokers_authenticate_to_each_other_and_replicate_a_remote_wal_topic(
        tmp_path, pki, inter_broker):
    """Inter-broker traffic (replica fetches, remote-WAL metadata, follower reports) over
    SASL_PLAINTEXT with PLAIN and re-authentication every 3 s, or over SSL with client
    certificates mapped to `User:broker`; the controller quorum over mutual TLS; clients over
    SASL_SSL with SCRAM-SHA-512, the admin over PLAIN, ACLs on, and a remote-WAL topic at
    acks=all: every replica in sync, every record read back."""
    from test_remote_wal import WAL_TUNING, local_buckets, metric_sum

    _, _, keystore = pki.leaf("broker", "broker")
    _, wal = local_buckets(tmp_path / "buckets")
    admins = {"admin": "admin-secret"}
    if inter_broker == "sasl_plain":
        internal = {
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config":
                plain_jaas({"broker": "broker-secret"}, login="broker"),
            # Brokers' own connections must log in again every few seconds, in place.
            "listener.name.internal.connections.max.reauth.ms": 3000,
        }
        internal_protocol = "SASL_PLAINTEXT"
    else:
        internal = {
            "ssl.truststore.location": str(pki.ca),
            "listener.name.internal.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),O=ferry$/$1/,DEFAULT",
        }
        internal_protocol = "SSL"
    cluster = Cluster(tmp_path / "cluster", {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,ADMIN:SASL_PLAINTEXT,"
                                          f"INTERNAL:{internal_protocol},CLIENT:SASL_SSL,"
                                          "CONTROLLER:SSL",
        "inter.broker.listener.name": "INTERNAL",
        # The controllers speak mutual TLS too.
        "controller.listener.names": "CONTROLLER",
        "listener.name.controller.ssl.truststore.location": str(pki.ca),
        **internal,
        "listener.name.admin.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.admin.plain.sasl.jaas.config": plain_jaas(admins),
        "listener.name.client.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "ssl.keystore.location": str(keystore),
        "authorizer.class.name": STANDARD,
        "super.users": "User:broker;User:admin",
        "default.replication.factor": 3,
        "offsets.topic.replication.factor": 3,
        "min.insync.replicas": 2,
        **wal,
        **WAL_TUNING,
    })
    for b in cluster.brokers:
        b.admin_port, b.internal_port, b.client_port = free_port(), free_port(), free_port()
        b.extra_config["listeners"] = (
            f"PLAINTEXT://127.0.0.1:{b.port},ADMIN://127.0.0.1:{b.admin_port},"
            f"INTERNAL://127.0.0.1:{b.internal_port},CLIENT://127.0.0.1:{b.client_port}")
        b.extra_config["advertised.listeners"] = ""
    try:
        cluster.start()
        admin = AdminClient({
            "bootstrap.servers": ",".join(f"127.0.0.1:{b.admin_port}" for b in cluster.brokers),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": "admin", "sasl.password": "admin-secret"})
        for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "app", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                b"app-secret")]).values():
            f.result(T)
        topic = unique_topic("secwal")
        admin.create_topics([NewTopic(topic, 3, 3, config={"remote.wal.enable": "true"})]
                            )[topic].result(T)
        lit = ResourcePatternType.LITERAL
        acls = [AclBinding(ResourceType.TOPIC, topic, lit, "User:app", "*", op,
                           AclPermissionType.ALLOW)
                for op in (AclOperation.WRITE, AclOperation.READ)]
        acls.append(AclBinding(ResourceType.GROUP, "*", lit, "User:app", "*", AclOperation.READ,
                               AclPermissionType.ALLOW))
        for f in admin.create_acls(acls).values():
            f.result(T)

        app = {"bootstrap.servers": ",".join(f"127.0.0.1:{b.client_port}" for b in cluster.brokers),
               "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca),
               "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "app",
               "sasl.password": "app-secret"}
        deadline = time.monotonic() + T
        while True:
            try:
                produce_all(app, topic, 300)
                break
            except AssertionError:
                # The credential and ACLs reach every broker's image in a moment.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        deadline = time.monotonic() + 60
        isrs: list = []
        while time.monotonic() < deadline:
            md = admin.list_topics(topic, timeout=10)
            isrs = [sorted(p.isrs) for p in md.topics[topic].partitions.values()]
            if all(isr == [1, 2, 3] for isr in isrs):
                break
            time.sleep(0.5)
        assert all(isr == [1, 2, 3] for isr in isrs), (isrs, cluster.log_tail(30))
        # Past a few session lifetimes the followers still replicate through the object store.
        time.sleep(4)
        produce_all(app, topic, 300, prefix="w")
        got = consume_all(app, topic, 600)
        assert sorted(got) == sorted([f"v{i}".encode() for i in range(300)]
                                     + [f"w{i}".encode() for i in range(300)])
        # The followers got their bytes through the object store, over authenticated reports.
        assert metric_sum(cluster, "ferry_remote_wal_follower_bytes_total", path="wal") > 0
        logs = "".join(b.log_tail(400) for b in cluster.brokers)
        assert "SASL login" not in logs and "re-authentication failed" not in logs, logs[-5000:]
        # No broker connection outlived its session: each re-authenticated in time.
        assert "expired (connections.max.reauth.ms)" not in logs, logs[-5000:]
    finally:
        cluster.stop()


# --- OAUTHBEARER ------------------------------------------------------------------------------------

class JwtIssuer:
    """An RSA key made with the openssl CLI, its JWKS, and RS256 tokens signed with it."""

    def __init__(self, root, kid: str):
        import subprocess
        import tempfile
        self.dir = Path(tempfile.mkdtemp(prefix=f"jwt-{kid}-", dir=root))
        self.key = self.dir / "key.pem"
        self.kid = kid
        subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt",
                        "rsa_keygen_bits:2048", "-out", str(self.key)], check=True,
                       capture_output=True)
        modulus = subprocess.run(["openssl", "rsa", "-in", str(self.key), "-noout", "-modulus"],
                                 check=True, capture_output=True, text=True).stdout
        n = bytes.fromhex(modulus.strip().split("=", 1)[1])
        self.jwk = {"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
                    "n": self.b64(n), "e": "AQAB"}

    @staticmethod
    def b64(data: bytes) -> str:
        import base64
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    def token(self, sub: str, lifetime_s: int = 3600, **claims) -> str:
        import json
        import subprocess
        now = int(time.time())
        body = {"sub": sub, "iss": "https://issuer.test", "aud": "kafka", "iat": now,
                "exp": now + lifetime_s, **claims}
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        signing_input = (self.b64(json.dumps(header).encode()) + "."
                         + self.b64(json.dumps(body).encode()))
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)],
                             input=signing_input.encode(), check=True,
                             capture_output=True).stdout
        return signing_input + "." + self.b64(sig)


def oauth_client(b: Broker, token: str) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{b.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "OAUTHBEARER",
            "oauth_cb": lambda _config: (token, time.time() + 3600)}


def test_oauthbearer_with_signed_jwts_checked_against_a_jwks_file(sasl_broker, tmp_path):
    import json
    issuer = JwtIssuer(tmp_path, "key-1")
    intruder = JwtIssuer(tmp_path, "key-1")  # same kid, another key
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [issuer.jwk]}))
    b = sasl_broker({
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER,PLAIN",
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        "sasl.oauthbearer.jwks.endpoint.url": f"file://{jwks}",
        "sasl.oauthbearer.expected.audience": "kafka",
        "sasl.oauthbearer.expected.issuer": "https://issuer.test",
        "authorizer.class.name": STANDARD,
        "super.users": "User:admin;User:app",
    })
    topic = unique_topic("oauth")
    admin = AdminClient(plain_client(b, "admin"))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(T)

    # A valid token for `app` (a super user): produce and consume.
    app = oauth_client(b, issuer.token("app"))
    produce_all(app, topic, 20)
    assert consume_all(app, topic, 20) == [f"v{i}".encode() for i in range(20)]
    # The principal is the token's subject: `nobody` is authenticated but not authorized.
    assert produce_error(oauth_client(b, issuer.token("nobody")), topic) == TOPIC_AUTHORIZATION_FAILED

    # Forged, expired or misdirected tokens do not authenticate.
    for bad in (intruder.token("app"), issuer.token("app", lifetime_s=-600),
                issuer.token("app", aud="payments"), issuer.token("app", iss="https://evil.test")):
        c = AdminClient({**oauth_client(b, bad), "socket.timeout.ms": 5000})
        with pytest.raises(KafkaException):
            c.list_topics(timeout=5)
    from test_remote_wal import metric_sum_one
    assert metric_sum_one(b, "ferry_authentications_total", mechanism="OAUTHBEARER",
                          result="failure") >= 4

    # kafka-python and kafkajs with a token of their own.
    from kafka import KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self):
            return issuer.token("app")

    kp = KafkaProducer(bootstrap_servers=f"127.0.0.1:{b.sasl_port}",
                       security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                       sasl_oauth_token_provider=Provider(), acks="all")
    kp.send(topic, b"from-kafka-python").get(timeout=T)
    kp.close()
    out = kafkajs({"op": "produce", "brokers": [f"127.0.0.1:{b.sasl_port}"], "topic": topic,
                   "sasl": {"mechanism": "oauthbearer", "token": issuer.token("app")},
                   "messages": [{"value": "from-kafkajs", "partition": 0}]})
    assert out["ok"], out

    # The issuer rotates its key: the broker re-reads the JWKS file.
    rotated = JwtIssuer(tmp_path, "key-2")
    jwks.write_text(json.dumps({"keys": [rotated.jwk]}))
    deadline = time.monotonic() + 10
    while True:
        try:
            produce_all(oauth_client(b, rotated.token("app")), topic, 1, prefix="rotated")
            break
        except (AssertionError, KafkaException):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_oauthbearer_without_a_jwks_file_stops_start_up(sasl_broker):
    b = sasl_broker({"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER"},
                    start=False)
    b.start(wait=False)
    assert b.wait_exit(timeout=30) not in (0, None)
    assert "sasl.oauthbearer.jwks.endpoint.url" in b.log_tail(), b.log_tail()
