//! One segment in the tier, and its record in the internal topic `__remote_log_metadata`.
//!
//! Kafka's topic-based `RemoteLogMetadataManager` appends a full record when a copy starts and
//! small update records for each later state. ferry's topic is compacted instead, keyed by
//! (topic id, partition, segment id): every state change writes the segment's whole metadata
//! again, so the latest record of a key is all a reader needs, and the tombstone written once
//! the segment's objects are deleted (`DELETE_SEGMENT_FINISHED`) removes the key. The topic
//! therefore holds one record per segment in the tier, whatever its history.
//!
//! Key and value are `prost` messages (hand-written structs, no build step) framed as `varint
//! length ++ message`, as the remote WAL's metadata records are: decoding checks the frame length
//! exactly, refuses oversized records and validates what readers rely on; unknown fields are
//! skipped, so a newer broker may add fields.

use bytes::Bytes;
use prost::Message;
use uuid::Uuid;

use crate::error::{Result, TierError};

/// Name of the internal topic these records live in (Kafka's name).
pub const METADATA_TOPIC: &str = "__remote_log_metadata";
/// Largest encoded key accepted.
pub const MAX_KEY_LEN: usize = 64;
/// Largest encoded value accepted: leaves room for thousands of leader epochs in one segment.
pub const MAX_VALUE_LEN: usize = 64 * 1024;

/// Kafka's `RemoteLogSegmentState`, with its wire ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RemoteSegmentState {
    /// The copy began; the segment's objects may be incomplete. Not served.
    CopyStarted,
    /// Every object of the segment is in the store. Served.
    CopyFinished,
    /// Retention (or a topic deletion) began deleting the objects. No longer served.
    DeleteStarted,
    /// The objects are gone; written as the key's tombstone.
    DeleteFinished,
}

impl RemoteSegmentState {
    pub fn id(self) -> u8 {
        match self {
            Self::CopyStarted => 0,
            Self::CopyFinished => 1,
            Self::DeleteStarted => 2,
            Self::DeleteFinished => 3,
        }
    }

    pub fn from_id(id: u32) -> Option<Self> {
        match id {
            0 => Some(Self::CopyStarted),
            1 => Some(Self::CopyFinished),
            2 => Some(Self::DeleteStarted),
            3 => Some(Self::DeleteFinished),
            _ => None,
        }
    }

    /// Kafka's `RemoteLogSegmentState.isValidTransition`: a segment is first seen as
    /// `CopyStarted`; a repeated state is accepted (a retry or a new leader writing it again); a
    /// failed copy may be deleted without finishing.
    pub fn may_follow(from: Option<Self>, to: Self) -> bool {
        use RemoteSegmentState::*;
        match from {
            None => to == CopyStarted,
            Some(from) if from == to => true,
            Some(CopyStarted) => matches!(to, CopyFinished | DeleteStarted),
            Some(CopyFinished) => to == DeleteStarted,
            Some(DeleteStarted) => to == DeleteFinished,
            Some(DeleteFinished) => false,
        }
    }
}

/// Identity of one copy of one segment: the compaction key. A new copy of the same offsets (a
/// retry after a failed copy, a new leader) gets a new `segment_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RemoteSegmentKey {
    pub topic_id: Uuid,
    pub partition: i32,
    pub segment_id: Uuid,
}

/// Kafka's `RemoteLogSegmentMetadata`: one closed segment of one partition in the tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSegmentMetadata {
    pub topic_id: Uuid,
    pub partition: i32,
    pub segment_id: Uuid,
    /// First offset of the segment (its base offset).
    pub start_offset: i64,
    /// Last offset of the segment, inclusive.
    pub end_offset: i64,
    /// Largest record timestamp in the segment (retention by time uses it).
    pub max_timestamp_ms: i64,
    /// The broker that copied it.
    pub broker_id: i32,
    /// When this state was reached, on the writer's clock (ms since the Unix epoch).
    pub event_time_ms: i64,
    /// Size of the segment's `.log` object in bytes.
    pub size_bytes: u64,
    /// The leader epochs of the segment's batches: (epoch, first offset of that epoch in this
    /// segment), epochs and offsets increasing, the first offset equal to `start_offset`.
    pub leader_epochs: Vec<(i32, i64)>,
    /// Whether the segment had aborted transactions (a `.txnindex` object exists).
    pub has_txn_index: bool,
    /// Whether a producer snapshot was copied with it.
    pub has_producer_snapshot: bool,
    pub state: RemoteSegmentState,
}

impl RemoteSegmentMetadata {
    pub fn key(&self) -> RemoteSegmentKey {
        RemoteSegmentKey {
            topic_id: self.topic_id,
            partition: self.partition,
            segment_id: self.segment_id,
        }
    }

    /// The same segment in another state, at `event_time_ms`.
    pub fn with_state(&self, state: RemoteSegmentState, event_time_ms: i64) -> Self {
        Self {
            state,
            event_time_ms,
            ..self.clone()
        }
    }

    /// Whether `offset` falls inside the segment.
    pub fn contains(&self, offset: i64) -> bool {
        self.start_offset <= offset && offset <= self.end_offset
    }

    /// The leader epoch of the batch holding `offset`, if the segment holds it.
    pub fn epoch_of(&self, offset: i64) -> Option<i32> {
        if !self.contains(offset) {
            return None;
        }
        self.leader_epochs
            .iter()
            .take_while(|(_, start)| *start <= offset)
            .last()
            .map(|(epoch, _)| *epoch)
    }

    /// The largest leader epoch of the segment.
    pub fn last_epoch(&self) -> Option<i32> {
        self.leader_epochs.last().map(|(epoch, _)| *epoch)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        if self.segment_id.is_nil() {
            return Err("a nil segment id (the partition's own key)".into());
        }
        if self.partition < 0 {
            return Err(format!("partition {}", self.partition));
        }
        if self.start_offset < 0 || self.end_offset < self.start_offset {
            return Err(format!(
                "offsets {}..={} are not a range",
                self.start_offset, self.end_offset
            ));
        }
        let Some(&(_, first)) = self.leader_epochs.first() else {
            return Err("no leader epochs".into());
        };
        if first != self.start_offset {
            return Err(format!(
                "leader epochs start at {first}, the segment at {}",
                self.start_offset
            ));
        }
        let increasing = self
            .leader_epochs
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1);
        let inside = self
            .leader_epochs
            .iter()
            .all(|&(epoch, offset)| epoch >= 0 && offset <= self.end_offset);
        if !increasing || !inside {
            return Err(format!(
                "leader epochs {:?} do not increase inside {}..={}",
                self.leader_epochs, self.start_offset, self.end_offset
            ));
        }
        Ok(())
    }
}

/// One decoded record of the metadata topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TierMetadataEvent {
    /// A segment reached a state (its whole metadata).
    Update(RemoteSegmentMetadata),
    /// The segment's objects are deleted (`DELETE_SEGMENT_FINISHED`): forget the key.
    Tombstone(RemoteSegmentKey),
    /// The partition's log start offset moved (DeleteRecords): nothing below it is served, and
    /// segments wholly below it are deleted. Keyed by the partition (the nil segment id), so
    /// compaction keeps the latest.
    LogStart {
        topic_id: Uuid,
        partition: i32,
        offset: i64,
    },
}

/// A record ready for the metadata topic: key bytes and value bytes (`None` = tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierMetadataRecord {
    pub key: Bytes,
    pub value: Option<Bytes>,
}

impl TierMetadataRecord {
    /// The record announcing `meta` in its state; `DeleteFinished` is written as the tombstone.
    pub fn of(meta: &RemoteSegmentMetadata) -> Result<Self> {
        let key = encode_key(&meta.key())?;
        if meta.state == RemoteSegmentState::DeleteFinished {
            return Ok(Self { key, value: None });
        }
        Ok(Self {
            key,
            value: Some(encode_value(meta)?),
        })
    }

    /// The record that moves a partition's log start offset to `offset`.
    pub fn log_start(topic_id: Uuid, partition: i32, offset: i64) -> Result<Self> {
        let key = encode_key(&RemoteSegmentKey {
            topic_id,
            partition,
            segment_id: Uuid::nil(),
        })?;
        let value = frame(
            &LogStartProto {
                topic_id: topic_id.as_bytes().to_vec(),
                partition,
                log_start_offset: offset,
            },
            "value",
            MAX_VALUE_LEN,
        )?;
        Ok(Self {
            key,
            value: Some(value),
        })
    }

    /// Decodes a record; the value's identity must agree with the key.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<TierMetadataEvent> {
        let k = decode_key(key)?;
        if k.segment_id.is_nil() {
            let Some(value) = value else {
                return Err(bad("value", "a partition's log start without a value"));
            };
            let p: LogStartProto = unframe(value, "value", MAX_VALUE_LEN)?;
            if uuid(&p.topic_id, "value")? != k.topic_id || p.partition != k.partition {
                return Err(bad("value", "a log start under another partition's key"));
            }
            if p.log_start_offset < 0 {
                return Err(bad("value", format!("log start {}", p.log_start_offset)));
            }
            return Ok(TierMetadataEvent::LogStart {
                topic_id: k.topic_id,
                partition: k.partition,
                offset: p.log_start_offset,
            });
        }
        let Some(value) = value else {
            return Ok(TierMetadataEvent::Tombstone(k));
        };
        let v = decode_value(value)?;
        if v.key() != k {
            return Err(bad(
                "value",
                format!("value describes {:?} but the key is {k:?}", v.key()),
            ));
        }
        Ok(TierMetadataEvent::Update(v))
    }
}

#[derive(Clone, PartialEq, prost::Message)]
struct KeyProto {
    #[prost(bytes = "vec", tag = "1")]
    topic_id: Vec<u8>,
    #[prost(int32, tag = "2")]
    partition: i32,
    #[prost(bytes = "vec", tag = "3")]
    segment_id: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LogStartProto {
    #[prost(bytes = "vec", tag = "1")]
    topic_id: Vec<u8>,
    #[prost(int32, tag = "2")]
    partition: i32,
    #[prost(int64, tag = "3")]
    log_start_offset: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct EpochProto {
    #[prost(int32, tag = "1")]
    epoch: i32,
    #[prost(int64, tag = "2")]
    start_offset: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ValueProto {
    #[prost(bytes = "vec", tag = "1")]
    topic_id: Vec<u8>,
    #[prost(int32, tag = "2")]
    partition: i32,
    #[prost(bytes = "vec", tag = "3")]
    segment_id: Vec<u8>,
    #[prost(int64, tag = "4")]
    start_offset: i64,
    #[prost(int64, tag = "5")]
    end_offset: i64,
    #[prost(int64, tag = "6")]
    max_timestamp_ms: i64,
    #[prost(int32, tag = "7")]
    broker_id: i32,
    #[prost(int64, tag = "8")]
    event_time_ms: i64,
    #[prost(uint64, tag = "9")]
    size_bytes: u64,
    #[prost(message, repeated, tag = "10")]
    leader_epochs: Vec<EpochProto>,
    #[prost(bool, tag = "11")]
    has_txn_index: bool,
    #[prost(bool, tag = "12")]
    has_producer_snapshot: bool,
    #[prost(uint32, tag = "13")]
    state: u32,
}

fn bad(what: &'static str, reason: impl Into<String>) -> TierError {
    TierError::BadMetadata {
        what,
        reason: reason.into(),
    }
}

fn frame<M: Message>(msg: &M, what: &'static str, max: usize) -> Result<Bytes> {
    ferry_common::framed::encode(msg, max).map_err(|e| TierError::Invalid(format!("{what}: {e}")))
}

fn unframe<M: Message + Default>(buf: &[u8], what: &'static str, max: usize) -> Result<M> {
    ferry_common::framed::decode(buf, max).map_err(|e| bad(what, e))
}

fn uuid(raw: &[u8], what: &'static str) -> Result<Uuid> {
    Uuid::from_slice(raw).map_err(|_| bad(what, format!("id of {} bytes", raw.len())))
}

/// Encodes a compaction key.
pub fn encode_key(key: &RemoteSegmentKey) -> Result<Bytes> {
    let proto = KeyProto {
        topic_id: key.topic_id.as_bytes().to_vec(),
        partition: key.partition,
        segment_id: key.segment_id.as_bytes().to_vec(),
    };
    frame(&proto, "key", MAX_KEY_LEN)
}

/// Decodes a compaction key.
pub fn decode_key(buf: &[u8]) -> Result<RemoteSegmentKey> {
    let p: KeyProto = unframe(buf, "key", MAX_KEY_LEN)?;
    Ok(RemoteSegmentKey {
        topic_id: uuid(&p.topic_id, "key")?,
        partition: p.partition,
        segment_id: uuid(&p.segment_id, "key")?,
    })
}

/// Encodes a value; refuses one that would not decode.
pub fn encode_value(meta: &RemoteSegmentMetadata) -> Result<Bytes> {
    meta.validate().map_err(TierError::Invalid)?;
    let proto = ValueProto {
        topic_id: meta.topic_id.as_bytes().to_vec(),
        partition: meta.partition,
        segment_id: meta.segment_id.as_bytes().to_vec(),
        start_offset: meta.start_offset,
        end_offset: meta.end_offset,
        max_timestamp_ms: meta.max_timestamp_ms,
        broker_id: meta.broker_id,
        event_time_ms: meta.event_time_ms,
        size_bytes: meta.size_bytes,
        leader_epochs: meta
            .leader_epochs
            .iter()
            .map(|&(epoch, start_offset)| EpochProto {
                epoch,
                start_offset,
            })
            .collect(),
        has_txn_index: meta.has_txn_index,
        has_producer_snapshot: meta.has_producer_snapshot,
        state: u32::from(meta.state.id()),
    };
    frame(&proto, "value", MAX_VALUE_LEN)
}

/// Decodes and validates a value.
pub fn decode_value(buf: &[u8]) -> Result<RemoteSegmentMetadata> {
    let p: ValueProto = unframe(buf, "value", MAX_VALUE_LEN)?;
    let state = RemoteSegmentState::from_id(p.state)
        .ok_or_else(|| bad("value", format!("unknown state {}", p.state)))?;
    let meta = RemoteSegmentMetadata {
        topic_id: uuid(&p.topic_id, "value")?,
        partition: p.partition,
        segment_id: uuid(&p.segment_id, "value")?,
        start_offset: p.start_offset,
        end_offset: p.end_offset,
        max_timestamp_ms: p.max_timestamp_ms,
        broker_id: p.broker_id,
        event_time_ms: p.event_time_ms,
        size_bytes: p.size_bytes,
        leader_epochs: p
            .leader_epochs
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect(),
        has_txn_index: p.has_txn_index,
        has_producer_snapshot: p.has_producer_snapshot,
        state,
    };
    meta.validate().map_err(|reason| bad("value", reason))?;
    Ok(meta)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn segment(start: i64, end: i64) -> RemoteSegmentMetadata {
        RemoteSegmentMetadata {
            topic_id: Uuid::from_u128(7),
            partition: 3,
            segment_id: Uuid::from_u128(start as u128 + 1000),
            start_offset: start,
            end_offset: end,
            max_timestamp_ms: 1_700_000_000_000 + end,
            broker_id: 2,
            event_time_ms: 1_700_000_000_500,
            size_bytes: 4096,
            leader_epochs: vec![(4, start), (6, end)],
            has_txn_index: true,
            has_producer_snapshot: true,
            state: RemoteSegmentState::CopyFinished,
        }
    }

    #[test]
    fn a_record_round_trips_in_every_state_but_the_last() {
        for state in [
            RemoteSegmentState::CopyStarted,
            RemoteSegmentState::CopyFinished,
            RemoteSegmentState::DeleteStarted,
        ] {
            let meta = segment(100, 199).with_state(state, 5);
            let rec = TierMetadataRecord::of(&meta).expect("encodes");
            let decoded = TierMetadataRecord::decode(&rec.key, rec.value.as_deref()).expect("ok");
            assert_eq!(decoded, TierMetadataEvent::Update(meta));
        }
    }

    #[test]
    fn delete_finished_is_the_keys_tombstone() {
        let meta = segment(100, 199).with_state(RemoteSegmentState::DeleteFinished, 9);
        let rec = TierMetadataRecord::of(&meta).expect("encodes");
        assert!(rec.value.is_none());
        assert_eq!(
            TierMetadataRecord::decode(&rec.key, None).expect("ok"),
            TierMetadataEvent::Tombstone(meta.key())
        );
    }

    #[test]
    fn a_value_under_another_key_or_cut_short_is_refused() {
        let a = TierMetadataRecord::of(&segment(0, 9)).expect("a");
        let b = TierMetadataRecord::of(&segment(10, 19)).expect("b");
        assert!(TierMetadataRecord::decode(&a.key, b.value.as_deref()).is_err());
        let value = a.value.expect("value");
        assert!(TierMetadataRecord::decode(&a.key, Some(&value[..value.len() - 1])).is_err());
        let mut padded = value.to_vec();
        padded.push(0);
        assert!(TierMetadataRecord::decode(&a.key, Some(&padded)).is_err());
        assert!(decode_key(&[0xff; 3]).is_err());
    }

    #[test]
    fn nonsense_is_refused_on_write_and_on_read() {
        let mut m = segment(10, 5);
        assert!(TierMetadataRecord::of(&m).is_err(), "end before start");
        m = segment(10, 20);
        m.leader_epochs = vec![(3, 11)];
        assert!(TierMetadataRecord::of(&m).is_err(), "epochs start late");
        m.leader_epochs = vec![(3, 10), (2, 15)];
        assert!(TierMetadataRecord::of(&m).is_err(), "epochs go back");
        m.leader_epochs = vec![];
        assert!(TierMetadataRecord::of(&m).is_err(), "no epochs");
        // A state the reader does not know.
        let proto = ValueProto {
            topic_id: vec![1; 16],
            segment_id: vec![2; 16],
            end_offset: 1,
            leader_epochs: vec![EpochProto {
                epoch: 0,
                start_offset: 0,
            }],
            state: 9,
            ..Default::default()
        };
        let buf = frame(&proto, "value", MAX_VALUE_LEN).expect("frame");
        assert!(decode_value(&buf).is_err());
    }

    #[test]
    fn a_partitions_log_start_round_trips_under_its_own_key() {
        let rec = TierMetadataRecord::log_start(Uuid::from_u128(7), 3, 250).expect("encodes");
        assert_eq!(
            TierMetadataRecord::decode(&rec.key, rec.value.as_deref()).expect("decodes"),
            TierMetadataEvent::LogStart {
                topic_id: Uuid::from_u128(7),
                partition: 3,
                offset: 250
            }
        );
        assert!(TierMetadataRecord::decode(&rec.key, None).is_err());
        let other = TierMetadataRecord::log_start(Uuid::from_u128(7), 4, 250).expect("encodes");
        assert!(TierMetadataRecord::decode(&rec.key, other.value.as_deref()).is_err());
        let nil = RemoteSegmentMetadata {
            segment_id: Uuid::nil(),
            ..segment(0, 9)
        };
        assert!(
            TierMetadataRecord::of(&nil).is_err(),
            "a segment cannot take the key"
        );
    }

    #[test]
    fn the_epoch_of_an_offset_is_the_last_that_started_at_or_before_it() {
        let m = segment(100, 199);
        assert_eq!(m.epoch_of(99), None);
        assert_eq!(m.epoch_of(100), Some(4));
        assert_eq!(m.epoch_of(198), Some(4));
        assert_eq!(m.epoch_of(199), Some(6));
        assert_eq!(m.epoch_of(200), None);
        assert_eq!(m.last_epoch(), Some(6));
    }

    #[test]
    fn state_transitions_are_kafkas() {
        use RemoteSegmentState::*;
        assert!(RemoteSegmentState::may_follow(None, CopyStarted));
        assert!(!RemoteSegmentState::may_follow(None, CopyFinished));
        assert!(RemoteSegmentState::may_follow(
            Some(CopyStarted),
            CopyFinished
        ));
        assert!(RemoteSegmentState::may_follow(
            Some(CopyStarted),
            DeleteStarted
        ));
        assert!(RemoteSegmentState::may_follow(
            Some(CopyFinished),
            CopyFinished
        ));
        assert!(!RemoteSegmentState::may_follow(
            Some(CopyFinished),
            CopyStarted
        ));
        assert!(RemoteSegmentState::may_follow(
            Some(DeleteStarted),
            DeleteFinished
        ));
        assert!(!RemoteSegmentState::may_follow(
            Some(DeleteStarted),
            CopyFinished
        ));
        assert!(!RemoteSegmentState::may_follow(
            Some(DeleteFinished),
            CopyStarted
        ));
    }
}
