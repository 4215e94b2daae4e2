//! The crate's error type. [`ClusterError::kind`] tells a caller whether trying again can help.

use crate::image::ImageError;

/// Coarse classes of failure, for deciding what to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Try again, possibly elsewhere (no leader yet, leader moved, peer unreachable).
    Retriable,
    /// The request itself is wrong for the current image; retrying the same record fails again.
    Invalid,
    /// Local storage or the Raft core failed; this controller cannot go on.
    Fatal,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// This node is not the active controller and could not forward the request.
    #[error("not the controller; leader hint: {leader:?}")]
    NotController {
        leader: Option<u64>,
        leader_addr: Option<String>,
    },
    /// The record was committed to the log but rejected by the image's validation.
    #[error("record rejected: {0}")]
    Rejected(#[from] ImageError),
    #[error("network: {0}")]
    Network(String),
    #[error("storage {path}: {detail}")]
    Storage { path: String, detail: String },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("raft: {0}")]
    Raft(String),
}

impl ClusterError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClusterError::NotController { .. } | ClusterError::Network(_) => ErrorKind::Retriable,
            ClusterError::Rejected(_) | ClusterError::Config(_) => ErrorKind::Invalid,
            ClusterError::Storage { .. } | ClusterError::Raft(_) => ErrorKind::Fatal,
        }
    }
}
