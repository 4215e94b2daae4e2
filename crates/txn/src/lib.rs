//! Kafka's transaction coordinator for ferry (exactly-once: KIP-98, with KIP-360's producer
//! recovery, KIP-588's PRODUCER_FENCED and KIP-890's verify-only AddPartitionsToTxn): the
//! InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and
//! ListTransactions APIs, the state machine of each transactional id, and their durable form in
//! the internal topic `__transaction_state`.
//!
//! The crate owns transaction state and rules; it does not own storage or sockets. The broker
//! gives it a [`TxnStateStore`] (appends to and reads from the `__transaction_state`
//! partitions), a [`MarkerWriter`] (WriteTxnMarkers to partition leaders), a
//! [`ProducerIdSource`] and a [`PartitionCatalog`], tells it which partitions it leads
//! ([`TransactionCoordinator::on_election`], [`TransactionCoordinator::on_resignation`]), and
//! calls [`TransactionCoordinator::tick`] about once a second. Invariants:
//! - a state change is answered only after its record is durable (acks=all through the store);
//! - each transactional id has at most one state change in flight; others are answered
//!   CONCURRENT_TRANSACTIONS;
//! - a transaction in PrepareCommit/PrepareAbort has its markers written to every partition
//!   (or learns the partition is gone) before its Complete record is written; replaying the log
//!   after a failover resumes that work;
//! - time comes from the injected clock, so timers are driven by tests.
//!
//! Transactions v2 (KIP-890 part 2: an epoch bump at every EndTxn, EndTxn v5) is not
//! implemented: the broker should not finalize `transaction.version` 2.

// Tests may read the real clock (clippy.toml's clock seam binds the code under test).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod add;
mod admin;
mod completion;
mod config;
mod coordinator;
mod end;
mod init;
mod metadata;
mod seams;
mod state;
mod timers;
pub mod txn_log;

pub use add::CONSUMER_OFFSETS_TOPIC;
pub use config::TxnConfig;
pub use coordinator::{TransactionCoordinator, TxnSeams};
pub use metadata::{
    is_epoch_exhausted, TransactionMetadata, TransitionError, TxnTransit, NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
};
pub use seams::{
    append_error, Appended, Durable, MarkerOutcome, MarkerWriter, MarkersWritten, PartitionCatalog,
    ProducerIdSource, StoreError, StoredRecord, TxnMarkers, TxnResult, TxnStateStore,
};
pub use state::TransactionState;
pub use txn_log::TRANSACTION_STATE_TOPIC;

#[cfg(test)]
mod fakes;
#[cfg(test)]
mod tests;
