//! What the fetcher is told (its tuning) and what it tells back (the report of each step).

use crate::follower::ClassicFetch;
use crate::stages::StageMetrics;
use crate::uploader::WalPartition;

/// Fetcher tuning.
#[derive(Debug, Clone)]
pub struct FetcherConfig {
    /// Slices of one object this close (bytes) share one ranged GET (rule 7).
    pub max_gap_bytes: u64,
    /// Ranged GETs in flight at once (at least 1).
    pub max_concurrent_gets: usize,
    /// Slice bytes downloading or downloaded but not appended yet, at most (a follower far
    /// behind does not start its whole backlog at once). At least one GET always runs.
    pub max_download_bytes: u64,
    /// Records queued per partition; the metadata beyond this is read again once the queue
    /// has room (`WalFetcher::reread_from`).
    pub max_records_per_partition: usize,
    /// Unreadable objects and slices remembered (oldest forgotten first).
    pub max_unreadable: usize,
    /// An object no larger than this is downloaded whole by its first GET and kept for a
    /// moment (`OBJECT_KEPT_FOR`, 2 s), so that slices whose records arrive after that GET
    /// started are cut from it instead of getting GETs of their own. A leader's object holds
    /// slices of several partitions whose records come over several metadata partitions, a
    /// few milliseconds apart; with three brokers every follower needs all of them. 0: GET
    /// only the slices known.
    pub whole_object_max_bytes: u64,
    /// Where the `metadata_delivery`, `get_queue`, `get` and `append_wait` stages are recorded.
    pub stages: StageMetrics,
}

impl Default for FetcherConfig {
    fn default() -> Self {
        Self {
            max_gap_bytes: 64 << 10,
            max_concurrent_gets: 16,
            max_download_bytes: 64 << 20,
            max_records_per_partition: 4_096,
            max_unreadable: 16_384,
            whole_object_max_bytes: 8 << 20,
            stages: StageMetrics::default(),
        }
    }
}

/// A range one partition must get by the classic fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionClassicFetch {
    pub partition: WalPartition,
    pub fetch: ClassicFetch,
}

/// What one step (or one [`WalFetcher::run_once`]) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchReport {
    /// Ranges to fetch classically, per partition in offset order.
    pub classic: Vec<PartitionClassicFetch>,
    /// Ranged GETs issued.
    pub gets: usize,
    /// Slices cut from an object already downloaded whole (or downloading), without a GET.
    pub slices_from_kept_objects: usize,
    pub bytes_downloaded: u64,
    /// Slices appended to local logs.
    pub slices_appended: usize,
    /// Records skipped for a stale leader epoch (rule 1).
    pub stale_skipped: usize,
    /// Objects newly marked unreadable.
    pub unreadable_objects: usize,
    /// Slices that failed verification.
    pub corrupt_slices: usize,
    /// Transient store errors (the records stay queued).
    pub transient_errors: usize,
}

impl FetchReport {
    /// Adds a later step's report; a range reported by both is listed once.
    pub(super) fn merge(&mut self, other: FetchReport) {
        for c in other.classic {
            if !self.classic.contains(&c) {
                self.classic.push(c);
            }
        }
        self.gets += other.gets;
        self.slices_from_kept_objects += other.slices_from_kept_objects;
        self.bytes_downloaded += other.bytes_downloaded;
        self.slices_appended += other.slices_appended;
        self.stale_skipped += other.stale_skipped;
        self.unreadable_objects += other.unreadable_objects;
        self.corrupt_slices += other.corrupt_slices;
        self.transient_errors += other.transient_errors;
    }
}
