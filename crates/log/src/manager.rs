//! [`LogManager`]: every partition log across the broker's log dirs, Kafka's `LogManager`.
//!
//! Each log dir holds `<topic>-<partition>` directories and, between a graceful shutdown and the
//! next start, a `.kafka_cleanshutdown` marker. The marker is read and removed at open, so a
//! crash after that point makes the next start recover; it is written again only after every log
//! of the dir closed cleanly. A partition lives in exactly one log dir: the one that already
//! holds it, else the dir with the fewest partitions. Deleted partitions are first renamed to
//! `<topic>-<partition>.<id>-delete`, which is never opened again, then removed.
//!
//! A log dir whose disk fails (an I/O error that is not a full file system) is marked offline
//! ([`LogManager::mark_dir_offline`], Kafka's `LogDirFailureChannel`): its logs are forgotten,
//! nothing is placed, opened, checkpointed or closed there again, and it stays offline until the
//! broker restarts. The other dirs keep serving.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferry_common::{SharedClock, TopicPartition};
use parking_lot::{Mutex, RwLock};
use tracing::{error, info, warn};

use crate::config::LogConfig;
use crate::dir_space::DirSpace;
use crate::error::{LogError, Result};
use crate::log::PartitionLog;
use crate::offset_checkpoint::{OffsetCheckpointFile, REPLICATION_OFFSET_CHECKPOINT_FILE};
use crate::relocate::{MoveProgress, MOVED_MARKER_FILE};
use crate::segment::sync_dir;
use ferry_common::SpaceReserve;

/// Name of the clean shutdown marker file in each log dir.
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";

/// Written, synced and removed in each log dir at open: a dir whose disk failed may still be
/// listed from the kernel's caches, but takes no write.
const PROBE_FILE: &str = ".ferry-write-probe";

/// Whether `e` says a log dir's disk failed (Kafka: any `IOException`): an I/O error that is not
/// a full disk. A state file with bad contents ([`LogError::KafkaStorage`]) or a refused batch
/// is that log's problem, not the dir's.
pub fn is_dir_failure(e: &LogError) -> bool {
    matches!(e, LogError::Io(_) | LogError::IoAt { .. }) && !e.is_disk_full()
}

#[derive(Debug)]
struct LogDir {
    path: PathBuf,
    had_clean_shutdown: bool,
    /// Whether it has room; shared with its logs.
    space: Arc<DirSpace>,
    /// Why the dir went offline; `None` while it serves.
    offline: Mutex<Option<String>>,
}

impl LogDir {
    fn is_online(&self) -> bool {
        self.offline.lock().is_none()
    }
}

/// All partition logs of a broker. `Send + Sync`.
pub struct LogManager {
    dirs: Vec<LogDir>,
    clock: SharedClock,
    logs: RwLock<HashMap<TopicPartition, Arc<PartitionLog>>>,
    /// Serializes creation so two callers never open the same partition twice.
    create_lock: Mutex<()>,
    delete_seq: AtomicU64,
    /// The high watermarks read from each dir's `replication-offset-checkpoint` at open.
    checkpointed_high_watermarks: HashMap<TopicPartition, i64>,
    /// The partitions whose logs were in a dir that went offline: never opened or created
    /// elsewhere until restart (their directory cannot even be listed any more).
    offline_logs: Mutex<HashSet<TopicPartition>>,
    /// Where a partition not hosted yet is to be created (AlterReplicaLogDirs for a replica
    /// that a reassignment is about to add; Kafka's `preferredLogDirs`).
    preferred_dirs: Mutex<HashMap<TopicPartition, PathBuf>>,
    /// The moves between log dirs that a stop interrupted during their copy, found at open:
    /// (partition, destination dir), for the broker to start again.
    interrupted_moves: Mutex<Vec<(TopicPartition, PathBuf)>>,
}

impl std::fmt::Debug for LogManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogManager")
            .field("dirs", &self.dirs)
            .finish_non_exhaustive()
    }
}

/// Parses a partition directory name `<topic>-<partition>`.
pub fn parse_partition_dir(name: &str) -> Option<TopicPartition> {
    if name.ends_with("-delete") || name.ends_with("-future") || name.ends_with("-stray") {
        return None;
    }
    let (topic, partition) = name.rsplit_once('-')?;
    let partition: i32 = partition.parse().ok()?;
    if topic.is_empty() || partition < 0 || !partition.to_string().eq(name.rsplit_once('-')?.1) {
        return None;
    }
    Some(TopicPartition::new(topic, partition))
}

/// Parses the name of a move's copy, `<topic>-<partition>.<ms>-future`.
fn parse_future_dir(name: &str) -> Option<TopicPartition> {
    let (partition_dir, ms) = name.strip_suffix("-future")?.rsplit_once('.')?;
    if ms.is_empty() || !ms.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    parse_partition_dir(partition_dir)
}

impl LogManager {
    /// Opens the log dirs (creating them), notes whether each had a clean shutdown marker and
    /// removes it. Leftover `*-delete` directories are removed. Partitions are opened lazily.
    ///
    /// A dir that cannot be opened (an I/O error, not a full disk) starts offline, as in Kafka,
    /// as long as another dir opens: the broker serves what it can. Which partitions it held is
    /// unknown; see [`Self::hold_offline`].
    pub fn open(log_dirs: Vec<PathBuf>, clock: SharedClock) -> Result<LogManager> {
        Self::open_with_reserve(log_dirs, clock, Arc::new(SpaceReserve::none()))
    }

    /// [`Self::open`] for a broker whose metadata log keeps `reserve`: a full dir takes appends
    /// again only once the reserve's missing bytes are free as well (see [`DirSpace`]).
    pub fn open_with_reserve(
        log_dirs: Vec<PathBuf>,
        clock: SharedClock,
        reserve: Arc<SpaceReserve>,
    ) -> Result<LogManager> {
        if log_dirs.is_empty() {
            return Err(LogError::KafkaStorage("no log dirs configured".into()));
        }
        let mut dirs = Vec::with_capacity(log_dirs.len());
        let mut checkpointed_high_watermarks = HashMap::new();
        let mut interrupted_moves = Vec::new();
        let mut first_err = None;
        for path in log_dirs {
            let (had_clean_shutdown, offline) = match Self::open_dir(
                &path,
                &mut checkpointed_high_watermarks,
                &mut interrupted_moves,
            ) {
                Ok(clean) => (clean, None),
                Err(e) if is_dir_failure(&e) => {
                    error!(dir = %path.display(), error = %e,
                            "log dir failed at start-up; it is offline until restart");
                    let cause = e.to_string();
                    first_err.get_or_insert(e);
                    (false, Some(cause))
                }
                Err(e) => return Err(e),
            };
            dirs.push(LogDir {
                space: DirSpace::new(path.clone(), Arc::clone(&reserve)),
                path,
                had_clean_shutdown,
                offline: Mutex::new(offline),
            });
        }
        if let Some(e) = first_err.filter(|_| !dirs.iter().any(|d| d.is_online())) {
            return Err(e);
        }
        Self::finish_interrupted_moves(&dirs);
        Ok(LogManager {
            dirs,
            clock,
            logs: RwLock::new(HashMap::new()),
            create_lock: Mutex::new(()),
            delete_seq: AtomicU64::new(0),
            checkpointed_high_watermarks,
            offline_logs: Mutex::new(HashSet::new()),
            preferred_dirs: Mutex::new(HashMap::new()),
            interrupted_moves: Mutex::new(interrupted_moves),
        })
    }

    /// Each log dir's space state (full or not), for metrics.
    pub fn dir_spaces(&self) -> Vec<Arc<DirSpace>> {
        self.dirs.iter().map(|d| Arc::clone(&d.space)).collect()
    }

    /// One dir of [`Self::open`]: created if missing, its marker read and removed, leftover
    /// deletions and unfinished move copies removed (the moves noted in `interrupted`), its
    /// high-watermark checkpoint read. Returns whether it had the marker.
    fn open_dir(
        path: &Path,
        checkpointed: &mut HashMap<TopicPartition, i64>,
        interrupted: &mut Vec<(TopicPartition, PathBuf)>,
    ) -> Result<bool> {
        fs::create_dir_all(path).map_err(LogError::io_at(path))?;
        let probe = path.join(PROBE_FILE);
        fs::File::create(&probe)
            .and_then(|f| f.sync_all())
            .and_then(|()| fs::remove_file(&probe))
            .map_err(LogError::io_at(&probe))?;
        let marker = path.join(CLEAN_SHUTDOWN_FILE);
        let had_clean_shutdown = marker.exists();
        if had_clean_shutdown {
            fs::remove_file(&marker).map_err(LogError::io_at(&marker))?;
            let _ = sync_dir(path);
        }
        for e in fs::read_dir(path).map_err(LogError::io_at(path))? {
            let e = e.map_err(LogError::io_at(path))?;
            let name = e.file_name().to_string_lossy().into_owned();
            // `-future`: a move to this dir that did not finish; the log is where it was, and
            // the move starts again from the beginning once the broker serves.
            if let Some(tp) = parse_future_dir(&name) {
                interrupted.push((tp, path.to_path_buf()));
            }
            if name.ends_with("-delete") || name.ends_with("-future") {
                let p = e.path();
                if let Err(err) = fs::remove_dir_all(&p) {
                    warn!(dir = %p.display(), error = %err, "could not remove deleted log");
                }
            }
        }
        let checkpoint = OffsetCheckpointFile::new(path.join(REPLICATION_OFFSET_CHECKPOINT_FILE));
        match checkpoint.read() {
            Ok(hws) => checkpointed.extend(hws),
            // Only costs a slower start (high watermarks from the log start), never data.
            Err(e) => {
                warn!(dir = %path.display(), error = %e, "ignoring high-watermark checkpoint")
            }
        }
        info!(dir = %path.display(), had_clean_shutdown, "opened log dir");
        Ok(had_clean_shutdown)
    }

    /// A move between log dirs that stopped after its copy was complete leaves the partition
    /// in two dirs, the copy marked [`MOVED_MARKER_FILE`]: the copy is kept, the other goes.
    fn finish_interrupted_moves(dirs: &[LogDir]) {
        let online: Vec<&LogDir> = dirs.iter().filter(|d| d.is_online()).collect();
        for d in &online {
            for tp in Self::partitions_in_dir(&d.path) {
                let copy = Self::partition_path(&d.path, &tp);
                let marker = copy.join(MOVED_MARKER_FILE);
                if !marker.exists() {
                    continue;
                }
                for other in online.iter().filter(|o| o.path != d.path) {
                    let stale = Self::partition_path(&other.path, &tp);
                    if !stale.is_dir() {
                        continue;
                    }
                    info!(%tp, kept = %copy.display(), removed = %stale.display(),
                        "finishing a move between log dirs that a stop interrupted");
                    if let Err(e) = fs::remove_dir_all(&stale) {
                        warn!(dir = %stale.display(), error = %e, "could not remove the moved log's old directory");
                    }
                }
                if let Err(e) = fs::remove_file(&marker) {
                    warn!(file = %marker.display(), error = %e, "could not remove a move's marker");
                }
            }
        }
    }

    /// Moves `tp`'s log into the log dir `dest` while it serves ([`PartitionLog::relocate`]).
    /// Errors: `dest` is not one of the log dirs or is offline, the log is not open here, or
    /// the copy failed (the log stays where it was; an I/O error may be the destination's).
    pub fn relocate(
        &self,
        tp: &TopicPartition,
        dest: &Path,
        progress: &MoveProgress,
    ) -> Result<()> {
        let d = self.log_dir(dest)?;
        let Some(log) = self.get(tp) else {
            return Err(LogError::KafkaStorage(format!("{tp} has no log here")));
        };
        log.relocate(&d.path, Arc::clone(&d.space), progress)
    }

    /// The moves between log dirs that a stop interrupted during their copy (their copies
    /// were removed at open), as (partition, destination); empty after the first call.
    pub fn take_interrupted_moves(&self) -> Vec<(TopicPartition, PathBuf)> {
        std::mem::take(&mut *self.interrupted_moves.lock())
    }

    /// Has `tp`'s log created in the log dir `dir` when it is created here (Kafka's
    /// `maybeUpdatePreferredLogDir`), unless it is open in `dir` already. Errors as
    /// [`Self::relocate`] for a `dir` that is not an online log dir.
    pub fn prefer_dir(&self, tp: &TopicPartition, dir: &Path) -> Result<()> {
        let d = self.log_dir(dir)?;
        if self
            .get(tp)
            .is_some_and(|l| Self::dir_of(&l).as_deref() == Some(&d.path))
        {
            return Ok(());
        }
        self.preferred_dirs
            .lock()
            .insert(tp.clone(), d.path.clone());
        Ok(())
    }

    /// The configured, online log dir at `path`.
    fn log_dir(&self, path: &Path) -> Result<&LogDir> {
        let d = self.dirs.iter().find(|d| d.path == path).ok_or_else(|| {
            LogError::KafkaStorage(format!("{} is not a log dir", path.display()))
        })?;
        if !d.is_online() {
            return Err(LogError::KafkaStorage(format!(
                "log dir {} is offline",
                path.display()
            )));
        }
        Ok(d)
    }

    /// Treats `tp` as a log of an offline dir: it is not created anew elsewhere. For a partition
    /// this broker hosts but finds in no online dir while a dir is offline since start-up: it
    /// may be in that dir (Kafka refuses to create a log that is not new while a dir is offline).
    pub fn hold_offline(&self, tp: &TopicPartition) {
        self.offline_logs.lock().insert(tp.clone());
    }

    pub fn log_dirs(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.path.clone()).collect()
    }

    /// The log dirs that went offline, with the reason of each.
    pub fn offline_dirs(&self) -> Vec<(PathBuf, String)> {
        self.dirs
            .iter()
            .filter_map(|d| d.offline.lock().clone().map(|why| (d.path.clone(), why)))
            .collect()
    }

    /// Whether `tp`'s log was in a dir that went offline.
    pub fn is_offline(&self, tp: &TopicPartition) -> bool {
        self.offline_logs.lock().contains(tp)
    }

    /// The log dir holding `log`.
    pub fn dir_of(log: &PartitionLog) -> Option<PathBuf> {
        log.dir().parent().map(Path::to_path_buf)
    }

    /// Marks `dir` offline after `cause` (Kafka's `LogDirFailureChannel.maybeAddOfflineLogDir`):
    /// its logs are dropped from the manager and their partitions remembered as offline.
    /// Returns those partitions the first time, `None` if the dir was already offline or is
    /// not one of ours. Logs once, at error level, which dir and why.
    pub fn mark_dir_offline(&self, dir: &Path, cause: &str) -> Option<Vec<TopicPartition>> {
        let d = self.dirs.iter().find(|d| d.path == dir)?;
        {
            let mut offline = d.offline.lock();
            if offline.is_some() {
                return None;
            }
            *offline = Some(cause.to_owned());
        }
        let _guard = self.create_lock.lock();
        let removed: Vec<TopicPartition> = {
            let mut logs = self.logs.write();
            let in_dir: Vec<TopicPartition> = logs
                .iter()
                .filter(|(_, l)| Self::dir_of(l).as_deref() == Some(dir))
                .map(|(tp, _)| tp.clone())
                .collect();
            for tp in &in_dir {
                logs.remove(tp);
            }
            in_dir
        };
        self.offline_logs.lock().extend(removed.iter().cloned());
        let online = self.dirs.iter().filter(|d| d.is_online()).count();
        error!(dir = %dir.display(), cause, partitions = removed.len(), online_dirs = online,
            "log dir failed; it is offline until restart and its partitions are no longer served");
        Some(removed)
    }

    /// Marks the dir of `log` offline if `e` says its disk failed ([`is_dir_failure`]; a full
    /// disk is not a failed one). Returns whether the dir went offline now.
    pub fn maybe_mark_offline(&self, log: &PartitionLog, e: &LogError) -> bool {
        if !is_dir_failure(e) {
            return false;
        }
        let Some(dir) = Self::dir_of(log) else {
            return false;
        };
        self.mark_dir_offline(&dir, &e.to_string()).is_some()
    }

    /// Whether `dir` had a clean shutdown marker when the manager opened it.
    pub fn had_clean_shutdown(&self, dir: &Path) -> bool {
        self.dirs
            .iter()
            .any(|d| d.path == dir && d.had_clean_shutdown)
    }

    /// Partitions found on disk, sorted; other entries are skipped (with a warning for
    /// directories that look like junk).
    pub fn partitions_on_disk(&self) -> Vec<TopicPartition> {
        let mut out: Vec<TopicPartition> = self
            .dirs
            .iter()
            .filter(|d| d.is_online())
            .flat_map(|d| Self::partitions_in_dir(&d.path))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    fn partitions_in_dir(dir: &Path) -> Vec<TopicPartition> {
        let mut out = Vec::new();
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                warn!(dir = %dir.display(), error = %e, "cannot list log dir");
                return out;
            }
        };
        for e in entries.flatten() {
            if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            match parse_partition_dir(&name) {
                Some(tp) => out.push(tp),
                None if name.ends_with("-delete") => {}
                // The controller's Raft log (`metadata.log.dir` by default).
                None if name == "__cluster_metadata" => {}
                None => warn!(dir = %e.path().display(), "skipping unexpected directory"),
            }
        }
        out
    }

    fn partition_path(dir: &Path, tp: &TopicPartition) -> PathBuf {
        dir.join(format!("{}-{}", tp.topic, tp.partition))
    }

    /// The log dir holding a directory for `tp`, if one does.
    fn existing_dir(&self, tp: &TopicPartition) -> Option<&LogDir> {
        self.dirs
            .iter()
            .filter(|d| d.is_online())
            .find(|d| Self::partition_path(&d.path, tp).is_dir())
    }

    /// Opens the existing log (recovering it if its dir was not shut down cleanly) or creates a
    /// new one in the log dir with the fewest partitions.
    pub fn get_or_create(
        &self,
        tp: &TopicPartition,
        config: LogConfig,
    ) -> Result<Arc<PartitionLog>> {
        if let Some(log) = self.get(tp) {
            return Ok(log);
        }
        let _guard = self.create_lock.lock();
        if let Some(log) = self.get(tp) {
            return Ok(log);
        }
        if self.is_offline(tp) {
            return Err(LogError::KafkaStorage(format!(
                "{tp} is in an offline log dir"
            )));
        }
        let preferred = self.preferred_dirs.lock().remove(tp);
        let (dir, clean) = match self.existing_dir(tp) {
            Some(d) => (d, d.had_clean_shutdown),
            // A preferred dir that went offline since is ignored: the log is placed as any.
            None => match preferred.and_then(|p| self.log_dir(&p).ok()) {
                Some(d) => (d, true),
                None => (self.least_loaded_dir()?, true),
            },
        };
        let path = Self::partition_path(&dir.path, tp);
        let log = Arc::new(
            PartitionLog::open(path, tp.clone(), config, clean, Arc::clone(&self.clock))?
                .in_dir_space(Arc::clone(&dir.space)),
        );
        self.logs.write().insert(tp.clone(), Arc::clone(&log));
        Ok(log)
    }

    /// The online log dir with the fewest open logs, for a new one.
    fn least_loaded_dir(&self) -> Result<&LogDir> {
        let logs = self.logs.read();
        let count = |d: &LogDir| {
            logs.values()
                .filter(|l| l.dir().parent() == Some(d.path.as_path()))
                .count()
        };
        self.dirs
            .iter()
            .filter(|d| d.is_online())
            .min_by_key(|d| count(d))
            .ok_or_else(|| LogError::KafkaStorage("every log dir is offline".into()))
    }

    /// Opens the logs of `wanted` that have a directory in a log dir and are not open yet,
    /// recovering those of a dir that was not shut down cleanly, with `threads` threads (at
    /// start-up the load of thousands of partitions, and their recovery after a crash, is what
    /// keeps a broker offline). Partitions without a directory are left to
    /// [`Self::get_or_create`], which places new ones. Returns the outcome of each partition it
    /// tried, in no particular order; one failing does not stop the others.
    pub fn open_existing(
        &self,
        wanted: Vec<(TopicPartition, LogConfig)>,
        threads: usize,
    ) -> Vec<(TopicPartition, Result<Arc<PartitionLog>>)> {
        let _guard = self.create_lock.lock();
        let jobs: Vec<(TopicPartition, LogConfig, PathBuf, bool, Arc<DirSpace>)> = wanted
            .into_iter()
            .filter(|(tp, _)| self.get(tp).is_none())
            .filter_map(|(tp, config)| {
                let dir = self.existing_dir(&tp)?;
                let path = Self::partition_path(&dir.path, &tp);
                Some((
                    tp,
                    config,
                    path,
                    dir.had_clean_shutdown,
                    Arc::clone(&dir.space),
                ))
            })
            .collect();
        if jobs.is_empty() {
            return Vec::new();
        }
        let threads = threads.clamp(1, jobs.len());
        let recovering = jobs.iter().filter(|j| !j.3).count();
        info!(
            logs = jobs.len(),
            recovering, threads, "loading partition logs"
        );
        let started_ms = self.clock.now_ms();
        let mut outcomes = ferry_common::map_on_threads(
            &jobs,
            threads,
            "log-loader",
            |(tp, config, path, clean, space)| {
                let opened = PartitionLog::open_unsynced(
                    path.clone(),
                    tp.clone(),
                    config.clone(),
                    *clean,
                    Arc::clone(&self.clock),
                )
                .map(|log| Arc::new(log.in_dir_space(Arc::clone(space))));
                (tp.clone(), opened)
            },
        );
        self.sync_loaded_logs(&mut outcomes);
        {
            let mut logs = self.logs.write();
            for (tp, opened) in &outcomes {
                if let Ok(log) = opened {
                    logs.insert(tp.clone(), Arc::clone(log));
                }
            }
        }
        info!(
            logs = outcomes.iter().filter(|(_, o)| o.is_ok()).count(),
            failed = outcomes.iter().filter(|(_, o)| o.is_err()).count(),
            elapsed_ms = self.clock.now_ms().saturating_sub(started_ms),
            "loaded partition logs"
        );
        outcomes
    }

    /// Makes the logs [`Self::open_existing`] loaded without fsyncs durable: one sync of each
    /// log dir's file system (their recovery points in memory are their log ends, so the next
    /// flush only syncs what is appended later). The recovery point files stay as they were:
    /// rewriting them would allocate a new file per partition, and an older one only means
    /// that a crash before the next flush recovers the same segments again. The logs of a dir
    /// whose sync fails are turned into errors.
    fn sync_loaded_logs(&self, outcomes: &mut [(TopicPartition, Result<Arc<PartitionLog>>)]) {
        for d in &self.dirs {
            let in_dir = |log: &PartitionLog| log.dir().parent() == Some(d.path.as_path());
            if !outcomes
                .iter()
                .any(|(_, o)| o.as_ref().is_ok_and(|l| in_dir(l)))
            {
                continue;
            }
            if let Err(e) = sync_file_system(&d.path) {
                warn!(dir = %d.path.display(), error = %e, "syncing loaded logs failed");
                for (_, o) in outcomes.iter_mut() {
                    if o.as_ref().is_ok_and(|l| in_dir(l)) {
                        *o = Err(LogError::KafkaStorage(format!(
                            "syncing {} after loading failed: {e}",
                            d.path.display()
                        )));
                    }
                }
            }
        }
    }

    /// The high watermark of `tp` in its dir's `replication-offset-checkpoint` at open.
    pub fn checkpointed_high_watermark(&self, tp: &TopicPartition) -> Option<i64> {
        self.checkpointed_high_watermarks.get(tp).copied()
    }

    /// Writes each dir's `replication-offset-checkpoint` with the high watermarks `hw_of` gives
    /// for the logs of that dir (Kafka's `checkpointHighWatermarks`); logs it gives `None` for
    /// are left out. Errors of one dir do not stop the others (the first is returned).
    pub fn checkpoint_high_watermarks(
        &self,
        hw_of: impl Fn(&TopicPartition) -> Option<i64>,
    ) -> Result<()> {
        let logs = self.all();
        let mut first_err = None;
        for d in self.dirs.iter().filter(|d| d.is_online()) {
            let offsets: BTreeMap<TopicPartition, i64> = logs
                .iter()
                .filter(|l| l.dir().parent() == Some(d.path.as_path()))
                .filter_map(|l| {
                    let tp = l.topic_partition();
                    hw_of(tp).map(|hw| (tp.clone(), hw))
                })
                .collect();
            let file = OffsetCheckpointFile::new(d.path.join(REPLICATION_OFFSET_CHECKPOINT_FILE));
            if let Err(e) = file.write(&offsets) {
                warn!(dir = %d.path.display(), error = %e, "writing the high-watermark checkpoint failed");
                if is_dir_failure(&e) {
                    self.mark_dir_offline(&d.path, &e.to_string());
                }
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub fn get(&self, tp: &TopicPartition) -> Option<Arc<PartitionLog>> {
        self.logs.read().get(tp).cloned()
    }

    pub fn all(&self) -> Vec<Arc<PartitionLog>> {
        self.logs.read().values().cloned().collect()
    }

    /// Removes the log from the manager, renames its dir to `<topic>-<partition>.<id>-delete`
    /// and deletes that in a background thread.
    pub fn delete(&self, tp: &TopicPartition) -> Result<()> {
        let _guard = self.create_lock.lock();
        let removed = self.logs.write().remove(tp);
        let path = match &removed {
            Some(log) => log.dir(),
            None => match self
                .dirs
                .iter()
                .map(|d| Self::partition_path(&d.path, tp))
                .find(|p| p.is_dir())
            {
                Some(p) => p,
                None => return Ok(()),
            },
        };
        let seq = self.delete_seq.fetch_add(1, Ordering::Relaxed);
        let unique = format!("{}{:04}", self.clock.now_ms(), seq % 10_000);
        let target = path.with_file_name(format!("{}-{}.{unique}-delete", tp.topic, tp.partition));
        fs::rename(&path, &target).map_err(LogError::io_at(&path))?;
        if let Some(parent) = target.parent() {
            let _ = sync_dir(parent);
        }
        info!(%tp, dir = %target.display(), "deleting log");
        std::thread::Builder::new()
            .name(format!("delete-{tp}"))
            .spawn(move || {
                if let Err(e) = fs::remove_dir_all(&target) {
                    warn!(dir = %target.display(), error = %e, "could not remove deleted log");
                }
            })
            .map_err(LogError::Io)?;
        Ok(())
    }

    /// Periodic task (every `log.retention.check.interval.ms`): retention on every log and the
    /// flush of rolled segments; compaction is the cleaner's ([`Self::clean_dirty_logs`]).
    /// Returns the number of segments deleted by retention; errors of one log do not stop the
    /// others (the first is returned).
    pub fn run_maintenance(&self) -> Result<usize> {
        let mut deleted = 0;
        let mut first_err = None;
        for log in self.all() {
            // A log of a dir that failed meanwhile is no longer ours to touch.
            if self.get(log.topic_partition()).is_none() {
                continue;
            }
            match log.enforce_retention() {
                Ok(n) => deleted += n,
                Err(e) => {
                    warn!(tp = %log.topic_partition(), error = %e, "retention failed");
                    self.maybe_mark_offline(&log, &e);
                    first_err.get_or_insert(e);
                    continue;
                }
            }
            if let Err(e) = log.flush_rolled_segments() {
                warn!(tp = %log.topic_partition(), error = %e, "flush failed");
                self.maybe_mark_offline(&log, &e);
                first_err.get_or_insert(e);
                continue;
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(deleted),
        }
    }

    /// One pass of the log cleaner (Kafka's `LogCleaner`, every `log.cleaner.backoff.ms`):
    /// cleans each compacted log whose dirty ratio or `max.compaction.lag.ms` (or an expired
    /// tombstone) calls for it. Returns how many were cleaned; errors of one log do not stop
    /// the others (the first is returned).
    pub fn clean_dirty_logs(&self) -> Result<usize> {
        self.clean_logs(|log| self.get(log.topic_partition()).is_some() && log.needs_cleaning())
    }

    /// Runs a cleaning pass on every compacted log, whatever its dirty ratio (tests, admin).
    /// Returns the number of logs cleaned; errors of one log do not stop the others (the first
    /// is returned).
    pub fn clean_all(&self) -> Result<usize> {
        self.clean_logs(|log| log.config().compact)
    }

    /// A cleaning pass on each log `wanted` picks.
    fn clean_logs(&self, wanted: impl Fn(&PartitionLog) -> bool) -> Result<usize> {
        let mut cleaned = 0;
        let mut first_err = None;
        for log in self.all().into_iter().filter(|log| wanted(log)) {
            match log.clean() {
                Ok(_) => cleaned += 1,
                Err(e) => {
                    warn!(tp = %log.topic_partition(), error = %e, "log cleaning failed");
                    self.maybe_mark_offline(&log, &e);
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(cleaned),
        }
    }

    /// Graceful shutdown: closes every log, then writes the clean shutdown marker of each dir
    /// whose logs all closed cleanly.
    pub fn shutdown(&self) -> Result<()> {
        let mut failed_dirs: Vec<PathBuf> = Vec::new();
        let mut first_err = None;
        // A dir that was not shut down cleanly may hold partitions this run never opened, hence
        // never recovered: recover them now, or the marker would vouch for them unchecked.
        for d in self
            .dirs
            .iter()
            .filter(|d| !d.had_clean_shutdown && d.is_online())
        {
            for tp in Self::partitions_in_dir(&d.path) {
                if self.get(&tp).is_some() {
                    continue;
                }
                let path = Self::partition_path(&d.path, &tp);
                let recovered = PartitionLog::open_unsynced(
                    path,
                    tp.clone(),
                    LogConfig::default(),
                    false,
                    Arc::clone(&self.clock),
                )
                .and_then(|log| log.close_unsynced());
                if let Err(e) = recovered {
                    warn!(%tp, error = %e, "recovering unopened log at shutdown failed");
                    failed_dirs.push(d.path.clone());
                    first_err.get_or_insert(e);
                }
            }
        }
        // Closing writes a few small files per log; one sync of each dir's file system below,
        // before its marker, makes them durable instead of an fsync each.
        for log in self.all() {
            if let Err(e) = log.close_unsynced() {
                warn!(tp = %log.topic_partition(), error = %e, "closing log failed");
                if let Some(parent) = LogManager::dir_of(&log) {
                    failed_dirs.push(parent);
                }
                first_err.get_or_insert(e);
            }
        }
        for d in &self.dirs {
            // An offline dir gets no marker: its logs were never closed, so the next start
            // recovers them (after the disk is replaced, usually from the other replicas).
            if failed_dirs.contains(&d.path) || !d.is_online() {
                continue;
            }
            if let Err(e) = sync_file_system(&d.path) {
                warn!(dir = %d.path.display(), error = %e, "syncing closed logs failed; no clean-shutdown marker");
                first_err.get_or_insert(e);
                continue;
            }
            let marker = d.path.join(CLEAN_SHUTDOWN_FILE);
            fs::File::create(&marker)
                .and_then(|f| f.sync_all())
                .map_err(LogError::io_at(&marker))?;
            let _ = sync_dir(&d.path);
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Flushes everything written to the file system holding `dir` (`syncfs`; Linux reports
/// write-back errors of any file on it since 5.8). Elsewhere `sync`, which flushes all file
/// systems.
fn sync_file_system(dir: &Path) -> Result<()> {
    #[cfg(target_os = "linux")]
    {
        let d = fs::File::open(dir).map_err(LogError::io_at(dir))?;
        rustix::fs::syncfs(&d).map_err(|e| LogError::io_at(dir)(e.into()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        rustix::fs::sync();
        Ok(())
    }
}
