//! The coordinator's timers: aborting transactions open longer than their timeout (with an
//! epoch bump, so the producer that let it time out is fenced), and forgetting transactional
//! ids idle longer than `transactional.id.expiration.ms` (a tombstone in the log).

use std::sync::Arc;

use crate::coordinator::{Core, OnFailure, PendingWrite, TransactionCoordinator};
use crate::seams::{Durable, StoredRecord};
use crate::state::TransactionState;
use crate::txn_log::encode_key;

/// Tombstones written to one partition, awaiting durability.
struct Expiry {
    partition: i32,
    load: u64,
    /// Each id with the epoch it had, so an id that changed meanwhile is kept.
    ids: Vec<(String, i16)>,
    durable: Durable,
}

impl TransactionCoordinator {
    /// Runs the timers that are due, each at its configured interval
    /// (`transaction.abort.timed.out.transaction.cleanup.interval.ms`,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`). Call it about once a
    /// second.
    pub async fn tick(&self) {
        let now = self.core.now();
        let (abort_due, expire_due) = {
            let mut shared = self.core.lock();
            let abort_due =
                now - shared.last_abort_scan_ms >= self.core.config.abort_timed_out_interval_ms;
            let expire_due =
                now - shared.last_expire_scan_ms >= self.core.config.remove_expired_interval_ms;
            if abort_due {
                shared.last_abort_scan_ms = now;
            }
            if expire_due {
                shared.last_expire_scan_ms = now;
            }
            (abort_due, expire_due)
        };
        if abort_due {
            self.abort_timed_out_transactions().await;
        }
        if expire_due {
            self.expire_transactional_ids().await;
        }
    }

    /// Aborts every transaction open longer than its timeout, bumping its epoch. Also resumes
    /// prepared transactions whose markers no task is writing. Returns the aborts begun.
    pub async fn abort_timed_out_transactions(&self) -> usize {
        let writes = self.core.begin_timeout_aborts();
        let mut aborted = 0;
        for w in writes {
            let id = w.transactional_id.clone();
            match self.core.finish_write(w).await {
                Ok(()) => {
                    tracing::info!(id, "aborted a transaction that timed out");
                    aborted += 1;
                }
                Err(e) => tracing::info!(id, error = %e, "cannot abort a timed-out transaction"),
            }
        }
        aborted
    }

    /// Tombstones and forgets ids with no open transaction, idle longer than
    /// `transactional.id.expiration.ms`. Returns the ids removed.
    pub async fn expire_transactional_ids(&self) -> usize {
        let expiries = self.core.begin_expiries();
        let mut removed = 0;
        for e in expiries {
            let result = e.durable.await;
            removed += self
                .core
                .finish_expiry(e.partition, e.load, &e.ids, result.is_ok());
        }
        removed
    }
}

impl Core {
    fn begin_timeout_aborts(self: &Arc<Self>) -> Vec<PendingWrite> {
        let now = self.now();
        let mut shared = self.lock();
        let mut writes = Vec::new();
        let mut stalled = Vec::new();
        for (&partition, led) in shared.partitions.iter_mut().filter(|(_, l)| l.loaded) {
            let load = led.load;
            for txn in led.txns.values_mut() {
                if txn.pending.is_some() {
                    continue;
                }
                if txn.state.is_prepared() {
                    stalled.push((partition, txn.transactional_id.clone()));
                }
                let timed_out = txn.state == TransactionState::Ongoing
                    && txn.start_ms.saturating_add(i64::from(txn.timeout_ms)) < now;
                if !timed_out {
                    continue;
                }
                match txn.prepare_fence_abort(now) {
                    Ok(transit) => {
                        let w = self.begin_write(
                            partition,
                            load,
                            txn,
                            transit,
                            OnFailure::MarkFailedFence,
                        );
                        writes.extend(w.ok());
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot abort a timed-out transaction"),
                }
            }
        }
        for (partition, id) in stalled {
            self.start_completion(&mut shared, partition, &id);
        }
        writes
    }

    fn begin_expiries(&self) -> Vec<Expiry> {
        let now = self.now();
        let horizon = now.saturating_sub(self.config.transactional_id_expiration_ms);
        let mut shared = self.lock();
        let mut expiries = Vec::new();
        for (&partition, led) in shared.partitions.iter_mut().filter(|(_, l)| l.loaded) {
            let mut ids = Vec::new();
            let mut records: Vec<StoredRecord> = Vec::new();
            for txn in led.txns.values_mut() {
                let idle = txn.state.expiration_allowed() && txn.last_update_ms <= horizon;
                if !idle || txn.pending.is_some() {
                    continue;
                }
                let Ok(key) = encode_key(&txn.transactional_id) else {
                    continue;
                };
                if txn.prepare_dead().is_ok() {
                    ids.push((txn.transactional_id.clone(), txn.producer_epoch));
                    records.push((key, None));
                }
            }
            if records.is_empty() {
                continue;
            }
            match self.seams.store.append(partition, &records) {
                Ok(a) => expiries.push(Expiry {
                    partition,
                    load: led.load,
                    ids,
                    durable: a.durable,
                }),
                Err(e) => {
                    tracing::warn!(partition, error = %e, "cannot write tombstones of expired transactional ids");
                    for (id, _) in &ids {
                        if let Some(t) = led.txns.get_mut(id) {
                            t.pending = None;
                        }
                    }
                }
            }
        }
        expiries
    }

    /// Removes the tombstoned ids (or, if the tombstones failed, lets them live on).
    fn finish_expiry(
        &self,
        partition: i32,
        load: u64,
        ids: &[(String, i16)],
        durable: bool,
    ) -> usize {
        let mut shared = self.lock();
        let mut removed = 0;
        for (id, epoch) in ids {
            let Some(txn) = shared.txn_at(partition, load, id) else {
                continue;
            };
            let unchanged =
                txn.pending == Some(TransactionState::Dead) && txn.producer_epoch == *epoch;
            if durable && unchanged {
                if let Some(p) = shared.partitions.get_mut(&partition) {
                    p.txns.remove(id);
                    removed += 1;
                }
            } else {
                txn.pending = None;
            }
        }
        if removed > 0 {
            tracing::info!(partition, removed, "expired idle transactional ids");
        }
        removed
    }
}
