//! The ACL index: the prefix walk visits exactly the prefixes of a name, the authorizer agrees
//! with a brute-force evaluation of Kafka's rules over many ACLs, and incremental updates
//! leave the same state as a rebuild.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use super::*;
use crate::index::for_each_prefix_of;
use AclOperation::*;
use AclPermissionType::{Allow, Deny};
use PatternType::{Literal, Prefixed};

/// A small deterministic generator (no RNG dependency; the same seed gives the same table).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, bound: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % bound as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.next(items.len())]
    }

    fn name(&mut self) -> String {
        let len = 1 + self.next(5);
        (0..len)
            .map(|_| *self.pick(&['a', 'b', 'c', 'é']))
            .collect()
    }
}

#[test]
fn prefix_walk_visits_exactly_the_prefixes() {
    let mut rng = Lcg(7);
    for round in 0..200 {
        let mut map = BTreeMap::new();
        for _ in 0..rng.next(40) {
            map.insert(rng.name(), ());
        }
        let name = rng.name();
        let mut got = Vec::new();
        let _ = for_each_prefix_of(&map, &name, |key, _| {
            got.push(key.to_owned());
            ControlFlow::Continue(())
        });
        let mut want: Vec<String> = map
            .keys()
            .filter(|k| name.starts_with(k.as_str()))
            .cloned()
            .collect();
        want.sort_by_key(|k| std::cmp::Reverse(k.len()));
        assert_eq!(
            got,
            want,
            "round {round}, name {name:?}, keys {:?}",
            map.keys().collect::<Vec<_>>()
        );
    }
}

#[test]
fn prefix_walk_stops_when_asked() {
    let map: BTreeMap<String, ()> = ["a", "ab", "abc"]
        .iter()
        .map(|k| (k.to_string(), ()))
        .collect();
    let mut seen = 0;
    let flow = for_each_prefix_of(&map, "abcd", |_, _| {
        seen += 1;
        ControlFlow::Break(())
    });
    assert!(flow.is_break());
    assert_eq!(seen, 1);
}

/// Kafka's rules written as plainly as possible, over a list of bindings.
fn brute_force(
    bindings: &[AclBinding],
    config: &AuthorizerConfig,
    principal: &KafkaPrincipal,
    host: &str,
    op: AclOperation,
    rt: ResourceType,
    name: &str,
) -> AuthorizationResult {
    if config.super_users.contains(principal) {
        return AuthorizationResult::Allowed;
    }
    let applying: Vec<&AclBinding> = bindings
        .iter()
        .filter(|b| b.pattern.covers(rt, name))
        .collect();
    let matching = |perm: AclPermissionType| {
        applying.iter().any(|b| {
            let e = &b.entry;
            let who = e.principal == "User:*" || e.principal == principal.to_string();
            let from = e.host == "*" || e.host == host;
            let what = e.operation == All
                || e.operation == op
                || (perm == Allow
                    && ((op == Describe && [Read, Write, Delete, Alter].contains(&e.operation))
                        || (op == DescribeConfigs && e.operation == AlterConfigs)));
            e.permission == perm && who && from && what
        })
    };
    if matching(Deny) {
        AuthorizationResult::Denied
    } else if matching(Allow) {
        AuthorizationResult::Allowed
    } else if !applying.is_empty() || !config.allow_everyone_if_no_acl_found {
        AuthorizationResult::Denied
    } else {
        AuthorizationResult::Allowed
    }
}

fn random_bindings(rng: &mut Lcg, count: usize) -> Vec<AclBinding> {
    let principals = ["User:alice", "User:bob", "User:*", "Group:ops"];
    let hosts = ["*", "10.0.0.1", "10.0.0.2"];
    let ops = [
        Read,
        Write,
        Describe,
        Delete,
        Alter,
        AlterConfigs,
        DescribeConfigs,
        All,
        Create,
    ];
    let types = [ResourceType::Topic, ResourceType::Group];
    (0..count)
        .map(|_| {
            let name = if rng.next(10) == 0 {
                "*".to_owned()
            } else {
                rng.name()
            };
            let principal: &str = principals[rng.next(principals.len())];
            let host: &str = hosts[rng.next(hosts.len())];
            acl(
                *rng.pick(&types),
                &name,
                *rng.pick(&[Literal, Prefixed]),
                principal,
                host,
                *rng.pick(&ops),
                *rng.pick(&[Allow, Allow, Deny]),
            )
        })
        .collect()
}

#[test]
fn authorize_agrees_with_brute_force_over_random_tables() {
    let mut rng = Lcg(2024);
    let principals = [
        user("alice"),
        user("bob"),
        user("carol"),
        KafkaPrincipal::new("Group", "ops"),
    ];
    let ops = [
        Read,
        Write,
        Describe,
        DescribeConfigs,
        AlterConfigs,
        Create,
        Delete,
    ];
    for round in 0..60 {
        let count = 1 + rng.next(60);
        let bindings = random_bindings(&mut rng, count);
        let config = AuthorizerConfig {
            allow_everyone_if_no_acl_found: round % 2 == 0,
            super_users: if round % 5 == 0 {
                [user("carol")].into()
            } else {
                Default::default()
            },
        };
        let a = Authorizer::with_bindings(config.clone(), bindings.clone()).unwrap();
        for _ in 0..100 {
            let p = rng.pick(&principals);
            let host = *rng.pick(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
            let op = *rng.pick(&ops);
            let rt = *rng.pick(&[ResourceType::Topic, ResourceType::Group]);
            let name = rng.name();
            let want = brute_force(&bindings, &config, p, host, op, rt, &name);
            assert_eq!(
                a.authorize(p, host, op, rt, &name),
                want,
                "round {round}: {p} {host} {op} {rt}:{name}"
            );
        }
    }
}

#[test]
fn incremental_updates_equal_a_rebuild() {
    let mut rng = Lcg(99);
    let bindings = random_bindings(&mut rng, 300);
    let mut a = authorizer(vec![]);
    for b in &bindings {
        a.add_binding(b.clone()).unwrap();
    }
    // Remove every third binding incrementally; rebuild from the rest.
    let mut kept = Vec::new();
    for (i, b) in bindings.iter().enumerate() {
        if i % 3 == 0 {
            a.remove_binding(b);
        } else {
            kept.push(b.clone());
        }
    }
    // Duplicates in the random table may have been removed by an earlier index; drop them.
    kept.retain(|b| {
        !bindings
            .iter()
            .enumerate()
            .any(|(i, o)| i % 3 == 0 && o == b)
    });
    let rebuilt = authorizer(kept);
    assert_eq!(a.bindings(), rebuilt.bindings());
    assert_eq!(a.len(), rebuilt.len());
}

#[test]
fn duplicates_are_stored_once_and_removal_reports_presence() {
    let b = acl(
        ResourceType::Topic,
        "t",
        Literal,
        "User:bob",
        "*",
        Read,
        Allow,
    );
    let mut a = authorizer(vec![]);
    assert_eq!(a.add_binding(b.clone()), Ok(true));
    assert_eq!(a.add_binding(b.clone()), Ok(false));
    assert_eq!(a.len(), 1);
    assert!(a.remove_binding(&b));
    assert!(!a.remove_binding(&b));
    assert!(a.is_empty());
    assert_eq!(
        a.authorize(&user("bob"), "h", Read, ResourceType::Topic, "t"),
        AuthorizationResult::Denied
    );
}

#[test]
fn many_acls_stay_fast_to_check() {
    // 20k literal and prefixed ACLs; 20k checks must not scan them all (a scan would take
    // seconds in a debug build).
    let mut bindings = Vec::new();
    for i in 0..10_000 {
        bindings.push(acl(
            ResourceType::Topic,
            &format!("topic-{i}"),
            Literal,
            "User:bob",
            "*",
            Read,
            Allow,
        ));
        bindings.push(acl(
            ResourceType::Topic,
            &format!("team-{i}-"),
            Prefixed,
            "User:bob",
            "*",
            Write,
            Allow,
        ));
    }
    let a = authorizer(bindings);
    assert_eq!(a.len(), 20_000);
    let bob = user("bob");
    let started = std::time::Instant::now();
    for i in 0..10_000 {
        let t = format!("topic-{i}");
        assert!(a
            .authorize(&bob, "h", Read, ResourceType::Topic, &t)
            .is_allowed());
        let p = format!("team-{i}-events");
        assert!(a
            .authorize(&bob, "h", Write, ResourceType::Topic, &p)
            .is_allowed());
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
