//! In-memory stand-ins for the broker's side of the coordinator, with knobs to hold, fail or
//! script what the broker would do.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use ferry_common::{ManualClock, TopicPartition};
use kafka_protocol::error::ResponseError;
use tokio::sync::Semaphore;

use crate::seams::*;
use crate::txn_log::{decode_key, decode_value, TxnLogValue};
use crate::{TransactionCoordinator, TxnConfig, TxnSeams};

/// A gate that holds futures until a test opens it.
#[derive(Default)]
pub(crate) struct Gate(Mutex<Option<Arc<Semaphore>>>);

impl Gate {
    pub(crate) fn close(&self) {
        *self.0.lock().unwrap() = Some(Arc::new(Semaphore::new(0)));
    }
    pub(crate) fn open(&self) {
        if let Some(s) = self.0.lock().unwrap().take() {
            s.add_permits(Semaphore::MAX_PERMITS / 2);
        }
    }
    fn current(&self) -> Option<Arc<Semaphore>> {
        self.0.lock().unwrap().clone()
    }
}

async fn pass(gate: Option<Arc<Semaphore>>) {
    if let Some(s) = gate {
        let _ = s.acquire().await;
    }
}

/// An in-memory `__transaction_state`.
#[derive(Default)]
pub(crate) struct MemStore {
    pub(crate) logs: Mutex<HashMap<i32, Vec<StoredRecord>>>,
    /// The error the in-sync replicas cause for the next append, once.
    pub(crate) fail_next_durable: Mutex<Option<StoreError>>,
    /// Holds durability of appends made while closed.
    pub(crate) durable_gate: Gate,
    /// Runs during `read_all`, while the partition loads.
    #[allow(clippy::type_complexity)]
    pub(crate) during_read: Mutex<Option<Box<dyn Fn() + Send>>>,
}

impl MemStore {
    /// The values written for `id`, oldest first (`None` for a tombstone).
    pub(crate) fn history(&self, id: &str) -> Vec<Option<TxnLogValue>> {
        let logs = self.logs.lock().unwrap();
        logs.values()
            .flatten()
            .filter(|(k, _)| decode_key(k.clone()).unwrap() == id)
            .map(|(_, v)| v.clone().map(|v| decode_value(v).unwrap()))
            .collect()
    }

    pub(crate) fn states(&self, id: &str) -> Vec<&'static str> {
        self.history(id)
            .into_iter()
            .map(|v| v.map_or("tombstone", |v| v.state.name()))
            .collect()
    }
}

impl TxnStateStore for MemStore {
    fn append(&self, partition: i32, records: &[StoredRecord]) -> Result<Appended, StoreError> {
        let mut logs = self.logs.lock().unwrap();
        let log = logs.entry(partition).or_default();
        log.extend(records.iter().cloned());
        let failure = self.fail_next_durable.lock().unwrap().take();
        let gate = self.durable_gate.current();
        Ok(Appended {
            end_offset: log.len() as i64,
            durable: Box::pin(async move {
                pass(gate).await;
                failure.map_or(Ok(()), Err)
            }),
        })
    }

    fn read_all(&self, partition: i32) -> Result<Vec<StoredRecord>, StoreError> {
        if let Some(f) = self.during_read.lock().unwrap().as_ref() {
            f();
        }
        Ok(self
            .logs
            .lock()
            .unwrap()
            .get(&partition)
            .cloned()
            .unwrap_or_default())
    }
}

/// Partition leaders that take markers, by default at once.
#[derive(Default)]
pub(crate) struct FakeMarkers {
    pub(crate) sent: Mutex<Vec<TxnMarkers>>,
    /// Outcomes to give, per partition, before the default (Written).
    pub(crate) script: Mutex<HashMap<TopicPartition, VecDeque<MarkerOutcome>>>,
    pub(crate) gate: Gate,
}

impl FakeMarkers {
    pub(crate) fn sent(&self) -> Vec<TxnMarkers> {
        self.sent.lock().unwrap().clone()
    }
    pub(crate) fn plan(&self, tp: TopicPartition, outcomes: &[MarkerOutcome]) {
        self.script
            .lock()
            .unwrap()
            .insert(tp, outcomes.iter().copied().collect());
    }
}

impl MarkerWriter for FakeMarkers {
    fn write_markers(&self, markers: TxnMarkers) -> MarkersWritten {
        self.sent.lock().unwrap().push(markers.clone());
        let outcomes: Vec<(TopicPartition, MarkerOutcome)> = {
            let mut script = self.script.lock().unwrap();
            markers
                .partitions
                .iter()
                .map(|tp| {
                    let next = script.get_mut(tp).and_then(|q| q.pop_front());
                    (tp.clone(), next.unwrap_or(MarkerOutcome::Written))
                })
                .collect()
        };
        let gate = self.gate.current();
        Box::pin(async move {
            pass(gate).await;
            outcomes
        })
    }
}

pub(crate) struct FakeProducerIds(pub(crate) AtomicI64);

impl ProducerIdSource for FakeProducerIds {
    fn next_producer_id(&self) -> Result<i64, ResponseError> {
        Ok(self.0.fetch_add(1, Ordering::SeqCst))
    }
}

/// Every partition exists except those of `missing` topics.
#[derive(Default)]
pub(crate) struct FakeCatalog(pub(crate) Mutex<HashSet<String>>);

impl PartitionCatalog for FakeCatalog {
    fn partition_exists(&self, topic: &str, _partition: i32) -> bool {
        !self.0.lock().unwrap().contains(topic)
    }
}

pub(crate) const START_MS: i64 = 1_000_000;

pub(crate) struct Harness {
    pub(crate) coord: TransactionCoordinator,
    pub(crate) store: Arc<MemStore>,
    pub(crate) markers: Arc<FakeMarkers>,
    pub(crate) catalog: Arc<FakeCatalog>,
    pub(crate) clock: Arc<ManualClock>,
}

/// One `__transaction_state` partition (so every id is in partition 0), not yet led.
pub(crate) fn config() -> TxnConfig {
    TxnConfig {
        state_log_partitions: 1,
        ..TxnConfig::default()
    }
}

impl Harness {
    pub(crate) fn new(config: TxnConfig) -> Self {
        Self::with_store(config, Arc::new(MemStore::default()))
    }

    /// A coordinator (as on another broker) over an existing log.
    pub(crate) fn with_store(config: TxnConfig, store: Arc<MemStore>) -> Self {
        let clock = ManualClock::new(START_MS);
        let markers = Arc::new(FakeMarkers::default());
        let catalog = Arc::new(FakeCatalog::default());
        let seams = TxnSeams {
            store: store.clone(),
            markers: markers.clone(),
            producer_ids: Arc::new(FakeProducerIds(AtomicI64::new(1000))),
            catalog: catalog.clone(),
        };
        Self {
            coord: TransactionCoordinator::new(config, clock.clone(), seams),
            store,
            markers,
            catalog,
            clock,
        }
    }

    /// A coordinator leading partition 0 at coordinator epoch 0.
    pub(crate) fn leading() -> Self {
        let h = Self::new(config());
        h.coord.on_election(0, 0).unwrap();
        h
    }
}
