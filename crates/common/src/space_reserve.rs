//! [`SpaceReserve`]: disk space held back for the controller's metadata log.
//!
//! When partition data fills the file system the metadata log shares with it, the operator's
//! remedies (delete a topic, delete records, lower retention) are themselves metadata writes.
//! A file of zeros holds some space back; a metadata write that meets a full disk releases it
//! and tries again, so the remedy goes through. The log dirs refuse partition appends until
//! there is room for the reserve again ([`SpaceReserve::missing_bytes`]), and whoever sees the
//! room first puts it back ([`SpaceReserve::try_restore`]).

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// How often a missing reserve is tried again: each try writes up to its size.
const RESTORE_EVERY_MS: i64 = 2_000;

/// A file of `bytes` zeros that can be given up on a full disk and taken back later.
#[derive(Debug)]
pub struct SpaceReserve {
    path: PathBuf,
    bytes: u64,
    held: AtomicBool,
    /// Clock time of the last restore try (the mutex serializes tries, too).
    last_try: Mutex<Option<i64>>,
}

impl SpaceReserve {
    /// Holds `bytes` at `path`, writing the file if it is missing or short. A full disk is not
    /// an error: the reserve starts released and is put back once there is room.
    pub fn open(path: PathBuf, bytes: u64) -> std::io::Result<SpaceReserve> {
        let reserve = SpaceReserve {
            path,
            bytes,
            held: AtomicBool::new(false),
            last_try: Mutex::new(None),
        };
        if bytes == 0 {
            return Ok(reserve);
        }
        match fs::metadata(&reserve.path) {
            Ok(m) if m.len() == bytes => reserve.held.store(true, Ordering::Release),
            _ => reserve.write_file()?,
        }
        Ok(reserve)
    }

    /// A reserve of nothing, for stores that keep none (tests, a separate metadata disk).
    pub fn none() -> SpaceReserve {
        SpaceReserve {
            path: PathBuf::new(),
            bytes: 0,
            held: AtomicBool::new(false),
            last_try: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn is_held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    /// The bytes the reserve lacks: what a full log dir must see free, beyond its own margin,
    /// before it takes partition data again.
    pub fn missing_bytes(&self) -> u64 {
        if self.bytes == 0 || self.is_held() {
            0
        } else {
            self.bytes
        }
    }

    /// Gives the space back to the file system. Returns whether anything was released.
    pub fn release(&self) -> bool {
        if !self.held.swap(false, Ordering::AcqRel) {
            return false;
        }
        if let Err(e) = fs::remove_file(&self.path) {
            // Still released as far as anyone can tell: the next restore rewrites it.
            tracing::warn!(path = %self.path.display(), error = %e, "removing the space reserve failed");
        }
        true
    }

    /// Runs `op`; when it fails on a full disk and the reserve is held, releases the reserve
    /// and runs it once more.
    pub fn on_full_disk_release_and_retry<T>(
        &self,
        what: &str,
        mut op: impl FnMut() -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        match op() {
            Err(e) if is_disk_full(&e) && self.release() => {
                tracing::warn!(
                    path = %self.path.display(),
                    bytes = self.bytes,
                    "{what}: the disk is full; released the metadata space reserve and retrying"
                );
                op()
            }
            other => other,
        }
    }

    /// Puts a released reserve back if there is room, at most every couple of seconds of the
    /// clock that gives `now_ms`. Returns whether the reserve is held afterwards.
    pub fn try_restore(&self, now_ms: i64) -> bool {
        if self.bytes == 0 || self.is_held() {
            return self.is_held();
        }
        let Ok(mut last) = self.last_try.try_lock() else {
            return false;
        };
        if last.is_some_and(|t| now_ms - t < RESTORE_EVERY_MS) {
            return false;
        }
        *last = Some(now_ms);
        match self.write_file() {
            Ok(()) => {
                if self.is_held() {
                    tracing::info!(path = %self.path.display(), bytes = self.bytes, "metadata space reserve restored");
                }
            }
            Err(e) => {
                tracing::debug!(path = %self.path.display(), error = %e, "metadata space reserve not restored yet")
            }
        }
        self.is_held()
    }

    /// Writes the reserve's zeros and marks it held; on a full disk, removes what was written.
    fn write_file(&self) -> std::io::Result<()> {
        let written = (|| {
            let mut f = File::create(&self.path)?;
            let zeros = vec![0u8; 1 << 20];
            let mut left = self.bytes;
            while left > 0 {
                let n = left.min(zeros.len() as u64) as usize;
                f.write_all(&zeros[..n])?;
                left -= n as u64;
            }
            f.sync_all()
        })();
        match written {
            Ok(()) => {
                self.held.store(true, Ordering::Release);
                Ok(())
            }
            Err(e) if is_disk_full(&e) => {
                let _ = fs::remove_file(&self.path);
                Ok(())
            }
            Err(e) => {
                let _ = fs::remove_file(&self.path);
                Err(e)
            }
        }
    }
}

/// ENOSPC or EDQUOT: a full (or over-quota) file system rather than a failed one.
pub fn is_disk_full(e: &std::io::Error) -> bool {
    // Linux's numbers, for errors built from raw codes that `kind()` may not map.
    const ENOSPC: i32 = 28;
    const EDQUOT: i32 = 122;
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    ) || matches!(e.raw_os_error(), Some(ENOSPC | EDQUOT))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> std::io::Error {
        std::io::Error::from_raw_os_error(28)
    }

    #[test]
    fn a_full_disk_releases_the_reserve_once_and_retries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("reserve");
        let reserve = SpaceReserve::open(path.clone(), 3 << 20).unwrap();
        assert!(reserve.is_held());
        assert_eq!(fs::metadata(&path).unwrap().len(), 3 << 20);

        let mut calls = 0;
        let r = reserve.on_full_disk_release_and_retry("test", || {
            calls += 1;
            if calls == 1 {
                Err(full())
            } else {
                Ok(calls)
            }
        });
        assert_eq!(r.unwrap(), 2);
        assert!(!path.exists(), "the released reserve's file is gone");
        assert_eq!(reserve.missing_bytes(), 3 << 20);

        // Released already: a second full disk is the caller's error.
        let r: std::io::Result<()> = reserve.on_full_disk_release_and_retry("test", || Err(full()));
        assert!(is_disk_full(&r.unwrap_err()));

        assert!(reserve.try_restore(0));
        assert_eq!(fs::metadata(&path).unwrap().len(), 3 << 20);
        assert_eq!(reserve.missing_bytes(), 0);
    }

    #[test]
    fn other_errors_keep_the_reserve() {
        let dir = tempfile::tempdir().unwrap();
        let reserve = SpaceReserve::open(dir.path().join("reserve"), 1 << 20).unwrap();
        let r: std::io::Result<()> = reserve
            .on_full_disk_release_and_retry("test", || Err(std::io::Error::from_raw_os_error(5)));
        assert!(r.is_err());
        assert!(reserve.is_held());
    }
}
