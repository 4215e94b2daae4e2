//! Coordinator tests: the classic protocol's rules and the durability of offsets, driven with
//! a manual clock and an in-memory `__consumer_offsets`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ferry_common::ManualClock;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use crate::store::{Appended, OffsetsStore, StoreError, StoredEntry, StoredRecord};
use crate::{ClientInfo, GroupConfig, GroupCoordinator};

/// An in-memory `__consumer_offsets`. Appends are durable at once unless `not_durable` holds
/// the error the in-sync replicas would cause.
#[derive(Default)]
pub(crate) struct MemStore {
    /// Each entry's offset is its index.
    logs: Mutex<HashMap<i32, Vec<StoredEntry>>>,
    pub(crate) not_durable: Mutex<Option<StoreError>>,
    /// When set, an append becomes durable only once this is notified (the in-sync replicas
    /// taking their time).
    pub(crate) durable_gate: Mutex<Option<Arc<tokio::sync::Notify>>>,
}

impl MemStore {
    fn push(&self, partition: i32, entries: Vec<StoredEntry>) -> Result<Appended, StoreError> {
        let mut logs = self.logs.lock().unwrap();
        let log = logs.entry(partition).or_default();
        log.extend(entries);
        let outcome = match self.not_durable.lock().unwrap().clone() {
            Some(e) => Err(e),
            None => Ok(()),
        };
        let gate = self.durable_gate.lock().unwrap().clone();
        Ok(Appended {
            end_offset: log.len() as i64,
            durable: Box::pin(async move {
                if let Some(gate) = gate {
                    gate.notified().await;
                }
                outcome
            }),
        })
    }

    /// Writes a transaction marker, as the broker does for WriteTxnMarkers.
    pub(crate) fn write_marker(&self, partition: i32, producer_id: i64, commit: bool) {
        let marker = StoredEntry::Marker {
            producer_id,
            commit,
        };
        self.logs
            .lock()
            .unwrap()
            .entry(partition)
            .or_default()
            .push(marker);
    }
}

impl OffsetsStore for MemStore {
    fn append(&self, partition: i32, records: &[StoredRecord]) -> Result<Appended, StoreError> {
        self.push(
            partition,
            records.iter().cloned().map(StoredEntry::Record).collect(),
        )
    }
    fn append_transactional(
        &self,
        partition: i32,
        producer_id: i64,
        _producer_epoch: i16,
        records: &[StoredRecord],
    ) -> Result<Appended, StoreError> {
        self.push(
            partition,
            records
                .iter()
                .cloned()
                .map(|record| StoredEntry::Transactional {
                    producer_id,
                    record,
                })
                .collect(),
        )
    }
    fn read_all(&self, partition: i32) -> Result<Vec<(i64, StoredEntry)>, StoreError> {
        Ok(self
            .logs
            .lock()
            .unwrap()
            .get(&partition)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, e)| (i as i64, e))
            .collect())
    }
}

/// A store whose reads wait until the test lets them go.
pub(crate) struct SlowStore {
    pub(crate) inner: MemStore,
    pub(crate) release: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl OffsetsStore for SlowStore {
    fn append(&self, partition: i32, records: &[StoredRecord]) -> Result<Appended, StoreError> {
        self.inner.append(partition, records)
    }
    fn append_transactional(
        &self,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        records: &[StoredRecord],
    ) -> Result<Appended, StoreError> {
        self.inner
            .append_transactional(partition, producer_id, producer_epoch, records)
    }
    fn read_all(&self, partition: i32) -> Result<Vec<(i64, StoredEntry)>, StoreError> {
        let _ = self.release.lock().unwrap().recv();
        self.inner.read_all(partition)
    }
}

/// Topics `t` (id 1, 4 partitions) and `u` (id 2, 2 partitions).
pub(crate) struct Catalog;

impl crate::TopicCatalog for Catalog {
    fn topic(&self, name: &str) -> Option<(uuid::Uuid, i32)> {
        match name {
            "t" => Some((uuid::Uuid::from_u128(1), 4)),
            "u" => Some((uuid::Uuid::from_u128(2), 2)),
            _ => None,
        }
    }
    fn topic_name(&self, id: uuid::Uuid) -> Option<String> {
        match id.as_u128() {
            1 => Some("t".into()),
            2 => Some("u".into()),
            _ => None,
        }
    }
    fn topic_names(&self) -> Vec<String> {
        vec!["t".into(), "u".into()]
    }
}

pub(crate) fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// `__consumer_offsets` partitions of the coordinators of [`coordinator`].
pub(crate) const PARTITIONS: i32 = 5;

/// Commits offset `offset` of t-0 for `group` from outside any generation; the error code.
pub(crate) async fn commit_offset(c: &GroupCoordinator, group: &str, offset: i64) -> i16 {
    c.offset_commit(
        OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(s("t")))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(offset)])]),
        8,
    )
    .await
    .topics[0]
        .partitions[0]
        .error_code
}

/// A coordinator over `store` that leads nothing yet (load or elect partitions first).
pub(crate) fn coordinator(store: Arc<dyn OffsetsStore>) -> GroupCoordinator {
    GroupCoordinator::new(
        GroupConfig {
            offsets_topic_partitions: PARTITIONS,
            initial_rebalance_delay_ms: 0,
            ..GroupConfig::default()
        },
        ManualClock::new(1_000_000),
        store,
        Arc::new(Catalog),
    )
}

pub(crate) struct Fixture {
    pub(crate) clock: Arc<ManualClock>,
    pub(crate) store: Arc<MemStore>,
    pub(crate) coord: Arc<GroupCoordinator>,
}

pub(crate) fn fixture_with_catalog() -> Fixture {
    fixture(0)
}

/// A fixture whose coordinator looks topics up in `catalog`.
pub(crate) fn fixture_on(catalog: Arc<dyn crate::TopicCatalog>) -> Fixture {
    fixture_with(0, catalog)
}

fn fixture(initial_delay: i64) -> Fixture {
    fixture_with(initial_delay, Arc::new(Catalog))
}

fn fixture_with(initial_delay: i64, catalog: Arc<dyn crate::TopicCatalog>) -> Fixture {
    let clock = ManualClock::new(1_000_000);
    let store = Arc::new(MemStore::default());
    let config = GroupConfig {
        initial_rebalance_delay_ms: initial_delay,
        offsets_topic_partitions: 5,
        ..GroupConfig::default()
    };
    let coord = Arc::new(GroupCoordinator::new(
        config,
        clock.clone(),
        store.clone(),
        catalog,
    ));
    // A single broker: it leads every partition of `__consumer_offsets`.
    coord.load().unwrap();
    Fixture {
        clock,
        store,
        coord,
    }
}

pub(crate) const CLIENT: ClientInfo<'static> = ClientInfo {
    client_id: "c",
    client_host: "/127.0.0.1",
};

fn join_req(member: &str, instance: Option<&str>, protocols: &[&str]) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(30_000)
        .with_member_id(s(member))
        .with_group_instance_id(instance.map(s))
        .with_protocol_type(s("consumer"))
        .with_protocols(
            protocols
                .iter()
                .map(|p| {
                    JoinGroupRequestProtocol::default()
                        .with_name(s(p))
                        .with_metadata(Bytes::from(format!("meta-{p}")))
                })
                .collect(),
        )
}

async fn join(coord: &Arc<GroupCoordinator>, req: JoinGroupRequest) -> JoinGroupResponse {
    coord.join_group(req, 9, CLIENT).await
}

/// Joins with the two-step KIP-394 dance and returns the pending join.
async fn join_new(
    f: &Fixture,
    protocols: &'static [&'static str],
) -> tokio::task::JoinHandle<JoinGroupResponse> {
    let first = join(&f.coord, join_req("", None, protocols)).await;
    assert_eq!(first.error_code, ResponseError::MemberIdRequired.code());
    let id = first.member_id.to_string();
    let coord = f.coord.clone();
    let h = tokio::spawn(async move { join(&coord, join_req(&id, None, protocols)).await });
    tokio::task::yield_now().await;
    h
}

async fn sync(
    f: &Fixture,
    member: &str,
    generation: i32,
    assignments: &[(&str, &str)],
) -> SyncGroupResponse {
    let req = SyncGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_generation_id(generation)
        .with_member_id(s(member))
        .with_assignments(
            assignments
                .iter()
                .map(|(m, a)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(s(m))
                        .with_assignment(Bytes::from(a.to_string()))
                })
                .collect(),
        );
    f.coord.sync_group(req, 5).await
}

/// A Heartbeat of `member` at `generation` in group `g`; the error code.
pub(crate) fn heartbeat(f: &Fixture, member: &str, generation: i32) -> i16 {
    f.coord
        .heartbeat(
            HeartbeatRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id(generation)
                .with_member_id(s(member)),
        )
        .error_code
}

/// Spins until a spawned join or sync has been parked, then checks it is still waiting.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn two_members_join_then_sync_distributes_the_leaders_assignment() {
    let f = fixture(0);
    let a = join_new(&f, &["range", "roundrobin"]).await;
    // One member, nothing else outstanding: the join completes at once.
    let ra = a.await.unwrap();
    assert_eq!(ra.error_code, 0);
    assert_eq!(ra.generation_id, 1);
    assert_eq!(ra.leader, ra.member_id);
    assert_eq!(ra.members.len(), 1);
    let a_id = ra.member_id.to_string();
    let sa = sync(&f, &a_id, 1, &[(&a_id, "all")]).await;
    assert_eq!(sa.assignment, Bytes::from("all"));

    // A second member arrives: the first learns of the rebalance through its heartbeat.
    let b = join_new(&f, &["roundrobin"]).await;
    settle().await;
    assert!(
        !b.is_finished(),
        "the join waits for the existing member to rejoin"
    );
    assert_eq!(
        heartbeat(&f, &a_id, 1),
        ResponseError::RebalanceInProgress.code()
    );
    let a2 = join(&f.coord, join_req(&a_id, None, &["range", "roundrobin"])).await;
    let rb = b.await.unwrap();
    assert_eq!(a2.generation_id, 2);
    assert_eq!(rb.generation_id, 2);
    // The only protocol both support wins.
    assert_eq!(a2.protocol_name.as_deref(), Some("roundrobin"));
    assert_eq!(a2.leader.as_str(), a_id, "the leader stays the leader");
    assert_eq!(a2.members.len(), 2);
    assert!(
        rb.members.is_empty(),
        "followers do not get the member list"
    );

    let b_id = rb.member_id.to_string();
    let coord = f.coord.clone();
    let b_sync = {
        let b_id = b_id.clone();
        let f2 = Fixture {
            clock: f.clock.clone(),
            store: f.store.clone(),
            coord,
        };
        tokio::spawn(async move { sync(&f2, &b_id, 2, &[]).await })
    };
    settle().await;
    assert!(
        !b_sync.is_finished(),
        "a follower's SyncGroup waits for the leader"
    );
    let sa = sync(&f, &a_id, 2, &[(&a_id, "p0"), (&b_id, "p1")]).await;
    assert_eq!(sa.assignment, Bytes::from("p0"));
    assert_eq!(b_sync.await.unwrap().assignment, Bytes::from("p1"));
    assert_eq!(heartbeat(&f, &b_id, 2), 0);
    assert_eq!(
        heartbeat(&f, &b_id, 1),
        ResponseError::IllegalGeneration.code()
    );
    assert_eq!(
        heartbeat(&f, "nobody", 2),
        ResponseError::UnknownMemberId.code()
    );
}

#[tokio::test]
async fn expired_session_removes_the_member_and_rebalances() {
    let f = fixture(0);
    let ra = join_new(&f, &["range"]).await.await.unwrap();
    let a_id = ra.member_id.to_string();
    sync(&f, &a_id, 1, &[(&a_id, "x")]).await;
    f.clock.advance(9_000);
    f.coord.tick();
    assert_eq!(heartbeat(&f, &a_id, 1), 0, "within the session timeout");
    f.clock.advance(10_001);
    f.coord.tick();
    assert_eq!(
        heartbeat(&f, &a_id, 1),
        ResponseError::UnknownMemberId.code()
    );
    // Empty with no committed offsets: the group is forgotten, as Kafka's cleanup does.
    assert!(f
        .coord
        .list_groups(ListGroupsRequest::default())
        .groups
        .is_empty());
}

#[tokio::test]
async fn initial_rebalance_delay_holds_the_first_join() {
    let f = fixture(3_000);
    let a = join_new(&f, &["range"]).await;
    settle().await;
    assert!(!a.is_finished());
    f.clock.advance(2_999);
    f.coord.tick();
    settle().await;
    assert!(!a.is_finished());
    f.clock.advance(1);
    f.coord.tick();
    assert_eq!(a.await.unwrap().generation_id, 1);
}

#[tokio::test]
async fn static_member_restart_keeps_its_assignment_without_rebalance() {
    let f = fixture(0);
    let ra = join_new(&f, &["range"]).await.await.unwrap();
    let leader = ra.member_id.to_string();
    sync(&f, &leader, 1, &[(&leader, "L")]).await;
    let coord = f.coord.clone();
    let s1 =
        tokio::spawn(async move { join(&coord, join_req("", Some("inst-1"), &["range"])).await });
    settle().await;
    join(&f.coord, join_req(&leader, None, &["range"])).await;
    let r1 = s1.await.unwrap();
    assert_eq!(r1.generation_id, 2);
    let old_static = r1.member_id.to_string();
    sync(&f, &leader, 2, &[(&leader, "L"), (&old_static, "S")]).await;
    assert_eq!(
        sync(&f, &old_static, 2, &[]).await.assignment,
        Bytes::from("S")
    );

    // The static member restarts: same instance id, no member id.
    let r2 = join(&f.coord, join_req("", Some("inst-1"), &["range"])).await;
    assert_eq!(r2.error_code, 0);
    assert_eq!(r2.generation_id, 2, "no new generation");
    let new_static = r2.member_id.to_string();
    assert_ne!(new_static, old_static);
    assert_eq!(
        sync(&f, &new_static, 2, &[]).await.assignment,
        Bytes::from("S")
    );
    assert_eq!(heartbeat(&f, &leader, 2), 0, "the others see no rebalance");
    // The old incarnation is fenced.
    let fenced = f.coord.heartbeat(
        HeartbeatRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_generation_id(2)
            .with_member_id(s(&old_static))
            .with_group_instance_id(Some(s("inst-1"))),
    );
    assert_eq!(fenced.error_code, ResponseError::FencedInstanceId.code());
}

#[tokio::test]
async fn leave_group_triggers_rebalance_and_empties_the_group() {
    let f = fixture(0);
    let ra = join_new(&f, &["range"]).await.await.unwrap();
    let a_id = ra.member_id.to_string();
    sync(&f, &a_id, 1, &[(&a_id, "x")]).await;
    let r = f.coord.leave_group(
        LeaveGroupRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_members(vec![
                MemberIdentity::default().with_member_id(s(&a_id)),
                MemberIdentity::default().with_member_id(s("ghost")),
            ]),
        4,
    );
    assert_eq!(r.error_code, 0);
    assert_eq!(r.members[0].error_code, 0);
    assert_eq!(
        r.members[1].error_code,
        ResponseError::UnknownMemberId.code()
    );
    let d = f.coord.describe_groups(
        DescribeGroupsRequest::default().with_groups(vec![GroupId(s("g"))]),
        5,
    );
    assert_eq!(d.groups[0].group_state.as_str(), "Empty");
    assert!(d.groups[0].members.is_empty());
}

async fn commit(f: &Fixture, generation: i32, member: &str, offset: i64, metadata: &str) -> i16 {
    let r = f
        .coord
        .offset_commit(
            OffsetCommitRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id_or_member_epoch(generation)
                .with_member_id(s(member))
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partitions(vec![OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(3)
                        .with_committed_metadata(Some(s(metadata)))])]),
            8,
        )
        .await;
    r.topics[0].partitions[0].error_code
}

fn fetch(f: &Fixture) -> (i64, String) {
    let r = f.coord.offset_fetch(
        OffsetFetchRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(TopicName(s("t")))
                .with_partition_indexes(vec![0])])),
        7,
    );
    let p = &r.topics[0].partitions[0];
    (
        p.committed_offset,
        p.metadata.as_deref().unwrap_or("").to_string(),
    )
}

#[tokio::test]
async fn committed_offsets_survive_a_reload_and_keep_metadata() {
    let f = fixture(0);
    assert_eq!(fetch(&f), (-1, String::new()));
    assert_eq!(commit(&f, -1, "", 42, "hello").await, 0);
    assert_eq!(fetch(&f), (42, "hello".to_string()));
    let too_big = "x".repeat(5000);
    assert_eq!(
        commit(&f, -1, "", 43, &too_big).await,
        ResponseError::OffsetMetadataTooLarge.code()
    );

    // A new coordinator over the same store sees the same offsets.
    let again = GroupCoordinator::new(
        f.coord.config().clone(),
        f.clock.clone(),
        f.store.clone(),
        Arc::new(Catalog),
    );
    again.load().unwrap();
    let f2 = Fixture {
        clock: f.clock.clone(),
        store: f.store.clone(),
        coord: Arc::new(again),
    };
    assert_eq!(fetch(&f2), (42, "hello".to_string()));
}

#[tokio::test]
async fn commits_are_fenced_by_generation_and_membership() {
    let f = fixture(0);
    let ra = join_new(&f, &["range"]).await.await.unwrap();
    let a_id = ra.member_id.to_string();
    assert_eq!(
        commit(&f, 1, &a_id, 5, "").await,
        ResponseError::RebalanceInProgress.code(),
        "before SyncGroup"
    );
    sync(&f, &a_id, 1, &[(&a_id, "x")]).await;
    assert_eq!(commit(&f, 1, &a_id, 5, "").await, 0);
    assert_eq!(
        commit(&f, 7, &a_id, 6, "").await,
        ResponseError::IllegalGeneration.code()
    );
    assert_eq!(
        commit(&f, 1, "ghost", 6, "").await,
        ResponseError::UnknownMemberId.code()
    );
    assert_eq!(
        commit(&f, -1, "", 6, "").await,
        ResponseError::UnknownMemberId.code(),
        "a live group refuses outside commits"
    );
    assert_eq!(fetch(&f).0, 5);
}

#[tokio::test]
async fn offsets_of_an_empty_group_expire_after_retention() {
    let f = fixture(0);
    commit(&f, -1, "", 7, "").await;
    let retention = f.coord.config().offsets_retention_ms;
    f.clock.advance(retention - 1);
    f.coord.tick();
    assert_eq!(fetch(&f).0, 7);
    f.clock.advance(2);
    f.coord.tick();
    assert_eq!(fetch(&f).0, -1);
    assert!(f
        .coord
        .list_groups(ListGroupsRequest::default())
        .groups
        .is_empty());
}

#[tokio::test]
async fn delete_group_refuses_live_groups_and_forgets_empty_ones() {
    let f = fixture(0);
    let ra = join_new(&f, &["range"]).await.await.unwrap();
    let a_id = ra.member_id.to_string();
    sync(&f, &a_id, 1, &[(&a_id, "x")]).await;
    let del = |f: &Fixture| {
        f.coord
            .delete_groups(
                DeleteGroupsRequest::default()
                    .with_groups_names(vec![GroupId(s("g")), GroupId(s("none"))]),
            )
            .results
            .iter()
            .map(|r| r.error_code)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        del(&f),
        vec![
            ResponseError::NonEmptyGroup.code(),
            ResponseError::GroupIdNotFound.code()
        ]
    );
    f.coord.leave_group(
        LeaveGroupRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_members(vec![MemberIdentity::default().with_member_id(s(&a_id))]),
        4,
    );
    commit(&f, -1, "", 3, "").await;
    assert_eq!(del(&f)[0], 0);
    assert_eq!(fetch(&f).0, -1);
    // And the deletion is durable.
    let again = GroupCoordinator::new(
        f.coord.config().clone(),
        f.clock.clone(),
        f.store.clone(),
        Arc::new(Catalog),
    );
    assert_eq!(again.load().unwrap(), 0);
}

#[tokio::test]
async fn join_with_an_unknown_member_id_or_bad_timeout_is_refused() {
    let f = fixture(0);
    assert_eq!(
        join(&f.coord, join_req("made-up", None, &["range"]))
            .await
            .error_code,
        ResponseError::UnknownMemberId.code()
    );
    let bad = join_req("", None, &["range"]).with_session_timeout_ms(10);
    assert_eq!(
        join(&f.coord, bad).await.error_code,
        ResponseError::InvalidSessionTimeout.code()
    );
    let a = join_new(&f, &["range"]).await.await.unwrap();
    assert_eq!(a.error_code, 0);
    // A member whose protocols share nothing with the group's cannot join.
    let other = join_req("", None, &["sticky"]);
    assert_eq!(
        join(&f.coord, other).await.error_code,
        ResponseError::InconsistentGroupProtocol.code()
    );
}

#[tokio::test]
async fn static_leader_restart_keeps_the_generation() {
    let f = fixture(0);
    let coord = f.coord.clone();
    let leader =
        tokio::spawn(async move { join(&coord, join_req("", Some("lead"), &["range"])).await });
    let r = leader.await.unwrap();
    assert_eq!(r.generation_id, 1);
    let old = r.member_id.to_string();
    sync(&f, &old, 1, &[(&old, "A")]).await;
    // v9 rejoin of the static leader: same generation, member list, skip_assignment.
    let again = join(&f.coord, join_req("", Some("lead"), &["range"])).await;
    assert_eq!(again.error_code, 0);
    assert_eq!(again.generation_id, 1);
    assert!(again.skip_assignment);
    assert_eq!(again.leader, again.member_id);
    assert_eq!(again.members.len(), 1);
    let new = again.member_id.to_string();
    assert_eq!(sync(&f, &new, 1, &[]).await.assignment, Bytes::from("A"));
    // The same rejoin with JoinGroup v5 (before KIP-814): no rebalance and no member list, so
    // the leader keeps the assignment it has.
    let v5 = f
        .coord
        .join_group(join_req("", Some("lead"), &["range"]), 5, CLIENT)
        .await;
    assert_eq!(v5.generation_id, 1);
    assert!(v5.members.is_empty());
    let v5_id = v5.member_id.to_string();
    assert_eq!(sync(&f, &v5_id, 1, &[]).await.assignment, Bytes::from("A"));
}

#[tokio::test]
async fn a_member_id_handed_out_survives_the_coordinators_tick() {
    // KIP-394: the first JoinGroup of a new group only hands out an id; the group has no member
    // and no offsets yet, and the tick that forgets empty groups must not forget this one.
    let f = fixture(0);
    let first = join(&f.coord, join_req("", None, &["range"])).await;
    assert_eq!(first.error_code, ResponseError::MemberIdRequired.code());
    f.clock.advance(100);
    f.coord.tick();
    let id = first.member_id.to_string();
    let second = join(&f.coord, join_req(&id, None, &["range"])).await;
    assert_eq!(second.error_code, 0, "the handed-out id was forgotten");
    assert_eq!(second.member_id.as_str(), id);
}
