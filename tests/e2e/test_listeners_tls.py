"""Named listeners and TLS: several listeners with their own protocols, Metadata answering with
the addresses of the listener a client connected on, produce/consume over SSL with the server
verified against a CA the test generates, client certificates (`ssl.client.auth`), certificate
rotation without a restart, start-up errors naming the listener at fault, a three-broker
cluster replicating over an SSL inter-broker listener with client certificates, and one whose
controller quorum speaks mutual TLS (an SSL controller listener).

Certificates and keys are generated here with the `openssl` CLI into the test's tmp dir; no key
is ever committed.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import Broker, Cluster, free_port, toml_value, unique_topic
from pki import Pki, openssl

pytestmark = [
    pytest.mark.single_node("starts its own brokers with their own listeners"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI"),
]


@pytest.fixture
def pki(tmp_path) -> Pki:
    return Pki(tmp_path)


# --- brokers -----------------------------------------------------------------------------------

@pytest.fixture
def make_broker(tmp_path):
    """Brokers with a PLAINTEXT listener on `broker.port` (used to see that they are up) and
    whatever else `listeners(b)` adds; stopped at the end."""
    started: list[Broker] = []

    def make(extra: dict, more_listeners: str = "", start: bool = True) -> Broker:
        b = Broker(tmp_path / f"b{len(started)}", {})
        b.ssl_port = free_port()
        listeners = f"PLAINTEXT://127.0.0.1:{b.port}"
        if more_listeners:
            listeners += "," + more_listeners.format(ssl_port=b.ssl_port)
        b.extra_config.update({
            "listeners": listeners,
            "advertised.listeners": "",
            **extra,
        })
        started.append(b)
        if start:
            b.start()
        return b

    yield make
    for b in started:
        if b.alive():
            b.stop()


def ssl_client(ca: Path, cert: Path | None = None, key: Path | None = None) -> dict:
    cfg = {"security.protocol": "SSL", "ssl.ca.location": str(ca)}
    if cert is not None:
        cfg["ssl.certificate.location"] = str(cert)
        cfg["ssl.key.location"] = str(key)
    return cfg


def server_cert_cn(port: int, ca: Path) -> str:
    """The CN of the certificate a new TLS connection to `port` is given."""
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            subject = dict(x[0] for x in tls.getpeercert()["subject"])
    return subject["commonName"]


# --- tests -------------------------------------------------------------------------------------

def test_metadata_answers_with_the_listener_the_client_connected_on(make_broker, pki):
    _, _, keystore = pki.leaf("server", "broker-1")
    b = make_broker(
        {"ssl.keystore.location": str(keystore)}, "SSL://127.0.0.1:{ssl_port}")
    plain = AdminClient({"bootstrap.servers": f"127.0.0.1:{b.port}"}).list_topics(timeout=10)
    assert plain.brokers[1].port == b.port
    secure = AdminClient({"bootstrap.servers": f"127.0.0.1:{b.ssl_port}",
                          **ssl_client(pki.ca)}).list_topics(timeout=10)
    assert secure.brokers[1].port == b.ssl_port

    # kafka-python agrees, over TLS with hostname checking.
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{b.ssl_port}", security_protocol="SSL",
                             ssl_cafile=str(pki.ca), ssl_check_hostname=True)
    try:
        nodes = admin.describe_cluster()["brokers"]
        assert [(n["broker_id"], n["port"]) for n in nodes] == [(1, b.ssl_port)], nodes
    finally:
        admin.close()


def test_produce_and_consume_over_ssl(make_broker, pki):
    _, _, keystore = pki.leaf("server", "broker-1")
    b = make_broker({"ssl.keystore.location": str(keystore)}, "SSL://127.0.0.1:{ssl_port}")
    bootstrap = f"127.0.0.1:{b.ssl_port}"
    topic = unique_topic("tls")
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", **ssl_client(pki.ca)})
    for i in range(200):
        p.produce(topic, key=str(i).encode(), value=f"value-{i}".encode() * 20)
    assert p.flush(30) == 0

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"),
                  "auto.offset.reset": "earliest", **ssl_client(pki.ca)})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 200 and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == [f"value-{i}".encode() * 20 for i in range(200)]

    # kafka-python over the same listener.
    from kafka import KafkaConsumer, KafkaProducer
    kp = KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL",
                       ssl_cafile=str(pki.ca), acks="all")
    kp.send(topic, b"from-kafka-python").get(timeout=30)
    kp.close()
    kc = KafkaConsumer(topic, bootstrap_servers=bootstrap, security_protocol="SSL",
                       ssl_cafile=str(pki.ca), auto_offset_reset="earliest",
                       consumer_timeout_ms=15000)
    values = [m.value for m in kc]
    kc.close()
    assert values[-1] == b"from-kafka-python" and len(values) == 201


def test_a_client_certificate_is_required_when_configured(make_broker, pki):
    _, _, keystore = pki.leaf("server", "broker-1")
    cert, key, _ = pki.leaf("client", "app-1")
    b = make_broker({
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
    }, "SSL://127.0.0.1:{ssl_port}")
    bootstrap = f"127.0.0.1:{b.ssl_port}"
    without = AdminClient({"bootstrap.servers": bootstrap, **ssl_client(pki.ca)})
    with pytest.raises(KafkaException):
        without.list_topics(timeout=5)
    with_cert = AdminClient({"bootstrap.servers": bootstrap, **ssl_client(pki.ca, cert, key)})
    assert with_cert.list_topics(timeout=10).brokers[1].port == b.ssl_port
    # A certificate from another CA is refused too.
    other = Pki(b.workdir / "other")
    ocert, okey, _ = other.leaf("client", "intruder")
    intruder = AdminClient({"bootstrap.servers": bootstrap, **ssl_client(pki.ca, ocert, okey)})
    with pytest.raises(KafkaException):
        intruder.list_topics(timeout=5)
    # The plaintext listener is untouched by the SSL listener's override.
    assert AdminClient({"bootstrap.servers": f"127.0.0.1:{b.port}"}).list_topics(timeout=10)


def test_certificates_are_reread_when_their_files_change(make_broker, pki):
    _, _, keystore = pki.leaf("server", "first")
    live = keystore.parent / "live-keystore.pem"
    shutil.copy(keystore, live)
    b = make_broker({"ssl.keystore.location": str(live)}, "SSL://127.0.0.1:{ssl_port}")
    assert server_cert_cn(b.ssl_port, pki.ca) == "first"
    _, _, rotated = pki.leaf("server2", "second")
    tmp = live.with_suffix(".tmp")
    shutil.copy(rotated, tmp)
    os.replace(tmp, live)
    deadline = time.monotonic() + 20
    cn = "first"
    while cn != "second" and time.monotonic() < deadline:
        time.sleep(0.5)
        cn = server_cert_cn(b.ssl_port, pki.ca)
    assert cn == "second", b.log_tail()
    # Clients keep working on the new certificate.
    md = AdminClient({"bootstrap.servers": f"127.0.0.1:{b.ssl_port}",
                      **ssl_client(pki.ca)}).list_topics(timeout=10)
    assert md.brokers[1].port == b.ssl_port


@pytest.mark.parametrize("extra, named", [
    ({"inter.broker.listener.name": "REPLICATION"}, "REPLICATION"),
    ({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:TLS"}, "TLS"),
])
def test_a_bad_listener_config_stops_start_up_naming_it(make_broker, extra, named):
    b = make_broker(extra, start=False)
    b.start(wait=False)
    code = b.wait_exit(timeout=30)
    assert code not in (0, None)
    assert named in b.log_tail(), b.log_tail()


def test_an_ssl_listener_without_a_keystore_stops_start_up(make_broker):
    b = make_broker({}, "SSL://127.0.0.1:{ssl_port}", start=False)
    b.start(wait=False)
    assert b.wait_exit(timeout=30) not in (0, None)
    assert "ssl.keystore.location" in b.log_tail(), b.log_tail()


def test_three_brokers_replicate_over_an_ssl_inter_broker_listener(tmp_path, pki):
    _, _, keystore = pki.leaf("broker", "broker")
    cluster = Cluster(tmp_path / "cluster", {
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.location": str(pki.ca),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
        "inter.broker.listener.name": "INTERNAL",
        "listener.name.internal.ssl.client.auth": "required",
        "default.replication.factor": 3,
        "offsets.topic.replication.factor": 3,
        "min.insync.replicas": 2,
    })
    for b in cluster.brokers:
        b.extra_config["listeners"] = (
            f"PLAINTEXT://127.0.0.1:{b.port},INTERNAL://127.0.0.1:{free_port()}")
        b.extra_config["advertised.listeners"] = ""
    try:
        cluster.start()
        topic = unique_topic("ibssl")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                      "enable.idempotence": True})
        for i in range(100):
            p.produce(topic, value=f"v{i}".encode())
        assert p.flush(60) == 0
        # Every replica is in sync: the followers fetched over TLS with client certificates.
        deadline = time.monotonic() + 30
        isr = []
        while time.monotonic() < deadline:
            md = admin.list_topics(topic, timeout=10)
            isr = sorted(md.topics[topic].partitions[0].isrs)
            if isr == [1, 2, 3]:
                break
            time.sleep(0.5)
        assert isr == [1, 2, 3], cluster.log_tail(30)
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique_topic("g"),
                      "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 100 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.close()
        assert got == [f"v{i}".encode() for i in range(100)]
    finally:
        cluster.stop()


def test_three_brokers_form_their_controller_quorum_over_ssl(tmp_path, pki):
    """`controller.listener.names = CONTROLLER` mapped to SSL: the voters speak mutual TLS with
    the CONTROLLER listener's key store and trust store; the cluster forms, replicates and
    serves clients as over plaintext."""
    cluster = Cluster(tmp_path / "cluster", {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
        "controller.listener.names": "CONTROLLER",
        "listener.name.controller.ssl.truststore.location": str(pki.ca),
        "default.replication.factor": 3,
        "offsets.topic.replication.factor": 3,
        "min.insync.replicas": 2,
    })
    controller_ports = {}
    for i, b in enumerate(cluster.brokers):
        node_id = i + 1
        _, _, keystore = pki.leaf(f"controller-{node_id}", f"controller-{node_id}")
        b.extra_config["listener.name.controller.ssl.keystore.location"] = str(keystore)
        voters = dict(v.split("@") for v in b.extra_config["controller.quorum.voters"].split(","))
        port = int(voters[str(node_id)].rsplit(":", 1)[1])
        controller_ports[node_id] = port
        # Broker 1 lists its controller listener (with its voter port), as Kafka's combined
        # configs do; the others leave it out of `listeners`.
        listeners = f"PLAINTEXT://127.0.0.1:{b.port}"
        if node_id == 1:
            listeners += f",CONTROLLER://127.0.0.1:{port}"
        b.extra_config["listeners"] = listeners
        b.extra_config["advertised.listeners"] = ""
    try:
        cluster.start()
        # Every broker's metadata lists all three (wait_ready), and the controller port is TLS.
        for node_id, port in controller_ports.items():
            assert server_cert_cn(port, pki.ca) == f"controller-{node_id}"
        topic = unique_topic("ctlssl")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
        for b in cluster.brokers:
            md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10)
            assert sorted(md.brokers) == [1, 2, 3]
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                      "enable.idempotence": True})
        for i in range(50):
            p.produce(topic, value=f"v{i}".encode())
        assert p.flush(60) == 0
        # The ISR changes go through the controller quorum too.
        deadline = time.monotonic() + 30
        isr = []
        while time.monotonic() < deadline:
            md = admin.list_topics(topic, timeout=10)
            isr = sorted(md.topics[topic].partitions[0].isrs)
            if isr == [1, 2, 3]:
                break
            time.sleep(0.5)
        assert isr == [1, 2, 3], cluster.log_tail(30)
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": unique_topic("g"),
                      "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 50 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.close()
        assert got == [f"v{i}".encode() for i in range(50)]
    finally:
        cluster.stop()


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_a_sasl_controller_listener_stops_start_up_naming_it(make_broker, protocol):
    b = make_broker({
        "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:{protocol}",
        "controller.listener.names": "CONTROLLER",
    }, start=False)
    b.start(wait=False)
    assert b.wait_exit(timeout=30) not in (0, None)
    tail = b.log_tail()
    assert "controller.listener.names" in tail and protocol in tail, tail


def test_inline_pem_keystore_and_secrets_stay_secret(make_broker, pki):
    """`ssl.keystore.certificate.chain` + `ssl.keystore.key` as PEM text serve TLS, and
    DescribeConfigs never returns the key."""
    from confluent_kafka.admin import ConfigResource, ResourceType
    cert, key, _ = pki.leaf("server", "inline")
    b = make_broker({
        "ssl.keystore.certificate.chain": cert.read_text(),
        "ssl.keystore.key": key.read_text(),
    }, "SSL://127.0.0.1:{ssl_port}", start=False)

    def write_config():
        # PEM text spans lines: TOML multi-line strings.
        lines = [f'"{k}" = """\n{v}"""' if isinstance(v, str) and "\n" in v
                 else f"{toml_value(k)} = {toml_value(v)}" for k, v in b.config().items()]
        b.config_path.write_text("\n".join(lines) + "\n")

    b.write_config = write_config
    b.start()
    assert server_cert_cn(b.ssl_port, pki.ca) == "inline"
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{b.ssl_port}", **ssl_client(pki.ca)})
    res = ConfigResource(ResourceType.BROKER, "1")
    entries = admin.describe_configs([res])[res].result(timeout=10)
    secret = entries["ssl.keystore.key"]
    assert secret.is_sensitive and secret.value is None
    assert "PRIVATE KEY" not in "".join(str(e.value) for e in entries.values())
    assert entries["ssl.keystore.certificate.chain"].value.startswith("-----BEGIN CERTIFICATE")


def test_an_encrypted_key_stops_start_up_saying_so(make_broker, pki):
    cert, key, _ = pki.leaf("server", "encrypted")
    openssl("pkcs8", "-topk8", "-in", key.name, "-out", "enc.key", "-v2", "aes256",
             "-passout", "pass:secret", cwd=pki.dir)
    keystore = pki.dir / "enc-keystore.pem"
    keystore.write_text((pki.dir / "enc.key").read_text() + cert.read_text())
    b = make_broker({"ssl.keystore.location": str(keystore), "ssl.key.password": "secret"},
                    "SSL://127.0.0.1:{ssl_port}", start=False)
    b.start(wait=False)
    assert b.wait_exit(timeout=30) not in (0, None)
    log = b.log_tail()
    assert "encrypted" in log and "not supported" in log, log
    assert "secret" not in log.replace("ssl.key.password", ""), log
