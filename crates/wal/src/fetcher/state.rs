//! What the fetcher holds between steps: the queued metadata records per partition, where the
//! bytes of each planned slice are ([`Slot`]), and the records found unusable.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metadata::WalSliceMetadata;
use crate::slice_bytes::SliceBytes;
use crate::uploader::WalPartition;

/// What made a record unusable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Unreadable {
    Object {
        bucket: String,
        key: String,
    },
    Slice {
        bucket: String,
        key: String,
        position: u64,
    },
}

impl Unreadable {
    pub(super) fn object(m: &WalSliceMetadata) -> Self {
        Self::Object {
            bucket: m.bucket.clone(),
            key: m.object_key.clone(),
        }
    }
    pub(super) fn slice(m: &WalSliceMetadata) -> Self {
        Self::Slice {
            bucket: m.bucket.clone(),
            key: m.object_key.clone(),
            position: m.byte_position,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct UnreadableSet {
    pub(super) set: HashSet<Unreadable>,
    pub(super) order: VecDeque<Unreadable>,
}

impl UnreadableSet {
    pub(super) fn insert(&mut self, u: Unreadable, cap: usize) -> bool {
        if !self.set.insert(u.clone()) {
            return false;
        }
        self.order.push_back(u);
        while self.order.len() > cap.max(1) {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }

    pub(super) fn contains(&self, m: &WalSliceMetadata) -> bool {
        self.set.contains(&Unreadable::object(m)) || self.set.contains(&Unreadable::slice(m))
    }
}

/// A queued record and when it reached this fetcher (the `get_queue` stage starts there).
#[derive(Debug, Clone)]
pub(super) struct Queued {
    pub(super) meta: WalSliceMetadata,
    pub(super) arrived: Instant,
}

/// Where the bytes of one planned slice are.
#[derive(Debug)]
pub(super) enum Slot {
    /// Its GET runs.
    InFlight,
    /// Downloaded at `at`, waiting for its turn to be appended.
    Data { bytes: SliceBytes, at: Instant },
    /// Its object cannot be read (marked unreadable); classic fetch instead.
    Unreadable,
    /// The GET failed transiently: classic fetch meanwhile, retried on the next retry tick.
    Transient,
}

impl Slot {
    /// Bytes it holds against `max_download_bytes`.
    pub(super) fn held(&self, m: &WalSliceMetadata) -> u64 {
        match self {
            Slot::InFlight | Slot::Data { .. } => u64::from(m.byte_length),
            Slot::Unreadable | Slot::Transient => 0,
        }
    }
}

/// One object, as the fetcher names it.
pub(super) type ObjectRef = (String, String);

pub(super) fn object_of(m: &WalSliceMetadata) -> ObjectRef {
    (m.bucket.clone(), m.object_key.clone())
}

/// An object downloaded whole ([`super::FetcherConfig::whole_object_max_bytes`]).
#[derive(Debug)]
pub(super) enum KeptObject {
    /// Its GET runs; slices of it found meanwhile wait for it (their slots are `InFlight`).
    Downloading,
    /// Its bytes `range`, in the pieces they arrived in, downloaded at `at`.
    Ready {
        range: Range<u64>,
        body: SliceBytes,
        at: Instant,
    },
    /// Downloaded whole at `at`, then let go to stay within the kept objects' budget before
    /// `OBJECT_KEPT_FOR` passed. Slices of it whose records still arrive get GETs of their own
    /// ranges: a second GET of the whole object would download again what was appended.
    Evicted { at: Instant },
}

impl KeptObject {
    /// The bytes of slice `m` (views of the pieces), if it was downloaded.
    pub(super) fn cut(&self, m: &WalSliceMetadata) -> Option<SliceBytes> {
        let KeptObject::Ready { range, body, .. } = self else {
            return None;
        };
        let r = m.byte_range();
        if r.start < range.start || r.end > range.end {
            return None;
        }
        let from = usize::try_from(r.start - range.start).ok()?;
        let to = usize::try_from(r.end - range.start).ok()?;
        Some(body.slice(from..to))
    }

    fn bytes(&self) -> u64 {
        match self {
            KeptObject::Downloading | KeptObject::Evicted { .. } => 0,
            KeptObject::Ready { body, .. } => body.len() as u64,
        }
    }
}

/// Counters of download tasks, drained into the next step's report.
#[derive(Debug, Default)]
pub(super) struct DownloadCounters {
    pub(super) bytes_downloaded: u64,
    pub(super) unreadable_objects: usize,
    pub(super) transient_errors: usize,
}

#[derive(Debug, Default)]
pub(super) struct State {
    /// Per partition: base offset (the compaction key within a partition) → latest record.
    pub(super) records: HashMap<WalPartition, BTreeMap<i64, Queued>>,
    /// Records of partitions this broker does not follow (yet), since when: a new topic's
    /// first metadata can arrive before this broker applied the image that makes it a
    /// follower. Moved to `records` once it follows; forgotten after [`super::PARK_FOR`] (it leads
    /// the partition, or does not host it).
    pub(super) parked: HashMap<WalPartition, (Instant, BTreeMap<i64, Queued>)>,
    pub(super) unreadable: UnreadableSet,
    /// Per partition of the metadata topic: what was read, and whose records were not taken.
    pub(super) metadata_reads: HashMap<i32, super::metadata_read::MetadataRead>,
    /// The bytes of planned slices, by record.
    pub(super) slots: HashMap<WalSliceMetadata, Slot>,
    /// GET tasks running.
    pub(super) gets_in_flight: usize,
    /// Objects downloaded whole, for slices whose records arrive after their GET started.
    pub(super) kept_objects: HashMap<ObjectRef, KeptObject>,
    pub(super) counters: DownloadCounters,
}

impl State {
    pub(super) fn remove_if_same(&mut self, m: &WalSliceMetadata) {
        let wp = partition_of(m);
        if let Some(map) = self.records.get_mut(&wp) {
            if map.get(&m.base_offset).is_some_and(|q| q.meta == *m) {
                map.remove(&m.base_offset);
            }
            if map.is_empty() {
                self.records.remove(&wp);
            }
        }
        if !matches!(self.slots.get(m), Some(Slot::InFlight)) {
            self.slots.remove(m);
        }
    }

    /// Forgets kept objects older than `keep_for`, then lets go of the oldest beyond
    /// `max_bytes` (remembered as [`KeptObject::Evicted`] until `keep_for` passes).
    pub(super) fn expire_kept_objects(&mut self, now: Instant, keep_for: Duration, max_bytes: u64) {
        self.kept_objects.retain(|_, o| match o {
            KeptObject::Downloading => true,
            KeptObject::Ready { at, .. } | KeptObject::Evicted { at } => {
                now.saturating_duration_since(*at) < keep_for
            }
        });
        let mut total: u64 = self.kept_objects.values().map(KeptObject::bytes).sum();
        while total > max_bytes {
            let oldest = self
                .kept_objects
                .iter()
                .filter_map(|(k, o)| match o {
                    KeptObject::Ready { at, .. } => Some((*at, k.clone())),
                    KeptObject::Downloading | KeptObject::Evicted { .. } => None,
                })
                .min();
            let Some((at, key)) = oldest else { break };
            if let Some(o) = self.kept_objects.insert(key, KeptObject::Evicted { at }) {
                total = total.saturating_sub(o.bytes());
            }
        }
    }

    /// Bytes downloading or downloaded and not appended yet.
    pub(super) fn held_bytes(&self) -> u64 {
        self.slots.iter().map(|(m, s)| s.held(m)).sum()
    }

    /// Whether a usable queued record of `wp` covers `offset`.
    pub(super) fn covers(&self, wp: &WalPartition, offset: i64) -> bool {
        self.records.get(wp).is_some_and(|map| {
            map.values().any(|q| {
                q.meta.base_offset <= offset
                    && offset <= q.meta.last_offset
                    && !self.unreadable.contains(&q.meta)
            })
        })
    }
}

/// The WAL partition a metadata event is about.
pub(super) fn event_partition(e: &crate::metadata::WalMetadataEvent) -> WalPartition {
    match e {
        crate::metadata::WalMetadataEvent::Upsert(m) => partition_of(m),
        crate::metadata::WalMetadataEvent::Tombstone(k) => WalPartition {
            topic_id: k.topic_id,
            partition: k.partition,
        },
    }
}

pub(super) fn partition_of(m: &WalSliceMetadata) -> WalPartition {
    WalPartition {
        topic_id: m.topic_id,
        partition: m.partition,
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the state consistent, so a poisoned lock is still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the fetcher and its GET tasks share.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    /// Wakes the run loop: new metadata, or a GET finished.
    pub(super) wake: Notify,
    /// Wakes [`WalFetcher::run_once`] waiting for its GETs.
    pub(super) get_done: Notify,
}
