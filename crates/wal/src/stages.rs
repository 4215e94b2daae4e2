//! Where a byte's time goes on the remote WAL path: one latency histogram per stage of its trip
//! from the leader's log to a follower's log and back to the leader's high watermark
//! (`ferry_remote_wal_stage_seconds{stage}`; `docs/operations.md` explains each stage).
//!
//! The stages, in the order a byte meets them:
//!
//! | stage | side | from | to |
//! |---|---|---|---|
//! | `cut_wait` | leader | the oldest append of an object | the object is cut |
//! | `put` | leader | PUT starts | PUT done (retries included) |
//! | `publish` | leader | PUT done | its metadata is acknowledged (waiting for earlier objects of the same partitions included) |
//! | `metadata_delivery` | follower | PUT done (`upload_time_ms`, the leader's wall clock) | the record reaches this broker's fetcher |
//! | `get_queue` | follower | the record reaches the fetcher | its GET starts |
//! | `get` | follower | GET starts | GET done |
//! | `append_wait` | follower | GET done | the slice is appended (waiting for earlier slices of the partition included) |
//! | `report` | follower | the WAL path moved the log end | the leader answered the report of it |
//! | `commit` | leader | a remote-WAL append | the high watermark passes it |
//!
//! `metadata_delivery` compares two brokers' wall clocks: on one host it is exact, across hosts
//! it carries their clock skew. Every other stage is measured on one broker's monotonic clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// One stage of the trip (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    CutWait,
    Put,
    Publish,
    MetadataDelivery,
    GetQueue,
    Get,
    AppendWait,
    Report,
    Commit,
}

impl Stage {
    pub const ALL: [Stage; 9] = [
        Stage::CutWait,
        Stage::Put,
        Stage::Publish,
        Stage::MetadataDelivery,
        Stage::GetQueue,
        Stage::Get,
        Stage::AppendWait,
        Stage::Report,
        Stage::Commit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::CutWait => "cut_wait",
            Stage::Put => "put",
            Stage::Publish => "publish",
            Stage::MetadataDelivery => "metadata_delivery",
            Stage::GetQueue => "get_queue",
            Stage::Get => "get",
            Stage::AppendWait => "append_wait",
            Stage::Report => "report",
            Stage::Commit => "commit",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StageLabels {
    stage: &'static str,
}

fn stage_histogram() -> Histogram {
    // 0.25 ms .. ~16 s: the stages of a healthy path are sub-ms to tens of ms; a stuck one shows
    // in the top buckets.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 17))
}

/// The stage histograms. Cheap to clone (clones share the series); one per broker, registered
/// once, handed to the uploader, the fetcher and the broker's glue.
#[derive(Debug, Clone)]
pub struct StageMetrics {
    family: Family<StageLabels, Histogram, fn() -> Histogram>,
    /// Observations per stage, readable without the encoder (tests, benchmarks).
    counts: Arc<[AtomicU64; Stage::ALL.len()]>,
}

impl Default for StageMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl StageMetrics {
    pub fn new() -> Self {
        let family: Family<StageLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(stage_histogram);
        // Every stage is exported from the start, so a dashboard sees zeros, not gaps.
        for stage in Stage::ALL {
            let _ = family.get_or_create(&StageLabels {
                stage: stage.as_str(),
            });
        }
        Self {
            family,
            counts: Arc::new(std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }

    pub fn observe(&self, stage: Stage, took: Duration) {
        self.family
            .get_or_create(&StageLabels {
                stage: stage.as_str(),
            })
            .observe(took.as_secs_f64());
        self.counts[stage as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Observes a duration given in milliseconds (negative values, from clock skew, count as 0).
    pub fn observe_ms(&self, stage: Stage, ms: i64) {
        self.observe(stage, Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
    }

    /// Observations of `stage` so far.
    pub fn count(&self, stage: Stage) -> u64 {
        self.counts[stage as usize].load(Ordering::Relaxed)
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "remote_wal_stage_seconds",
            "Time a byte spends in each stage of the remote WAL path (see docs/operations.md)",
            self.family.clone(),
        );
    }
}
