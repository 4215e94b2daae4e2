//! Incremental fetch sessions (KIP-227), as the Java consumer and followers use them.
//!
//! A client opens a session with a full fetch (session id 0, epoch 0); the broker answers with
//! a session id. Later requests carry only the partitions that changed (and the ones to forget),
//! with the epoch incremented each time, and the response carries only partitions with records
//! or with a changed high watermark, log start offset or error. Invariants: a session's epoch
//! advances by exactly one per accepted request; a wrong epoch answers
//! INVALID_FETCH_SESSION_EPOCH and an unknown id FETCH_SESSION_ID_NOT_FOUND, and neither
//! changes the session.

use std::collections::HashMap;
use std::sync::Mutex;

use indexmap::IndexMap;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::FetchRequest;
use uuid::Uuid;

const INITIAL_EPOCH: i32 = 0;
const FINAL_EPOCH: i32 = -1;
const MAX_SESSIONS: usize = 1000;

/// A partition in a fetch, keyed as the client names it: by topic id (v13+) or by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartKey {
    pub topic_id: Uuid,
    pub topic: String,
    pub partition: i32,
}

/// What the client asked for one partition, plus what it was last told.
#[derive(Debug, Clone)]
pub struct FetchPartition {
    pub key: PartKey,
    pub fetch_offset: i64,
    pub max_bytes: i32,
    pub current_leader_epoch: i32,
    pub last_fetched_epoch: i32,
    reported_high_watermark: i64,
    reported_log_start_offset: i64,
}

/// What was found for one partition, to decide whether an incremental response includes it.
#[derive(Debug, Clone, Copy)]
pub struct PartitionOutcome {
    pub has_records: bool,
    /// The leader points the client at another replica (KIP-392): always part of the response.
    pub redirected: bool,
    pub error_code: i16,
    /// A diverging epoch (KIP-320) for the follower: always part of the response, or a
    /// follower whose fetch state changed would never learn to truncate.
    pub diverging: bool,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

#[derive(Debug)]
struct Session {
    epoch: i32,
    partitions: IndexMap<PartKey, FetchPartition>,
    last_used: u64,
}

/// How this request relates to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionMode {
    /// No session: full request, full response, session id 0.
    Sessionless,
    /// A new session: full request and response; the response carries its id (0 if none).
    Full { session_id: i32 },
    /// An existing session: incremental request and response.
    Incremental { session_id: i32 },
}

#[derive(Default)]
pub struct FetchSessionCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    sessions: HashMap<i32, Session>,
    next_id: i32,
    tick: u64,
}

impl FetchSessionCache {
    /// Works out the session and the full set of partitions this request fetches.
    pub fn begin(
        &self,
        request: &FetchRequest,
        version: i16,
    ) -> Result<(SessionMode, Vec<FetchPartition>), ResponseError> {
        let requested = requested_partitions(request, version);
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.tick += 1;
        let tick = inner.tick;
        let (id, epoch) = (request.session_id, request.session_epoch);
        if version < 7 {
            return Ok((SessionMode::Sessionless, requested));
        }
        if epoch == FINAL_EPOCH {
            if id != 0 {
                inner.sessions.remove(&id);
            }
            return Ok((SessionMode::Sessionless, requested));
        }
        if epoch == INITIAL_EPOCH {
            if id != 0 {
                inner.sessions.remove(&id);
            }
            if inner.sessions.len() >= MAX_SESSIONS {
                if let Some(oldest) = inner
                    .sessions
                    .iter()
                    .min_by_key(|(_, s)| s.last_used)
                    .map(|(k, _)| *k)
                {
                    inner.sessions.remove(&oldest);
                }
            }
            let session_id = loop {
                inner.next_id = inner.next_id.wrapping_add(1).max(1);
                let candidate = inner.next_id;
                if !inner.sessions.contains_key(&candidate) {
                    break candidate;
                }
            };
            let partitions = requested
                .iter()
                .map(|p| (p.key.clone(), p.clone()))
                .collect();
            inner.sessions.insert(
                session_id,
                Session {
                    epoch: 1,
                    partitions,
                    last_used: tick,
                },
            );
            return Ok((SessionMode::Full { session_id }, requested));
        }
        if id == 0 {
            return Err(ResponseError::InvalidFetchSessionEpoch);
        }
        let session = inner
            .sessions
            .get_mut(&id)
            .ok_or(ResponseError::FetchSessionIdNotFound)?;
        if session.epoch != epoch {
            return Err(ResponseError::InvalidFetchSessionEpoch);
        }
        session.epoch = session.epoch.wrapping_add(1).max(1);
        session.last_used = tick;
        for p in requested {
            match session.partitions.get_mut(&p.key) {
                Some(existing) => {
                    existing.fetch_offset = p.fetch_offset;
                    existing.max_bytes = p.max_bytes;
                    existing.current_leader_epoch = p.current_leader_epoch;
                    existing.last_fetched_epoch = p.last_fetched_epoch;
                }
                None => {
                    session.partitions.insert(p.key.clone(), p);
                }
            }
        }
        for forgotten in &request.forgotten_topics_data {
            for &partition in &forgotten.partitions {
                let key = PartKey {
                    topic_id: if version >= 13 {
                        forgotten.topic_id
                    } else {
                        Uuid::nil()
                    },
                    topic: if version >= 13 {
                        String::new()
                    } else {
                        forgotten.topic.to_string()
                    },
                    partition,
                };
                session.partitions.shift_remove(&key);
            }
        }
        let all = session.partitions.values().cloned().collect();
        Ok((SessionMode::Incremental { session_id: id }, all))
    }

    /// Records what the response told the client and returns, for an incremental session,
    /// whether each partition belongs in the response.
    pub fn finish(&self, mode: SessionMode, outcomes: &[(PartKey, PartitionOutcome)]) -> Vec<bool> {
        let session_id = match mode {
            SessionMode::Sessionless => return vec![true; outcomes.len()],
            SessionMode::Full { session_id } | SessionMode::Incremental { session_id } => {
                session_id
            }
        };
        let incremental = matches!(mode, SessionMode::Incremental { .. });
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let Some(session) = inner.sessions.get_mut(&session_id) else {
            return vec![true; outcomes.len()];
        };
        outcomes
            .iter()
            .map(|(key, o)| {
                let Some(p) = session.partitions.get_mut(key) else {
                    return true;
                };
                let changed = o.has_records
                    || o.redirected
                    || o.error_code != 0
                    || o.diverging
                    || p.reported_high_watermark != o.high_watermark
                    || p.reported_log_start_offset != o.log_start_offset;
                p.reported_high_watermark = o.high_watermark;
                p.reported_log_start_offset = o.log_start_offset;
                !incremental || changed
            })
            .collect()
    }

    /// Drops a deleted topic from every session.
    pub fn forget_topic(&self, topic: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for s in inner.sessions.values_mut() {
            s.partitions.retain(|k, _| k.topic != topic);
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map(|i| i.sessions.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn requested_partitions(request: &FetchRequest, version: i16) -> Vec<FetchPartition> {
    let mut out = Vec::new();
    for t in &request.topics {
        for p in &t.partitions {
            out.push(FetchPartition {
                key: PartKey {
                    topic_id: if version >= 13 {
                        t.topic_id
                    } else {
                        Uuid::nil()
                    },
                    topic: if version >= 13 {
                        String::new()
                    } else {
                        t.topic.to_string()
                    },
                    partition: p.partition,
                },
                fetch_offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes,
                current_leader_epoch: p.current_leader_epoch,
                last_fetched_epoch: p.last_fetched_epoch,
                reported_high_watermark: -1,
                reported_log_start_offset: -1,
            });
        }
    }
    out
}

#[cfg(test)]
#[path = "fetch_session_test.rs"]
mod tests;
