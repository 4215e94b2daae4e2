//! Online migration between the classic and the consumer protocol: a consumer-protocol member
//! upgrades a classic group, classic members live in a consumer group (JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup, OffsetCommit), the last consumer-protocol member leaving downgrades
//! it, and `group.consumer.migration.policy` says which of these may happen. Topic `t` has four
//! partitions (id 1).

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use ferry_common::ManualClock;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use uuid::Uuid;

use super::tests::{heartbeat, Catalog, Fixture, MemStore, CLIENT};
use crate::{GroupConfig, GroupCoordinator, MigrationPolicy};

const GROUP: &str = "g";
const T: u128 = 1;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn config(policy: MigrationPolicy) -> GroupConfig {
    GroupConfig {
        offsets_topic_partitions: 5,
        initial_rebalance_delay_ms: 0,
        migration_policy: policy,
        ..GroupConfig::default()
    }
}

fn fixture(policy: MigrationPolicy) -> Fixture {
    let clock = ManualClock::new(1_000_000);
    let store = Arc::new(MemStore::default());
    let coord = Arc::new(GroupCoordinator::new(
        config(policy),
        clock.clone(),
        store.clone(),
        Arc::new(Catalog),
    ));
    coord.load().unwrap();
    Fixture {
        clock,
        store,
        coord,
    }
}

/// A coordinator that loads what `f`'s wrote, as after a restart or a move.
fn reloaded(f: &Fixture) -> GroupCoordinator {
    let again = GroupCoordinator::new(
        config(MigrationPolicy::Bidirectional),
        f.clock.clone(),
        f.store.clone(),
        Arc::new(Catalog),
    );
    again.load().unwrap();
    again
}

type Partitions = BTreeSet<i32>;

/// A ConsumerProtocolSubscription (version 1) of topic `t`, owning `owned`.
fn subscription(owned: &Partitions) -> Bytes {
    let sub = ConsumerProtocolSubscription::default()
        .with_topics(vec![s("t")])
        .with_owned_partitions(vec![
            consumer_protocol_subscription::TopicPartition::default()
                .with_topic(TopicName(s("t")))
                .with_partitions(owned.iter().copied().collect()),
        ]);
    let mut b = BytesMut::new();
    b.put_i16(1);
    sub.encode(&mut b, 1).unwrap();
    b.freeze()
}

fn assignment(partitions: &Partitions) -> Bytes {
    let a = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
        consumer_protocol_assignment::TopicPartition::default()
            .with_topic(TopicName(s("t")))
            .with_partitions(partitions.iter().copied().collect()),
    ]);
    let mut b = BytesMut::new();
    b.put_i16(1);
    a.encode(&mut b, 1).unwrap();
    b.freeze()
}

/// The partitions of `t` in a SyncGroup answer.
fn assigned(r: &SyncGroupResponse) -> Partitions {
    assert_eq!(r.error_code, 0, "SyncGroup failed");
    let mut b = r.assignment.clone();
    let version = i16::from_be_bytes([b[0], b[1]]);
    let _ = bytes::Buf::get_i16(&mut b);
    let a = ConsumerProtocolAssignment::decode(&mut b, version).unwrap();
    a.assigned_partitions
        .iter()
        .filter(|tp| tp.topic.as_str() == "t")
        .flat_map(|tp| tp.partitions.iter().copied())
        .collect()
}

fn all() -> Partitions {
    (0..4).collect()
}

/// A JoinGroup of `member` with one protocol.
fn join_request(
    member: &str,
    protocol_type: &str,
    name: &str,
    metadata: Bytes,
) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(30_000)
        .with_member_id(s(member))
        .with_protocol_type(s(protocol_type))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s(name))
            .with_metadata(metadata)])
}

/// A JoinGroup of a consumer subscribed to `t` with the range assignor, owning `owned`.
async fn join(f: &Fixture, member: &str, owned: &Partitions) -> JoinGroupResponse {
    let req = join_request(member, "consumer", "range", subscription(owned));
    f.coord.join_group(req, 9, CLIENT).await
}

/// A new classic member's id, learnt with KIP-394's MEMBER_ID_REQUIRED.
async fn classic_id(f: &Fixture) -> String {
    let first = join(f, "", &Partitions::new()).await;
    assert_eq!(first.error_code, ResponseError::MemberIdRequired.code());
    first.member_id.to_string()
}

async fn sync(
    f: &Fixture,
    member: &str,
    generation: i32,
    give: &[(&str, Bytes)],
) -> SyncGroupResponse {
    let req = SyncGroupRequest::default()
        .with_group_id(GroupId(s(GROUP)))
        .with_generation_id(generation)
        .with_member_id(s(member))
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_assignments(
            give.iter()
                .map(|(m, a)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(s(m))
                        .with_assignment(a.clone())
                })
                .collect(),
        );
    f.coord.sync_group(req, 5).await
}

/// A ConsumerGroupHeartbeat of `member` at `epoch` owning `owned` of `t`.
fn consumer_hb(
    f: &Fixture,
    member: &str,
    epoch: i32,
    owned: &Partitions,
) -> ConsumerGroupHeartbeatResponse {
    f.coord.consumer_group_heartbeat(
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_member_id(s(member))
            .with_member_epoch(epoch)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names((epoch == 0).then(|| vec![TopicName(s("t"))]))
            // A joining member owns nothing (Kafka refuses a join that reports partitions).
            .with_topic_partitions(Some(if epoch == 0 {
                Vec::new()
            } else {
                vec![TopicPartitions::default()
                    .with_topic_id(Uuid::from_u128(T))
                    .with_partitions(owned.iter().copied().collect())]
            })),
        0,
        CLIENT,
    )
}

fn hb_owned(r: &ConsumerGroupHeartbeatResponse) -> Option<Partitions> {
    r.assignment.as_ref().map(|a| {
        a.topic_partitions
            .iter()
            .flat_map(|tp| tp.partitions.iter().copied())
            .collect()
    })
}

fn group_type(f: &Fixture) -> String {
    let listed = f.coord.list_groups(ListGroupsRequest::default());
    listed
        .groups
        .iter()
        .find(|g| g.group_id.as_str() == GROUP)
        .map(|g| g.group_type.to_string())
        .unwrap_or_default()
}

/// A classic group of one member that owns all of `t` at generation 1; the member's id.
async fn classic_group_of_one(f: &Fixture) -> String {
    let a = classic_id(f).await;
    let joined = join(f, &a, &Partitions::new()).await;
    assert_eq!(joined.error_code, 0);
    assert_eq!(joined.generation_id, 1);
    assert_eq!(joined.leader.as_str(), a, "a lone member leads");
    let synced = sync(f, &a, 1, &[(&a, assignment(&all()))]).await;
    assert_eq!(assigned(&synced), all());
    assert_eq!(group_type(f), "classic");
    a
}

/// What each member owns once the classic member `a` (holding `a_owns` at `a_gen`) and the
/// consumer member `k` (at `k_epoch`, holding `k_owns`) have followed the coordinator until
/// neither is told anything new: (a's partitions, a's generation, k's partitions, k's epoch).
/// Checks at every step that no partition is owned twice.
async fn converge(
    f: &Fixture,
    a: &str,
    mut a_gen: i32,
    mut a_owns: Partitions,
    k: &str,
    mut k_epoch: i32,
    mut k_owns: Partitions,
) -> (Partitions, i32, Partitions, i32) {
    for _ in 0..10 {
        let mut moved = false;
        if heartbeat(f, a, a_gen) == ResponseError::RebalanceInProgress.code() {
            // A cooperative member joins again reporting what it owns.
            let joined = join(f, a, &a_owns).await;
            assert_eq!(joined.error_code, 0);
            assert_eq!(
                joined.protocol_name.as_ref().map(|p| p.as_str()),
                Some("range")
            );
            a_gen = joined.generation_id;
            a_owns = assigned(&sync(f, a, a_gen, &[]).await);
            moved = true;
        }
        assert!(
            a_owns.is_disjoint(&k_owns),
            "{a_owns:?} and {k_owns:?} overlap"
        );
        let r = consumer_hb(f, k, k_epoch, &k_owns);
        assert_eq!(r.error_code, 0);
        if let Some(now) = hb_owned(&r) {
            moved |= now != k_owns;
            k_owns = now;
        }
        moved |= r.member_epoch != k_epoch;
        k_epoch = r.member_epoch;
        assert!(
            a_owns.is_disjoint(&k_owns),
            "{a_owns:?} and {k_owns:?} overlap"
        );
        if !moved {
            break;
        }
    }
    (a_owns, a_gen, k_owns, k_epoch)
}

/// A classic member `a` that owned all of `t`, and a consumer-protocol member `k` that upgraded
/// the group, once both have followed the coordinator until they share `t`: (a, a's
/// partitions, a's generation, k, k's partitions, k's epoch).
async fn shared_by_a_classic_and_a_consumer_member(
    f: &Fixture,
) -> (String, Partitions, i32, String, Partitions, i32) {
    let a = classic_group_of_one(f).await;
    let k = consumer_hb(f, "", 0, &Partitions::new());
    let k_id = k.member_id.clone().unwrap().to_string();
    let (a_owns, a_gen, k_owns, k_epoch) =
        converge(f, &a, 1, all(), &k_id, k.member_epoch, Partitions::new()).await;
    (a, a_owns, a_gen, k_id, k_owns, k_epoch)
}

#[tokio::test]
async fn a_consumer_member_upgrades_a_classic_group_and_the_partitions_are_shared() {
    let f = fixture(MigrationPolicy::Bidirectional);
    let a = classic_group_of_one(&f).await;

    // A consumer-protocol member joins: the group becomes a consumer group holding both.
    let k = consumer_hb(&f, "", 0, &Partitions::new());
    assert_eq!(k.error_code, 0, "{:?}", k.error_message);
    assert_eq!(group_type(&f), "consumer");
    let k_id = k.member_id.clone().unwrap().to_string();
    assert_eq!(
        hb_owned(&k),
        Some(Partitions::new()),
        "everything is still the classic member's"
    );
    // The classic member keeps its generation as its epoch and is asked to join again.
    assert_eq!(
        heartbeat(&f, &a, 1),
        ResponseError::RebalanceInProgress.code()
    );

    let (a_owns, a_gen, k_owns, k_epoch) =
        converge(&f, &a, 1, all(), &k_id, k.member_epoch, Partitions::new()).await;
    assert_eq!(a_owns.len(), 2, "{a_owns:?}");
    assert_eq!(k_owns.len(), 2, "{k_owns:?}");
    assert_eq!(
        a_owns.union(&k_owns).copied().collect::<Partitions>(),
        all()
    );
    assert_eq!(a_gen, k_epoch, "both reached the group's epoch");
    assert_eq!(heartbeat(&f, &a, a_gen), 0);

    let described = f.coord.consumer_group_describe(
        ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(GROUP))]),
    );
    let types: BTreeSet<i8> = described.groups[0]
        .members
        .iter()
        .map(|m| m.member_type)
        .collect();
    assert_eq!(
        types,
        [0, 1].into_iter().collect(),
        "one classic and one consumer member"
    );

    // The classic member commits at its generation; a stale one is ILLEGAL_GENERATION even
    // at OffsetCommit v9.
    let commit = |generation: i32| {
        f.coord.offset_commit(
            OffsetCommitRequest::default()
                .with_group_id(GroupId(s(GROUP)))
                .with_generation_id_or_member_epoch(generation)
                .with_member_id(s(&a))
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partitions(vec![OffsetCommitRequestPartition::default()
                        .with_partition_index(*a_owns.first().unwrap())
                        .with_committed_offset(5)])]),
            9,
        )
    };
    assert_eq!(commit(a_gen).await.topics[0].partitions[0].error_code, 0);
    assert_eq!(
        commit(a_gen - 1).await.topics[0].partitions[0].error_code,
        ResponseError::IllegalGeneration.code()
    );

    // The state survives a reload: the classic member heartbeats at its generation there.
    let again = reloaded(&f);
    let hb = again.heartbeat(
        HeartbeatRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_generation_id(a_gen)
            .with_member_id(s(&a)),
    );
    assert_eq!(hb.error_code, 0);
}

#[tokio::test]
async fn the_last_consumer_member_leaving_downgrades_the_group() {
    let f = fixture(MigrationPolicy::Bidirectional);
    let a = classic_group_of_one(&f).await;
    let k = consumer_hb(&f, "", 0, &Partitions::new());
    let k_id = k.member_id.clone().unwrap().to_string();
    let (a_owns, a_gen, k_owns, k_epoch) =
        converge(&f, &a, 1, all(), &k_id, k.member_epoch, Partitions::new()).await;

    let left = consumer_hb(&f, &k_id, -1, &k_owns);
    assert_eq!(left.error_code, 0);
    assert_eq!(group_type(&f), "classic", "only a classic member is left");
    let d = f.coord.describe_groups(
        DescribeGroupsRequest::default().with_groups(vec![GroupId(s(GROUP))]),
        5,
    );
    assert_eq!(d.groups[0].protocol_type.as_str(), "consumer");
    assert_eq!(d.groups[0].group_state.as_str(), "PreparingRebalance");
    assert_eq!(d.groups[0].members.len(), 1);
    assert!(k_epoch > 1);

    // The classic member is told to rejoin and rebalances the classic way, leading.
    let hb = heartbeat(&f, &a, a_gen);
    assert_eq!(hb, ResponseError::RebalanceInProgress.code());
    let joined = join(&f, &a, &a_owns).await;
    assert_eq!(joined.error_code, 0);
    assert_eq!(joined.leader.as_str(), a);
    assert!(joined.generation_id > a_gen);
    let synced = sync(&f, &a, joined.generation_id, &[(&a, assignment(&all()))]).await;
    assert_eq!(assigned(&synced), all());
    assert_eq!(heartbeat(&f, &a, joined.generation_id), 0);

    // Durable: a reload finds a classic group with the member at that generation.
    let again = reloaded(&f);
    let d = again.describe_groups(
        DescribeGroupsRequest::default().with_groups(vec![GroupId(s(GROUP))]),
        5,
    );
    assert_eq!(d.groups[0].group_state.as_str(), "Stable");
    assert_eq!(d.groups[0].members[0].member_id.as_str(), a);
    let listed = again.list_groups(ListGroupsRequest::default());
    assert_eq!(listed.groups[0].group_type.as_str(), "classic");
}

#[tokio::test]
async fn a_classic_member_joins_a_consumer_group_and_waits_for_released_partitions() {
    let f = fixture(MigrationPolicy::Bidirectional);
    let k = consumer_hb(&f, "", 0, &Partitions::new());
    let k_id = k.member_id.clone().unwrap().to_string();
    assert_eq!(hb_owned(&k), Some(all()));
    let k = consumer_hb(&f, &k_id, k.member_epoch, &all());

    let c = classic_id(&f).await;
    let joined = join(&f, &c, &Partitions::new()).await;
    assert_eq!(joined.error_code, 0);
    assert_eq!(
        joined.protocol_type.as_ref().map(|p| p.as_str()),
        Some("consumer")
    );
    assert_ne!(
        joined.leader.as_str(),
        c,
        "nobody leads: the coordinator assigns"
    );
    assert_eq!(group_type(&f), "consumer");
    let synced = sync(&f, &c, joined.generation_id, &[]).await;
    assert_eq!(
        assigned(&synced),
        Partitions::new(),
        "its share is still k's"
    );
    // Nothing to do until k has given its share up.
    assert_eq!(heartbeat(&f, &c, joined.generation_id), 0);

    let (c_owns, c_gen, k_owns, _) = converge(
        &f,
        &c,
        joined.generation_id,
        Partitions::new(),
        &k_id,
        k.member_epoch,
        all(),
    )
    .await;
    assert_eq!(
        (c_owns.len(), k_owns.len()),
        (2, 2),
        "{c_owns:?} {k_owns:?}"
    );

    // The classic member leaves with LeaveGroup: k gets everything back, and the group stays
    // a consumer group (only the consumer-protocol member's leaving downgrades).
    let left = f.coord.leave_group(
        LeaveGroupRequest::default()
            .with_group_id(GroupId(s(GROUP)))
            .with_members(vec![MemberIdentity::default().with_member_id(s(&c))]),
        4,
    );
    assert_eq!(left.members[0].error_code, 0);
    assert_eq!(
        heartbeat(&f, &c, c_gen),
        ResponseError::UnknownMemberId.code()
    );
    let k = consumer_hb(&f, &k_id, k.member_epoch, &k_owns);
    assert_eq!(group_type(&f), "consumer");
    assert_eq!(hb_owned(&k), Some(all()));
}

#[tokio::test]
async fn a_fenced_consumer_member_downgrades_the_group() {
    let f = fixture(MigrationPolicy::Bidirectional);
    let a = classic_group_of_one(&f).await;
    let k = consumer_hb(&f, "", 0, &Partitions::new());
    let k_id = k.member_id.clone().unwrap().to_string();
    let (_, a_gen, _, _) =
        converge(&f, &a, 1, all(), &k_id, k.member_epoch, Partitions::new()).await;
    // The consumer member's session (45 s) lapses while the classic one (10 s) heartbeats.
    for _ in 0..6 {
        f.clock.advance(8_000);
        assert_eq!(heartbeat(&f, &a, a_gen), 0);
        f.coord.tick();
    }
    assert_eq!(
        group_type(&f),
        "classic",
        "the fenced consumer member downgraded the group"
    );
}

#[tokio::test]
async fn the_policy_can_forbid_each_conversion() {
    // Upgrade disabled: a consumer member cannot join a classic group with members.
    for policy in [MigrationPolicy::Disabled, MigrationPolicy::Downgrade] {
        let f = fixture(policy);
        classic_group_of_one(&f).await;
        let k = consumer_hb(&f, "", 0, &Partitions::new());
        assert_eq!(k.error_code, ResponseError::GroupIdNotFound.code());
        let message = k.error_message.map(|m| m.to_string()).unwrap_or_default();
        assert!(message.contains("online upgrade is disabled"), "{message}");
        assert_eq!(group_type(&f), "classic");
    }
    // Downgrade disabled: the group stays a consumer group of classic members.
    let f = fixture(MigrationPolicy::Upgrade);
    let a = classic_group_of_one(&f).await;
    let k = consumer_hb(&f, "", 0, &Partitions::new());
    let k_id = k.member_id.clone().unwrap().to_string();
    let (_, _, k_owns, k_epoch) =
        converge(&f, &a, 1, all(), &k_id, k.member_epoch, Partitions::new()).await;
    consumer_hb(&f, &k_id, -1, &k_owns);
    assert!(k_epoch > 0);
    assert_eq!(group_type(&f), "consumer");
    let (a_owns, _, _, _) = {
        let joined = join(&f, &a, &Partitions::new()).await;
        let owns = assigned(&sync(&f, &a, joined.generation_id, &[]).await);
        (owns, joined.generation_id, (), ())
    };
    assert_eq!(a_owns, all(), "the classic member took over k's share");
}

#[tokio::test]
async fn only_groups_of_the_consumer_embedded_protocol_are_upgraded() {
    let f = fixture(MigrationPolicy::Bidirectional);
    let req = join_request("", "connect", "sessioned", Bytes::from_static(b"worker"));
    let joined = f.coord.join_group(req, 3, CLIENT).await;
    assert_eq!(joined.error_code, 0);
    let k = consumer_hb(&f, "", 0, &Partitions::new());
    assert_eq!(k.error_code, ResponseError::GroupIdNotFound.code());
    let message = k.error_message.map(|m| m.to_string()).unwrap_or_default();
    assert!(
        message.contains("does not use the consumer embedded protocol"),
        "{message}"
    );
}

#[tokio::test]
async fn a_classic_member_with_a_malformed_subscription_leaves_the_classic_group_as_it_was() {
    let f = fixture(MigrationPolicy::Bidirectional);
    let req = join_request("", "consumer", "range", Bytes::from_static(b"\x00\x01\xff"));
    let joined = f.coord.join_group(req, 3, CLIENT).await;
    assert_eq!(joined.error_code, 0);
    let k = consumer_hb(&f, "", 0, &Partitions::new());
    assert_eq!(k.error_code, ResponseError::GroupIdNotFound.code());
    assert_eq!(group_type(&f), "classic");
}

#[tokio::test]
async fn a_classic_member_expires_on_its_own_session_timeout() {
    let f = fixture(MigrationPolicy::Bidirectional);
    let a = classic_group_of_one(&f).await;
    let k = consumer_hb(&f, "", 0, &Partitions::new());
    let k_id = k.member_id.clone().unwrap().to_string();
    let (_, a_gen, mut k_owns, mut k_epoch) =
        converge(&f, &a, 1, all(), &k_id, k.member_epoch, Partitions::new()).await;
    // The classic member's 10 s session lapses while the consumer member heartbeats.
    for _ in 0..3 {
        f.clock.advance(4_000);
        f.coord.tick();
        let r = consumer_hb(&f, &k_id, k_epoch, &k_owns);
        assert_eq!(r.error_code, 0);
        k_epoch = r.member_epoch;
        k_owns = hb_owned(&r).unwrap_or(k_owns);
    }
    assert_eq!(
        heartbeat(&f, &a, a_gen),
        ResponseError::UnknownMemberId.code()
    );
    assert_eq!(
        k_owns,
        all(),
        "the consumer member took the expired member's share"
    );
    assert_eq!(group_type(&f), "consumer");
}

#[tokio::test]
async fn a_classic_member_told_to_rejoin_that_does_not_is_removed_after_its_rebalance_timeout() {
    let f = fixture(MigrationPolicy::Bidirectional);
    let a = classic_group_of_one(&f).await;
    let k = consumer_hb(&f, "", 0, &Partitions::new());
    let k_id = k.member_id.clone().unwrap().to_string();
    // It keeps heartbeating at generation 1 but never joins again, holding all of `t`.
    assert_eq!(
        heartbeat(&f, &a, 1),
        ResponseError::RebalanceInProgress.code()
    );
    for _ in 0..4 {
        f.clock.advance(8_000);
        assert_eq!(
            heartbeat(&f, &a, 1),
            ResponseError::RebalanceInProgress.code()
        );
        f.coord.tick();
    }
    // 32 s later its 30 s rebalance timeout has removed it, and k takes everything.
    assert_eq!(heartbeat(&f, &a, 1), ResponseError::UnknownMemberId.code());
    let r = consumer_hb(&f, &k_id, k.member_epoch, &Partitions::new());
    assert_eq!(hb_owned(&r), Some(all()));
}

#[tokio::test]
async fn a_classic_member_that_joins_but_never_syncs_is_removed_after_its_rebalance_timeout() {
    let f = fixture(MigrationPolicy::Bidirectional);
    let (a, a_owns, _, k_id, k_owns, k_epoch) = shared_by_a_classic_and_a_consumer_member(&f).await;
    // The group is stable. `a` joins again with what it owns, then only heartbeats at its
    // generation, which the coordinator accepts: no SyncGroup follows.
    let joined = join(&f, &a, &a_owns).await;
    assert_eq!(joined.error_code, 0);
    let a_gen = joined.generation_id;
    for _ in 0..3 {
        f.clock.advance(8_000);
        f.coord.tick();
        assert_eq!(
            heartbeat(&f, &a, a_gen),
            0,
            "a member before its 30 s timeout"
        );
        assert_eq!(consumer_hb(&f, &k_id, k_epoch, &k_owns).error_code, 0);
    }
    f.clock.advance(8_000);
    f.coord.tick();
    // 32 s after its JoinGroup the sync timeout has removed it, and k takes everything.
    assert_eq!(
        heartbeat(&f, &a, a_gen),
        ResponseError::UnknownMemberId.code()
    );
    let r = consumer_hb(&f, &k_id, k_epoch, &k_owns);
    assert_eq!(r.error_code, 0);
    assert_eq!(hb_owned(&r), Some(all()));
}

#[tokio::test]
async fn a_classic_member_that_syncs_after_joining_is_not_removed_by_the_sync_timeout() {
    let f = fixture(MigrationPolicy::Bidirectional);
    let (a, a_owns, a_gen, k_id, k_owns, k_epoch) =
        shared_by_a_classic_and_a_consumer_member(&f).await;
    assert!(!a_owns.is_empty() && !k_owns.is_empty());
    // Both keep heartbeating well past the 30 s rebalance timeout.
    for _ in 0..8 {
        f.clock.advance(5_000);
        f.coord.tick();
        assert_eq!(heartbeat(&f, &a, a_gen), 0);
        assert_eq!(consumer_hb(&f, &k_id, k_epoch, &k_owns).error_code, 0);
    }
}
