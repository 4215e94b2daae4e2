//! [`DirSpace`]: whether a log dir's file system has room for partition data.
//!
//! A full disk is not a failed one (Kafka would take the dir offline; ferry keeps serving it):
//! reads go on, and appends fail with KAFKA_STORAGE_ERROR until space is freed. Once an append
//! met ENOSPC, the dir is *full*: further appends are refused before they touch the disk, so
//! that what the operator frees, and the metadata log's released reserve, is not eaten by
//! producers retrying, and so that a full dir costs no partial writes and truncations. A full
//! dir looks at its file system again at most every [`RECHECK_MS`] and takes appends once there
//! is room for the metadata reserve and a margin.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use ferry_common::SpaceReserve;
use tracing::{info, warn};

use crate::error::{LogError, Result};

/// How often a full dir looks at its free space again.
pub const RECHECK_MS: i64 = 250;
/// Free bytes a full dir needs, beyond a missing metadata reserve, before taking appends.
pub const RESUME_MARGIN_BYTES: u64 = 4 << 20;

/// The space state of one log dir, shared by the logs in it.
#[derive(Debug)]
pub struct DirSpace {
    path: PathBuf,
    full: AtomicBool,
    /// Clock time before which a full dir is not checked again.
    next_check_ms: AtomicI64,
    /// Times the dir became full (for the log line's count and tests).
    times_full: AtomicU64,
    /// The metadata log's reserve: its missing bytes must be free before appends resume.
    reserve: Arc<SpaceReserve>,
}

impl DirSpace {
    pub fn new(path: PathBuf, reserve: Arc<SpaceReserve>) -> Arc<DirSpace> {
        Arc::new(DirSpace {
            path,
            full: AtomicBool::new(false),
            next_check_ms: AtomicI64::new(0),
            times_full: AtomicU64::new(0),
            reserve,
        })
    }

    /// A dir nobody tracks (a log opened on its own, in tests and tools).
    pub fn untracked(path: &Path) -> Arc<DirSpace> {
        Self::new(path.to_path_buf(), Arc::new(SpaceReserve::none()))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_full(&self) -> bool {
        self.full.load(Ordering::Acquire)
    }

    pub fn times_full(&self) -> u64 {
        self.times_full.load(Ordering::Relaxed)
    }

    /// Ok when appends may write; on a full dir, looks at the free space (at most every
    /// [`RECHECK_MS`]) and stays full, answering ENOSPC, until there is room again.
    pub fn check_room(&self, now_ms: i64) -> Result<()> {
        if !self.is_full() {
            return Ok(());
        }
        let next = self.next_check_ms.load(Ordering::Acquire);
        if now_ms < next
            || self
                .next_check_ms
                .compare_exchange(
                    next,
                    now_ms + RECHECK_MS,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_err()
        {
            return Err(self.full_error());
        }
        let Some(mut free) = self.free_bytes() else {
            return Err(self.full_error());
        };
        let missing = self.reserve.missing_bytes();
        if missing > 0 && free >= missing + RESUME_MARGIN_BYTES && self.reserve.try_restore(now_ms)
        {
            free = self.free_bytes().unwrap_or(0);
        }
        let needed = self.reserve.missing_bytes() + RESUME_MARGIN_BYTES;
        if free < needed {
            return Err(self.full_error());
        }
        if self.full.swap(false, Ordering::AcqRel) {
            info!(dir = %self.path.display(), free_bytes = free, "log dir has room again: taking appends");
        }
        Ok(())
    }

    /// Notes the outcome of a write in this dir: a full disk marks the dir full.
    pub fn note_error(&self, e: &LogError, now_ms: i64) {
        if !e.is_disk_full() {
            return;
        }
        self.next_check_ms
            .store(now_ms + RECHECK_MS, Ordering::Release);
        if !self.full.swap(true, Ordering::AcqRel) {
            let n = self.times_full.fetch_add(1, Ordering::Relaxed) + 1;
            // Once per transition, not per refused append: the metric says it meanwhile.
            warn!(dir = %self.path.display(), times = n, error = %e,
                "log dir is full: appends to its partitions fail with KAFKA_STORAGE_ERROR until space is freed");
        }
    }

    /// Marks the dir full or clears it by hand (tests).
    #[cfg(test)]
    pub(crate) fn set_full(&self, full: bool) {
        self.full.store(full, Ordering::Release);
    }

    fn free_bytes(&self) -> Option<u64> {
        let st = rustix::fs::statvfs(&self.path).ok()?;
        Some(st.f_bavail.saturating_mul(st.f_frsize))
    }

    fn full_error(&self) -> LogError {
        LogError::IoAt {
            path: self.path.clone(),
            source: std::io::Error::from(std::io::ErrorKind::StorageFull),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_dir_refuses_until_it_looks_again_and_finds_room() {
        let dir = tempfile::tempdir().unwrap();
        let space = DirSpace::untracked(dir.path());
        assert!(space.check_room(0).is_ok());

        let enospc = LogError::Io(std::io::Error::from_raw_os_error(28));
        space.note_error(&enospc, 1_000);
        assert!(space.is_full());
        assert_eq!(space.times_full(), 1);
        // Not looked at again before the recheck interval: refused without a statvfs.
        let e = space.check_room(1_000 + RECHECK_MS - 1).unwrap_err();
        assert!(e.is_disk_full());
        assert!(space.is_full());
        // The temp dir's file system has room: the next look clears it.
        assert!(space.check_room(1_000 + RECHECK_MS).is_ok());
        assert!(!space.is_full());

        // Other errors do not make a dir full.
        space.note_error(&LogError::Io(std::io::Error::from_raw_os_error(5)), 2_000);
        assert!(!space.is_full());
    }

    #[test]
    fn a_missing_metadata_reserve_is_put_back_before_appends_resume() {
        let dir = tempfile::tempdir().unwrap();
        let reserve = Arc::new(SpaceReserve::open(dir.path().join("reserve"), 1 << 20).unwrap());
        assert!(reserve.release());
        let space = DirSpace::new(dir.path().to_path_buf(), reserve.clone());
        space.set_full(true);
        assert!(space.check_room(10_000).is_ok());
        assert!(reserve.is_held(), "the reserve comes back first");
    }
}
