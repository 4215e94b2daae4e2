//! The fetcher's GET task: one ranged GET of a run of slices, whose bytes (or failure) it
//! stores in their slots before waking the fetcher.

use std::collections::HashMap;
use std::sync::Arc;

use ferry_objstore::ObjectStore;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::state::{lock, KeptObject, Shared, Slot, Unreadable};
use crate::follower::RangedGet;
use crate::metadata::WalSliceMetadata;
use crate::slice_bytes::SliceBytes;
use crate::stages::{Stage, StageMetrics};

/// One ranged GET: stores each slice's bytes (or its failure) and wakes the fetcher.
pub(super) async fn download(
    shared: Arc<Shared>,
    permits: Arc<Semaphore>,
    store: Option<Arc<dyn ObjectStore>>,
    g: RangedGet,
    arrived: Instant,
    stages: StageMetrics,
    max_unreadable: usize,
) {
    let result = {
        let _permit = permits.acquire_owned().await;
        let start = Instant::now();
        stages.observe(Stage::GetQueue, start.duration_since(arrived));
        let r = match &store {
            None => None,
            Some(s) => Some(s.get_range_pieces(&g.object_key, g.range.clone()).await),
        };
        stages.observe(Stage::Get, start.elapsed());
        r
    };
    let at = Instant::now();
    let mut st = lock(&shared.state);
    // A GET of a whole object: slices of it found while it ran wait for it (`InFlight`).
    let object = (g.bucket.clone(), g.object_key.clone());
    let whole = matches!(st.kept_objects.get(&object), Some(KeptObject::Downloading));
    let outcome = match result {
        Some(Ok(pieces)) => {
            let body = SliceBytes::from_pieces(pieces);
            st.counters.bytes_downloaded += body.len() as u64;
            match g.split_body(&body) {
                Ok(parts) => {
                    for (m, bytes) in parts {
                        // A slot pruned meanwhile (record covered or gone) stays gone.
                        if let Some(slot) = st.slots.get_mut(&m) {
                            *slot = Slot::Data { bytes, at };
                        }
                    }
                    if whole {
                        let kept = KeptObject::Ready {
                            range: g.range.clone(),
                            body,
                            at,
                        };
                        settle_waiting(&mut st.slots, &g, |m| match kept.cut(m) {
                            Some(bytes) => Slot::Data { bytes, at },
                            // Outside what was read: a GET of its own next time.
                            None => Slot::Transient,
                        });
                        st.kept_objects.insert(object.clone(), kept);
                    }
                    None
                }
                Err(e) => {
                    tracing::warn!(key = %g.object_key, error = %e, "remote WAL GET returned the wrong length");
                    Some(Slot::Unreadable)
                }
            }
        }
        Some(Err(e)) if e.is_retriable() => {
            tracing::debug!(key = %g.object_key, error = %e, "remote WAL GET failed; classic fetch meanwhile");
            st.counters.transient_errors += 1;
            Some(Slot::Transient)
        }
        Some(Err(e)) => {
            tracing::info!(key = %g.object_key, error = %e, "remote WAL object unreadable; skipping it");
            Some(Slot::Unreadable)
        }
        None => {
            tracing::warn!(bucket = %g.bucket, "no store for remote WAL bucket; skipping its objects");
            Some(Slot::Unreadable)
        }
    };
    if let Some(failed) = outcome {
        let unreadable = matches!(failed, Slot::Unreadable);
        if unreadable {
            if let Some(first) = g.slices.first() {
                if st
                    .unreadable
                    .insert(Unreadable::object(first), max_unreadable)
                {
                    st.counters.unreadable_objects += 1;
                }
            }
        }
        let failed_slot = || {
            if unreadable {
                Slot::Unreadable
            } else {
                Slot::Transient
            }
        };
        for m in &g.slices {
            if let Some(slot) = st.slots.get_mut(m) {
                *slot = failed_slot();
            }
        }
        if whole {
            st.kept_objects.remove(&object);
            settle_waiting(&mut st.slots, &g, |_| failed_slot());
        }
    }
    st.gets_in_flight = st.gets_in_flight.saturating_sub(1);
    drop(st);
    shared.wake.notify_one();
    shared.get_done.notify_waiters();
}

/// Gives each slice of the object `g` read that still waits (in flight, not in `g`'s own
/// slices, which are settled already) the slot `settle` says.
fn settle_waiting(
    slots: &mut HashMap<WalSliceMetadata, Slot>,
    g: &RangedGet,
    settle: impl Fn(&WalSliceMetadata) -> Slot,
) {
    for (m, slot) in slots.iter_mut() {
        if matches!(slot, Slot::InFlight) && m.object_key == g.object_key && m.bucket == g.bucket {
            *slot = settle(m);
        }
    }
}
