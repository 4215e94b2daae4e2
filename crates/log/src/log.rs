//! [`PartitionLog`]: one partition's log on local disk, Kafka's `UnifiedLog` + `LocalLog`.
//!
//! Concurrency. Locks, always taken in this order:
//! 0. `cleaner_lock` (mutex): one compaction pass (or cleaner checkpoint change) at a time; the
//!    pass reads closed segments without other locks and takes `writer` only to swap a
//!    rewritten segment in (see [`crate::cleaner`]). A move to another log dir holds it for its
//!    final step ([`crate::relocate`]).
//! 1. `writer` (mutex): serializes every mutation (append, roll, retention, truncation,
//!    DeleteRecords). Its holder is the only one who writes segment files.
//! 2. `state` (rw-lock): the segment list, `log_start_offset`, `log_end_offset`. The appender
//!    writes the bytes to the file first and takes the write lock only to publish the new size,
//!    indexes and end offset. Readers take the read lock just long enough to pick a segment, its
//!    published size and an index position, then pread without any lock; so they only ever see
//!    whole, fully written batches, and never wait on a disk write.
//! 3. `producers`, `epochs` (mutexes): short lookups. An append applies its batches to
//!    `producers` while it still holds the `state` write lock that publishes them, so whoever
//!    sees the new log end (or reads the new batches) also sees the producer state they made:
//!    the first unstable offset never lags a transaction's first batch, and never passes an
//!    ABORT marker whose entry is not yet in its segment's aborted-transaction index.
//!
//! Invariants: segments are sorted by base offset and never empty (the last is the active
//! segment); `log_start_offset <= log_end_offset`; `log_start_offset` only moves up except by
//! truncation below it; offsets are dense and strictly increasing across batches; the recovery
//! point never exceeds `log_end_offset`, and everything below it has been fsynced.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use ferry_common::{SharedClock, TopicPartition};
use parking_lot::{Mutex, RwLock};
use tracing::{debug, info, warn};

use crate::batch::{stamp_batch, validate_produced, BatchCrcs, BatchHeader, HEADER_SIZE};
use crate::config::{LogConfig, TimestampType};
use crate::dir_space::DirSpace;
use crate::epoch_cache::{write_offset_checkpoint, LeaderEpochCache};
use crate::error::{LogError, Result};
use crate::index::Durability;
use crate::loader::{self, LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE};
use crate::parts::{scan_follower_batches, write_all_parts_at};
use crate::producer_state::{
    list_snapshots, snapshot_path, ProducerEntry, ProducerStateManager, SequenceCheck,
};
use crate::segment::{remove_if_exists, Segment, SegmentFile};
use crate::txn::{AbortedTxn, TxnMarker};

/// How many producer snapshots to keep (older ones are deleted after a new one is written).
const SNAPSHOTS_TO_KEEP: usize = 2;

/// Result of a successful append (Kafka's `LogAppendInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    /// The broker time stamped on the batches, -1 when CreateTime.
    pub log_append_time: i64,
    pub log_start_offset: i64,
    /// Records across the batches (from the headers).
    pub record_count: u64,
    pub bytes: usize,
    /// An idempotent retry: offsets are those of the original append and nothing was written.
    pub duplicate: bool,
    /// The leader epoch a leader append stamped on its batches (-1 for follower appends).
    pub leader_epoch: i32,
    /// A leader append's batches exactly as written (final offsets, epoch, timestamps), so
    /// that callers needing them (the remote WAL uploader) do not read them back; empty for a
    /// duplicate and for follower appends.
    pub stored: Bytes,
}

/// Whole batches returned by [`PartitionLog::read`].
#[derive(Clone, Debug)]
pub struct FetchData {
    pub records: Bytes,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

/// Where a read starts ([`PartitionLog::read_start`]).
pub(crate) struct ReadStart {
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// The batch holding the offset: (segment file, position, header, the segment's size).
    pub batch: Option<(Arc<SegmentFile>, u64, BatchHeader, u64)>,
}

impl ReadStart {
    fn nothing(log_start_offset: i64, log_end_offset: i64) -> Self {
        Self {
            log_start_offset,
            log_end_offset,
            batch: None,
        }
    }
}

/// Segment list and offsets, under `PartitionLog::state`.
pub(crate) struct LogState {
    pub segments: Vec<Segment>,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

impl LogState {
    pub fn active(&self) -> &Segment {
        // `segments` is never empty (module invariant); index the last element.
        &self.segments[self.segments.len() - 1]
    }
    pub fn active_mut(&mut self) -> &mut Segment {
        let n = self.segments.len();
        &mut self.segments[n - 1]
    }
    /// Index of the segment that would hold `offset` (the last with base <= offset).
    pub fn segment_index_for(&self, offset: i64) -> usize {
        self.segments
            .partition_point(|s| s.base_offset <= offset)
            .max(1)
            - 1
    }
    pub fn size_in_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    /// Where a planned read that starts in `file`'s segment and is cut at `limit` and
    /// `max_offset` can resume its walk over batch headers: the start of a batch that belongs
    /// to the cut, as far along as the segment's offset index tells. Index entries are batch
    /// starts, and both their offsets and positions increase. The last entry at or below
    /// `limit` with an offset at most `max_offset` begins a batch that may not fit, but the
    /// entry before it begins one that ends at or below it, with offsets below it: that one.
    /// `None` when the index names no such batch, or `file` is no longer a segment's (deleted,
    /// or replaced by the cleaner).
    pub fn indexed_walk_start(
        &self,
        file: &Arc<SegmentFile>,
        limit: u64,
        max_offset: i64,
    ) -> Option<u64> {
        let s = self.segments.iter().find(|s| Arc::ptr_eq(&s.file, file))?;
        let limit = u32::try_from(limit).unwrap_or(u32::MAX);
        // No batch of this segment is below an offset limit at or under its base.
        let rel = max_offset.checked_sub(s.base_offset).filter(|&r| r > 0)?;
        let rel = u32::try_from(rel).unwrap_or(u32::MAX);
        let last = s.offset_index.last_batch_start_within(limit, rel)?;
        s.offset_index
            .last_batch_start_within(last.checked_sub(1)?, rel)
            .map(u64::from)
    }

    /// Where a read of `offset` looks: (file, batch start to scan from, published size) of the
    /// segment that should hold it and the next few. The batch is in the first unless offsets
    /// skip (follower gaps, compaction); a few suffice.
    pub fn read_targets(&self, offset: i64) -> Vec<(Arc<SegmentFile>, u64, u64)> {
        let i = self.segment_index_for(offset);
        self.segments[i..]
            .iter()
            .take(4)
            .enumerate()
            .map(|(k, s)| {
                let start = if k == 0 {
                    let rel = (offset - s.base_offset).clamp(0, i64::from(u32::MAX)) as u32;
                    u64::from(s.offset_index.lookup(rel))
                } else {
                    0
                };
                (Arc::clone(&s.file), start, s.size)
            })
            .collect()
    }
}

/// State only the writer touches.
pub(crate) struct WriterState {
    pub unflushed_messages: u64,
}

/// One partition's log. `Send + Sync`; every method takes `&self`.
pub struct PartitionLog {
    pub(crate) tp: TopicPartition,
    /// The partition's directory; it changes only when the log moves to another log dir
    /// ([`Self::relocate`]).
    dir: RwLock<PathBuf>,
    pub(crate) clock: SharedClock,
    pub(crate) config: RwLock<LogConfig>,
    pub(crate) writer: Mutex<WriterState>,
    pub(crate) state: RwLock<LogState>,
    pub(crate) producers: Mutex<ProducerStateManager>,
    pub(crate) epochs: Mutex<LeaderEpochCache>,
    /// Offset below which everything is fsynced; the mutex also serializes flushes.
    pub(crate) recovery_point: Mutex<i64>,
    /// Serializes cleaning passes (and checkpoint changes) of this log; never held with
    /// `writer` taken first.
    pub(crate) cleaner_lock: Mutex<()>,
    /// The cleaner checkpoint, -1 when the log was never cleaned; see [`crate::cleaner`].
    pub(crate) cleaner_checkpoint: std::sync::atomic::AtomicI64,
    /// Clock time after which the oldest tombstone kept by the last cleaning pass expires or a
    /// transaction marker it kept reaches its delete horizon (i64::MAX when none or unknown):
    /// the background cleaner then runs even without new dirt.
    pub(crate) tombstone_expiry: std::sync::atomic::AtomicI64,
    /// The last offset the long-term tier holds (-1: none known); with `remote_storage`, only
    /// segments ending at or below it may go by local retention.
    pub(crate) tier_copied_through: std::sync::atomic::AtomicI64,
    /// Whether the log dir has room: a full one refuses appends before they write.
    space: RwLock<Arc<DirSpace>>,
    /// Counts truncations and compaction swaps, which may rewrite bytes below a segment's
    /// size, twice each (as they start and once the log shows them): a move that copied
    /// segments while the counter changed copies them again ([`crate::relocate`]).
    pub(crate) rewrites: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for PartitionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionLog")
            .field("tp", &self.tp)
            .field("dir", &*self.dir.read())
            .finish_non_exhaustive()
    }
}

impl PartitionLog {
    /// Opens (creating the directory if missing) and recovers. `clean_shutdown`: the previous
    /// process closed this log cleanly, so indexes and snapshots are trusted (no full scan).
    pub fn open(
        dir: PathBuf,
        tp: TopicPartition,
        config: LogConfig,
        clean_shutdown: bool,
        clock: SharedClock,
    ) -> Result<PartitionLog> {
        Self::open_with(dir, tp, config, clean_shutdown, clock, Durability::Synced)
    }

    /// [`Self::open`] that fsyncs nothing and leaves the recovery point file as it was, for a
    /// caller loading many logs: it syncs the file system once before anything else.
    pub(crate) fn open_unsynced(
        dir: PathBuf,
        tp: TopicPartition,
        config: LogConfig,
        clean_shutdown: bool,
        clock: SharedClock,
    ) -> Result<PartitionLog> {
        Self::open_with(dir, tp, config, clean_shutdown, clock, Durability::Unsynced)
    }

    fn open_with(
        dir: PathBuf,
        tp: TopicPartition,
        config: LogConfig,
        clean_shutdown: bool,
        clock: SharedClock,
        durability: Durability,
    ) -> Result<PartitionLog> {
        let loaded = loader::load(&dir, &config, clean_shutdown, clock.now_ms(), durability)?;
        let cleaner_checkpoint = Self::load_cleaner_checkpoint(&dir);
        debug!(%tp, log_start_offset = loaded.log_start_offset,
            log_end_offset = loaded.log_end_offset, segments = loaded.segments.len(), "opened log");
        Ok(PartitionLog {
            tp,
            clock,
            config: RwLock::new(config),
            writer: Mutex::new(WriterState {
                unflushed_messages: 0,
            }),
            state: RwLock::new(LogState {
                segments: loaded.segments,
                log_start_offset: loaded.log_start_offset,
                log_end_offset: loaded.log_end_offset,
            }),
            producers: Mutex::new(loaded.producers),
            epochs: Mutex::new(loaded.epochs),
            recovery_point: Mutex::new(loaded.recovery_point),
            cleaner_lock: Mutex::new(()),
            cleaner_checkpoint: std::sync::atomic::AtomicI64::new(cleaner_checkpoint),
            tombstone_expiry: std::sync::atomic::AtomicI64::new(i64::MAX),
            tier_copied_through: std::sync::atomic::AtomicI64::new(-1),
            space: RwLock::new(DirSpace::untracked(&dir)),
            dir: RwLock::new(dir),
            rewrites: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The log, in a log dir whose space `space` tracks (the [`crate::LogManager`] gives each
    /// of its dirs one).
    pub(crate) fn in_dir_space(self, space: Arc<DirSpace>) -> Self {
        *self.space.write() = space;
        self
    }

    /// The space state of the log dir this log is in, read under its lock without a clone
    /// (every append asks it).
    fn space(&self) -> parking_lot::RwLockReadGuard<'_, Arc<DirSpace>> {
        self.space.read()
    }

    pub fn topic_partition(&self) -> &TopicPartition {
        &self.tp
    }

    pub fn dir(&self) -> PathBuf {
        self.dir.read().clone()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.state.read().log_start_offset
    }

    pub fn log_end_offset(&self) -> i64 {
        self.state.read().log_end_offset
    }

    pub fn update_config(&self, config: LogConfig) {
        *self.config.write() = config;
    }

    /// `remote.storage.enable`: the topic's closed segments go to the long-term tier (read
    /// without copying the whole config, as the fetch path asks it).
    pub fn is_tiered(&self) -> bool {
        self.config.read().remote_storage
    }

    pub fn config(&self) -> LogConfig {
        self.config.read().clone()
    }

    pub fn size_in_bytes(&self) -> u64 {
        self.state.read().size_in_bytes()
    }

    /// Number of segments (active included).
    pub fn segment_count(&self) -> usize {
        self.state.read().segments.len()
    }

    /// Offset and time index entries held in memory, over all segments: only the active
    /// segment's, closed segments serve theirs from their files (issue 16).
    pub fn in_memory_index_entries(&self) -> usize {
        self.state
            .read()
            .segments
            .iter()
            .map(Segment::in_memory_index_entries)
            .sum()
    }

    /// Base offsets of the segments, oldest first.
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.state
            .read()
            .segments
            .iter()
            .map(|s| s.base_offset)
            .collect()
    }

    /// (base offset, bytes) of every segment, oldest first.
    pub fn segment_sizes(&self) -> Vec<(i64, u64)> {
        self.state
            .read()
            .segments
            .iter()
            .map(|s| (s.base_offset, s.size))
            .collect()
    }

    /// (base offset, largest timestamp as retention sees it) of every segment, oldest first.
    pub fn segment_largest_timestamps(&self) -> Vec<(i64, i64)> {
        self.state
            .read()
            .segments
            .iter()
            .map(|s| (s.base_offset, s.largest_timestamp()))
            .collect()
    }

    /// Offset below which the log is known to be fsynced.
    pub fn recovery_point(&self) -> i64 {
        *self.recovery_point.lock()
    }

    /// Every producer the log knows, by id (DescribeProducers).
    pub fn active_producers(&self) -> Vec<(i64, crate::ProducerEntry)> {
        self.producers.lock().entries()
    }

    pub fn producer_epoch(&self, producer_id: i64) -> Option<i16> {
        self.producers.lock().epoch_of(producer_id)
    }

    /// The first offset of the oldest ongoing transaction (Kafka's first unstable offset), never
    /// below the log start offset (retention may have deleted a transaction's first batches);
    /// `None` when no transaction is ongoing. A read_committed fetch reads below
    /// `min(high watermark, this)`. (Kafka also keeps a completed transaction unstable until
    /// the high watermark passes its marker; the log does not know the high watermark, so a
    /// transaction leaves this as soon as its marker is appended.) Read the high watermark
    /// first: every transaction that started below it is then seen here.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        let log_start_offset = self.log_start_offset();
        let first = self.producers.lock().first_unstable_offset();
        first.map(|f| f.max(log_start_offset))
    }

    /// Kafka's last stable offset for `high_watermark` (read just before): the high watermark,
    /// or the first unstable offset when that is lower.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        self.first_unstable_offset()
            .map_or(high_watermark, |f| f.min(high_watermark))
    }

    /// The sequence the next batch of `producer_id` at `epoch` starts at (0 for a producer or
    /// an epoch the log has not seen): how a coordinator writing in a producer's transaction
    /// (TxnOffsetCommit) numbers its batch, its appends being serialized by the coordinator.
    pub fn next_sequence(&self, producer_id: i64, epoch: i16) -> i32 {
        match self.producers.lock().entry(producer_id) {
            Some(e) if e.epoch == epoch => e
                .batches
                .back()
                .map_or(0, |b| crate::batch::seq_add(b.last_seq, 1)),
            _ => 0,
        }
    }

    /// First offset of `producer_id`'s ongoing transaction in this partition.
    pub fn ongoing_txn_first_offset(&self, producer_id: i64) -> Option<i64> {
        self.producers.lock().txn_first_offset(producer_id)
    }

    /// Every aborted transaction whose offsets overlap `[start_offset, upper_bound_offset)`
    /// (marker at or after the start, first offset before the bound), in marker order: what a
    /// read_committed Fetch returns with data read from `start_offset` up to the bound. Kafka's
    /// `collectAbortedTransactions`: the segments from the one holding `start_offset` are
    /// searched, stopping after an entry whose last stable offset reaches the bound (no later
    /// marker can then end a transaction that began before it).
    pub fn collect_aborted_transactions(
        &self,
        start_offset: i64,
        upper_bound_offset: i64,
    ) -> Vec<AbortedTxn> {
        let st = self.state.read();
        let mut out = Vec::new();
        for seg in &st.segments[st.segment_index_for(start_offset)..] {
            for t in &seg.txn_index {
                if t.last_offset >= start_offset && t.first_offset < upper_bound_offset {
                    out.push(*t);
                }
                if t.last_stable_offset >= upper_bound_offset {
                    return out;
                }
            }
        }
        out
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.lock().latest_epoch()
    }

    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        let leo = self.log_end_offset();
        self.epochs.lock().end_offset_for(epoch, leo)
    }

    /// The leader-epoch cache entries `(epoch, start offset)`, oldest first.
    pub fn epoch_entries(&self) -> Vec<(i32, i64)> {
        self.epochs.lock().entries().to_vec()
    }

    /// A leader elected at `epoch` while its log ends at `start_offset` records that the epoch
    /// starts there (Kafka's `maybeAssignEpochStartOffset` in `makeLeader`): the checkpoint is
    /// written on election, not by the epoch's first produce. Returns whether it changed; an
    /// epoch not newer than the latest changes nothing.
    pub fn assign_epoch_start(&self, epoch: i32, start_offset: i64) -> Result<bool> {
        self.epochs.lock().assign(epoch, start_offset)
    }

    /// Appends batches from a producer; see the crate docs for the checks made.
    pub fn append_as_leader(&self, records: &[u8], leader_epoch: i32) -> Result<AppendInfo> {
        let config = self.config.read().clone();
        let headers = validate_produced(records, config.max_message_bytes)?;
        if config.message_timestamp_type == TimestampType::CreateTime {
            check_timestamps(records, &headers, self.clock.now_ms(), &config)?;
        }
        if config.compact {
            // Kafka refuses keyless records on compacted topics, naming each (INVALID_RECORD
            // with record errors). A produce request carries one v2 batch per partition.
            let mut pos = 0usize;
            for h in &headers {
                let size = h.total_size();
                let keyless = crate::records::keyless_records(&records[pos..pos + size])?;
                if !keyless.is_empty() {
                    return Err(LogError::RecordsRejected(keyless));
                }
                pos += size;
            }
        }
        self.append_leader_batches(records, headers, leader_epoch, &config, None)
    }

    /// Writes a transaction marker as leader (the transaction coordinator's WriteTxnMarkers).
    /// Refused with `InvalidProducerEpoch` when the marker's producer epoch is below the
    /// producer's, and with `TransactionCoordinatorFenced` when its coordinator epoch is below
    /// the one of the producer's last marker. A marker for a producer without an ongoing
    /// transaction is written all the same and completes nothing (as in Kafka). An ABORT that
    /// completes a transaction adds it to the aborted-transaction index.
    pub fn append_control_marker(
        &self,
        marker: &TxnMarker,
        leader_epoch: i32,
    ) -> Result<AppendInfo> {
        let config = self.config.read().clone();
        let batch = marker.to_batch(0, leader_epoch, self.clock.now_ms());
        let header = BatchHeader::parse(&batch)
            .ok_or_else(|| LogError::KafkaStorage("marker batch shorter than a header".into()))?;
        self.append_leader_batches(&batch, vec![header], leader_epoch, &config, Some(marker))
    }

    /// The leader append of validated batches: `marker` is set when `records` is that marker's
    /// control batch (checked against producer state instead of the idempotence checks).
    fn append_leader_batches(
        &self,
        records: &[u8],
        mut headers: Vec<BatchHeader>,
        leader_epoch: i32,
        config: &LogConfig,
        marker: Option<&TxnMarker>,
    ) -> Result<AppendInfo> {
        let record_count: u64 = headers.iter().map(|h| h.records_count as u64).sum();
        let mut writer = self.writer.lock();
        let (log_end_offset, log_start_offset) = {
            let st = self.state.read();
            (st.log_end_offset, st.log_start_offset)
        };
        let now = self.clock.now_ms();
        let log_append_time =
            (config.message_timestamp_type == TimestampType::LogAppendTime).then_some(now);

        // Final offsets and header fields, as they will be on disk.
        let mut next = log_end_offset;
        for h in &mut headers {
            h.base_offset = next;
            h.partition_leader_epoch = leader_epoch;
            if let Some(ts) = log_append_time {
                h.max_timestamp = ts;
                h.attributes |= crate::batch::TIMESTAMP_TYPE_BIT;
            }
            next = h.next_offset();
        }

        if let Some(m) = marker {
            self.producers.lock().check_marker(m)?;
        } else if let Some(dup) = self.check_producers(&headers)? {
            return Ok(AppendInfo {
                first_offset: dup.0,
                last_offset: dup.1,
                log_append_time: -1,
                log_start_offset,
                record_count,
                bytes: 0,
                duplicate: true,
                leader_epoch,
                stored: Bytes::new(),
            });
        }

        let max_ts = headers.iter().map(|h| h.max_timestamp).max().unwrap_or(-1);
        if self.should_roll(config, records.len() as u64, next - 1, max_ts, now) {
            self.roll_locked(now)?;
        }

        let mut buf = records.to_vec();
        let mut pos = 0usize;
        for h in &headers {
            let size = h.total_size();
            stamp_batch(
                &mut buf[pos..pos + size],
                h.base_offset,
                leader_epoch,
                log_append_time,
            );
            pos += size;
        }

        let markers: Vec<(usize, TxnMarker)> = marker.map(|m| (0, *m)).into_iter().collect();
        self.write_and_publish(&[&buf], &headers, config.index_interval_bytes, &markers)?;

        let first_offset = log_end_offset;
        if let Err(e) = self.epochs.lock().assign(leader_epoch, first_offset) {
            warn!(tp = %self.tp, error = %e, "could not persist the leader epoch cache");
        }
        writer.unflushed_messages += record_count;
        let flush_now = writer.unflushed_messages >= config.flush_interval_messages;
        if flush_now {
            writer.unflushed_messages = 0;
        }
        drop(writer);
        if flush_now {
            self.flush()?;
        }
        Ok(AppendInfo {
            first_offset,
            last_offset: next - 1,
            log_append_time: log_append_time.unwrap_or(-1),
            log_start_offset,
            record_count,
            bytes: buf.len(),
            duplicate: false,
            leader_epoch,
            stored: Bytes::from(buf),
        })
    }

    /// Writes `parts` (the batches of `headers` laid end to end, final bytes) at the end of the
    /// active segment, then publishes sizes, indexes and the new log end offset, and applies the
    /// batches to producer state (`markers`: `(index in headers, marker)` of the control
    /// batches), recording the transactions aborted in the active segment's index. The caller
    /// holds `writer`.
    fn write_and_publish(
        &self,
        parts: &[&[u8]],
        headers: &[BatchHeader],
        index_interval_bytes: u64,
        markers: &[(usize, TxnMarker)],
    ) -> Result<()> {
        let now = self.clock.now_ms();
        self.space().check_room(now)?;
        let (file, start): (Arc<SegmentFile>, u64) = {
            let st = self.state.read();
            (Arc::clone(&st.active().file), st.active().size)
        };
        if let Err(e) = write_all_parts_at(&file.file, parts, start) {
            // Cut off whatever part of the write landed so the file holds only whole batches.
            let _ = file.file.set_len(start);
            let e = LogError::io_at(&file.path)(e);
            self.space().note_error(&e, now);
            return Err(e);
        }
        let mut st = self.state.write();
        let seg = st.active_mut();
        let mut p = start;
        for h in headers {
            seg.note_batch(p, h, index_interval_bytes);
            p += h.total_size() as u64;
        }
        if let Some(last) = headers.last() {
            st.log_end_offset = last.next_offset();
        }
        if headers.iter().any(BatchHeader::has_producer_id) {
            // Under the state write lock: see the module docs.
            let mut producers = self.producers.lock();
            let mut markers = markers.iter().peekable();
            for (i, h) in headers.iter().enumerate() {
                let marker = markers.next_if(|(at, _)| *at == i).map(|(_, m)| m);
                if let Some(aborted) = producers.replay(h, marker) {
                    st.active_mut().txn_index.push(aborted);
                }
            }
        }
        Ok(())
    }

    /// Appends batches replicated from the leader (or fetched from the remote WAL) as they are:
    /// offsets, epochs and timestamps are kept. Checks length, magic and CRC of every batch and
    /// that offsets start at or after the log end offset and increase; producer state and the
    /// leader-epoch cache follow the batches without idempotence checks (the leader made them).
    pub fn append_as_follower(&self, records: &[u8]) -> Result<AppendInfo> {
        self.append_as_follower_with(records, BatchCrcs::Check)
    }

    /// [`Log::append_as_follower`], checking batch CRCs only when `crcs` asks for it.
    pub fn append_as_follower_with(&self, records: &[u8], crcs: BatchCrcs) -> Result<AppendInfo> {
        self.append_as_follower_parts(&[records], crcs)
    }

    /// [`Log::append_as_follower_with`] for batches laid end to end over `parts` (a remote-WAL
    /// slice in the pieces its GET body arrived in), written with one vectored write: joining
    /// the pieces first was a copy of every byte a follower downloads.
    pub fn append_as_follower_parts(&self, parts: &[&[u8]], crcs: BatchCrcs) -> Result<AppendInfo> {
        let config = self.config.read().clone();
        let (headers, markers) = scan_follower_batches(parts, crcs)?;
        let records_len: usize = parts.iter().map(|p| p.len()).sum();
        let (Some(first), Some(last)) = (headers.first().copied(), headers.last().copied()) else {
            return Err(LogError::InvalidRecord("empty record set".into()));
        };
        let mut writer = self.writer.lock();
        let (log_end_offset, log_start_offset) = {
            let st = self.state.read();
            (st.log_end_offset, st.log_start_offset)
        };
        let mut expected = log_end_offset;
        for h in &headers {
            if h.base_offset < expected || h.last_offset_delta < 0 {
                return Err(LogError::InvalidRecord(format!(
                    "follower batch at offset {} is below the expected offset {expected}",
                    h.base_offset
                )));
            }
            expected = h.next_offset();
        }
        let now = self.clock.now_ms();
        let max_ts = headers.iter().map(|h| h.max_timestamp).max().unwrap_or(-1);
        let needs_new_base = {
            let st = self.state.read();
            let a = st.active();
            a.size == 0 && a.base_offset != first.base_offset
        };
        if needs_new_base
            || self.should_roll(&config, records_len as u64, last.last_offset(), max_ts, now)
        {
            // The new segment starts at the first incoming offset (which may exceed the LEO).
            self.state.write().log_end_offset = first.base_offset;
            self.roll_locked(now)?;
        }
        self.write_and_publish(parts, &headers, config.index_interval_bytes, &markers)?;
        {
            let mut epochs = self.epochs.lock();
            for h in &headers {
                if let Err(e) = epochs.assign(h.partition_leader_epoch, h.base_offset) {
                    warn!(tp = %self.tp, error = %e, "could not persist the leader epoch cache");
                }
            }
        }
        let record_count: u64 = headers.iter().map(|h| h.records_count.max(0) as u64).sum();
        writer.unflushed_messages += record_count;
        let flush_now = writer.unflushed_messages >= config.flush_interval_messages;
        if flush_now {
            writer.unflushed_messages = 0;
        }
        drop(writer);
        if flush_now {
            self.flush()?;
        }
        Ok(AppendInfo {
            first_offset: first.base_offset,
            last_offset: last.last_offset(),
            log_append_time: -1,
            log_start_offset,
            record_count,
            bytes: records_len,
            duplicate: false,
            leader_epoch: -1,
            stored: Bytes::new(),
        })
    }

    /// Runs the idempotence checks for every producer batch in order, as if the earlier ones had
    /// been appended. `Some((first, last))` when every batch is a retry of batches in the log.
    fn check_producers(&self, headers: &[BatchHeader]) -> Result<Option<(i64, i64)>> {
        if !headers.iter().any(BatchHeader::has_producer_id) {
            return Ok(None);
        }
        let producers = self.producers.lock();
        let mut pending: std::collections::HashMap<i64, ProducerEntry> = Default::default();
        let mut duplicates = Vec::new();
        let mut appends = 0usize;
        for h in headers {
            if !h.has_producer_id() {
                appends += 1;
                continue;
            }
            let pid = h.producer_id;
            if let (std::collections::hash_map::Entry::Vacant(slot), Some(e)) =
                (pending.entry(pid), producers.entry(pid))
            {
                slot.insert(e.clone());
            }
            match ProducerStateManager::check(pending.get(&pid), h)? {
                SequenceCheck::Duplicate(b) => duplicates.push(b),
                SequenceCheck::Append => {
                    appends += 1;
                    let entry = pending
                        .entry(pid)
                        .or_insert_with(|| ProducerEntry::new(h.producer_epoch));
                    ProducerStateManager::apply(entry, h);
                }
            }
        }
        match (duplicates.first(), duplicates.last()) {
            (Some(first), Some(last)) if appends == 0 => {
                Ok(Some((first.first_offset, last.last_offset)))
            }
            (Some(_), _) => Err(LogError::InvalidRecord(
                "record set mixes retried and new batches".into(),
            )),
            _ => Ok(None),
        }
    }

    /// Kafka's `shouldRoll`: size, segment.ms, full index, or relative offset overflow.
    fn should_roll(
        &self,
        config: &LogConfig,
        incoming_bytes: u64,
        last_offset: i64,
        max_ts: i64,
        now: i64,
    ) -> bool {
        let st = self.state.read();
        let seg = st.active();
        if seg.size == 0 {
            return false;
        }
        let waited = match seg.first_batch_timestamp {
            Some(t) if t >= 0 && max_ts >= 0 => max_ts - t,
            _ => now - seg.created_ms,
        };
        seg.size + incoming_bytes > config.segment_bytes
            || waited > config.segment_ms
            || seg.index_full(config.segment_index_bytes)
            || last_offset - seg.base_offset > i64::from(i32::MAX)
    }

    /// Starts a new active segment at the log end offset. The caller holds `writer`.
    pub(crate) fn roll_locked(&self, now: i64) -> Result<()> {
        let (new_base, old_index, active_empty) = {
            let st = self.state.read();
            let a = st.active();
            (st.log_end_offset, a.index_snapshot(), a.size == 0)
        };
        if active_empty {
            let st = self.state.read();
            if st.active().base_offset == new_base {
                return Ok(());
            }
        }
        self.space().check_room(now)?;
        let seg = Segment::create(&self.dir(), new_base, now).inspect_err(|e| {
            self.space().note_error(e, now);
        })?;
        // The snapshot at the new base is the closing segment's end state. It is written
        // before that segment shows as closed: the tier's copier lists closed segments without
        // the writer lock and uploads the snapshot it finds then, and a copy without it leaves
        // a replica that starts from the tier with no producer state.
        let closed = old_index
            .write(Durability::Synced)
            .and_then(|()| self.write_producer_snapshot(new_base, Durability::Synced));
        if let Err(e) = closed {
            // Leave no new segment file behind: the next roll starts over.
            let _ = seg.delete_files();
            self.space().note_error(&e, now);
            return Err(e);
        }
        {
            let mut st = self.state.write();
            if active_empty {
                if let Some(old) = st.segments.pop() {
                    old.delete_files()?;
                }
            } else {
                let a = st.active_mut();
                a.seal_time_index();
                a.dirty = false;
            }
            st.segments.push(seg);
            if !active_empty {
                // The old active segment is closed: its index files were just written, serve
                // lookups from them and free the entries (issue 16). Not dirty, so no I/O but
                // two stats under the lock.
                let n = st.segments.len();
                if let Err(e) = st.segments[n - 2].offload_indexes(Durability::Synced) {
                    warn!(tp = %self.tp, error = %e, "keeping a closed segment's indexes in memory");
                }
            }
        }
        info!(tp = %self.tp, base_offset = new_base, "rolled new log segment");
        Ok(())
    }

    /// Writes a producer snapshot at `offset` and deletes all but the newest few. A tiered
    /// log also keeps the snapshots of segments the long-term tier does not hold yet: a copy
    /// takes the snapshot at the segment's end, and a follower starting from the tier needs it.
    pub(crate) fn write_producer_snapshot(
        &self,
        offset: i64,
        durability: Durability,
    ) -> Result<()> {
        let snapshot = self.producers.lock().clone();
        snapshot.write_snapshot(&self.dir(), offset, durability)?;
        let snaps = list_snapshots(&self.dir())?;
        // The snapshot at `off` is the end of the segment ending at `off - 1`.
        let copied_through = self
            .tier_copied_through
            .load(std::sync::atomic::Ordering::Acquire);
        let log_start = self.log_start_offset();
        let awaits_copy =
            |off: i64| self.is_tiered() && off - 1 > copied_through && off > log_start;
        if snaps.len() > SNAPSHOTS_TO_KEEP {
            for off in &snaps[..snaps.len() - SNAPSHOTS_TO_KEEP] {
                if !awaits_copy(*off) {
                    remove_if_exists(&snapshot_path(&self.dir(), *off))?;
                }
            }
        }
        Ok(())
    }

    /// Where a read of `offset` starts, as [`PartitionLog::read`] and
    /// [`PartitionLog::read_slice`] both find it: the batch holding it (or the first after a
    /// compacted gap), or nothing to read (at the log end, or the batch ends at or past
    /// `max_offset`); with the log start and end offsets the answer reports.
    pub(crate) fn read_start(&self, offset: i64, max_offset: i64) -> Result<ReadStart> {
        let (lso, leo, targets) = {
            let st = self.state.read();
            let (lso, leo) = (st.log_start_offset, st.log_end_offset);
            if offset < lso || offset > leo {
                return Err(LogError::OffsetOutOfRange {
                    offset,
                    log_start_offset: lso,
                    log_end_offset: leo,
                });
            }
            if offset == leo || offset >= max_offset {
                return Ok(ReadStart::nothing(lso, leo));
            }
            (lso, leo, st.read_targets(offset))
        };
        for (file, start, size) in targets {
            let Some((position, header)) = file.translate_offset(offset, start, size)? else {
                continue;
            };
            if header.last_offset() >= max_offset {
                break;
            }
            return Ok(ReadStart {
                log_start_offset: lso,
                log_end_offset: leo,
                batch: Some((file, position, header, size)),
            });
        }
        Ok(ReadStart::nothing(lso, leo))
    }

    /// Whole batches from the one holding `offset`; see the crate docs (KIP-74 semantics).
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_batch: bool,
    ) -> Result<FetchData> {
        let start = self.read_start(offset, max_offset)?;
        let answer = |records: Bytes| FetchData {
            records,
            log_start_offset: start.log_start_offset,
            log_end_offset: start.log_end_offset,
        };
        let Some((file, pos, h, size)) = &start.batch else {
            return Ok(answer(Bytes::new()));
        };
        let first = h.total_size();
        let avail = (size - pos) as usize;
        let want = max_bytes.min(avail);
        if want < first {
            if !min_one_batch {
                return Ok(answer(Bytes::new()));
            }
            return Ok(answer(Bytes::from(file.read_exact_at(*pos, first)?)));
        }
        let mut buf = file.read_exact_at(*pos, want)?;
        let mut p = first;
        while p + HEADER_SIZE <= buf.len() {
            let Some(h) = BatchHeader::parse(&buf[p..]) else {
                break;
            };
            if h.batch_length < 0 || p + h.total_size() > buf.len() || h.last_offset() >= max_offset
            {
                break;
            }
            p += h.total_size();
        }
        buf.truncate(p);
        Ok(answer(Bytes::from(buf)))
    }

    /// fsyncs the segments up to the log end offset and advances the recovery point.
    pub fn flush(&self) -> Result<()> {
        let leo = self.log_end_offset();
        self.flush_up_to(leo)
    }

    /// fsyncs every segment holding offsets below `offset` and moves the recovery point there.
    pub fn flush_up_to(&self, offset: i64) -> Result<()> {
        self.flush_up_to_with(offset, Durability::Synced)
    }

    /// [`Self::flush_up_to`]; with [`Durability::Unsynced`] the segments are left for a sync of
    /// the file system (only at close, where the clean-shutdown marker waits for that sync).
    fn flush_up_to_with(&self, offset: i64, durability: Durability) -> Result<()> {
        let mut rp = self.recovery_point.lock();
        if offset <= *rp {
            return Ok(());
        }
        if durability == Durability::Synced {
            let files: Vec<Arc<SegmentFile>> = {
                let st = self.state.read();
                st.segments
                    .iter()
                    .filter(|s| s.next_offset > *rp && s.base_offset < offset)
                    .map(|s| Arc::clone(&s.file))
                    .collect()
            };
            for f in files {
                f.sync_data()?;
            }
        }
        *rp = offset;
        write_offset_checkpoint(&self.dir().join(RECOVERY_POINT_FILE), offset, durability)
    }

    /// Flushes, then persists indexes, the producer snapshot, the epoch cache and the log start
    /// offset, so the next open can be a clean one.
    pub fn close(&self) -> Result<()> {
        self.close_with(Durability::Synced)
    }

    /// [`Self::close`] that fsyncs nothing, for a caller closing many logs: it syncs the file
    /// system once before writing the clean-shutdown marker that vouches for them.
    pub(crate) fn close_unsynced(&self) -> Result<()> {
        self.close_with(Durability::Unsynced)
    }

    fn close_with(&self, durability: Durability) -> Result<()> {
        let _writer = self.writer.lock();
        self.close_locked(durability)
    }

    /// [`Self::close`] for a caller that holds the writer lock.
    pub(crate) fn close_locked(&self, durability: Durability) -> Result<()> {
        self.flush_up_to_with(self.log_end_offset(), durability)?;
        let (snapshots, leo, lso) = {
            let st = self.state.read();
            let snaps: Vec<_> = st
                .segments
                .iter()
                .filter(|s| s.dirty || std::ptr::eq(*s, st.active()))
                .map(Segment::index_snapshot)
                .collect();
            (snaps, st.log_end_offset, st.log_start_offset)
        };
        for s in &snapshots {
            s.write(durability)?;
        }
        {
            let mut st = self.state.write();
            for s in &mut st.segments {
                s.dirty = false;
            }
        }
        self.write_producer_snapshot(leo, durability)?;
        self.epochs.lock().persist(durability)?;
        // No file means 0 (see the loader): a log that never moved its start writes none.
        let lso_path = self.dir().join(LOG_START_OFFSET_FILE);
        if lso != 0 || lso_path.exists() {
            write_offset_checkpoint(&lso_path, lso, durability)?;
        }
        Ok(())
    }
}

impl PartitionLog {
    /// Takes over the state of `fresh`, the same log opened from `dir` in the log dir whose
    /// space is `space`: from now on this log reads and writes there. The caller holds the
    /// writer lock, and `fresh` was opened from a copy of this log as it is.
    pub(crate) fn take_over(&self, fresh: PartitionLog, dir: PathBuf, space: Arc<DirSpace>) {
        let PartitionLog {
            state,
            producers,
            epochs,
            recovery_point,
            cleaner_checkpoint,
            ..
        } = fresh;
        *self.state.write() = state.into_inner();
        *self.producers.lock() = producers.into_inner();
        *self.epochs.lock() = epochs.into_inner();
        *self.recovery_point.lock() = recovery_point.into_inner();
        self.cleaner_checkpoint.store(
            cleaner_checkpoint.into_inner(),
            std::sync::atomic::Ordering::Release,
        );
        *self.dir.write() = dir;
        *self.space.write() = space;
    }

    /// Flushes segments that were rolled but not yet fsynced (Kafka flushes them after a roll),
    /// moving the recovery point to the active segment's base offset.
    pub fn flush_rolled_segments(&self) -> Result<()> {
        let active_base = self.state.read().active().base_offset;
        self.flush_up_to(active_base)
    }
}

/// KIP-937's bounds on CreateTime timestamps: a batch with a record more than
/// `message.timestamp.before.max.ms` before the broker's time, or more than
/// `message.timestamp.after.max.ms` after it, is refused whole, naming each record out of range
/// (Kafka's record errors). -1 (no timestamp) passes.
///
/// A v2 header's base timestamp is its first record's (librdkafka's), not the smallest, so a
/// finite `before.max` is checked record by record; its default (none) costs nothing. The
/// header's max timestamp bounds every record for `after.max`.
fn check_timestamps(
    records: &[u8],
    headers: &[BatchHeader],
    now: i64,
    config: &LogConfig,
) -> Result<()> {
    let each_record = config.timestamp_before_max_ms != i64::MAX;
    let mut pos = 0usize;
    for h in headers {
        let size = h.total_size();
        let oldest = h.base_timestamp.min(h.max_timestamp);
        let too_old = oldest >= 0 && now.saturating_sub(oldest) > config.timestamp_before_max_ms;
        let too_new = h.max_timestamp >= 0
            && h.max_timestamp.saturating_sub(now) > config.timestamp_after_max_ms;
        if too_old || too_new || each_record {
            let out_of_range = crate::records::records_out_of_time(
                &records[pos..pos + size],
                now,
                config.timestamp_before_max_ms,
                config.timestamp_after_max_ms,
            )?;
            if !out_of_range.is_empty() {
                return Err(LogError::TimestampsRejected(out_of_range));
            }
        }
        if too_old || too_new {
            // The header's bounds are out of range but no record is (a header that does not
            // match its records): refuse the batch as a whole.
            return Err(LogError::InvalidTimestamp(format!(
                "the timestamps of the batch at base offset {} ({}..={}) are outside \
                 message.timestamp.before.max.ms ({} ms) / message.timestamp.after.max.ms \
                 ({} ms) of the broker's time {now}",
                h.base_offset,
                h.base_timestamp,
                h.max_timestamp,
                config.timestamp_before_max_ms,
                config.timestamp_after_max_ms
            )));
        }
        pos += size;
    }
    Ok(())
}
