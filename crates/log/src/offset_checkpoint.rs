//! Kafka's `OffsetCheckpointFile`: one offset per partition of a log dir, in the text format
//! `0\n<count>\n<topic> <partition> <offset>\n...`. The broker keeps the high watermarks of its
//! replicas in `replication-offset-checkpoint` in each log dir (Kafka's name), so that a restarted
//! replica starts from the high watermark it had instead of 0 or its log end offset.
//!
//! Writes go through a temporary file, fsync and rename: a reader (or a crash) sees the old or the
//! new file, never a mix. A missing file is an empty checkpoint; a corrupt one is an error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ferry_common::TopicPartition;

use crate::error::{LogError, Result};
use crate::index::{read_optional, write_file_atomically, Durability};

/// The high-watermark checkpoint of a log dir.
pub const REPLICATION_OFFSET_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";

const VERSION: &str = "0";

/// A `<topic> <partition> <offset>` checkpoint file.
#[derive(Debug, Clone)]
pub struct OffsetCheckpointFile {
    path: PathBuf,
}

impl OffsetCheckpointFile {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file with `offsets`.
    pub fn write(&self, offsets: &BTreeMap<TopicPartition, i64>) -> Result<()> {
        let mut s = format!("{VERSION}\n{}\n", offsets.len());
        for (tp, offset) in offsets {
            s.push_str(&format!("{} {} {offset}\n", tp.topic, tp.partition));
        }
        write_file_atomically(&self.path, s.as_bytes(), Durability::Synced)?;
        // The rename itself must survive a crash too.
        if let Some(dir) = self.path.parent() {
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }

    /// The offsets in the file; empty if there is no file.
    pub fn read(&self) -> Result<BTreeMap<TopicPartition, i64>> {
        let Some(data) = read_optional(&self.path)? else {
            return Ok(BTreeMap::new());
        };
        parse(&data).ok_or_else(|| {
            LogError::KafkaStorage(format!("corrupt checkpoint {}", self.path.display()))
        })
    }
}

fn parse(data: &[u8]) -> Option<BTreeMap<TopicPartition, i64>> {
    let text = std::str::from_utf8(data).ok()?;
    let mut lines = text.lines();
    if lines.next()?.trim() != VERSION {
        return None;
    }
    let count: usize = lines.next()?.trim().parse().ok()?;
    let mut out = BTreeMap::new();
    for _ in 0..count {
        // Topic names cannot contain spaces, so the three fields split cleanly.
        let mut fields = lines.next()?.split_whitespace();
        let topic = fields.next()?;
        let partition: i32 = fields.next()?.parse().ok()?;
        let offset: i64 = fields.next()?.parse().ok()?;
        if fields.next().is_some() {
            return None;
        }
        out.insert(TopicPartition::new(topic, partition), offset);
    }
    Some(out)
}
