//! `Authorizer::authorize` and `authorized_operations`: the rules of Kafka's
//! `StandardAuthorizerData.findAclRule`/`findResult`, mostly as Kafka's own tests state them.

use super::*;
use AclOperation::*;
use AclPermissionType::{Allow, Deny};
use AuthorizationResult::{Allowed, Denied};
use PatternType::{Literal, Prefixed};
use ResourceType::{Cluster, Group, Topic};

const H1: &str = "192.168.1.1";
const H2: &str = "192.168.1.2";

fn check(
    a: &Authorizer,
    who: &str,
    op: AclOperation,
    rt: ResourceType,
    name: &str,
) -> AuthorizationResult {
    a.authorize(&user(who), H1, op, rt, name)
}

#[test]
fn literal_acl_covers_only_its_own_name() {
    let a = authorizer(vec![allow("foo", Literal, "User:bob", Read)]);
    assert_eq!(check(&a, "bob", Read, Topic, "foo"), Allowed);
    assert_eq!(check(&a, "bob", Read, Topic, "foobar"), Denied);
    assert_eq!(check(&a, "bob", Read, Topic, "fo"), Denied);
    assert_eq!(
        check(&a, "bob", Read, Group, "foo"),
        Denied,
        "another resource type"
    );
}

#[test]
fn literal_wildcard_covers_every_name_of_its_type() {
    let a = authorizer(vec![allow("*", Literal, "User:bob", Write)]);
    for name in ["foo", "bar", "*", "x"] {
        assert_eq!(check(&a, "bob", Write, Topic, name), Allowed, "{name}");
    }
    assert_eq!(check(&a, "bob", Write, Group, "foo"), Denied);
}

#[test]
fn prefixed_star_is_a_prefix_not_a_wildcard() {
    let a = authorizer(vec![allow("*", Prefixed, "User:bob", Read)]);
    assert_eq!(check(&a, "bob", Read, Topic, "foo"), Denied);
    assert_eq!(check(&a, "bob", Read, Topic, "*foo"), Allowed);
}

/// Kafka's `testPrefixAcls`.
#[test]
fn prefixed_acls_cover_names_starting_with_the_prefix() {
    let a = authorizer(vec![
        allow("fooa", Prefixed, "User:alice", All),
        allow("foobar", Literal, "User:bob", All),
        allow("f", Prefixed, "User:bob", All),
    ]);
    assert_eq!(check(&a, "bob", Write, Topic, "foobarr"), Allowed);
    assert_eq!(check(&a, "bob", Read, Topic, "goobar"), Denied);
    assert_eq!(check(&a, "bob", Read, Topic, "fooa"), Allowed);
    assert_eq!(check(&a, "alice", Describe, Topic, "fooa"), Allowed);
    assert_eq!(check(&a, "alice", Write, Topic, "bar"), Denied);
    assert_eq!(check(&a, "alice", Read, Topic, "baz"), Denied);
    assert_eq!(check(&a, "alice", Read, Topic, "fooab"), Allowed);
    assert_eq!(check(&a, "alice", Read, Topic, "foob"), Denied);
}

/// Kafka's `testAuthorizationWithManyAcls`.
#[test]
fn many_acls_of_mixed_kinds() {
    let a = authorizer(vec![
        allow("green2", Literal, "User:*", Read),
        allow("green", Prefixed, "User:bob", Read),
        allow("betamax4", Literal, "User:bob", Read),
        allow("betamax", Literal, "User:bob", Read),
        allow("beta", Prefixed, "User:*", Read),
        allow("alpha", Prefixed, "User:*", Read),
        deny("alp", Prefixed, "User:bob", Read),
        acl(Group, "*", Literal, "User:bob", "*", Write, Allow),
        acl(Group, "wheel", Literal, "User:*", "*", Write, Deny),
    ]);
    assert_eq!(check(&a, "bob", Read, Topic, "green1"), Allowed);
    assert_eq!(check(&a, "bob", Write, Group, "wheel"), Denied);
    assert_eq!(check(&a, "bob", Read, Topic, "alpha"), Denied);
    assert_eq!(check(&a, "bob", Write, Group, "arbitrary"), Allowed);
    assert_eq!(check(&a, "bob", Read, Topic, "ala"), Denied);
    assert_eq!(check(&a, "alice", Read, Topic, "alpha1"), Allowed);
    assert_eq!(
        check(&a, "alice", Read, Topic, "betamax"),
        Allowed,
        "via prefix beta for User:*"
    );
}

#[test]
fn deny_beats_allow_whichever_pattern_carries_it() {
    // Deny on a literal, allow on a prefix, and the reverse; deny on the wildcard.
    let a = authorizer(vec![
        allow("t", Prefixed, "User:bob", Read),
        deny("topic", Literal, "User:bob", Read),
    ]);
    assert_eq!(check(&a, "bob", Read, Topic, "topic"), Denied);
    assert_eq!(check(&a, "bob", Read, Topic, "topic2"), Allowed);

    let a = authorizer(vec![
        allow("topic", Literal, "User:bob", Read),
        deny("top", Prefixed, "User:bob", Read),
    ]);
    assert_eq!(check(&a, "bob", Read, Topic, "topic"), Denied);

    let a = authorizer(vec![
        allow("topic", Literal, "User:bob", Read),
        deny("*", Literal, "User:*", Read),
    ]);
    assert_eq!(check(&a, "bob", Read, Topic, "topic"), Denied);

    let a = authorizer(vec![
        allow("topic", Literal, "User:bob", Read),
        deny("topic", Literal, "User:bob", Read),
    ]);
    assert_eq!(check(&a, "bob", Read, Topic, "topic"), Denied);
}

/// Kafka's `testDenyPrecedenceWithOperationAll`.
#[test]
fn deny_all_denies_every_operation_even_against_prefixed_allows() {
    let a = authorizer(vec![
        deny("foo", Literal, "User:alice", All),
        allow("foo", Prefixed, "User:alice", Read),
        deny("foo", Literal, "User:*", All),
        allow("foo", Prefixed, "User:*", Describe),
    ]);
    assert_eq!(check(&a, "alice", Write, Topic, "foo"), Denied);
    assert_eq!(check(&a, "alice", Read, Topic, "foo"), Denied);
    assert_eq!(check(&a, "alice", Describe, Topic, "foo"), Denied);
    assert_eq!(check(&a, "alice", Read, Topic, "foobar"), Allowed);
    assert_eq!(check(&a, "bob", Describe, Topic, "foo"), Denied);
    assert_eq!(check(&a, "bob", Read, Topic, "foo"), Denied);
    assert_eq!(check(&a, "bob", Write, Topic, "foo"), Denied);
    assert_eq!(check(&a, "bob", Describe, Topic, "foobaz"), Allowed);
    assert_eq!(check(&a, "bob", Read, Topic, "foobaz"), Denied);
}

/// Kafka's `testTopicAclWithOperationAll`.
#[test]
fn allow_all_allows_every_operation() {
    let a = authorizer(vec![
        allow("foo", Literal, "User:*", All),
        allow("bar", Prefixed, "User:alice", All),
        allow("baz", Literal, "User:bob", All),
    ]);
    assert_eq!(check(&a, "alice", Write, Topic, "foo"), Allowed);
    assert_eq!(check(&a, "alice", DescribeConfigs, Topic, "bar"), Allowed);
    assert_eq!(check(&a, "alice", Describe, Topic, "baz"), Denied);
    assert_eq!(check(&a, "bob", Write, Topic, "foo"), Allowed);
    assert_eq!(check(&a, "bob", Read, Topic, "bar"), Denied);
    assert_eq!(check(&a, "bob", Describe, Topic, "baz"), Allowed);
    assert_eq!(check(&a, "malory", Describe, Topic, "foo"), Allowed);
    assert_eq!(check(&a, "malory", Write, Topic, "bar"), Denied);
    assert_eq!(check(&a, "malory", Read, Topic, "baz"), Denied);
}

/// The concrete operations Kafka's `testAclInheritance` walks.
const OPS: [AclOperation; 12] = [
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    CreateTokens,
    DescribeTokens,
];

fn cluster_acl(op: AclOperation, permission: AclPermissionType) -> AclBinding {
    acl(
        Cluster,
        CLUSTER_NAME,
        Literal,
        "User:alice",
        "*",
        op,
        permission,
    )
}

/// Kafka's `testAclInheritance`, ALLOW half: ALL allows everything; READ, WRITE, DELETE and
/// ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; nothing else is implied.
#[test]
fn allow_implies_describe_and_describe_configs_only() {
    let table: [(AclOperation, &[AclOperation]); 8] = [
        (All, &OPS),
        (Read, &[Read, Describe]),
        (Write, &[Write, Describe]),
        (Delete, &[Delete, Describe]),
        (Alter, &[Alter, Describe]),
        (AlterConfigs, &[AlterConfigs, DescribeConfigs]),
        (Create, &[Create]),
        (Describe, &[Describe]),
    ];
    for (granted, allowed) in table {
        let a = authorizer(vec![cluster_acl(granted, Allow)]);
        for op in OPS {
            let want = if allowed.contains(&op) {
                Allowed
            } else {
                Denied
            };
            assert_eq!(
                check(&a, "alice", op, Cluster, CLUSTER_NAME),
                want,
                "ALLOW {granted} -> {op}"
            );
        }
    }
}

/// Kafka's `testAclInheritance`, DENY half (next to an ALLOW ALL): a DENY is never widened.
/// DENY ALL denies everything; DENY DESCRIBE denies only DESCRIBE (not READ); DENY READ does
/// not deny DESCRIBE; DENY ALTER_CONFIGS does not deny DESCRIBE_CONFIGS.
#[test]
fn deny_is_never_implied() {
    let table: [(AclOperation, &[AclOperation]); 5] = [
        (All, &OPS),
        (Describe, &[Describe]),
        (DescribeConfigs, &[DescribeConfigs]),
        (Read, &[Read]),
        (AlterConfigs, &[AlterConfigs]),
    ];
    for (denied_op, denied) in table {
        let a = authorizer(vec![cluster_acl(denied_op, Deny), cluster_acl(All, Allow)]);
        for op in OPS {
            let want = if denied.contains(&op) {
                Denied
            } else {
                Allowed
            };
            assert_eq!(
                check(&a, "alice", op, Cluster, CLUSTER_NAME),
                want,
                "DENY {denied_op} -> {op}"
            );
        }
    }
}

/// Kafka's `testFindResultImplication`: CREATE does not imply DESCRIBE, and a DENY READ next to
/// an ALLOW READ leaves DESCRIBE allowed (the allow implies it, the deny does not cover it).
#[test]
fn deny_read_with_allow_read_still_allows_describe() {
    let a = authorizer(vec![allow("t", Literal, "User:bob", Create)]);
    assert_eq!(check(&a, "bob", Describe, Topic, "t"), Denied);
    let a = authorizer(vec![
        allow("t", Literal, "User:bob", Read),
        deny("t", Literal, "User:bob", Read),
    ]);
    assert_eq!(check(&a, "bob", Read, Topic, "t"), Denied);
    assert_eq!(check(&a, "bob", Describe, Topic, "t"), Allowed);
}

#[test]
fn wildcard_principal_matches_every_principal_and_type() {
    let a = authorizer(vec![allow("t", Literal, "User:*", Read)]);
    assert_eq!(check(&a, "anyone", Read, Topic, "t"), Allowed);
    let other_type = KafkaPrincipal::new("Group", "ops");
    assert_eq!(a.authorize(&other_type, H1, Read, Topic, "t"), Allowed);
    // A principal string is compared as type and name; `Group:*` is not a wildcard.
    let a = authorizer(vec![allow("t", Literal, "Group:*", Read)]);
    assert_eq!(a.authorize(&other_type, H1, Read, Topic, "t"), Denied);
    assert_eq!(
        a.authorize(&KafkaPrincipal::new("Group", "*"), H1, Read, Topic, "t"),
        Allowed
    );
}

#[test]
fn principal_names_may_contain_colons() {
    let a = authorizer(vec![allow("t", Literal, "User:CN=a:b", Read)]);
    assert_eq!(check(&a, "CN=a:b", Read, Topic, "t"), Allowed);
    assert_eq!(check(&a, "CN=a", Read, Topic, "t"), Denied);
}

/// Kafka's `testHostAddressAclValidation`.
#[test]
fn host_specific_acls_match_only_that_host() {
    let local = "127.0.0.1";
    let a = authorizer(vec![
        acl(Topic, "foo", Literal, "User:alice", H1, Read, Deny),
        acl(Topic, "foo", Literal, "User:alice", "*", Read, Allow),
        acl(Topic, "bar", Literal, "User:bob", H2, Read, Allow),
        acl(Topic, "bar", Literal, "User:*", local, Describe, Allow),
    ]);
    let run = |who: &str, host: &str| -> [AuthorizationResult; 3] {
        let p = user(who);
        [
            a.authorize(&p, host, Read, Topic, "foo"),
            a.authorize(&p, host, Read, Topic, "bar"),
            a.authorize(&p, host, Describe, Topic, "bar"),
        ]
    };
    assert_eq!(run("alice", local), [Allowed, Denied, Allowed]);
    assert_eq!(run("alice", H1), [Denied, Denied, Denied]);
    assert_eq!(run("alice", H2), [Allowed, Denied, Denied]);
    assert_eq!(run("bob", local), [Denied, Denied, Allowed]);
    assert_eq!(run("bob", H1), [Denied, Denied, Denied]);
    assert_eq!(run("bob", H2), [Denied, Allowed, Allowed]);
}

#[test]
fn super_users_are_allowed_despite_deny_all() {
    let config = AuthorizerConfig::from_properties(Some(" User:admin ; ;User:ops"), None).unwrap();
    let a = Authorizer::with_bindings(config, vec![deny("*", Literal, "User:*", All)]).unwrap();
    assert_eq!(check(&a, "admin", Write, Topic, "t"), Allowed);
    assert_eq!(check(&a, "ops", Alter, Cluster, CLUSTER_NAME), Allowed);
    assert_eq!(check(&a, "bob", Read, Topic, "t"), Denied);
    // Same name, other principal type: not a super user.
    assert_eq!(
        a.authorize(&KafkaPrincipal::new("Group", "admin"), H1, Read, Topic, "t"),
        Denied
    );
}

#[test]
fn super_users_config_rejects_a_principal_without_type() {
    let err = AuthorizerConfig::from_properties(Some("User:admin;bob"), None).unwrap_err();
    assert_eq!(err.kind(), AclErrorKind::InvalidConfig);
    assert_eq!(parse_super_users("").unwrap().len(), 0);
}

#[test]
fn allow_everyone_flag_parses_like_java_boolean() {
    for (value, want) in [
        (Some("true"), true),
        (Some(" TRUE "), true),
        (Some("yes"), false),
        (None, false),
    ] {
        let config = AuthorizerConfig::from_properties(None, value).unwrap();
        assert_eq!(config.allow_everyone_if_no_acl_found, want, "{value:?}");
    }
}

/// Kafka's `testAllowEveryoneIfNoAclFoundConfigEnabled`/`Disabled`: the flag decides only for
/// resources no ACL applies to; an ACL for someone else on the resource means deny.
#[test]
fn allow_everyone_if_no_acl_found_decides_only_resources_without_acls() {
    let bindings = vec![allow("topic1", Literal, "User:Alice", Read)];
    for (flag, want_topic2) in [(true, Allowed), (false, Denied)] {
        let config = AuthorizerConfig {
            allow_everyone_if_no_acl_found: flag,
            ..AuthorizerConfig::default()
        };
        let a = Authorizer::with_bindings(config, bindings.clone()).unwrap();
        assert_eq!(
            check(&a, "Bob", Read, Topic, "topic1"),
            Denied,
            "flag {flag}"
        );
        assert_eq!(
            check(&a, "Bob", Read, Topic, "topic2"),
            want_topic2,
            "flag {flag}"
        );
        assert_eq!(
            check(&a, "Bob", Read, Group, "g"),
            want_topic2,
            "no ACL of the type at all"
        );
    }
}

#[test]
fn acls_applying_via_prefix_or_wildcard_count_as_found() {
    let config = AuthorizerConfig {
        allow_everyone_if_no_acl_found: true,
        ..AuthorizerConfig::default()
    };
    let a = Authorizer::with_bindings(
        config.clone(),
        vec![allow("pay", Prefixed, "User:alice", Read)],
    )
    .unwrap();
    assert_eq!(check(&a, "bob", Read, Topic, "payments"), Denied);
    assert_eq!(check(&a, "bob", Read, Topic, "orders"), Allowed);
    let a =
        Authorizer::with_bindings(config, vec![allow("*", Literal, "User:alice", Read)]).unwrap();
    assert_eq!(check(&a, "bob", Read, Topic, "orders"), Denied);
}

#[test]
fn names_are_compared_exactly_including_unicode() {
    let a = authorizer(vec![
        allow("données", Prefixed, "User:bob", Read),
        allow("dé", Prefixed, "User:eve", Read),
    ]);
    assert_eq!(check(&a, "bob", Read, Topic, "données-2024"), Allowed);
    assert_eq!(check(&a, "bob", Read, Topic, "donnee"), Denied);
    assert_eq!(check(&a, "eve", Read, Topic, "dé"), Allowed);
    assert_eq!(
        check(&a, "eve", Read, Topic, "dè"),
        Denied,
        "shares a partial UTF-8 sequence"
    );
    assert_eq!(
        check(&a, "bob", Read, Topic, "Données"),
        Denied,
        "case matters"
    );
}

#[test]
fn authorized_operations_bitmask_for_topic_group_and_cluster() {
    let a = authorizer(vec![
        allow("t", Literal, "User:bob", Read),
        allow("t", Literal, "User:bob", AlterConfigs),
        acl(Group, "g", Prefixed, "User:bob", "*", Read, Allow),
        acl(Group, "g", Prefixed, "User:bob", "*", Describe, Deny),
        acl(Cluster, CLUSTER_NAME, Literal, "User:bob", "*", All, Allow),
        acl(
            Cluster,
            CLUSTER_NAME,
            Literal,
            "User:bob",
            "*",
            ClusterAction,
            Deny,
        ),
    ]);
    let bob = user("bob");
    let topic = a.authorized_operations(&bob, H1, Topic, "t");
    assert_eq!(
        topic,
        operations_bitmask([Read, Describe, AlterConfigs, DescribeConfigs])
    );
    assert_eq!(topic, (1 << 3) | (1 << 8) | (1 << 11) | (1 << 10));
    assert_eq!(
        a.authorized_operations(&bob, H1, Group, "group-1"),
        operations_bitmask([Read])
    );
    let cluster = a.authorized_operations(&bob, H1, Cluster, CLUSTER_NAME);
    assert_eq!(
        cluster,
        operations_bitmask([
            Create,
            Alter,
            Describe,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite
        ])
    );
    assert_eq!(a.authorized_operations(&user("eve"), H1, Topic, "t"), 0);
    assert_eq!(a.authorized_operations(&bob, H1, ResourceType::Any, "t"), 0);
}

#[test]
fn authorized_operations_of_a_super_user_are_the_supported_ones() {
    let config = AuthorizerConfig::from_properties(Some("User:admin"), None).unwrap();
    let a = Authorizer::new(config);
    let admin = user("admin");
    for rt in [
        Topic,
        Group,
        Cluster,
        ResourceType::TransactionalId,
        ResourceType::DelegationToken,
        ResourceType::User,
    ] {
        let want = operations_bitmask(rt.supported_operations().iter().copied());
        assert_eq!(a.authorized_operations(&admin, H1, rt, "x"), want, "{rt}");
    }
    assert_eq!(
        a.authorized_operations(&admin, H1, Topic, "x"),
        0b1101_1111_1000
    );
}

#[test]
fn config_change_keeps_the_acls() {
    let mut a = authorizer(vec![allow("t", Literal, "User:bob", Read)]);
    assert_eq!(check(&a, "alice", Read, Topic, "t"), Denied);
    a.set_config(AuthorizerConfig::from_properties(Some("User:alice"), Some("true")).unwrap());
    assert_eq!(check(&a, "alice", Read, Topic, "t"), Allowed);
    assert_eq!(check(&a, "bob", Read, Topic, "t"), Allowed);
    assert_eq!(check(&a, "eve", Read, Topic, "u"), Allowed);
    assert_eq!(a.len(), 1);
}
