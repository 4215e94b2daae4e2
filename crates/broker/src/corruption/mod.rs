//! Corrupt batches on this broker's disks: found, kept from followers and consumers, repaired
//! from another replica. Kafka has nothing of this (it checks CRCs on produce, on recovery and
//! in clients with `check.crcs`); see docs/reliability.md, "Corruption".
//!
//! Where corruption is found:
//! - the fetch handler checks the CRC-32C of every batch it is about to send a follower
//!   ([`Integrity::check_for_replica`]) and sends only the sound batches before a bad one;
//! - the [`scrubber`] reads every closed segment, paced by `log.scrubber.bytes.per.second`.
//!
//! What holds: a batch found corrupt is *known* until a repair overwrote it (or its segment is
//! gone); a consumer's read is cut before a known batch ([`Integrity::hide_known`]); a read that
//! ran while a repair wrote is checked again, since it may hold a mix of old and new bytes.
//! Corruption nobody has found yet is served to consumers as Kafka would serve it (their
//! `check.crcs` catches it); followers never take it (the leader checks, and so does the
//! follower's append).
//!
//! Who repairs: the [`scrubber`] task, for what it finds and for what the fetch path hands it
//! ([`Integrity::request_repair`]), with bytes fetched from another replica ([`repair`]).

pub mod repair;
pub mod scrubber;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use ferry_common::TopicPartition;
use ferry_log::scrub::first_corrupt_batch;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::time::Instant;

/// One log line per partition per this long, however often its corruption is met.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Who found a corrupt batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoundBy {
    /// The scrubber's scan of a closed segment.
    Scrubber,
    /// The leader's check of what it was about to send a follower.
    ReplicaFetch,
    /// A check of a consumer read that overlapped a repair.
    ConsumerFetch,
}

impl FoundBy {
    fn label(self) -> &'static str {
        match self {
            FoundBy::Scrubber => "scrubber",
            FoundBy::ReplicaFetch => "replica_fetch",
            FoundBy::ConsumerFetch => "consumer_fetch",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FoundLabels {
    /// `scrubber`, `replica_fetch` or `consumer_fetch`.
    pub found_by: &'static str,
}

/// The corruption metrics (`ferry_log_scrubber_*`, `ferry_log_corrupt_batches_*`).
#[derive(Default)]
pub struct CorruptionMetrics {
    pub scrubber_bytes_checked: Counter,
    pub scrubber_passes: Counter,
    pub found: Family<FoundLabels, Counter>,
    pub repaired: Counter,
    pub unrepairable: Counter,
}

impl CorruptionMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "log_scrubber_bytes_checked",
            "Bytes of closed segments the scrubber read and checked (batch structure and CRC-32C)",
            self.scrubber_bytes_checked.clone(),
        );
        registry.register(
            "log_scrubber_passes",
            "Scrubber passes completed over every closed segment of this broker",
            self.scrubber_passes.clone(),
        );
        registry.register(
            "log_corrupt_batches_found",
            "Corrupt batches found in this broker's logs (each counted once until repaired), by who found them",
            self.found.clone(),
        );
        registry.register(
            "log_corrupt_batches_repaired",
            "Corrupt batch ranges overwritten with another replica's bytes",
            self.repaired.clone(),
        );
        registry.register(
            "log_corrupt_batches_unrepairable",
            "Corrupt batch ranges no replica could repair (no replica had the same batches); retried on the next pass",
            self.unrepairable.clone(),
        );
    }
}

/// A corrupt batch range known and not yet repaired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Known {
    first_offset: i64,
    last_offset: i64,
    /// Counted as unrepairable already.
    unrepairable: bool,
}

/// The broker's record of corrupt batches: which are known, which wait for a repair, and the
/// metrics. Shared by the fetch handler and the scrubber.
#[derive(Default)]
pub struct Integrity {
    pub metrics: CorruptionMetrics,
    known: Mutex<HashMap<TopicPartition, Vec<Known>>>,
    /// Entries in `known`: a consumer read looks no further while it is 0.
    known_count: AtomicUsize,
    /// Bumped when a repair has written, before its range is forgotten: a read that began
    /// before the bump may hold a mix of old and new bytes, and is checked again.
    repairs: AtomicU64,
    /// Batches the fetch path found corrupt, (partition, base offset), for the scrubber.
    pending: Mutex<VecDeque<(TopicPartition, i64)>>,
    pub(crate) wake: tokio::sync::Notify,
    warned: Mutex<HashMap<TopicPartition, Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Integrity {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a corrupt range of `tp`; true (and counted) when it was not known yet.
    pub fn mark(&self, tp: &TopicPartition, first: i64, last: i64, by: FoundBy) -> bool {
        let mut known = lock(&self.known);
        let ranges = known.entry(tp.clone()).or_default();
        if ranges
            .iter()
            .any(|k| k.first_offset <= last && first <= k.last_offset)
        {
            return false;
        }
        ranges.push(Known {
            first_offset: first,
            last_offset: last,
            unrepairable: false,
        });
        self.known_count.fetch_add(1, Ordering::SeqCst);
        self.metrics
            .found
            .get_or_create(&FoundLabels {
                found_by: by.label(),
            })
            .inc();
        true
    }

    /// Counts a failed repair of a known range, once per range; true when counted now.
    pub fn note_unrepairable(&self, tp: &TopicPartition, first: i64) -> bool {
        let mut known = lock(&self.known);
        let Some(k) = known
            .get_mut(tp)
            .and_then(|r| r.iter_mut().find(|k| k.first_offset == first))
        else {
            return false;
        };
        if k.unrepairable {
            return false;
        }
        k.unrepairable = true;
        self.metrics.unrepairable.inc();
        true
    }

    /// Whether a range starting at `first` is known corrupt and its repair failed before.
    pub fn is_unrepairable(&self, tp: &TopicPartition, first: i64) -> bool {
        lock(&self.known)
            .get(tp)
            .is_some_and(|r| r.iter().any(|k| k.first_offset == first && k.unrepairable))
    }

    /// Forgets the known ranges overlapping `first..=last` (repaired, or their segment is
    /// gone). `wrote`: a repair wrote bytes, so reads that overlapped it are checked again.
    pub fn forget(&self, tp: &TopicPartition, first: i64, last: i64, wrote: bool) {
        if wrote {
            self.repairs.fetch_add(1, Ordering::SeqCst);
            self.metrics.repaired.inc();
        }
        let mut known = lock(&self.known);
        if let Some(ranges) = known.get_mut(tp) {
            let before = ranges.len();
            ranges.retain(|k| !(k.first_offset <= last && first <= k.last_offset));
            self.known_count
                .fetch_sub(before - ranges.len(), Ordering::SeqCst);
            if ranges.is_empty() {
                known.remove(tp);
            }
        }
    }

    /// Whether some batch of `tp` is known corrupt (a consumer's read of it is then made in
    /// memory and cut, [`Integrity::hide_known`]).
    pub fn has_known(&self, tp: &TopicPartition) -> bool {
        self.known_count.load(Ordering::SeqCst) != 0 && lock(&self.known).contains_key(tp)
    }

    /// The repair generation, read before a consumer read (see [`Integrity::hide_known`]).
    pub fn repair_generation(&self) -> u64 {
        self.repairs.load(Ordering::SeqCst)
    }

    /// What a leader sends a follower of `tp`: the sound batches of `records` before the first
    /// corrupt one, which is marked, logged (rate-limited) and handed to the scrubber.
    pub fn check_for_replica(&self, tp: &TopicPartition, records: Bytes) -> Bytes {
        self.cut_corrupt(tp, records, FoundBy::ReplicaFetch)
    }

    /// What a consumer of `tp` is served of `records`, read when the repair generation was
    /// `generation`: cut before the first batch known corrupt, and checked again when a repair
    /// wrote meanwhile.
    pub fn hide_known(&self, tp: &TopicPartition, records: Bytes, generation: u64) -> Bytes {
        let records = if self.known_count.load(Ordering::SeqCst) == 0 {
            records
        } else {
            let cut = {
                let known = lock(&self.known);
                known.get(tp).and_then(|ranges| {
                    ferry_log::batch::whole_batches(&records)
                        .find(|b| {
                            ranges.iter().any(|k| {
                                k.first_offset <= b.last_offset && b.base_offset <= k.last_offset
                            })
                        })
                        .map(|b| b.bytes.start)
                })
            };
            match cut {
                Some(at) => records.slice(..at),
                None => records,
            }
        };
        if self.repair_generation() != generation {
            return self.cut_corrupt(tp, records, FoundBy::ConsumerFetch);
        }
        records
    }

    fn cut_corrupt(&self, tp: &TopicPartition, records: Bytes, by: FoundBy) -> Bytes {
        let Some((at, span, why)) = first_corrupt_batch(&records) else {
            return records;
        };
        if self.mark(tp, span.base_offset, span.last_offset, by) {
            self.request_repair(tp, span.base_offset);
        }
        if self.may_warn(tp) {
            tracing::warn!(partition = %tp, base_offset = span.base_offset, last_offset = span.last_offset,
                reason = %why, found_by = by.label(),
                "corrupt batch on this broker's disk: not served; repairing it from another replica");
        }
        records.slice(..at)
    }

    /// Hands the batch of `tp` at `base_offset` to the scrubber for repair.
    pub fn request_repair(&self, tp: &TopicPartition, base_offset: i64) {
        lock(&self.pending).push_back((tp.clone(), base_offset));
        self.wake.notify_one();
    }

    /// Asks again for the repair of every range still known (a scrubber pass starts with it,
    /// so a repair that failed is retried once per pass, never in a loop).
    pub fn retry_known(&self) {
        let known: Vec<(TopicPartition, i64)> = lock(&self.known)
            .iter()
            .flat_map(|(tp, ranges)| ranges.iter().map(|k| (tp.clone(), k.first_offset)))
            .collect();
        lock(&self.pending).extend(known);
    }

    /// The repairs asked for since the last call.
    pub fn take_pending(&self) -> Vec<(TopicPartition, i64)> {
        lock(&self.pending).drain(..).collect()
    }

    /// Whether a log line about `tp`'s corruption may be written now (one per [`WARN_EVERY`]).
    pub fn may_warn(&self, tp: &TopicPartition) -> bool {
        let now = Instant::now();
        let mut warned = lock(&self.warned);
        match warned.get(tp) {
            Some(at) if now.duration_since(*at) < WARN_EVERY => false,
            _ => {
                warned.insert(tp.clone(), now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests;
