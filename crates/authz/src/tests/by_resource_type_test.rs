//! `Authorizer::authorize_by_resource_type`, case by case from Kafka's `BaseAuthorizerTest`
//! and `AuthorizerTest` (`testAuthorizeByResourceType*`).

use super::*;
use AclOperation::*;
use AclPermissionType::{Allow, Deny};
use PatternType::{Literal, Prefixed};
use ResourceType::{Cluster, Group, Topic, TransactionalId};

const H1: &str = "192.168.1.1";
const H2: &str = "192.168.1.2";

fn by_type(a: &Authorizer, who: &str, host: &str, op: AclOperation, rt: ResourceType) -> bool {
    a.authorize_by_resource_type(&user(who), host, op, rt)
}

fn add(a: &mut Authorizer, b: AclBinding) {
    a.add_binding(b).unwrap();
}

#[test]
fn multiple_add_and_remove() {
    let mut a = authorizer(vec![]);
    let allow_read = acl(Topic, "sb1", Literal, "User:user1", H1, Read, Allow);
    let deny_read = acl(Topic, "sb1", Literal, "User:user1", H1, Read, Deny);
    for _ in 0..3 {
        assert!(!by_type(&a, "user1", H1, Read, Topic));
        add(&mut a, allow_read.clone());
        assert!(by_type(&a, "user1", H1, Read, Topic));
        for _ in 0..3 {
            add(&mut a, deny_read.clone());
            assert!(!by_type(&a, "user1", H1, Read, Topic));
            assert!(a.remove_binding(&deny_read));
            assert!(by_type(&a, "user1", H1, Read, Topic));
        }
        assert!(a.remove_binding(&allow_read));
        assert!(!by_type(&a, "user1", H1, Read, Topic));
    }
}

#[test]
fn unrelated_deny_does_not_dominate_allow() {
    let a = authorizer(vec![
        acl(Topic, "sb1", Literal, "User:user1", H1, Read, Deny),
        acl(Topic, "sb1", Literal, "User:user2", H1, Read, Deny),
        acl(Topic, "sb1", Literal, "User:user1", H2, Write, Deny),
        acl(Topic, "sb1", Literal, "User:user2", H2, Read, Deny),
        acl(Topic, "sb1", Literal, "User:user1", H2, Read, Allow),
        acl(Topic, "sb2", Literal, "User:user1", H2, Read, Deny),
        acl(Group, "s", Prefixed, "User:user1", H2, Read, Deny),
    ]);
    assert!(!by_type(&a, "user1", H1, Read, Topic));
    assert!(!by_type(&a, "user1", H1, Read, Group));
    assert!(!by_type(&a, "user1", H1, Read, TransactionalId));
    assert!(!by_type(&a, "user1", H1, Read, Cluster));
    assert!(by_type(&a, "user1", H2, Read, Topic));
}

#[test]
fn deny_takes_precedence() {
    let mut a = authorizer(vec![acl(
        Topic,
        "sb1",
        Literal,
        "User:user1",
        H1,
        Write,
        Allow,
    )]);
    assert!(by_type(&a, "user1", H1, Write, Topic));
    add(
        &mut a,
        acl(Topic, "sb1", Literal, "User:user1", H1, Write, Deny),
    );
    assert!(!by_type(&a, "user1", H1, Write, Topic));
}

/// A prefixed DENY covers every literal and longer prefixed ALLOW under it.
#[test]
fn prefixed_deny_dominates() {
    let allow_on = |p: &str| acl(Group, p, Prefixed, "User:user1", H1, Read, Allow);
    let deny_on = |p: &str| acl(Group, p, Prefixed, "User:user1", H1, Read, Deny);
    let mut a = authorizer(vec![allow_on("abcde")]);
    assert!(by_type(&a, "user1", H1, Read, Group));
    add(&mut a, deny_on("abcd"));
    assert!(!by_type(&a, "user1", H1, Read, Group));
    add(&mut a, allow_on("abc"));
    assert!(by_type(&a, "user1", H1, Read, Group));
    add(&mut a, deny_on("a"));
    assert!(!by_type(&a, "user1", H1, Read, Group));
    add(&mut a, allow_on("ab"));
    assert!(!by_type(&a, "user1", H1, Read, Group));
}

#[test]
fn prefixed_deny_covers_a_literal_allow() {
    let mut a = authorizer(vec![acl(
        Topic,
        "payments",
        Literal,
        "User:user1",
        H1,
        Write,
        Allow,
    )]);
    assert!(by_type(&a, "user1", H1, Write, Topic));
    add(
        &mut a,
        acl(Topic, "pay", Prefixed, "User:user1", H1, Write, Deny),
    );
    assert!(!by_type(&a, "user1", H1, Write, Topic));
    // A prefixed deny that is not a prefix of the literal does not cover it.
    let a = authorizer(vec![
        acl(Topic, "payments", Literal, "User:user1", H1, Write, Allow),
        acl(Topic, "paz", Prefixed, "User:user1", H1, Write, Deny),
        acl(Topic, "paymentsX", Prefixed, "User:user1", H1, Write, Deny),
    ]);
    assert!(by_type(&a, "user1", H1, Write, Topic));
    // A literal deny does not cover a prefixed allow.
    let a = authorizer(vec![
        acl(Topic, "pay", Prefixed, "User:user1", H1, Write, Allow),
        acl(Topic, "pay", Literal, "User:user1", H1, Write, Deny),
    ]);
    assert!(by_type(&a, "user1", H1, Write, Topic));
}

#[test]
fn wildcard_deny_dominates() {
    let allow_on = |name: &str, pt| acl(Group, name, pt, "User:user1", H1, Write, Allow);
    let mut a = authorizer(vec![allow_on("hello", Prefixed)]);
    assert!(by_type(&a, "user1", H1, Write, Group));
    add(
        &mut a,
        acl(Group, "*", Literal, "User:user1", H1, Write, Deny),
    );
    assert!(!by_type(&a, "user1", H1, Write, Group));
    add(&mut a, allow_on("*", Literal));
    assert!(!by_type(&a, "user1", H1, Write, Group));
    add(&mut a, allow_on("aloha", Literal));
    assert!(!by_type(&a, "user1", H1, Write, Group));
}

#[test]
fn wildcard_allow_wins_over_prefixed_deny() {
    let a = authorizer(vec![
        acl(Group, "*", Literal, "User:user1", H1, Write, Allow),
        acl(Group, "a", Prefixed, "User:user1", H1, Write, Deny),
    ]);
    assert!(by_type(&a, "user1", H1, Write, Group));
}

#[test]
fn with_all_operation_ace() {
    let mut a = authorizer(vec![]);
    assert!(!by_type(&a, "user1", H1, Read, Topic));
    add(
        &mut a,
        acl(Topic, "sb1", Literal, "User:user1", H1, Write, Deny),
    );
    add(
        &mut a,
        acl(Topic, "sb1", Literal, "User:user1", H1, All, Allow),
    );
    assert!(by_type(&a, "user1", H1, Read, Topic));
    add(
        &mut a,
        acl(Topic, "sb1", Literal, "User:user1", H1, All, Deny),
    );
    assert!(!by_type(&a, "user1", H1, Read, Topic));
}

#[test]
fn no_implied_operations() {
    let a = authorizer(vec![acl(
        Topic,
        "sb1",
        Literal,
        "User:user1",
        H1,
        Read,
        Allow,
    )]);
    assert!(!by_type(&a, "user1", H1, Describe, Topic));
}

#[test]
fn with_all_host_ace() {
    let mut a = authorizer(vec![]);
    add(
        &mut a,
        acl(Topic, "sb1", Literal, "User:user1", H1, Read, Allow),
    );
    assert!(by_type(&a, "user1", H1, Read, Topic));
    add(
        &mut a,
        acl(Topic, "sb1", Literal, "User:user1", "*", Read, Deny),
    );
    assert!(!by_type(&a, "user1", H1, Read, Topic));
    add(
        &mut a,
        acl(Topic, "sb2", Literal, "User:user1", H1, Read, Deny),
    );
    assert!(!by_type(&a, "user1", H1, Read, Topic));
    assert!(!by_type(&a, "user1", H2, Read, Topic));
    add(
        &mut a,
        acl(Topic, "sb2", Literal, "User:user1", "*", Read, Allow),
    );
    assert!(by_type(&a, "user1", H2, Read, Topic));
    add(
        &mut a,
        acl(Topic, "sb2", Literal, "User:user1", "*", Read, Deny),
    );
    assert!(!by_type(&a, "user1", H2, Read, Topic));
}

#[test]
fn with_all_principal_ace() {
    let mut a = authorizer(vec![]);
    add(
        &mut a,
        acl(Topic, "sb1", Literal, "User:user1", H1, Read, Allow),
    );
    assert!(by_type(&a, "user1", H1, Read, Topic));
    add(&mut a, acl(Topic, "sb1", Literal, "User:*", H1, Read, Deny));
    assert!(!by_type(&a, "user1", H1, Read, Topic));
    add(
        &mut a,
        acl(Topic, "sb2", Literal, "User:user1", H1, Read, Deny),
    );
    assert!(!by_type(&a, "user1", H1, Read, Topic));
    assert!(!by_type(&a, "user2", H1, Read, Topic));
    add(
        &mut a,
        acl(Topic, "sb2", Literal, "User:*", H1, Read, Allow),
    );
    assert!(by_type(&a, "user2", H1, Read, Topic));
    add(&mut a, acl(Topic, "sb2", Literal, "User:*", H1, Read, Deny));
    assert!(!by_type(&a, "user2", H1, Read, Topic));
}

#[test]
fn super_user_has_access() {
    let config = AuthorizerConfig::from_properties(Some("User:superuser1"), None).unwrap();
    let deny_all = |rt, name: &str| acl(rt, name, Literal, "User:*", "*", All, Deny);
    let a = Authorizer::with_bindings(
        config,
        vec![
            deny_all(Topic, "*"),
            deny_all(Cluster, "*"),
            deny_all(Group, "*"),
            deny_all(TransactionalId, "*"),
        ],
    )
    .unwrap();
    for rt in [Topic, Cluster, Group, TransactionalId] {
        assert!(by_type(&a, "superuser1", "192.0.4.4", Read, rt), "{rt}");
        assert!(!by_type(&a, "user1", "192.0.4.4", Read, rt), "{rt}");
    }
}

/// Kafka's `testAuthorizeByResourceTypeNoAclFoundOverride`, and its counterpart: the probe
/// resource has no ACL, so the flag decides.
#[test]
fn no_acl_found_override() {
    let config = AuthorizerConfig::from_properties(None, Some("true")).unwrap();
    let a = Authorizer::new(config);
    assert!(by_type(&a, "user1", H1, Read, Topic));
    assert!(by_type(&a, "user1", H1, Write, Topic));
    let a = authorizer(vec![]);
    assert!(!by_type(&a, "user1", H1, Write, Topic));
}

#[test]
fn filter_values_are_never_allowed() {
    let a = Authorizer::new(
        AuthorizerConfig::from_properties(Some("User:admin"), Some("true")).unwrap(),
    );
    assert!(!by_type(&a, "admin", H1, Read, ResourceType::Any));
    assert!(!by_type(&a, "admin", H1, Read, ResourceType::Unknown));
    assert!(!by_type(&a, "admin", H1, AclOperation::Any, Topic));
    assert!(!by_type(&a, "admin", H1, AclOperation::Unknown, Topic));
}
