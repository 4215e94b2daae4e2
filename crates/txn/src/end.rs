//! EndTxn: commit or abort the producer's transaction. The answer comes once PrepareCommit or
//! PrepareAbort is durable; the markers and the Complete record follow in the background. A
//! retry after the transaction completed the same way succeeds again.

use std::sync::Arc;

use kafka_protocol::error::ResponseError::{self, *};
use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId};

use crate::coordinator::{Core, OnFailure, PendingWrite, TransactionCoordinator};
use crate::init::fenced_for_version;
use crate::metadata::{NO_PRODUCER_EPOCH, NO_PRODUCER_ID};
use crate::state::TransactionState::*;

enum EndStep {
    /// Already ended this way: the producer id and epoch, unchanged.
    Done(i64, i16),
    Writing(PendingWrite),
}

impl TransactionCoordinator {
    pub async fn end_txn(&self, req: EndTxnRequest, version: i16) -> EndTxnResponse {
        let id = req.transactional_id.as_str();
        let result = self
            .core
            .end_txn(id, req.producer_id.0, req.producer_epoch, req.committed)
            .await;
        let mut response = EndTxnResponse::default();
        match result {
            Ok((producer_id, epoch)) => {
                if version >= 5 {
                    response = response
                        .with_producer_id(ProducerId(producer_id))
                        .with_producer_epoch(epoch);
                }
            }
            Err(e) => {
                response = response
                    .with_error_code(fenced_for_version(e, version, 2).code())
                    .with_producer_id(ProducerId(NO_PRODUCER_ID))
                    .with_producer_epoch(NO_PRODUCER_EPOCH);
            }
        }
        response
    }
}

impl Core {
    async fn end_txn(
        self: &Arc<Self>,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<(i64, i16), ResponseError> {
        if id.is_empty() {
            return Err(InvalidRequest);
        }
        match self.begin_end(id, producer_id, producer_epoch, commit)? {
            EndStep::Done(pid, epoch) => Ok((pid, epoch)),
            EndStep::Writing(w) => {
                let ids = (w.transit.producer_id, w.transit.producer_epoch);
                self.finish_write(w).await?;
                Ok(ids)
            }
        }
    }

    fn begin_end(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<EndStep, ResponseError> {
        let now = self.now();
        let partition = self.partition_for(id);
        let mut shared = self.lock();
        let led = shared.led(partition)?;
        let load = led.load;
        let txn = led.owned_txn(id, producer_id, producer_epoch)?;
        if txn.transition_in_progress() {
            return Err(ConcurrentTransactions);
        }
        let done = EndStep::Done(txn.producer_id, txn.producer_epoch);
        match (txn.state, commit) {
            (Ongoing, _) => {
                let transit = txn
                    .prepare_end(commit, now)
                    .map_err(|e| e.response_error())?;
                let w = self.begin_write(partition, load, txn, transit, OnFailure::ClearPending)?;
                Ok(EndStep::Writing(w))
            }
            (CompleteCommit, true) | (CompleteAbort, false) => Ok(done),
            (PrepareCommit, true) | (PrepareAbort, false) => Err(ConcurrentTransactions),
            (Dead | PrepareEpochFence, _) => Err(UnknownServerError),
            (state, _) => {
                tracing::debug!(id, %state, commit, "EndTxn in a state that cannot end this way");
                Err(InvalidTxnState)
            }
        }
    }
}
