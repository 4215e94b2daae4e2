//! Moving a partition's log to another log dir of the same broker while it serves
//! (AlterReplicaLogDirs, KIP-113).
//!
//! 1. Without the writer lock: the `.log` files of the segments are copied, up to their
//!    published sizes, into `<dest>/<topic>-<partition>.<id>-future`. Appends and reads go on.
//! 2. With the cleaner's and the writer's locks (appends wait; reads do not): the log is
//!    closed as at shutdown (flushed; indexes, producer snapshot, epoch cache and start offset
//!    written), each segment's bytes appended since step 1 are copied (all of them if the
//!    segment is new, or if a truncation or compaction rewrote the log meanwhile), then every
//!    other file; all are fsynced. A `moved` marker goes in the
//!    copy, which is renamed to `<dest>/<topic>-<partition>`; the old directory is renamed to
//!    `-delete` and removed. The copy is opened as a cleanly closed log and this log takes over
//!    its state, so every holder of the log sees the new files. Reads that started on the old
//!    files finish on them: they stay readable while open.
//!
//! A crash in step 1 or 2 leaves a `-future` directory, which the next start removes: the log
//! is where it was, and the broker starts the move again ([`crate::LogManager::take_interrupted_moves`]). A crash between the two renames leaves the partition in
//! both dirs with the same bytes; the next start keeps the copy with the marker
//! ([`crate::LogManager`]).

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::{info, warn};

use crate::dir_space::DirSpace;
use crate::error::{LogError, Result};
use crate::index::Durability;
use crate::log::PartitionLog;
use crate::segment::{segment_path, sync_dir};

/// The file a finished copy carries: the partition is complete in this directory, whatever
/// another log dir still holds.
pub const MOVED_MARKER_FILE: &str = "moved";

/// What a move has copied so far, for DescribeLogDirs' future replica.
#[derive(Debug, Default)]
pub struct MoveProgress {
    pub copied_bytes: std::sync::atomic::AtomicU64,
    /// The copy holds every record below this offset (the base of the segment after the last
    /// one copied whole): the future replica's log end, for its offset lag.
    pub copied_to_offset: std::sync::atomic::AtomicI64,
}

impl MoveProgress {
    /// Back to nothing copied, for a move that starts again.
    pub fn reset(&self) {
        self.copied_bytes.store(0, Ordering::Relaxed);
        self.copied_to_offset.store(0, Ordering::Relaxed);
    }
}

impl PartitionLog {
    /// Moves this log's files into the log dir `dest` (a directory holding partition
    /// directories) and serves from there; `space` is that dir's space state. A log already in
    /// `dest` is left alone.
    pub fn relocate(
        &self,
        dest: &Path,
        space: Arc<DirSpace>,
        progress: &MoveProgress,
    ) -> Result<()> {
        self.relocate_with(dest, space, progress, &|| {})
    }

    /// [`Self::relocate`] that runs `between_steps` after the copy without the writer lock, for
    /// tests that change the log there.
    pub(crate) fn relocate_with(
        &self,
        dest: &Path,
        space: Arc<DirSpace>,
        progress: &MoveProgress,
        between_steps: &dyn Fn(),
    ) -> Result<()> {
        let old_dir = self.dir();
        if old_dir.parent() == Some(dest) {
            return Ok(());
        }
        let name = format!("{}-{}", self.tp.topic, self.tp.partition);
        let final_dir = dest.join(&name);
        if final_dir.exists() {
            return Err(LogError::KafkaStorage(format!(
                "{} already exists",
                final_dir.display()
            )));
        }
        let future = dest.join(format!("{name}.{}-future", self.clock.now_ms()));
        fs::create_dir_all(&future).map_err(LogError::io_at(&future))?;
        let moved = self.copy_then_switch(
            &old_dir,
            &future,
            &final_dir,
            space,
            progress,
            between_steps,
        );
        if moved.is_err() {
            if let Err(e) = fs::remove_dir_all(&future) {
                warn!(dir = %future.display(), error = %e, "could not remove an unfinished move");
            }
        }
        moved
    }

    fn copy_then_switch(
        &self,
        old_dir: &Path,
        future: &Path,
        final_dir: &Path,
        space: Arc<DirSpace>,
        progress: &MoveProgress,
        between_steps: &dyn Fn(),
    ) -> Result<()> {
        // A truncation or a compaction pass's swap from here on makes step 2 copy everything.
        let rewrites_before = self.rewrites.load(Ordering::Acquire);
        // Step 1: the bulk of the bytes, while the log serves.
        let sized = self.segment_sizes();
        let mut copied: HashMap<i64, u64> = HashMap::new();
        for (i, &(base, size)) in sized.iter().enumerate() {
            let from = segment_path(old_dir, base, "log");
            let to = segment_path(future, base, "log");
            match copy_range(&from, &to, 0, size) {
                Ok(()) => {
                    copied.insert(base, size);
                    progress.copied_bytes.fetch_add(size, Ordering::Relaxed);
                    if let Some(&(next, _)) = sized.get(i + 1) {
                        progress.copied_to_offset.store(next, Ordering::Relaxed);
                    }
                }
                // Retention deleted it meanwhile: step 2 does not copy it either.
                Err(e) if !from.exists() => {
                    let _ = fs::remove_file(&to);
                    tracing::debug!(error = %e, "segment went while being copied");
                }
                Err(e) => return Err(e),
            }
        }

        between_steps();
        // Step 2: the rest, with appends held. A compaction pass under way finishes first (its
        // swap would put a segment of the old directory into the moved log); none starts.
        let _cleaner = self.cleaner_lock.lock();
        let _writer = self.writer.lock();
        self.close_locked(Durability::Synced)?;
        let truncated = self.rewrites.load(Ordering::Acquire) != rewrites_before;
        let now = self.segment_sizes();
        for &(base, size) in &now {
            let from = segment_path(old_dir, base, "log");
            let to = segment_path(future, base, "log");
            match copied.get(&base) {
                Some(&done) if !truncated && done <= size => {
                    copy_range(&from, &to, done, size)?;
                    progress
                        .copied_bytes
                        .fetch_add(size - done, Ordering::Relaxed);
                }
                _ => {
                    let _ = fs::remove_file(&to);
                    copy_range(&from, &to, 0, size)?;
                    progress.copied_bytes.fetch_add(size, Ordering::Relaxed);
                }
            }
        }
        // Copies of segments retention deleted since step 1.
        for base in copied.keys().filter(|b| !now.iter().any(|(n, _)| n == *b)) {
            let _ = fs::remove_file(segment_path(future, *base, "log"));
        }
        // Every other file: indexes, snapshots, checkpoints. Leftover `.log` files that are no
        // segment's (a cleaner's unfinished swap) stay behind, as a restart would drop them.
        let entries = fs::read_dir(old_dir).map_err(LogError::io_at(old_dir))?;
        for entry in entries {
            let entry = entry.map_err(LogError::io_at(old_dir))?;
            let file_name = entry.file_name();
            let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
            let text = file_name.to_string_lossy();
            if !is_file || text.contains(".log") || text == MOVED_MARKER_FILE {
                continue;
            }
            let to = future.join(&file_name);
            copy_range(&entry.path(), &to, 0, u64::MAX)?;
        }
        sync_files_in(future)?;
        let marker = future.join(MOVED_MARKER_FILE);
        fs::File::create(&marker)
            .and_then(|f| f.sync_all())
            .map_err(LogError::io_at(&marker))?;
        fs::rename(future, final_dir).map_err(LogError::io_at(future))?;
        if let Some(parent) = final_dir.parent() {
            sync_dir(parent)?;
        }
        // From here the new copy is the log: a crash keeps it (the marker says so).
        let fresh = PartitionLog::open(
            final_dir.to_path_buf(),
            self.tp.clone(),
            self.config(),
            true,
            Arc::clone(&self.clock),
        )?;
        self.take_over(fresh, final_dir.to_path_buf(), space);
        let doomed = old_dir.with_file_name(format!(
            "{}.{}-delete",
            old_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            self.clock.now_ms()
        ));
        match fs::rename(old_dir, &doomed) {
            Ok(()) => {
                if let Some(parent) = doomed.parent() {
                    let _ = sync_dir(parent);
                }
                if let Err(e) = fs::remove_dir_all(&doomed) {
                    warn!(dir = %doomed.display(), error = %e, "could not remove a moved log's old directory");
                }
            }
            Err(e) => {
                warn!(dir = %old_dir.display(), error = %e, "could not remove a moved log's old directory; the next start does")
            }
        }
        // The marker has done its job once the old directory is gone.
        let _ = fs::remove_file(final_dir.join(MOVED_MARKER_FILE));
        info!(tp = %self.tp, from = %old_dir.display(), to = %final_dir.display(), "moved log to another log dir");
        Ok(())
    }
}

/// Copies `from[start..end)` into `to` at `start` (creating `to`); `end` past the file's length
/// copies to its end.
fn copy_range(from: &Path, to: &Path, start: u64, end: u64) -> Result<()> {
    let mut src = fs::File::open(from).map_err(LogError::io_at(from))?;
    let mut dst = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(to)
        .map_err(LogError::io_at(to))?;
    src.seek(SeekFrom::Start(start))
        .map_err(LogError::io_at(from))?;
    dst.seek(SeekFrom::Start(start))
        .map_err(LogError::io_at(to))?;
    let mut limited = src.take(end.saturating_sub(start));
    std::io::copy(&mut limited, &mut dst).map_err(LogError::io_at(to))?;
    dst.flush().map_err(LogError::io_at(to))?;
    Ok(())
}

/// fsyncs every file in `dir`, then `dir` itself.
fn sync_files_in(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir).map_err(LogError::io_at(dir))? {
        let path: PathBuf = entry.map_err(LogError::io_at(dir))?.path();
        fs::File::open(&path)
            .and_then(|f| f.sync_all())
            .map_err(LogError::io_at(&path))?;
    }
    sync_dir(dir)
}
