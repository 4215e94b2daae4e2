"""Security administration stored in the controller quorum: SCRAM credentials
(AlterUserScramCredentials / DescribeUserScramCredentials), ACLs (CreateAcls / DescribeAcls /
DeleteAcls) and client quotas (AlterClientQuotas / DescribeClientQuotas), with Kafka's error
codes, on one broker and across a three-broker cluster (a change made through one broker is
seen by the others once their metadata image has it).

confluent-kafka has no client-quota admin calls; those go over the raw wire (kwire).
"""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from conftest import Cluster
from kwire import Conn, Reader, i8, i32, string

INVALID_REQUEST = 42
UNSUPPORTED_SASL_MECHANISM = 33
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93

ALTER_CLIENT_QUOTAS = 49
DESCRIBE_CLIENT_QUOTAS = 48


_ADMINS: dict[int, AdminClient] = {}


def admin_for(port: int) -> AdminClient:
    """One client per port, kept: a collected client fails its pending futures (_DESTROY)."""
    if port not in _ADMINS:
        _ADMINS[port] = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    return _ADMINS[port]


def error_code(future) -> int:
    with pytest.raises(KafkaException) as e:
        future.result(timeout=30)
    return e.value.args[0].code()


def only(futures: dict):
    (future,) = futures.values()
    return future


def eventually(check, timeout: float = 30.0):
    """Polls `check` until it returns a truthy value (a follower's image may lag)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except KafkaException as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"not seen within {timeout}s; last: {last!r}")


# --- client quotas over the wire (v0, not flexible) ------------------------------------------


def f64(v: float) -> bytes:
    return struct.pack(">d", v)


def entity_bytes(entity: list[tuple[str, str | None]]) -> bytes:
    return i32(len(entity)) + b"".join(string(t) + string(n) for t, n in entity)


def alter_quotas(port: int, entries, validate_only: bool = False) -> list[int]:
    """entries: [(entity, [(key, value, remove)])]; returns each entry's error code."""
    body = i32(len(entries))
    for entity, ops in entries:
        body += entity_bytes(entity) + i32(len(ops))
        for key, value, remove in ops:
            body += string(key) + f64(value) + i8(1 if remove else 0)
    body += i8(1 if validate_only else 0)
    with Conn("127.0.0.1", port) as conn:
        r = conn.request(ALTER_CLIENT_QUOTAS, 0, body)
    r.i32()  # throttle
    codes = []
    for _ in range(r.i32()):
        codes.append(r.i16())
        r.string()
        for _ in range(r.i32()):
            r.string(), r.string()
    return codes


def read_f64(r: Reader) -> float:
    return struct.unpack(">d", r.take(8))[0]


def describe_quotas(port: int, components, strict: bool = False):
    """components: [(entity_type, match_type, match)]; returns (error code, entries) with
    entries as {tuple(sorted entity): {key: value}}."""
    body = i32(len(components))
    for entity_type, match_type, match in components:
        body += string(entity_type) + i8(match_type) + string(match)
    body += i8(1 if strict else 0)
    with Conn("127.0.0.1", port) as conn:
        r = conn.request(DESCRIBE_CLIENT_QUOTAS, 0, body)
    r.i32()
    code = r.i16()
    r.string()
    entries = {}
    for _ in range(max(r.i32(), 0)):
        entity = tuple(sorted((r.string(), r.string()) for _ in range(r.i32())))
        entries[entity] = {r.string(): read_f64(r) for _ in range(r.i32())}
    return code, entries


# --- single broker ----------------------------------------------------------------------------


def test_scram_credentials_are_stored_described_and_deleted(broker):
    admin = admin_for(broker.port)
    user = "alice"
    futures = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"secret", b"salt1"
            )
        ]
    )
    futures[user].result(timeout=30)
    admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"secret", b"salt2"
            )
        ]
    )[user].result(timeout=30)

    described = admin.describe_user_scram_credentials([user])[user].result(timeout=30)
    infos = {(i.mechanism, i.iterations) for i in described.scram_credential_infos}
    assert infos == {(ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)}
    everyone = admin.describe_user_scram_credentials().result(timeout=30)
    assert user in everyone

    # Kafka's refusals.
    too_few = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw")]
    )
    assert error_code(too_few["bob"]) == UNACCEPTABLE_CREDENTIAL
    missing = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)]
    )
    assert error_code(missing["bob"]) == RESOURCE_NOT_FOUND
    assert error_code(admin.describe_user_scram_credentials(["bob"])["bob"]) == RESOURCE_NOT_FOUND

    admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)]
    )[user].result(timeout=30)
    described = admin.describe_user_scram_credentials([user])[user].result(timeout=30)
    assert [i.mechanism for i in described.scram_credential_infos] == [ScramMechanism.SCRAM_SHA_512]
    admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)]
    )[user].result(timeout=30)
    assert error_code(admin.describe_user_scram_credentials([user])[user]) == RESOURCE_NOT_FOUND


def test_a_user_altered_twice_in_one_request_is_a_duplicate(broker):
    admin = admin_for(broker.port)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    futures = admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion("carol", info, b"a"),
            UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"b"),
        ]
    )
    assert error_code(futures["carol"]) == DUPLICATE_RESOURCE
    assert error_code(admin.describe_user_scram_credentials(["carol"])["carol"]) == RESOURCE_NOT_FOUND


def acl(name: str, pattern=ResourcePatternType.LITERAL, principal="User:alice",
        op=AclOperation.READ, permission=AclPermissionType.ALLOW, restype=ResourceType.TOPIC):
    return AclBinding(restype, name, pattern, principal, "*", op, permission)


ANY_FILTER = AclBindingFilter(
    ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
)


def test_acls_are_created_described_with_filters_and_deleted(broker):
    admin = admin_for(broker.port)
    bindings = [
        acl("orders"),
        acl("ord", ResourcePatternType.PREFIXED, op=AclOperation.WRITE),
        acl("*", principal="User:bob"),
        acl("kafka-cluster", restype=ResourceType.BROKER, op=AclOperation.ALTER),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(timeout=30)
    # Creating the same binding again succeeds and keeps one copy.
    only(admin.create_acls([acl("orders")])).result(timeout=30)

    everything = admin.describe_acls(ANY_FILTER).result(timeout=30)
    assert sorted(map(str, everything)) == sorted(map(str, bindings))

    # MATCH: the literal name, the wildcard, and prefixes of the name.
    match = AclBindingFilter(
        ResourceType.TOPIC, "orders", ResourcePatternType.MATCH, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    matched = admin.describe_acls(match).result(timeout=30)
    assert sorted(b.name for b in matched) == ["*", "ord", "orders"]
    by_principal = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.ANY, AclPermissionType.ANY
    )
    assert [b.name for b in admin.describe_acls(by_principal).result(timeout=30)] == ["*"]

    bad_cluster = acl("my-cluster", restype=ResourceType.BROKER, op=AclOperation.ALTER)
    assert error_code(only(admin.create_acls([bad_cluster]))) == INVALID_REQUEST

    literal_topics = AclBindingFilter(
        ResourceType.TOPIC, None, ResourcePatternType.LITERAL, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    deleted = only(admin.delete_acls([literal_topics])).result(timeout=30)
    assert sorted(b.name for b in deleted) == ["*", "orders"]
    left = admin.describe_acls(ANY_FILTER).result(timeout=30)
    assert sorted(b.name for b in left) == ["kafka-cluster", "ord"]


def test_client_quotas_are_set_described_and_removed(broker):
    alice = [("user", "alice")]
    default_user = [("user", None)]
    assert alter_quotas(
        broker.port,
        [
            (alice, [("producer_byte_rate", 1048576.0, False), ("request_percentage", 25.0, False)]),
            (default_user, [("consumer_byte_rate", 2048.0, False)]),
        ],
    ) == [0, 0]

    code, entries = describe_quotas(broker.port, [("user", 0, "alice")])
    assert code == 0
    assert entries == {(("user", "alice"),): {"producer_byte_rate": 1048576.0, "request_percentage": 25.0}}
    _, defaults = describe_quotas(broker.port, [("user", 1, None)])
    assert defaults == {(("user", None),): {"consumer_byte_rate": 2048.0}}
    _, specified = describe_quotas(broker.port, [("user", 2, None)], strict=True)
    assert list(specified) == [(("user", "alice"),)]

    # validate_only stores nothing; Kafka's refusals.
    bob = [("user", "bob")]
    assert alter_quotas(broker.port, [(bob, [("producer_byte_rate", 10.0, False)])], validate_only=True) == [0]
    assert describe_quotas(broker.port, [("user", 0, "bob")])[1] == {}
    assert alter_quotas(
        broker.port,
        [
            (bob, [("bogus_rate", 1.0, False)]),
            (bob, [("producer_byte_rate", -5.0, False)]),
            ([("ip", "1.2.3.4"), ("user", "bob")], [("connection_creation_rate", 1.0, False)]),
        ],
    ) == [INVALID_REQUEST] * 3
    assert describe_quotas(broker.port, [("user", 0, None)])[0] == INVALID_REQUEST

    assert alter_quotas(
        broker.port,
        [(alice, [("producer_byte_rate", 0.0, True), ("request_percentage", 0.0, True)])],
    ) == [0]
    assert describe_quotas(broker.port, [("user", 0, "alice")])[1] == {}


# --- three brokers ----------------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    c.start()
    yield c
    c.stop()


def test_every_broker_of_a_cluster_sees_credentials_acls_and_quotas(cluster):
    first, second, third = (b.port for b in cluster.brokers)

    user = "dave"
    admin_for(first).alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"pw")]
    )[user].result(timeout=30)
    seen = eventually(
        lambda: admin_for(third).describe_user_scram_credentials([user])[user].result(timeout=10)
    )
    assert [(i.mechanism, i.iterations) for i in seen.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 4096)
    ]

    binding = acl("payments", ResourcePatternType.PREFIXED, principal="User:dave")
    only(admin_for(second).create_acls([binding])).result(timeout=30)
    eventually(lambda: [str(b) for b in admin_for(first).describe_acls(ANY_FILTER).result(timeout=10)]
               == [str(binding)])

    assert alter_quotas(third, [([("client-id", "app")], [("producer_byte_rate", 4096.0, False)])]) == [0]
    eventually(lambda: describe_quotas(second, [("client-id", 0, "app")])[1]
               == {(("client-id", "app"),): {"producer_byte_rate": 4096.0}})

    # Deleting through another broker than the one that created it.
    deleted = only(admin_for(third).delete_acls([ANY_FILTER])).result(timeout=30)
    assert [str(b) for b in deleted] == [str(binding)]
    eventually(lambda: admin_for(second).describe_acls(ANY_FILTER).result(timeout=10) == [])
