//! InitProducerId: a producer id and epoch for a transactional producer, fencing any earlier
//! producer of the same transactional id (and, without one, a bare producer id for an
//! idempotent producer).

use std::sync::Arc;

use kafka_protocol::error::ResponseError::{self, *};
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::coordinator::{Core, OnFailure, PendingWrite, TransactionCoordinator};
use crate::metadata::{
    is_epoch_exhausted, TransactionMetadata, TxnTransit, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
};
use crate::state::TransactionState::*;

/// Clients older than the version that introduced PRODUCER_FENCED (KIP-588) know it as
/// INVALID_PRODUCER_EPOCH.
pub(crate) fn fenced_for_version(e: ResponseError, version: i16, since: i16) -> ResponseError {
    if e == ProducerFenced && version < since {
        InvalidProducerEpoch
    } else {
        e
    }
}

pub(crate) fn code(result: &Result<(), ResponseError>) -> i16 {
    result.as_ref().err().map_or(0, |e| e.code())
}

enum InitStep {
    /// The epoch bump (or new producer id) to hand out once durable.
    Bump(PendingWrite),
    /// An open transaction is being aborted first; the client retries.
    Fence(PendingWrite),
}

impl TransactionCoordinator {
    pub async fn init_producer_id(
        &self,
        req: InitProducerIdRequest,
        version: i16,
    ) -> InitProducerIdResponse {
        let (producer_id, epoch, error) = match self.core.init_producer_id(&req).await {
            Ok((pid, epoch)) => (pid, epoch, None),
            Err(e) => (
                NO_PRODUCER_ID,
                NO_PRODUCER_EPOCH,
                Some(fenced_for_version(e, version, 4)),
            ),
        };
        InitProducerIdResponse::default()
            .with_error_code(error.map_or(0, |e| e.code()))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch)
    }
}

impl Core {
    async fn init_producer_id(
        self: &Arc<Self>,
        req: &InitProducerIdRequest,
    ) -> Result<(i64, i16), ResponseError> {
        // KIP-360: a recovering producer names its producer id and epoch, both or neither.
        let expected = match (req.producer_id.0, req.producer_epoch) {
            (NO_PRODUCER_ID, NO_PRODUCER_EPOCH) => None,
            (NO_PRODUCER_ID, _) | (_, NO_PRODUCER_EPOCH) => return Err(InvalidRequest),
            (pid, epoch) => Some((pid, epoch)),
        };
        let Some(id) = req.transactional_id.as_ref().map(|t| t.0.as_str()) else {
            return self
                .seams
                .producer_ids
                .next_producer_id()
                .map(|pid| (pid, 0));
        };
        if id.is_empty() {
            return Err(InvalidRequest);
        }
        let timeout = req.transaction_timeout_ms;
        if timeout <= 0 || timeout > self.config.max_timeout_ms {
            return Err(InvalidTransactionTimeout);
        }
        match self.begin_init(id, timeout, expected)? {
            InitStep::Bump(w) => {
                let granted = (w.transit.producer_id, w.transit.producer_epoch);
                self.finish_write(w).await?;
                tracing::info!(
                    id,
                    producer_id = granted.0,
                    epoch = granted.1,
                    "initialized transactional id"
                );
                Ok(granted)
            }
            InitStep::Fence(w) => {
                self.finish_write(w).await?;
                Err(ConcurrentTransactions)
            }
        }
    }

    fn begin_init(
        &self,
        id: &str,
        timeout: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<InitStep, ResponseError> {
        let now = self.now();
        let partition = self.partition_for(id);
        let mut shared = self.lock();
        let led = shared.led(partition)?;
        let load = led.load;
        if !led.txns.contains_key(id) {
            let pid = self.seams.producer_ids.next_producer_id()?;
            let fresh = TransactionMetadata::new(id, pid, timeout, now);
            led.txns.insert(id.to_string(), fresh);
        }
        let Some(txn) = led.txns.get_mut(id) else {
            return Err(UnknownServerError);
        };
        let (transit, fencing) = self.prepare_init(txn, timeout, expected, now)?;
        let on_failure = if fencing {
            OnFailure::MarkFailedFence
        } else {
            OnFailure::ClearPending
        };
        let w = self.begin_write(partition, load, txn, transit, on_failure)?;
        Ok(if fencing {
            InitStep::Fence(w)
        } else {
            InitStep::Bump(w)
        })
    }

    /// Kafka's rules for InitProducerId on an existing id. Returns the transit and whether it
    /// is an epoch fence of an open transaction.
    fn prepare_init(
        &self,
        txn: &mut TransactionMetadata,
        timeout: i32,
        expected: Option<(i64, i16)>,
        now: i64,
    ) -> Result<(TxnTransit, bool), ResponseError> {
        if txn.transition_in_progress() {
            return Err(ConcurrentTransactions);
        }
        if let Some((pid, epoch)) = expected {
            // A new id (no epoch yet), the current producer id, or a retry of a rotation whose
            // answer was lost (the previous id at an exhausted epoch).
            let valid = txn.producer_epoch == NO_PRODUCER_EPOCH
                || pid == txn.producer_id
                || (pid == txn.previous_producer_id && is_epoch_exhausted(epoch));
            if !valid {
                return Err(ProducerFenced);
            }
        }
        let transit = match txn.state {
            PrepareAbort | PrepareCommit => return Err(ConcurrentTransactions),
            Empty | CompleteAbort | CompleteCommit => {
                let rotate = txn.is_epoch_exhausted()
                    && expected.is_none_or(|(_, e)| e == txn.producer_epoch);
                if rotate {
                    let pid = self.seams.producer_ids.next_producer_id()?;
                    txn.prepare_producer_id_rotation(pid, timeout, now, expected.is_some())
                } else {
                    txn.prepare_increment_epoch(timeout, expected.map(|(_, e)| e), now)
                }
            }
            // Abort the open transaction first, with a bumped epoch that fences its producer.
            // The client gets CONCURRENT_TRANSACTIONS and retries, and that retry bumps again
            // (or takes a new producer id if this bump used the last epoch).
            Ongoing => {
                return txn
                    .prepare_fence_abort(now)
                    .map(|t| (t, true))
                    .map_err(|e| e.response_error())
            }
            Dead | PrepareEpochFence => return Err(UnknownServerError),
        };
        transit.map(|t| (t, false)).map_err(|e| e.response_error())
    }
}
