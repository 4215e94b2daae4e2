//! Errors of the tier.

use ferry_objstore::ObjStoreError;

pub type Result<T> = std::result::Result<T, TierError>;

#[derive(Debug, thiserror::Error)]
pub enum TierError {
    /// The object store failed (see [`ObjStoreError::is_retriable`]).
    #[error(transparent)]
    Store(#[from] ObjStoreError),
    /// A local segment file could not be read for a copy.
    #[error("reading {path} for the tier: {source}")]
    LocalRead {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A metadata record that does not decode or does not make sense.
    #[error("bad tier metadata {what}: {reason}")]
    BadMetadata { what: &'static str, reason: String },
    /// Something we were about to write would not decode.
    #[error("invalid tier metadata: {0}")]
    Invalid(String),
    /// A metadata record could not be published (the sink's own error, as text).
    #[error("publishing tier metadata: {0}")]
    Publish(String),
    /// Bytes read from the tier are not whole batches where the metadata says they are.
    #[error("segment {segment} in the tier: {reason}")]
    BadSegment { segment: uuid::Uuid, reason: String },
}
