//! The transaction coordinator's core: the transactional ids of the `__transaction_state`
//! partitions this broker leads, and the write path every state change takes.
//!
//! - **What it coordinates.** A transactional id belongs to partition `partition_for(id)`;
//!   `on_election` loads a partition's ids from its log, `on_resignation` drops them. Any other
//!   id is answered NOT_COORDINATOR, and an id of a partition still loading
//!   COORDINATOR_LOAD_IN_PROGRESS.
//! - **One lock.** `shared` holds every led partition and its ids. A handler decides and
//!   appends its record under the lock, releases it to await durability, then takes it again to
//!   apply the change, checking that the partition is still served by the same load (a
//!   resignation or a new election in between makes the change void: NOT_COORDINATOR).
//! - **Markers.** A transaction that reaches PrepareCommit or PrepareAbort starts, in the same
//!   critical section, a task that writes its markers and then its Complete record
//!   (`completion.rs`); the task stops when the partition's load changes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use ferry_common::SharedClock;
use kafka_protocol::error::ResponseError;

use crate::config::TxnConfig;
use crate::metadata::{TransactionMetadata, TxnTransit};
use crate::seams::{
    Durable, MarkerWriter, PartitionCatalog, ProducerIdSource, StoreError, StoredRecord,
    TxnStateStore,
};
use crate::state::TransactionState;
use crate::txn_log::{self, decode_key, decode_value, encode_key, encode_value, VALUE_VERSION};

/// The broker's side of the coordinator.
#[derive(Clone)]
pub struct TxnSeams {
    pub store: Arc<dyn TxnStateStore>,
    pub markers: Arc<dyn MarkerWriter>,
    pub producer_ids: Arc<dyn ProducerIdSource>,
    pub catalog: Arc<dyn PartitionCatalog>,
}

pub(crate) struct Core {
    pub(crate) config: TxnConfig,
    clock: SharedClock,
    pub(crate) seams: TxnSeams,
    shared: Mutex<Shared>,
}

pub(crate) struct Shared {
    pub(crate) partitions: HashMap<i32, LedPartition>,
    next_load: u64,
    pub(crate) last_abort_scan_ms: i64,
    pub(crate) last_expire_scan_ms: i64,
}

/// A `__transaction_state` partition led here.
pub(crate) struct LedPartition {
    /// The partition's leader epoch when it was taken: the coordinator epoch of its markers.
    pub(crate) coordinator_epoch: i32,
    /// Tells one load of the partition from the next, so that a change begun under an earlier
    /// load does not touch a later one.
    pub(crate) load: u64,
    pub(crate) loaded: bool,
    pub(crate) txns: HashMap<String, TransactionMetadata>,
}

impl LedPartition {
    /// The transaction of `id`, if the producer `producer_id` at `producer_epoch` owns it:
    /// INVALID_PRODUCER_ID_MAPPING for an unknown id or another producer id, PRODUCER_FENCED
    /// for another epoch (transactions v1: the client never bumps its epoch itself, so only
    /// the current one is valid; an older one belongs to a fenced producer).
    pub(crate) fn owned_txn(
        &mut self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<&mut TransactionMetadata, ResponseError> {
        let txn = self
            .txns
            .get_mut(id)
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        if txn.producer_id != producer_id {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if txn.producer_epoch != producer_epoch {
            return Err(ResponseError::ProducerFenced);
        }
        Ok(txn)
    }
}

impl Shared {
    /// The partition serving an id, if this broker serves it now.
    pub(crate) fn led(&mut self, partition: i32) -> Result<&mut LedPartition, ResponseError> {
        match self.partitions.get_mut(&partition) {
            None => Err(ResponseError::NotCoordinator),
            Some(p) if !p.loaded => Err(ResponseError::CoordinatorLoadInProgress),
            Some(p) => Ok(p),
        }
    }

    /// An id of `partition`, if the partition is still served by `load`.
    pub(crate) fn txn_at(
        &mut self,
        partition: i32,
        load: u64,
        id: &str,
    ) -> Option<&mut TransactionMetadata> {
        self.partitions
            .get_mut(&partition)
            .filter(|p| p.load == load && p.loaded)
            .and_then(|p| p.txns.get_mut(id))
    }

    pub(crate) fn loading(&self) -> bool {
        self.partitions.values().any(|p| !p.loaded)
    }
}

/// What to do to the id's pending state when its write fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnFailure {
    ClearPending,
    /// An epoch fence: clear, and remember that the in-memory epoch is already bumped.
    MarkFailedFence,
    /// A completion record: the completion task retries or gives up itself.
    KeepPending,
}

/// A state change whose record is in the leader's log, awaiting durability.
pub(crate) struct PendingWrite {
    pub(crate) transactional_id: String,
    pub(crate) partition: i32,
    pub(crate) load: u64,
    pub(crate) transit: TxnTransit,
    on_failure: OnFailure,
    durable: Durable,
}

fn apply_failure(txn: &mut TransactionMetadata, on_failure: OnFailure) {
    match on_failure {
        OnFailure::ClearPending => txn.pending = None,
        OnFailure::MarkFailedFence => {
            txn.pending = None;
            txn.has_failed_epoch_fence = true;
        }
        OnFailure::KeepPending => {}
    }
}

impl Core {
    pub(crate) fn new(config: TxnConfig, clock: SharedClock, seams: TxnSeams) -> Self {
        let now = clock.now_ms();
        Self {
            config,
            clock,
            seams,
            shared: Mutex::new(Shared {
                partitions: HashMap::new(),
                next_load: 1,
                last_abort_scan_ms: now,
                last_expire_scan_ms: now,
            }),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    pub(crate) fn partition_for(&self, transactional_id: &str) -> i32 {
        txn_log::partition_for(transactional_id, self.config.state_log_partitions)
    }

    /// Appends the record of a prepared transit. If it cannot be appended, the id's pending
    /// state is handled per `on_failure` and the error returned.
    pub(crate) fn begin_write(
        &self,
        partition: i32,
        load: u64,
        txn: &mut TransactionMetadata,
        transit: TxnTransit,
        on_failure: OnFailure,
    ) -> Result<PendingWrite, ResponseError> {
        let record = encode_key(&txn.transactional_id).and_then(|key| {
            encode_value(&transit.log_value(), VALUE_VERSION).map(|v| (key, Some(v)))
        });
        let appended = match record {
            Ok(record) => self.seams.store.append(partition, &[record]),
            Err(e) => Err(StoreError::new(ResponseError::UnknownServerError, e.0)),
        };
        match appended {
            Ok(a) => Ok(PendingWrite {
                transactional_id: txn.transactional_id.clone(),
                partition,
                load,
                transit,
                on_failure,
                durable: a.durable,
            }),
            Err(e) => {
                tracing::info!(id = %txn.transactional_id, error = %e, "cannot append transaction state");
                apply_failure(txn, on_failure);
                Err(e.error)
            }
        }
    }

    /// Awaits a write's durability, then applies its transit if the partition is still served
    /// by the same load. A transaction that reaches PrepareCommit or PrepareAbort starts
    /// writing its markers.
    pub(crate) async fn finish_write(
        self: &Arc<Self>,
        w: PendingWrite,
    ) -> Result<(), ResponseError> {
        let durable = w.durable.await;
        let mut shared = self.lock();
        let id = w.transactional_id.as_str();
        let Some(txn) = shared.txn_at(w.partition, w.load, id) else {
            return Err(durable
                .err()
                .map_or(ResponseError::NotCoordinator, |e| e.error));
        };
        if let Err(e) = durable {
            tracing::info!(id, error = %e, "transaction state write failed");
            apply_failure(txn, w.on_failure);
            return Err(e.error);
        }
        if let Err(e) = txn.complete(w.transit) {
            tracing::error!(id, error = %e, "cannot apply a durable transaction state");
            txn.pending = None;
            return Err(e.response_error());
        }
        if txn.state.is_prepared() {
            self.start_completion(&mut shared, w.partition, id);
        }
        Ok(())
    }

    /// This broker leads `partition` at leader epoch `coordinator_epoch`: replays its log and
    /// serves its ids; transactions found prepared get their markers written again.
    pub(crate) fn on_election(
        self: &Arc<Self>,
        partition: i32,
        coordinator_epoch: i32,
    ) -> Result<usize, StoreError> {
        let load = {
            let mut shared = self.lock();
            let current = shared.partitions.get(&partition);
            if current.is_some_and(|p| p.coordinator_epoch == coordinator_epoch) {
                return Ok(0);
            }
            let load = shared.next_load;
            shared.next_load += 1;
            let led = LedPartition {
                coordinator_epoch,
                load,
                loaded: false,
                txns: HashMap::new(),
            };
            shared.partitions.insert(partition, led);
            load
        };
        let records = self.seams.store.read_all(partition).inspect_err(|_| {
            let mut shared = self.lock();
            if shared
                .partitions
                .get(&partition)
                .is_some_and(|p| p.load == load)
            {
                shared.partitions.remove(&partition);
            }
        })?;
        let txns = replay(partition, records);
        let mut shared = self.lock();
        let Some(led) = shared
            .partitions
            .get_mut(&partition)
            .filter(|p| p.load == load)
        else {
            return Ok(0); // resigned or re-elected meanwhile: that one decides
        };
        let prepared: Vec<String> = txns
            .values()
            .filter(|t| t.state.is_prepared())
            .map(|t| t.transactional_id.clone())
            .collect();
        let n = txns.len();
        led.txns = txns;
        led.loaded = true;
        for id in &prepared {
            self.start_completion(&mut shared, partition, id);
        }
        tracing::info!(
            partition,
            coordinator_epoch,
            ids = n,
            resumed = prepared.len(),
            "loaded the transactional ids of a __transaction_state partition led here"
        );
        Ok(n)
    }

    pub(crate) fn on_resignation(&self, partition: i32) {
        if let Some(led) = self.lock().partitions.remove(&partition) {
            tracing::info!(
                partition,
                ids = led.txns.len(),
                "unloaded the transactional ids of a __transaction_state partition no longer led here"
            );
        }
    }
}

/// Rebuilds the ids of one partition from its records, oldest first.
fn replay(partition: i32, records: Vec<StoredRecord>) -> HashMap<String, TransactionMetadata> {
    let mut txns = HashMap::new();
    for (key, value) in records {
        let id = match decode_key(key) {
            Ok(id) => id,
            Err(e) => {
                tracing::warn!(partition, error = %e, "skipping unreadable transaction log key");
                continue;
            }
        };
        let Some(value) = value else {
            txns.remove(&id);
            continue;
        };
        match decode_value(value) {
            Ok(v)
                if matches!(
                    v.state,
                    TransactionState::Dead | TransactionState::PrepareEpochFence
                ) =>
            {
                tracing::warn!(partition, id, state = %v.state, "skipping a state that is never written");
            }
            Ok(v) => {
                txns.insert(id.clone(), TransactionMetadata::from_log(&id, &v));
            }
            Err(e) => {
                tracing::warn!(partition, id, error = %e, "skipping unreadable transaction log value");
            }
        }
    }
    txns
}

/// Kafka's transaction coordinator for the `__transaction_state` partitions this broker leads.
/// Cheap to clone; clones share state.
#[derive(Clone)]
pub struct TransactionCoordinator {
    pub(crate) core: Arc<Core>,
}

impl TransactionCoordinator {
    pub fn new(config: TxnConfig, clock: SharedClock, seams: TxnSeams) -> Self {
        Self {
            core: Arc::new(Core::new(config, clock, seams)),
        }
    }

    pub fn config(&self) -> &TxnConfig {
        &self.core.config
    }

    /// The `__transaction_state` partition of `transactional_id` (FindCoordinator key type 1
    /// answers with its leader).
    pub fn partition_for(&self, transactional_id: &str) -> i32 {
        self.core.partition_for(transactional_id)
    }

    /// This broker became leader of `partition` at leader epoch `coordinator_epoch` (Kafka's
    /// `onElection`): replays the partition's log and serves its ids from then on; until then
    /// their requests get COORDINATOR_LOAD_IN_PROGRESS. Transactions found in PrepareCommit or
    /// PrepareAbort get their markers written and are completed. A partition already taken at
    /// this epoch is left as it is. Returns the ids loaded. Call within a Tokio runtime.
    pub fn on_election(&self, partition: i32, coordinator_epoch: i32) -> Result<usize, StoreError> {
        self.core.on_election(partition, coordinator_epoch)
    }

    /// This broker no longer leads `partition` (Kafka's `onResignation`): its ids leave memory
    /// and their marker writing stops.
    pub fn on_resignation(&self, partition: i32) {
        self.core.on_resignation(partition)
    }

    /// The partitions led here, with their coordinator epochs.
    pub fn led_partitions(&self) -> Vec<(i32, i32)> {
        let shared = self.core.lock();
        let mut led: Vec<(i32, i32)> = shared
            .partitions
            .iter()
            .map(|(p, l)| (*p, l.coordinator_epoch))
            .collect();
        led.sort_unstable();
        led
    }

    /// A copy of an id's metadata, or the error its requests would get.
    pub fn transaction(
        &self,
        transactional_id: &str,
    ) -> Result<Option<TransactionMetadata>, ResponseError> {
        let partition = self.core.partition_for(transactional_id);
        let mut shared = self.core.lock();
        Ok(shared.led(partition)?.txns.get(transactional_id).cloned())
    }
}
