//! The Raft state machine ([`RaftStateMachine`]): the metadata [`Image`] plus its snapshot.
//!
//! The image lives in memory and is published through a `watch` channel after every applied
//! batch. Durability comes from the snapshot, not from `apply`: `raft-snapshot.json` holds the
//! snapshot metadata and the serialized image, written atomically (temp file, fsync, rename).
//! On start the image is the snapshot's, and openraft re-applies the committed log after it (the
//! log store persists the committed log id for that).
//!
//! Invariant: `image.applied_index` equals the index of `last_applied` (0 before any entry), and
//! a record rejected by [`Image::apply`] is still "applied" (the image stays unchanged and the
//! error goes back to the proposer), so every node computes the same image from the same log.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::RaftStateMachine;
use openraft::{
    EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::fsutil::{read_optional, write_atomic};
use super::{Entry, Node, TypeConfig};
use crate::image::{Applied, Image, ImageError};
use ferry_common::SpaceReserve;

const SNAPSHOT_FILE: &str = "raft-snapshot.json";

type SErr = StorageError<u64>;

/// What the state machine answers for each entry.
pub type ApplyResult = Result<Applied, ImageError>;

#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta<u64, Node>,
    image: Image,
}

/// The state machine store; clones share state and serve as the snapshot builder.
#[derive(Clone)]
pub struct StateMachineStore {
    inner: Arc<Mutex<SmInner>>,
}

struct SmInner {
    dir: PathBuf,
    /// Released to let a snapshot through on a full disk (see [`SpaceReserve`]).
    reserve: Arc<SpaceReserve>,
    image: Image,
    last_applied: Option<LogId<u64>>,
    last_membership: StoredMembership<u64, Node>,
    /// The current snapshot: metadata and serialized image.
    snapshot: Option<(SnapshotMeta<u64, Node>, Vec<u8>)>,
    snapshots_built: u64,
    publish: watch::Sender<Arc<Image>>,
}

impl StateMachineStore {
    /// Opens the state machine in `dir`, starting from the snapshot there if any.
    pub fn open(dir: &Path) -> std::io::Result<(Self, watch::Receiver<Arc<Image>>)> {
        Self::open_with_reserve(dir, Arc::new(SpaceReserve::none()))
    }

    /// [`Self::open`] with the space reserve a snapshot write may release on a full disk.
    pub fn open_with_reserve(
        dir: &Path,
        reserve: Arc<SpaceReserve>,
    ) -> std::io::Result<(Self, watch::Receiver<Arc<Image>>)> {
        std::fs::create_dir_all(dir)?;
        let mut inner_image = Image::default();
        let mut last_applied = None;
        let mut last_membership = StoredMembership::default();
        let mut snapshot = None;
        if let Some(bytes) = read_optional(&dir.join(SNAPSHOT_FILE))? {
            let file: SnapshotFile = serde_json::from_slice(&bytes).map_err(|e| {
                std::io::Error::other(format!(
                    "corrupt {}: {e}",
                    dir.join(SNAPSHOT_FILE).display()
                ))
            })?;
            let data = serde_json::to_vec(&file.image).map_err(std::io::Error::other)?;
            inner_image = file.image;
            last_applied = file.meta.last_log_id;
            last_membership = file.meta.last_membership.clone();
            snapshot = Some((file.meta, data));
        }
        let (publish, rx) = watch::channel(Arc::new(inner_image.clone()));
        Ok((
            Self {
                inner: Arc::new(Mutex::new(SmInner {
                    dir: dir.to_path_buf(),
                    reserve,
                    image: inner_image,
                    last_applied,
                    last_membership,
                    snapshot,
                    snapshots_built: 0,
                    publish,
                })),
            },
            rx,
        ))
    }

    fn lock(&self) -> MutexGuard<'_, SmInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl SmInner {
    /// Writes the snapshot file for the current image and keeps it as the current snapshot.
    fn save_snapshot(&mut self, meta: SnapshotMeta<u64, Node>) -> std::io::Result<Vec<u8>> {
        let file = SnapshotFile {
            meta: meta.clone(),
            image: self.image.clone(),
        };
        let bytes = serde_json::to_vec(&file).map_err(std::io::Error::other)?;
        let path = self.dir.join(SNAPSHOT_FILE);
        self.reserve
            .on_full_disk_release_and_retry("saving a metadata snapshot", || {
                write_atomic(&path, &bytes)
            })?;
        let data = serde_json::to_vec(&self.image).map_err(std::io::Error::other)?;
        self.snapshot = Some((meta, data.clone()));
        Ok(data)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, SErr> {
        let mut inner = self.lock();
        inner.snapshots_built += 1;
        let snapshot_id = match inner.last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id, l.index, inner.snapshots_built),
            None => format!("none-{}", inner.snapshots_built),
        };
        let meta = SnapshotMeta {
            last_log_id: inner.last_applied,
            last_membership: inner.last_membership.clone(),
            snapshot_id,
        };
        let data = inner
            .save_snapshot(meta.clone())
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = StateMachineStore;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, Node>), SErr> {
        let inner = self.lock();
        Ok((inner.last_applied, inner.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ApplyResult>, SErr>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.lock();
        let mut out = Vec::new();
        for entry in entries {
            inner.last_applied = Some(entry.log_id);
            inner.image.applied_index = entry.log_id.index;
            let result = match entry.payload {
                EntryPayload::Blank => Ok(Applied::Done),
                EntryPayload::Normal(record) => inner.image.apply(&record),
                EntryPayload::Membership(m) => {
                    inner.last_membership = StoredMembership::new(Some(entry.log_id), m);
                    Ok(Applied::Done)
                }
            };
            out.push(result);
        }
        let image = Arc::new(inner.image.clone());
        inner.publish.send_replace(image);
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, SErr> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, Node>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), SErr> {
        let data = snapshot.into_inner();
        let mut image: Image = serde_json::from_slice(&data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        image.applied_index = meta.last_log_id.map(|l| l.index).unwrap_or(0);
        let mut inner = self.lock();
        inner.image = image;
        inner.last_applied = meta.last_log_id;
        inner.last_membership = meta.last_membership.clone();
        inner
            .save_snapshot(meta.clone())
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        let image = Arc::new(inner.image.clone());
        inner.publish.send_replace(image);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, SErr> {
        let inner = self.lock();
        Ok(inner.snapshot.as_ref().map(|(meta, data)| Snapshot {
            meta: meta.clone(),
            snapshot: Box::new(Cursor::new(data.clone())),
        }))
    }
}
