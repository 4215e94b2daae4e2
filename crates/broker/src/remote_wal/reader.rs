//! Follows `__remote_wal_log_metadata` from this broker's local replicas of its partitions (up to
//! each log's end) and hands every record to the WAL fetcher and the GC.
//!
//! With the topic's replication factor min(3, live brokers), every broker of a cluster of up to
//! three hosts a replica of every metadata partition. A broker without a replica of some
//! partition (larger clusters) does not read it yet; its followers then take the classic fetch
//! for the partitions routed there (the stall rules), which is correct but not cheap.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry_wal::metadata::{WalMetadataRecord, METADATA_TOPIC};
use futures::future::select_all;

use super::RemoteWal;
use crate::broker::Broker;

const MAX_READ: usize = 1 << 20;

/// Runs until the task is dropped.
pub async fn run(wal: Arc<RemoteWal>, broker: std::sync::Weak<Broker>) {
    // Next offset to read per metadata partition.
    let mut next: HashMap<i32, i64> = HashMap::new();
    let mut caught_up = false;
    loop {
        let Some(b) = broker.upgrade() else { return };
        let partitions: Vec<_> = match b.metadata.topic(METADATA_TOPIC) {
            Some(t) => (0..t.partitions)
                .filter_map(|p| b.replicas.partition_of(METADATA_TOPIC, p).map(|x| (p, x)))
                .collect(),
            None => Vec::new(),
        };
        drop(b);
        let mut watchers: Vec<_> = partitions.iter().map(|(_, p)| p.subscribe()).collect();
        for (index, p) in &partitions {
            let from = next
                .get(index)
                .copied()
                .unwrap_or_else(|| p.log.log_start_offset());
            let end = p.log.log_end_offset();
            // A follower replica may have been truncated below what we read.
            let mut offset = from.min(end);
            while offset < end {
                let data = match p.log.read(offset, MAX_READ, end, true) {
                    Ok(d) => d,
                    Err(e) => {
                        tracing::debug!(partition = index, error = %e, "reading remote WAL metadata");
                        break;
                    }
                };
                if data.records.is_empty() {
                    break;
                }
                let n = wal.feed(data.records, offset);
                if n <= offset {
                    break;
                }
                offset = n;
            }
            next.insert(*index, offset);
        }
        if !caught_up && !partitions.is_empty() {
            caught_up = true;
            wal.metadata_caught_up();
        }
        if watchers.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let changed = select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
        let _ = tokio::time::timeout(Duration::from_millis(200), changed).await;
    }
}

/// Decodes whole batches; returns the records at or after `from` as (key, value) and the next
/// offset to read.
pub fn decode(records: Bytes, from: i64) -> (Vec<crate::keyed_records::KeyValue>, i64) {
    crate::keyed_records::decode(records, from).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "undecodable remote WAL metadata batch skipped");
        (Vec::new(), from)
    })
}

impl RemoteWal {
    /// Feeds a read of the metadata topic to the fetcher and the GC; returns the next offset.
    fn feed(&self, records: Bytes, from: i64) -> i64 {
        let (recs, next) = decode(records, from);
        self.fetcher
            .on_raw_metadata(recs.iter().map(|(k, v)| (k.as_ref(), v.as_deref())));
        if let Some(gc) = &self.gc {
            for (k, v) in &recs {
                if let Ok(e) = WalMetadataRecord::decode(k, v.as_deref()) {
                    gc.on_metadata(&e);
                }
            }
        }
        next
    }
}
