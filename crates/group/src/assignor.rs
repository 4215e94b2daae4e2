//! Server-side partition assignors of the consumer group protocol (KIP-848): `uniform`
//! (balanced and sticky, the default) and `range` (per topic, contiguous ranges).
//!
//! Both are pure functions of the members' subscriptions, the topics' partition counts and,
//! for `uniform`, the previous target assignment. Every partition of a subscribed topic goes to
//! exactly one member subscribed to that topic.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

/// topic id → partitions
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

pub struct MemberSpec<'a> {
    pub member_id: &'a str,
    /// Topic ids the member subscribes to (existing topics only).
    pub topics: Vec<Uuid>,
}

pub const UNIFORM: &str = "uniform";
pub const RANGE: &str = "range";

pub fn is_known(name: &str) -> bool {
    name == UNIFORM || name == RANGE
}

/// Runs the named assignor. `partitions` maps each topic to its partition count.
pub fn assign(
    assignor: &str,
    members: &[MemberSpec<'_>],
    partitions: &BTreeMap<Uuid, i32>,
    previous: &BTreeMap<String, Assignment>,
) -> BTreeMap<String, Assignment> {
    if assignor == RANGE {
        range(members, partitions)
    } else {
        uniform(members, partitions, previous)
    }
}

fn range(
    members: &[MemberSpec<'_>],
    partitions: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = members
        .iter()
        .map(|m| (m.member_id.to_string(), Assignment::new()))
        .collect();
    for (&topic, &count) in partitions {
        let mut subscribers: Vec<&str> = members
            .iter()
            .filter(|m| m.topics.contains(&topic))
            .map(|m| m.member_id)
            .collect();
        if subscribers.is_empty() {
            continue;
        }
        subscribers.sort_unstable();
        let n = subscribers.len() as i32;
        let (per, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, member) in subscribers.iter().enumerate() {
            let take = per + i32::from((i as i32) < extra);
            if take > 0 {
                if let Some(a) = out.get_mut(*member) {
                    a.entry(topic).or_default().extend(next..next + take);
                }
            }
            next += take;
        }
    }
    out
}

fn uniform(
    members: &[MemberSpec<'_>],
    partitions: &BTreeMap<Uuid, i32>,
    previous: &BTreeMap<String, Assignment>,
) -> BTreeMap<String, Assignment> {
    let eligible = |member: &MemberSpec<'_>, topic: &Uuid| member.topics.contains(topic);
    let mut owned: BTreeMap<String, Vec<(Uuid, i32)>> = members
        .iter()
        .map(|m| (m.member_id.to_string(), Vec::new()))
        .collect();
    let mut taken: BTreeSet<(Uuid, i32)> = BTreeSet::new();
    // Stickiness: keep what each member had, while it is still valid.
    for m in members {
        if let Some(prev) = previous.get(m.member_id) {
            for (topic, ps) in prev {
                let Some(&count) = partitions.get(topic) else {
                    continue;
                };
                if !eligible(m, topic) {
                    continue;
                }
                for &p in ps {
                    if p < count && taken.insert((*topic, p)) {
                        if let Some(v) = owned.get_mut(m.member_id) {
                            v.push((*topic, p));
                        }
                    }
                }
            }
        }
    }
    // New partitions go to the least loaded eligible member.
    for (&topic, &count) in partitions {
        for p in 0..count {
            if taken.contains(&(topic, p)) {
                continue;
            }
            let target = members
                .iter()
                .filter(|m| eligible(m, &topic))
                .min_by_key(|m| {
                    (
                        owned.get(m.member_id).map(Vec::len).unwrap_or(0),
                        m.member_id,
                    )
                });
            if let Some(m) = target {
                taken.insert((topic, p));
                if let Some(v) = owned.get_mut(m.member_id) {
                    v.push((topic, p));
                }
            }
        }
    }
    // Balance: move partitions from the most to the least loaded member while it helps.
    let spec_of = |id: &str| members.iter().find(|m| m.member_id == id);
    for _ in 0..10_000 {
        let mut by_load: Vec<(usize, String)> =
            owned.iter().map(|(k, v)| (v.len(), k.clone())).collect();
        by_load.sort();
        let mut moved = false;
        'outer: for (low_n, low) in &by_load {
            for (high_n, high) in by_load.iter().rev() {
                if high_n <= &(low_n + 1) {
                    break;
                }
                let Some(low_spec) = spec_of(low) else {
                    continue;
                };
                let candidate = owned
                    .get(high)
                    .and_then(|v| v.iter().rposition(|(t, _)| eligible(low_spec, t)));
                if let Some(i) = candidate {
                    let tp = owned.get_mut(high).map(|v| v.remove(i));
                    if let (Some(tp), Some(dst)) = (tp, owned.get_mut(low)) {
                        dst.push(tp);
                        moved = true;
                        break 'outer;
                    }
                }
            }
        }
        if !moved {
            break;
        }
    }
    owned
        .into_iter()
        .map(|(member, tps)| {
            let mut a = Assignment::new();
            for (t, p) in tps {
                a.entry(t).or_default().insert(p);
            }
            (member, a)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    fn every_partition_once(out: &BTreeMap<String, Assignment>, partitions: &BTreeMap<Uuid, i32>) {
        let mut seen = BTreeSet::new();
        for a in out.values() {
            for (t, ps) in a {
                for p in ps {
                    assert!(seen.insert((*t, *p)), "{t}-{p} assigned twice");
                }
            }
        }
        let total: i32 = partitions.values().sum();
        assert_eq!(seen.len() as i32, total);
    }

    #[test]
    fn uniform_balances_and_is_sticky() {
        let (t1, t2) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let parts = BTreeMap::from([(t1, 4), (t2, 3)]);
        let members = [
            MemberSpec {
                member_id: "a",
                topics: vec![t1, t2],
            },
            MemberSpec {
                member_id: "b",
                topics: vec![t1, t2],
            },
        ];
        let first = assign(UNIFORM, &members, &parts, &BTreeMap::new());
        every_partition_once(&first, &parts);
        let loads: Vec<usize> = first.values().map(count).collect();
        assert!(loads.iter().max().unwrap() - loads.iter().min().unwrap() <= 1);

        // A third member takes a share; the others keep most of what they had.
        let members3 = [
            MemberSpec {
                member_id: "a",
                topics: vec![t1, t2],
            },
            MemberSpec {
                member_id: "b",
                topics: vec![t1, t2],
            },
            MemberSpec {
                member_id: "c",
                topics: vec![t1, t2],
            },
        ];
        let second = assign(UNIFORM, &members3, &parts, &first);
        every_partition_once(&second, &parts);
        assert!(count(&second["c"]) >= 2);
        for m in ["a", "b"] {
            let kept = second[m]
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
                .filter(|(t, p)| first[m].get(t).is_some_and(|s| s.contains(p)))
                .count();
            assert_eq!(
                kept,
                count(&second[m]),
                "{m} only lost partitions, gained none"
            );
        }
    }

    #[test]
    fn uniform_respects_subscriptions() {
        let (t1, t2) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let parts = BTreeMap::from([(t1, 2), (t2, 2)]);
        let members = [
            MemberSpec {
                member_id: "a",
                topics: vec![t1],
            },
            MemberSpec {
                member_id: "b",
                topics: vec![t1, t2],
            },
        ];
        let out = assign(UNIFORM, &members, &parts, &BTreeMap::new());
        every_partition_once(&out, &parts);
        assert!(!out["a"].contains_key(&t2));
    }

    #[test]
    fn range_gives_contiguous_ranges_per_topic() {
        let t = Uuid::from_u128(7);
        let parts = BTreeMap::from([(t, 5)]);
        let members = [
            MemberSpec {
                member_id: "b",
                topics: vec![t],
            },
            MemberSpec {
                member_id: "a",
                topics: vec![t],
            },
        ];
        let out = assign(RANGE, &members, &parts, &BTreeMap::new());
        assert_eq!(out["a"][&t], BTreeSet::from([0, 1, 2]));
        assert_eq!(out["b"][&t], BTreeSet::from([3, 4]));
    }
}
