//! Idempotent producer state, Kafka's `ProducerStateManager` reduced to what idempotence needs.
//!
//! For each producer id the log keeps the current epoch and the metadata of the last
//! [`MAX_BATCHES_PER_PRODUCER`] batches appended. Invariants: within an epoch, each batch's base
//! sequence is the previous batch's last sequence + 1 (wrapping at i32::MAX); a new epoch or a new
//! producer starts at sequence 0; epochs never go down. The state is rebuilt after a restart from
//! the latest `<offset:020>.snapshot` file (written on roll and close) plus a replay of the batch
//! headers from that offset to the log end.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::batch::{seq_add, BatchHeader};
use crate::error::{LogError, Result};
use crate::index::{read_optional, write_file_atomically};

/// How many recent batches per producer are remembered for duplicate detection (Kafka's 5).
pub const MAX_BATCHES_PER_PRODUCER: usize = 5;

/// One appended batch of an idempotent producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
}

/// What the log knows about one producer id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<BatchMetadata>,
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
}

impl ProducerStateManager {
    pub fn epoch_of(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|e| e.epoch)
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

    /// Checks a producer batch against `entry` (the producer's current state, if any), in
    /// Kafka's order: epoch fencing, duplicate lookup, then sequence continuity.
    pub fn check(entry: Option<&ProducerEntry>, h: &BatchHeader) -> Result<SequenceCheck> {
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

    /// Applies an appended batch (with its final offsets) to `entry`.
    pub fn apply(entry: &mut ProducerEntry, h: &BatchHeader) {
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        entry.batches.push_back(BatchMetadata {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            first_offset: h.base_offset,
            last_offset: h.last_offset(),
        });
        while entry.batches.len() > MAX_BATCHES_PER_PRODUCER {
            entry.batches.pop_front();
        }
    }

    /// Records an appended (or replayed) batch; batches without a producer id are ignored.
    pub fn update(&mut self, h: &BatchHeader) {
        if !h.has_producer_id() {
            return;
        }
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: h.producer_epoch,
                batches: VecDeque::new(),
            });
        Self::apply(entry, h);
    }

    /// Writes `<offset:020>.snapshot` in `dir`: the state as of log offset `offset`.
    pub fn write_snapshot(&self, dir: &Path, offset: i64) -> Result<()> {
        let mut producers: Vec<(i64, ProducerEntry)> = self
            .producers
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        producers.sort_by_key(|(k, _)| *k);
        let snap = Snapshot {
            version: 1,
            producers,
        };
        let data = serde_json::to_vec(&snap)
            .map_err(|e| LogError::KafkaStorage(format!("encoding producer snapshot: {e}")))?;
        write_file_atomically(&snapshot_path(dir, offset), &data)
    }

    /// Reads a snapshot file written by [`write_snapshot`](Self::write_snapshot).
    pub fn read_snapshot(path: &Path) -> Result<ProducerStateManager> {
        let data = read_optional(path)?.ok_or_else(|| {
            LogError::KafkaStorage(format!("producer snapshot {} vanished", path.display()))
        })?;
        let snap: Snapshot = serde_json::from_slice(&data).map_err(|e| {
            LogError::KafkaStorage(format!("corrupt producer snapshot {}: {e}", path.display()))
        })?;
        if snap.version != 1 {
            return Err(LogError::KafkaStorage(format!(
                "producer snapshot {} has unknown version {}",
                path.display(),
                snap.version
            )));
        }
        Ok(ProducerStateManager {
            producers: snap.producers.into_iter().collect(),
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
