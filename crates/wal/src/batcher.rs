//! The uploader's batcher: buffers the appends of many partitions and decides when to cut
//! them into one object (every upload interval, or as soon as enough bytes wait), within the
//! memory bound; what it cannot hold becomes a [`ClassicFallback`]. Pure and clock-driven: the
//! async [`crate::uploader::Uploader`] runs it.

use std::collections::BTreeMap;

use bytes::Bytes;
use ferry_common::{SharedClock, TopicPartition};
use ferry_objstore::keys::WalObjectKey;
use ferry_objstore::ObjectBody;
use uuid::Uuid;

use crate::error::{Result, WalError};
use crate::format::{ObjectBuilder, SliceEntry, SliceInfo};

/// Tuning of the batcher (`remote.wal.*` configs).
#[derive(Debug, Clone)]
pub struct BatcherConfig {
    /// The uploading broker (part of every object key).
    pub broker_id: i32,
    /// `remote.wal.upload.interval.ms`: longest time a byte waits before its object is cut.
    pub upload_interval_ms: i64,
    /// `remote.wal.upload.max.bytes`: cut as soon as this many bytes wait. An object holds at
    /// most this plus one append.
    pub upload_max_bytes: usize,
    /// Bound on waiting plus in-flight slice bytes; beyond it appends take the classic path.
    pub max_buffered_bytes: usize,
}

impl Default for BatcherConfig {
    fn default() -> Self {
        Self {
            broker_id: 0,
            upload_interval_ms: 10,
            upload_max_bytes: 4 << 20,
            max_buffered_bytes: 64 << 20,
        }
    }
}

/// A partition as the WAL names it (topic id, not name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WalPartition {
    pub topic_id: Uuid,
    pub partition: i32,
}

/// Record batches just appended to a leader's log, as they are stored there.
#[derive(Debug, Clone)]
pub struct WalAppend {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    pub base_offset: i64,
    pub last_offset: i64,
    /// The leader's current epoch for the partition.
    pub leader_epoch: i32,
    /// Whole record batches, byte for byte as in the log.
    pub records: Bytes,
}

/// What happened to one append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOutcome {
    /// Waiting for the next object.
    Buffered,
    /// Not taken into the WAL path; followers need the classic fetch from this offset.
    Dropped { classic_from: i64 },
}

/// Why a range left the WAL path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackReason {
    /// `max_buffered_bytes` was reached (slow or failing store).
    BufferFull,
    /// The object's PUT failed.
    UploadFailed,
    /// The metadata publisher refused the records.
    PublishFailed,
    /// The append itself was malformed (empty, or not an offset range).
    InvalidAppend,
}

/// Offsets `from_offset..end_offset` of a partition reach followers only by the classic fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicFallback {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    pub from_offset: i64,
    /// Exclusive.
    pub end_offset: i64,
    pub reason: FallbackReason,
}

pub(crate) fn push_fallback(list: &mut Vec<ClassicFallback>, f: ClassicFallback) {
    if let Some(last) = list.last_mut() {
        if last.tp == f.tp
            && last.topic_id == f.topic_id
            && last.reason == f.reason
            && last.end_offset == f.from_offset
        {
            last.end_offset = f.end_offset;
            return;
        }
    }
    list.push(f);
}

/// One slice of a cut object, with the partition's name for reporting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingSlice {
    pub tp: TopicPartition,
    pub entry: SliceEntry,
}

/// A cut object, ready to PUT.
#[derive(Debug, Clone)]
pub struct PendingObject {
    /// Cut order; also the key's sequence number.
    pub seq: u64,
    pub key: WalObjectKey,
    /// The object in the parts it was built from (see [`ObjectBuilder`]).
    pub data: ObjectBody,
    pub slices: Vec<PendingSlice>,
    /// Slice bytes this object holds against `max_buffered_bytes`; hand back with
    /// [`UploadBatcher::release`] when the PUT has finished.
    pub buffered_bytes: usize,
    /// When its oldest byte was appended (the `cut_wait` stage starts there).
    pub oldest_append: tokio::time::Instant,
}

/// Consecutive appends of one partition under one epoch: becomes one slice.
#[derive(Debug)]
struct Run {
    leader_epoch: i32,
    base_offset: i64,
    last_offset: i64,
    chunks: Vec<Bytes>,
    bytes: usize,
}

#[derive(Debug)]
struct PartitionBuffer {
    tp: TopicPartition,
    runs: Vec<Run>,
}

/// The pure batching core: buffers appends and cuts objects.
#[derive(Debug)]
pub struct UploadBatcher {
    config: BatcherConfig,
    clock: SharedClock,
    waiting: BTreeMap<WalPartition, PartitionBuffer>,
    waiting_bytes: usize,
    waiting_runs: usize,
    in_flight_bytes: usize,
    oldest_waiting_ms: Option<i64>,
    /// The same moment on the monotonic clock, for the `cut_wait` stage.
    oldest_waiting_at: Option<tokio::time::Instant>,
    next_seq: u64,
    last_created_ms: i64,
    fallbacks: Vec<ClassicFallback>,
}

impl UploadBatcher {
    pub fn new(config: BatcherConfig, clock: SharedClock) -> Self {
        Self {
            config,
            clock,
            waiting: BTreeMap::new(),
            waiting_bytes: 0,
            waiting_runs: 0,
            in_flight_bytes: 0,
            oldest_waiting_ms: None,
            oldest_waiting_at: None,
            next_seq: 0,
            last_created_ms: 0,
            fallbacks: Vec::new(),
        }
    }

    pub fn config(&self) -> &BatcherConfig {
        &self.config
    }

    /// Takes an append into the next object, or drops it from the WAL path (never blocks).
    pub fn append(&mut self, a: WalAppend) -> AppendOutcome {
        let len = a.records.len();
        let fallback = |reason| ClassicFallback {
            tp: a.tp.clone(),
            topic_id: a.topic_id,
            from_offset: a.base_offset,
            end_offset: a.last_offset.saturating_add(1),
            reason,
        };
        if len == 0 || len > u32::MAX as usize || a.base_offset < 0 || a.last_offset < a.base_offset
        {
            tracing::warn!(tp = %a.tp, base = a.base_offset, last = a.last_offset, len,
                "malformed WAL append; the range takes the classic path");
            push_fallback(&mut self.fallbacks, fallback(FallbackReason::InvalidAppend));
            return AppendOutcome::Dropped {
                classic_from: a.base_offset,
            };
        }
        if self.buffered_bytes() + len > self.config.max_buffered_bytes {
            push_fallback(&mut self.fallbacks, fallback(FallbackReason::BufferFull));
            return AppendOutcome::Dropped {
                classic_from: a.base_offset,
            };
        }
        let key = WalPartition {
            topic_id: a.topic_id,
            partition: a.tp.partition,
        };
        let buf = self.waiting.entry(key).or_insert_with(|| PartitionBuffer {
            tp: a.tp.clone(),
            runs: Vec::new(),
        });
        let extends = buf.runs.last().is_some_and(|r| {
            r.leader_epoch == a.leader_epoch
                && r.last_offset.checked_add(1) == Some(a.base_offset)
                && r.bytes + len <= u32::MAX as usize
        });
        match buf.runs.last_mut() {
            Some(run) if extends => {
                run.last_offset = a.last_offset;
                run.bytes += len;
                run.chunks.push(a.records);
            }
            _ => {
                buf.runs.push(Run {
                    leader_epoch: a.leader_epoch,
                    base_offset: a.base_offset,
                    last_offset: a.last_offset,
                    chunks: vec![a.records],
                    bytes: len,
                });
                self.waiting_runs += 1;
            }
        }
        self.waiting_bytes += len;
        if self.oldest_waiting_ms.is_none() {
            self.oldest_waiting_ms = Some(self.clock.now_ms());
            self.oldest_waiting_at = Some(tokio::time::Instant::now());
        }
        AppendOutcome::Buffered
    }

    /// Whether an object should be cut now: the size trigger, or the oldest waiting byte has
    /// waited an upload interval.
    pub fn is_ready(&self) -> bool {
        if self.waiting_bytes == 0 {
            return false;
        }
        self.waiting_bytes >= self.config.upload_max_bytes
            || self
                .next_deadline_ms()
                .is_some_and(|d| self.clock.now_ms() >= d)
    }

    /// When the interval trigger fires next (`None` when nothing waits).
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.oldest_waiting_ms
            .map(|t| t.saturating_add(self.config.upload_interval_ms))
    }

    /// Cuts an object if a trigger has fired.
    pub fn poll_cut(&mut self) -> Result<Option<PendingObject>> {
        if self.is_ready() {
            self.cut()
        } else {
            Ok(None)
        }
    }

    /// Cuts everything waiting into one object, triggers or not (`None` when nothing waits).
    pub fn cut(&mut self) -> Result<Option<PendingObject>> {
        if self.waiting.is_empty() {
            return Ok(None);
        }
        let waiting = std::mem::take(&mut self.waiting);
        let bytes = std::mem::replace(&mut self.waiting_bytes, 0);
        let runs = std::mem::replace(&mut self.waiting_runs, 0);
        self.oldest_waiting_ms = None;
        let oldest_append = self
            .oldest_waiting_at
            .take()
            .unwrap_or_else(tokio::time::Instant::now);
        let seq = self.next_seq;
        self.next_seq += 1;
        let created_ms = self.clock.now_ms().max(self.last_created_ms).max(0);
        self.last_created_ms = created_ms;

        let mut builder = ObjectBuilder::with_capacity(runs);
        let mut slices = Vec::with_capacity(runs);
        let mut failure = None;
        for (wp, buf) in &waiting {
            for run in &buf.runs {
                let info = SliceInfo {
                    topic_id: wp.topic_id,
                    partition: wp.partition,
                    base_offset: run.base_offset,
                    last_offset: run.last_offset,
                    leader_epoch: run.leader_epoch,
                };
                match builder.append_chunks(info, &run.chunks) {
                    Ok(entry) => slices.push(PendingSlice {
                        tp: buf.tp.clone(),
                        entry: *entry,
                    }),
                    Err(e) => failure = Some(e),
                }
            }
        }
        let key = WalObjectKey::new(self.config.broker_id, created_ms, seq).ok_or_else(|| {
            WalError::Invalid(format!(
                "no WAL object key for broker {} at {created_ms} ms, seq {seq}",
                self.config.broker_id
            ))
        });
        let built = match (failure, key) {
            (Some(e), _) | (None, Err(e)) => Err(e),
            (None, Ok(key)) => builder.finish_body().map(|data| (key, data)),
        };
        match built {
            Ok((key, data)) => {
                self.in_flight_bytes += bytes;
                Ok(Some(PendingObject {
                    seq,
                    key,
                    data,
                    slices,
                    buffered_bytes: bytes,
                    oldest_append,
                }))
            }
            Err(e) => {
                // Appends are validated on entry, so this is a bug; still lose nothing silently.
                for (wp, buf) in &waiting {
                    for run in &buf.runs {
                        push_fallback(
                            &mut self.fallbacks,
                            ClassicFallback {
                                tp: buf.tp.clone(),
                                topic_id: wp.topic_id,
                                from_offset: run.base_offset,
                                end_offset: run.last_offset + 1,
                                reason: FallbackReason::UploadFailed,
                            },
                        );
                    }
                }
                Err(e)
            }
        }
    }

    /// Hands back the bytes of an object whose PUT has finished (either way).
    pub fn release(&mut self, bytes: usize) {
        self.in_flight_bytes = self.in_flight_bytes.saturating_sub(bytes);
    }

    /// Waiting plus in-flight slice bytes; never above `max_buffered_bytes`.
    pub fn buffered_bytes(&self) -> usize {
        self.waiting_bytes + self.in_flight_bytes
    }

    pub fn waiting_bytes(&self) -> usize {
        self.waiting_bytes
    }

    /// Ranges dropped from the WAL path since the last call.
    pub fn take_fallbacks(&mut self) -> Vec<ClassicFallback> {
        std::mem::take(&mut self.fallbacks)
    }
}
