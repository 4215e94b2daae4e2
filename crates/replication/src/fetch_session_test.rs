use super::*;
use kafka_protocol::messages::fetch_request::{
    FetchPartition as ReqPartition, FetchTopic, ForgottenTopic,
};
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

fn request(
    session_id: i32,
    epoch: i32,
    parts: &[(&str, i32, i64)],
    forget: &[(&str, i32)],
) -> FetchRequest {
    let topics = parts
        .iter()
        .map(|(t, p, o)| {
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(t.to_string())))
                .with_partitions(vec![ReqPartition::default()
                    .with_partition(*p)
                    .with_fetch_offset(*o)])
        })
        .collect();
    let forgotten = forget
        .iter()
        .map(|(t, p)| {
            ForgottenTopic::default()
                .with_topic(TopicName(StrBytes::from_string(t.to_string())))
                .with_partitions(vec![*p])
        })
        .collect();
    FetchRequest::default()
        .with_session_id(session_id)
        .with_session_epoch(epoch)
        .with_topics(topics)
        .with_forgotten_topics_data(forgotten)
}

fn outcome(hw: i64, records: bool) -> PartitionOutcome {
    PartitionOutcome {
        has_records: records,
        redirected: false,
        error_code: 0,
        diverging: false,
        high_watermark: hw,
        log_start_offset: 0,
    }
}

#[test]
fn full_then_incremental_carries_only_changes() {
    let cache = FetchSessionCache::default();
    let (mode, parts) = cache
        .begin(&request(0, 0, &[("a", 0, 0), ("a", 1, 0)], &[]), 12)
        .unwrap();
    let SessionMode::Full { session_id } = mode else {
        panic!("{mode:?}")
    };
    assert_eq!(parts.len(), 2);
    let keys: Vec<_> = parts.iter().map(|p| p.key.clone()).collect();
    let include = cache.finish(
        mode,
        &[
            (keys[0].clone(), outcome(5, true)),
            (keys[1].clone(), outcome(0, false)),
        ],
    );
    assert_eq!(include, vec![true, true]);

    // Incremental: nothing in the request, both partitions still fetched.
    let (mode, parts) = cache.begin(&request(session_id, 1, &[], &[]), 12).unwrap();
    assert_eq!(mode, SessionMode::Incremental { session_id });
    assert_eq!(parts.len(), 2);
    // Only partition 1's high watermark moved.
    let include = cache.finish(
        mode,
        &[
            (keys[0].clone(), outcome(5, false)),
            (keys[1].clone(), outcome(3, false)),
        ],
    );
    assert_eq!(include, vec![false, true]);

    // Forget partition 0.
    let (_, parts) = cache
        .begin(&request(session_id, 2, &[], &[("a", 0)]), 12)
        .unwrap();
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].key.partition, 1);
}

#[test]
fn wrong_epoch_and_unknown_session_are_refused_without_changing_the_session() {
    let cache = FetchSessionCache::default();
    let (mode, _) = cache
        .begin(&request(0, 0, &[("a", 0, 0)], &[]), 12)
        .unwrap();
    let SessionMode::Full { session_id } = mode else {
        panic!()
    };
    assert_eq!(
        cache
            .begin(&request(session_id, 5, &[], &[]), 12)
            .unwrap_err(),
        ResponseError::InvalidFetchSessionEpoch
    );
    assert_eq!(
        cache
            .begin(&request(session_id + 100, 1, &[], &[]), 12)
            .unwrap_err(),
        ResponseError::FetchSessionIdNotFound
    );
    // Epoch 1 is still the expected one.
    assert!(cache.begin(&request(session_id, 1, &[], &[]), 12).is_ok());
}

#[test]
fn final_epoch_closes_and_old_versions_are_sessionless() {
    let cache = FetchSessionCache::default();
    let (mode, _) = cache
        .begin(&request(0, 0, &[("a", 0, 0)], &[]), 12)
        .unwrap();
    let SessionMode::Full { session_id } = mode else {
        panic!()
    };
    assert_eq!(cache.len(), 1);
    let (mode, _) = cache
        .begin(&request(session_id, -1, &[("a", 0, 0)], &[]), 12)
        .unwrap();
    assert_eq!(mode, SessionMode::Sessionless);
    assert!(cache.is_empty());
    let (mode, _) = cache.begin(&request(0, 0, &[("a", 0, 0)], &[]), 6).unwrap();
    assert_eq!(mode, SessionMode::Sessionless);
}

/// KIP-392: a redirect to another replica is news even when nothing else changed.
#[test]
fn incremental_response_always_carries_a_preferred_read_replica() {
    let cache = FetchSessionCache::default();
    let (mode, parts) = cache
        .begin(&request(0, 0, &[("a", 0, 0)], &[]), 12)
        .unwrap();
    let SessionMode::Full { session_id } = mode else {
        panic!("{mode:?}")
    };
    let key = parts[0].key.clone();
    cache.finish(mode, &[(key.clone(), outcome(5, false))]);
    let (mode, _) = cache.begin(&request(session_id, 1, &[], &[]), 12).unwrap();
    let redirected = PartitionOutcome {
        redirected: true,
        ..outcome(5, false)
    };
    assert_eq!(cache.finish(mode, &[(key, redirected)]), vec![true]);
}

/// KIP-320: a diverging epoch is news: a follower whose epoch changed must learn to truncate
/// even when the high watermark and log start offset did not move.
#[test]
fn incremental_response_always_carries_a_diverging_epoch() {
    let cache = FetchSessionCache::default();
    let (mode, parts) = cache
        .begin(&request(0, 0, &[("a", 0, 0)], &[]), 12)
        .unwrap();
    let SessionMode::Full { session_id } = mode else {
        panic!("{mode:?}")
    };
    let key = parts[0].key.clone();
    cache.finish(mode, &[(key.clone(), outcome(5, false))]);
    let (mode, _) = cache.begin(&request(session_id, 1, &[], &[]), 12).unwrap();
    assert_eq!(
        cache.finish(mode, &[(key.clone(), outcome(5, false))]),
        vec![false]
    );
    let (mode, _) = cache.begin(&request(session_id, 2, &[], &[]), 12).unwrap();
    let diverging = PartitionOutcome {
        diverging: true,
        ..outcome(5, false)
    };
    assert_eq!(cache.finish(mode, &[(key, diverging)]), vec![true]);
}
