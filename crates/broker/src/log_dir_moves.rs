//! Moves of this broker's replicas between its log dirs (AlterReplicaLogDirs, KIP-113).
//!
//! A request that names another log dir for a hosted replica is answered at once; the move
//! runs on a blocking thread ([`ferry_log::LogManager::relocate`]) while the replica keeps
//! serving. Until it ends, DescribeLogDirs lists the replica a second time, under the
//! destination, as Kafka's "future" replica with what has been copied. A request naming
//! another destination while a move runs takes effect when that move ends (Kafka restarts the
//! move at once; the result is the same). A move that a stop interrupts starts again from the
//! beginning once the broker serves ([`ReplicaManager::resume_log_dir_moves`]), as Kafka
//! resumes its future replicas. A request for a replica this broker does not host yet records
//! the dir its log is to be created in, as Kafka does for the replicas a reassignment is about
//! to add, and answers REPLICA_NOT_AVAILABLE (the reassignment tool asks again until the
//! replica exists).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ferry_common::TopicPartition;
use ferry_log::MoveProgress;
use kafka_protocol::error::ResponseError;

use crate::replica_manager::ReplicaManager;

/// The longest directory name a log dir's file system takes; a move's copy is named
/// `<topic>-<partition>.<ms>-future`, so a longer topic name cannot move (Kafka refuses it
/// alike).
const MAX_DIR_NAME: usize = 255;

/// One running move.
pub struct LogDirMove {
    /// Where the replica goes; may change while a move runs (the next move takes it there).
    pub dest: PathBuf,
    pub progress: Arc<MoveProgress>,
}

/// The moves running on this broker.
#[derive(Default)]
pub struct LogDirMoves {
    running: Mutex<HashMap<TopicPartition, LogDirMove>>,
}

impl LogDirMoves {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TopicPartition, LogDirMove>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Each running move: its partition and destination, the bytes copied and the offset the
    /// copy holds every record below.
    pub fn running(&self) -> Vec<(TopicPartition, PathBuf, u64, i64)> {
        use std::sync::atomic::Ordering::Relaxed;
        self.lock()
            .iter()
            .map(|(tp, m)| {
                let copied = m.progress.copied_bytes.load(Relaxed);
                let copied_to = m.progress.copied_to_offset.load(Relaxed);
                (tp.clone(), m.dest.clone(), copied, copied_to)
            })
            .collect()
    }
}

impl ReplicaManager {
    /// AlterReplicaLogDirs for one replica: NONE once the replica is in `dest` or on its way
    /// there; LOG_DIR_NOT_FOUND for a path that is not one of the log dirs, KAFKA_STORAGE_ERROR
    /// for an offline dir or replica, REPLICA_NOT_AVAILABLE for a partition this broker does not
    /// host (yet: its log will be created in `dest`), INVALID_TOPIC_EXCEPTION for a topic name
    /// too long for the move's directory.
    pub fn alter_replica_log_dir(
        self: &Arc<Self>,
        tp: &TopicPartition,
        dest: &str,
    ) -> Result<(), ResponseError> {
        let name_len = tp.topic.len() + 1 + tp.partition.to_string().len();
        if name_len + ".0000000000000-future".len() > MAX_DIR_NAME {
            return Err(ResponseError::InvalidTopicException);
        }
        let dest = PathBuf::from(dest);
        if !self.logs().log_dirs().contains(&dest) {
            return Err(ResponseError::LogDirNotFound);
        }
        if self
            .logs()
            .offline_dirs()
            .iter()
            .any(|(dir, _)| *dir == dest)
            || self.is_offline(tp)
        {
            return Err(ResponseError::KafkaStorageError);
        }
        let Some(partition) = self.partition(tp) else {
            if let Err(e) = self.logs().prefer_dir(tp, &dest) {
                tracing::warn!(partition = %tp, dest = %dest.display(), error = %e,
                    "cannot note the log dir for a replica to come");
            }
            return Err(ResponseError::ReplicaNotAvailable);
        };
        let here = partition.log.dir().parent().map(Path::to_path_buf);
        let mut running = self.log_dir_moves.lock();
        if let Some(m) = running.get_mut(tp) {
            m.dest = dest;
            return Ok(());
        }
        if here.as_deref() == Some(dest.as_path()) {
            return Ok(());
        }
        let progress = Arc::new(MoveProgress::default());
        running.insert(
            tp.clone(),
            LogDirMove {
                dest,
                progress: Arc::clone(&progress),
            },
        );
        drop(running);
        let (replicas, tp) = (Arc::clone(self), tp.clone());
        tokio::task::spawn_blocking(move || replicas.run_log_dir_move(&tp, progress));
        Ok(())
    }

    /// Starts again the moves between log dirs that a stop interrupted during their copy, for
    /// the partitions this broker still hosts. Called once the logs are open, in the runtime.
    pub fn resume_log_dir_moves(self: &Arc<Self>) {
        for (tp, dest) in self.logs().take_interrupted_moves() {
            // Not hosted any more (deleted or reassigned away while the broker was down): no
            // move, and no preferred dir either.
            let (Some(dest_str), Some(_)) = (dest.to_str(), self.partition(&tp)) else {
                tracing::info!(partition = %tp, "a move between log dirs that a stop interrupted is dropped: the replica is not hosted here any more");
                continue;
            };
            match self.alter_replica_log_dir(&tp, dest_str) {
                Ok(()) => tracing::info!(partition = %tp, dest = %dest.display(),
                    "starting again a move between log dirs that a stop interrupted"),
                Err(e) => tracing::warn!(partition = %tp, dest = %dest.display(), error = ?e,
                    "a move between log dirs that a stop interrupted is dropped"),
            }
        }
    }

    /// Moves `tp` until it is where the latest request wants it, then forgets the move.
    fn run_log_dir_move(&self, tp: &TopicPartition, progress: Arc<MoveProgress>) {
        loop {
            let Some(dest) = self.log_dir_moves.lock().get(tp).map(|m| m.dest.clone()) else {
                return;
            };
            // An error here may be the destination's disk, not the replica's: it is logged, and
            // the replica stays where it was, serving.
            if let Err(e) = self.logs().relocate(tp, &dest, &progress) {
                tracing::warn!(partition = %tp, dest = %dest.display(), error = %e,
                    "moving a replica to another log dir failed; it stays where it was");
            }
            let mut running = self.log_dir_moves.lock();
            match running.get(tp) {
                Some(m) if m.dest != dest => progress.reset(),
                _ => {
                    running.remove(tp);
                    return;
                }
            }
        }
    }
}
