//! Kafka's `LogLoader`: turns a partition directory into segments and state at open.
//!
//! Clean start (the previous process closed the log): index files are trusted, only the tail of
//! each segment after its last offset index entry is read, and the producer snapshot written at
//! close covers the whole log, so nothing is replayed. Unclean start: every segment from the one
//! holding the persisted recovery point onward is scanned batch by batch (length, magic, CRC);
//! the first torn or corrupt batch cuts its segment there and later segments are dropped; indexes
//! of scanned segments are rebuilt and persisted, and producer state and the leader-epoch cache
//! are replayed from the batch headers. Every whole batch below the first bad byte survives.
//!
//! Aborted-transaction indexes (`.txnindex`) are trusted with the other indexes of a segment; a
//! segment that is recovered, or whose `.index`/`.timeindex` had to be rebuilt, gets its
//! `.txnindex` rebuilt too, from the replay of producer state: that replay then starts from a
//! snapshot at or below the first such segment (or from the first segment), so it knows the
//! transactions ongoing there. A control batch's type is in its record, so the replay reads the
//! (small) record of every control batch besides the headers.

use std::fs;
use std::path::Path;

use tracing::{info, warn};

use crate::batch::BatchHeader;
use crate::config::LogConfig;
use crate::epoch_cache::{read_offset_checkpoint, write_offset_checkpoint, LeaderEpochCache};
use crate::error::{LogError, Result};
use crate::index::Durability;
use crate::producer_state::{list_snapshots, snapshot_path, ProducerStateManager};
use crate::segment::segment_path;
use crate::segment::{remove_if_exists, BatchScanner, Segment};
use crate::txn::{write_txn_index, AbortedTxn, TxnMarker};

pub const LOG_START_OFFSET_FILE: &str = "log-start-offset";
pub const RECOVERY_POINT_FILE: &str = "recovery-point";

/// Everything [`load`] recovers from a partition directory.
pub(crate) struct Loaded {
    pub segments: Vec<Segment>,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub recovery_point: i64,
    pub producers: ProducerStateManager,
    pub epochs: LeaderEpochCache,
}

/// Finishes or discards what an interrupted cleaner swap left (see [`crate::cleaner`]):
/// `*.cleaned` files are deleted (the original segment is intact); `<base>.log.swap` is a complete,
/// fsynced replacement of `<base>.log`, renamed over it (with that segment's index files removed
/// so they are rebuilt) when `<base>.log` still exists, deleted otherwise.
fn complete_swaps(dir: &Path) -> Result<()> {
    for e in fs::read_dir(dir).map_err(LogError::io_at(dir))? {
        let e = e.map_err(LogError::io_at(dir))?;
        let path = e.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.ends_with(".cleaned") {
            warn!(file = %path.display(), "deleting an unfinished cleaned segment");
            remove_if_exists(&path)?;
            continue;
        }
        let Some(stem) = name.strip_suffix(".log.swap") else {
            continue;
        };
        let base = match stem.parse::<i64>() {
            Ok(b) if b >= 0 && stem.len() == 20 => b,
            _ => {
                remove_if_exists(&path)?;
                continue;
            }
        };
        let target = segment_path(dir, base, "log");
        if target.exists() {
            for suffix in ["index", "timeindex"] {
                remove_if_exists(&segment_path(dir, base, suffix))?;
            }
            fs::rename(&path, &target).map_err(LogError::io_at(&target))?;
            if let Ok(d) = fs::File::open(dir) {
                let _ = d.sync_all();
            }
            info!(segment = base, dir = %dir.display(), "completed an interrupted cleaner swap");
        } else {
            warn!(file = %path.display(), "deleting a swap file whose segment is gone");
            remove_if_exists(&path)?;
        }
    }
    Ok(())
}

/// Base offsets of the `.log` files in `dir`, ascending; removes leftovers of interrupted
/// operations (`*.tmp`, `*.deleted`, `*.swap`, `*.cleaned`) after completing cleaner swaps.
fn scan_dir(dir: &Path) -> Result<Vec<i64>> {
    complete_swaps(dir)?;
    let mut bases = Vec::new();
    for e in fs::read_dir(dir).map_err(LogError::io_at(dir))? {
        let e = e.map_err(LogError::io_at(dir))?;
        let path = e.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if [".tmp", ".deleted", ".swap", ".cleaned"]
            .iter()
            .any(|s| name.ends_with(s))
        {
            remove_if_exists(&path)?;
            continue;
        }
        if let Some(stem) = name.strip_suffix(".log") {
            match stem.parse::<i64>() {
                Ok(base) if base >= 0 && stem.len() == 20 => bases.push(base),
                _ => warn!(file = %path.display(), "ignoring unexpected file in log dir"),
            }
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Where a replay from offset `from` starts reading `seg` (the index entry at or below it),
/// `None` when the segment ends before `from` or is empty.
fn replay_start(seg: &Segment, from: i64) -> Option<u64> {
    if seg.next_offset <= from || seg.size == 0 {
        return None;
    }
    if from <= seg.base_offset {
        return Some(0);
    }
    let rel = (from - seg.base_offset).min(i64::from(u32::MAX)) as u32;
    Some(u64::from(seg.offset_index.lookup(rel)))
}

/// Calls `f` with every batch header whose last offset is >= `from`, in log order.
pub(crate) fn replay_headers(
    segments: &[Segment],
    from: i64,
    mut f: impl FnMut(&BatchHeader),
) -> Result<()> {
    for seg in segments {
        let Some(start) = replay_start(seg, from) else {
            continue;
        };
        let mut scanner = BatchScanner::new(&seg.file, start, seg.size);
        while let (crate::batch::Scan::Valid(h), _) = scanner.next_batch(false)? {
            if h.last_offset() >= from {
                f(&h);
            }
        }
    }
    Ok(())
}

/// Calls `f` with every batch whose last offset is >= `from`, in log order, with the marker of
/// each control batch (whose record is read from the file; an unreadable one is passed as
/// `None` after a warning: the batch passed its checks when appended).
pub(crate) fn replay_producer_batches(
    segments: &[Segment],
    from: i64,
    mut f: impl FnMut(&BatchHeader, Option<&TxnMarker>),
) -> Result<()> {
    for seg in segments {
        let Some(start) = replay_start(seg, from) else {
            continue;
        };
        let mut scanner = BatchScanner::new(&seg.file, start, seg.size);
        loop {
            let pos = scanner.pos;
            let h = match scanner.next_batch(false)?.0 {
                crate::batch::Scan::Valid(h) => h,
                _ => break,
            };
            if h.last_offset() < from {
                continue;
            }
            if !h.is_control() {
                f(&h, None);
                continue;
            }
            let bytes = seg.file.read_exact_at(pos, h.total_size())?;
            match TxnMarker::from_control_batch(&bytes) {
                Ok(m) => f(&h, m.as_ref()),
                Err(e) => {
                    warn!(offset = h.base_offset, error = %e, "unreadable control batch in replay");
                    f(&h, None);
                }
            }
        }
    }
    Ok(())
}

/// Producer state as of `log_end_offset`: the newest readable snapshot at or below it (at or
/// below `txn_index_from` when given), plus a replay of the batches after it. Snapshots past
/// the end are deleted. Also returns the transactions the replay saw aborted by markers at or
/// after `txn_index_from` (none when it is `None`), for the caller to rebuild those indexes.
pub(crate) fn rebuild_producer_state(
    dir: &Path,
    segments: &[Segment],
    log_end_offset: i64,
    txn_index_from: Option<i64>,
) -> Result<(ProducerStateManager, Vec<AbortedTxn>)> {
    let snaps = list_snapshots(dir)?;
    let limit = txn_index_from.map_or(log_end_offset, |t| t.min(log_end_offset));
    let mut loaded = None;
    for &off in snaps.iter().rev() {
        let path = snapshot_path(dir, off);
        if off > log_end_offset {
            remove_if_exists(&path)?;
            continue;
        }
        if off > limit {
            continue;
        }
        match ProducerStateManager::read_snapshot(&path) {
            Ok(state) => {
                loaded = Some((state, off));
                break;
            }
            Err(e) => {
                warn!(error = %e, "discarding unreadable producer snapshot");
                remove_if_exists(&path)?;
            }
        }
    }
    let (mut state, from) = loaded.unwrap_or_else(|| {
        let first = segments.first().map_or(0, |s| s.base_offset);
        (ProducerStateManager::default(), first)
    });
    let mut aborted = Vec::new();
    if from < log_end_offset {
        replay_producer_batches(segments, from, |h, m| {
            if let Some(a) = state.replay(h, m) {
                if txn_index_from.is_some_and(|t| a.last_offset >= t) {
                    aborted.push(a);
                }
            }
        })?;
    }
    Ok((state, aborted))
}

/// Replaces the aborted-transaction index of every segment from the one holding `from` on with
/// the entries of `aborted` (ordered by marker offset) and persists it.
fn rebuild_txn_indexes(
    segments: &mut [Segment],
    from: i64,
    aborted: Vec<AbortedTxn>,
    durability: Durability,
) -> Result<()> {
    let mut aborted = aborted.into_iter().peekable();
    let active = segments.len().saturating_sub(1);
    for (i, seg) in segments.iter_mut().enumerate() {
        if seg.base_offset < from {
            continue;
        }
        seg.txn_index.clear();
        while let Some(a) = aborted.next_if(|a| a.last_offset < seg.next_offset) {
            if a.last_offset >= seg.base_offset {
                seg.txn_index.push(a);
            }
        }
        if i == active {
            // Written with its other indexes at roll or close.
            seg.dirty = true;
            continue;
        }
        if let Some(dir) = seg.dir().map(Path::to_path_buf) {
            write_txn_index(
                &segment_path(&dir, seg.base_offset, "txnindex"),
                &seg.txn_index,
                durability,
            )?;
        }
    }
    Ok(())
}

/// Opens and, when `clean` is false, recovers the log in `dir`. With [`Durability::Synced`] the
/// recovered segments and every file written are fsynced and the recovery point is written.
/// With [`Durability::Unsynced`] nothing is fsynced and the recovery point file is left as it
/// was (older, so it only costs more recovery after a crash); the caller syncs the file system
/// before anything else is written, since the recovery point in memory is the log end.
pub(crate) fn load(
    dir: &Path,
    config: &LogConfig,
    clean: bool,
    now_ms: i64,
    durability: Durability,
) -> Result<Loaded> {
    fs::create_dir_all(dir).map_err(LogError::io_at(dir))?;
    let bases = scan_dir(dir)?;
    let lso_file = read_offset_checkpoint(&dir.join(LOG_START_OFFSET_FILE))?;
    let rp_path = dir.join(RECOVERY_POINT_FILE);
    // A missing checkpoint file means offset 0 (a new log writes none of them). A clean load
    // trusts every segment and has no use for the file: it is not read.
    let rp_file = if clean {
        Ok(None)
    } else {
        read_offset_checkpoint(&rp_path)
    };
    let recovery_point = if clean {
        i64::MAX
    } else {
        match &rp_file {
            Ok(rp) => rp.unwrap_or(0),
            Err(e) => {
                warn!(error = %e, "unreadable recovery point, recovering every segment");
                0
            }
        }
    };
    let first_to_recover = bases.partition_point(|&b| b <= recovery_point).max(1) - 1;

    let interval = config.index_interval_bytes;
    let mut segments: Vec<Segment> = Vec::with_capacity(bases.len());
    let mut recovered_from: Option<i64> = None;
    // First segment whose aborted-transaction index must be rebuilt from the log.
    let mut txn_index_from: Option<i64> = None;
    for (i, &base) in bases.iter().enumerate() {
        let mut seg = Segment::open(dir, base, now_ms)?;
        if clean || i < first_to_recover {
            if seg.load_clean(interval)? {
                txn_index_from.get_or_insert(base);
            }
            segments.push(seg);
            continue;
        }
        recovered_from.get_or_insert(base);
        let result = seg.recover(interval)?;
        if durability == Durability::Synced {
            seg.sync()?;
        }
        let cut = result.reason.is_some();
        // The active segment's indexes live in memory and go to their files at roll or close
        // (it stays dirty): writing them here would create three files per partition, which
        // is most of a mass recovery's time (ext4 inode allocation).
        if !cut && i + 1 < bases.len() {
            seg.persist_indexes(durability)?;
        }
        if let Some(reason) = &result.reason {
            warn!(
                dir = %dir.display(),
                segment = base,
                truncated_bytes = result.truncated_bytes,
                %reason,
                "recovery truncated the log at a torn or corrupt batch"
            );
        }
        segments.push(seg);
        if cut {
            for &later in &bases[i + 1..] {
                warn!(dir = %dir.display(), segment = later, "deleting segment after the truncation point");
                for suffix in ["log", "index", "timeindex", "txnindex"] {
                    remove_if_exists(&segment_path(dir, later, suffix))?;
                }
            }
            break;
        }
    }
    // Drop empty segments that end up in the middle (their successor starts at the same offset).
    let mut i = 0;
    while i + 1 < segments.len() {
        if segments[i].size == 0 {
            let s = segments.remove(i);
            s.delete_files()?;
        } else {
            i += 1;
        }
    }

    let log_start_offset = lso_file
        .unwrap_or(0)
        .max(segments.first().map_or(0, |s| s.base_offset));
    let mut log_end_offset = segments.last().map_or(log_start_offset, |s| s.next_offset);
    if segments.is_empty() || log_start_offset > log_end_offset {
        if !segments.is_empty() {
            warn!(dir = %dir.display(), log_start_offset, log_end_offset,
                "log end is below the log start offset; starting an empty log at the log start");
        }
        for s in segments.drain(..) {
            s.delete_files()?;
        }
        segments.push(Segment::create(dir, log_start_offset, now_ms)?);
        log_end_offset = log_start_offset;
    }
    if lso_file.unwrap_or(0) != log_start_offset {
        write_offset_checkpoint(
            &dir.join(LOG_START_OFFSET_FILE),
            log_start_offset,
            durability,
        )?;
    }

    let mut epochs = LeaderEpochCache::load(dir)?;
    let epochs_on_disk = epochs.entries().to_vec();
    epochs.truncate_from_end(log_end_offset);
    let epoch_replay_from = if epochs.latest_epoch().is_none() {
        Some(segments[0].base_offset)
    } else {
        recovered_from
    };
    if let Some(from) = epoch_replay_from {
        replay_headers(&segments, from, |h| {
            epochs.assign_in_memory(h.partition_leader_epoch, h.base_offset)
        })?;
    }
    // A tiered log's epochs below the local log start stay: the log goes on in the tier.
    if !config.remote_storage {
        epochs.truncate_from_start(log_start_offset);
    }
    if epochs.entries() != epochs_on_disk {
        epochs.persist(durability)?;
    }

    let txn_index_from = match (txn_index_from, recovered_from) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let (producers, aborted) =
        rebuild_producer_state(dir, &segments, log_end_offset, txn_index_from)?;
    if let Some(from) = txn_index_from {
        rebuild_txn_indexes(&mut segments, from, aborted, durability)?;
    }
    // Memory does not grow with retained data (issue 16): closed segments serve their indexes
    // from their files (those rebuilt above are written first; a rebuilt `.index` is written
    // only after the aborted-transaction index, since a new `.index` vouches for the
    // `.txnindex` beside it), the active one from memory.
    if let Some((active, closed)) = segments.split_last_mut() {
        for seg in closed {
            seg.offload_indexes(durability)?;
        }
        active.load_indexes_into_memory()?;
    }
    if durability == Durability::Synced && rp_file.ok().flatten().unwrap_or(0) != log_end_offset {
        write_offset_checkpoint(&rp_path, log_end_offset, durability)?;
    }
    if recovered_from.is_some() {
        info!(dir = %dir.display(), log_end_offset, "log recovered");
    }
    Ok(Loaded {
        segments,
        log_start_offset,
        log_end_offset,
        recovery_point: log_end_offset,
        producers,
        epochs,
    })
}
