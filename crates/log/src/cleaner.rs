//! Log compaction, Kafka's `LogCleaner` for `cleanup.policy=compact` (and `compact,delete`,
//! where retention keeps running as for any log).
//!
//! A pass ([`PartitionLog::clean`]):
//! 1. The *cleanable range* is the closed segments from the oldest one up to, not including,
//!    the first segment that is active, holds a record younger than `min.compaction.lag.ms`
//!    (by the segment's largest timestamp), or reaches the first unstable offset (the first
//!    batch of the oldest ongoing transaction), so the outcome of every transaction with data
//!    in the range is known. The active segment is never touched. Its end is the *first
//!    uncleanable offset*.
//! 2. The *dirty range* starts at the cleaner checkpoint (`cleaner-offset-checkpoint` in the
//!    partition directory: the first uncleanable offset of the previous pass) and ends at the
//!    first uncleanable offset. An offset map key -> latest offset is built over it, leaving
//!    out the records of aborted transactions (an aborted value never supersedes anything).
//! 3. Every segment of the cleanable range is rewritten keeping a record unless: its key is in
//!    the map with a larger offset (superseded); it has no key (Kafka refuses those at produce on
//!    compacted topics, they can only predate the policy change, and Kafka's cleaner drops them
//!    too); it is an expired tombstone (below); or its batch belongs to an aborted transaction
//!    (a transactional batch of a producer inside the range of an entry of the aborted
//!    transaction index, Kafka's rule).
//!    Kept records keep their offset, timestamp, key, value and headers byte for byte. A batch
//!    whose records all stay is copied unchanged; otherwise it is re-encoded with the same
//!    leader epoch, attributes (codec, timestamp type), producer id, epoch and base sequence, its
//!    base offset becoming the first kept record's offset. The last batch of every producer
//!    known to the producer state keeps its header exactly (base offset, last offset delta,
//!    sequences, timestamps) even when records go, and may become an empty batch, as in Kafka,
//!    so producer state can still be rebuilt from the log. The last batch of every segment
//!    keeps its span the same way, so a segment never becomes empty and still ends at the same
//!    offset: segment base offsets (and with them the log start offset after a restart) never
//!    move, and a fetch at an offset in a gap always finds a later batch (or the log end).
//!    Segments in which nothing is removed are not rewritten.
//! 4. The checkpoint moves to the first uncleanable offset.
//!
//! Tombstone rule (the simple form of Kafka's delete horizon): a tombstone (null value) in the
//! cleanable range is dropped once its timestamp is older than `delete.retention.ms`, i.e. when
//! `timestamp < now - delete.retention.ms`, where the timestamp is the record's CreateTime, or the
//! batch's append time for LogAppendTime topics. Until then it is kept (and still supersedes
//! older values of its key). Producers that send timestamps far in the past shorten this window,
//! as they do for `retention.ms`.
//!
//! Swapping a rewritten segment in: the new content is written to `<base>.log.cleaned` and
//! fsynced, without any of the log's locks (appends and fetches continue). Then, under the
//! writer mutex: the segment is checked to still be in the log (retention or truncation may have
//! removed it, in which case the result is discarded); the file is renamed to `.log.swap`, the
//! old `.index`/`.timeindex` are removed, `.log.swap` is renamed over `.log`, the directory is
//! fsynced, the rebuilt indexes are written, and the segment is replaced in the list under the
//! state write lock. Readers that picked the old segment keep reading the old file through
//! their open handle. After a crash, [`crate::loader`] deletes `*.cleaned` files and completes a
//! leftover `<base>.log.swap` (renaming it over `<base>.log`, dropping that segment's index
//! files so they are rebuilt), or deletes it if `<base>.log` is gone.
//!
//! Transaction markers (control batches), Kafka's rule: the pass follows each producer's
//! transaction through the range in offset order. A marker whose transaction has a batch left
//! after the pass (a kept record, or an empty batch kept as a producer's or segment's last batch)
//! is kept as is. Otherwise (aborted data removed, committed records all superseded, or no data
//! at all) the first such pass sets its delete horizon as Kafka does (KIP-534: attribute bit
//! 0x40, base timestamp = now + `delete.retention.ms`, record timestamps unchanged) and the
//! first pass at or after the horizon removes it; a segment's last batch becomes an empty
//! control batch keeping its span (replay and readers ignore those). The horizon starts when
//! the data is gone, not at the marker's timestamp (the tombstone rule above would let a
//! consumer that read the data miss the marker and keep the producer aborted), so the tombstone
//! rule is not reused; only its background trigger is, firing at the earliest pending horizon.
//! A producer's markers of its current epoch after its last data batch are never removed: they
//! carry its epoch and coordinator epoch for a rebuild of producer state from the log (Kafka
//! keeps them too). The `.txnindex` entry of an ABORT whose data is gone is dropped in the same
//! rewrite that sets the horizon (as Kafka's cleaned index does): read_committed fetches need
//! it only while aborted data can be returned, and the marker outlives it. An entry stays as
//! long as any batch of its transaction does, so a replay after a crash rebuilds the same index.
//! Nothing at or past the first unstable offset is in the cleanable range.

//! Offsets never change; the log start offset, the leader-epoch cache and producer snapshots are
//! untouched. Reads at an offset that was cleaned away return the next batch (the read path
//! returns whole batches starting at the first batch whose last offset is >= the fetch offset).
//! The offset map is an in-memory hash map of the dirty range's keys; memory is proportional to
//! the number of distinct keys in it.
//!
//! The background cleaner ([`crate::LogManager::clean_dirty_logs`], every
//! `log.cleaner.backoff.ms`) picks a compacted log when its
//! dirty ratio (bytes of cleanable segments at or after the checkpoint / bytes of all cleanable
//! segments) is at least `min.cleanable.dirty.ratio`, or when the oldest record of the dirty
//! range is older than `max.compaction.lag.ms`, or when a tombstone the previous pass of this
//! process kept has since passed `delete.retention.ms` or a marker it kept reached its delete
//! horizon (so tombstones of a log that receives no
//! more writes still go; after a restart that happens with the next pass). [`crate::LogManager::clean_all`] and
//! [`PartitionLog::clean`] run a pass regardless.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::{debug, info, warn};

use crate::batch::{BatchHeader, Scan};
use crate::config::LogConfig;
use crate::epoch_cache::{read_offset_checkpoint, write_offset_checkpoint};
use crate::error::{LogError, Result};
use crate::index::Durability;
use crate::log::PartitionLog;
use crate::records::{decode_batch, rebuild_batch, with_delete_horizon, RecordView};
use crate::segment::{
    remove_if_exists, segment_path, sync_dir, BatchScanner, Segment, SegmentFile,
};
use crate::txn::{AbortedTxn, TxnMarker, TxnResult};

/// Per-partition file holding the cleaner checkpoint (first offset not yet cleaned).
pub const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

/// What one cleaning pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanStats {
    /// Start of the dirty range (the checkpoint before the pass, at least the first segment).
    pub first_dirty_offset: i64,
    /// End of the cleaned range and the new checkpoint (-1 when nothing was cleanable).
    pub cleaned_up_to: i64,
    /// Segments in the cleanable range.
    pub segments_scanned: usize,
    /// Segments rewritten and swapped in.
    pub segments_rewritten: usize,
    /// Rewritten segments dropped because retention or truncation removed the original meanwhile.
    pub segments_aborted: usize,
    /// Keys in the offset map.
    pub keys_in_map: usize,
    pub records_read: u64,
    /// Records removed because a later record has the same key.
    pub superseded_removed: u64,
    /// Tombstones removed after `delete.retention.ms`.
    pub tombstones_removed: u64,
    /// Records without a key removed.
    pub keyless_removed: u64,
    /// Tombstones still kept in the cleaned range (younger than `delete.retention.ms`).
    pub tombstones_kept: u64,
    /// Records removed because their transaction was aborted.
    pub aborted_removed: u64,
    /// Transaction markers removed (their transaction's data gone and their delete horizon
    /// passed).
    pub markers_removed: u64,
    /// Markers whose delete horizon this pass set (their transaction's data is gone).
    pub marker_horizons_set: u64,
    /// Aborted-transaction index entries dropped (their transaction's data is gone).
    pub txn_index_entries_removed: u64,
    /// Sizes of the rewritten segments before and after.
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// A closed segment as seen when the pass started.
struct SegView {
    file: Arc<SegmentFile>,
    base: i64,
    size: u64,
    next_offset: i64,
    /// Timestamp of the first batch (max lag), else the largest timestamp.
    first_ts: i64,
    created_ms: i64,
}

/// What a pass decides records by.
#[derive(Clone, Copy)]
struct Pass<'a> {
    /// Key -> latest offset in the dirty range.
    map: &'a HashMap<Vec<u8>, i64>,
    /// `(producer id, last offset)` of each producer's last batch.
    retain: &'a std::collections::HashSet<(i64, i64)>,
    /// Tombstones with a timestamp below this go.
    horizon: i64,
    aborted: &'a AbortedRanges,
    /// Producer id -> (epoch, last data offset): its markers of that epoch past that offset
    /// are kept whole (see [`crate::producer_state::ProducerStateManager::latest_marker_bounds`]).
    marker_bounds: &'a HashMap<i64, (i16, i64)>,
    now: i64,
    config: &'a LogConfig,
}

/// What the pass learns of transactions while it goes through the cleanable range in offset
/// order (Kafka's `CleanedTransactionMetadata`).
struct TxnTracker {
    /// Producer id -> whether a batch of its current transaction (the batches since its last
    /// marker) stays in the log after this pass, even as an empty batch.
    open: HashMap<i64, bool>,
    /// Offsets of the ABORT markers whose transaction has no batch left: their index entries go.
    dropped_entries: HashSet<i64>,
    /// Earliest delete horizon of a marker kept only until then (i64::MAX if none).
    next_horizon: i64,
}

/// The aborted transactions overlapping the cleanable range, by producer id: `(first offset,
/// marker offset)`. A producer has one transaction at a time, so its ranges never overlap.
#[derive(Default)]
struct AbortedRanges(HashMap<i64, Vec<(i64, i64)>>);

impl AbortedRanges {
    fn new(entries: &[AbortedTxn]) -> AbortedRanges {
        let mut map: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
        for t in entries {
            map.entry(t.producer_id)
                .or_default()
                .push((t.first_offset, t.last_offset));
        }
        AbortedRanges(map)
    }

    /// Whether `h` is a data batch of an aborted transaction.
    fn contains(&self, h: &BatchHeader) -> bool {
        if !h.is_transactional() || h.is_control() || self.0.is_empty() {
            return false;
        }
        self.0.get(&h.producer_id).is_some_and(|ranges| {
            ranges
                .iter()
                .any(|&(first, last)| first <= h.base_offset && h.base_offset <= last)
        })
    }
}

/// The cleanable range.
struct Cleanable {
    segments: Vec<SegView>,
    first_uncleanable: i64,
}

/// Calls `f` with every batch (header and bytes) of a segment, CRC-checked.
fn for_each_batch(
    view: &SegView,
    mut f: impl FnMut(u64, &BatchHeader, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut scanner = BatchScanner::new(&view.file, 0, view.size);
    loop {
        let pos = scanner.pos;
        let (scan, bytes) = scanner.next_batch(true)?;
        match scan {
            Scan::Valid(h) => f(pos, &h, bytes)?,
            Scan::Torn if pos >= view.size => return Ok(()),
            Scan::Torn => {
                return Err(LogError::CorruptMessage(format!(
                    "cleaner: torn batch at position {pos} of closed segment {}",
                    view.base
                )))
            }
            Scan::Corrupt(why) => {
                return Err(LogError::CorruptMessage(format!(
                    "cleaner: segment {}: {why}",
                    view.base
                )))
            }
        }
    }
}

impl PartitionLog {
    /// The cleaner checkpoint: offsets below it were cleaned by an earlier pass (-1 if none).
    pub fn cleaner_checkpoint(&self) -> i64 {
        self.cleaner_checkpoint.load(Ordering::Acquire)
    }

    pub(crate) fn load_cleaner_checkpoint(dir: &Path) -> i64 {
        match read_offset_checkpoint(&dir.join(CLEANER_CHECKPOINT_FILE)) {
            Ok(cp) => cp.unwrap_or(-1),
            Err(e) => {
                warn!(dir = %dir.display(), error = %e, "unreadable cleaner checkpoint, cleaning from the start");
                -1
            }
        }
    }

    fn set_cleaner_checkpoint(&self, offset: i64) -> Result<()> {
        write_offset_checkpoint(
            &self.dir().join(CLEANER_CHECKPOINT_FILE),
            offset,
            Durability::Synced,
        )?;
        self.cleaner_checkpoint.store(offset, Ordering::Release);
        Ok(())
    }

    /// Truncation removed offsets at or past `offset`: whatever is appended there again is dirty.
    pub(crate) fn lower_cleaner_checkpoint(&self, offset: i64) -> Result<()> {
        let _pass = self.cleaner_lock.lock();
        if self.cleaner_checkpoint() > offset {
            self.set_cleaner_checkpoint(offset)?;
        }
        Ok(())
    }

    fn cleanable(&self, config: &LogConfig, now: i64) -> Cleanable {
        // Read first: a transaction starting meanwhile starts in the active segment.
        let first_unstable = self.producers.lock().first_unstable_offset();
        let st = self.state.read();
        let closed = &st.segments[..st.segments.len() - 1];
        let mut segments = Vec::new();
        let mut first_uncleanable = st.active().base_offset;
        for s in closed {
            let largest = s.largest_timestamp();
            let lagging = config.min_compaction_lag_ms > 0
                && now.saturating_sub(largest) < config.min_compaction_lag_ms;
            if lagging || first_unstable.is_some_and(|u| s.next_offset > u) {
                first_uncleanable = s.base_offset;
                break;
            }
            segments.push(SegView {
                file: Arc::clone(&s.file),
                base: s.base_offset,
                size: s.size,
                next_offset: s.next_offset,
                first_ts: s
                    .first_batch_timestamp
                    .filter(|t| *t >= 0)
                    .unwrap_or(largest),
                created_ms: s.created_ms,
            });
        }
        Cleanable {
            segments,
            first_uncleanable,
        }
    }

    /// Share of the cleanable bytes at or after the cleaner checkpoint (0 when nothing is
    /// cleanable or the log is not compacted).
    pub fn dirty_ratio(&self) -> f64 {
        let config = self.config();
        if !config.compact {
            return 0.0;
        }
        let c = self.cleanable(&config, self.clock.now_ms());
        let cp = self.cleaner_checkpoint();
        let total: u64 = c.segments.iter().map(|s| s.size).sum();
        let dirty: u64 = c
            .segments
            .iter()
            .filter(|s| s.next_offset > cp)
            .map(|s| s.size)
            .sum();
        if total == 0 {
            0.0
        } else {
            dirty as f64 / total as f64
        }
    }

    /// Whether the background cleaner should clean this log now: compacted, and either
    /// something is dirty and the dirty ratio reaches `min.cleanable.dirty.ratio` or the oldest
    /// dirty record is older than `max.compaction.lag.ms`, or a tombstone kept by the last pass
    /// (of this process) has passed `delete.retention.ms`, or a marker it kept reached its
    /// delete horizon.
    pub fn needs_cleaning(&self) -> bool {
        let config = self.config();
        if !config.compact {
            return false;
        }
        let now = self.clock.now_ms();
        let c = self.cleanable(&config, now);
        let cp = self.cleaner_checkpoint();
        let total: u64 = c.segments.iter().map(|s| s.size).sum();
        let dirty: Vec<&SegView> = c.segments.iter().filter(|s| s.next_offset > cp).collect();
        let dirty_bytes: u64 = dirty.iter().map(|s| s.size).sum();
        if total > 0 && now > self.tombstone_expiry.load(Ordering::Acquire) {
            return true;
        }
        if dirty_bytes == 0 || total == 0 {
            return false;
        }
        if dirty_bytes as f64 / total as f64 >= config.min_cleanable_dirty_ratio {
            return true;
        }
        config.max_compaction_lag_ms < i64::MAX
            && dirty
                .first()
                .is_some_and(|s| now.saturating_sub(s.first_ts) > config.max_compaction_lag_ms)
    }

    /// Runs one cleaning pass now, whatever the dirty ratio; a no-op unless `config.compact`.
    /// See the [module docs](crate::cleaner) for what is kept. Appends and reads continue while
    /// the pass runs; passes on one log are serialized.
    pub fn clean(&self) -> Result<CleanStats> {
        let config = self.config();
        let mut stats = CleanStats {
            cleaned_up_to: -1,
            ..CleanStats::default()
        };
        if !config.compact {
            return Ok(stats);
        }
        let _pass = self.cleaner_lock.lock();
        let now = self.clock.now_ms();
        let c = self.cleanable(&config, now);
        let Some(first) = c.segments.first() else {
            return Ok(stats);
        };
        let cp = self.cleaner_checkpoint();
        let first_dirty = cp.max(first.base);
        stats.first_dirty_offset = first_dirty;
        stats.segments_scanned = c.segments.len();
        let aborted =
            AbortedRanges::new(&self.collect_aborted_transactions(first.base, c.first_uncleanable));

        // Offset map over the dirty range.
        let mut map: HashMap<Vec<u8>, i64> = HashMap::new();
        for s in c.segments.iter().filter(|s| s.next_offset > first_dirty) {
            for_each_batch(s, |_, h, bytes| {
                if h.last_offset() < first_dirty || h.is_control() || aborted.contains(h) {
                    return Ok(());
                }
                let d = decode_batch(bytes)?;
                for r in d.records.iter().filter(|r| r.offset >= first_dirty) {
                    if let Some(k) = d.key(r) {
                        match map.get_mut(k) {
                            Some(o) => *o = (*o).max(r.offset),
                            None => {
                                map.insert(k.to_vec(), r.offset);
                            }
                        }
                    }
                }
                Ok(())
            })?;
        }
        stats.keys_in_map = map.len();

        let (retain, marker_bounds) = {
            let producers = self.producers.lock();
            (
                producers.last_batch_offsets(),
                producers.latest_marker_bounds(),
            )
        };
        let horizon = now.saturating_sub(config.delete_retention_ms.max(0));
        let pass = Pass {
            map: &map,
            retain: &retain,
            horizon,
            aborted: &aborted,
            marker_bounds: &marker_bounds,
            now,
            config: &config,
        };
        let mut oldest_kept_tombstone = i64::MAX;
        let mut txns = TxnTracker {
            open: HashMap::new(),
            dropped_entries: HashSet::new(),
            next_horizon: i64::MAX,
        };
        for s in &c.segments {
            self.clean_segment(s, &pass, &mut stats, &mut oldest_kept_tombstone, &mut txns)?;
        }
        let tombstone_expiry = if oldest_kept_tombstone == i64::MAX {
            i64::MAX
        } else {
            oldest_kept_tombstone.saturating_add(config.delete_retention_ms.max(0))
        };
        // A marker goes once `now >= horizon`; the trigger fires once `now > expiry`.
        let expiry = tombstone_expiry.min(txns.next_horizon.saturating_sub(1));
        self.tombstone_expiry.store(expiry, Ordering::Release);
        let new_cp = c.first_uncleanable.max(cp);
        self.set_cleaner_checkpoint(new_cp)?;
        stats.cleaned_up_to = new_cp;
        info!(tp = %self.tp, first_dirty, cleaned_up_to = new_cp,
            rewritten = stats.segments_rewritten, superseded = stats.superseded_removed,
            tombstones = stats.tombstones_removed, bytes_before = stats.bytes_before,
            bytes_after = stats.bytes_after, "log cleaning pass done");
        Ok(stats)
    }

    /// Rewrites one segment if anything in it goes, and swaps it in.
    fn clean_segment(
        &self,
        s: &SegView,
        pass: &Pass<'_>,
        stats: &mut CleanStats,
        oldest_kept_tombstone: &mut i64,
        txns: &mut TxnTracker,
    ) -> Result<()> {
        let Pass {
            map,
            retain,
            horizon,
            aborted,
            config,
            ..
        } = *pass;
        let dropped_before = txns.dropped_entries.len();
        let cleaned_path = segment_path(&self.dir(), s.base, "log.cleaned");
        let mut out: Option<BufWriter<File>> = None;
        let mut written = 0u64;
        let result = for_each_batch(s, |pos, h, bytes| {
            stats.records_read += h.records_count.max(0) as u64;
            // The segment's last batch keeps its span so the segment still ends at the same
            // offset: a fetch in a gap always finds a later batch.
            let last_in_segment = pos + h.total_size() as u64 >= s.size;
            let new_bytes: Option<Vec<u8>> = if h.is_control() {
                Self::clean_marker(h, bytes, last_in_segment, pass, stats, txns)?
            } else {
                let d = decode_batch(bytes)?;
                let mut kept: Vec<&RecordView> = Vec::with_capacity(d.records.len());
                let aborted_batch = aborted.contains(h);
                for r in &d.records {
                    if aborted_batch {
                        stats.aborted_removed += 1;
                        continue;
                    }
                    match d.key(r) {
                        None => stats.keyless_removed += 1,
                        Some(k) if map.get(k).is_some_and(|&o| o > r.offset) => {
                            stats.superseded_removed += 1
                        }
                        Some(_) if r.null_value && d.timestamp_of(r) < horizon => {
                            stats.tombstones_removed += 1
                        }
                        Some(_) => {
                            if r.null_value {
                                stats.tombstones_kept += 1;
                                *oldest_kept_tombstone =
                                    (*oldest_kept_tombstone).min(d.timestamp_of(r));
                            }
                            kept.push(r)
                        }
                    }
                }
                let new_bytes = if kept.len() == d.records.len() {
                    None
                } else {
                    let keep_header = last_in_segment
                        || (h.has_producer_id()
                            && retain.contains(&(h.producer_id, h.last_offset())));
                    if kept.is_empty() && !keep_header {
                        Some(Vec::new())
                    } else {
                        Some(rebuild_batch(&d, &kept, keep_header)?)
                    }
                };
                if h.is_transactional() && h.has_producer_id() {
                    // Any batch left, even empty, keeps the marker: a replay of producer state
                    // would otherwise see a transaction that never ends.
                    let stays = new_bytes.as_ref().is_none_or(|b| !b.is_empty());
                    *txns.open.entry(h.producer_id).or_insert(false) |= stays;
                }
                new_bytes
            };
            match (new_bytes, out.as_mut()) {
                (None, None) => {}
                (None, Some(w)) => {
                    w.write_all(bytes).map_err(LogError::io_at(&cleaned_path))?;
                    written += bytes.len() as u64;
                }
                (Some(nb), w) => {
                    let w = match w {
                        Some(w) => w,
                        None => {
                            // First change: start the new file with the unchanged prefix.
                            let f = OpenOptions::new()
                                .read(true)
                                .write(true)
                                .create(true)
                                .truncate(true)
                                .open(&cleaned_path)
                                .map_err(LogError::io_at(&cleaned_path))?;
                            let mut w = BufWriter::with_capacity(1 << 20, f);
                            let mut p = 0u64;
                            while p < pos {
                                let n = (pos - p).min(1 << 20) as usize;
                                let chunk = s.file.read_exact_at(p, n)?;
                                w.write_all(&chunk)
                                    .map_err(LogError::io_at(&cleaned_path))?;
                                p += n as u64;
                            }
                            written = pos;
                            out.insert(w)
                        }
                    };
                    w.write_all(&nb).map_err(LogError::io_at(&cleaned_path))?;
                    written += nb.len() as u64;
                }
            }
            Ok(())
        });
        if let Err(e) = result {
            drop(out);
            let _ = remove_if_exists(&cleaned_path);
            return Err(e);
        }
        let Some(w) = out else {
            if txns.dropped_entries.len() > dropped_before {
                self.drop_txn_entries(s, &txns.dropped_entries, stats)?;
            }
            return Ok(());
        };
        let file = w
            .into_inner()
            .map_err(|e| LogError::io_at(&cleaned_path)(e.into_error()))?;
        file.sync_all().map_err(LogError::io_at(&cleaned_path))?;
        stats.bytes_before += s.size;
        stats.bytes_after += written;
        match self.swap_in(s, &cleaned_path, file, config, &txns.dropped_entries, stats) {
            Ok(true) => stats.segments_rewritten += 1,
            Ok(false) => stats.segments_aborted += 1,
            Err(e) => {
                let _ = remove_if_exists(&cleaned_path);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Replaces the segment of `view` with the fsynced `cleaned` file; false (and the file
    /// deleted) when the segment is no longer a closed segment of the log.
    fn swap_in(
        &self,
        view: &SegView,
        cleaned_path: &Path,
        file: File,
        config: &LogConfig,
        dropped_entries: &HashSet<i64>,
        stats: &mut CleanStats,
    ) -> Result<bool> {
        let mut seg = Segment::from_rewritten(
            &self.dir(),
            view.base,
            file,
            view.created_ms,
            config.index_interval_bytes,
        )?;
        let _writer = self.writer.lock();
        let idx = {
            let st = self.state.read();
            st.segments
                .iter()
                .position(|s| Arc::ptr_eq(&s.file, &view.file))
                .filter(|&i| i + 1 < st.segments.len())
        };
        let Some(idx) = idx else {
            debug!(tp = %self.tp, segment = view.base, "segment changed while cleaning, discarding");
            remove_if_exists(cleaned_path)?;
            return Ok(false);
        };
        // The index keeps the aborted transactions that still have a batch in the log; an
        // entry whose data is gone would only make read_committed consumers wait for a marker.
        let (kept, dropped): (Vec<AbortedTxn>, Vec<AbortedTxn>) = self.state.read().segments[idx]
            .txn_index
            .iter()
            .partition(|t| !dropped_entries.contains(&t.last_offset));
        stats.txn_index_entries_removed += dropped.len() as u64;
        seg.txn_index = kept;
        // A move copying this log meanwhile must copy the rewritten segment again.
        self.rewrites.fetch_add(1, Ordering::AcqRel);
        // The writer lock is held: a move cannot change the directory under the swap.
        let dir = self.dir();
        let swap: PathBuf = segment_path(&dir, view.base, "log.swap");
        fs::rename(cleaned_path, &swap).map_err(LogError::io_at(&swap))?;
        let _ = sync_dir(&dir);
        for suffix in ["index", "timeindex"] {
            remove_if_exists(&segment_path(&dir, view.base, suffix))?;
        }
        let target = segment_path(&dir, view.base, "log");
        fs::rename(&swap, &target).map_err(LogError::io_at(&target))?;
        let _ = sync_dir(&dir);
        // A closed segment: its indexes go to their files and are served from there.
        seg.offload_indexes(Durability::Synced)?;
        let old = std::mem::replace(&mut self.state.write().segments[idx], seg);
        // Counted again once the swap shows: a move that read the counter between the two
        // counts and the sizes before the swap copies the segment again as well.
        self.rewrites.fetch_add(1, Ordering::AcqRel);
        debug!(tp = %self.tp, segment = view.base, old_size = old.size, "swapped in cleaned segment");
        Ok(true)
    }

    /// What becomes of one control batch: `None` keeps it as it is, `Some(empty)` removes it,
    /// `Some(bytes)` replaces it (the delete horizon set, or an empty batch keeping the span).
    fn clean_marker(
        h: &BatchHeader,
        bytes: &[u8],
        last_in_segment: bool,
        pass: &Pass<'_>,
        stats: &mut CleanStats,
        txns: &mut TxnTracker,
    ) -> Result<Option<Vec<u8>>> {
        if h.records_count <= 0 {
            // A marker emptied by an earlier pass, kept for its segment's span.
            return Ok(None);
        }
        let marker = match TxnMarker::from_control_batch(bytes) {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(None),
            Err(e) => {
                warn!(offset = h.base_offset, error = %e, "cleaner: keeping an unreadable control batch");
                return Ok(None);
            }
        };
        if txns.open.remove(&h.producer_id).unwrap_or(false) {
            // Its transaction still has data a reader may reach: kept, horizon unset.
            return Ok(None);
        }
        if marker.result == TxnResult::Abort {
            txns.dropped_entries.insert(h.base_offset);
        }
        // The producer's latest markers carry its epoch and coordinator epoch for a rebuild of
        // producer state (Kafka keeps them as long as the producer is known too).
        let latest_of_producer =
            pass.marker_bounds
                .get(&h.producer_id)
                .is_some_and(|&(epoch, last_data)| {
                    h.producer_epoch == epoch && h.base_offset > last_data
                });
        match h.delete_horizon_ms() {
            None => {
                // First pass that finds the marker removable: it stays for delete.retention.ms
                // more, so a consumer that read its transaction's data still reaches it.
                let horizon = pass
                    .now
                    .saturating_add(pass.config.delete_retention_ms.max(0));
                if !latest_of_producer {
                    txns.next_horizon = txns.next_horizon.min(horizon);
                }
                stats.marker_horizons_set += 1;
                Ok(Some(with_delete_horizon(&decode_batch(bytes)?, horizon)?))
            }
            Some(horizon) if pass.now < horizon || latest_of_producer => {
                if !latest_of_producer {
                    txns.next_horizon = txns.next_horizon.min(horizon);
                }
                Ok(None)
            }
            Some(_) => {
                stats.markers_removed += 1;
                if last_in_segment {
                    Ok(Some(rebuild_batch(&decode_batch(bytes)?, &[], true)?))
                } else {
                    Ok(Some(Vec::new()))
                }
            }
        }
    }

    /// Drops the index entries in `dropped` from a segment that is not rewritten (its markers
    /// got their horizon in an earlier pass, e.g. before a restart rebuilt nothing).
    fn drop_txn_entries(
        &self,
        view: &SegView,
        dropped: &HashSet<i64>,
        stats: &mut CleanStats,
    ) -> Result<()> {
        let _writer = self.writer.lock();
        let mut st = self.state.write();
        let last = st.segments.len().saturating_sub(1);
        let Some(seg) = st.segments[..last]
            .iter_mut()
            .find(|s| Arc::ptr_eq(&s.file, &view.file))
        else {
            return Ok(());
        };
        let before = seg.txn_index.len();
        seg.txn_index.retain(|t| !dropped.contains(&t.last_offset));
        if seg.txn_index.len() != before {
            stats.txn_index_entries_removed += (before - seg.txn_index.len()) as u64;
            crate::txn::write_txn_index(
                &segment_path(&self.dir(), view.base, "txnindex"),
                &seg.txn_index,
                Durability::Synced,
            )?;
        }
        Ok(())
    }
}
