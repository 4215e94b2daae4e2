//! ElectLeaders through a [`MetadataStore`] on a local quorum: what is proposed, what each
//! partition answers, and null partitions meaning every partition.

use std::collections::BTreeMap;

use super::*;
use crate::election::{fence_broker, unfence_broker};
use crate::image::NO_LEADER;
use crate::metadata_store::{MetadataOptions, MetadataStore};

/// Brokers 1, 2, 3 (1 is this node), topic `t` with partitions on [1, 2, 3] and [2, 3, 1],
/// topic `u` with one partition on [3, 1, 2]; every preferred replica leads.
fn store() -> MetadataStore {
    let dir = std::env::temp_dir();
    let options = MetadataOptions {
        traffic: None,
        quorum_tls: None,
        node_id: 1,
        dir: dir.join("unused"),
        legacy_dir: dir.join("unused"),
        voters: BTreeMap::new(),
        rack: Some("az1".into()),
        host: "127.0.0.1".into(),
        port: 9092,
        endpoints: Vec::new(),
        unclean_leader_election: false,
        space_reserve: std::sync::Arc::new(ferry_common::SpaceReserve::none()),
    };
    let store = MetadataStore::local(&options).unwrap();
    for id in [2, 3] {
        store
            .propose(MetadataRecord::RegisterBroker {
                id,
                rack: Some(format!("az{id}")),
                host: "127.0.0.1".into(),
                port: 9092 + id as u16,
                endpoints: Vec::new(),
            })
            .unwrap();
        store.propose(MetadataRecord::UnfenceBroker { id }).unwrap();
    }
    store
        .create_topic_assigned("t", vec![vec![1, 2, 3], vec![2, 3, 1]], BTreeMap::new())
        .unwrap();
    store
        .create_topic_assigned("u", vec![vec![3, 1, 2]], BTreeMap::new())
        .unwrap();
    store
}

fn run(records: Vec<MetadataRecord>, store: &MetadataStore) {
    for r in records {
        store.propose(r).unwrap();
    }
}

fn fence(store: &MetadataStore, b: i32) {
    run(fence_broker(&store.image(), b, false), store);
}

/// Unfences `b` and has each partition's leader take it back into the ISR.
fn rejoin(store: &MetadataStore, b: i32) {
    run(unfence_broker(&store.image(), b, false), store);
    let image = store.image();
    let mut records = Vec::new();
    for t in image.topics.values() {
        for (i, p) in t.partitions.iter().enumerate() {
            if p.replicas.contains(&b) && !p.isr.contains(&b) && p.leader != NO_LEADER {
                let mut isr = p.isr.clone();
                isr.push(b);
                records.push(MetadataRecord::AlterPartition {
                    topic_id: t.id,
                    partition: i as i32,
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    isr,
                    partition_epoch: p.partition_epoch + 1,
                    unclean: false,
                });
            }
        }
    }
    run(records, store);
}

fn leader(store: &MetadataStore, topic: &str, p: i32) -> i32 {
    store.leader_of(topic, p).0
}

/// (topic, partition, refusal or None for elected), flattened.
fn outcomes(r: &[TopicElections]) -> Vec<(String, i32, Option<ElectionRefused>)> {
    r.iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let refused = match &p.result {
                    Ok(_) => None,
                    Err(ElectError::Refused(e)) => Some(*e),
                    Err(e) => panic!("{}-{}: {e}", t.topic, p.partition),
                };
                (t.topic.clone(), p.partition, refused)
            })
        })
        .collect()
}

#[tokio::test]
async fn preferred_election_of_named_partitions_answers_each_with_kafkas_code() {
    let store = store();
    fence(&store, 1);
    rejoin(&store, 1);
    assert_eq!(leader(&store, "t", 0), 2);
    assert_eq!(leader(&store, "u", 0), 3);

    let wanted = vec![
        ("t".to_string(), vec![0, 1, 7]),
        ("nope".to_string(), vec![0]),
    ];
    let r = store
        .elect_leaders(ElectionType::Preferred, Some(wanted))
        .await;
    assert_eq!(
        outcomes(&r),
        vec![
            ("t".into(), 0, None),
            ("t".into(), 1, Some(ElectionRefused::NotNeeded)),
            (
                "t".into(),
                7,
                Some(ElectionRefused::UnknownTopicOrPartition)
            ),
            (
                "nope".into(),
                0,
                Some(ElectionRefused::UnknownTopicOrPartition)
            ),
        ]
    );
    // Committed and applied before the call returned.
    assert_eq!(leader(&store, "t", 0), 1);
}

#[tokio::test]
async fn null_partitions_elect_every_partition_and_leave_out_those_not_needing_it() {
    let store = store();
    fence(&store, 2);
    fence(&store, 3);
    // Broker 2 is back in sync; broker 3 stays down.
    rejoin(&store, 2);
    assert_eq!(leader(&store, "t", 1), 1);
    let r = store.elect_leaders(ElectionType::Preferred, None).await;
    assert_eq!(
        outcomes(&r),
        vec![
            ("t".into(), 1, None),
            (
                "u".into(),
                0,
                Some(ElectionRefused::PreferredLeaderNotAvailable)
            ),
        ],
        "t-0 (led by its preferred replica already) is left out"
    );
    assert_eq!(leader(&store, "t", 1), 2);
    assert_eq!(leader(&store, "u", 0), 1);
    // Again: only the partition still refused is listed, but every topic is.
    let r = store.elect_leaders(ElectionType::Preferred, None).await;
    assert_eq!(
        r.iter().map(|t| t.topic.as_str()).collect::<Vec<_>>(),
        ["t", "u"]
    );
    assert_eq!(
        outcomes(&r),
        vec![(
            "u".into(),
            0,
            Some(ElectionRefused::PreferredLeaderNotAvailable)
        )]
    );
}

#[tokio::test]
async fn unclean_election_through_the_store_elects_an_out_of_sync_replica() {
    let store = store();
    fence(&store, 2);
    fence(&store, 3);
    fence(&store, 1);
    run(unfence_broker(&store.image(), 2, false), &store);
    assert_eq!(leader(&store, "t", 0), NO_LEADER);
    let wanted = vec![("t".to_string(), vec![0]), ("u".to_string(), vec![0])];
    let r = store
        .elect_leaders(ElectionType::Unclean, Some(wanted.clone()))
        .await;
    assert_eq!(
        outcomes(&r),
        vec![("t".into(), 0, None), ("u".into(), 0, None)]
    );
    let image = store.image();
    let t0 = image.topic("t").unwrap().partitions[0].clone();
    assert_eq!((t0.leader, t0.isr), (2, vec![2]));
    // Now they have a leader.
    let r = store
        .elect_leaders(ElectionType::Unclean, Some(wanted))
        .await;
    assert!(outcomes(&r)
        .iter()
        .all(|(_, _, e)| *e == Some(ElectionRefused::NotNeeded)));
}

#[tokio::test]
async fn unclean_election_without_a_live_replica_is_refused() {
    let store = store();
    // Broker 1 (this node) stays live; topic `v` lives on 2 and 3 only.
    store
        .create_topic_assigned("v", vec![vec![2, 3]], BTreeMap::new())
        .unwrap_or_else(|e| panic!("{e}"));
    fence(&store, 2);
    fence(&store, 3);
    let r = store
        .elect_leaders(ElectionType::Unclean, Some(vec![("v".into(), vec![0])]))
        .await;
    assert_eq!(
        outcomes(&r),
        vec![(
            "v".into(),
            0,
            Some(ElectionRefused::EligibleLeadersNotAvailable)
        )]
    );
}
