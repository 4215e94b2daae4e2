//! Finishing a prepared transaction: its markers go to every partition (retried until each
//! partition has one or is gone), then its CompleteCommit or CompleteAbort record is written,
//! as Kafka's marker channel does. The task gives up when this broker stops serving the
//! `__transaction_state` partition under the same load: the next leader resumes the work from
//! the log.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ferry_common::TopicPartition;
use kafka_protocol::error::ResponseError;

use crate::coordinator::{Core, OnFailure, Shared};
use crate::metadata::TxnTransit;
use crate::seams::{MarkerOutcome, TxnMarkers, TxnResult};
use crate::state::TransactionState;

pub(crate) struct CompletionJob {
    transactional_id: String,
    partition: i32,
    load: u64,
    /// The markers still to write (their partitions shrink as leaders take them).
    markers: TxnMarkers,
    /// The Complete record to write at the end; its state is the id's pending state meanwhile.
    transit: TxnTransit,
}

enum Progress {
    Stop,
    Remaining(Vec<TopicPartition>),
}

impl Core {
    /// Marks a prepared transaction as completing and starts its marker task. Does nothing if
    /// a completion already runs (the pending state is set). Without a Tokio runtime the
    /// pending state is left clear, and `tick` resumes the transaction.
    pub(crate) fn start_completion(
        self: &Arc<Self>,
        shared: &mut Shared,
        partition: i32,
        id: &str,
    ) {
        let now = self.now();
        let Some(led) = shared.partitions.get_mut(&partition) else {
            return;
        };
        let (load, coordinator_epoch) = (led.load, led.coordinator_epoch);
        let Some(txn) = led.txns.get_mut(id) else {
            return;
        };
        let result = match txn.state {
            TransactionState::PrepareCommit => TxnResult::Commit,
            TransactionState::PrepareAbort => TxnResult::Abort,
            _ => return,
        };
        let Ok(transit) = txn.prepare_complete(now) else {
            return;
        };
        let job = CompletionJob {
            transactional_id: id.to_string(),
            partition,
            load,
            markers: TxnMarkers {
                transactional_id: id.to_string(),
                producer_id: txn.producer_id,
                producer_epoch: txn.producer_epoch,
                coordinator_epoch,
                result,
                partitions: txn.partitions.iter().cloned().collect(),
            },
            transit,
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(self.clone().complete(job));
            }
            Err(_) => {
                tracing::warn!(
                    id,
                    "no async runtime to write transaction markers; tick() will"
                );
                txn.pending = None;
            }
        }
    }

    async fn complete(self: Arc<Self>, mut job: CompletionJob) {
        if self.write_all_markers(&mut job).await {
            self.write_completion(job).await;
        }
    }

    fn backoff(&self) -> Duration {
        Duration::from_millis(self.config.marker_retry_backoff_ms)
    }

    /// Returns false if the coordinator gave the transaction up.
    async fn write_all_markers(&self, job: &mut CompletionJob) -> bool {
        while !job.markers.partitions.is_empty() {
            let outcomes = self.seams.markers.write_markers(job.markers.clone()).await;
            match self.absorb_outcomes(job, outcomes) {
                Progress::Stop => return false,
                Progress::Remaining(left) if left.is_empty() => break,
                Progress::Remaining(left) => job.markers.partitions = left,
            }
            tokio::time::sleep(self.backoff()).await;
        }
        true
    }

    /// Takes the partitions that have their marker out of the transaction.
    fn absorb_outcomes(
        &self,
        job: &CompletionJob,
        outcomes: Vec<(TopicPartition, MarkerOutcome)>,
    ) -> Progress {
        let mut shared = self.lock();
        let id = job.transactional_id.as_str();
        let Some(txn) = shared.txn_at(job.partition, job.load, id) else {
            tracing::info!(id, "no longer the coordinator; stop writing its markers");
            return Progress::Stop;
        };
        if txn.pending != Some(job.transit.state) {
            return Progress::Stop;
        }
        let by_partition: HashMap<TopicPartition, MarkerOutcome> = outcomes.into_iter().collect();
        let mut left = Vec::new();
        for tp in &job.markers.partitions {
            match by_partition.get(tp) {
                Some(MarkerOutcome::Written | MarkerOutcome::Skipped) => {
                    txn.partitions.remove(tp);
                }
                Some(MarkerOutcome::Fenced(e)) => {
                    // A newer coordinator or producer epoch exists; this broker is about to
                    // lose the partition, and the id stays pending until it does, as in Kafka.
                    tracing::warn!(id, %tp, error = %e, "transaction markers fenced; giving up");
                    return Progress::Stop;
                }
                Some(MarkerOutcome::Retry(e)) => {
                    tracing::debug!(id, %tp, error = %e, "transaction marker to retry");
                    left.push(tp.clone());
                }
                None => left.push(tp.clone()),
            }
        }
        Progress::Remaining(left)
    }

    /// Writes the Complete record, retrying while the log is not available.
    async fn write_completion(self: &Arc<Self>, job: CompletionJob) {
        let id = job.transactional_id.as_str();
        loop {
            let write = {
                let mut shared = self.lock();
                let Some(txn) = shared.txn_at(job.partition, job.load, id) else {
                    return;
                };
                if txn.pending != Some(job.transit.state) {
                    return;
                }
                let transit = job.transit.clone();
                self.begin_write(
                    job.partition,
                    job.load,
                    txn,
                    transit,
                    OnFailure::KeepPending,
                )
            };
            let result = match write {
                Ok(w) => self.finish_write(w).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => {
                    tracing::debug!(id, state = %job.transit.state, "transaction completed");
                    return;
                }
                Err(ResponseError::CoordinatorNotAvailable) => {
                    tokio::time::sleep(self.backoff()).await;
                }
                Err(ResponseError::NotCoordinator | ResponseError::CoordinatorLoadInProgress) => {
                    return;
                }
                Err(e) => {
                    // Leave it to tick() to try again later rather than spin.
                    tracing::error!(id, error = %e, "cannot write the transaction's completion");
                    let mut shared = self.lock();
                    if let Some(txn) = shared.txn_at(job.partition, job.load, id) {
                        if txn.pending == Some(job.transit.state) {
                            txn.pending = None;
                        }
                    }
                    return;
                }
            }
        }
    }
}
