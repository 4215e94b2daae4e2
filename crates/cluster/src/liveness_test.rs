use std::collections::BTreeSet;
use std::time::Duration;

use crate::{BrokerHeartbeat, HeartbeatError, Image, MetadataRecord};
use tokio::time::Instant;
use uuid::Uuid;

use super::*;

const TIMEOUT: Duration = Duration::from_secs(3);

/// Three live brokers (epochs 1..=3) and topic `t` with `parts` partitions on replicas
/// rotated so each broker is the preferred leader of some.
fn image(parts: usize) -> Image {
    let mut img = Image::default();
    for id in 1..=3 {
        img.apply(&MetadataRecord::RegisterBroker {
            id,
            rack: None,
            host: "h".into(),
            port: 1,
            endpoints: Vec::new(),
        })
        .unwrap();
        img.apply(&MetadataRecord::UnfenceBroker { id }).unwrap();
    }
    let assignments = (0..parts)
        .map(|p| (0..3).map(|r| ((p + r) % 3) as i32 + 1).collect())
        .collect();
    img.apply(&MetadataRecord::CreateTopic {
        name: "t".into(),
        id: Uuid::from_u128(7),
        configs: Default::default(),
        assignments,
    })
    .unwrap();
    img
}

fn hb(id: i32, epoch: i64, want_shutdown: bool) -> BrokerHeartbeat {
    BrokerHeartbeat {
        broker_id: id,
        broker_epoch: epoch,
        current_metadata_offset: 0,
        want_fence: false,
        want_shutdown,
        offline_replicas: Vec::new(),
    }
}

/// Applies what `action` proposes against `img`.
fn act(img: &mut Image, action: Action) {
    for r in records_for(img, &action, false) {
        img.apply(&r).unwrap();
    }
}

fn apply_all(img: &mut Image, records: Vec<MetadataRecord>) {
    for r in records {
        img.apply(&r).unwrap();
    }
}

#[test]
fn a_silent_broker_expires_after_the_session_timeout_and_heartbeats_keep_others_alive() {
    let img = image(3);
    let t0 = Instant::now();
    let mut s = Sessions::new(TIMEOUT);
    s.reset(&img, t0);
    assert!(s.expired(&img, t0 + Duration::from_secs(2)).is_empty());
    for id in [1, 2] {
        let out = s.heartbeat(&img, &hb(id, id as i64, false), t0 + Duration::from_secs(2));
        assert!(!out.reply.unwrap().is_fenced);
        assert_eq!(out.action, None);
    }
    assert_eq!(s.expired(&img, t0 + Duration::from_secs(4)), vec![3]);
    // Reported again only after the retry delay, not on every tick.
    assert!(s.expired(&img, t0 + Duration::from_millis(4100)).is_empty());
    assert_eq!(s.expired(&img, t0 + Duration::from_secs(6)), vec![1, 2, 3]);
}

#[test]
fn a_stale_incarnation_is_refused_and_does_not_extend_the_session() {
    let mut img = image(1);
    img.apply(&MetadataRecord::RegisterBroker {
        id: 2,
        rack: None,
        host: "h".into(),
        port: 1,
        endpoints: Vec::new(),
    })
    .unwrap();
    img.apply(&MetadataRecord::UnfenceBroker { id: 2 }).unwrap();
    let current = img.brokers[&2].epoch;
    let t0 = Instant::now();
    let mut s = Sessions::new(TIMEOUT);
    s.reset(&img, t0);
    let out = s.heartbeat(&img, &hb(2, 2, false), t0 + Duration::from_secs(2));
    assert_eq!(
        out.reply,
        Err(HeartbeatError::StaleBrokerEpoch { current, got: 2 })
    );
    assert!(s.expired(&img, t0 + Duration::from_secs(4)).contains(&2));
    let out = s.heartbeat(&img, &hb(9, 1, false), t0);
    assert_eq!(out.reply, Err(HeartbeatError::NotRegistered(9)));
}

#[test]
fn fencing_moves_leaders_and_a_returning_broker_is_unfenced_once_caught_up() {
    let mut img = image(3);
    let t0 = Instant::now();
    act(&mut img, Action::Fence(1));
    assert!(!img.is_live(1));
    assert!(img.topics["t"]
        .partitions
        .iter()
        .all(|p| p.leader != 1 && !p.isr.contains(&1)));
    // Done: nothing left to propose.
    assert!(records_for(&img, &Action::Fence(1), false).is_empty());
    img.applied_index = 40;

    let mut s = Sessions::new(TIMEOUT);
    s.reset(&img, t0);
    let mut req = hb(1, 1, false);
    req.current_metadata_offset = 39;
    let out = s.heartbeat(&img, &req, t0);
    let reply = out.reply.unwrap();
    assert!(reply.is_fenced && !reply.is_caught_up);
    assert_eq!(out.action, None);
    req.current_metadata_offset = 40;
    let out = s.heartbeat(&img, &req, t0);
    assert!(out.reply.unwrap().is_caught_up);
    assert_eq!(out.action, Some(Action::Unfence(1)));
    act(&mut img, Action::Unfence(1));
    assert!(img.is_live(1));
}

#[test]
fn controlled_shutdown_moves_leaders_then_says_shut_down_and_fences() {
    let mut img = image(3);
    let t0 = Instant::now();
    let mut s = Sessions::new(TIMEOUT);
    s.reset(&img, t0);
    assert!(leads_movable(&img, 1));
    let out = s.heartbeat(&img, &hb(1, 1, true), t0);
    assert!(!out.reply.unwrap().should_shut_down);
    assert_eq!(out.action, Some(Action::ControlledShutdown(1)));
    assert_eq!(s.shutting_down(), BTreeSet::from([1]));
    act(&mut img, Action::ControlledShutdown(1));
    assert_eq!(led_partitions(&img, 1), 0);
    assert!(img.is_live(1));

    // A later heartbeat without the flag does not cancel the shutdown.
    let out = s.heartbeat(&img, &hb(1, 1, false), t0);
    assert!(out.reply.unwrap().should_shut_down);
    assert!(out.shutdown_completed);
    assert_eq!(out.action, Some(Action::Fence(1)));
    let out = s.heartbeat(&img, &hb(1, 1, true), t0);
    assert!(!out.shutdown_completed, "counted once");
    // No preferred leadership goes back to a broker that is shutting down.
    assert!(rebalance_records(&img, 0, &s.shutting_down()).is_empty());
}

#[test]
fn a_broker_that_is_the_only_in_sync_replica_may_shut_down_still_leading() {
    let mut img = image(1);
    let p = img.topics["t"].partitions[0].clone();
    img.apply(&MetadataRecord::AlterPartition {
        topic_id: Uuid::from_u128(7),
        partition: 0,
        leader: 1,
        leader_epoch: p.leader_epoch,
        isr: vec![1],
        partition_epoch: p.partition_epoch + 1,
        unclean: false,
    })
    .unwrap();
    assert!(!leads_movable(&img, 1));
    let mut s = Sessions::new(TIMEOUT);
    let out = s.heartbeat(&img, &hb(1, 1, true), Instant::now());
    assert!(out.reply.unwrap().should_shut_down);
}

#[test]
fn a_new_controller_gives_every_broker_a_full_session() {
    let img = image(1);
    let t0 = Instant::now();
    let mut s = Sessions::new(TIMEOUT);
    s.reset(&img, t0);
    assert!(s.expired(&img, t0 + Duration::from_secs(2)).is_empty());
    s.clear();
    // Taking over later: the clock starts again.
    s.reset(&img, t0 + Duration::from_secs(2));
    assert!(s.expired(&img, t0 + Duration::from_secs(4)).is_empty());
    assert_eq!(s.expired(&img, t0 + Duration::from_secs(5)).len(), 3);
}

#[test]
fn preferred_leaders_return_only_for_brokers_over_the_imbalance_ratio() {
    let mut img = image(3);
    act(&mut img, Action::Fence(1));
    act(&mut img, Action::Unfence(1));
    assert_eq!(led_partitions(&img, 1), 0);
    // Not back in the ISR yet: not eligible.
    assert!(rebalance_records(&img, 0, &BTreeSet::new()).is_empty());
    for partition in 0..3 {
        let p = img.topics["t"].partitions[partition].clone();
        let change = election::AlterIsrRequest {
            topic_id: Uuid::from_u128(7),
            partition: partition as i32,
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: [p.isr.clone(), vec![1]].concat(),
        };
        let record = election::alter_isr(&img, &change).unwrap();
        img.apply(&record).unwrap();
    }
    // Broker 1 is preferred for partition 0 only, led elsewhere: 100 % imbalance.
    assert!(rebalance_records(&img, 100, &BTreeSet::new()).is_empty());
    let records = rebalance_records(&img, 10, &BTreeSet::new());
    assert_eq!(records.len(), 1);
    apply_all(&mut img, records);
    assert_eq!(img.topics["t"].partitions[0].leader, 1);
    assert!(rebalance_records(&img, 10, &BTreeSet::new()).is_empty());
}

#[test]
fn offline_replicas_leave_the_isr_and_their_leadership_moves_while_the_broker_stays_live() {
    let mut img = image(3);
    let t0 = Instant::now();
    let id = Uuid::from_u128(7);
    let offline = |partitions: &[i32]| -> Vec<crate::OfflineReplica> {
        partitions
            .iter()
            .map(|&partition| crate::OfflineReplica {
                topic_id: id,
                partition,
            })
            .collect()
    };
    let mut s = Sessions::new(TIMEOUT);
    s.reset(&img, t0);
    // Broker 1 leads partition 0 and follows partition 1; both were on its failed dir.
    let mut req = hb(1, 1, false);
    req.offline_replicas = offline(&[0, 1]);
    let out = s.heartbeat(&img, &req, t0);
    assert!(!out.reply.unwrap().is_fenced);
    let action = out.action.unwrap();
    assert!(matches!(&action, Action::OfflineReplicas(1, set) if set.len() == 2));
    act(&mut img, action.clone());
    let parts = &img.topics["t"].partitions;
    assert_eq!((parts[0].leader, parts[0].isr.clone()), (2, vec![2, 3]));
    assert_eq!(parts[1].leader, 2);
    assert!(!parts[1].isr.contains(&1));
    // Its third replica is healthy and untouched; the broker stays live.
    assert!(parts[2].isr.contains(&1));
    assert!(img.is_live(1));
    // The image records them, for Metadata's offline replicas.
    assert!(img.is_offline_replica(1, id, 0) && img.is_offline_replica(1, id, 1));
    assert!(!img.is_offline_replica(1, id, 2));
    // The next heartbeats repeat the report: nothing more to propose, and the rounds that
    // unfence and reconcile do not hand the leadership back.
    assert!(records_for(&img, &action, false).is_empty());
    assert!(records_for(&img, &Action::Unfence(1), false).is_empty());
    // Without another in-sync replica the partition is left as it is (no flapping leader).
    act(&mut img, Action::Fence(2));
    act(&mut img, Action::Fence(3));
    assert_eq!(img.topics["t"].partitions[2].isr, vec![1]);
    let sole = Action::OfflineReplicas(1, offline(&[2]).into_iter().collect());
    assert!(records_for(&img, &sole, false)
        .iter()
        .all(|r| matches!(r, MetadataRecord::MarkReplicasOffline { .. })));

    // A restart (a new registration) starts with no offline replica.
    img.apply(&MetadataRecord::RegisterBroker {
        id: 1,
        rack: None,
        host: "h".into(),
        port: 1,
        endpoints: Vec::new(),
    })
    .unwrap();
    assert!(!img.is_offline_replica(1, id, 0));
    // A report of the previous incarnation is refused.
    let stale = MetadataRecord::MarkReplicasOffline {
        id: 1,
        broker_epoch: 1,
        replicas: offline(&[0]),
    };
    assert!(img.apply(&stale).is_err());
}
