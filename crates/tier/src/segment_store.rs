//! A segment's files in the object store: Kafka's `RemoteStorageManager` over ferry's
//! [`ObjectStore`] stack (local directory, S3, any S3 API; with its retries and metrics).
//!
//! One object per file (see `ferry_objstore::keys` for the layout). A copy writes the indexes,
//! snapshot and checkpoint first and the log last; the metadata record that makes the segment
//! readable (`CopyFinished`) is written by the caller only after every object is in, so a
//! reader never meets a missing object of a finished segment, and a copy that dies half way
//! leaves a `CopyStarted` segment whose objects the leader deletes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use ferry_objstore::keys::tier_segment_key;
use ferry_objstore::ObjectStore;

use crate::error::{Result, TierError};
use crate::metadata::RemoteSegmentMetadata;

/// The files of one segment, as Kafka's `LogSegmentData` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegmentFileKind {
    Log,
    OffsetIndex,
    TimeIndex,
    TxnIndex,
    ProducerSnapshot,
    LeaderEpochCheckpoint,
}

impl SegmentFileKind {
    pub const ALL: [SegmentFileKind; 6] = [
        SegmentFileKind::OffsetIndex,
        SegmentFileKind::TimeIndex,
        SegmentFileKind::TxnIndex,
        SegmentFileKind::ProducerSnapshot,
        SegmentFileKind::LeaderEpochCheckpoint,
        SegmentFileKind::Log,
    ];

    /// The last part of the object's key (the local file's suffix where there is one).
    pub fn suffix(self) -> &'static str {
        match self {
            Self::Log => "log",
            Self::OffsetIndex => "index",
            Self::TimeIndex => "timeindex",
            Self::TxnIndex => "txnindex",
            Self::ProducerSnapshot => "snapshot",
            Self::LeaderEpochCheckpoint => "leader-epoch-checkpoint",
        }
    }
}

/// What a copy uploads: the closed segment's files, and the leader-epoch checkpoint cut to the
/// segment (Kafka copies it as bytes, not a file).
#[derive(Debug, Clone)]
pub struct LocalSegmentFiles {
    pub log: PathBuf,
    pub offset_index: PathBuf,
    pub time_index: PathBuf,
    /// Present only when the segment has aborted transactions.
    pub txn_index: Option<PathBuf>,
    /// The producer snapshot taken at the segment's end, when there is one.
    pub producer_snapshot: Option<PathBuf>,
    pub leader_epoch_checkpoint: Bytes,
}

/// A segment's files ready to upload: the small ones read into memory; the log file, as large
/// as a segment, stays a file the store copies as it can (a local directory without reading it
/// into memory).
#[derive(Debug, Clone)]
pub struct LoadedSegment {
    pub log: PathBuf,
    /// The log file's size when it was looked at (a closed segment does not change).
    pub log_len: u64,
    pub offset_index: Bytes,
    pub time_index: Bytes,
    pub txn_index: Option<Bytes>,
    pub producer_snapshot: Option<Bytes>,
    pub leader_epoch_checkpoint: Bytes,
}

impl LocalSegmentFiles {
    /// Reads every file. The producer snapshot is optional twice over: the log keeps only the
    /// newest few and may delete this one between the listing and this read; it is then
    /// copied without one, as if it had been gone at the listing.
    pub async fn load(&self) -> Result<LoadedSegment> {
        let producer_snapshot = match &self.producer_snapshot {
            Some(path) => match tokio::fs::read(path).await {
                Ok(b) => Some(Bytes::from(b)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(source) => {
                    return Err(TierError::LocalRead {
                        path: path.display().to_string(),
                        source,
                    })
                }
            },
            None => None,
        };
        let log_len = tokio::fs::metadata(&self.log)
            .await
            .map_err(|source| TierError::LocalRead {
                path: self.log.display().to_string(),
                source,
            })?
            .len();
        Ok(LoadedSegment {
            log: self.log.clone(),
            log_len,
            offset_index: read_file(&self.offset_index).await?,
            time_index: read_file(&self.time_index).await?,
            txn_index: match &self.txn_index {
                Some(path) => Some(read_file(path).await?),
                None => None,
            },
            producer_snapshot,
            leader_epoch_checkpoint: self.leader_epoch_checkpoint.clone(),
        })
    }
}

/// Copies, reads and deletes segments in one store.
#[derive(Debug, Clone)]
pub struct RemoteSegmentStore {
    store: Arc<dyn ObjectStore>,
}

impl RemoteSegmentStore {
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        Self { store }
    }

    /// The bucket (or directory) the tier writes to.
    pub fn bucket(&self) -> &str {
        self.store.bucket()
    }

    /// The object key of one file of a segment.
    pub fn key(meta: &RemoteSegmentMetadata, kind: SegmentFileKind) -> String {
        tier_segment_key(
            meta.topic_id,
            meta.partition,
            meta.start_offset,
            meta.segment_id,
            kind.suffix(),
        )
    }

    /// Uploads a segment's files. `meta` says which optional files exist; they must agree with
    /// `files`, and its size with the log's. The log goes last. A failure leaves some objects
    /// behind; the caller deletes them with [`RemoteSegmentStore::delete`].
    pub async fn copy(&self, meta: &RemoteSegmentMetadata, files: &LoadedSegment) -> Result<()> {
        if meta.has_txn_index != files.txn_index.is_some()
            || meta.has_producer_snapshot != files.producer_snapshot.is_some()
        {
            return Err(TierError::Invalid(format!(
                "segment {}: the metadata's optional files do not match the local ones",
                meta.segment_id
            )));
        }
        if files.log_len != meta.size_bytes {
            return Err(TierError::Invalid(format!(
                "segment {}: the log file holds {} bytes, the metadata says {}",
                meta.segment_id, files.log_len, meta.size_bytes
            )));
        }
        for kind in SegmentFileKind::ALL {
            let data = match kind {
                SegmentFileKind::Log => {
                    let key = Self::key(meta, kind);
                    self.store.put_file(&key, &files.log, files.log_len).await?;
                    continue;
                }
                SegmentFileKind::OffsetIndex => files.offset_index.clone(),
                SegmentFileKind::TimeIndex => files.time_index.clone(),
                SegmentFileKind::TxnIndex => match &files.txn_index {
                    Some(b) => b.clone(),
                    None => continue,
                },
                SegmentFileKind::ProducerSnapshot => match &files.producer_snapshot {
                    Some(b) => b.clone(),
                    None => continue,
                },
                SegmentFileKind::LeaderEpochCheckpoint => files.leader_epoch_checkpoint.clone(),
            };
            self.store.put(&Self::key(meta, kind), data).await?;
        }
        Ok(())
    }

    /// A whole file of a segment (an index, the snapshot, the checkpoint).
    pub async fn fetch(
        &self,
        meta: &RemoteSegmentMetadata,
        kind: SegmentFileKind,
    ) -> Result<Bytes> {
        Ok(self.store.get(&Self::key(meta, kind)).await?)
    }

    /// Bytes `range` of the segment's log, cut to the log's size.
    pub async fn fetch_log(
        &self,
        meta: &RemoteSegmentMetadata,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes> {
        let end = range.end.min(meta.size_bytes);
        if range.start >= end {
            return Ok(Bytes::new());
        }
        Ok(self
            .store
            .get_range(&Self::key(meta, SegmentFileKind::Log), range.start..end)
            .await?)
    }

    /// Deletes every object of the segment in one batch request (S3 `DeleteObjects`); succeeds
    /// when some or all are already gone. The first file the store refused is the error (the
    /// deletion is tried again, whole, next pass).
    pub async fn delete(&self, meta: &RemoteSegmentMetadata) -> Result<()> {
        let keys: Vec<String> = SegmentFileKind::ALL
            .into_iter()
            .map(|kind| Self::key(meta, kind))
            .collect();
        match self.store.delete_many(&keys).await?.into_iter().next() {
            Some((_, refused)) => Err(refused.into()),
            None => Ok(()),
        }
    }
}

async fn read_file(path: &Path) -> Result<Bytes> {
    tokio::fs::read(path)
        .await
        .map(Bytes::from)
        .map_err(|source| TierError::LocalRead {
            path: path.display().to_string(),
            source,
        })
}
