//! Filters (DescribeAcls, DeleteAcls) and CreateAcls validation: Kafka's
//! `ResourcePatternFilter.matches`, `AccessControlEntryFilter.matches`, `validateNewAcl`,
//! `validateFilter` and the broker's cluster-name check.

use super::*;
use AclOperation::*;
use AclPermissionType::{Allow, Deny};
use PatternType::{Literal, Match, Prefixed};
use ResourceType::{Cluster, Group, Topic};

fn pattern_filter(rt: ResourceType, name: Option<&str>, pt: PatternType) -> ResourcePatternFilter {
    ResourcePatternFilter::new(rt, name.map(str::to_owned), pt)
}

#[test]
fn pattern_filter_table() {
    let lit = ResourcePattern::literal(Topic, "foo");
    let star = ResourcePattern::literal(Topic, "*");
    let pre = ResourcePattern::prefixed(Topic, "fo");
    let other_pre = ResourcePattern::prefixed(Topic, "ba");
    let group = ResourcePattern::literal(Group, "foo");
    // (filter, pattern, matches)
    let table = [
        (ResourcePatternFilter::ANY, &lit, true),
        (ResourcePatternFilter::ANY, &group, true),
        (pattern_filter(Topic, None, PatternType::Any), &group, false),
        (pattern_filter(Topic, None, Literal), &pre, false),
        (pattern_filter(Topic, None, Prefixed), &pre, true),
        // ANY with a name: the name must be equal, any pattern type.
        (
            pattern_filter(Topic, Some("foo"), PatternType::Any),
            &lit,
            true,
        ),
        (
            pattern_filter(Topic, Some("fo"), PatternType::Any),
            &pre,
            true,
        ),
        (
            pattern_filter(Topic, Some("foo"), PatternType::Any),
            &pre,
            false,
        ),
        (
            pattern_filter(Topic, Some("foo"), PatternType::Any),
            &star,
            false,
        ),
        // An exact pattern type: equal name only; `*` is just a name.
        (pattern_filter(Topic, Some("foo"), Literal), &lit, true),
        (pattern_filter(Topic, Some("foo"), Literal), &star, false),
        (pattern_filter(Topic, Some("*"), Literal), &star, true),
        (pattern_filter(Topic, Some("*"), Literal), &lit, false),
        (pattern_filter(Topic, Some("foo"), Prefixed), &pre, false),
        // MATCH: every pattern that would apply to a resource with the name.
        (pattern_filter(Topic, Some("foo"), Match), &lit, true),
        (pattern_filter(Topic, Some("foo"), Match), &star, true),
        (pattern_filter(Topic, Some("foo"), Match), &pre, true),
        (pattern_filter(Topic, Some("foo"), Match), &other_pre, false),
        (pattern_filter(Topic, Some("f"), Match), &pre, false),
        (pattern_filter(Topic, Some("foobar"), Match), &lit, false),
        (
            pattern_filter(ResourceType::Any, Some("foo"), Match),
            &group,
            true,
        ),
        (pattern_filter(Topic, None, Match), &pre, true),
    ];
    for (i, (filter, pattern, want)) in table.iter().enumerate() {
        assert_eq!(
            filter.matches(pattern),
            *want,
            "row {i}: {filter:?} vs {pattern:?}"
        );
    }
}

#[test]
fn entry_filter_table() {
    let entry = AccessControlEntry::new("User:bob", "*", Read, Allow);
    let f = |p: Option<&str>, h: Option<&str>, op, perm| {
        AccessControlEntryFilter::new(p.map(str::to_owned), h.map(str::to_owned), op, perm)
    };
    let table = [
        (AccessControlEntryFilter::ANY, true),
        (
            f(
                Some("User:bob"),
                None,
                AclOperation::Any,
                AclPermissionType::Any,
            ),
            true,
        ),
        (
            f(
                Some("User:*"),
                None,
                AclOperation::Any,
                AclPermissionType::Any,
            ),
            false,
        ),
        (
            f(None, Some("*"), AclOperation::Any, AclPermissionType::Any),
            true,
        ),
        (
            f(
                None,
                Some("10.0.0.1"),
                AclOperation::Any,
                AclPermissionType::Any,
            ),
            false,
        ),
        (f(None, None, Read, AclPermissionType::Any), true),
        (f(None, None, Describe, AclPermissionType::Any), false),
        (f(None, None, All, AclPermissionType::Any), false),
        (f(None, None, AclOperation::Any, Allow), true),
        (f(None, None, AclOperation::Any, Deny), false),
        (entry.to_filter(), true),
    ];
    for (i, (filter, want)) in table.iter().enumerate() {
        assert_eq!(filter.matches(&entry), *want, "row {i}: {filter:?}");
    }
}

/// Kafka's `testAclsFilter`, describe half and delete half.
#[test]
fn describe_and_delete_with_any_exact_and_match() {
    let acl1 = acl(Topic, "foo-1", Literal, "User:bob", "*", Read, Allow);
    let acl2 = acl(
        Topic,
        "foo-1",
        Literal,
        "User:bob",
        "192.168.0.1",
        Write,
        Allow,
    );
    let acl3 = acl(Topic, "bar-1", Literal, "User:bob", "*", Describe, Allow);
    let acl4 = acl(Topic, "bar-", Prefixed, "User:*", "*", Read, Allow);
    let all = vec![acl1.clone(), acl2.clone(), acl3.clone(), acl4.clone()];
    let mut a = authorizer(all.clone());
    let sorted = |mut v: Vec<AclBinding>| {
        v.sort();
        v
    };
    assert_eq!(sorted(a.describe(&AclBindingFilter::ANY)), sorted(all));
    let by_resource1 =
        AclBindingFilter::new(acl1.pattern.to_filter(), AccessControlEntryFilter::ANY);
    assert_eq!(
        sorted(a.describe(&by_resource1)),
        sorted(vec![acl1.clone(), acl2.clone()])
    );
    let by_prefix = AclBindingFilter::new(acl4.pattern.to_filter(), AccessControlEntryFilter::ANY);
    assert_eq!(a.describe(&by_prefix), vec![acl4.clone()]);
    let matching = AclBindingFilter::new(
        pattern_filter(ResourceType::Any, Some("bar-1"), Match),
        AccessControlEntryFilter::ANY,
    );
    assert_eq!(
        sorted(a.describe(&matching)),
        sorted(vec![acl3.clone(), acl4.clone()])
    );

    assert_eq!(
        sorted(a.delete(&matching)),
        sorted(vec![acl3.clone(), acl4])
    );
    assert_eq!(a.delete(&acl1.to_filter()), vec![acl1]);
    assert_eq!(
        a.delete(&AclBindingFilter::new(
            acl3.pattern.to_filter(),
            AccessControlEntryFilter::ANY
        )),
        vec![]
    );
    let baz = AclBindingFilter::new(
        pattern_filter(Topic, Some("baz"), PatternType::Any),
        AccessControlEntryFilter::ANY,
    );
    assert_eq!(a.delete(&baz), vec![]);
    assert_eq!(a.bindings(), vec![acl2]);
    assert_eq!(a.len(), 1);
}

#[test]
fn delete_all_on_wildcard_leaves_other_acls() {
    let wild_read = acl(Topic, "*", Literal, "User:bob", "*", Read, Allow);
    let wild_write = acl(Topic, "*", Literal, "User:bob", "*", Write, Allow);
    let literal = acl(Topic, "t", Literal, "User:bob", "*", Read, Allow);
    let mut a = authorizer(vec![wild_read.clone(), wild_write.clone(), literal.clone()]);
    let filter = AclBindingFilter::new(
        pattern_filter(Topic, Some("*"), Literal),
        AccessControlEntryFilter::ANY,
    );
    assert_eq!(a.delete(&filter), vec![wild_read, wild_write]);
    assert_eq!(a.bindings(), vec![literal]);
}

#[test]
fn describe_with_match_agrees_with_a_scan() {
    let mut bindings = Vec::new();
    for (i, name) in ["a", "ab", "abc", "abd", "b", "*", "abc-1"]
        .iter()
        .enumerate()
    {
        for pt in [Literal, Prefixed] {
            let op = if i % 2 == 0 { Read } else { Write };
            bindings.push(acl(Topic, name, pt, "User:bob", "*", op, Allow));
            bindings.push(acl(Group, name, pt, "User:bob", "*", op, Deny));
        }
    }
    let a = authorizer(bindings.clone());
    for rt in [Topic, Group, ResourceType::Any] {
        for name in ["abc", "abc-1", "a", "*", "zzz", "ab"] {
            for pt in [Match, PatternType::Any, Literal, Prefixed] {
                let filter = AclBindingFilter::new(
                    pattern_filter(rt, Some(name), pt),
                    AccessControlEntryFilter::ANY,
                );
                let mut want: Vec<AclBinding> = bindings
                    .iter()
                    .filter(|b| filter.matches(b))
                    .cloned()
                    .collect();
                want.sort();
                let mut got = a.describe(&filter);
                got.sort();
                assert_eq!(got, want, "{filter:?}");
            }
        }
    }
}

#[test]
fn create_validation_rejects_filter_values_and_bad_names() {
    let good = acl(Topic, "t", Literal, "User:bob", "*", Read, Allow);
    assert_eq!(validate_new_binding(&good), Ok(()));
    let with = |f: &dyn Fn(&mut AclBinding)| {
        let mut b = good.clone();
        f(&mut b);
        validate_new_binding(&b)
    };
    type Mutation = Box<dyn Fn(&mut AclBinding)>;
    let cases: Vec<(AclError, Mutation)> = vec![
        (
            AclError::InvalidResourceType(ResourceType::Any),
            Box::new(|b| b.pattern.resource_type = ResourceType::Any),
        ),
        (
            AclError::InvalidResourceType(ResourceType::Unknown),
            Box::new(|b| b.pattern.resource_type = ResourceType::Unknown),
        ),
        (
            AclError::InvalidPatternType(Match),
            Box::new(|b| b.pattern.pattern_type = Match),
        ),
        (
            AclError::InvalidPatternType(PatternType::Any),
            Box::new(|b| b.pattern.pattern_type = PatternType::Any),
        ),
        (
            AclError::InvalidPatternType(PatternType::Unknown),
            Box::new(|b| b.pattern.pattern_type = PatternType::Unknown),
        ),
        (
            AclError::InvalidOperation(AclOperation::Any),
            Box::new(|b| b.entry.operation = AclOperation::Any),
        ),
        (
            AclError::InvalidOperation(AclOperation::Unknown),
            Box::new(|b| b.entry.operation = AclOperation::Unknown),
        ),
        (
            AclError::InvalidPermissionType(AclPermissionType::Any),
            Box::new(|b| b.entry.permission = AclPermissionType::Any),
        ),
        (
            AclError::EmptyResourceName,
            Box::new(|b| b.pattern.name.clear()),
        ),
        (
            AclError::InvalidPrincipal("bob".into()),
            Box::new(|b| b.entry.principal = "bob".into()),
        ),
        (
            AclError::InvalidPrincipal(String::new()),
            Box::new(|b| b.entry.principal.clear()),
        ),
        (
            AclError::InvalidClusterName,
            Box::new(|b| b.pattern.resource_type = Cluster),
        ),
    ];
    for (want, mutate) in cases {
        let got = with(&*mutate).unwrap_err();
        assert_eq!(got, want);
        assert_eq!(got.kind(), AclErrorKind::InvalidRequest);
    }
    let cluster = acl(
        Cluster,
        CLUSTER_NAME,
        Literal,
        "User:bob",
        "*",
        Alter,
        Allow,
    );
    assert_eq!(validate_new_binding(&cluster), Ok(()));
    assert_eq!(
        AclError::InvalidClusterName.to_string(),
        "The only valid name for the CLUSTER resource is kafka-cluster"
    );
}

#[test]
fn the_index_refuses_what_cannot_be_stored() {
    let mut a = authorizer(vec![]);
    let mut b = acl(Topic, "t", Match, "User:bob", "*", Read, Allow);
    assert_eq!(
        a.add_binding(b.clone()),
        Err(AclError::InvalidPatternType(Match))
    );
    b.pattern.pattern_type = Prefixed;
    b.entry.permission = AclPermissionType::Unknown;
    assert!(a.add_binding(b).is_err());
    assert!(a.is_empty());
    let bad = vec![
        acl(Topic, "t", Literal, "User:bob", "*", Read, Allow),
        acl(Topic, "", Literal, "User:bob", "*", Read, Allow),
    ];
    let mut a = authorizer(vec![acl(
        Topic, "keep", Literal, "User:bob", "*", Read, Allow,
    )]);
    assert_eq!(a.replace_all(bad), Err(AclError::EmptyResourceName));
    assert_eq!(a.len(), 1, "a failed rebuild keeps the old ACLs");
}

#[test]
fn filter_validation_rejects_unknown_parts() {
    assert_eq!(validate_filter(&AclBindingFilter::ANY), Ok(()));
    let mut f = AclBindingFilter::ANY;
    f.pattern.pattern_type = PatternType::Unknown;
    assert_eq!(validate_filter(&f), Err(AclError::UnknownPatternFilter));
    let mut f = AclBindingFilter::ANY;
    f.pattern.resource_type = ResourceType::Unknown;
    assert_eq!(validate_filter(&f), Err(AclError::UnknownPatternFilter));
    let mut f = AclBindingFilter::ANY;
    f.entry.operation = AclOperation::Unknown;
    assert_eq!(validate_filter(&f), Err(AclError::UnknownEntryFilter));
    let mut f = AclBindingFilter::ANY;
    f.entry.permission = AclPermissionType::Unknown;
    assert_eq!(validate_filter(&f), Err(AclError::UnknownEntryFilter));
}
