//! The durable Raft log and vote ([`RaftLogStorage`]).
//!
//! Files in the controller directory:
//! - `raft-log.dat`: entries as frames `[len: u32 BE][crc32c: u32 BE][entry as JSON]`, appended in
//!   index order;
//! - `raft-vote.json`, `raft-committed.json`, `raft-purged.json`: the vote, the last committed log
//!   id, and the last purged log id, each replaced atomically (temp file, fsync, rename, fsync
//!   of the directory).
//!
//! The rules openraft states for a log store, and how this one keeps them:
//! - **no holes**: entries are appended in index order; truncation cuts the file at the start of
//!   the first removed frame; purging removes a prefix only;
//! - **write I/O is serialized**: openraft calls the mutating methods one at a time from its core
//!   task (`&mut self`), and every mutation runs under one mutex, synchronously, to completion;
//! - **a vote is durable before `save_vote` returns**: it is written atomically and fsynced;
//! - **appended entries are readable when `append` returns and durable when the callback fires**:
//!   they go to memory and the file, the file is fsynced, then the callback is called.
//!
//! Crash repair happens on open: a torn or corrupt frame at the tail (an append that never
//! finished its fsync, so never acknowledged) is cut off; frames at or below the purged log id
//! (a purge whose file rewrite did not finish) are skipped. Purging writes `raft-purged.json`
//! first and then rewrites the log file without the purged prefix.
//!
//! The whole log is also kept in memory: the metadata log is small and compacted by snapshots.
//! File I/O is blocking and runs on the calling task; metadata writes are rare and small.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote};

use super::fsutil::{read_optional, sync_dir, write_atomic};
use super::{Entry, TypeConfig};
use ferry_common::SpaceReserve;

const LOG_FILE: &str = "raft-log.dat";
const VOTE_FILE: &str = "raft-vote.json";
const COMMITTED_FILE: &str = "raft-committed.json";
const PURGED_FILE: &str = "raft-purged.json";
/// A frame larger than this is treated as corruption.
const MAX_FRAME: u32 = 256 << 20;

type SErr = StorageError<u64>;

/// The log store; clones share the same state and serve as the log reader.
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<LogInner>>,
}

struct LogInner {
    dir: PathBuf,
    /// Released to let a write through on a full disk (see [`SpaceReserve`]).
    reserve: Arc<SpaceReserve>,
    file: File,
    file_len: u64,
    entries: BTreeMap<u64, Entry>,
    /// File offset of each entry's frame.
    offsets: BTreeMap<u64, u64>,
    vote: Option<Vote<u64>>,
    committed: Option<LogId<u64>>,
    last_purged: Option<LogId<u64>>,
}

fn io_err(e: impl std::error::Error + 'static) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> std::io::Result<Option<T>> {
    match read_optional(path)? {
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| io_err(CorruptFile(format!("{}: {e}", path.display())))),
        None => Ok(None),
    }
}

#[derive(Debug, thiserror::Error)]
#[error("corrupt file {0}")]
struct CorruptFile(String);

fn encode_frame(entry: &Entry) -> std::io::Result<Vec<u8>> {
    let body = serde_json::to_vec(entry).map_err(io_err)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|l| *l <= MAX_FRAME)
        .ok_or_else(|| io_err(CorruptFile("log entry too large".into())))?;
    let mut frame = Vec::with_capacity(8 + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Decodes frames from `bytes`; returns the entries with their offsets and the length of the
/// valid prefix (everything after it is a torn or corrupt tail).
fn decode_frames(bytes: &[u8]) -> (Vec<(u64, Entry)>, u64) {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while bytes.len() - pos >= 8 {
        let mut word = [0u8; 4];
        word.copy_from_slice(&bytes[pos..pos + 4]);
        let len = u32::from_be_bytes(word);
        word.copy_from_slice(&bytes[pos + 4..pos + 8]);
        let crc = u32::from_be_bytes(word);
        let end = pos + 8 + len as usize;
        if len > MAX_FRAME || end > bytes.len() {
            break;
        }
        let body = &bytes[pos + 8..end];
        if crc32c::crc32c(body) != crc {
            break;
        }
        match serde_json::from_slice::<Entry>(body) {
            Ok(entry) => out.push((pos as u64, entry)),
            Err(_) => break,
        }
        pos = end;
    }
    (out, pos as u64)
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, repairing a torn tail.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        Self::open_with_reserve(dir, Arc::new(SpaceReserve::none()))
    }

    /// [`Self::open`] with the space reserve its writes may release on a full disk.
    pub fn open_with_reserve(dir: &Path, reserve: Arc<SpaceReserve>) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let vote = read_json(&dir.join(VOTE_FILE))?;
        let committed = read_json(&dir.join(COMMITTED_FILE))?;
        let last_purged: Option<LogId<u64>> = read_json(&dir.join(PURGED_FILE))?;
        let path = dir.join(LOG_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        sync_dir(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let (frames, valid_len) = decode_frames(&bytes);
        if valid_len < bytes.len() as u64 {
            tracing::warn!(
                path = %path.display(),
                valid_len,
                file_len = bytes.len(),
                "cutting a torn or corrupt tail off the raft log"
            );
            file.set_len(valid_len)?;
            file.sync_all()?;
        }
        let purged_index = last_purged.as_ref().map(|l| l.index);
        let mut entries = BTreeMap::new();
        let mut offsets = BTreeMap::new();
        let mut prev: Option<u64> = None;
        for (offset, entry) in frames {
            let index = entry.log_id.index;
            if prev.is_some_and(|p| index != p + 1) {
                return Err(io_err(CorruptFile(format!(
                    "{}: entry {index} follows {prev:?}",
                    path.display()
                ))));
            }
            prev = Some(index);
            if purged_index.is_some_and(|p| index <= p) {
                continue;
            }
            offsets.insert(index, offset);
            entries.insert(index, entry);
        }
        Ok(Self {
            inner: Arc::new(Mutex::new(LogInner {
                dir: dir.to_path_buf(),
                reserve,
                file,
                file_len: valid_len,
                entries,
                offsets,
                vote,
                committed,
                last_purged,
            })),
        })
    }

    fn lock(&self) -> MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl LogInner {
    fn append_frames(&mut self, entries: Vec<Entry>) -> std::io::Result<()> {
        let mut buf = Vec::new();
        let mut placed = Vec::with_capacity(entries.len());
        for entry in entries {
            let offset = self.file_len + buf.len() as u64;
            buf.extend_from_slice(&encode_frame(&entry)?);
            placed.push((offset, entry));
        }
        let (mut file, len) = (&self.file, self.file_len);
        self.reserve
            .on_full_disk_release_and_retry("appending to the metadata log", || {
                let written = file.write_all(&buf).and_then(|()| file.sync_data());
                if written.is_err() {
                    // Cut what part of the frames landed, so a retry (or the next append)
                    // does not follow a torn frame that would hide it on the next open.
                    let _ = file.set_len(len);
                }
                written
            })?;
        self.file_len += buf.len() as u64;
        for (offset, entry) in placed {
            self.offsets.insert(entry.log_id.index, offset);
            self.entries.insert(entry.log_id.index, entry);
        }
        Ok(())
    }

    /// [`write_atomic`], releasing the space reserve if the disk is full.
    fn write_file(&self, what: &str, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        self.reserve
            .on_full_disk_release_and_retry(what, || write_atomic(path, bytes))
    }

    fn truncate_from(&mut self, index: u64) -> std::io::Result<()> {
        let Some(offset) = self.offsets.get(&index).copied() else {
            // Nothing at or after `index` is stored (entries are consecutive).
            self.entries.split_off(&index);
            self.offsets.split_off(&index);
            return Ok(());
        };
        self.file.set_len(offset)?;
        self.file.sync_all()?;
        self.file_len = offset;
        self.entries.split_off(&index);
        self.offsets.split_off(&index);
        Ok(())
    }

    fn purge_upto(&mut self, log_id: LogId<u64>) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(&log_id).map_err(io_err)?;
        self.write_file(
            "saving the purged log id",
            &self.dir.join(PURGED_FILE),
            &bytes,
        )?;
        self.last_purged = Some(log_id);
        self.entries = self.entries.split_off(&(log_id.index + 1));
        // Rewrite the file with the remaining entries.
        let path = self.dir.join(LOG_FILE);
        let mut buf = Vec::new();
        let mut offsets = BTreeMap::new();
        for (index, entry) in &self.entries {
            offsets.insert(*index, buf.len() as u64);
            buf.extend_from_slice(&encode_frame(entry)?);
        }
        self.write_file("rewriting the purged metadata log", &path, &buf)?;
        self.file = OpenOptions::new().read(true).append(true).open(&path)?;
        self.file_len = buf.len() as u64;
        self.offsets = offsets;
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, SErr> {
        let inner = self.lock();
        Ok(inner.entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, SErr> {
        let inner = self.lock();
        let last = inner
            .entries
            .last_key_value()
            .map(|(_, e)| e.log_id)
            .or(inner.last_purged);
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), SErr> {
        let mut inner = self.lock();
        let bytes = serde_json::to_vec(vote).map_err(|e| StorageIOError::write_vote(&e))?;
        inner
            .write_file("saving the vote", &inner.dir.join(VOTE_FILE), &bytes)
            .map_err(|e| StorageIOError::write_vote(&e))?;
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, SErr> {
        Ok(self.lock().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), SErr> {
        let mut inner = self.lock();
        let bytes = serde_json::to_vec(&committed).map_err(|e| StorageIOError::write(&e))?;
        inner
            .write_file(
                "saving the committed log id",
                &inner.dir.join(COMMITTED_FILE),
                &bytes,
            )
            .map_err(|e| StorageIOError::write(&e))?;
        inner.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, SErr> {
        Ok(self.lock().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), SErr>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let result = self.lock().append_frames(entries);
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let err = StorageIOError::write_logs(&e);
                callback.log_io_completed(Err(e));
                Err(err.into())
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), SErr> {
        self.lock()
            .truncate_from(log_id.index)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), SErr> {
        self.lock()
            .purge_upto(log_id)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    #[test]
    fn a_torn_tail_is_cut_off_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut frames = Vec::new();
        for i in 1..=3 {
            frames.extend(encode_frame(&entry(i)).unwrap());
        }
        let whole = frames.len();
        frames.extend(&encode_frame(&entry(4)).unwrap()[..10]);
        std::fs::write(dir.path().join(LOG_FILE), &frames).unwrap();
        let store = LogStore::open(dir.path()).unwrap();
        let inner = store.lock();
        assert_eq!(inner.entries.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(inner.file_len, whole as u64);
        drop(inner);
        let len = std::fs::metadata(dir.path().join(LOG_FILE)).unwrap().len();
        assert_eq!(len, whole as u64);
    }

    #[test]
    fn truncate_and_purge_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = LogStore::open(dir.path()).unwrap();
            let mut inner = store.lock();
            inner.append_frames((1..=10).map(entry).collect()).unwrap();
            inner.truncate_from(8).unwrap();
            inner.purge_upto(entry(3).log_id).unwrap();
            inner.append_frames(vec![entry(8)]).unwrap();
        }
        let store = LogStore::open(dir.path()).unwrap();
        let inner = store.lock();
        assert_eq!(
            inner.entries.keys().copied().collect::<Vec<_>>(),
            [4, 5, 6, 7, 8]
        );
        assert_eq!(inner.last_purged.map(|l| l.index), Some(3));
    }
}
