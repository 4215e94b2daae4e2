//! A follower's side of an incremental fetch session (KIP-227), as Kafka's
//! `FetchSessionHandler` keeps it: the first request lists every partition and opens a session;
//! later requests list only the partitions whose fetch state changed, plus the ones to forget,
//! and the leader answers only for partitions with news (records, a new high watermark or log
//! start offset, an error). The leader still treats every partition of the session as fetched.
//!
//! This matters most for the remote-WAL lane: its reports carry no records and cross racks, so
//! with many partitions a sessionless report (every partition, every time the log end of any of
//! them moved) would be most of the WAL path's cross-AZ bytes.

use std::collections::{BTreeMap, HashMap};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

/// Epoch of a request that opens a session (with session id 0).
const INITIAL_EPOCH: i32 = 0;

/// The partitions of one round, as the follower would fetch them in full.
pub type Wanted = Vec<(String, FetchPartition)>;

/// The part of a Fetch request the session decides.
#[derive(Debug, Default, PartialEq)]
pub struct SessionRequest {
    pub session_id: i32,
    pub session_epoch: i32,
    pub topics: Vec<FetchTopic>,
    pub forgotten: Vec<ForgottenTopic>,
}

#[derive(Debug, Default)]
pub struct FollowerSession {
    /// 0: no session (the next request is a full one that opens one).
    session_id: i32,
    next_epoch: i32,
    /// What the leader's session holds for each partition: the state last sent.
    sent: HashMap<(String, i32), FetchPartition>,
}

impl FollowerSession {
    /// Forgets the session (after a connection loss or a session error): the next request is full.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// The request for `wanted`: everything when no session is open, else what changed.
    pub fn request(&self, wanted: &Wanted) -> SessionRequest {
        let full = self.session_id == 0;
        let mut topics: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
        for (topic, p) in wanted {
            let unchanged = !full
                && self
                    .sent
                    .get(&(topic.clone(), p.partition))
                    .is_some_and(|s| s == p);
            if !unchanged {
                topics.entry(topic).or_default().push(p.clone());
            }
        }
        let mut forgotten: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        if !full {
            for (topic, partition) in self.sent.keys() {
                if !wanted
                    .iter()
                    .any(|(t, p)| t == topic && p.partition == *partition)
                {
                    forgotten.entry(topic).or_default().push(*partition);
                }
            }
        }
        SessionRequest {
            session_id: self.session_id,
            session_epoch: if full { INITIAL_EPOCH } else { self.next_epoch },
            topics: topics
                .into_iter()
                .map(|(name, partitions)| {
                    FetchTopic::default()
                        .with_topic(topic_name(name))
                        .with_partitions(partitions)
                })
                .collect(),
            forgotten: forgotten
                .into_iter()
                .map(|(name, mut partitions)| {
                    partitions.sort_unstable();
                    ForgottenTopic::default()
                        .with_topic(topic_name(name))
                        .with_partitions(partitions)
                })
                .collect(),
        }
    }

    /// The leader answered the request built from `wanted` with `error_code` and `session_id`.
    /// Returns true if the session was lost and the next request must be a full one.
    pub fn on_response(&mut self, wanted: &Wanted, error_code: i16, session_id: i32) -> bool {
        if error_code == ResponseError::FetchSessionIdNotFound.code()
            || error_code == ResponseError::InvalidFetchSessionEpoch.code()
        {
            self.reset();
            return true;
        }
        if error_code != 0 {
            // The request was not applied to the session: send the same again.
            return false;
        }
        if self.session_id == 0 {
            // A full request: the leader opened a session (or, with id 0, declined to).
            self.session_id = session_id;
            self.next_epoch = INITIAL_EPOCH;
        }
        if self.session_id != 0 {
            self.next_epoch = if self.next_epoch == i32::MAX {
                1
            } else {
                self.next_epoch + 1
            };
            self.sent = wanted
                .iter()
                .map(|(t, p)| ((t.clone(), p.partition), p.clone()))
                .collect();
        }
        false
    }
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(partition: i32, offset: i64) -> FetchPartition {
        FetchPartition::default()
            .with_partition(partition)
            .with_fetch_offset(offset)
    }

    fn listed(r: &SessionRequest) -> Vec<(String, i32, i64)> {
        r.topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.topic.to_string(), p.partition, p.fetch_offset))
            })
            .collect()
    }

    #[test]
    fn a_session_sends_only_what_changed_and_forgets_what_left() {
        let mut s = FollowerSession::default();
        let round1: Wanted = vec![("a".into(), part(0, 10)), ("a".into(), part(1, 20))];
        let r = s.request(&round1);
        assert_eq!((r.session_id, r.session_epoch), (0, 0));
        assert_eq!(listed(&r).len(), 2);
        assert!(!s.on_response(&round1, 0, 77));

        // Partition 1 moved, partition 0 did not, topic b is new.
        let round2: Wanted = vec![
            ("a".into(), part(0, 10)),
            ("a".into(), part(1, 25)),
            ("b".into(), part(0, 0)),
        ];
        let r = s.request(&round2);
        assert_eq!((r.session_id, r.session_epoch), (77, 1));
        assert_eq!(listed(&r), vec![("a".into(), 1, 25), ("b".into(), 0, 0)]);
        assert!(r.forgotten.is_empty());
        assert!(!s.on_response(&round2, 0, 77));

        // Nothing moved: an empty incremental request; a-0 left the lane: forgotten.
        let round3: Wanted = vec![("a".into(), part(1, 25)), ("b".into(), part(0, 0))];
        let r = s.request(&round3);
        assert_eq!(r.session_epoch, 2);
        assert!(r.topics.is_empty());
        assert_eq!(r.forgotten.len(), 1);
        assert_eq!(r.forgotten[0].partitions, vec![0]);
        assert_eq!(r.forgotten[0].topic.to_string(), "a");
    }

    #[test]
    fn a_session_error_falls_back_to_a_full_request() {
        let mut s = FollowerSession::default();
        let wanted: Wanted = vec![("a".into(), part(0, 10))];
        s.on_response(&wanted, 0, 5);
        assert_eq!(s.request(&wanted).session_epoch, 1);
        // A refused request leaves the session as it was.
        assert!(!s.on_response(&wanted, ResponseError::NotLeaderOrFollower.code(), 5));
        assert_eq!(s.request(&wanted).session_epoch, 1);
        assert!(s.on_response(&wanted, ResponseError::InvalidFetchSessionEpoch.code(), 0));
        let r = s.request(&wanted);
        assert_eq!((r.session_id, r.session_epoch), (0, 0));
        assert_eq!(listed(&r).len(), 1);
    }

    #[test]
    fn a_leader_that_declines_a_session_gets_full_requests() {
        let mut s = FollowerSession::default();
        let wanted: Wanted = vec![("a".into(), part(0, 10))];
        s.on_response(&wanted, 0, 0);
        let r = s.request(&wanted);
        assert_eq!((r.session_id, r.session_epoch), (0, 0));
        assert_eq!(listed(&r).len(), 1);
    }
}
