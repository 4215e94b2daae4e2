//! Kafka's `LeaderEpochFileCache`: which leader epoch started at which offset, persisted in
//! `leader-epoch-checkpoint` (Kafka's text checkpoint format: version, count, `epoch offset` lines).
//!
//! Invariants: epochs and start offsets both strictly increase. An entry is added (and the file
//! rewritten synchronously) when this broker is elected leader of a newer epoch (at its log end,
//! as Kafka's `makeLeader`), or else when the first batch of a newer epoch is appended (a
//! follower, or a leader whose election record could not be written). Truncating the log
//! removes entries at or past the new end; moving the log start offset clamps the first entry.
//! After a crash the file may hold entries past the recovered log end; loading truncates them and
//! the header replay re-adds anything the file missed.

use std::path::{Path, PathBuf};

use crate::error::{LogError, Result};
use crate::index::{read_optional, write_file_atomically, Durability};

pub const EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";

/// `(epoch, start offset)` pairs, oldest first.
#[derive(Debug)]
pub struct LeaderEpochCache {
    path: PathBuf,
    entries: Vec<(i32, i64)>,
}

impl LeaderEpochCache {
    pub fn load(dir: &Path) -> Result<LeaderEpochCache> {
        let path = dir.join(EPOCH_CHECKPOINT_FILE);
        let entries = match read_optional(&path)? {
            None => Vec::new(),
            Some(data) => parse_checkpoint(&data, 2)
                .ok_or_else(|| {
                    LogError::KafkaStorage(format!("corrupt checkpoint {}", path.display()))
                })?
                .into_iter()
                .map(|v| (v[0] as i32, v[1]))
                .collect(),
        };
        let mut cache = LeaderEpochCache { path, entries };
        let sorted = cache
            .entries
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1);
        if !sorted {
            return Err(LogError::KafkaStorage(format!(
                "leader epoch checkpoint {} is not monotonic",
                cache.path.display()
            )));
        }
        cache.entries.shrink_to_fit();
        Ok(cache)
    }

    pub fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.0)
    }

    /// Records that `epoch` starts at `start_offset`, if it is newer than the latest epoch.
    /// Returns whether the cache changed (and was persisted).
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<bool> {
        if epoch < 0 {
            return Ok(false);
        }
        match self.entries.last() {
            Some(&(e, _)) if epoch <= e => return Ok(false),
            _ => {}
        }
        // Remove entries that would break offset monotonicity (truncated-away epochs).
        while matches!(self.entries.last(), Some(&(_, o)) if o >= start_offset) {
            self.entries.pop();
        }
        self.entries.push((epoch, start_offset));
        self.persist(Durability::Synced)?;
        Ok(true)
    }

    /// Same as [`assign`](Self::assign) without writing the file (replay during load).
    pub fn assign_in_memory(&mut self, epoch: i32, start_offset: i64) {
        if epoch < 0 || matches!(self.entries.last(), Some(&(e, _)) if epoch <= e) {
            return;
        }
        while matches!(self.entries.last(), Some(&(_, o)) if o >= start_offset) {
            self.entries.pop();
        }
        self.entries.push((epoch, start_offset));
    }

    /// Replaces every entry with `entries` (a follower starting from the long-term tier's
    /// leader-epoch checkpoint), persisted. Refused unless epochs and offsets both increase.
    pub fn replace(&mut self, entries: Vec<(i32, i64)>) -> Result<()> {
        if !entries
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1)
        {
            return Err(LogError::KafkaStorage(format!(
                "leader epochs {entries:?} for {} are not monotonic",
                self.path.display()
            )));
        }
        self.entries = entries;
        self.persist(Durability::Synced)
    }

    /// Drops entries starting at or after `end_offset` (log truncation).
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|&(_, o)| o < end_offset);
        before != self.entries.len()
    }

    /// Moves the start of the first live epoch up to `start_offset` (log start moved).
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let i = self.entries.partition_point(|&(_, o)| o <= start_offset);
        if i == 0 {
            return false;
        }
        let keep_epoch = self.entries[i - 1].0;
        let changed = i > 1 || self.entries[0].1 != start_offset;
        self.entries.drain(..i - 1);
        self.entries[0] = (keep_epoch, start_offset);
        changed
    }

    /// OffsetForLeaderEpoch: the largest epoch <= `epoch` and its end offset (the next epoch's
    /// start, or `log_end_offset` for the latest epoch). `None` if no epoch <= `epoch`.
    pub fn end_offset_for(&self, epoch: i32, log_end_offset: i64) -> Option<(i32, i64)> {
        let i = self.entries.partition_point(|&(e, _)| e <= epoch);
        if i == 0 {
            return None;
        }
        let found = self.entries[i - 1].0;
        let end = self.entries.get(i).map_or(log_end_offset, |&(_, o)| o);
        Some((found, end))
    }

    pub fn persist(&self, durability: Durability) -> Result<()> {
        let lines: Vec<Vec<i64>> = self
            .entries
            .iter()
            .map(|&(e, o)| vec![i64::from(e), o])
            .collect();
        write_checkpoint(&self.path, &lines, durability)
    }
}

/// Kafka's checkpoint text format: `0\n<count>\n` then one line per entry of `width` numbers.
pub fn parse_checkpoint(data: &[u8], width: usize) -> Option<Vec<Vec<i64>>> {
    let text = std::str::from_utf8(data).ok()?;
    let mut lines = text.lines();
    if lines.next()?.trim() != "0" {
        return None;
    }
    let count: usize = lines.next()?.trim().parse().ok()?;
    let mut out = Vec::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        let vals: Vec<i64> = lines
            .next()?
            .split_whitespace()
            .map(str::parse)
            .collect::<std::result::Result<_, _>>()
            .ok()?;
        if vals.len() != width {
            return None;
        }
        out.push(vals);
    }
    Some(out)
}

/// `entries` in Kafka's checkpoint text format (what [`parse_checkpoint`] reads).
pub(crate) fn render_checkpoint(entries: &[Vec<i64>]) -> Vec<u8> {
    let mut s = format!("0\n{}\n", entries.len());
    for e in entries {
        let parts: Vec<String> = e.iter().map(i64::to_string).collect();
        s.push_str(&parts.join(" "));
        s.push('\n');
    }
    s.into_bytes()
}

pub(crate) fn write_checkpoint(
    path: &Path,
    entries: &[Vec<i64>],
    durability: Durability,
) -> Result<()> {
    write_file_atomically(path, &render_checkpoint(entries), durability)
}

/// Reads a single-value checkpoint (`log-start-offset`, `recovery-point`).
pub fn read_offset_checkpoint(path: &Path) -> Result<Option<i64>> {
    let Some(data) = read_optional(path)? else {
        return Ok(None);
    };
    let v = parse_checkpoint(&data, 1)
        .ok_or_else(|| LogError::KafkaStorage(format!("corrupt checkpoint {}", path.display())))?;
    Ok(v.first().map(|v| v[0]))
}

pub(crate) fn write_offset_checkpoint(
    path: &Path,
    offset: i64,
    durability: Durability,
) -> Result<()> {
    write_checkpoint(path, &[vec![offset]], durability)
}
