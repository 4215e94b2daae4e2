//! Failover republish (KIP-1176 "Leader Failover and Recovery in an AZ Outage"): a broker that
//! becomes leader of a remote-WAL partition at a new epoch hands the uploader its local log
//! again, stamped with the new epoch, so that the data reaches its own rack's bucket and fresh
//! metadata. Followers skip the former leader's metadata (older epoch, or an object in a failed
//! AZ's bucket) and take these records instead, staying on the WAL path.
//!
//! What is republished (`remote.wal.failover.republish`): from the first segment newer than the
//! topic's effective `local.retention.ms` (-2: `retention.ms`; never more than `retention.ms`;
//! -1: the whole log), bounded below by the log start offset, up to the offset where the new
//! epoch began. Everything from there on is appended at the new epoch and uploaded as usual.
//! `optimized` (the default) also leaves out what the long-term tier holds of a topic with
//! `remote.storage.enable=true` (KIP-1176's optimized approach, `ferry_wal::republish::skip_tiered`)
//! and what lies below the high watermark the new leader knew, which every replica in the ISR
//! holds (`ferry_wal::republish::skip_replicated`): a follower needing that part fetches it from
//! the leader, or from the tier below the leader's local log start.
//! The range is `ferry_wal::republish::republish_range`; this module is the task that reads it.
//!
//! The log is read in chunks of at most `remote.wal.upload.max.bytes`, and a chunk is handed
//! over only while the uploader holds less than half of `remote.wal.buffer.max.bytes`, so
//! memory stays bounded and live appends keep room (they are never dropped for a republish).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry_wal::uploader::{AppendOutcome, Uploader, WalAppend};

use super::Shared;
use crate::replica_manager::Partition;

/// The whole batches at the start of `records`: (first base offset, last offset, bytes).
fn whole_batches(records: &[u8]) -> Option<(i64, i64, usize)> {
    let mut spans = ferry_log::batch::whole_batches(records);
    let first = spans.next()?;
    let last = spans.last().unwrap_or_else(|| first.clone());
    Some((first.base_offset, last.last_offset, last.bytes.end))
}

/// Hands `[from, to)` of `p`'s log to the uploader at leader epoch `epoch`; stops early when
/// this broker is no longer the leader of that epoch.
pub(super) async fn run(
    shared: Arc<Shared>,
    uploader: Uploader,
    p: Arc<Partition>,
    epoch: i32,
    from: i64,
    to: i64,
) {
    let chunk = shared.config.upload_max_bytes.max(1);
    let room = (shared.config.buffer_max_bytes / 2).max(chunk);
    let mut offset = from;
    let mut total = 0u64;
    while offset < to {
        if p.leader_epoch_start().map(|(e, _)| e) != Some(epoch) {
            tracing::info!(partition = %p.tp, epoch, offset, "leadership moved on; republish stopped");
            return;
        }
        // Backpressure: wait while the uploader holds half its bound (a slow or failing store).
        if uploader.buffered_bytes() + chunk > room {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        let log = p.log.clone();
        let at = offset.max(log.log_start_offset());
        let read = tokio::task::spawn_blocking(move || log.read(at, chunk, to, true)).await;
        let records: Bytes = match read {
            Ok(Ok(d)) => d.records,
            Ok(Err(e)) => {
                tracing::warn!(partition = %p.tp, offset = at, error = %e, "republish read failed; followers use the classic fetch for the rest");
                return;
            }
            Err(e) => {
                tracing::warn!(partition = %p.tp, error = %e, "republish read task failed");
                return;
            }
        };
        // The uploader's checksum will vouch for these bytes (followers then skip the batch
        // CRCs), so a batch corrupted on this disk must not go in: stop before it, and let
        // followers fetch the rest classically, where the leader checks and repairs it.
        let (records, corrupt) = match ferry_log::scrub::first_corrupt_batch(&records) {
            Some((at, span, why)) => {
                tracing::warn!(partition = %p.tp, base_offset = span.base_offset, reason = %why,
                    "corrupt batch in the local log; republish stopped before it, followers use the classic fetch for the rest");
                (records.slice(..at), true)
            }
            None => (records, false),
        };
        let Some((base, last, len)) = whole_batches(&records) else {
            break;
        };
        if last < at {
            break; // no progress possible (should not happen: reads start at a batch)
        }
        let append = WalAppend {
            tp: p.tp.clone(),
            topic_id: p.topic_id,
            base_offset: base,
            last_offset: last,
            leader_epoch: epoch,
            records: records.slice(..len),
        };
        if let AppendOutcome::Buffered = uploader.append(append) {
            shared.metrics.republished_bytes.inc_by(len as u64);
            total += len as u64;
        }
        offset = last + 1;
        if corrupt {
            return;
        }
    }
    tracing::info!(partition = %p.tp, epoch, from, to, bytes = total, "republished the local log to this rack's remote WAL bucket");
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_log::LogConfig;

    /// The failover end to end without a network: leader 1 (epoch 3) uploads to bucket `az1`;
    /// follower 3 has downloaded only part of it when broker 1 and `az1` fail together. Broker 2
    /// (which had everything) becomes leader at epoch 4 and republishes into `az2`. Follower 3
    /// skips the former leader's metadata (older epoch; its object is gone too) and reaches
    /// broker 2's log byte for byte through the WAL path alone: no classic range.
    #[tokio::test]
    async fn a_new_leader_republishes_and_a_lagging_follower_catches_up_through_its_bucket() {
        use ferry_wal::fetcher::WalFetcher;
        use ferry_wal::metadata::WalMetadataEvent;

        use crate::remote_wal::follower::ReplicaSink;
        use crate::remote_wal::leader::stored_append;
        use crate::remote_wal::test_support::{batch, bucket, replicas, shared, topic};

        let dir = tempfile::tempdir().unwrap();
        let rms: Vec<_> = (1..=3)
            .map(|n| replicas(dir.path(), n, &topic(1, 3)))
            .collect();
        let [p1, p2, p3] = [0, 1, 2].map(|i| rms[i].partition_of("t", 0).unwrap());

        // Epoch 3: broker 1 leads and uploads to az1.
        let (_az1, up1, old_meta) = bucket("az1");
        for n in [3, 5, 2, 4] {
            p1.append_then(&batch(n), |p, info| {
                up1.append(stored_append(p, info).unwrap());
            })
            .unwrap();
            up1.flush().await.unwrap();
        }
        let end = p1.log.log_end_offset();
        let all = p1.log.read(0, 1 << 20, end, true).unwrap().records;
        // Broker 2 has everything; broker 3 only the first batch (by the classic fetch).
        p2.append_as_follower(&all).unwrap();
        let first = p1.log.read(0, 1, end, true).unwrap().records;
        p3.append_as_follower(&first).unwrap();
        assert!(p3.log.log_end_offset() < end);

        // az1 and broker 1 fail; broker 2 leads at epoch 4 and republishes into az2.
        rms[1]
            .ensure_topic(&topic(2, 4), LogConfig::default())
            .unwrap();
        rms[2]
            .ensure_topic(&topic(2, 4), LogConfig::default())
            .unwrap();
        let (epoch, epoch_start) = p2.leader_epoch_start().unwrap();
        assert_eq!((epoch, epoch_start), (4, end));
        let (from, to) = ferry_wal::republish::republish_range(
            &p2.log.segment_largest_timestamps(),
            p2.log.log_start_offset(),
            epoch_start,
            ferry_common::system_clock().now_ms(),
            None,
        )
        .unwrap();
        assert_eq!((from, to), (0, end));
        let shared = shared();
        let (az2, up2, new_meta) = bucket("az2");
        run(shared.clone(), up2.clone(), p2.clone(), epoch, from, to).await;
        up2.flush().await.unwrap();
        assert_eq!(shared.metrics.republished_bytes.get(), all.len() as u64);
        let republished = new_meta.take();
        assert!(republished
            .iter()
            .all(|m| m.leader_epoch == 4 && m.bucket == "az2"));

        // Follower 3: the former leader's records first (as the metadata topic orders them),
        // then the republished ones. az1 is gone: its objects cannot be read.
        let f = p3.clone();
        let sink =
            ReplicaSink::with_resolver(shared.clone(), Arc::new(move |_, _| Some(f.clone())));
        let fetcher = WalFetcher::new(
            move |name| (name == "az2").then(|| az2.clone()),
            Arc::new(sink),
        );
        let old = old_meta.take();
        assert_eq!(old.len(), 4);
        fetcher.on_metadata(old.into_iter().map(WalMetadataEvent::Upsert));
        fetcher.on_metadata(republished.into_iter().map(WalMetadataEvent::Upsert));
        // The replica fetcher's first answer from broker 2 at epoch 4 confirms the log.
        p3.set_validated_epoch(4);
        let report = fetcher.run_once().await;
        assert!(report.classic.is_empty(), "{report:?}");
        assert!(report.stale_skipped > 0, "{report:?}");
        assert_eq!(p3.log.log_end_offset(), end);
        let read = |p: &Partition| p.log.read(0, 1 << 20, end, true).unwrap().records;
        assert_eq!(read(&p3), read(&p2));
        // The new leader recorded epoch 4 on election (Kafka's makeLeader); a follower learns an
        // epoch from its batches, and none has been written at epoch 4 yet.
        assert_eq!(p2.log.epoch_entries(), vec![(3, 0), (4, end)]);
        assert_eq!(p3.log.epoch_entries(), vec![(3, 0)]);
    }

    /// The uploader's checksum would vouch for whatever is republished, and followers skip the
    /// batch CRCs of a verified slice: a batch corrupted on the new leader's disk stays out, and
    /// so does everything after it (the followers fetch that classically, checked).
    #[tokio::test]
    async fn a_corrupt_batch_is_not_republished() {
        use crate::remote_wal::test_support::{batch, bucket, replicas, shared, topic};

        let dir = tempfile::tempdir().unwrap();
        let rm = replicas(dir.path(), 1, &topic(1, 3));
        let p = rm.partition_of("t", 0).unwrap();
        for n in [3, 5, 2, 4] {
            p.append(&batch(n)).unwrap();
        }
        let end = p.log.log_end_offset();
        let all = p.log.read(0, 1 << 20, end, true).unwrap().records;
        let spans: Vec<_> = ferry_log::batch::whole_batches(&all).collect();
        // A flipped byte in the third batch's records.
        let segment = p.log.dir().join("00000000000000000000.log");
        let mut bytes = std::fs::read(&segment).unwrap();
        bytes[spans[2].bytes.end - 2] ^= 0x01;
        std::fs::write(&segment, bytes).unwrap();

        let shared = shared();
        let (_az, up, meta) = bucket("az1");
        run(shared.clone(), up.clone(), p.clone(), 3, 0, end).await;
        up.flush().await.unwrap();
        assert_eq!(
            shared.metrics.republished_bytes.get(),
            spans[2].bytes.start as u64
        );
        let published = meta.take();
        assert!(published
            .iter()
            .all(|m| m.last_offset < spans[2].base_offset));
    }

    #[test]
    fn chunks_end_at_whole_batches() {
        fn header(base: i64, len: i32, delta: i32) -> Vec<u8> {
            let mut b = vec![0u8; 12 + len as usize];
            b[0..8].copy_from_slice(&base.to_be_bytes());
            b[8..12].copy_from_slice(&len.to_be_bytes());
            b[23..27].copy_from_slice(&delta.to_be_bytes());
            b
        }
        let mut data = header(10, 60, 4);
        data.extend(header(15, 60, 0));
        let whole = data.len();
        data.extend(&header(16, 60, 2)[..30]); // a partial batch at the end
        assert_eq!(whole_batches(&data), Some((10, 15, whole)));
        assert_eq!(whole_batches(&data[..20]), None);
    }
}
