//! The crate's one error type. Callers decide with [`ObjStoreError::is_retriable`] (or the coarse
//! [`ObjStoreError::kind`]) whether trying again can help; messages are for humans, not matching.

use std::ops::Range;

/// Boxed source error from a backend (I/O, SDK).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

pub type Result<T, E = ObjStoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObjStoreError {
    /// The key does not name an object.
    #[error("object not found: {key}")]
    NotFound { key: String },
    /// A conditional create found the key already taken. Backends report it as an error;
    /// [`ObjectStore::put_if_absent`](crate::ObjectStore::put_if_absent) turns it into
    /// [`PutOutcome::AlreadyExists`](crate::PutOutcome::AlreadyExists).
    #[error("object already exists: {key}")]
    AlreadyExists { key: String },
    /// The store could not be reached or failed on its side (connect errors, 5xx). Retriable.
    #[error("object store unavailable during {op}: {message}")]
    Unavailable {
        op: &'static str,
        message: String,
        #[source]
        source: Option<BoxError>,
    },
    /// The request (or the whole operation, in the retrier) ran out of time. Retriable.
    /// The write may or may not have happened.
    #[error("object store {op} timed out: {message}")]
    Timeout { op: &'static str, message: String },
    /// The store asked us to slow down (S3 503 SlowDown, 429). Retriable, after a backoff.
    #[error("object store throttled {op}: {message}")]
    Throttled { op: &'static str, message: String },
    /// The requested byte range is not inside the object (or is reversed).
    #[error("invalid range {start}..{end} for {key} (object size {size:?})")]
    InvalidRange {
        key: String,
        start: u64,
        end: u64,
        size: Option<u64>,
    },
    /// The key is not a valid object key (see [`crate::keys::validate_key`]).
    #[error("invalid object key {key:?}: {reason}")]
    InvalidKey { key: String, reason: &'static str },
    /// Anything else: permissions, bad configuration, local I/O errors. Not retriable.
    #[error("object store {op} failed: {message}")]
    Other {
        op: &'static str,
        message: String,
        #[source]
        source: Option<BoxError>,
    },
}

/// Coarse classes of [`ObjStoreError`], the part of an error callers are meant to act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    NotFound,
    AlreadyExists,
    /// Unavailable, Timeout, Throttled: the same call may succeed later.
    Transient,
    /// A caller mistake (bad key, bad range): retrying the same call cannot help.
    Invalid,
    /// Everything else; retrying will not help without someone fixing something.
    Internal,
}

impl ObjStoreError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::NotFound { .. } => ErrorKind::NotFound,
            Self::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            Self::Unavailable { .. } | Self::Timeout { .. } | Self::Throttled { .. } => {
                ErrorKind::Transient
            }
            Self::InvalidRange { .. } | Self::InvalidKey { .. } => ErrorKind::Invalid,
            Self::Other { .. } => ErrorKind::Internal,
        }
    }

    /// Whether the same call may succeed if tried again (Unavailable, Timeout, Throttled).
    pub fn is_retriable(&self) -> bool {
        self.kind() == ErrorKind::Transient
    }

    /// Whether a write that failed with this error may nevertheless have been applied: the
    /// request may have reached the store before the failure (timeouts, dropped connections).
    pub fn is_ambiguous(&self) -> bool {
        matches!(self, Self::Timeout { .. } | Self::Unavailable { .. })
    }

    /// A stable, low-cardinality name for metrics (`outcome` label).
    pub fn label(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "not_found",
            Self::AlreadyExists { .. } => "already_exists",
            Self::Unavailable { .. } => "unavailable",
            Self::Timeout { .. } => "timeout",
            Self::Throttled { .. } => "throttled",
            Self::InvalidRange { .. } => "invalid_range",
            Self::InvalidKey { .. } => "invalid_key",
            Self::Other { .. } => "error",
        }
    }

    pub(crate) fn not_found(key: &str) -> Self {
        Self::NotFound {
            key: key.to_owned(),
        }
    }

    pub(crate) fn invalid_range(key: &str, range: &Range<u64>, size: Option<u64>) -> Self {
        Self::InvalidRange {
            key: key.to_owned(),
            start: range.start,
            end: range.end,
            size,
        }
    }

    pub(crate) fn other(op: &'static str, message: impl Into<String>) -> Self {
        Self::Other {
            op,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn io(op: &'static str, key: &str, err: std::io::Error) -> Self {
        if err.kind() == std::io::ErrorKind::NotFound {
            return Self::not_found(key);
        }
        Self::Other {
            op,
            message: format!("{key}: {err}"),
            source: Some(Box::new(err)),
        }
    }
}
