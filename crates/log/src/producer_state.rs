//! Producer state, Kafka's `ProducerStateManager`: idempotence and ongoing transactions.
//!
//! For each producer id the log keeps the current epoch, the metadata of the last
//! [`MAX_BATCHES_PER_PRODUCER`] batches appended, the coordinator epoch of its last transaction
//! marker, and the first offset of its ongoing transaction (set by its first transactional batch,
//! cleared by its next marker). Invariants: within an epoch, each batch's base sequence is the
//! previous batch's last sequence + 1 (wrapping at i32::MAX); a new epoch or a new producer starts
//! at sequence 0; a leader never lets epochs go down; `ongoing` holds exactly the producers whose
//! entry has a transaction first offset, keyed by that offset. The state is rebuilt after a
//! restart from the latest `<offset:020>.snapshot` file (written on roll and close) plus a replay
//! of the batches from that offset to the log end (headers, and the record of each control batch).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::batch::{seq_add, BatchHeader};
use crate::error::{LogError, Result};
use crate::index::{read_optional, write_file_atomically, Durability};
use crate::txn::{AbortedTxn, TxnMarker, TxnResult};

/// How many recent batches per producer are remembered for duplicate detection (Kafka's 5).
pub const MAX_BATCHES_PER_PRODUCER: usize = 5;

/// One appended batch of an idempotent producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    /// The batch's max timestamp (DescribeProducers' last timestamp); -1 in older snapshots.
    #[serde(default = "no_timestamp")]
    pub max_timestamp: i64,
}

fn no_timestamp() -> i64 {
    -1
}

/// Version of the snapshot files written; version 1 (no transaction fields) is still read.
const SNAPSHOT_VERSION: u32 = 2;

/// What the log knows about one producer id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<BatchMetadata>,
    /// Coordinator epoch of the producer's last transaction marker, -1 before any.
    #[serde(default = "no_coordinator_epoch")]
    pub coordinator_epoch: i32,
    /// First offset of the producer's ongoing transaction in this partition.
    #[serde(default)]
    pub txn_first_offset: Option<i64>,
}

fn no_coordinator_epoch() -> i32 {
    -1
}

impl ProducerEntry {
    pub fn new(epoch: i16) -> ProducerEntry {
        ProducerEntry {
            epoch,
            batches: VecDeque::new(),
            coordinator_epoch: -1,
            txn_first_offset: None,
        }
    }
}

/// Result of checking an incoming batch against producer state.
#[derive(Debug, PartialEq, Eq)]
pub enum SequenceCheck {
    /// A new batch, to be appended.
    Append,
    /// A retry of a batch already in the log.
    Duplicate(BatchMetadata),
}

#[derive(Serialize, Deserialize)]
struct Snapshot {
    version: u32,
    producers: Vec<(i64, ProducerEntry)>,
}

/// Producer ids to their state.
#[derive(Clone, Debug, Default)]
pub struct ProducerStateManager {
    producers: HashMap<i64, ProducerEntry>,
    /// First offset -> producer id of every ongoing transaction (derived from `producers`).
    ongoing: BTreeMap<i64, i64>,
}

impl ProducerStateManager {
    /// The smallest first offset of the ongoing transactions (Kafka's first unstable offset).
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.keys().next().copied()
    }

    /// First offset of `producer_id`'s ongoing transaction.
    pub fn txn_first_offset(&self, producer_id: i64) -> Option<i64> {
        self.producers
            .get(&producer_id)
            .and_then(|e| e.txn_first_offset)
    }

    pub fn epoch_of(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|e| e.epoch)
    }

    /// Every producer's state, by ascending id.
    pub fn entries(&self) -> Vec<(i64, ProducerEntry)> {
        let mut all: Vec<(i64, ProducerEntry)> = self
            .producers
            .iter()
            .map(|(id, e)| (*id, e.clone()))
            .collect();
        all.sort_by_key(|(id, _)| *id);
        all
    }

    pub fn entry(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// `(producer id, last offset)` of the last batch of every producer (the cleaner keeps
    /// these batches' headers so producer state can be rebuilt from the log).
    pub fn last_batch_offsets(&self) -> std::collections::HashSet<(i64, i64)> {
        self.producers
            .iter()
            .filter_map(|(pid, e)| e.batches.back().map(|b| (*pid, b.last_offset)))
            .collect()
    }

    /// `producer id -> (epoch, last offset of its last data batch, -1 when none is known)`. The
    /// cleaner keeps a producer's markers of its current epoch after that batch: they carry the
    /// epoch and coordinator epoch that a rebuild of producer state from the log needs.
    pub fn latest_marker_bounds(&self) -> HashMap<i64, (i16, i64)> {
        self.producers
            .iter()
            .map(|(pid, e)| {
                (
                    *pid,
                    (e.epoch, e.batches.back().map_or(-1, |b| b.last_offset)),
                )
            })
            .collect()
    }

    /// Checks a producer batch against `entry` (the producer's current state, if any), in
    /// Kafka's order: epoch fencing, duplicate lookup, sequence continuity, then that a producer
    /// inside a transaction writes only transactional batches.
    pub fn check(entry: Option<&ProducerEntry>, h: &BatchHeader) -> Result<SequenceCheck> {
        let verdict = Self::check_sequence(entry, h)?;
        if verdict == SequenceCheck::Append && !h.is_transactional() {
            if let Some(first) = entry.and_then(|e| e.txn_first_offset) {
                return Err(LogError::InvalidTxnState(format!(
                    "producer {} sent a non-transactional batch inside its transaction \
                     started at offset {first}",
                    h.producer_id
                )));
            }
        }
        Ok(verdict)
    }

    fn check_sequence(entry: Option<&ProducerEntry>, h: &BatchHeader) -> Result<SequenceCheck> {
        let pid = h.producer_id;
        let Some(entry) = entry else {
            if h.base_sequence != 0 {
                return Err(LogError::OutOfOrderSequence {
                    producer_id: pid,
                    expected: 0,
                    got: h.base_sequence,
                });
            }
            return Ok(SequenceCheck::Append);
        };
        if h.producer_epoch < entry.epoch {
            return Err(LogError::InvalidProducerEpoch {
                producer_id: pid,
                current: entry.epoch,
                got: h.producer_epoch,
            });
        }
        if h.producer_epoch > entry.epoch {
            if h.base_sequence != 0 {
                return Err(LogError::OutOfOrderSequence {
                    producer_id: pid,
                    expected: 0,
                    got: h.base_sequence,
                });
            }
            return Ok(SequenceCheck::Append);
        }
        let last_seq = h.last_sequence();
        if let Some(b) = entry
            .batches
            .iter()
            .find(|b| b.first_seq == h.base_sequence && b.last_seq == last_seq)
        {
            return Ok(SequenceCheck::Duplicate(*b));
        }
        let expected = entry.batches.back().map_or(0, |b| seq_add(b.last_seq, 1));
        if h.base_sequence != expected {
            return Err(LogError::OutOfOrderSequence {
                producer_id: pid,
                expected,
                got: h.base_sequence,
            });
        }
        Ok(SequenceCheck::Append)
    }

    /// Applies an appended data batch (with its final offsets) to `entry`; a transactional
    /// batch starts a transaction when none is ongoing.
    pub fn apply(entry: &mut ProducerEntry, h: &BatchHeader) {
        if h.is_transactional() && entry.txn_first_offset.is_none() {
            entry.txn_first_offset = Some(h.base_offset);
        }
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        entry.batches.push_back(BatchMetadata {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            first_offset: h.base_offset,
            last_offset: h.last_offset(),
            max_timestamp: h.max_timestamp,
        });
        while entry.batches.len() > MAX_BATCHES_PER_PRODUCER {
            entry.batches.pop_front();
        }
    }

    /// Records an appended (or replayed) data batch; batches without a producer id and
    /// control batches (see [`apply_marker`](Self::apply_marker)) are ignored.
    pub fn update(&mut self, h: &BatchHeader) {
        if !h.has_producer_id() || h.is_control() {
            return;
        }
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(|| ProducerEntry::new(h.producer_epoch));
        let in_txn = entry.txn_first_offset.is_some();
        Self::apply(entry, h);
        if !in_txn {
            if let Some(first) = entry.txn_first_offset {
                self.ongoing.insert(first, h.producer_id);
            }
        }
    }

    /// Records a batch being replayed or replicated: a data batch, or a control batch with the
    /// marker its record holds (`None` for an empty or non-marker control batch).
    pub fn replay(&mut self, h: &BatchHeader, marker: Option<&TxnMarker>) -> Option<AbortedTxn> {
        if h.is_control() {
            marker.and_then(|m| self.apply_marker(m, h.base_offset))
        } else {
            self.update(h);
            None
        }
    }

    /// The leader's checks of a marker before it is written (Kafka's rules for transaction
    /// versions 0 and 1): an epoch below the producer's is fenced, and so is a coordinator epoch
    /// below the one of the producer's last marker (a zombie coordinator).
    pub fn check_marker(&self, m: &TxnMarker) -> Result<()> {
        let Some(entry) = self.producers.get(&m.producer_id) else {
            return Ok(());
        };
        if m.producer_epoch < entry.epoch {
            return Err(LogError::InvalidProducerEpoch {
                producer_id: m.producer_id,
                current: entry.epoch,
                got: m.producer_epoch,
            });
        }
        if m.coordinator_epoch < entry.coordinator_epoch {
            return Err(LogError::TransactionCoordinatorFenced {
                producer_id: m.producer_id,
                current: entry.coordinator_epoch,
                got: m.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// Applies a marker appended at `offset`: the producer takes the marker's epoch (its batch
    /// history is dropped when that changes) and coordinator epoch, and its ongoing transaction,
    /// if any, completes. Returns the index entry when that transaction was aborted. A marker
    /// for a producer without an ongoing transaction completes nothing (Kafka still writes it).
    pub fn apply_marker(&mut self, m: &TxnMarker, offset: i64) -> Option<AbortedTxn> {
        let entry = self
            .producers
            .entry(m.producer_id)
            .or_insert_with(|| ProducerEntry::new(m.producer_epoch));
        if entry.epoch != m.producer_epoch {
            entry.epoch = m.producer_epoch;
            entry.batches.clear();
        }
        entry.coordinator_epoch = m.coordinator_epoch;
        let first_offset = entry.txn_first_offset.take()?;
        self.ongoing.remove(&first_offset);
        if m.result == TxnResult::Commit {
            return None;
        }
        // Kafka's definition: the oldest transaction of another producer still ongoing, else
        // the offset right after the marker.
        let last_stable_offset = self.first_unstable_offset().unwrap_or(offset + 1);
        Some(AbortedTxn {
            producer_id: m.producer_id,
            first_offset,
            last_offset: offset,
            last_stable_offset,
        })
    }

    /// Writes `<offset:020>.snapshot` in `dir`: the state as of log offset `offset`.
    pub fn write_snapshot(&self, dir: &Path, offset: i64, durability: Durability) -> Result<()> {
        let mut producers: Vec<(i64, ProducerEntry)> = self
            .producers
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        producers.sort_by_key(|(k, _)| *k);
        let snap = Snapshot {
            version: SNAPSHOT_VERSION,
            producers,
        };
        let data = serde_json::to_vec(&snap)
            .map_err(|e| LogError::KafkaStorage(format!("encoding producer snapshot: {e}")))?;
        write_file_atomically(&snapshot_path(dir, offset), &data, durability)
    }

    /// Reads a snapshot file written by [`write_snapshot`](Self::write_snapshot).
    pub fn read_snapshot(path: &Path) -> Result<ProducerStateManager> {
        let data = read_optional(path)?.ok_or_else(|| {
            LogError::KafkaStorage(format!("producer snapshot {} vanished", path.display()))
        })?;
        Self::parse_snapshot(&data, &path.display().to_string())
    }

    /// A snapshot's bytes (a file's, or the long-term tier's copy of one); `source` names
    /// where they come from in errors.
    pub fn parse_snapshot(data: &[u8], source: &str) -> Result<ProducerStateManager> {
        let snap: Snapshot = serde_json::from_slice(data).map_err(|e| {
            LogError::KafkaStorage(format!("corrupt producer snapshot {source}: {e}"))
        })?;
        if snap.version != 1 && snap.version != SNAPSHOT_VERSION {
            return Err(LogError::KafkaStorage(format!(
                "producer snapshot {source} has unknown version {}",
                snap.version
            )));
        }
        let ongoing = snap
            .producers
            .iter()
            .filter_map(|(pid, e)| e.txn_first_offset.map(|first| (first, *pid)))
            .collect();
        Ok(ProducerStateManager {
            producers: snap.producers.into_iter().collect(),
            ongoing,
        })
    }
}

pub fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}.snapshot"))
}

/// Offsets of the snapshot files in `dir`, ascending.
pub fn list_snapshots(dir: &Path) -> Result<Vec<i64>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(LogError::io_at(dir))? {
        let e = e.map_err(LogError::io_at(dir))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(stem) = name.strip_suffix(".snapshot") {
            if let Ok(off) = stem.parse::<i64>() {
                out.push(off);
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}
