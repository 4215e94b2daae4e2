//! The one error type of the log crate.
//!
//! Variants carry what a caller needs to pick a Kafka error code; [`LogError::kind`] says whether
//! the caller may retry. Messages are for humans and are not part of the API.

use std::path::PathBuf;

/// Result alias used across the crate.
pub type Result<T> = std::result::Result<T, LogError>;

/// Errors of the log layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// A plain I/O error without a known file.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// An I/O error on a known file.
    #[error("I/O error on {path}: {source}")]
    IoAt {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A batch failed its length or CRC check (Kafka CORRUPT_MESSAGE).
    #[error("corrupt message: {0}")]
    CorruptMessage(String),
    /// A batch is well formed but not acceptable (Kafka INVALID_RECORD / UNSUPPORTED_FOR_MESSAGE_FORMAT).
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// Records of a batch refused one by one (Kafka's KIP-467 record errors): the whole batch
    /// is refused with INVALID_RECORD, and the Produce response (v8+) names each refused
    /// record by its index in the batch, so that the client fails those records with the
    /// error and the batch's others as refused on their account.
    #[error("{}", rejected_summary(.0))]
    RecordsRejected(Vec<RejectedRecord>),
    /// A CreateTime timestamp outside `message.timestamp.before.max.ms` /
    /// `message.timestamp.after.max.ms` of the broker's clock (Kafka INVALID_TIMESTAMP).
    #[error("invalid timestamp: {0}")]
    InvalidTimestamp(String),
    /// Records of a batch whose CreateTime timestamps are out of range, named one by one as
    /// Kafka's `LogValidator` names them (INVALID_TIMESTAMP with KIP-467 record errors).
    #[error("invalid timestamp: {}", rejected_summary(.0))]
    TimestampsRejected(Vec<RejectedRecord>),
    /// A batch is larger than `max.message.bytes` (Kafka MESSAGE_TOO_LARGE).
    #[error("batch of {size} bytes is larger than max.message.bytes {max}")]
    MessageTooLarge { size: usize, max: usize },
    /// The requested offset is outside `[log_start_offset, log_end_offset]`.
    #[error("offset {offset} out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    /// An idempotent producer skipped or reordered a sequence number.
    #[error("out of order sequence for producer {producer_id}: expected {expected}, got {got}")]
    OutOfOrderSequence {
        producer_id: i64,
        expected: i32,
        got: i32,
    },
    /// An idempotent producer used an epoch older than the one already seen (fenced).
    #[error("invalid producer epoch for producer {producer_id}: current {current}, got {got}")]
    InvalidProducerEpoch {
        producer_id: i64,
        current: i16,
        got: i16,
    },
    /// A producer inside a transaction sent a non-transactional batch (Kafka INVALID_TXN_STATE).
    #[error("invalid transaction state: {0}")]
    InvalidTxnState(String),
    /// A transaction marker came from a coordinator older than the one that wrote the producer's
    /// last marker (Kafka TRANSACTION_COORDINATOR_FENCED).
    #[error("transaction coordinator fenced for producer {producer_id}: current coordinator epoch {current}, got {got}")]
    TransactionCoordinatorFenced {
        producer_id: i64,
        current: i32,
        got: i32,
    },
    /// A state file (checkpoint, snapshot, index) is unreadable (Kafka KAFKA_STORAGE_ERROR).
    #[error("storage error: {0}")]
    KafkaStorage(String),
}

/// One record of a batch refused by [`LogError::RecordsRejected`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedRecord {
    /// The record's position in its batch, from 0.
    pub batch_index: i32,
    /// Why it was refused.
    pub message: String,
}

/// The partition-level message of a batch refused record by record: the count, and the first
/// three reasons (as Kafka's `LogValidator` words its summary).
fn rejected_summary(records: &[RejectedRecord]) -> String {
    let shown: Vec<String> = records
        .iter()
        .take(3)
        .map(|r| format!("record {}: {}", r.batch_index, r.message))
        .collect();
    format!(
        "{} record(s) of the batch refused, the first {}: [{}]",
        records.len(),
        shown.len(),
        shown.join("; ")
    )
}

/// Coarse classes of [`LogError`], for callers that only need to know what to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is wrong; retrying the same request fails again.
    InvalidRequest,
    /// The request may succeed later or on another replica (offsets moved, producer state).
    Retriable,
    /// The disk or a state file failed; the log dir should be considered offline.
    Storage,
    /// The log dir's file system is full (ENOSPC) or over quota (EDQUOT): nothing is broken,
    /// and the same write succeeds once space is freed, so the dir stays online.
    DiskFull,
}

impl LogError {
    /// Whether a retry can help; see [`ErrorKind`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            LogError::Io(e) | LogError::IoAt { source: e, .. } if is_disk_full(e) => {
                ErrorKind::DiskFull
            }
            LogError::Io(_) | LogError::IoAt { .. } | LogError::KafkaStorage(_) => {
                ErrorKind::Storage
            }
            LogError::CorruptMessage(_) => ErrorKind::Retriable,
            LogError::InvalidRecord(_)
            | LogError::RecordsRejected(_)
            | LogError::InvalidTimestamp(_)
            | LogError::TimestampsRejected(_)
            | LogError::MessageTooLarge { .. }
            | LogError::InvalidProducerEpoch { .. }
            | LogError::InvalidTxnState(_)
            | LogError::TransactionCoordinatorFenced { .. } => ErrorKind::InvalidRequest,
            LogError::OffsetOutOfRange { .. } | LogError::OutOfOrderSequence { .. } => {
                ErrorKind::Retriable
            }
        }
    }

    /// Whether this is a full (or over-quota) file system rather than a failed one.
    pub fn is_disk_full(&self) -> bool {
        self.kind() == ErrorKind::DiskFull
    }

    pub(crate) fn io_at(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> LogError {
        let path = path.into();
        move |source| LogError::IoAt { path, source }
    }
}

pub use ferry_common::is_disk_full;

#[cfg(test)]
mod tests {
    use super::*;

    const ENOSPC: i32 = 28;
    const EDQUOT: i32 = 122;

    #[test]
    fn a_full_disk_is_not_a_failed_one() {
        let full = LogError::IoAt {
            path: "/x".into(),
            source: std::io::Error::from_raw_os_error(ENOSPC),
        };
        assert_eq!(full.kind(), ErrorKind::DiskFull);
        assert!(LogError::Io(std::io::Error::from_raw_os_error(EDQUOT)).is_disk_full());
        let failed = LogError::Io(std::io::Error::from_raw_os_error(5));
        assert_eq!(failed.kind(), ErrorKind::Storage);
    }
}
