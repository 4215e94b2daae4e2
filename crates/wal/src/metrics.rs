//! Metrics of the remote WAL, and the estimated cost per hour from the `remote.wal.cost.*` price
//! table (object-store requests and bytes, plus the cross-AZ bytes of inter-broker traffic).

use std::collections::BTreeSet;

use std::sync::Mutex;

use crate::fetcher::FetchReport;
use crate::metadata::WalSliceMetadata;
use crate::stages::StageMetrics;
use ferry_objstore::ObjStoreMetrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::cost::{cost_per_hour, CostTable, Totals};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabels {
    /// `wal` or `classic`.
    pub path: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CostLabels {
    /// `requests` or `transfer`.
    pub part: &'static str,
}

#[derive(Debug)]
pub struct RemoteWalMetrics {
    pub objstore: ObjStoreMetrics,
    /// Where a byte's time goes, stage by stage (`ferry_remote_wal_stage_seconds`).
    pub stages: StageMetrics,
    pub objects_uploaded: Counter,
    pub bytes_uploaded: Counter,
    pub objects_downloaded: Counter,
    pub bytes_downloaded: Counter,
    /// Slices cut from an object downloaded whole for an earlier slice: no GET of their own.
    pub slices_from_kept_objects: Counter,
    pub slices_per_object: Histogram,
    pub partitions_per_object: Histogram,
    pub follower_bytes: Family<PathLabels, Counter>,
    pub metadata_bytes_produced: Counter,
    /// Slice bytes the uploader holds (waiting plus in flight); bounded by
    /// `remote.wal.buffer.max.bytes`.
    pub uploader_buffered_bytes: Gauge,
    pub fallback_ranges: Counter,
    /// Reads of the metadata topic in which a followed partition's queue was full (its records
    /// from there are read again later).
    pub metadata_held_back: Counter,
    /// Followed partitions whose metadata waits to be read again (their queue was full).
    pub partitions_awaiting_reread: Gauge,
    /// Leader: WAL reports answered with records (follower behind the WAL path).
    pub reports_served_classic: Family<ReasonLabels, Counter>,
    /// Follower: partitions switched to the classic fetch by a WAL fetcher range or a stall.
    pub classic_switches: Counter,
    /// New leader: record bytes of its local log handed to the uploader again (failover).
    pub republished_bytes: Counter,
    /// Uploaded slices left unpublished because this broker no longer led their partition at
    /// the epoch they were stamped with (a demoted leader's last objects).
    pub slices_unpublished_leadership_moved: Counter,
    /// This broker's objects in its bucket not deleted yet (the GC's view), and their bytes:
    /// what the object lifetimes cost in storage.
    pub kept_objects: Gauge,
    pub kept_bytes: Gauge,
    /// Estimated USD per hour, as millionths (gauges are integers).
    pub cost_micro_usd_per_hour: Family<CostLabels, Gauge>,
    cost: Mutex<CostState>,
    /// `ferry_remote_wal_rack_info{rack} 1`: lets `ferry cost-report` tell cross-rack bytes.
    pub rack_info: Family<RackLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RackLabels {
    pub rack: String,
}

#[derive(Debug, Default)]
struct CostState {
    last: Option<(i64, Totals)>,
}

impl RemoteWalMetrics {
    pub fn new() -> Self {
        Self {
            objstore: ObjStoreMetrics::new(),
            stages: StageMetrics::new(),
            objects_uploaded: Counter::default(),
            bytes_uploaded: Counter::default(),
            objects_downloaded: Counter::default(),
            bytes_downloaded: Counter::default(),
            slices_from_kept_objects: Counter::default(),
            slices_per_object: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            partitions_per_object: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            follower_bytes: Family::default(),
            metadata_bytes_produced: Counter::default(),
            uploader_buffered_bytes: Gauge::default(),
            fallback_ranges: Counter::default(),
            metadata_held_back: Counter::default(),
            partitions_awaiting_reread: Gauge::default(),
            reports_served_classic: Family::default(),
            classic_switches: Counter::default(),
            republished_bytes: Counter::default(),
            slices_unpublished_leadership_moved: Counter::default(),
            kept_objects: Gauge::default(),
            kept_bytes: Gauge::default(),
            cost_micro_usd_per_hour: Family::default(),
            cost: Mutex::new(CostState::default()),
            rack_info: Family::default(),
        }
    }

    pub fn register(&self, r: &mut Registry) {
        self.objstore.register(r);
        self.stages.register(r);
        r.register(
            "remote_wal_uploader_buffered_bytes",
            "Slice bytes the uploader holds, waiting or in flight (at most remote.wal.buffer.max.bytes)",
            self.uploader_buffered_bytes.clone(),
        );
        r.register(
            "remote_wal_objects_uploaded",
            "WAL objects uploaded and published",
            self.objects_uploaded.clone(),
        );
        r.register(
            "remote_wal_uploaded_bytes",
            "Bytes of WAL objects uploaded and published",
            self.bytes_uploaded.clone(),
        );
        r.register(
            "remote_wal_gets",
            "Ranged GETs of WAL objects by this broker's follower",
            self.objects_downloaded.clone(),
        );
        r.register(
            "remote_wal_slices_from_kept_objects",
            "Slices this broker's follower cut from an object it had downloaded whole for an earlier slice (no GET of their own)",
            self.slices_from_kept_objects.clone(),
        );
        r.register(
            "remote_wal_downloaded_bytes",
            "Bytes downloaded from WAL objects by this broker's follower",
            self.bytes_downloaded.clone(),
        );
        r.register(
            "remote_wal_slices_per_object",
            "Slices in each uploaded WAL object",
            self.slices_per_object.clone(),
        );
        r.register(
            "remote_wal_partitions_per_object",
            "Distinct partitions in each uploaded WAL object",
            self.partitions_per_object.clone(),
        );
        r.register(
            "remote_wal_follower_bytes",
            "Record bytes this broker appended as a follower of remote-WAL partitions, by path (wal or classic)",
            self.follower_bytes.clone(),
        );
        r.register(
            "remote_wal_metadata_produced_bytes",
            "Record-batch bytes this broker produced to __remote_wal_log_metadata",
            self.metadata_bytes_produced.clone(),
        );
        r.register(
            "remote_wal_fallback_ranges",
            "Offset ranges the uploader dropped from the WAL path (followers fetch them classically)",
            self.fallback_ranges.clone(),
        );
        r.register(
            "remote_wal_metadata_held_back",
            "Reads of __remote_wal_log_metadata in which a followed partition's queue (remote.wal.fetcher.queue.max.slices) was full: that partition's backlog is taken in turns, its metadata read again once the follower appended some; other partitions do not wait",
            self.metadata_held_back.clone(),
        );
        r.register(
            "remote_wal_partitions_awaiting_reread",
            "Partitions this broker follows whose WAL metadata waits to be read again from __remote_wal_log_metadata (their fetcher queue was full): a backlog being taken in turns; 0 once it is through",
            self.partitions_awaiting_reread.clone(),
        );
        r.register(
            "remote_wal_reports_served_classic",
            "Follower reports of remote-WAL partitions this leader answered with records, by reason: dropped_range (the uploader dropped it), wal_failed (published a fallback window ago, still missing), uploads_stuck, far_behind",
            self.reports_served_classic.clone(),
        );
        r.register(
            "remote_wal_classic_switches",
            "Times a followed remote-WAL partition switched to the classic fetch",
            self.classic_switches.clone(),
        );
        r.register(
            "remote_wal_republished_bytes",
            "Record bytes of its local log this broker re-uploaded on becoming leader of remote-WAL partitions (remote.wal.failover.republish)",
            self.republished_bytes.clone(),
        );
        r.register(
            "remote_wal_slices_unpublished_leadership_moved",
            "Uploaded slices whose metadata this broker did not publish because it no longer led their partition at the epoch they were written under",
            self.slices_unpublished_leadership_moved.clone(),
        );
        r.register(
            "remote_wal_kept_objects",
            "WAL objects this broker uploaded that are not deleted yet: some assigned replica (or, for tiered topics, the long-term tier) lacks their data and they are younger than their lifetime",
            self.kept_objects.clone(),
        );
        r.register(
            "remote_wal_kept_bytes",
            "Bytes of those objects (storage the object lifetimes cost)",
            self.kept_bytes.clone(),
        );
        r.register(
            "remote_wal_rack_info",
            "This broker's rack (as a label, value 1)",
            self.rack_info.clone(),
        );
        r.register(
            "remote_wal_estimated_cost_micro_usd_per_hour",
            "Estimated cost of object-store requests and of transfer (object store plus cross-AZ inter-broker bytes) in millionths of a USD per hour, over the last minute",
            self.cost_micro_usd_per_hour.clone(),
        );
    }

    pub fn follower_bytes(&self, path: &'static str, n: u64) {
        self.follower_bytes
            .get_or_create(&PathLabels { path })
            .inc_by(n);
    }

    /// Objects whose slices were just published.
    pub fn on_published(&self, records: &[WalSliceMetadata]) {
        // Per object: size, slices, distinct partitions.
        type PerObject = (u64, usize, BTreeSet<(uuid::Uuid, i32)>);
        let mut objects: std::collections::BTreeMap<&str, PerObject> = Default::default();
        for m in records {
            let e = objects.entry(m.object_key.as_str()).or_default();
            e.0 = m.object_size;
            e.1 += 1;
            e.2.insert((m.topic_id, m.partition));
        }
        for (size, slices, parts) in objects.values() {
            self.objects_uploaded.inc();
            self.bytes_uploaded.inc_by(*size);
            self.slices_per_object.observe(*slices as f64);
            self.partitions_per_object.observe(parts.len() as f64);
        }
    }

    pub fn on_fetch_report(&self, r: &FetchReport) {
        self.objects_downloaded.inc_by(r.gets as u64);
        self.slices_from_kept_objects
            .inc_by(r.slices_from_kept_objects as u64);
        self.bytes_downloaded.inc_by(r.bytes_downloaded);
    }

    /// Updates the cost gauges from the counters' change since the last call (at most every
    /// minute a new base is taken, so the estimate follows the recent rate).
    pub fn update_cost(&self, prices: &CostTable, now: Totals, now_ms: i64) {
        let mut st = self.cost.lock().unwrap_or_else(|p| p.into_inner());
        let Some((then_ms, then)) = st.last else {
            st.last = Some((now_ms, now));
            return;
        };
        let delta = Totals {
            puts: now.puts.saturating_sub(then.puts),
            gets: now.gets.saturating_sub(then.gets),
            bytes_up: now.bytes_up.saturating_sub(then.bytes_up),
            bytes_down: now.bytes_down.saturating_sub(then.bytes_down),
            cross_az_bytes: now.cross_az_bytes.saturating_sub(then.cross_az_bytes),
        };
        let (requests, transfer) = cost_per_hour(prices, delta, now_ms - then_ms);
        self.cost_micro_usd_per_hour
            .get_or_create(&CostLabels { part: "requests" })
            .set((requests * 1e6) as i64);
        self.cost_micro_usd_per_hour
            .get_or_create(&CostLabels { part: "transfer" })
            .set((transfer * 1e6) as i64);
        if now_ms - then_ms >= 60_000 {
            st.last = Some((now_ms, now));
        }
    }
}

impl Default for RemoteWalMetrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_records_count_objects_and_partitions() {
        let m = RemoteWalMetrics::new();
        let rec = |key: &str, p: i32| WalSliceMetadata {
            bucket: "b".into(),
            object_key: key.into(),
            byte_position: 0,
            byte_length: 1,
            topic_id: uuid::Uuid::nil(),
            partition: p,
            base_offset: 0,
            last_offset: 0,
            leader_epoch: 0,
            slice_crc: 0,
            object_size: 100,
            uploader_broker_id: 1,
            upload_time_ms: 0,
        };
        m.on_published(&[rec("a", 0), rec("a", 1), rec("b", 0)]);
        assert_eq!(m.objects_uploaded.get(), 2);
        assert_eq!(m.bytes_uploaded.get(), 200);
        let mut r = Registry::default();
        m.register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(
            text.contains("remote_wal_partitions_per_object_sum 3.0"),
            "{text}"
        );
    }
}
