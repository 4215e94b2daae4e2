//! KIP-848 consumer protocol tests: join, assignment, revocation before reassignment, epochs,
//! fencing, leave, expiry, durability, and how it coexists with classic groups.

use std::collections::BTreeSet;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::tests::{fixture_with_catalog, Fixture, CLIENT};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn hb(
    f: &Fixture,
    member: &str,
    epoch: i32,
    topics: Option<&[&str]>,
    owned: Option<&BTreeSet<(u128, i32)>>,
) -> ConsumerGroupHeartbeatResponse {
    heartbeat(f, member, epoch, owned, |r| {
        r.with_subscribed_topic_names(topics.map(|ts| ts.iter().map(|t| TopicName(s(t))).collect()))
    })
}

/// A heartbeat of `member` at `epoch` owning `owned`, its subscription set by `subscribe`.
fn heartbeat(
    f: &Fixture,
    member: &str,
    epoch: i32,
    owned: Option<&BTreeSet<(u128, i32)>>,
    subscribe: impl FnOnce(ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let owned = owned.map(|o| {
        let mut by_topic: std::collections::BTreeMap<u128, Vec<i32>> = Default::default();
        for (t, p) in o {
            by_topic.entry(*t).or_default().push(*p);
        }
        by_topic
            .into_iter()
            .map(|(t, ps)| {
                TopicPartitions::default()
                    .with_topic_id(Uuid::from_u128(t))
                    .with_partitions(ps)
            })
            .collect()
    });
    let request = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("cg")))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(30_000)
        .with_topic_partitions(owned);
    f.coord
        .consumer_group_heartbeat(subscribe(request), 0, CLIENT)
}

fn owned(r: &ConsumerGroupHeartbeatResponse) -> Option<BTreeSet<(u128, i32)>> {
    r.assignment.as_ref().map(|a| {
        a.topic_partitions
            .iter()
            .flat_map(|tp| {
                tp.partitions
                    .iter()
                    .map(move |p| (tp.topic_id.as_u128(), *p))
            })
            .collect()
    })
}

#[test]
fn first_member_gets_everything_then_shares_after_revoking() {
    let f = fixture_with_catalog();
    let a = hb(&f, "", 0, Some(&["t"]), None);
    assert_eq!(a.error_code, 0, "{:?}", a.error_message);
    let a_id = a.member_id.clone().unwrap().to_string();
    assert_eq!(a.member_epoch, 1);
    let a_owned = owned(&a).unwrap();
    assert_eq!(a_owned.len(), 4);

    // b joins: the group epoch moves, but b gets nothing a still owns.
    let b = hb(&f, "", 0, Some(&["t"]), None);
    let b_id = b.member_id.clone().unwrap().to_string();
    assert_eq!(b.member_epoch, 2);
    assert!(
        owned(&b).unwrap().is_empty(),
        "partitions are not given away before a revokes them"
    );

    // a is told to give up two partitions; its epoch stays until it confirms.
    let a2 = hb(&f, &a_id, 1, None, Some(&a_owned));
    assert_eq!(a2.member_epoch, 1);
    let a_keep = owned(&a2).unwrap();
    assert_eq!(a_keep.len(), 2);
    let a3 = hb(&f, &a_id, 1, None, Some(&a_keep));
    assert_eq!(
        a3.member_epoch, 2,
        "revocation confirmed: a reaches the new epoch"
    );

    // Now b receives the released partitions.
    let b2 = hb(&f, &b_id, 2, None, Some(&BTreeSet::new()));
    let b_owned = owned(&b2).unwrap();
    assert_eq!(b_owned.len(), 2);
    assert!(b_owned.is_disjoint(&a_keep));

    let d = f.coord.consumer_group_describe(
        ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("cg"))]),
    );
    assert_eq!(d.groups[0].error_code, 0);
    assert_eq!(d.groups[0].group_state.as_str(), "Stable");
    assert_eq!(d.groups[0].members.len(), 2);
    assert_eq!(d.groups[0].assignor_name.as_str(), "uniform");
}

#[test]
fn stale_epochs_are_fenced_and_unknown_members_refused() {
    let f = fixture_with_catalog();
    let a = hb(&f, "", 0, Some(&["t"]), None);
    let a_id = a.member_id.clone().unwrap().to_string();
    assert_eq!(
        hb(&f, &a_id, 7, None, None).error_code,
        ResponseError::FencedMemberEpoch.code()
    );
    assert_eq!(
        hb(&f, "ghost", 1, None, None).error_code,
        ResponseError::UnknownMemberId.code()
    );
    assert_eq!(hb(&f, &a_id, 1, None, None).error_code, 0);
}

#[test]
fn leaving_and_expiring_members_release_partitions() {
    let f = fixture_with_catalog();
    let a = hb(&f, "", 0, Some(&["t", "u"]), None);
    let a_id = a.member_id.clone().unwrap().to_string();
    let b = hb(&f, "", 0, Some(&["t", "u"]), None);
    let b_id = b.member_id.clone().unwrap().to_string();
    let left = hb(&f, &a_id, -1, None, None);
    assert_eq!(left.member_epoch, -1);
    let b2 = hb(&f, &b_id, b.member_epoch, None, Some(&BTreeSet::new()));
    assert_eq!(
        owned(&b2).unwrap().len(),
        6,
        "b owns everything once a left"
    );

    f.clock.advance(45_001);
    f.coord.tick();
    assert_eq!(
        hb(&f, &b_id, b2.member_epoch, None, None).error_code,
        ResponseError::UnknownMemberId.code()
    );
}

#[tokio::test]
async fn consumer_groups_survive_a_reload_and_commit_with_member_epochs() {
    let f = fixture_with_catalog();
    let a = hb(&f, "", 0, Some(&["t"]), None);
    let a_id = a.member_id.clone().unwrap().to_string();
    let commit = async |epoch: i32| {
        f.coord
            .offset_commit(
                OffsetCommitRequest::default()
                    .with_group_id(GroupId(s("cg")))
                    .with_generation_id_or_member_epoch(epoch)
                    .with_member_id(s(&a_id))
                    .with_topics(vec![kafka_protocol::messages::offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(TopicName(s("t")))
                        .with_partitions(vec![kafka_protocol::messages::offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(9)])]),
                9,
            )
            .await
            .topics[0]
            .partitions[0]
            .error_code
    };
    assert_eq!(commit(5).await, ResponseError::StaleMemberEpoch.code());
    assert_eq!(commit(1).await, 0);

    let again = crate::GroupCoordinator::new(
        f.coord.config().clone(),
        f.clock.clone(),
        f.store.clone(),
        Arc::new(super::tests::Catalog),
    );
    again.load().unwrap();
    let d = again.consumer_group_describe(
        ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("cg"))]),
    );
    assert_eq!(d.groups[0].members.len(), 1);
    assert_eq!(d.groups[0].members[0].member_id.as_str(), a_id);
    let listed =
        again.list_groups(ListGroupsRequest::default().with_types_filter(vec![s("consumer")]));
    assert_eq!(listed.groups.len(), 1);
    assert_eq!(listed.groups[0].group_type.as_str(), "consumer");
}

#[test]
fn classic_and_consumer_groups_do_not_mix() {
    let f = fixture_with_catalog();
    hb(&f, "", 0, Some(&["t"]), None);
    // ConsumerGroupDescribe of an unknown or classic group says so (clients then use DescribeGroups).
    let d = f.coord.consumer_group_describe(
        ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("nope"))]),
    );
    assert_eq!(
        d.groups[0].error_code,
        ResponseError::GroupIdNotFound.code()
    );
    let unknown_assignor = f.coord.consumer_group_heartbeat(
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("cg2")))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(vec![TopicName(s("t"))]))
            .with_server_assignor(Some(s("magic"))),
        0,
        CLIENT,
    );
    assert_eq!(
        unknown_assignor.error_code,
        ResponseError::UnsupportedAssignor.code()
    );
}

#[test]
fn a_consumer_group_whose_members_left_can_be_deleted() {
    let f = fixture_with_catalog();
    let delete = |f: &Fixture| {
        f.coord
            .delete_groups(DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("cg"))]))
            .results[0]
            .error_code
    };
    let a = hb(&f, "", 0, Some(&["t"]), None);
    let a_id = a.member_id.clone().unwrap().to_string();
    let b = hb(&f, "", 0, Some(&["t"]), None);
    let b_id = b.member_id.clone().unwrap().to_string();
    assert_eq!(delete(&f), ResponseError::NonEmptyGroup.code());
    hb(&f, &a_id, -1, None, None);
    assert_eq!(delete(&f), ResponseError::NonEmptyGroup.code());
    hb(&f, &b_id, -1, None, None);
    assert_eq!(delete(&f), 0, "every member left: the group is empty");
    assert_eq!(delete(&f), ResponseError::GroupIdNotFound.code());
}

fn hb_regex(
    f: &Fixture,
    member: &str,
    epoch: i32,
    regex: &str,
    owned: Option<&BTreeSet<(u128, i32)>>,
) -> ConsumerGroupHeartbeatResponse {
    heartbeat(f, member, epoch, owned, |r| {
        r.with_subscribed_topic_regex(Some(s(regex)))
    })
}

#[test]
fn a_regex_subscription_is_resolved_by_the_coordinator_against_whole_names() {
    let f = fixture_with_catalog();
    // `t` matches only topic t (4 partitions): the regex matches whole names, not u.
    let a = hb_regex(&f, "", 0, "t", None);
    assert_eq!(a.error_code, 0, "{:?}", a.error_message);
    let id = a.member_id.clone().unwrap().to_string();
    let mine = owned(&a).unwrap();
    assert_eq!(mine, (0..4).map(|p| (1, p)).collect());

    // Widening the regex takes in u as well, at a new epoch.
    let a2 = hb_regex(&f, &id, a.member_epoch, "[tu]", Some(&mine));
    assert_eq!(a2.error_code, 0, "{:?}", a2.error_message);
    assert!(a2.member_epoch > a.member_epoch);
    let both = owned(&a2).unwrap();
    assert_eq!(both.len(), 6, "{both:?}");

    let d = f.coord.consumer_group_describe(
        ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("cg"))]),
    );
    let m = &d.groups[0].members[0];
    assert_eq!(
        m.subscribed_topic_regex.as_ref().map(|r| r.to_string()),
        Some("[tu]".to_string())
    );
}

#[test]
fn an_invalid_regex_is_invalid_regular_expression() {
    let f = fixture_with_catalog();
    let r = hb_regex(&f, "", 0, "t(", None);
    assert_eq!(r.error_code, ResponseError::InvalidRegularExpression.code());
    assert!(r.member_id.is_none());
    // Nothing at all to subscribe with is still INVALID_REQUEST.
    let r = f.coord.consumer_group_heartbeat(
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("cg")))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000),
        0,
        CLIENT,
    );
    assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
}

/// The two-topic catalog, counting how often the topic names are listed, with a names version
/// the test moves.
struct VersionedCatalog {
    version: std::sync::atomic::AtomicU64,
    listed: std::sync::atomic::AtomicUsize,
}

impl crate::TopicCatalog for VersionedCatalog {
    fn topic(&self, name: &str) -> Option<(Uuid, i32)> {
        super::tests::Catalog.topic(name)
    }
    fn topic_name(&self, id: Uuid) -> Option<String> {
        super::tests::Catalog.topic_name(id)
    }
    fn topic_names(&self) -> Vec<String> {
        self.listed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        super::tests::Catalog.topic_names()
    }
    fn topic_names_version(&self) -> Option<u64> {
        Some(self.version.load(std::sync::atomic::Ordering::Relaxed))
    }
}

#[test]
fn regexes_are_resolved_again_only_when_topics_or_the_regex_change() {
    use std::sync::atomic::Ordering::Relaxed;

    let catalog = Arc::new(VersionedCatalog {
        version: 1.into(),
        listed: 0.into(),
    });
    let f = super::tests::fixture_on(catalog.clone());
    let a = hb_regex(&f, "", 0, "t", None);
    assert_eq!(a.error_code, 0, "{:?}", a.error_message);
    let id = a.member_id.clone().unwrap().to_string();
    let mine = owned(&a).unwrap();
    let after_join = catalog.listed.load(Relaxed);
    assert!(after_join >= 1);

    // Steady heartbeats with the same topics: no listing at all.
    let mut epoch = a.member_epoch;
    for _ in 0..5 {
        let r = hb(&f, &id, epoch, None, Some(&mine));
        assert_eq!(r.error_code, 0);
        epoch = r.member_epoch;
    }
    assert_eq!(catalog.listed.load(Relaxed), after_join);

    // The topics moved on: resolved once more.
    catalog.version.store(2, Relaxed);
    hb(&f, &id, epoch, None, Some(&mine));
    hb(&f, &id, epoch, None, Some(&mine));
    assert_eq!(catalog.listed.load(Relaxed), after_join + 1);

    // A new regex is resolved at once, at the same version.
    let wider = hb_regex(&f, &id, epoch, "[tu]", Some(&mine));
    assert_eq!(owned(&wider).unwrap().len(), 6);
    assert_eq!(catalog.listed.load(Relaxed), after_join + 2);
}

#[test]
fn a_group_config_sets_its_members_heartbeat_interval_and_session_timeout() {
    let f = fixture_with_catalog();
    let a = hb(&f, "", 0, Some(&["t"]), None);
    let a_id = a.member_id.clone().unwrap().to_string();
    assert_eq!(a.heartbeat_interval_ms, 5000, "the broker's default");

    let mut overrides = std::collections::HashMap::new();
    overrides.insert(
        "cg".to_string(),
        crate::ConsumerGroupOverrides {
            heartbeat_interval_ms: Some(7000),
            session_timeout_ms: Some(50_000),
        },
    );
    f.coord.set_group_overrides(overrides);
    let a2 = hb(&f, &a_id, a.member_epoch, None, None);
    assert_eq!(a2.heartbeat_interval_ms, 7000);

    // The broker's 45 s would have expired the member; the group's 50 s has not.
    f.clock.advance(45_001);
    f.coord.tick();
    let a3 = hb(&f, &a_id, a2.member_epoch, None, None);
    assert_eq!(a3.error_code, 0, "{:?}", a3.error_message);
    f.clock.advance(50_001);
    f.coord.tick();
    assert_eq!(
        hb(&f, &a_id, a3.member_epoch, None, None).error_code,
        ResponseError::UnknownMemberId.code()
    );

    // Without the override, the broker's settings again.
    f.coord.set_group_overrides(Default::default());
    assert_eq!(
        hb(&f, "", 0, Some(&["t"]), None).heartbeat_interval_ms,
        5000
    );
}

/// A consumer of the KIP-848 protocol that assigns its partitions itself commits with epoch -1
/// and its own member id (librdkafka does): taken while the group has no members, as Kafka
/// takes it, refused with UNKNOWN_MEMBER_ID once it has some. librdkafka's tests 0014, 0030 and
/// 0051 with `group.protocol=consumer` failed on the refusal.
#[tokio::test]
async fn a_commit_outside_any_epoch_carrying_a_member_id_is_taken_while_the_group_is_empty() {
    let f = fixture_with_catalog();
    let commit = |member: &str| {
        f.coord.offset_commit(
            OffsetCommitRequest::default()
                .with_group_id(GroupId(s("cg")))
                .with_member_id(s(member))
                .with_generation_id_or_member_epoch(-1)
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partitions(vec![OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(7)])]),
            9,
        )
    };
    let code = |r: OffsetCommitResponse| r.topics[0].partitions[0].error_code;
    assert_eq!(code(commit("self-assigned-4f1c").await), 0);
    // A member joins: commits from outside its epochs are refused now.
    let a = hb(&f, "", 0, Some(&["t"]), None);
    assert_eq!(a.error_code, 0);
    assert_eq!(
        code(commit("self-assigned-4f1c").await),
        ResponseError::UnknownMemberId.code()
    );
    assert_eq!(
        code(commit("").await),
        ResponseError::UnknownMemberId.code()
    );
}

/// A heartbeat of static member `member` with instance id `instance`, subscribing to `t` when
/// it joins.
fn static_hb(
    f: &Fixture,
    member: &str,
    instance: &str,
    epoch: i32,
    owned: Option<&BTreeSet<(u128, i32)>>,
) -> ConsumerGroupHeartbeatResponse {
    heartbeat(f, member, epoch, owned, |r| {
        r.with_instance_id(Some(s(instance)))
            .with_subscribed_topic_names((epoch == 0).then(|| vec![TopicName(s("t"))]))
    })
}

type Owned = BTreeSet<(u128, i32)>;

/// A static member as a test drives it: id, epoch and partitions.
type StaticMember = (String, i32, Owned);

/// Two static members `i-a` and `i-b` sharing `t` once both have reconciled.
fn two_static_members(f: &Fixture) -> [StaticMember; 2] {
    let instances = ["i-a", "i-b"];
    let mut members: Vec<StaticMember> = Vec::new();
    for instance in instances {
        let r = static_hb(f, "", instance, 0, None);
        assert_eq!(r.error_code, 0);
        let id = r.member_id.clone().unwrap().to_string();
        members.push((id, r.member_epoch, owned(&r).unwrap_or_default()));
    }
    for _ in 0..6 {
        for ((id, epoch, held), instance) in members.iter_mut().zip(instances) {
            let r = static_hb(f, id, instance, *epoch, Some(held));
            assert_eq!(r.error_code, 0);
            *epoch = r.member_epoch;
            if let Some(now) = owned(&r) {
                *held = now;
            }
        }
    }
    let [a, b]: [StaticMember; 2] = members.try_into().unwrap();
    assert_eq!((a.2.len(), b.2.len()), (2, 2), "{:?} {:?}", a.2, b.2);
    [a, b]
}

#[test]
fn a_static_member_away_for_a_while_gets_its_partitions_back_without_a_rebalance() {
    let f = fixture_with_catalog();
    let [(a, a_epoch, a_owns), (b, b_epoch, b_owns)] = two_static_members(&f);

    // a's process stops: it leaves with epoch -2 and keeps its place and partitions.
    let away = static_hb(&f, &a, "i-a", -2, Some(&a_owns));
    assert_eq!((away.error_code, away.member_epoch), (0, -2));
    let r = static_hb(&f, &b, "i-b", b_epoch, Some(&b_owns));
    assert_eq!(r.member_epoch, b_epoch, "no rebalance");
    assert!(
        owned(&r).is_none_or(|o| o == b_owns),
        "b is given nothing of a's"
    );

    // Its next incarnation (a new member id, the same instance id) takes over at once.
    let back = static_hb(&f, "", "i-a", 0, None);
    assert_eq!(back.error_code, 0);
    assert_ne!(back.member_id.as_ref().unwrap().as_str(), a);
    assert_eq!(
        back.member_epoch, a_epoch,
        "same epoch: the group did not move"
    );
    assert_eq!(owned(&back), Some(a_owns));
    let d = f.coord.consumer_group_describe(
        ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("cg"))]),
    );
    assert_eq!(d.groups[0].members.len(), 2);
    assert_eq!(d.groups[0].group_epoch, a_epoch);
}

#[test]
fn a_second_incarnation_is_refused_while_the_first_has_not_left() {
    let f = fixture_with_catalog();
    let [(a, a_epoch, a_owns), _] = two_static_members(&f);
    let twin = static_hb(&f, "", "i-a", 0, None);
    assert_eq!(twin.error_code, ResponseError::UnreleasedInstanceId.code());
    // The first one is untouched.
    let r = static_hb(&f, &a, "i-a", a_epoch, Some(&a_owns));
    assert_eq!((r.error_code, r.member_epoch), (0, a_epoch));
}

#[test]
fn a_static_member_away_longer_than_its_session_is_removed() {
    let f = fixture_with_catalog();
    let [(a, _, a_owns), (b, mut b_epoch, mut b_owns)] = two_static_members(&f);
    static_hb(&f, &a, "i-a", -2, Some(&a_owns));
    for _ in 0..3 {
        f.clock.advance(20_000);
        f.coord.tick();
        let r = static_hb(&f, &b, "i-b", b_epoch, Some(&b_owns));
        b_epoch = r.member_epoch;
        b_owns = owned(&r).unwrap_or(b_owns);
    }
    let r = static_hb(&f, &b, "i-b", b_epoch, Some(&b_owns));
    assert_eq!(
        owned(&r).unwrap_or(b_owns).len(),
        4,
        "b took a's partitions"
    );
}

#[test]
fn an_offset_fetch_naming_a_member_must_carry_its_epoch() {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
    let f = fixture_with_catalog();
    let a = hb(&f, "", 0, Some(&["t"]), None);
    let a_id = a.member_id.clone().unwrap().to_string();
    let fetch = |member: Option<&str>, epoch: i32| {
        f.coord
            .offset_fetch(
                OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(s("cg")))
                    .with_member_id(member.map(s))
                    .with_member_epoch(epoch)]),
                9,
            )
            .groups[0]
            .error_code
    };
    assert_eq!(fetch(Some(&a_id), a.member_epoch), 0);
    assert_eq!(
        fetch(Some(&a_id), a.member_epoch - 1),
        ResponseError::StaleMemberEpoch.code()
    );
    assert_eq!(
        fetch(Some("nobody"), 1),
        ResponseError::UnknownMemberId.code()
    );
    // An admin tool names no member.
    assert_eq!(fetch(None, -1), 0);
}

#[test]
fn malformed_heartbeats_are_invalid_request_with_kafkas_reason() {
    let f = fixture_with_catalog();
    let base = || {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("cg")))
            .with_rebalance_timeout_ms(30_000)
            .with_topic_partitions(Some(Vec::new()))
            .with_subscribed_topic_names(Some(vec![TopicName(s("t"))]))
    };
    let owning = vec![TopicPartitions::default()
        .with_topic_id(Uuid::from_u128(1))
        .with_partitions(vec![0])];
    let cases = [
        (
            base().with_instance_id(Some(s(""))),
            "InstanceId can't be empty.",
        ),
        (base().with_rack_id(Some(s(""))), "RackId can't be empty."),
        (base().with_member_epoch(3), "MemberId can't be empty."),
        (base().with_member_epoch(-1), "MemberId can't be empty."),
        (
            base().with_rebalance_timeout_ms(-1),
            "RebalanceTimeoutMs must be provided in first request.",
        ),
        (
            base().with_topic_partitions(Some(owning)),
            "TopicPartitions must be empty when (re-)joining.",
        ),
        (
            base().with_member_id(s("m")).with_member_epoch(-2),
            "InstanceId can't be null.",
        ),
        (
            base().with_member_id(s("m")).with_member_epoch(-3),
            "MemberEpoch is invalid.",
        ),
    ];
    let v0_cases = cases
        .into_iter()
        .map(|(request, reason)| (0, request, reason));
    // Kafka counts an id of nothing but spaces as empty; from v1 (KIP-1082) a joining member
    // must bring its own id.
    let v1_cases = [
        (base(), "MemberId can't be empty."),
        (base().with_member_id(s("  ")), "MemberId can't be empty."),
        (
            base().with_member_id(s("m")).with_instance_id(Some(s(" "))),
            "InstanceId can't be empty.",
        ),
        (
            base().with_member_id(s("m")).with_rack_id(Some(s("\t"))),
            "RackId can't be empty.",
        ),
    ];
    let v1_cases = v1_cases
        .into_iter()
        .map(|(request, reason)| (1, request, reason));
    for (version, request, reason) in v0_cases.chain(v1_cases) {
        let r = f.coord.consumer_group_heartbeat(request, version, CLIENT);
        assert_eq!(
            r.error_code,
            ResponseError::InvalidRequest.code(),
            "{reason}"
        );
        assert_eq!(r.error_message.as_deref(), Some(reason));
    }
    let r = f.coord.consumer_group_heartbeat(
        base().with_group_id(GroupId(s(" "))).with_member_id(s("m")),
        1,
        CLIENT,
    );
    assert_eq!(r.error_message.as_deref(), Some("GroupId can't be empty."));
    // None of them created the group.
    let listed = f.coord.list_groups(ListGroupsRequest::default());
    assert!(listed.groups.is_empty());
}

#[test]
fn from_v1_a_joining_member_keeps_the_id_its_client_made_up() {
    let f = fixture_with_catalog();
    let r = f.coord.consumer_group_heartbeat(
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("cg")))
            .with_member_id(s("client-made-id"))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_topic_partitions(Some(Vec::new()))
            .with_subscribed_topic_names(Some(vec![TopicName(s("t"))])),
        1,
        CLIENT,
    );
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    assert_eq!(r.member_id.as_deref(), Some("client-made-id"));
    assert_eq!(r.member_epoch, 1);
}
